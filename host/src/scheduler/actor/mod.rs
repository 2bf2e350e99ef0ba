//! The scheduler actor: owns active runs, the dispatch queue and timers.
//! Every state change goes to the store (with its events) before the actor
//! moves on; see the module docs of `scheduler` for the why.
//!
//! The actor is the imperative shell around the pure `scheduler::core`: it
//! receives events, asks the core what they mean for a run, and applies the
//! [`Effect`]s ([`Actor::apply`]). One `impl Actor` per concept:
//! - this file: the state, the main loop, answering commands;
//! - `active`: a run held in memory (the core's state plus its attempts' cancellation);
//! - `recovery`: rebuilding memory from the store at start;
//! - `parked`: the head of the persistent queue held in memory, refilled;
//! - `spill`: large inputs of queued runs left in the store until needed;
//! - `create`: manual and `after` triggers, new runs, storing them per loop turn;
//! - `run_bytes`: each tenant's run data as the `run_bytes` check estimates it;
//! - `apply`: many task definitions stored in one write (bulk apply);
//! - `fire`: time triggers, schedules, due timers, firing;
//! - `window`: the fire window, the tasks armed in memory;
//! - `advance`: moving a run on, conditions, applying effects, finishing runs;
//! - `attempts`: dispatching, starting attempts, their results, retries;
//! - `control`: cancel, retry, requeue, rerun a step;
//! - `tasks`: task definitions read from the store, in a bounded cache;
//! - `tenants`: tenant quotas pushed to the dispatch queue;
//! - `write`: dirty tracking, write-behind and the run writer;
//! - `faults`: a store that refuses writes: pausing, probing, resuming.

mod active;
mod advance;
mod apply;
mod attempts;
mod changed;
mod control;
mod create;
mod faults;
mod fire;
mod parked;
mod recovery;
mod run_bytes;
mod spill;
mod tasks;
mod tenants;
mod window;
mod write;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rand::SeedableRng;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::clock::{Clock, from_ms};
use super::cond_pool::{CondDone, CondPool};
use super::core::fire::TaskRuns;
use super::queue::{DispatchQueue, Entry};
use super::quota::{Grant, TenantQuota};
use super::runner::Runner;
use super::{Command, Error, Result, SchedulerConfig, Stats};
use crate::model::ids::TaskKey;
use crate::model::{AttemptReport, Millis, RunRecord, RunStatus, TriggerKind};
use crate::store::{Store, new_id};
use crate::tenant::UsageBucket;

use self::active::ActiveRun;
use self::create::{Inserting, PendingRun};
use self::write::{Dirty, InFlight, WriteJob, off_actor, spawn_writer};

/// Commands drained per wake-up before dispatching (amortises the dispatch scan).
const BATCH: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Fire(TaskKey),
    Retry {
        run_id: String,
        step: usize,
    },
    /// A tenant's fuel window ends: count from zero, release held runs.
    Window {
        tenant: String,
    },
    /// A run created ahead of its instant may start.
    Release {
        run_id: String,
    },
    /// The fire window moves on: arm the tasks due within it (`fire`).
    Refill,
    /// The store refuses writes: try one (`faults`).
    Probe,
    /// A step whose start could not read the store goes back in line
    /// (`attempts`).
    Requeue(Entry),
}

struct AttemptDone {
    run_id: String,
    step: usize,
    attempt: u32,
    tenant: String,
    /// The run's task (the usage bucket's key, also once the run is gone).
    task: String,
    pool: String,
    /// What was reserved from the tenant's window budgets for the attempt.
    grant: Grant,
    /// Whether its timeout was cut to the tenant's wall time left.
    wall_cut: bool,
    result: std::result::Result<AttemptReport, super::runner::HostFault>,
}

/// What a new run comes from.
struct Origin {
    trigger: TriggerKind,
    scheduled_for: Millis,
    input: serde_json::Value,
    idempotency_key: Option<String>,
    /// The run whose end started this one (`after`).
    upstream_run: Option<String>,
    priority: u8,
}

