//! The queue's head: at most `queue_head` queued runs of a tenant are held in
//! memory; the rest wait in the store's queue index (parked) and are taken up
//! in dispatch order as the head drains, across restarts, none lost, none
//! run twice.

use super::*;
use crate::store::memory::ReadGate;

fn headed(head: usize) -> SchedulerConfig {
    SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        queue_head: head,
        ..test_config()
    }
}

async fn snapshot(h: &Harness) -> Snapshot {
    h.scheduler.snapshot().await.unwrap()
}

async fn trigger_with(h: &Harness, task: &str, n: u32, priority: Option<u8>) -> RunRecord {
    h.scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: task.into(),
            input: Some(serde_json::json!({ "ms": 100, "n": n })),
            priority,
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .0
}

#[tokio::test(start_paused = true)]
async fn a_long_queue_keeps_a_bounded_head_in_memory_and_drains_in_order() {
    let h = Harness::start_with(Arc::new(MemoryStore::new()), headed(10)).await;
    h.put_task("name: q\nplugin: slow@1.0.0\n").await;
    let mut ids = Vec::new();
    for n in 0..100 {
        ids.push(trigger_with(&h, "q", n, None).await.id);
        let s = snapshot(&h).await;
        assert!(
            s.active_runs <= 12,
            "after {n}: {} runs in memory",
            s.active_runs
        );
    }
    let s = snapshot(&h).await;
    assert!(s.parked_runs >= 85, "parked {}", s.parked_runs);
    assert_eq!(
        s.tenants[0].queued_runs + 1,
        100,
        "parked ones count as queued"
    );
    let mut most = 0;
    for id in &ids {
        let run = h.wait_terminal(id).await;
        assert_eq!(run.status, RunStatus::Succeeded);
        most = most.max(snapshot(&h).await.active_runs);
    }
    assert!(most <= 12, "at most the head and the running one: {most}");
    let runs: Vec<RunRecord> = ids
        .iter()
        .map(|id| h.store.get_run(id).unwrap().unwrap())
        .collect();
    let starts: Vec<i64> = runs.iter().map(|r| r.started_at.unwrap()).collect();
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "in creation order: {starts:?}"
    );
    assert_eq!(h.runner.calls.lock().unwrap().len(), 100, "each ran once");
    assert_eq!(snapshot(&h).await.parked_runs, 0);
}

/// A run's queue entry stays in the store until its final write lands; a
/// refill while that write is under way must not take the finished run up
/// again (it ran twice, and the parked count fell short, so the last parked
/// runs were never taken up: the bulk test on a loaded CI machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refill_while_runs_are_being_written_takes_none_up_twice() {
    let store = Arc::new(MemoryStore::new().with_write_delay(Duration::from_millis(15)));
    let h = Harness::start_with(store, headed(10)).await;
    h.put_task("name: q\nplugin: ok@1.0.0\n").await;
    let requests = (0..300)
        .map(|_| TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            actor: "test".into(),
            ..Default::default()
        })
        .collect();
    let ids: Vec<RunId> = h
        .scheduler
        .trigger_batch(requests)
        .await
        .unwrap()
        .into_iter()
        .map(|answer| answer.unwrap().0.id)
        .collect();
    for id in &ids {
        let run = h.poll(id, Patience::Real, |r| r.status.is_terminal()).await;
        assert_eq!(run.status, RunStatus::Succeeded);
    }
    let mut calls: Vec<String> = h
        .runner
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.0.clone())
        .collect();
    calls.sort();
    let before = calls.len();
    calls.dedup();
    assert_eq!(before, calls.len(), "a run ran twice");
    assert_eq!(snapshot(&h).await.parked_runs, 0);
}

