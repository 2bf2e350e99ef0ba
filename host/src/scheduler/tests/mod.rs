//! Scheduler tests on the in-memory store, a scripted runner and tokio's
//! paused clock: firing, catch-up, overlap, retries, dead letters, recovery
//! and bounds, without real sleeps or wasm.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::model::{
    AttemptReport, ErrorKind, Outcome, PluginRecord, RECORD_FORMAT, RunStatus, StepStatus,
    TaskRecord,
};
use crate::schedule::Trigger;
use crate::store::memory::MemoryStore;
use crate::store::{RunQuery, Store};
use crate::task::{self, TaskSpec};

/// Plays plugins by digest: `ok` echoes, `fail` fails retryably, `fatal`
/// fails fatally, `slow` takes `input.ms` milliseconds (timing out at its
/// limit, like a plugin blocked in a host call), `block` waits for cancel.
/// `slow` and `block` report their (paused-clock) wall time.
#[derive(Default)]
struct FakeRunner {
    calls: Mutex<Vec<(String, String, u32)>>,
}

fn report(
    outcome: Outcome,
    output: Option<serde_json::Value>,
    error: Option<&str>,
    kind: Option<ErrorKind>,
) -> AttemptReport {
    AttemptReport {
        outcome,
        output,
        error: error.map(str::to_string),
        error_kind: kind,
        fuel_consumed: 100,
        memory_peak_bytes: 1 << 16,
        duration_ms: 1.0,
        stdout: String::new(),
        stderr: String::new(),
        logs: Vec::new(),
        progress: None,
    }
}

impl Runner for FakeRunner {
    fn run(&self, req: AttemptRequest) -> RunFuture {
        self.calls.lock().unwrap().push((
            req.ctx.run_id.clone(),
            req.ctx.step.clone(),
            req.ctx.attempt,
        ));
        Box::pin(async move {
            let input: serde_json::Value = serde_json::from_str(&req.input).unwrap();
            if req.limits.fuel < 100 {
                let mut r = report(Outcome::FuelExhausted, None, Some("out of fuel"), None);
                r.fuel_consumed = req.limits.fuel;
                return Ok(r);
            }
            Ok(match req.digest.as_str() {
                "ok" => report(
                    Outcome::Succeeded,
                    Some(serde_json::json!({ "echo": input })),
                    None,
                    None,
                ),
                "fail" => report(
                    Outcome::Failed,
                    None,
                    Some("busy"),
                    Some(ErrorKind::Retryable),
                ),
                "fatal" => report(
                    Outcome::Failed,
                    None,
                    Some("bad input"),
                    Some(ErrorKind::Fatal),
                ),
                "slow" => {
                    let ms = input["ms"].as_u64().unwrap_or(1000);
                    let started = tokio::time::Instant::now();
                    let mut r = tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(ms)) => report(Outcome::Succeeded, Some(serde_json::json!({})), None, None),
                        _ = tokio::time::sleep(req.limits.timeout) => report(Outcome::TimedOut, None, Some("timed out"), None),
                        _ = req.cancel.cancelled() => report(Outcome::Cancelled, None, Some("cancelled"), None),
                    };
                    r.duration_ms = started.elapsed().as_secs_f64() * 1e3;
                    r
                }
                "block" => {
                    let started = tokio::time::Instant::now();
                    req.cancel.cancelled().await;
                    let mut r = report(Outcome::Cancelled, None, Some("cancelled"), None);
                    r.duration_ms = started.elapsed().as_secs_f64() * 1e3;
                    r
                }
                other => {
                    return Err(HostFault::MissingBlob {
                        digest: other.into(),
                    });
                }
            })
        })
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap()
}

struct Harness {
    store: Arc<MemoryStore>,
    runner: Arc<FakeRunner>,
    clock: Arc<TokioClock>,
    scheduler: Scheduler,
    shutdown: CancellationToken,
}

impl Harness {
    async fn start_with(store: Arc<MemoryStore>, config: SchedulerConfig) -> Self {
        let runner = Arc::new(FakeRunner::default());
        let clock = Arc::new(TokioClock::starting_at(t0()));
        Self::start_at(store, runner, clock, config).await
    }

    async fn start_at(
        store: Arc<MemoryStore>,
        runner: Arc<FakeRunner>,
        clock: Arc<TokioClock>,
        config: SchedulerConfig,
    ) -> Self {
        for (digest, tenant) in ["ok", "fail", "fatal", "slow", "block"]
            .into_iter()
            .flat_map(|d| ["t", "a", "b"].map(|t| (d, t)))
        {
            store
                .put_plugin(&PluginRecord {
                    tenant: tenant.into(),
                    name: digest.into(),
                    version: "1.0.0".into(),
                    digest: digest.into(),
                    size: 1,
                    created_at: 0,
                })
                .unwrap();
        }
        let shutdown = CancellationToken::new();
        let (scheduler, _) = Scheduler::start(
            store.clone(),
            runner.clone(),
            clock.clone(),
            config,
            shutdown.clone(),
        )
        .await
        .unwrap();
        Self {
            store,
            runner,
            clock,
            scheduler,
            shutdown,
        }
    }

    async fn start() -> Self {
        Self::start_with(Arc::new(MemoryStore::new()), test_config()).await
    }

    /// Stores a task as the service would (validated, then through the scheduler).
    async fn put_task(&self, yaml: &str) -> TaskSpec {
        self.put_task_for("t", yaml).await
    }

    async fn put_task_for(&self, tenant: &str, yaml: &str) -> TaskSpec {
        let spec = task::parse(yaml).unwrap();
        let now = self.clock.now();
        Trigger::compile(spec.trigger.as_ref(), now).unwrap();
        let record = TaskRecord {
            format: RECORD_FORMAT,
            tenant: tenant.into(),
            name: spec.name.clone(),
            spec: serde_json::to_value(&spec).unwrap(),
            source: yaml.into(),
            created_at: now.timestamp_millis(),
            updated_at: now.timestamp_millis(),
            version: 1,
        };
        self.scheduler.put_task(record).await.unwrap();
        spec
    }

