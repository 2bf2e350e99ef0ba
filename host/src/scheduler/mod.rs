//! When things run: the firing timer, the dispatch queue, execution of
//! attempts, retries, dead letters, cancellation and crash recovery.
//!
//! One actor task owns all mutable scheduling state (active runs, the
//! dispatch queue, timers) and is the only writer of runs to the store, so
//! there are no locks to reason about and state changes happen in one order.
//! Attempts run as their own tokio tasks and report back to the actor.
//! Reads (show a run, list runs) go straight to the store, which the actor
//! keeps current on every change.
//!
//! The decisions about runs (step transitions, trigger rules, `when`, retry
//! and dead letters, run control, overlap and catch-up) are the pure
//! `core`'s, tested without tokio; the actor (`actor/`, one file per
//! concept) receives events, calls the core and applies its effects.
//!
//! What it does not own: validating task definitions (`task`), computing fire
//! instants (`schedule`), running wasm (`runtime`, behind [`Runner`]), HTTP.
//! Design notes: docs/SCHEDULER.md.

mod actor;
pub mod alerts;
pub mod clock;
mod cond_pool;
mod core;
mod lease;
pub mod queue;
mod quota;
pub mod retention;
pub mod runner;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::model::ids::{RunId, TaskName, TenantId};
use crate::model::{Outcome, RunRecord, ScheduleState, TaskRecord};
use crate::store::{self, Store};
use crate::tenant::TenantRecord;

pub use self::clock::{Clock, SystemClock, TokioClock};
pub use self::cond_pool::COND_WORKERS;
pub(crate) use self::core::admission;
pub use self::queue::{PoolConfig, QueueConfig};
pub use self::runner::{AttemptRequest, HostFault, RunFuture, Runner};

/// A task record's definition as the caller's check parsed it, and its
/// trigger compiled (anchored at the record's creation), handed to the
/// scheduler with the record so that it is not done twice.
#[derive(Clone)]
pub struct ParsedTask {
    /// The record's `spec`, parsed.
    pub spec: Arc<crate::task::TaskSpec>,
    /// Its trigger, compiled.
    pub trigger: Arc<crate::schedule::Trigger>,
}

/// Errors the scheduler answers with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such run, task or dead letter (for this tenant).
    #[error("{0} not found")]
    NotFound(String),
    /// The tenant's queue is full: try again later.
    #[error("the queue of tenant `{tenant}` is full ({queued} runs waiting); retry in {}s", retry_after.as_secs())]
    QueueFull {
        /// The tenant.
        tenant: String,
        /// Runs waiting.
        queued: usize,
        /// A hint for `Retry-After`.
        retry_after: Duration,
    },
    /// A tenant quota refuses the request for now (trigger rate, fuel
    /// budget with `out_of_fuel: refuse`).
    #[error("{message}")]
    Quota {
        /// What limit, and until when.
        message: String,
        /// A hint for `Retry-After`.
        retry_after: Duration,
    },
    /// A new run would take its tenant's stored run data over its
    /// `run_bytes` quota (nothing is stored).
    #[error("{0}")]
    RunBytesQuota(String),
    /// The request conflicts with the object's state (e.g. retrying a running run).
    #[error("{0}")]
    Conflict(String),
    /// A trigger's idempotency key belongs to a run that retention has
    /// deleted: the run is not created again (the key is remembered until
    /// its `idempotency_ttl` ends).
    #[error(
        "idempotency key `{key}` of task `{task}` already started run {run}, which has since been deleted from history (retention); the key is remembered until its idempotency_ttl ends"
    )]
    RunDeleted {
        /// The task.
        task: String,
        /// The key.
        key: String,
        /// The deleted run's id.
        run: String,
    },
    /// A trigger's input or params do not fit the task's `params:`.
    #[error(transparent)]
    Params(#[from] crate::task::ParamError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The scheduler has stopped.
    #[error("the scheduler is shutting down")]
    Stopped,
}

