//! A new run's first steps made ready are written with the run's next
//! change, not by a write of their own (`actor/write.rs`, `Dirty`): what
//! the store holds meanwhile, and the bound on how long it waits.

use super::*;
use crate::scheduler::queue::QueueConfig;

fn stored(h: &Harness, id: &str) -> RunRecord {
    h.store.get_run(id).unwrap().expect("stored")
}

/// A scheduler on `store` with one slot (and a queue head of `head`), held
/// by a blocked run of `hold`; task `t1` (`ok`) to queue behind it. The
/// holder's run.
async fn one_slot_held(store: Arc<MemoryStore>, head: usize) -> (Harness, RunRecord) {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        queue_head: head,
        ..test_config()
    };
    let h = Harness::start_with(store, config).await;
    h.put_task("name: hold\nplugin: block@1.0.0\n").await;
    h.put_task("name: t1\nplugin: ok@1.0.0\n").await;
    let holder = h.trigger("hold", serde_json::json!({})).await;
    h.poll(&holder.id, Patience::Paused, |r| {
        r.status == RunStatus::Running
    })
    .await;
    (h, holder)
}

#[tokio::test(start_paused = true)]
async fn a_one_step_run_is_written_by_its_insert_and_once_more_when_it_ends() {
    let h = Harness::start().await;
    h.put_task("name: t1\nplugin: ok@1.0.0\n").await;
    let run = h.trigger("t1", serde_json::json!({})).await;
    let inserted = run.revision;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    // The step made ready went with the attempt's start and end: one write.
    assert_eq!(run.revision, inserted + 1, "{run:?}");
    // Nothing of it is lost: the step's `ready` is stored, before its start.
    let events = h.store.events(&run.id).unwrap();
    let path: Vec<_> = events
        .iter()
        .map(|e| (e.step.as_deref(), e.to.as_str()))
        .collect();
    assert_eq!(
        path,
        [
            (None, "queued"),
            (Some("t1"), "queued"),
            (None, "running"),
            (Some("t1"), "running"),
            (Some("t1"), "succeeded"),
            (None, "succeeded"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_left_waiting_has_its_ready_steps_written_after_defer_max() {
    // One slot, held by a blocked attempt: the second run waits queued.
    let (h, holder) = one_slot_held(Arc::new(MemoryStore::new()), test_config().queue_head).await;
    let waiting = h.trigger("t1", serde_json::json!({})).await;
    let inserted = waiting.revision;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Deferred: the store still shows what the insert wrote.
    let now = stored(&h, &waiting.id);
    assert_eq!(now.revision, inserted);
    assert_eq!(now.steps[0].status, StepStatus::Pending);
    // Written alone once it is DEFER_MAX old.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let now = stored(&h, &waiting.id);
    assert_eq!(now.revision, inserted + 1);
    assert_eq!(now.steps[0].status, StepStatus::Queued);
    assert_eq!(now.status, RunStatus::Queued);
    // And the run goes on as usual once the slot is free.
    h.scheduler.cancel(&run_id(&holder), "test").await.unwrap();
    let done = h.wait_terminal(&waiting.id).await;
    assert_eq!(done.status, RunStatus::Succeeded);
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_ready_steps_were_never_written_runs_after_a_restart() {
    let store = Arc::new(MemoryStore::new());
    let (h, _holder) = one_slot_held(store.clone(), test_config().queue_head).await;
    let waiting = h.trigger("t1", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(stored(&h, &waiting.id).steps[0].status, StepStatus::Pending);
    // "Crash": stop the actor, then put back what the store held before
    // (a clean stop writes the deferred change; a SIGKILL does not).
    let before = stored(&h, &waiting.id);
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut rec = store.get_run(&waiting.id).unwrap().unwrap();
    assert_eq!(
        rec.steps[0].status,
        StepStatus::Queued,
        "a clean stop writes it"
    );
    rec.steps[0] = before.steps[0].clone();
    store.update_run(&mut rec, &[]).unwrap();
    let h = restart_at(store, t0() + chrono::Duration::seconds(5)).await;
    let done = h.wait_terminal(&waiting.id).await;
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.steps[0].attempts.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_parked_run_taken_up_has_its_ready_steps_deferred_too() {
    // One slot, held; a head of two queued runs, the rest parked.
    let (h, holder) = one_slot_held(Arc::new(MemoryStore::new()), 2).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(h.trigger("t1", serde_json::json!({})).await);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let parked = h.scheduler.snapshot().await.unwrap().parked_runs;
    assert!(parked >= 1, "none parked");
    // A run of the head cancelled: a parked one is taken up in its place,
    // and waits for the slot.
    h.scheduler.cancel(&run_id(&runs[0]), "test").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        h.scheduler.snapshot().await.unwrap().parked_runs,
        parked - 1,
        "one taken up"
    );
    // No waiting run was written since its insert: the taken-up one's ready
    // steps are deferred like the new ones'.
    for run in &runs[1..] {
        let now = stored(&h, &run.id);
        assert_eq!(now.revision, run.revision, "{}", run.id);
        assert_eq!(now.steps[0].status, StepStatus::Pending);
    }
    h.scheduler.cancel(&run_id(&holder), "test").await.unwrap();
    for run in &runs[1..] {
        let done = h.wait_terminal(&run.id).await;
        assert_eq!(done.status, RunStatus::Succeeded);
    }
}