/// A refill reads its runs off the actor; a parked run cancelled while
/// that read is under way (taken up, cancelled, written) must not come back
/// from the read's stale copy and run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_while_its_head_read_is_under_way_never_runs() {
    let gate = Arc::new(ReadGate::default());
    let store = Arc::new(MemoryStore::new().with_read_gate(gate.clone()));
    let h = Harness::start_with(store, headed(2)).await;
    h.put_task("name: q\nplugin: slow@1.0.0\n").await;
    let requests = (0..10)
        .map(|n| TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            input: Some(serde_json::json!({ "ms": 200, "n": n })),
            actor: "test".into(),
            ..Default::default()
        })
        .collect();
    let ids: Vec<RunId> = h
        .scheduler
        .trigger_batch(requests)
        .await
        .unwrap()
        .into_iter()
        .map(|answer| answer.unwrap().0.id)
        .collect();
    // Runs 0-2 are in memory (the head and one), 3-9 parked; the first
    // refill reads run 3 first.
    let parked = ids[3].clone();
    gate.hold(&parked);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !gate.entered() {
        assert!(std::time::Instant::now() < deadline, "no refill read run 3");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let run = h.scheduler.cancel(&parked, "test").await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(run.started_at, None);
    h.poll(&parked, Patience::Real, |r| {
        r.status == RunStatus::Cancelled
    })
    .await;
    gate.open();
    for id in &ids {
        h.poll(id, Patience::Real, |r| r.status.is_terminal()).await;
    }
    let calls: Vec<String> = h
        .runner
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.0.clone())
        .collect();
    assert!(
        !calls.iter().any(|c| c == parked.as_str()),
        "the cancelled run ran"
    );
    assert_eq!(calls.len(), 9, "{calls:?}");
    let stored = h.store.get_run(&parked).unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Cancelled);
    assert_eq!(snapshot(&h).await.parked_runs, 0);
}

#[tokio::test(start_paused = true)]
async fn parked_runs_come_back_in_dispatch_order() {
    let h = Harness::start_with(Arc::new(MemoryStore::new()), headed(5)).await;
    h.put_task("name: q\nplugin: slow@1.0.0\n").await;
    let mut low = Vec::new();
    for n in 0..40 {
        low.push(trigger_with(&h, "q", n, Some(1)).await.id);
    }
    // Parked behind a full head, but 50 s of aging ahead of the low ones.
    let mut high = Vec::new();
    for n in 0..5 {
        high.push(trigger_with(&h, "q", 100 + n, Some(6)).await.id);
    }
    for id in low.iter().chain(&high) {
        h.wait_terminal(id).await;
    }
    let started = |id: &RunId| h.store.get_run(id).unwrap().unwrap().started_at.unwrap();
    let last_high = high.iter().map(started).max().unwrap();
    let low_after = low.iter().filter(|id| started(id) > last_high).count();
    assert!(
        low_after >= 25,
        "the priority-6 runs went ahead of most priority-1 ones: only {low_after} after them"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_parked_run_is_cancelled_and_never_runs() {
    let h = Harness::start_with(Arc::new(MemoryStore::new()), headed(3)).await;
    h.put_task("name: q\nplugin: slow@1.0.0\n").await;
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(trigger_with(&h, "q", n, None).await.id);
    }
    let last = ids.last().unwrap().clone();
    let cancelled = h.scheduler.cancel(&last.clone(), "test").await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    for id in &ids {
        h.wait_terminal(id).await;
    }
    assert_eq!(
        h.store.get_run(&last).unwrap().unwrap().status,
        RunStatus::Cancelled
    );
    let calls = h.runner.calls.lock().unwrap();
    assert_eq!(calls.len(), 19);
    assert!(calls.iter().all(|(run, _, _)| *run != last));
}

#[tokio::test(start_paused = true)]
async fn a_restart_reads_the_head_only_and_loses_no_parked_run() {
    restart_with_heads(5, 5).await;
}

/// A head larger before the restart than after: runs whose steps were
/// already queued are parked by the restart, and must still run.
#[tokio::test(start_paused = true)]
async fn a_restart_with_a_smaller_head_parks_runs_with_queued_steps_and_runs_them() {
    restart_with_heads(1_000, 5).await;
}

async fn restart_with_heads(before: usize, after: usize) {
    let store = Arc::new(MemoryStore::new());
    let mut ids = Vec::new();
    {
        let h = Harness::start_with(store.clone(), headed(before)).await;
        h.put_task("name: q\nplugin: slow@1.0.0\n").await;
        for n in 0..60 {
            ids.push(trigger_with(&h, "q", n, None).await.id);
        }
        tokio::time::sleep(Duration::from_millis(450)).await;
        h.shutdown.cancel();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let h = Harness::start_with(store, headed(after)).await;
    let s = snapshot(&h).await;
    assert!(
        s.active_runs <= 6,
        "the running one and the head: {}",
        s.active_runs
    );
    assert!(s.parked_runs >= 50, "parked {}", s.parked_runs);
    for id in &ids {
        let run = h.wait_terminal(id).await;
        assert_eq!(run.status, RunStatus::Succeeded, "{id}");
    }
    // Each ran once after the restart or before it (a run cut by the stop
    // runs again: at-least-once), never twice otherwise.
    let calls = h.runner.calls.lock().unwrap();
    for id in &ids {
        let n = calls.iter().filter(|(run, _, _)| run == id).count();
        assert!(n <= 1, "{id} ran {n} times after the restart");
    }
}