/// Result type of the scheduler.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<admission::LimitRefusal> for Error {
    fn from(refusal: admission::LimitRefusal) -> Self {
        use admission::LimitRefusal as R;
        match refusal {
            R::QueueFull { tenant, queued } => Error::QueueFull {
                tenant,
                queued,
                retry_after: admission::QUEUE_FULL_RETRY,
            },
            R::RunBytes { .. } => Error::RunBytesQuota(refusal.to_string()),
            R::OutOfBudget { retry_after, .. } | R::TriggerRate { retry_after, .. } => {
                Error::Quota {
                    message: refusal.to_string(),
                    retry_after,
                }
            }
        }
    }
}

/// Scheduler settings.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Concurrency limits, reserved share and pools.
    pub queue: QueueConfig,
    /// Runs a tenant may have waiting before triggers get 429.
    pub max_queued_per_tenant: usize,
    /// Runs waiting (all tenants) past which low-priority runs are shed.
    pub high_water: usize,
    /// Priorities below this are shed past the high-water mark.
    pub shed_below_priority: u8,
    /// Attempts lost to host crashes that do not count against a step's retries.
    pub max_lost_attempts: u32,
    /// Where webhook alerts go (inert by default: no worker, no webhooks).
    pub alerts: crate::scheduler::alerts::Alerter,
    /// How long before its instant a scheduled run is created and stored;
    /// it starts at the instant ([`FIRE_AHEAD_MS`]).
    pub fire_ahead_ms: crate::model::Millis,
    /// The host's per-attempt caps (config `caps`); a tenant's quota lowers
    /// them. Every start clamps a step's limits, defaults included, to them.
    pub caps: crate::model::Caps,
    /// Threads evaluating `when` conditions off the actor ([`COND_WORKERS`]).
    pub cond_workers: usize,
    /// The limits of one condition evaluation (default: the budget the
    /// check on save assumes, see [`crate::cond::Budget`]).
    pub cond_budget: crate::cond::Budget,
    /// Which fires are held in memory ([`FireWindow`]).
    pub window: FireWindow,
    /// Parsed task definitions kept in memory, at most (least recently
    /// used ones are dropped and read again from the store when needed).
    pub task_cache: usize,
    /// Queued runs of one tenant held in memory, at most (the others wait
    /// in the store's queue index; see `actor/parked.rs`).
    pub queue_head: usize,
    /// Seeds the scheduler's own randomness (retry jitter) for a replayable
    /// run (the simulator's); `None` draws a seed from the OS.
    pub rng_seed: Option<u64>,
    /// Runs the actor's store calls (new runs' inserts, the run writer's
    /// batches) on the actor's own thread instead of `spawn_blocking`. The
    /// simulator sets it: on its `current_thread` runtime every store call
    /// then lands at a point the seed decides, so a seed replays exactly
    /// under any CPU load. A real server leaves it off (the actor must not
    /// wait for the store while runs are due).
    pub inline_store: bool,
    /// How long a run's idempotency key is remembered when its task does
    /// not say (`retention.idempotency_ttl` of the config and of a task).
    pub idempotency_ttl: std::time::Duration,
}

/// The fires the scheduler holds in memory: those due within `ahead_ms`,
/// read from the store's next-fire index every `refill_ms`, at most
/// `max_armed` tasks (then the window shrinks to what fits). The rest of the
/// tasks stay in the store; see docs/SCHEDULER.md, "Memory".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FireWindow {
    /// How far ahead of now fires are held (ms).
    pub ahead_ms: crate::model::Millis,
    /// How often the window moves on (ms).
    pub refill_ms: crate::model::Millis,
    /// Most tasks armed at once.
    pub max_armed: usize,
}

impl Default for FireWindow {
    fn default() -> Self {
        Self {
            ahead_ms: 60_000,
            refill_ms: 1_000,
            max_armed: 100_000,
        }
    }
}

