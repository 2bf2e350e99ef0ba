//! A store that refuses writes (the `Faulty` wrapper over the memory
//! store, guarded as `ax serve` guards sled): triggers are refused and
//! store nothing, fires are held and then follow `catch_up`, no attempt
//! starts, and everything acknowledged finishes once writes succeed.

use super::*;
use crate::store::faults::Faulty;
use crate::store::guard::Guarded;

/// A scheduler on a memory store whose writes fail while `fail(true)`.
struct Faulted {
    memory: Arc<MemoryStore>,
    faulty: Arc<Faulty>,
    store: Arc<dyn Store>,
    runner: Arc<FakeRunner>,
    clock: Arc<TokioClock>,
    scheduler: Scheduler,
    _shutdown: tokio_util::sync::DropGuard,
}

impl Faulted {
    async fn start() -> Self {
        // The plugins are put in place by a harness on the bare memory store.
        let memory = Arc::new(MemoryStore::new());
        let seed = Harness::start_with(memory.clone(), test_config()).await;
        seed.shutdown.cancel();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let faulty = Arc::new(Faulty::wrap(memory.clone()));
        let store: Arc<dyn Store> = Arc::new(Guarded::guard(faulty.clone(), None));
        let runner = Arc::new(FakeRunner::default());
        let clock = Arc::new(TokioClock::starting_at(t0()));
        let shutdown = CancellationToken::new();
        let (scheduler, _) = Scheduler::start(
            store.clone(),
            runner.clone(),
            clock.clone(),
            test_config(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        Self {
            memory,
            faulty,
            store,
            runner,
            clock,
            scheduler,
            _shutdown: shutdown.drop_guard(),
        }
    }

    fn fail(&self, on: bool) {
        self.faulty.layer().fail(on);
    }

    async fn put_task(&self, yaml: &str) {
        let now = self.clock.now();
        self.scheduler
            .put_task(task_record("t", yaml, now))
            .await
            .unwrap();
    }

    async fn trigger(&self, task: &str) -> Result<(RunRecord, bool)> {
        self.scheduler
            .trigger(TriggerRequest {
                tenant: "t".into(),
                task: task.into(),
                input: Some(serde_json::json!({"ms": 1000})),
                actor: "test".into(),
                ..Default::default()
            })
            .await
    }

    /// The stored runs of `task`, oldest first.
    fn runs(&self, task: &str) -> Vec<RunRecord> {
        stored_runs(&*self.memory, "t", task)
    }

    /// Minutes after `t0` of the stored runs of `task`.
    fn minutes(&self, task: &str) -> Vec<i64> {
        let mut minutes: Vec<i64> = self
            .runs(task)
            .iter()
            .map(|r| (r.scheduled_for - t0().timestamp_millis()) / 60_000)
            .collect();
        minutes.sort();
        minutes
    }

    /// Waits (virtual time) until the stored run `id` is terminal.
    async fn wait_terminal(&self, id: &str) -> RunRecord {
        for _ in 0..10_000 {
            let run = self.memory.get_run(id).unwrap().unwrap();
            if run.status.is_terminal() {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {id} is not terminal: {:?}", self.memory.get_run(id));
    }
}

#[tokio::test(start_paused = true)]
async fn a_trigger_while_writes_fail_is_refused_and_stores_nothing() {
    let f = Faulted::start().await;
    f.put_task("name: m\nplugin: ok@1.0.0\n").await;
    f.fail(true);
    let refused = f.trigger("m").await.expect_err("no run can be stored");
    assert!(
        matches!(&refused, Error::Store(e) if e.is_unavailable()),
        "{refused:?}"
    );
    assert!(f.runs("m").is_empty(), "{:?}", f.runs("m"));
    assert!(!f.store.writable());
    assert!(f.faulty.layer().refused() > 0);
    // Writes succeed again: the next trigger is stored and runs.
    f.fail(false);
    let (run, created) = f.trigger("m").await.unwrap();
    assert!(created);
    let done = f.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded);
    assert!(f.store.writable());
}

/// A task firing every minute whose store refuses writes from 0:30 to
/// 5:30: the minutes of the runs stored once it writes again (at 6:30).
async fn fires_through_a_fault(catch_up: &str) -> (Vec<i64>, Vec<i64>) {
    let f = Faulted::start().await;
    f.put_task(&format!(
        "name: c\ntrigger: {{ every: 1m }}\ncatch_up: {catch_up}\noverlap: allow\nplugin: ok@1.0.0\n"
    ))
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    f.fail(true);
    tokio::time::sleep(Duration::from_secs(300)).await;
    let during = f.minutes("c");
    f.fail(false);
    tokio::time::sleep(Duration::from_secs(60)).await;
    for run in f.runs("c") {
        assert_eq!(f.wait_terminal(&run.id).await.status, RunStatus::Succeeded);
    }
    (during, f.minutes("c"))
}

#[tokio::test(start_paused = true)]
async fn fires_missed_while_writes_fail_all_run_once_they_succeed_with_catch_up_all() {
    let (during, after) = fires_through_a_fault("all").await;
    // Nothing was fired (stored) while the store refused writes.
    assert!(during.is_empty(), "{during:?}");
    // Every missed minute (1 to 5), then 6 on time.
    assert_eq!(after, [1, 2, 3, 4, 5, 6]);
}

#[tokio::test(start_paused = true)]
async fn fires_missed_while_writes_fail_are_skipped_with_catch_up_none() {
    let (during, after) = fires_through_a_fault("none").await;
    assert!(during.is_empty(), "{during:?}");
    // Minutes 1 to 4 are missed and skipped; 5 is 30 s late, within the
    // misfire grace, so not missed (the rule a restart follows too).
    assert_eq!(after, [5, 6]);
}

#[tokio::test(start_paused = true)]
async fn no_attempt_starts_while_writes_fail_and_an_acknowledged_run_finishes_after() {
    let f = Faulted::start().await;
    f.put_task(
        "name: d\nsteps:\n  - name: one\n    plugin: slow@1.0.0\n    input: { ms: 1000 }\n  - name: two\n    needs: [one]\n    plugin: ok@1.0.0\n",
    )
    .await;
    let (run, _) = f.trigger("d").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    f.fail(true);
    // The scheduler learns of the fault from its first refused write (here
    // a trigger's; under load, from its next write-behind).
    assert!(f.trigger("d").await.is_err());
    // `one` ends at 1 s; `two` would start then, but its start (or result)
    // could not be stored.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let started: Vec<String> = f
        .runner
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(_, step, _)| step.clone())
        .collect();
    assert_eq!(started, ["one"], "an attempt started while writes failed");
    let stored = f.memory.get_run(&run.id).unwrap().unwrap();
    assert!(!stored.status.is_terminal(), "{stored:?}");
    f.fail(false);
    let done = f.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert!(done.steps.iter().all(|s| s.status == StepStatus::Succeeded));
    assert_eq!(f.runner.calls.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_after_run_refused_while_writes_fail_is_started_once_they_succeed() {
    let f = Faulted::start().await;
    f.put_task("name: up\nplugin: slow@1.0.0\ninput: { ms: 1000 }\n")
        .await;
    f.put_task("name: down\ntrigger: { after: [up], on: success }\nplugin: ok@1.0.0\n")
        .await;
    let (run, _) = f.trigger("up").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    f.fail(true);
    assert!(f.trigger("up").await.is_err());
    // `up` ends at 1 s, in memory: its `after` run is refused with the rest.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(f.runs("down").is_empty());
    f.fail(false);
    let done = f.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    let downs = f.runs("down");
    assert_eq!(downs.len(), 1, "{downs:?}");
    assert_eq!(
        downs[0].idempotency_key.as_deref(),
        Some(format!("after:{}", run.id).as_str())
    );
    let down = f.wait_terminal(&downs[0].id).await;
    assert_eq!(down.status, RunStatus::Succeeded, "{down:?}");
}

/// A run whose stored revision moved under this host (as when one of its
/// jobs was lost: memory is then ahead of the store) is written over the
/// stored revision, once the write is refused as stale, and finishes.
#[tokio::test(start_paused = true)]
async fn a_run_whose_stored_revision_moved_is_written_over_and_finishes() {
    let f = Faulted::start().await;
    f.put_task(
        "name: d\nsteps:\n  - name: one\n    plugin: slow@1.0.0\n    input: { ms: 1000 }\n  - name: two\n    needs: [one]\n    plugin: ok@1.0.0\n",
    )
    .await;
    let (run, _) = f.trigger("d").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut moved = f.memory.get_run(&run.id).unwrap().unwrap();
    let before = moved.revision;
    // Two writes ahead: this host's next writes are all stale.
    f.memory.update_run(&mut moved, &[]).unwrap();
    f.memory.update_run(&mut moved, &[]).unwrap();
    let done = f.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert!(done.steps.iter().all(|s| s.status == StepStatus::Succeeded));
    assert!(
        done.revision > before + 2,
        "{} after {before}",
        done.revision
    );
}

/// A step that becomes ready while the store cannot be read (a database
/// away: its plugin cannot be looked up) keeps its place and starts once
/// the store answers again; it was dropped from the queue, its run left
/// `queued` for good.
#[tokio::test(start_paused = true)]
async fn a_step_ready_while_reads_fail_starts_once_they_succeed() {
    let f = Faulted::start().await;
    f.put_task(
        "name: d\nsteps:\n  - name: one\n    plugin: slow@1.0.0\n    input: { ms: 1000 }\n  - name: two\n    needs: [one]\n    plugin: ok@1.0.0\n",
    )
    .await;
    let (run, _) = f.trigger("d").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    f.faulty.layer().fail_reads(true);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stored = f.memory.get_run(&run.id).unwrap().unwrap();
    assert_eq!(stored.steps[0].status, StepStatus::Succeeded, "{stored:?}");
    assert_eq!(stored.steps[1].status, StepStatus::Queued, "{stored:?}");
    assert!(stored.steps[1].attempts.is_empty(), "{stored:?}");
    f.faulty.layer().fail_reads(false);
    let done = f.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(done.steps[1].attempts.len(), 1, "{done:?}");
}
