//! Scheduler tests on the in-memory store, a scripted runner and tokio's
//! paused clock: firing, catch-up, overlap, retries, dead letters, recovery
//! and bounds, without real sleeps or wasm.
//!
//! This file holds what they share: the scripted [`FakeRunner`], the
//! [`Harness`] that starts a scheduler on a store and a clock, and the
//! helpers that restart it or poll a run. The tests are one file per subject:
//!
//! - `runs`: manual triggers, idempotency, cancel, retry and rerun;
//! - `firing`: cron and interval fires, runs stored ahead, overlap;
//! - `retries`: backoff, fatal errors, dead letters;
//! - `dag`: step order, trigger rules, `after` triggers between tasks;
//! - `deferred`: a new run's ready steps written with its next change;
//! - `deferred`: a new run's ready steps written with its next change;
//! - `faults`: a store that refuses writes (held fires, paused dispatch, resuming);
//! - `recovery`: restarts, missed fires (catch-up), attempts lost at a crash;
//! - `limits`: the host's bounds (queue bounds, shedding, host caps);
//! - `quotas`: a tenant's fuel and wall-time budgets and what they charge;
//! - `fairness`: tenants sharing the slots (flooding, ceilings, running caps);
//! - `conditions`: `when` conditions evaluated off the actor;
//! - `params`: a run's input from the task's `params:` (fires, `after`, manual);
//! - `head`: the queue's head in memory, the rest parked in the store;
//! - `window`: the fire window (tasks held in memory only when due soon);
//! - `versions`: plugin ranges and tags resolved at each attempt's start;
//! - `alerts`: alerts stored with the run change that raised them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::model::ids::RunId;
use crate::model::{
    AttemptReport, ErrorKind, Outcome, PluginRecord, RECORD_FORMAT, RunStatus, StepStatus,
    TaskRecord,
};
use crate::schedule::Trigger;
use crate::store::RunQuery;
use crate::store::memory::MemoryStore;
use crate::store::prelude::*;
use crate::task::{self, TaskSpec};

mod alerts;
mod bulk;
mod conditions;
mod dag;
mod deferred;
mod fairness;
mod faults;
mod firing;
mod head;
mod limits;
mod params;
mod quotas;
mod recovery;
mod retention;
mod retries;
mod runs;
mod spill;
mod versions;
mod window;

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

/// A run's id as the scheduler's run-control calls take it.
fn run_id(run: &RunRecord) -> RunId {
    run.id.clone()
}

/// A first version of the task `yaml` defines, as the service stores it.
fn task_record(tenant: &str, yaml: &str, now: DateTime<Utc>) -> TaskRecord {
    let spec = task::parse(yaml).unwrap();
    TaskRecord {
        format: RECORD_FORMAT,
        tenant: tenant.into(),
        name: spec.name.clone(),
        spec: serde_json::to_value(&spec).unwrap().into(),
        source: yaml.into(),
        created_at: now.timestamp_millis(),
        updated_at: now.timestamp_millis(),
        version: 1,
    }
}

/// The stored runs of `tenant`'s `task`, oldest first (up to 1,000).
fn stored_runs(store: &dyn Store, tenant: &str, task: &str) -> Vec<RunRecord> {
    let mut runs = store
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
                    status: crate::model::PluginStatus::Ready,
                    error: None,
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
        self.scheduler
            .put_task(task_record(tenant, yaml, now))
            .await
            .unwrap();
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
        stored_runs(&*self.store, tenant, task)
    }

    /// Lets the actor and attempt tasks run until `run` is terminal (bounded).
    async fn wait_terminal(&self, id: &str) -> RunRecord {
        self.poll(id, Patience::Paused, |run| run.status.is_terminal())
            .await
    }

    /// Reads the stored run every 10 ms (letting the actor and the attempts
    /// run meanwhile) until `done` holds for it; panics when `patience` runs
    /// out.
    async fn poll(
        &self,
        id: &str,
        patience: Patience,
        done: impl Fn(&RunRecord) -> bool,
    ) -> RunRecord {
        let started = std::time::Instant::now();
        let mut polls = 0;
        while patience.allows(polls, started) {
            let run = self.store.get_run(id).unwrap().unwrap();
            if done(&run) {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            polls += 1;
        }
        panic!(
            "run {id} did not get there in time: {:?}",
            self.store.get_run(id).unwrap()
        );
    }
}

/// How long [`Harness::poll`] goes on before it gives up.
#[derive(Clone, Copy)]
enum Patience {
    /// 10,000 polls on the paused clock (100 s of virtual time, which the
    /// paused clock skips through at no real cost).
    Paused,
    /// 30 s of real time: a condition is evaluated on a thread of its own,
    /// in real time, while virtual time runs on.
    Real,
}

impl Patience {
    /// Whether another poll may follow the `polls` made since `started`.
    fn allows(self, polls: u32, started: std::time::Instant) -> bool {
        match self {
            Self::Paused => polls < 10_000,
            Self::Real => started.elapsed() < Duration::from_secs(30),
        }
    }
}

fn test_config() -> SchedulerConfig {
    SchedulerConfig {
        queue: QueueConfig::for_cores(4),
        ..SchedulerConfig::default()
    }
}

/// Starts a scheduler on `store` at `at` (a "restart" after downtime).
async fn restart_at(store: Arc<MemoryStore>, at: DateTime<Utc>) -> Harness {
    let clock = Arc::new(TokioClock::starting_at(at));
    Harness::start_at(store, Arc::new(FakeRunner::default()), clock, test_config()).await
}

fn tenant_record(name: &str, quota: crate::tenant::Quota) -> crate::tenant::TenantRecord {
    crate::tenant::TenantRecord::new(name, quota, 0)
}