/// Scheduled runs are stored this long before their instant, so the store's
/// write (p999 3–7 ms, worst 15 ms in the fire benchmark) is not part of their
/// lateness. Longer would only move creation further from the instant.
pub const FIRE_AHEAD_MS: crate::model::Millis = 20;

impl Default for SchedulerConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            queue: QueueConfig::for_cores(cores),
            max_queued_per_tenant: 10_000,
            high_water: 50_000,
            shed_below_priority: 3,
            max_lost_attempts: 3,
            alerts: crate::scheduler::alerts::Alerter::default(),
            fire_ahead_ms: FIRE_AHEAD_MS,
            caps: crate::model::Caps::UNLIMITED,
            cond_workers: COND_WORKERS,
            cond_budget: crate::cond::Budget::default(),
            window: FireWindow::default(),
            task_cache: 10_000,
            queue_head: 1_000,
            rng_seed: None,
            inline_store: false,
            idempotency_ttl: crate::task::retention::DEFAULT_IDEMPOTENCY_TTL,
        }
    }
}

/// A manual (API/CLI) trigger.
#[derive(Clone, Debug, Default)]
pub struct TriggerRequest {
    /// Tenant.
    pub tenant: TenantId,
    /// Task name.
    pub task: TaskName,
    /// Trigger input (`${input.*}`), default `{}`; for a task with
    /// `params:`, a mapping of param values (`TaskSpec::manual_input`).
    pub input: Option<serde_json::Value>,
    /// Values of the task's declared params, over `input`'s and the defaults.
    pub params: Option<serde_json::Map<String, serde_json::Value>>,
    /// A key already seen for this task returns the existing run.
    pub idempotency_key: Option<String>,
    /// Overrides the task's priority.
    pub priority: Option<u8>,
    /// Who asked (recorded in events).
    pub actor: String,
}

/// Counters the API exposes as metrics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Attempts finished, by outcome (index = position in [`Outcome::ALL`]).
    pub attempts: [AtomicU64; 9],
    /// Runs created.
    pub runs_created: AtomicU64,
    /// Retries scheduled.
    pub retries: AtomicU64,
    /// Dead letters recorded.
    pub dead_letters: AtomicU64,
    /// Runs shed under load.
    pub shed: AtomicU64,
    /// Fires skipped by `overlap: skip` / `queue_one`.
    pub overlap_skips: AtomicU64,
    /// Attempts running now.
    pub running: AtomicU64,
    /// Steps waiting in the dispatch queue now.
    pub queued: AtomicU64,
    /// Fire lateness samples (scheduled instant → first attempt start), ms,
    /// since the last [`Stats::take_lateness`]; at most [`MAX_LATENESS_SAMPLES`]
    /// are kept (later ones are dropped) so a server nobody reads stays bounded.
    pub lateness: std::sync::Mutex<Vec<f64>>,
    /// Per-tenant counters and histograms (`GET /metrics`); the actor
    /// updates them through its own lock-free [`crate::metrics::TenantCache`].
    pub tenants: Arc<crate::metrics::TenantRegistry>,
    /// Finished runs deleted by retention.
    pub runs_deleted: AtomicU64,
    /// The alert handle (its delivery counters are metrics).
    pub alerts: crate::scheduler::alerts::Alerter,
    /// Why each held tenant's runs wait (fuel used up, disabled).
    pub holds: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

/// Bound on the lateness samples kept between two reads.
pub const MAX_LATENESS_SAMPLES: usize = 100_000;

impl Stats {
    pub(crate) fn record_lateness(&self, ms: f64) {
        let mut samples = self
            .lateness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if samples.len() < MAX_LATENESS_SAMPLES {
            samples.push(ms);
        }
    }