pub(super) struct Actor {
    store: Arc<dyn Store>,
    runner: Arc<dyn Runner>,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
    stats: Arc<Stats>,
    queue: DispatchQueue,
    runs: HashMap<String, ActiveRun>,
    timers: BTreeSet<(Millis, Timer)>,
    /// The timer entry of each task's next fire, to replace it on change.
    fire_timers: HashMap<TaskKey, Millis>,
    /// The tasks whose next fire is within the window, armed (`window`).
    /// The actor writes schedule progress; other changes arrive as commands.
    window: self::window::FireWindow,
    /// Parsed task definitions, bounded (`tasks`).
    tasks: self::tasks::TaskCache,
    /// The store's `after` index by (tenant, upstream), bounded (`tasks`).
    after: self::tasks::AfterCache,
    /// Active run ids per (tenant, task), oldest first.
    by_task: HashMap<TaskKey, TaskRuns>,
    /// Runs in `queued` state per tenant, parked ones included (for the
    /// queue bound and shedding).
    queued_runs: HashMap<String, usize>,
    /// Each tenant's run data as the `run_bytes` check sees it: a reading
    /// of the store's count plus the runs created since, landed or not, so
    /// a burst of triggers in one turn sees itself (`run_bytes`).
    run_bytes: self::run_bytes::RunBytes,
    /// Readings of run bytes taken off this task come back here.
    reads_tx: mpsc::UnboundedSender<self::run_bytes::ReadDone>,
    reads_rx: Option<mpsc::UnboundedReceiver<self::run_bytes::ReadDone>>,
    /// Queued runs per tenant stored but not held in memory (`parked`).
    parked: HashMap<String, usize>,
    /// The same by task (they count for `overlap`).
    parked_by_task: HashMap<TaskKey, usize>,
    /// Runs in memory whose large input is left in the store (`spill`):
    /// their `rec.input` is `null` until [`Actor::unspill`].
    spilled: HashSet<String>,
    /// When the heads were last refilled (`parked`).
    heads_refilled_at: Millis,
    /// The refill of the heads being read off this task, if one is.
    head_read: Option<self::parked::HeadRead>,
    /// Head reads come back here.
    heads_tx: mpsc::UnboundedSender<self::parked::HeadsRead>,
    heads_rx: Option<mpsc::UnboundedReceiver<self::parked::HeadsRead>>,
    /// Runs changed since the last flush, with their events not yet stored.
    /// Internal transitions are written once per loop turn (write-behind);
    /// anything a client is told about is flushed before the answer.
    dirty: Dirty,
    /// Terminal runs already dropped from `runs`, kept until flushed.
    finished: HashMap<String, RunRecord>,
    /// Runs handed to the writer, not yet stored.
    in_flight: InFlight,
    /// The run writer (from the start of the main loop; before it, during
    /// recovery, runs are written in place).
    writer: Option<mpsc::UnboundedSender<WriteJob>>,
    /// The actor's own mailbox, to take up a command again once the writer
    /// has stored everything before it.
    mailbox: Option<mpsc::WeakUnboundedSender<Command>>,
    done_tx: mpsc::UnboundedSender<AttemptDone>,
    done_rx: Option<mpsc::UnboundedReceiver<AttemptDone>>,
    /// Evaluates `when` conditions off this thread; results come on `cond_rx`.
    cond_pool: CondPool,
    cond_rx: Option<mpsc::UnboundedReceiver<CondDone>>,
    /// The token of the last evaluation handed out.
    cond_token: u64,
    rng: rand::rngs::StdRng,
    /// Per-tenant metrics, looked up without a lock (see `crate::metrics`).
    tenant_metrics: crate::metrics::TenantCache,
    /// Quota state of every tenant with a record.
    quotas: HashMap<String, TenantQuota>,
    /// Usage of finished attempts not yet written, by (tenant, task, hour).
    usage: HashMap<(String, String, Millis), UsageBucket>,
    /// Runs created this turn of the loop, not yet stored (`insert_pending`).
    pending: Vec<PendingRun>,
    /// The store write of earlier pending runs, if one is under way.
    inserting: Option<Inserting>,
    /// Plugin records by (tenant, name, version), read once: versions are
    /// immutable, and a deleted one is forgotten ([`Command::PluginDeleted`]).
    /// Reading sled per attempt waited behind the writer's batches.
    plugins: HashMap<(String, String, String), crate::model::PluginRecord>,
    /// The store refuses writes ([`Operations::writable`](crate::store::Operations::writable)): fires and dispatch
    /// pause and write-behind is held until it writes again (`faults`).
    down: bool,
    /// Tasks to arm again from their stored schedule once the store writes:
    /// fires due while it refused writes, and fires whose runs it refused.
    /// Their missed instants then follow `catch_up`, as after a restart.
    refire: std::collections::HashSet<TaskKey>,
    /// Ended runs whose `after` runs are not stored yet, with how many: the
    /// ended run's own write waits for them (`write_behind`), so a crash
    /// between the two writes cannot keep the end and lose what it started.
    after_holds: HashMap<String, usize>,
    /// Ended runs whose `after` runs the store refused: started again (their
    /// keys `after:<run id>` make that safe) once it writes (`faults`); their
    /// own write waits until then.
    after_refire: std::collections::HashSet<String>,
    /// A probe timer is set (`faults`).
    probing: bool,
    /// The store's generation this memory was built from: a reopened store
    /// lost the writes not on disk, so memory is rebuilt from it (`faults`).
    generation: u64,
}