    async fn trigger(&self, task: &str, input: serde_json::Value) -> RunRecord {
        self.trigger_for("t", task, input).await
    }

    async fn trigger_for(&self, tenant: &str, task: &str, input: serde_json::Value) -> RunRecord {
        self.scheduler
            .trigger(TriggerRequest {
                tenant: tenant.into(),
                task: task.into(),
                input: Some(input),
                actor: "test".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .0
    }

    fn runs(&self, task: &str) -> Vec<RunRecord> {
        self.runs_for("t", task)
    }

    fn runs_for(&self, tenant: &str, task: &str) -> Vec<RunRecord> {
        let mut runs = self
            .store
            .list_runs(&RunQuery {
                tenant: Some(tenant.into()),
                task: Some(task.into()),
                limit: 1000,
                ..Default::default()
            })
            .unwrap()
            .runs;
        runs.reverse();
        runs
    }

    /// Lets the actor and attempt tasks run until `run` is terminal (bounded).
    async fn wait_terminal(&self, id: &str) -> RunRecord {
        for _ in 0..10_000 {
            let run = self.store.get_run(id).unwrap().unwrap();
            if run.status.is_terminal() {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "run {id} did not finish: {:?}",
            self.store.get_run(id).unwrap()
        );
    }
}

fn test_config() -> SchedulerConfig {
    SchedulerConfig {
        queue: QueueConfig::for_cores(4),
        ..SchedulerConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_manual_trigger_runs_its_step_and_stores_the_output() {
    let h = Harness::start().await;
    h.put_task("name: t1\nplugin: ok@1.0.0\ninput: { x: \"${input.x}\" }\n")
        .await;
    let run = h.trigger("t1", serde_json::json!({ "x": 7 })).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(
        run.steps[0].output,
        Some(serde_json::json!({ "echo": { "x": 7 } }))
    );
    let events = h.store.events(&run.id).unwrap();
    let path: Vec<_> = events
        .iter()
        .map(|e| (e.step.clone(), e.to.clone()))
        .collect();
    assert_eq!(path.first().unwrap(), &(None, "queued".to_string()));
    assert_eq!(path.last().unwrap(), &(None, "succeeded".to_string()));
    assert!(path.contains(&(Some("t1".into()), "running".into())));
}

#[tokio::test(start_paused = true)]
async fn an_idempotency_key_returns_the_existing_run() {
    let h = Harness::start().await;
    h.put_task("name: t1\nplugin: ok@1.0.0\n").await;
    let req = TriggerRequest {
        tenant: "t".into(),
        task: "t1".into(),
        idempotency_key: Some("k1".into()),
        actor: "test".into(),
        ..Default::default()
    };
    let (first, created) = h.scheduler.trigger(req.clone()).await.unwrap();
    assert!(created);
    let (second, created) = h.scheduler.trigger(req).await.unwrap();
    assert!(!created);
    assert_eq!(first.id, second.id);
    assert_eq!(h.runs("t1").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_cron_task_fires_once_per_instant() {
    let h = Harness::start().await;
    h.put_task("name: tick\ntrigger: { cron: \"*/10 * * * * ?\" }\nplugin: ok@1.0.0\n")
        .await;
    tokio::time::sleep(Duration::from_millis(35_500)).await;
    let runs = h.runs("tick");
    let instants: Vec<_> = runs
        .iter()
        .map(|r| r.scheduled_for - t0().timestamp_millis())
        .collect();
    assert_eq!(instants, [10_000, 20_000, 30_000]);
    assert!(
        runs.iter()
            .all(|r| r.trigger == crate::model::TriggerKind::Cron)
    );
}

#[tokio::test(start_paused = true)]
async fn retries_follow_the_backoff_then_dead_letter() {
    let h = Harness::start().await;
    h.put_task(
        "name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 3, backoff: [10s, 30s] }\n",
    )
    .await;
    let run = h.trigger("flaky", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let step = &run.steps[0];
    assert_eq!(step.status, StepStatus::Dead);
    let starts: Vec<_> = step
        .attempts
        .iter()
        .map(|a| a.started_at - t0().timestamp_millis())
        .collect();
    assert_eq!(starts, [0, 10_000, 40_000]);
    let dead = h.store.list_dead_letters("t", true).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 3);
    assert_eq!(dead[0].error.as_deref(), Some("busy"));
}

#[tokio::test(start_paused = true)]
async fn a_fatal_error_is_not_retried() {
    let h = Harness::start().await;
    h.put_task("name: bad\nplugin: fatal@1.0.0\nretry: { max_attempts: 3, backoff: [1s] }\n")
        .await;
    let run = h.trigger("bad", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.steps[0].status, StepStatus::Failed);
    assert_eq!(run.steps[0].attempts.len(), 1);
    assert!(h.store.list_dead_letters("t", true).unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_requeued_dead_letter_runs_again() {
    let h = Harness::start().await;
    h.put_task("name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 2, backoff: [1s] }\n")
        .await;
    let run = h.trigger("flaky", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    let dead = h.store.list_dead_letters("t", true).unwrap().remove(0);
    h.scheduler.requeue(&dead.id, "test").await.unwrap();
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(
        run.steps[0].attempts.len(),
        4,
        "two more attempts after the requeue"
    );
    let resolved = h.store.get_dead_letter(&dead.id).unwrap().unwrap();
    assert!(resolved.resolution.unwrap().contains("requeued"));
}

#[tokio::test(start_paused = true)]
async fn steps_run_after_their_needs_and_see_upstream_outputs() {
    let h = Harness::start().await;
    h.put_task(
        "name: pipe\nsteps:\n  - name: a\n    plugin: ok@1.0.0\n    input: { n: 1 }\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n    input: { from_a: \"${steps.a.output.echo.n}\" }\n",
    ).await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.steps[1].input, Some(serde_json::json!({ "from_a": 1 })));
    assert!(run.steps[1].attempts[0].started_at >= run.steps[0].attempts[0].finished_at.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_failed_upstream_cancels_all_success_downstream() {
    let h = Harness::start().await;
    h.put_task("name: pipe\nsteps:\n  - name: a\n    plugin: fatal@1.0.0\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n").await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.steps[1].status, StepStatus::Cancelled);
    assert!(run.steps[1].attempts.is_empty());
}

#[tokio::test(start_paused = true)]
async fn cancel_stops_a_running_attempt_and_drops_queued_steps() {
    let h = Harness::start().await;
    h.put_task("name: long\nsteps:\n  - name: a\n    plugin: block@1.0.0\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n").await;
    let run = h.trigger("long", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled = h.scheduler.cancel(&run.id, "test").await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    let run = h.wait_terminal(&run.id).await;
    assert!(run.steps.iter().all(|s| s.status == StepStatus::Cancelled));
    assert!(matches!(
        h.scheduler.cancel(&run.id, "test").await,
        Err(Error::Conflict(_))
    ));
}

/// Each run's scheduled instant, in whole seconds after `t0`.
fn seconds_after_t0(runs: &[RunRecord]) -> Vec<i64> {
    runs.iter()
        .map(|r| (r.scheduled_for - t0().timestamp_millis()) / 1000)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn overlap_skip_drops_fires_while_a_run_is_active() {
    let h = Harness::start().await;
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: skip\nplugin: slow@1.0.0\ninput: { ms: 25000 }\n").await;
    tokio::time::sleep(Duration::from_millis(45_500)).await;
    let runs = h.runs("o");
    let instants = seconds_after_t0(&runs);
    // 10 s starts a 25 s run; 20 s and 30 s are skipped; 40 s starts the next.
    assert_eq!(instants, [10, 40]);
    assert_eq!(
        h.scheduler
            .stats()
            .overlap_skips
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn overlap_queue_one_keeps_one_run_waiting() {
    let h = Harness::start().await;
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: queue_one\nplugin: slow@1.0.0\ninput: { ms: 25000 }\n").await;
    tokio::time::sleep(Duration::from_millis(30_500)).await;
    let runs = h.runs("o");
    let instants = seconds_after_t0(&runs);
    // 10 s runs, 20 s waits, 30 s is skipped (one is already waiting).
    assert_eq!(instants, [10, 20]);
    assert_eq!(runs[1].status, RunStatus::Queued);
    let second = h.wait_terminal(&runs[1].id).await;
    // The waiting run starts when the first finishes (at 35 s).
    assert_eq!(second.started_at.unwrap() - t0().timestamp_millis(), 35_000);
}

#[tokio::test(start_paused = true)]
async fn overlap_allow_runs_side_by_side() {
    let h = Harness::start().await;
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: allow\nplugin: slow@1.0.0\ninput: { ms: 25000 }\n").await;
    tokio::time::sleep(Duration::from_millis(30_500)).await;
    assert_eq!(h.runs("o").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_run_is_stored_ahead_and_starts_at_its_instant() {
    let h = Harness::start().await;
    h.put_task("name: a\ntrigger: { every: 10s }\nplugin: ok@1.0.0\n")
        .await;
    // Within the lead before the 10 s instant: stored, not started.
    tokio::time::sleep(Duration::from_millis(9_990)).await;
    let runs = h.runs("a");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let instant = t0().timestamp_millis() + 10_000;
    assert_eq!(runs[0].scheduled_for, instant);
    assert!(runs[0].created_at <= instant - 10, "{:?}", runs[0]);
    assert_eq!(runs[0].status, RunStatus::Queued);
    assert!(h.runner.calls.lock().unwrap().is_empty());
    // Released at the instant itself.
    let done = h.wait_terminal(&runs[0].id).await;
    assert_eq!(done.started_at, Some(instant));
    assert_eq!(done.steps[0].attempts[0].started_at, instant);
    assert_eq!(h.runner.calls.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn overlap_is_judged_at_the_instant_when_a_run_is_active_ahead_of_it() {
    let h = Harness::start().await;
    // The 10 s run ends at 19.995 s: still active when the 20 s instant is
    // within the lead, over by the instant itself.
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: skip\nplugin: slow@1.0.0\ninput: { ms: 9995 }\n").await;
    tokio::time::sleep(Duration::from_millis(20_500)).await;
    let runs = h.runs("o");
    let instants = seconds_after_t0(&runs);
    assert_eq!(instants, [10, 20], "{runs:?}");
    assert_eq!(runs[1].started_at, Some(t0().timestamp_millis() + 20_000));
}

/// A task firing every 10 s, stopped at 9.990 s (its 10 s run stored
/// ahead, not started), restarted with the clock at `ms` after `t0`.
async fn stored_ahead_then_restarted_at(ms: i64) -> Harness {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::start_with(store.clone(), test_config()).await;
    h.put_task("name: a\ntrigger: { every: 10s }\nplugin: ok@1.0.0\n")
        .await;
    tokio::time::sleep(Duration::from_millis(9_990)).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(1)).await;
    restart_at(store, t0() + chrono::Duration::milliseconds(ms)).await
}

#[tokio::test(start_paused = true)]
async fn a_run_stored_ahead_of_a_crash_still_waits_for_its_instant() {
    let h = stored_ahead_then_restarted_at(9_992).await;
    let runs = h.runs("a");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let done = h.wait_terminal(&runs[0].id).await;
    assert_eq!(done.started_at, Some(t0().timestamp_millis() + 10_000));
}

#[tokio::test(start_paused = true)]
async fn a_clock_stepped_back_past_the_lead_does_not_hold_runs_back() {
    // Restarted with the wall clock a second behind: the run is not held
    // for that second (only a run within the lead waits for its instant).
    let h = stored_ahead_then_restarted_at(9_000).await;
    let runs = h.runs("a");
    let done = h.wait_terminal(&runs[0].id).await;
    assert_eq!(done.started_at, Some(t0().timestamp_millis() + 9_000));
}

/// Starts a scheduler on `store` at `at` (a "restart" after downtime).
async fn restart_at(store: Arc<MemoryStore>, at: DateTime<Utc>) -> Harness {
    let clock = Arc::new(TokioClock::starting_at(at));
    Harness::start_at(store, Arc::new(FakeRunner::default()), clock, test_config()).await
}

async fn downtime_fires(catch_up: &str) -> Vec<i64> {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::start_with(store.clone(), test_config()).await;
    h.put_task(&format!("name: c\ntrigger: {{ every: 5m }}\ncatch_up: {catch_up}\noverlap: allow\nplugin: ok@1.0.0\n")).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Down for 32 minutes: the fires at 5, 10, … 30 minutes were missed
    // (the latest by 2 minutes, past the misfire grace).
    let h = restart_at(store, t0() + chrono::Duration::minutes(32)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut minutes: Vec<i64> = h
        .runs("c")
        .iter()
        .map(|r| (r.scheduled_for - t0().timestamp_millis()) / 60_000)
        .collect();
    minutes.sort();
    minutes
}

#[tokio::test(start_paused = true)]
async fn catch_up_latest_runs_only_the_most_recent_missed_fire() {
    assert_eq!(downtime_fires("latest").await, [30]);
}

#[tokio::test(start_paused = true)]
async fn catch_up_none_skips_every_missed_fire() {
    assert_eq!(downtime_fires("none").await, Vec::<i64>::new());
}

#[tokio::test(start_paused = true)]
async fn catch_up_all_runs_every_missed_fire() {
    assert_eq!(downtime_fires("all").await, [5, 10, 15, 20, 25, 30]);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_running_at_a_crash_is_lost_and_run_again() {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::start_with(store.clone(), test_config()).await;
    // `flip` blocks before the crash and succeeds after it.
    let flip = |digest: &str| PluginRecord {
        tenant: "t".into(),
        name: "flip".into(),
        version: "1.0.0".into(),
        digest: digest.into(),
        size: 1,
        created_at: 0,
    };
    store.put_plugin(&flip("block")).unwrap();
    h.put_task("name: l\nplugin: flip@1.0.0\n").await;
    let run = h.trigger("l", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store.get_run(&run.id).unwrap().unwrap().steps[0].status,
        StepStatus::Running
    );
    // "Crash": stop the actor without letting it settle anything, then swap the plugin.
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut rec = store.get_run(&run.id).unwrap().unwrap();
    if rec.steps[0].status != StepStatus::Running {
        // Shutdown may have recorded the cancellation; put back the crash picture.
        rec.steps[0].status = StepStatus::Running;
        rec.steps[0].attempts[0].outcome = None;
        rec.status = RunStatus::Running;
        rec.finished_at = None;
        store.update_run(&rec, &[]).unwrap();
    }
    store.put_plugin(&flip("ok")).unwrap();
    let h = restart_at(store.clone(), t0() + chrono::Duration::seconds(5)).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    let outcomes: Vec<_> = run.steps[0].attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, [Some(Outcome::Lost), Some(Outcome::Succeeded)]);
    assert!(
        h.store
            .events(&run.id)
            .unwrap()
            .iter()
            .any(|e| e.actor == "recovery")
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_tenant_queue_answers_queue_full() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        max_queued_per_tenant: 2,
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: q\nplugin: block@1.0.0\n").await;
    h.trigger("q", serde_json::json!({})).await; // runs
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.trigger("q", serde_json::json!({})).await; // waits
    h.trigger("q", serde_json::json!({})).await; // waits
    let err = h
        .scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::QueueFull { queued: 2, .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn low_priority_runs_are_shed_past_the_high_water_mark() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        high_water: 2,
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: q\nplugin: block@1.0.0\n").await;
    h.trigger("q", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.trigger("q", serde_json::json!({})).await;
    h.trigger("q", serde_json::json!({})).await;
    let (shed, _) = h
        .scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            priority: Some(1),
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(shed.status, RunStatus::Cancelled);
    assert!(shed.reason.unwrap().contains("high-water"));
    let (kept, _) = h
        .scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            priority: Some(8),
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(kept.status, RunStatus::Queued);
}

#[tokio::test(start_paused = true)]
async fn retrying_a_failed_run_keeps_succeeded_steps() {
    let h = Harness::start().await;
    h.put_task("name: pipe\nsteps:\n  - name: a\n    plugin: ok@1.0.0\n  - name: b\n    needs: [a]\n    plugin: fatal@1.0.0\n").await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    h.scheduler.retry(&run.id, "test").await.unwrap();
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(
        run.steps[0].attempts.len(),
        1,
        "a succeeded and is not run again"
    );
    assert_eq!(run.steps[1].attempts.len(), 2);
    let calls = h.runner.calls.lock().unwrap().clone();
    assert_eq!(calls.iter().filter(|c| c.1 == "a").count(), 1);
}

#[tokio::test(start_paused = true)]
async fn rerunning_a_step_runs_it_and_its_downstream_only() {
    let h = Harness::start().await;
    h.put_task(
        "name: pipe\nsteps:\n  - name: a\n    plugin: ok@1.0.0\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n  - name: c\n    needs: [b]\n    plugin: ok@1.0.0\n",
    )
    .await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    assert!(matches!(
        h.scheduler.rerun_step(&run.id, "nope", "test").await,
        Err(Error::NotFound(_))
    ));
    h.scheduler.rerun_step(&run.id, "b", "test").await.unwrap();
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    let attempts: Vec<usize> = run.steps.iter().map(|s| s.attempts.len()).collect();
    assert_eq!(attempts, [1, 2, 2]);
}

#[tokio::test(start_paused = true)]
async fn an_after_trigger_starts_the_downstream_task_with_upstream_outputs() {
    let h = Harness::start().await;
    h.put_task("name: up\nplugin: ok@1.0.0\ninput: { rows: 5 }\n")
        .await;
    h.put_task("name: down\ntrigger: { after: [up], on: success }\nplugin: ok@1.0.0\ninput: { got: \"${input.upstream.outputs.up.echo.rows}\" }\n").await;
    h.put_task("name: on_fail\ntrigger: { after: [up], on: failure }\nplugin: ok@1.0.0\n")
        .await;
    let run = h.trigger("up", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let downs = h.runs("down");
    assert_eq!(downs.len(), 1);
    let down = h.wait_terminal(&downs[0].id).await;
    assert_eq!(down.trigger, crate::model::TriggerKind::After);
    assert_eq!(
        down.steps[0].output,
        Some(serde_json::json!({ "echo": { "got": 5 } }))
    );
    assert_eq!(down.input["upstream"]["run_id"], run.id);
    assert!(
        h.runs("on_fail").is_empty(),
        "on: failure must not fire for a success"
    );
}

#[tokio::test(start_paused = true)]
async fn a_one_success_join_runs_when_one_branch_failed() {
    let h = Harness::start().await;
    h.put_task(
        "name: j\nsteps:\n  - name: a\n    plugin: fatal@1.0.0\n  - name: b\n    plugin: ok@1.0.0\n  - name: join\n    needs: [a, b]\n    trigger_rule: one_success\n    plugin: ok@1.0.0\n",
    )
    .await;
    let run = h.trigger("j", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.steps[2].status, StepStatus::Succeeded);
    // The join started only after both branches ended.
    let ends = run.steps[..2]
        .iter()
        .map(|s| s.attempts[0].finished_at.unwrap())
        .max()
        .unwrap();
    assert!(run.steps[2].attempts[0].started_at >= ends);
    assert_eq!(
        run.status,
        RunStatus::Succeeded,
        "the failure was handled by the join"
    );
}

// --- tenants ----------------------------------------------------------------

fn tenant_record(name: &str, quota: crate::tenant::Quota) -> crate::tenant::TenantRecord {
    crate::tenant::TenantRecord::new(name, quota, 0)
}

/// The fairness bound of the dispatch queue, end to end: tenant `a` floods
/// 10,000 runs; tenant `b`'s one run is among the next 2 attempts started
/// after its trigger (we assert at most 2 of `a`'s attempts start between
/// `b`'s trigger and `b`'s start), however deep `a`'s backlog.
#[tokio::test(start_paused = true)]
async fn one_tenant_flooding_does_not_delay_another_tenants_run() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(2),
        ..SchedulerConfig::default()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task_for("a", "name: flood\nplugin: slow@1.0.0\ninput: { ms: 10 }\n")
        .await;
    h.put_task_for("b", "name: one\nplugin: slow@1.0.0\ninput: { ms: 10 }\n")
        .await;
    for _ in 0..10_000 {
        h.trigger_for("a", "flood", serde_json::json!({})).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = h.runner.calls.lock().unwrap().len();
    assert!(
        before < 100,
        "a's backlog is still there ({before} started)"
    );
    let b = h.trigger_for("b", "one", serde_json::json!({})).await;
    h.wait_terminal(&b.id).await;
    let calls = h.runner.calls.lock().unwrap().clone();
    let b_at = calls
        .iter()
        .position(|(run, _, _)| *run == b.id)
        .expect("b's run started");
    let a_between = b_at - before;
    assert!(
        a_between <= 2,
        "{a_between} of a's attempts started between b's trigger and b's start"
    );
    h.shutdown.cancel();
}

/// Fuel is reserved before an attempt and never exceeds the window's
/// budget; an exhausted tenant is held with a reason until the window
/// resets, then its runs go on; usage buckets add up to the fuel used.
#[tokio::test(start_paused = true)]
async fn a_tenant_out_of_fuel_waits_for_the_next_window() {
    let quota = crate::tenant::Quota {
        fuel_per_window: Some(250),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for("a", "name: job\nplugin: ok@1.0.0\n").await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        let run = h.trigger_for("a", "job", serde_json::json!({})).await;
        runs.push(h.wait_terminal(&run.id).await);
    }
    let fuel: Vec<u64> = runs
        .iter()
        .map(|r| r.steps[0].attempts[0].fuel_consumed)
        .collect();
    assert_eq!(fuel, [100, 100, 50], "the third got only what was left");
    assert_eq!(
        runs[2].steps[0].attempts[0].outcome,
        Some(Outcome::FuelExhausted)
    );
    let held = h.trigger_for("a", "job", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        h.store.get_run(&held.id).unwrap().unwrap().status,
        RunStatus::Queued
    );
    let reason = h.scheduler.stats().hold_reason("a").expect("held");
    assert!(reason.contains("250 of 250"), "{reason}");
    // The window is an hour aligned to the epoch; t0 is on the hour.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let run = h.wait_terminal(&held.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(h.scheduler.stats().hold_reason("a"), None);
    let used: u64 = h
        .store
        .usage("a", 0, i64::MAX)
        .unwrap()
        .iter()
        .map(|b| b.fuel)
        .sum();
    assert_eq!(used, 350);
    h.shutdown.cancel();
}

/// After a restart the window's use is recomputed from the usage buckets,
/// so a tenant out of fuel stays held.
#[tokio::test(start_paused = true)]
async fn the_fuel_used_in_a_window_survives_a_restart() {
    let quota = crate::tenant::Quota {
        fuel_per_window: Some(100),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store.clone(), test_config()).await;
    h.put_task_for("a", "name: job\nplugin: ok@1.0.0\n").await;
    let run = h.trigger_for("a", "job", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let h = Harness::start_at(
        store,
        Arc::new(FakeRunner::default()),
        h.clock.clone(),
        test_config(),
    )
    .await;
    let held = h.trigger_for("a", "job", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        h.store.get_run(&held.id).unwrap().unwrap().status,
        RunStatus::Queued
    );
    assert!(h.scheduler.stats().hold_reason("a").is_some());
    h.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn triggers_taken_in_one_turn_are_stored_together_and_see_each_other() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        max_queued_per_tenant: 2,
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: q\nplugin: block@1.0.0\n").await;
    h.put_task("name: k\nplugin: ok@1.0.0\n").await;
    let req = |task: &str, key: Option<&str>| TriggerRequest {
        tenant: "t".into(),
        task: task.into(),
        idempotency_key: key.map(str::to_string),
        actor: "test".into(),
        ..Default::default()
    };
    // Sent before the actor runs: it drains them in one turn and inserts
    // the new runs in one store write.
    let (a, again) = tokio::join!(
        h.scheduler.trigger(req("k", Some("a"))),
        h.scheduler.trigger(req("k", Some("a"))),
    );
    let ((first, created), (second, created_again)) = (a.unwrap(), again.unwrap());
    assert!(created && !created_again);
    assert_eq!(first.id, second.id, "one run for one key");
    h.wait_terminal(&first.id).await;
    assert_eq!(h.runs("k").len(), 1);

    // The queue bound counts the runs of the same turn.
    let answers = tokio::join!(
        h.scheduler.trigger(req("q", None)),
        h.scheduler.trigger(req("q", None)),
        h.scheduler.trigger(req("q", None)),
        h.scheduler.trigger(req("q", None)),
    );
    let answers = [answers.0, answers.1, answers.2, answers.3];
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 2);
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert!(
            matches!(refused, Error::QueueFull { queued: 2, .. }),
            "{refused}"
        );
    }
    assert_eq!(h.runs("q").len(), 2);
}

// --- fairness: cancelled attempts, wall time, ceilings, running caps --------

/// Polls (on the paused clock) until `f` holds for the stored run.
async fn wait_for(h: &Harness, id: &str, f: impl Fn(&RunRecord) -> bool) -> RunRecord {
    for _ in 0..10_000 {
        let run = h.store.get_run(id).unwrap().unwrap();
        if f(&run) {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "run {id} never got there: {:?}",
        h.store.get_run(id).unwrap()
    );
}

/// A cancelled attempt is recorded like any other (outcome, end, fuel),
/// counted in the metrics and usage, and its fuel reservation is released:
/// the tenant's next run gets the budget back. (Before, the run was
/// forgotten at the cancel and the attempt's report dropped: outcome and end
/// stayed empty, fuel 0, and the reservation of the whole budget leaked.)
#[tokio::test(start_paused = true)]
async fn a_cancelled_attempt_is_recorded_charged_and_releases_its_reservation() {
    let quota = crate::tenant::Quota {
        fuel_per_window: Some(1_000),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for("a", "name: hang\nplugin: block@1.0.0\n")
        .await;
    h.put_task_for("a", "name: job\nplugin: ok@1.0.0\n").await;
    let run = h.trigger_for("a", "hang", serde_json::json!({})).await;
    wait_for(&h, &run.id, |r| r.steps[0].status == StepStatus::Running).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cancelled = h.scheduler.cancel(&run.id, "test").await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert!(matches!(
        h.scheduler.cancel(&run.id, "test").await,
        Err(Error::Conflict(_))
    ));
    let run = wait_for(&h, &run.id, |r| r.steps[0].attempts[0].outcome.is_some()).await;
    let attempt = &run.steps[0].attempts[0];
    assert_eq!(attempt.outcome, Some(Outcome::Cancelled));
    assert!(attempt.finished_at.is_some());
    assert_eq!(attempt.fuel_consumed, 100);
    assert!(attempt.duration_ms >= 2_000.0, "{attempt:?}");
    assert_eq!(run.status, RunStatus::Cancelled);
    let cancelled_at = Outcome::ALL
        .iter()
        .position(|o| *o == Outcome::Cancelled)
        .unwrap();
    assert_eq!(
        h.scheduler.stats().attempts[cancelled_at].load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let next = h.trigger_for("a", "job", serde_json::json!({})).await;
    let next = h.wait_terminal(&next.id).await;
    assert_eq!(
        next.status,
        RunStatus::Succeeded,
        "the reservation came back"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let usage = h.store.usage("a", 0, i64::MAX).unwrap();
    let hang = usage.iter().find(|b| b.task == "hang").expect("charged");
    assert_eq!((hang.attempts, hang.fuel), (1, 100));
    assert_eq!(hang.outcomes["cancelled"], 1);
    assert!(hang.wall_ms >= 2_000.0);
    h.shutdown.cancel();
}

/// Attempts blocked in host calls burn no fuel but hold slots: the
/// wall-time budget charges their duration, cuts the last one's deadline to
/// what is left, then holds the tenant until the window resets.
#[tokio::test(start_paused = true)]
async fn a_tenant_out_of_wall_time_is_held_and_its_last_deadline_cut() {
    let quota = crate::tenant::Quota {
        wall_ms_per_window: Some(20_000),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        "a",
        "name: hang\nplugin: slow@1.0.0\ninput: { ms: 3600000 }\nlimits: { timeout: 15s }\n",
    )
    .await;
    let runs = [
        h.trigger_for("a", "hang", serde_json::json!({})).await,
        h.trigger_for("a", "hang", serde_json::json!({})).await,
        h.trigger_for("a", "hang", serde_json::json!({})).await,
    ];
    let first = h.wait_terminal(&runs[0].id).await;
    let a = &first.steps[0].attempts[0];
    assert_eq!(a.outcome, Some(Outcome::TimedOut));
    let second = h.wait_terminal(&runs[1].id).await;
    let b = &second.steps[0].attempts[0];
    assert!(
        b.started_at >= a.finished_at.unwrap(),
        "waited for the first to settle"
    );
    assert_eq!(b.outcome, Some(Outcome::TimedOut));
    assert!(
        (4_999.0..6_000.0).contains(&b.duration_ms),
        "cut to the 5 s left: {b:?}"
    );
    assert!(
        b.error.as_deref().unwrap().contains("wall-time budget"),
        "{b:?}"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let third = h.store.get_run(&runs[2].id).unwrap().unwrap();
    assert_eq!(third.status, RunStatus::Queued);
    let reason = h.scheduler.stats().hold_reason("a").expect("held");
    assert!(reason.contains("wall-time budget"), "{reason}");
    // The next window (t0 is on the hour) lets it go.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let third = h.wait_terminal(&runs[2].id).await;
    assert_eq!(third.steps[0].attempts[0].outcome, Some(Outcome::TimedOut));
    h.shutdown.cancel();
}

/// Two tenants on 4 slots (1 reserved for priority >= 7). `a` runs 4
/// attempts that block for an hour at priority 9 (saved before its ceiling),
/// with no running cap of its own: the default ceiling queues them at 6, so
/// they take the 3 normal slots but not the reserved one, and `b` (trusted by
/// the admin with `max_priority: 9`) starts its urgent run at once.
#[tokio::test(start_paused = true)]
async fn a_tenant_at_its_priority_ceiling_leaves_the_reserved_share() {
    let store = Arc::new(MemoryStore::new());
    let uncapped = crate::tenant::Quota {
        max_concurrent_attempts: Some(4),
        ..Default::default()
    };
    store.put_tenant(&tenant_record("a", uncapped)).unwrap();
    let trusted = crate::tenant::Quota {
        max_priority: Some(9),
        ..Default::default()
    };
    store.put_tenant(&tenant_record("b", trusted)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        "a",
        "name: hang\nplugin: slow@1.0.0\npriority: 9\ninput: { ms: 3600000 }\nlimits: { timeout: 1h }\n",
    )
    .await;
    h.put_task_for("b", "name: urgent\nplugin: ok@1.0.0\npriority: 9\n")
        .await;
    for _ in 0..4 {
        let run = h.trigger_for("a", "hang", serde_json::json!({})).await;
        assert_eq!(run.priority, 6, "recorded at the ceiling");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.runner.calls.lock().unwrap().len(), 3, "the normal slots");
    let b = h.trigger_for("b", "urgent", serde_json::json!({})).await;
    let started = h.clock.now();
    let b = h.wait_terminal(&b.id).await;
    assert_eq!(b.status, RunStatus::Succeeded);
    assert!(h.clock.now() - started < chrono::Duration::seconds(1));
    h.shutdown.cancel();
}

/// The default running cap: `a` (no cap of its own) fills 4 slots' worth
/// with hour-long attempts at its ceiling; it holds 2 (half the slots), and
/// `b`'s ordinary run starts at once on a normal slot.
#[tokio::test(start_paused = true)]
async fn a_tenant_without_a_cap_holds_at_most_half_the_slots() {
    let store = Arc::new(MemoryStore::new());
    store
        .put_tenant(&tenant_record("a", Default::default()))
        .unwrap();
    store
        .put_tenant(&tenant_record("b", Default::default()))
        .unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        "a",
        "name: hang\nplugin: slow@1.0.0\npriority: 6\ninput: { ms: 3600000 }\nlimits: { timeout: 1h }\n",
    )
    .await;
    h.put_task_for("b", "name: job\nplugin: ok@1.0.0\npriority: 5\n")
        .await;
    for _ in 0..4 {
        h.trigger_for("a", "hang", serde_json::json!({})).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.runner.calls.lock().unwrap().len(), 2, "half of 4 slots");
    let b = h.trigger_for("b", "job", serde_json::json!({})).await;
    let started = h.clock.now();
    let b = h.wait_terminal(&b.id).await;
    assert_eq!(b.status, RunStatus::Succeeded);
    assert!(h.clock.now() - started < chrono::Duration::seconds(1));
    h.shutdown.cancel();
}

/// `default`, the host owner's tenant, keeps every normal slot and priority
/// without a quota: a one-team ax is not slowed by the fairness defaults.
#[tokio::test(start_paused = true)]
async fn the_default_tenant_keeps_every_slot() {
    let store = Arc::new(MemoryStore::new());
    store
        .put_tenant(&tenant_record(
            crate::tenant::DEFAULT_TENANT,
            Default::default(),
        ))
        .unwrap();
    store
        .put_plugin(&PluginRecord {
            tenant: crate::tenant::DEFAULT_TENANT.into(),
            name: "slow".into(),
            version: "1.0.0".into(),
            digest: "slow".into(),
            size: 1,
            created_at: 0,
        })
        .unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        crate::tenant::DEFAULT_TENANT,
        "name: hang\nplugin: slow@1.0.0\npriority: 9\ninput: { ms: 3600000 }\nlimits: { timeout: 1h }\n",
    )
    .await;
    for _ in 0..4 {
        h.trigger_for(crate::tenant::DEFAULT_TENANT, "hang", serde_json::json!({}))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.runner.calls.lock().unwrap().len(), 4);
    h.shutdown.cancel();
}

/// The host's caps (config `caps`) bound every start, defaults included: a
/// step that sets no fuel gets the host's `max_fuel`, not the 1e9 default.
#[tokio::test(start_paused = true)]
async fn host_caps_lower_the_defaults_at_every_start() {
    let config = SchedulerConfig {
        caps: crate::model::Caps {
            max_fuel: 50,
            ..crate::model::Caps::UNLIMITED
        },
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: capped\nplugin: ok@1.0.0\nretry: { max_attempts: 1 }\n")
        .await;
    let run = h.trigger("capped", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    let attempt = &run.steps[0].attempts[0];
    assert_eq!(attempt.outcome, Some(Outcome::FuelExhausted), "{attempt:?}");
    assert_eq!(attempt.fuel_consumed, 50);
}

/// A task whose only step's `when` is n³ over `input.l`.
const CUBIC: &str = "name: cubic\nsteps:\n  - name: s\n    plugin: ok@1.0.0\n    when: \"input.l.all(x, input.l.all(y, input.l.all(z, x + y + z >= 0)))\"\n";

/// A budget that lets [`CUBIC`] over 1,000 items run for a good while of
/// real time (~1 s in a debug build) before it stops it.
fn slow_budget() -> crate::cond::Budget {
    crate::cond::Budget {
        steps: 5_000_000,
        bytes: u64::MAX,
        deadline: Duration::from_secs(20),
    }
}

/// Polls the store until `run` is terminal, for at most 30 s of real time
/// (a condition is evaluated on a thread of its own, in real time; virtual
/// time runs on meanwhile).
async fn wait_terminal_real(h: &Harness, id: &str) -> RunRecord {
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let run = h.store.get_run(id).unwrap().unwrap();
        if run.status.is_terminal() {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "run {id} did not finish: {:?}",
        h.store.get_run(id).unwrap()
    );
}

/// The actor hands conditions to threads of their own and takes the result
/// as an event: while one tenant's expensive condition is being evaluated,
/// another tenant's `every: 1s` task keeps firing, each run starting at its
/// instant. Evaluated on the actor, as before, the condition held up every
/// fire until it was done.
#[tokio::test(start_paused = true)]
async fn a_slow_condition_does_not_delay_another_tenants_fires() {
    let config = SchedulerConfig {
        cond_budget: slow_budget(),
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task_for(
        "b",
        "name: tick\ntrigger: { every: 1s }\nplugin: ok@1.0.0\n",
    )
    .await;
    h.put_task_for("a", CUBIC).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let before = h.runs_for("b", "tick").len();
    let slow = h
        .trigger_for(
            "a",
            "cubic",
            serde_json::json!({ "l": (0..1000).collect::<Vec<_>>() }),
        )
        .await;
    // Virtual time goes on while the condition is out.
    while h.runs_for("b", "tick").len() < before + 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rec = h.store.get_run(&slow.id).unwrap().unwrap();
    assert_eq!(
        rec.steps[0].status,
        StepStatus::Pending,
        "the condition was decided before the other tenant's fires"
    );
    let ticks = h.runs_for("b", "tick");
    for run in &ticks[before..before + 2] {
        let run = h.wait_terminal(&run.id).await;
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.started_at, Some(run.scheduled_for), "started late");
    }
    h.scheduler.set_paused("b", "tick", true).await.unwrap();
    // The condition itself ends with the budget's reason.
    let done = wait_terminal_real(&h, &slow.id).await;
    assert_eq!(done.steps[0].status, StepStatus::Failed);
    assert_eq!(
        done.steps[0].error.as_deref(),
        Some(
            "condition exceeded its budget: more than 5000000 steps (a macro over a large \
             list, nested macros, or long values compared or searched)"
        )
    );
    assert_eq!(done.status, RunStatus::Failed);
    h.shutdown.cancel();
}

/// Nothing about an evaluation in flight is stored: stopped while one is
/// out, the step is still `pending`, and after the restart it is evaluated
/// again (here under the default budget, which stops it soon).
#[tokio::test(start_paused = true)]
async fn a_condition_out_at_a_crash_is_evaluated_again() {
    let store = Arc::new(MemoryStore::new());
    let config = SchedulerConfig {
        cond_budget: crate::cond::Budget {
            deadline: Duration::from_secs(2),
            ..slow_budget()
        },
        ..test_config()
    };
    let h = Harness::start_with(store.clone(), config).await;
    h.put_task(CUBIC).await;
    let run = h
        .trigger(
            "cubic",
            serde_json::json!({ "l": (0..1000).collect::<Vec<_>>() }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let stored = store.get_run(&run.id).unwrap().unwrap();
    assert_eq!(stored.steps[0].status, StepStatus::Pending);
    assert_eq!(stored.status, RunStatus::Queued);
    let h = restart_at(store, t0() + chrono::Duration::seconds(5)).await;
    let done = wait_terminal_real(&h, &run.id).await;
    assert_eq!(done.steps[0].status, StepStatus::Failed);
    assert!(
        done.steps[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("condition exceeded its budget: "),
        "{:?}",
        done.steps[0]
    );
    let decided: Vec<_> = h
        .store
        .events(&run.id)
        .unwrap()
        .into_iter()
        .filter(|e| e.step.is_some())
        .map(|e| (e.to, e.actor))
        .collect();
    assert_eq!(decided, [("failed".to_owned(), "scheduler".to_owned())]);
}

/// A condition decides its step once it is back from the threads: true
/// runs it, false skips it, and the run goes on from there.
#[tokio::test(start_paused = true)]
async fn conditions_decide_their_steps_when_they_come_back() {
    let h = Harness::start().await;
    h.put_task(
        "name: w\nsteps:\n  - { name: a, plugin: ok@1.0.0, input: { n: \"${input.n}\" } }\n  - { name: yes, needs: [a], plugin: ok@1.0.0, when: \"steps.a.output.echo.n > 1\" }\n  - { name: no, needs: [a], plugin: ok@1.0.0, when: \"input.n < 1\" }\n  - { name: after, needs: [no], plugin: ok@1.0.0, trigger_rule: all_done }\n",
    )
    .await;
    let run = h.trigger("w", serde_json::json!({ "n": 2 })).await;
    let run = wait_terminal_real(&h, &run.id).await;
    let states: Vec<_> = run
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.status))
        .collect();
    assert_eq!(
        states,
        [
            ("a", StepStatus::Succeeded),
            ("yes", StepStatus::Succeeded),
            ("no", StepStatus::Skipped),
            ("after", StepStatus::Succeeded),
        ]
    );
    assert_eq!(
        run.steps[2].error.as_deref(),
        Some("condition is false: input.n < 1")
    );
    assert_eq!(run.status, RunStatus::Succeeded);
}

/// Steps waiting for their condition take turns by tenant: with one
/// evaluation thread busy with tenant `a`'s ten costly conditions, tenant
/// `b`'s condition is evaluated after at most two of them, not after all.
#[tokio::test(start_paused = true)]
async fn one_tenants_conditions_do_not_hold_up_another_tenants() {
    let config = SchedulerConfig {
        cond_workers: 1,
        cond_budget: crate::cond::Budget {
            deadline: Duration::from_secs(600),
            ..crate::cond::Budget::default()
        },
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    let task = |name: &str| {
        format!(
            "name: {name}\nsteps:\n  - name: s\n    plugin: ok@1.0.0\n    when: \"input.l.all(x, input.l.all(y, x + y >= 0))\"\n"
        )
    };
    h.put_task_for("a", &task("many")).await;
    h.put_task_for("b", &task("one")).await;
    let costly = serde_json::json!({ "l": (0..150).collect::<Vec<_>>() });
    let mut a_runs = Vec::new();
    for _ in 0..10 {
        a_runs.push(h.trigger_for("a", "many", costly.clone()).await);
    }
    let b = h
        .trigger_for("b", "one", serde_json::json!({ "l": [1] }))
        .await;
    wait_terminal_real(&h, &b.id).await;
    for run in &a_runs {
        assert_eq!(
            wait_terminal_real(&h, &run.id).await.status,
            RunStatus::Succeeded
        );
    }
    let calls = h.runner.calls.lock().unwrap().clone();
    let b_at = calls.iter().position(|(run, _, _)| *run == b.id).unwrap();
    assert!(b_at <= 2, "{b_at} of a's steps ran before b's: {calls:?}");
    h.shutdown.cancel();
}