    pub(crate) fn count_attempt(&self, outcome: Outcome) {
        if let Some(i) = Outcome::ALL.iter().position(|o| *o == outcome) {
            self.attempts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn set_hold(&self, tenant: &str, reason: Option<String>) {
        let mut holds = self
            .holds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match reason {
            Some(r) => holds.insert(tenant.to_string(), r),
            None => holds.remove(tenant),
        };
    }

    /// Why `tenant`'s runs are held, if they are.
    pub fn hold_reason(&self, tenant: &str) -> Option<String> {
        self.holds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(tenant)
            .cloned()
    }

    /// Takes the lateness samples recorded since the last call.
    pub fn take_lateness(&self) -> Vec<f64> {
        std::mem::take(
            &mut *self
                .lateness
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Where a trigger's run (and whether it is new) is answered.
type TriggerAnswer = oneshot::Sender<Result<(RunRecord, bool)>>;

enum Command {
    Trigger(TriggerRequest, TriggerAnswer),
    /// Many triggers taken up in one turn of the loop, so their runs are
    /// stored in one write; each is answered on its own sender once stored.
    TriggerBatch(Vec<(TriggerRequest, TriggerAnswer)>),
    /// Many validated task definitions, stored in one write.
    PutTasks {
        records: Vec<(TaskRecord, Option<ParsedTask>)>,
        reply: oneshot::Sender<Result<Vec<ScheduleState>>>,
    },
    TaskChanged {
        tenant: String,
        task: String,
    },
    PluginDeleted {
        tenant: String,
        name: String,
        version: String,
    },
    TenantChanged {
        record: Box<TenantRecord>,
        reply: oneshot::Sender<Result<()>>,
    },
    PutTask {
        record: Box<TaskRecord>,
        reply: oneshot::Sender<Result<ScheduleState>>,
    },
    DeleteTask {
        tenant: String,
        task: String,
        reply: oneshot::Sender<Result<bool>>,
    },
    SetPaused {
        tenant: String,
        task: String,
        paused: bool,
        reply: oneshot::Sender<Result<ScheduleState>>,
    },
    Cancel {
        run_id: RunId,
        actor: String,
        reply: oneshot::Sender<Result<RunRecord>>,
    },
    Retry {
        run_id: RunId,
        actor: String,
        reply: oneshot::Sender<Result<RunRecord>>,
    },
    Requeue {
        dead_letter: String,
        actor: String,
        reply: oneshot::Sender<Result<RunRecord>>,
    },
    RerunStep {
        run_id: RunId,
        step: String,
        actor: String,
        reply: oneshot::Sender<Result<RunRecord>>,
    },
    /// A command taken up again once the writer stored every earlier change.
    AfterWrites(Box<Command>),
    /// Gauges computed from the actor's state, for a metrics scrape.
    Snapshot(oneshot::Sender<Snapshot>),
    /// Deletes finished runs (retention), ordered after queued writes.
    Purge {
        ids: Vec<String>,
        reply: oneshot::Sender<Result<u64>>,
    },
}

/// Queue gauges of one tenant at one instant (for `GET /metrics`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantQueue {
    /// The tenant.
    pub tenant: String,
    /// Runs in state `queued` (the backlog `max_queued_per_tenant` bounds).
    pub queued_runs: usize,
    /// Steps waiting in the dispatch queue for a slot.
    pub queued_steps: usize,
    /// Age of the oldest run in state `queued`, ms (0 without one).
    pub oldest_queued_ms: u64,
}

/// What the scheduler reports of its in-memory state to a metrics scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Per tenant with queued work, by name.
    pub tenants: Vec<TenantQueue>,
    /// Active (queued or running) runs held in memory.
    pub active_runs: usize,
    /// Tasks armed: their next fire is within the fire window.
    pub armed_tasks: usize,
    /// Parsed task definitions cached (bounded by `task_cache`).
    pub cached_tasks: usize,
    /// Timers set (fires, retries, releases, windows).
    pub timers: usize,
    /// Queued runs left in the store, not held in memory (all tenants).
    pub parked_runs: usize,
    /// Queued runs in memory whose large input is left in the store until
    /// they start (`actor/spill.rs`).
    pub spilled_runs: usize,
}

/// A handle to the scheduler actor. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    tx: mpsc::UnboundedSender<Command>,
    stats: Arc<Stats>,
}

impl Scheduler {
    /// Recovers state from `store` (lost attempts, queued work, missed fires)
    /// and starts the actor. It stops when `shutdown` fires.
    pub async fn start(
        store: Arc<dyn Store>,
        runner: Arc<dyn Runner>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
        shutdown: CancellationToken,
    ) -> Result<(Self, tokio::task::JoinHandle<()>)> {
        let stats = Arc::new(Stats {
            alerts: config.alerts.clone(),
            ..Stats::default()
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let fresh = {
            let stats = stats.clone();
            move || {
                actor::Actor::new(
                    store.clone(),
                    runner.clone(),
                    clock.clone(),
                    config.clone(),
                    stats.clone(),
                )
            }
        };
        let mut actor = fresh();
        actor.recover()?;
        let mailbox = tx.downgrade();
        let handle = tokio::spawn(async move {
            let mut rx = rx;
            // The store was reopened after a fault (it lost the writes not
            // yet on disk): a new actor recovers from it, as after a crash,
            // and takes the same mailbox (docs/RELIABILITY.md, "Store faults").
            while let Some(back) = actor.run(rx, mailbox.clone(), shutdown.clone()).await {
                rx = back;
                loop {
                    actor = fresh();
                    match actor.recover() {
                        Ok(()) => break,
                        Err(e) => {
                            tracing::error!(error = %e, "recovering from the reopened store failed; retrying");
                            tokio::select! {
                                _ = shutdown.cancelled() => return,
                                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            }
                        }
                    }
                }
            }
        });
        Ok((Self { tx, stats }, handle))
    }

    /// Applies a created or changed tenant (quota, disabled) to the next
    /// attempts; held runs are released at once if the change allows.
    pub async fn tenant_changed(&self, record: TenantRecord) -> Result<()> {
        self.ask(|reply| Command::TenantChanged {
            record: Box::new(record),
            reply,
        })
        .await
    }

    /// Counters for metrics.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Deletes finished runs by id (retention). Runs the scheduler holds in
    /// memory or has not written yet are skipped; the deletion is queued on
    /// the run writer after every write before it. Answers how many went.
    pub async fn purge(&self, ids: Vec<String>) -> Result<u64> {
        self.ask(|reply| Command::Purge { ids, reply }).await
    }

    /// Queue depth and oldest queued age per tenant, computed by the actor
    /// (O(active runs), once per scrape; never on the hot path).
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Snapshot(reply))
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Command) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)?
    }