/// A new dead letter's id (the store's id scheme), for the core.
fn dead_letter_id(now: Millis) -> String {
    new_id("d", now)
}

/// The answer to a trigger: the run, and whether it is new.
type TriggerReply = tokio::sync::oneshot::Sender<Result<(RunRecord, bool)>>;

impl Actor {
    pub(super) fn new(
        store: Arc<dyn Store>,
        runner: Arc<dyn Runner>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
        stats: Arc<Stats>,
    ) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (cond_tx, cond_rx) = mpsc::unbounded_channel();
        let (reads_tx, reads_rx) = mpsc::unbounded_channel();
        let (heads_tx, heads_rx) = mpsc::unbounded_channel();
        let cond_pool = CondPool::new(config.cond_workers, config.cond_budget, cond_tx);
        let now = clock.now_ms();
        let generation = store.generation();
        let rng = config.rng_seed.map_or_else(
            rand::rngs::StdRng::from_os_rng,
            rand::rngs::StdRng::seed_from_u64,
        );
        Self {
            queue: DispatchQueue::new(config.queue.clone(), now),
            tasks: self::tasks::TaskCache::new(config.task_cache),
            after: self::tasks::AfterCache::new(config.task_cache),
            window: self::window::FireWindow::new(config.window.max_armed),
            store,
            runner,
            clock,
            config,
            stats: stats.clone(),
            runs: HashMap::new(),
            timers: BTreeSet::new(),
            fire_timers: HashMap::new(),
            by_task: HashMap::new(),
            queued_runs: HashMap::new(),
            run_bytes: Default::default(),
            reads_tx,
            reads_rx: Some(reads_rx),
            parked: HashMap::new(),
            parked_by_task: HashMap::new(),
            spilled: HashSet::new(),
            heads_refilled_at: Millis::MIN,
            head_read: None,
            heads_tx,
            heads_rx: Some(heads_rx),
            dirty: Dirty::default(),
            finished: HashMap::new(),
            in_flight: InFlight::default(),
            writer: None,
            mailbox: None,
            done_tx,
            done_rx: Some(done_rx),
            cond_pool,
            cond_rx: Some(cond_rx),
            cond_token: 0,
            rng,
            tenant_metrics: crate::metrics::TenantCache::new(stats.tenants.clone()),
            quotas: HashMap::new(),
            usage: HashMap::new(),
            pending: Vec::new(),
            inserting: None,
            plugins: HashMap::new(),
            down: false,
            refire: Default::default(),
            after_holds: HashMap::new(),
            after_refire: Default::default(),
            probing: false,
            generation,
        }
    }

    /// The main loop, until `shutdown`; or until the store was reopened
    /// after a fault, when the mailbox is handed back to start over from
    /// the store (`faults`).
    pub(super) async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        mailbox: mpsc::WeakUnboundedSender<Command>,
        shutdown: CancellationToken,
    ) -> Option<mpsc::UnboundedReceiver<Command>> {
        let mut done_rx = self.done_rx.take().expect("taken once");
        let mut cond_rx = self.cond_rx.take().expect("taken once");
        let mut reads_rx = self.reads_rx.take().expect("taken once");
        let mut heads_rx = self.heads_rx.take().expect("taken once");
        self.writer = Some(spawn_writer(
            self.store.clone(),
            &self.in_flight,
            self.config.alerts.clone(),
            self.config.inline_store,
        ));
        self.mailbox = Some(mailbox);
        let mut last_flush = tokio::time::Instant::now();
        // The system clock wakes on time through an alarm thread; a test
        // clock needs tokio's timer (its paused time).
        let alarm = self
            .clock
            .is_system()
            .then(|| {
                super::clock::Alarm::new()
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "no alarm thread; waking on tokio's timer"),
                    )
                    .ok()
            })
            .flatten();
        let mut reopened = false;
        loop {
            if self.check_store() {
                reopened = true;
                break;
            }
            if !self.parked.is_empty() {
                let now = self.clock.now_ms();
                self.refill_heads(now);
            }
            // While the store refuses writes no attempt starts: its result
            // could not be stored, and memory would grow with them.
            if !self.down {
                self.dispatch();
            }
            self.begin_insert();
            let flush_every = write::FLUSH_EVERY;
            // Held while the store refuses writes: the changes stay merged
            // in `dirty` (one entry per run) instead of queueing a job per
            // turn behind the writer's retries.
            let deferred_due = self.dirty.deferred_due();
            let due = !self.dirty.is_empty()
                || deferred_due.is_some_and(|at| at <= tokio::time::Instant::now());
            if due && last_flush.elapsed() >= flush_every && !self.down {
                self.guard(|a| a.flush());
                last_flush = tokio::time::Instant::now();
            }
            self.publish_gauges();
            // From the exact time, not whole milliseconds: rounding `now`
            // down woke every timer up to 1 ms late (on top of tokio's own
            // rounding up to its 1 ms tick).
            let now = self.clock.now();
            let next_wake = [
                self.timers.first().map(|(at, _)| *at),
                self.queue.next_rate_wakeup(),
                self.heads_wake(),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(|at| {
                let wait = (from_ms(at) - now).to_std().unwrap_or_default();
                tokio::time::Instant::now() + wait
            });
            let flush_at = (!self.down)
                .then(|| {
                    let dirty = (!self.dirty.is_empty()).then_some(last_flush + flush_every);
                    let deferred = self
                        .dirty
                        .deferred_due()
                        .map(|at| at.max(last_flush + flush_every));
                    dirty.into_iter().chain(deferred).min()
                })
                .flatten();
            let wake = [next_wake, flush_at].into_iter().flatten().min();
            let sleep = async {
                match (wake, &alarm) {
                    (Some(at), Some(alarm)) => alarm.sleep_until(at.into_std()).await,
                    (Some(at), None) => tokio::time::sleep_until(at).await,
                    (None, _) => std::future::pending().await,
                }
            };
            let inserted = async {
                match self.inserting.as_mut() {
                    Some(inserting) => {
                        let _ = (&mut inserting.task).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                // Due timers first: firing and releasing on time is the job.
                _ = sleep => self.guard(|a| a.on_timers()),
                () = inserted => self.complete_insert(),
                Some(done) = done_rx.recv() => {
                    self.guard(|a| a.on_done(done));
                    for _ in 0..BATCH {
                        match done_rx.try_recv() {
                            Ok(done) => self.guard(|a| a.on_done(done)),
                            Err(_) => break,
                        }
                    }
                }
                Some(done) = cond_rx.recv() => {
                    self.guard(|a| a.on_condition(done));
                    for _ in 0..BATCH {
                        match cond_rx.try_recv() {
                            Ok(done) => self.guard(|a| a.on_condition(done)),
                            Err(_) => break,
                        }
                    }
                }
                Some(done) = reads_rx.recv() => self.run_bytes.read(done),
                Some(read) = heads_rx.recv() => self.on_heads_read(read),
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    self.handle(cmd);
                    for _ in 0..BATCH {
                        match rx.try_recv() {
                            Ok(cmd) => self.handle(cmd),
                            Err(_) => break,
                        }
                    }
                }
            }
        }
        if reopened {
            // Memory is stale against the reopened store: nothing of it is
            // written; running attempts stop and their runs are taken up
            // from the store, as after a crash. New runs waiting for their
            // insert are inserted now (into the reopened store), so their
            // triggers get an answer rather than a dropped reply.
            self.insert_pending();
            self.stop_attempts();
            return Some(rx);
        }
        // Store what changed before stopping (in order, after earlier batches).
        let (stored_tx, stored_rx) = tokio::sync::oneshot::channel();
        let signal = Box::new(move |_written: Result<()>| {
            let _ = stored_tx.send(());
        });
        self.insert_pending();
        if self.write_behind(Some(signal), true).is_ok() {
            let _ = stored_rx.await;
        }
        // Stop running attempts; their runs are recovered (as lost) on the next start.
        self.stop_attempts();
        None
    }

    fn stop_attempts(&self) {
        for run in self.runs.values() {
            for token in run.cancels.values() {
                token.cancel();
            }
        }
    }

    /// Logs an internal error instead of killing the actor: a store failure on
    /// one run must not stop scheduling for everyone.
    fn guard(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) {
        if let Err(e) = f(self) {
            tracing::error!(error = %e, "scheduler step failed");
        }
    }

    /// Answers a command. Whatever a reply reports is stored first: the
    /// caller then waits for a sync ticket, which covers only earlier writes.
    fn handle(&mut self, cmd: Command) {
        fn answer<T: Send + 'static>(
            actor: &mut Actor,
            reply: tokio::sync::oneshot::Sender<Result<T>>,
            result: Result<T>,
        ) {
            // The reply leaves once what it reports is stored.
            let then = Box::new(move |written: Result<()>| {
                let _ = reply.send(written.and(result));
            });
            if let Err(e) = actor.flush_then(Some(then)) {
                tracing::error!(error = %e, "cannot store a reply's changes");
            }
        }
        if !matches!(cmd, Command::Trigger(..) | Command::TriggerBatch(..)) {
            // Triggers drained together are stored together; anything else
            // sees the runs created before it stored (and writes after them).
            self.insert_pending();
        }
        let cmd = match cmd {
            // These read finished runs back from the store: take them up once
            // the writer has stored everything before them.
            c @ (Command::Retry { .. } | Command::Requeue { .. } | Command::RerunStep { .. }) => {
                return self.after_writes(c);
            }
            Command::AfterWrites(inner) => *inner,
            other => other,
        };
        match cmd {
            Command::AfterWrites(inner) => self.handle(*inner),
            Command::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Command::Purge { mut ids, reply } => {
                // Runs held in memory or not yet written are not history.
                ids.retain(|id| !self.in_memory(id));
                let job = crate::scheduler::retention::purge_job(
                    self.store.clone(),
                    self.stats.clone(),
                    ids,
                    reply,
                );
                if let Err(e) = self.flush_then(Some(job)) {
                    tracing::error!(error = %e, "cannot queue a retention purge");
                }
            }
            // The new run is stored with the others of this turn of the
            // loop before the answer (`insert_pending`); what follows (its
            // first steps queued) may be written behind.
            Command::Trigger(req, reply) => self.on_trigger(req, reply),
            // The whole batch is created in this turn, so its runs go to the
            // store in one write (with any other triggers of the turn).
            Command::TriggerBatch(items) => {
                for (req, reply) in items {
                    self.on_trigger(req, reply);
                }
            }
            Command::PutTasks { records, reply } => {
                let tenants: BTreeSet<_> = records.iter().map(|(r, _)| r.tenant.clone()).collect();
                for tenant in tenants {
                    self.forget_after_edges(&tenant);
                }
                let r = self.on_put_tasks(records);
                answer(self, reply, r);
            }
            Command::PluginDeleted {
                tenant,
                name,
                version,
            } => {
                self.plugins.remove(&(tenant, name, version));
            }
            Command::TaskChanged { tenant, task } => {
                self.forget_after_edges(&tenant);
                self.tasks
                    .remove(&TaskKey::new(tenant.as_str(), task.as_str()));
                self.guard(|a| a.on_task_changed(&tenant, &task))
            }
            Command::TenantChanged { record, reply } => {
                self.on_tenant_changed(&record);
                let _ = reply.send(Ok(()));
            }
            Command::PutTask { record, reply } => {
                self.forget_after_edges(&record.tenant);
                let r = self.on_put_task(*record);
                answer(self, reply, r);
            }
            Command::DeleteTask {
                tenant,
                task,
                reply,
            } => {
                self.forget_after_edges(&tenant);
                let r = self.store.delete_task(&tenant, &task).map_err(Error::from);
                let key = TaskKey::new(tenant.as_str(), task.as_str());
                self.window.forget(&key);
                self.tasks.remove(&key);
                self.disarm_fire(&tenant, &task);
                answer(self, reply, r);
            }
            Command::SetPaused {
                tenant,
                task,
                paused,
                reply,
            } => {
                let r = self.on_set_paused(&tenant, &task, paused);
                answer(self, reply, r);
            }
            Command::Cancel {
                run_id,
                actor,
                reply,
            } => {
                let r = self.on_cancel(&run_id, &actor);
                answer(self, reply, r);
            }
            Command::Retry {
                run_id,
                actor,
                reply,
            } => {
                let r = self.on_retry(&run_id, &actor);
                answer(self, reply, r);
            }
            Command::Requeue {
                dead_letter,
                actor,
                reply,
            } => {
                let r = self.on_requeue(&dead_letter, &actor);
                answer(self, reply, r);
            }
            Command::RerunStep {
                run_id,
                step,
                actor,
                reply,
            } => {
                let r = self.on_rerun_step(&run_id, &step, &actor);
                answer(self, reply, r);
            }
        }
    }

    /// Queue gauges per tenant for a metrics scrape: O(active runs).
    fn snapshot(&self) -> super::Snapshot {
        let now = self.clock.now_ms();
        let mut tenants: std::collections::BTreeMap<&str, super::TenantQueue> = Default::default();
        for run in self.runs.values() {
            if run.rec.status == RunStatus::Queued {
                let t = tenants.entry(&run.rec.tenant).or_default();
                t.queued_runs += 1;
                let age = (now - run.rec.created_at).max(0) as u64;
                t.oldest_queued_ms = t.oldest_queued_ms.max(age);
            }
        }
        for (tenant, parked) in &self.parked {
            tenants.entry(tenant).or_default().queued_runs += parked;
        }
        for (tenant, steps) in self.queue.queued_by_tenant() {
            tenants.entry(tenant).or_default().queued_steps = steps;
        }
        super::Snapshot {
            tenants: tenants
                .into_iter()
                .map(|(name, t)| super::TenantQueue {
                    tenant: name.to_string(),
                    ..t
                })
                .collect(),
            active_runs: self.runs.len(),
            armed_tasks: self.window.len(),
            cached_tasks: self.tasks.len(),
            timers: self.timers.len(),
            parked_runs: self.parked.values().sum(),
            spilled_runs: self.spilled.len(),
        }
    }

    fn publish_gauges(&self) {
        self.stats
            .running
            .store(self.queue.running() as u64, Ordering::Relaxed);
        self.stats
            .queued
            .store(self.queue.queued() as u64, Ordering::Relaxed);
    }
}