    /// Creates a run (or returns the existing one for a known idempotency key:
    /// the flag says whether it was created). The caller waits for a store
    /// sync ticket before answering a client.
    pub async fn trigger(&self, request: TriggerRequest) -> Result<(RunRecord, bool)> {
        self.ask(|reply| Command::Trigger(request, reply)).await
    }

    /// Triggers many runs in one turn of the actor, so the new ones are
    /// stored in one write. One answer per request, in order: the run and
    /// whether it is new, or why this one was refused (queue bound, quota,
    /// unknown task). The caller waits for a store sync ticket before
    /// answering a client.
    pub async fn trigger_batch(
        &self,
        requests: Vec<TriggerRequest>,
    ) -> Result<Vec<Result<(RunRecord, bool)>>> {
        let (items, answers): (Vec<_>, Vec<_>) = requests
            .into_iter()
            .map(|request| {
                let (reply, rx) = oneshot::channel();
                ((request, reply), rx)
            })
            .unzip();
        self.tx
            .send(Command::TriggerBatch(items))
            .map_err(|_| Error::Stopped)?;
        let mut out = Vec::with_capacity(answers.len());
        for rx in answers {
            out.push(rx.await.map_err(|_| Error::Stopped)?);
        }
        Ok(out)
    }

    /// Stores validated task definitions in one store write and (re)arms
    /// their triggers, as [`Scheduler::put_task`] does for one; the schedule
    /// states are answered in order. All are stored or none. Each record may
    /// come with its definition parsed and trigger compiled already by the
    /// caller's check ([`ParsedTask`]): the actor, which every save passes
    /// through, then does neither again (a cron trigger's compilation was a
    /// fifth of a bulk apply's CPU, reading the definition back 7 %).
    pub async fn put_tasks(
        &self,
        records: Vec<(TaskRecord, Option<ParsedTask>)>,
    ) -> Result<Vec<ScheduleState>> {
        self.ask(|reply| Command::PutTasks { records, reply }).await
    }

    /// Stores a validated task definition and (re)arms its trigger. The
    /// scheduler is the only writer of schedule state, so a fire racing with
    /// an edit or a pause can never undo it. A replaced definition fires from
    /// now on; an `at`/`delay` that already fired does not fire again.
    pub async fn put_task(&self, record: TaskRecord) -> Result<ScheduleState> {
        self.ask(|reply| Command::PutTask {
            record: Box::new(record),
            reply,
        })
        .await
    }

    /// Deletes a task and its schedule; false if there was none.
    pub async fn delete_task(&self, tenant: &str, task: &str) -> Result<bool> {
        let (tenant, task) = (tenant.to_string(), task.to_string());
        self.ask(|reply| Command::DeleteTask {
            tenant,
            task,
            reply,
        })
        .await
    }

    /// Pauses or resumes a task's trigger (resuming fires from now on; missed
    /// instants are not caught up).
    pub async fn set_paused(
        &self,
        tenant: &str,
        task: &str,
        paused: bool,
    ) -> Result<ScheduleState> {
        let (tenant, task) = (tenant.to_string(), task.to_string());
        self.ask(|reply| Command::SetPaused {
            tenant,
            task,
            paused,
            reply,
        })
        .await
    }

    /// Reloads a task's schedule from the store (after a change made elsewhere).
    pub fn task_changed(&self, tenant: &str, task: &str) {
        let _ = self.tx.send(Command::TaskChanged {
            tenant: tenant.to_string(),
            task: task.to_string(),
        });
    }

    /// Forgets a deleted plugin version (the scheduler keeps the records
    /// it has read: versions are immutable until deleted).
    pub fn plugin_deleted(&self, tenant: &str, name: &str, version: &str) {
        let _ = self.tx.send(Command::PluginDeleted {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version: version.to_string(),
        });
    }

    /// Cancels a run: queued steps are dropped, running attempts stopped.
    pub async fn cancel(&self, run_id: &RunId, actor: &str) -> Result<RunRecord> {
        let (run_id, actor) = (run_id.clone(), actor.to_string());
        self.ask(|reply| Command::Cancel {
            run_id,
            actor,
            reply,
        })
        .await
    }

    /// Retries a failed or cancelled run from its unsuccessful steps; succeeded steps keep their outputs.
    pub async fn retry(&self, run_id: &RunId, actor: &str) -> Result<RunRecord> {
        let (run_id, actor) = (run_id.clone(), actor.to_string());
        self.ask(|reply| Command::Retry {
            run_id,
            actor,
            reply,
        })
        .await
    }

    /// Runs one step of a finished run again, with every step downstream of
    /// it; the other steps keep their results.
    pub async fn rerun_step(&self, run_id: &RunId, step: &str, actor: &str) -> Result<RunRecord> {
        let (run_id, step, actor) = (run_id.clone(), step.to_string(), actor.to_string());
        self.ask(|reply| Command::RerunStep {
            run_id,
            step,
            actor,
            reply,
        })
        .await
    }

    /// Puts a dead-lettered step back in the queue for one more round of attempts.
    pub async fn requeue(&self, dead_letter: &str, actor: &str) -> Result<RunRecord> {
        let (dead_letter, actor) = (dead_letter.to_string(), actor.to_string());
        self.ask(|reply| Command::Requeue {
            dead_letter,
            actor,
            reply,
        })
        .await
    }
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
