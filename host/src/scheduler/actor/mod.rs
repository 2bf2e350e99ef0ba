//! The scheduler actor: owns active runs, the dispatch queue and timers.
//! Every state change goes to the store (with its events) before the actor
//! moves on; see the module docs of `scheduler` for the why.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rand::SeedableRng;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::clock::{Clock, from_ms, rfc3339};
use super::cond_pool::{CondDone, CondJob, CondPool, Request as CondRequest};
use super::queue::{DispatchQueue, Entry};
use super::quota::{Admit, Grant, TenantQuota, WindowUse, duration_ms};
use super::readiness::{Decision, Graph, Readiness};
use super::runner::{AttemptRequest, Runner};
use super::{Command, Error, Result, SchedulerConfig, Stats, TriggerRequest};
use crate::cond::{CondError, CondVars, Condition, Extract};
use crate::model::{
    AttemptContext, AttemptRecord, AttemptReport, DeadLetter, ErrorKind, Event, Millis, Outcome,
    RECORD_FORMAT, RunRecord, RunStatus, ScheduleState, StepRunRecord, StepStatus, TriggerKind,
};
use crate::schedule::{self, AfterOn, Overlap, Trigger};
use crate::store::{AttemptLogs, Insert, NewRun, Store, new_id};
use crate::task::TaskSpec;
use crate::template;
use crate::tenant::{HOUR_MS, TenantRecord, UsageBucket};

/// Commands drained per wake-up before dispatching (amortises the dispatch scan).
const BATCH: usize = 256;
/// How often changed runs are written when nobody waits for them: a run's
/// record is rewritten whole, so a busy run is written at most this often
/// rather than at every step change. Replies to clients flush at once. Runs
/// with many steps cost more per write and are written less often
/// (`FLUSH_EVERY` per 64 steps, at most `FLUSH_MAX`).
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(10);
const FLUSH_MAX: std::time::Duration = std::time::Duration::from_millis(250);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Fire {
        tenant: String,
        task: String,
    },
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
    result: std::result::Result<AttemptReport, String>,
}

/// The active runs of one task: how many, and which wait behind the others
/// (`overlap: queue_one`), oldest first. Counts, not lists of every run: a
/// task with 10,000 queued manual runs must not make each finish O(10,000).
#[derive(Debug, Default)]
struct TaskRuns {
    active: usize,
    held: VecDeque<String>,
}

/// Runs to write, in order, and what to do once they are written.
struct WriteJob {
    runs: Vec<(RunRecord, Vec<Event>)>,
    usage: Vec<UsageBucket>,
    then: Option<Box<dyn FnOnce(Result<()>) + Send>>,
}

/// The run writer: applies the actor's write-behind batches in order, each in
/// `spawn_blocking`, so the actor never waits for the store while runs are
/// due (flushing 50-100 runs took 5-17 ms, during which nothing was
/// dispatched). A job's `then` runs once its runs are written. Blocking tasks
/// also hold tokio's paused test clock, so tests see writes as they happen.
fn spawn_writer(store: Arc<dyn Store>) -> mpsc::UnboundedSender<WriteJob> {
    let (tx, mut rx) = mpsc::unbounded_channel::<WriteJob>();
    tokio::spawn(async move {
        while let Some(WriteJob { runs, usage, then }) = rx.recv().await {
            let result = if runs.is_empty() && usage.is_empty() {
                Ok(())
            } else {
                let store = store.clone();
                tokio::task::spawn_blocking(move || {
                    store.write_runs(&runs, &usage).map_err(Error::from)
                })
                .await
                .unwrap_or(Err(Error::Stopped))
            };
            if let Err(e) = &result {
                tracing::error!(error = %e, "writing runs failed");
            }
            if let Some(then) = then {
                then(result);
            }
        }
    });
    tx
}

/// What a new run comes from.
struct Origin {
    trigger: TriggerKind,
    scheduled_for: Millis,
    input: serde_json::Value,
    idempotency_key: Option<String>,
    priority: u8,
}

/// A task whose trigger is armed.
struct Armed {
    task: Arc<crate::model::TaskRecord>,
    spec: Arc<TaskSpec>,
    trigger: Trigger,
    schedule: ScheduleState,
}

/// An active run held in memory, with its parsed definition.
struct ActiveRun {
    rec: RunRecord,
    spec: TaskSpec,
    tz: chrono_tz::Tz,
    /// The DAG as indices, and per-step counters of ended upstreams.
    graph: Graph,
    readiness: Readiness,
    /// Steps whose upstreams all ended but which are not decided yet (the
    /// run is held or cancelled, or it was just activated).
    candidates: Vec<usize>,
    /// Parsed `when` conditions, by step.
    conds: Vec<Option<Condition>>,
    /// Steps whose condition is being evaluated, with the token of that
    /// evaluation (`cond_pool`): they stay `pending` until it is back.
    evaluating: HashMap<usize, u64>,
    /// Waiting behind an active run of its task (`overlap: queue_one`).
    held: bool,
    /// Set when a person cancelled the run.
    cancelled: bool,
    /// Cancellation of running attempts, by step index.
    cancels: HashMap<usize, CancellationToken>,
}

impl ActiveRun {
    /// Brings a run into memory: indexes its DAG, counts ended upstreams
    /// from the stored states, parses its conditions.
    fn new(rec: RunRecord, spec: TaskSpec, held: bool) -> Self {
        let graph = Graph::new(&spec);
        let states: Vec<StepStatus> = rec.steps.iter().map(|s| s.status).collect();
        let (readiness, candidates) = Readiness::new(&graph, &states);
        // Conditions were validated on save; one that no longer parses fails
        // its step when evaluated.
        let conds = spec
            .steps
            .iter()
            .map(|s| {
                s.when
                    .as_deref()
                    .map(Condition::parse_cached)
                    .and_then(Result::ok)
            })
            .collect();
        Self {
            tz: task_timezone(&spec),
            rec,
            spec,
            graph,
            readiness,
            candidates,
            conds,
            evaluating: HashMap::new(),
            held,
            cancelled: false,
            cancels: HashMap::new(),
        }
    }

    /// What evaluating step `i`'s `when` needs, copied out of the run for
    /// the condition threads: the parsed condition and the parts of the
    /// run's data it reads (bounded by `budget`). `None` if it is not parsed
    /// (`advance` parses it before asking for an evaluation).
    fn condition_job(
        &self,
        i: usize,
        budget: &crate::cond::Budget,
    ) -> Option<(Condition, Extract)> {
        let cond = self.conds[i].clone()?;
        let statuses: Vec<(&str, &str, Option<&serde_json::Value>)> = self
            .rec
            .steps
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    step_status_name(s.status),
                    s.output.as_ref(),
                )
            })
            .collect();
        let biz_date = schedule::biz_date(from_ms(self.rec.scheduled_for), self.tz);
        let scheduled_for = rfc3339(self.rec.scheduled_for);
        let trigger = serde_json::to_value(self.rec.trigger)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let vars = CondVars {
            steps: &statuses,
            input: &self.rec.input,
            run_id: &self.rec.id,
            scheduled_for: &scheduled_for,
            biz_date: &biz_date,
            trigger: &trigger,
        };
        let data = cond.extract(&vars, budget);
        Some((cond, data))
    }
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
    fire_timers: HashMap<(String, String), Millis>,
    /// Tasks with a time trigger: definition, compiled trigger and schedule
    /// state, kept in memory so a fire costs no parsing and no reads. The
    /// actor writes schedule progress; other changes arrive as `TaskChanged`.
    armed: HashMap<(String, String), Armed>,
    /// Active run ids per (tenant, task), oldest first.
    by_task: HashMap<(String, String), TaskRuns>,
    /// Runs in `queued` state per tenant (for the queue bound).
    queued_runs: HashMap<String, usize>,
    /// Runs changed since the last flush, with their events not yet stored.
    /// Internal transitions are written once per loop turn (write-behind);
    /// anything a client is told about is flushed before the answer.
    dirty: Dirty,
    /// Terminal runs already dropped from `runs`, kept until flushed.
    finished: HashMap<String, RunRecord>,
    /// The run writer (from the start of the main loop; before it, during
    /// recovery, runs are written in place).
    writer: Option<mpsc::UnboundedSender<WriteJob>>,
    /// The actor's own mailbox, to take up a command again once the writer
    /// has stored everything before it.
    mailbox: Option<mpsc::WeakUnboundedSender<Command>>,
    /// `after` triggers: (tenant, upstream task) → downstream tasks.
    after_index: HashMap<(String, String), Vec<(String, AfterOn)>>,
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
}

/// The answer to a trigger: the run, and whether it is new.
type TriggerReply = tokio::sync::oneshot::Sender<Result<(RunRecord, bool)>>;

/// A run created but not yet stored. The runs created in one turn of the
/// loop (triggers drained together, fires due together) are inserted in one
/// store write: each write costs sled two log-buffer writes, which made a
/// write per run the largest cost of a manual trigger.
struct PendingRun {
    new: NewRun,
    spec: TaskSpec,
    actor: String,
    /// Why the run is recorded as cancelled instead of queued (shed).
    shed: Option<String>,
    reply: Option<TriggerReply>,
}

/// Runs changed since the last flush, with their events not yet stored.
#[derive(Default)]
struct Dirty {
    runs: HashMap<String, Vec<Event>>,
    /// Steps of the largest run among them (it sets the flush interval),
    /// kept as they are added: the loop asks every turn.
    most_steps: usize,
}

impl Dirty {
    fn add(&mut self, id: &str, steps: usize, events: &mut Vec<Event>) {
        self.most_steps = self.most_steps.max(steps);
        match self.runs.get_mut(id) {
            Some(pending) => pending.append(events),
            None => {
                self.runs.insert(id.to_string(), std::mem::take(events));
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// What a pending run needs once stored, besides its record.
type PendingRest = (TaskSpec, String, Option<String>, Option<TriggerReply>);

/// A store write of new runs under way on a blocking thread, so the actor
/// keeps firing, releasing and taking up finished attempts meanwhile
/// (`begin_insert`). Each write took 0.3 ms in the median and 2 ms at p99
/// under the fire benchmark, during which nothing else moved.
struct Inserting {
    rest: Vec<PendingRest>,
    done: std::sync::mpsc::Receiver<(Vec<NewRun>, crate::store::Result<Vec<Insert>>)>,
    task: tokio::task::JoinHandle<()>,
}

fn split_pending(pending: Vec<PendingRun>) -> (Vec<NewRun>, Vec<PendingRest>) {
    pending
        .into_iter()
        .map(|p| (p.new, (p.spec, p.actor, p.shed, p.reply)))
        .unzip()
}

/// One event; `step` names the step and attempt for step-level changes.
fn event(
    run: &RunRecord,
    step: Option<(&str, Option<u32>)>,
    from: Option<&str>,
    to: &str,
    at: Millis,
    reason: impl Into<String>,
    actor: &str,
) -> Event {
    Event {
        run_id: run.id.clone(),
        step: step.map(|(s, _)| s.to_string()),
        attempt: step.and_then(|(_, a)| a),
        from: from.map(str::to_string),
        to: to.to_string(),
        at,
        reason: reason.into(),
        actor: actor.to_string(),
    }
}

/// How a condition that could not be evaluated fails its step: `condition
/// exceeded its budget: …` past the budget, else `condition could not be
/// evaluated: …`.
fn condition_failed(e: &CondError) -> (StepStatus, String) {
    let reason = match e {
        CondError::Budget(_) => format!("condition {e}"),
        e => format!("condition could not be evaluated: {e}"),
    };
    (StepStatus::Failed, reason)
}

fn step_status_name(s: StepStatus) -> &'static str {
    match s {
        StepStatus::Pending => "pending",
        StepStatus::Queued => "queued",
        StepStatus::Running => "running",
        StepStatus::RetryWait => "retry_wait",
        StepStatus::Succeeded => "succeeded",
        StepStatus::Failed => "failed",
        StepStatus::Skipped => "skipped",
        StepStatus::Cancelled => "cancelled",
        StepStatus::Dead => "dead",
    }
}

/// Sets a step's status and records the event.
fn set_step(
    run: &mut RunRecord,
    i: usize,
    to: StepStatus,
    at: Millis,
    reason: impl Into<String>,
    actor: &str,
    events: &mut Vec<Event>,
) {
    let from = run.steps[i].status;
    run.steps[i].status = to;
    let attempt = run.steps[i].attempts.last().map(|a| a.number);
    let name = run.steps[i].name.clone();
    events.push(event(
        run,
        Some((&name, attempt)),
        Some(step_status_name(from)),
        step_status_name(to),
        at,
        reason,
        actor,
    ));
}

fn set_run(
    run: &mut RunRecord,
    to: RunStatus,
    at: Millis,
    reason: impl Into<String>,
    actor: &str,
    events: &mut Vec<Event>,
) {
    let from = run.status;
    if from == to {
        return;
    }
    run.status = to;
    let reason = reason.into();
    events.push(event(
        run,
        None,
        Some(from.as_str()),
        to.as_str(),
        at,
        reason.clone(),
        actor,
    ));
    if to.is_terminal() {
        run.finished_at = Some(at);
        if !reason.is_empty() {
            run.reason = Some(reason);
        }
    }
}

fn task_timezone(spec: &TaskSpec) -> chrono_tz::Tz {
    spec.trigger
        .as_ref()
        .and_then(|t| t.timezone.as_deref())
        .and_then(|z| z.parse().ok())
        .unwrap_or(chrono_tz::UTC)
}

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
        let cond_pool = CondPool::new(config.cond_workers, config.cond_budget, cond_tx);
        let now = clock.now_ms();
        Self {
            queue: DispatchQueue::new(config.queue.clone(), now),
            store,
            runner,
            clock,
            config,
            stats: stats.clone(),
            runs: HashMap::new(),
            timers: BTreeSet::new(),
            fire_timers: HashMap::new(),
            armed: HashMap::new(),
            by_task: HashMap::new(),
            queued_runs: HashMap::new(),
            dirty: Dirty::default(),
            finished: HashMap::new(),
            writer: None,
            mailbox: None,
            after_index: HashMap::new(),
            done_tx,
            done_rx: Some(done_rx),
            cond_pool,
            cond_rx: Some(cond_rx),
            cond_token: 0,
            rng: rand::rngs::StdRng::from_os_rng(),
            tenant_metrics: crate::metrics::TenantCache::new(stats.tenants.clone()),
            quotas: HashMap::new(),
            usage: HashMap::new(),
            pending: Vec::new(),
            inserting: None,
            plugins: HashMap::new(),
        }
    }

    // ----------------------------------------------------------------------
    // Recovery
    // ----------------------------------------------------------------------

    /// Rebuilds memory from the store after a start: attempts that were
    /// running are marked `lost` and retried per policy, queued and waiting
    /// steps resume, schedules are re-armed (missed fires follow `catch_up`
    /// when their timers fire, immediately).
    pub(super) fn recover(&mut self) -> Result<()> {
        let now = self.clock.now_ms();
        let slots = self.config.queue.global_limit;
        for tenant in self.store.list_tenants()? {
            let start = tenant.quota.window_start(now);
            let used = self
                .store
                .usage(&tenant.name, start, now + HOUR_MS)?
                .iter()
                .fold(WindowUse::default(), |used, b| WindowUse {
                    fuel: used.fuel.saturating_add(b.fuel),
                    wall_ms: used
                        .wall_ms
                        .saturating_add(b.wall_ms.max(0.0).ceil() as u64),
                });
            self.quotas.insert(
                tenant.name.clone(),
                TenantQuota::new(&tenant, used, slots, now),
            );
            self.apply_quota(&tenant.name);
        }
        let mut active = self.store.active_runs()?;
        active.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        for rec in active {
            let spec: TaskSpec = match serde_json::from_value(rec.spec.clone()) {
                Ok(spec) => spec,
                Err(e) => {
                    tracing::error!(run = %rec.id, error = %e, "cannot read the task snapshot of an active run; failing it");
                    let mut rec = rec;
                    let mut events = Vec::new();
                    set_run(
                        &mut rec,
                        RunStatus::Failed,
                        now,
                        format!("unreadable task snapshot: {e}"),
                        "recovery",
                        &mut events,
                    );
                    self.store.update_run(&rec, &events)?;
                    continue;
                }
            };
            let key = (rec.tenant.clone(), rec.task.clone());
            let held = rec.status == RunStatus::Queued
                && rec.trigger != TriggerKind::Manual
                && spec.overlap == Overlap::QueueOne
                && self.by_task.get(&key).is_some_and(|t| t.active > 0);
            if rec.status == RunStatus::Queued {
                *self.queued_runs.entry(rec.tenant.clone()).or_default() += 1;
            }
            self.track(key, &rec.id, held);
            let id = rec.id.clone();
            self.runs
                .insert(id.clone(), ActiveRun::new(rec, spec, held));
            self.recover_run(&id, now)?;
        }
        for task in self.store.list_tasks(None)? {
            self.index_after(&task);
        }
        for sched in self.store.list_schedules()? {
            if let Err(e) = self.on_task_changed(&sched.tenant, &sched.task) {
                tracing::error!(tenant = %sched.tenant, task = %sched.task, error = %e, "cannot arm the trigger");
            }
        }
        self.flush()
    }

    fn recover_run(&mut self, id: &str, now: Millis) -> Result<()> {
        let max_lost = self.config.max_lost_attempts;
        let Some(run) = self.runs.get_mut(id) else {
            return Ok(());
        };
        let mut events = Vec::new();
        let (mut queued, mut lost) = (Vec::new(), Vec::new());
        for i in 0..run.rec.steps.len() {
            match run.rec.steps[i].status {
                StepStatus::Running => {
                    if let Some(a) = run.rec.steps[i].attempts.last_mut()
                        && a.outcome.is_none()
                    {
                        a.outcome = Some(Outcome::Lost);
                        a.finished_at = Some(now);
                        a.error = Some("the host stopped while this attempt was running".into());
                    }
                    run.rec.steps[i].lost_attempts += 1;
                    lost.push(i);
                }
                StepStatus::Queued => queued.push(i),
                StepStatus::RetryWait => {
                    let at = run.rec.steps[i].next_attempt_at.unwrap_or(now);
                    self.timers.insert((
                        at,
                        Timer::Retry {
                            run_id: id.to_string(),
                            step: i,
                        },
                    ));
                }
                _ => {}
            }
        }
        for i in lost {
            self.stats.count_attempt(Outcome::Lost);
            let run = self.runs.get_mut(id).expect("present");
            self.tenant_metrics.of(&run.rec.tenant).count(Outcome::Lost);
            let step = &run.rec.steps[i];
            let attempt = step.attempts.last().map_or(0, |a| a.number);
            if step.lost_attempts <= max_lost {
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Queued,
                    now,
                    format!("attempt {attempt} lost in a host crash; running it again"),
                    "recovery",
                    &mut events,
                );
                queued.push(i);
            } else {
                run.rec.steps[i].error = Some("attempts keep getting lost in host crashes".into());
                self.after_failure(id, i, (Outcome::Lost, None), now, "recovery", &mut events);
            }
        }
        for i in queued {
            let entry = self.entry_for(id, i, now);
            self.queue.push(entry);
        }
        self.advance(id, now, "recovery", &mut events)
    }

    // ----------------------------------------------------------------------
    // Main loop
    // ----------------------------------------------------------------------

    pub(super) async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        mailbox: mpsc::WeakUnboundedSender<Command>,
        shutdown: CancellationToken,
    ) {
        let mut done_rx = self.done_rx.take().expect("taken once");
        let mut cond_rx = self.cond_rx.take().expect("taken once");
        self.writer = Some(spawn_writer(self.store.clone()));
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
        loop {
            self.dispatch();
            self.begin_insert();
            let flush_every = self.flush_interval();
            if !self.dirty.is_empty() && last_flush.elapsed() >= flush_every {
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
            ]
            .into_iter()
            .flatten()
            .min()
            .map(|at| {
                let wait = (from_ms(at) - now).to_std().unwrap_or_default();
                tokio::time::Instant::now() + wait
            });
            let flush_at = (!self.dirty.is_empty()).then_some(last_flush + flush_every);
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
        // Store what changed before stopping (in order, after earlier batches).
        let (stored_tx, stored_rx) = tokio::sync::oneshot::channel();
        let signal = Box::new(move |_written: Result<()>| {
            let _ = stored_tx.send(());
        });
        if self.flush_then(Some(signal)).is_ok() {
            let _ = stored_rx.await;
        }
        // Stop running attempts; their runs are recovered (as lost) on the next start.
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
        if !matches!(cmd, Command::Trigger(..)) {
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
                ids.retain(|id| {
                    !self.runs.contains_key(id)
                        && !self.dirty.runs.contains_key(id)
                        && !self.finished.contains_key(id)
                });
                let job =
                    crate::retention::purge_job(self.store.clone(), self.stats.clone(), ids, reply);
                if let Err(e) = self.flush_then(Some(job)) {
                    tracing::error!(error = %e, "cannot queue a retention purge");
                }
            }
            // The new run is stored with the others of this turn of the
            // loop before the answer (`insert_pending`); what follows (its
            // first steps queued) may be written behind.
            Command::Trigger(req, reply) => self.on_trigger(req, reply),
            Command::PluginDeleted {
                tenant,
                name,
                version,
            } => {
                self.plugins.remove(&(tenant, name, version));
            }
            Command::TaskChanged { tenant, task } => {
                self.guard(|a| a.on_task_changed(&tenant, &task))
            }
            Command::TenantChanged { record, reply } => {
                self.on_tenant_changed(&record);
                let _ = reply.send(Ok(()));
            }
            Command::PutTask { record, reply } => {
                let r = self.on_put_task(*record);
                answer(self, reply, r);
            }
            Command::DeleteTask {
                tenant,
                task,
                reply,
            } => {
                let r = self.store.delete_task(&tenant, &task).map_err(Error::from);
                self.armed.remove(&(tenant.clone(), task.clone()));
                self.disarm_fire(&tenant, &task);
                self.unindex_after(&tenant, &task);
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

    // ----------------------------------------------------------------------
    // Creating runs
    // ----------------------------------------------------------------------

    fn new_run(
        &self,
        task: &crate::model::TaskRecord,
        spec: &TaskSpec,
        origin: Origin,
        now: Millis,
    ) -> RunRecord {
        let Origin {
            trigger,
            scheduled_for,
            input,
            idempotency_key: key,
            priority,
        } = origin;
        // A task saved before its tenant's ceiling was lowered runs at the
        // ceiling, and its record says so (shedding reads it too).
        let priority = self
            .quotas
            .get(&task.tenant)
            .map_or(priority, |q| priority.min(q.max_priority));
        RunRecord {
            format: RECORD_FORMAT,
            id: new_id("r", now),
            tenant: task.tenant.clone(),
            task: task.name.clone(),
            spec: task.spec.clone(),
            status: RunStatus::Queued,
            reason: None,
            priority,
            trigger,
            scheduled_for,
            created_at: now,
            started_at: None,
            finished_at: None,
            input,
            idempotency_key: key,
            steps: spec
                .steps
                .iter()
                .map(|s| StepRunRecord {
                    name: s.name.clone(),
                    status: StepStatus::Pending,
                    input: None,
                    output: None,
                    error: None,
                    attempts: Vec::new(),
                    next_attempt_at: None,
                    lost_attempts: 0,
                    round_start: 0,
                })
                .collect(),
        }
    }

    fn load_task(&self, tenant: &str, name: &str) -> Result<(crate::model::TaskRecord, TaskSpec)> {
        let task = self
            .store
            .get_task(tenant, name)?
            .ok_or_else(|| Error::NotFound(format!("task `{name}`")))?;
        let spec: TaskSpec = serde_json::from_value(task.spec.clone()).map_err(|e| {
            Error::Conflict(format!("stored definition of `{name}` is unreadable: {e}"))
        })?;
        Ok((task, spec))
    }

    fn total_queued_runs(&self) -> usize {
        self.queued_runs.values().sum()
    }

    /// Whether a new run of `priority` must be shed (recorded, not run).
    fn shed_reason(&self, priority: u8) -> Option<String> {
        let total = self.total_queued_runs();
        (total >= self.config.high_water && priority < self.config.shed_below_priority).then(|| {
            format!(
                "shed: {total} runs waiting is past the high-water mark of {}; priority {priority} is below {}",
                self.config.high_water, self.config.shed_below_priority
            )
        })
    }

    /// Why a new run of `tenant` is recorded as cancelled instead of queued:
    /// the tenant is disabled, or out of fuel and set to refuse.
    fn tenant_refusal(&mut self, tenant: &str, now: Millis) -> Option<String> {
        let q = self.quotas.get_mut(tenant)?;
        if q.disabled {
            return Some(format!("refused: tenant `{tenant}` is disabled"));
        }
        q.roll(now);
        (q.exhausted() && q.refuses_when_exhausted()).then(|| {
            format!(
                "refused: tenant `{tenant}` used its {} for the window ending {}",
                q.exhausted_budget(),
                rfc3339(q.window_end())
            )
        })
    }

    /// Applies a created or changed tenant: limits, weight, holds.
    fn on_tenant_changed(&mut self, record: &TenantRecord) {
        let now = self.clock.now_ms();
        let slots = self.config.queue.global_limit;
        match self.quotas.get_mut(&record.name) {
            Some(q) => q.update(record, slots, now),
            None => {
                self.quotas.insert(
                    record.name.clone(),
                    TenantQuota::new(record, WindowUse::default(), slots, now),
                );
            }
        }
        self.apply_quota(&record.name);
    }

    /// Pushes a tenant's quota state to the queue (running cap, priority
    /// ceiling, weight, hold), the visible hold reason, and the timer of its
    /// window's end.
    fn apply_quota(&mut self, tenant: &str) {
        let Some(q) = self.quotas.get(tenant) else {
            return;
        };
        self.queue.set_tenant(tenant, q.max_running, q.quota.weight);
        self.queue.set_ceiling(tenant, q.max_priority);
        self.queue.set_held(tenant, q.held());
        self.stats.set_hold(tenant, q.hold_reason(tenant));
        if q.has_budget() {
            let end = q.window_end();
            self.timers.insert((
                end,
                Timer::Window {
                    tenant: tenant.to_string(),
                },
            ));
        }
    }

    /// Checks a trigger and creates its run (answered once stored), or
    /// answers the refusal at once.
    fn on_trigger(&mut self, req: TriggerRequest, reply: TriggerReply) {
        match self.check_trigger(&req) {
            Ok((rec, spec)) => {
                let now = self.clock.now_ms();
                self.create_run(rec, spec, false, &req.actor, now, Some(reply));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The run a manual trigger creates, unless a limit refuses it.
    fn check_trigger(&mut self, req: &TriggerRequest) -> Result<(RunRecord, TaskSpec)> {
        let now = self.clock.now_ms();
        let (task, spec) = self.load_task(&req.tenant, &req.task)?;
        let queued = self.queued_runs.get(&req.tenant).copied().unwrap_or(0);
        let tenant_cap = self
            .quotas
            .get(&req.tenant)
            .and_then(|q| q.quota.max_queued_runs)
            .map_or(usize::MAX, |n| n as usize);
        if queued >= self.config.max_queued_per_tenant.min(tenant_cap) {
            return Err(Error::QueueFull {
                tenant: req.tenant.clone(),
                queued,
                retry_after: std::time::Duration::from_secs(5),
            });
        }
        if let Some(q) = self.quotas.get_mut(&req.tenant) {
            q.roll(now);
            if q.exhausted() && q.refuses_when_exhausted() {
                let wait = (q.window_end() - now).max(1000);
                return Err(Error::Quota {
                    message: format!(
                        "tenant `{}` used its {} for the window ending {}; runs are refused until then",
                        req.tenant,
                        q.exhausted_budget(),
                        rfc3339(q.window_end())
                    ),
                    retry_after: std::time::Duration::from_millis(wait as u64),
                });
            }
            if let Err(wait) = q.take_trigger(now) {
                return Err(Error::Quota {
                    message: format!(
                        "tenant `{}` is over its trigger rate of {}/s",
                        req.tenant,
                        q.quota.trigger_rate_per_sec.unwrap_or_default()
                    ),
                    retry_after: wait,
                });
            }
        }
        let priority = req.priority.unwrap_or(spec.priority).min(9);
        let input = req.input.clone().unwrap_or_else(|| serde_json::json!({}));
        let origin = Origin {
            trigger: TriggerKind::Manual,
            scheduled_for: now,
            input,
            idempotency_key: req.idempotency_key.clone(),
            priority,
        };
        let rec = self.new_run(&task, &spec, origin, now);
        Ok((rec, spec))
    }

    /// Creates a run, to be stored with the others of this turn of the loop
    /// (unless its key or fire exists); returns its place in `pending`.
    /// `reply` is answered once it is stored.
    fn create_run(
        &mut self,
        mut rec: RunRecord,
        spec: TaskSpec,
        unique_fire: bool,
        actor: &str,
        now: Millis,
        reply: Option<TriggerReply>,
    ) -> usize {
        let shed = self
            .tenant_refusal(&rec.tenant, now)
            .or_else(|| self.shed_reason(rec.priority));
        let mut events = vec![event(
            &rec,
            None,
            None,
            "queued",
            now,
            format!("triggered ({:?})", rec.trigger).to_lowercase(),
            actor,
        )];
        match &shed {
            Some(reason) => {
                set_run(
                    &mut rec,
                    RunStatus::Cancelled,
                    now,
                    reason.clone(),
                    "scheduler",
                    &mut events,
                );
                for i in 0..rec.steps.len() {
                    set_step(
                        &mut rec,
                        i,
                        StepStatus::Cancelled,
                        now,
                        reason.clone(),
                        "scheduler",
                        &mut events,
                    );
                }
            }
            // Counted at once, so the triggers of one turn see each other
            // against the queue bounds; undone if the run is not created.
            None => *self.queued_runs.entry(rec.tenant.clone()).or_default() += 1,
        }
        self.pending.push(PendingRun {
            new: NewRun {
                run: rec,
                unique_fire,
                schedule: None,
                events,
            },
            spec,
            actor: actor.to_string(),
            shed,
            reply,
        });
        self.pending.len() - 1
    }

    /// Stores the runs created so far, waiting for a write under way first:
    /// what follows sees them stored. Runs created meanwhile (an `after` task
    /// of a run that ended at once) follow in another write.
    fn insert_pending(&mut self) {
        self.complete_insert();
        while !self.pending.is_empty() {
            let (news, rest) = split_pending(std::mem::take(&mut self.pending));
            let outcomes = self.store.insert_runs(&news);
            self.take_up(news, rest, outcomes);
        }
    }

    /// Starts storing the pending runs in one write on a blocking thread,
    /// unless a write is under way (they go in the next).
    fn begin_insert(&mut self) {
        if self.inserting.is_some() || self.pending.is_empty() {
            return;
        }
        let (news, rest) = split_pending(std::mem::take(&mut self.pending));
        let store = self.store.clone();
        let (tx, done) = std::sync::mpsc::channel();
        let task = tokio::task::spawn_blocking(move || {
            let outcomes =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.insert_runs(&news)))
                    .unwrap_or_else(|_| {
                        Err(crate::store::Error::Backend(
                            "storing new runs panicked".into(),
                        ))
                    });
            let _ = tx.send((news, outcomes));
        });
        self.inserting = Some(Inserting { rest, done, task });
    }

    /// Takes up the runs of the write under way, waiting for it if needed.
    fn complete_insert(&mut self) {
        let Some(inserting) = self.inserting.take() else {
            return;
        };
        match inserting.done.recv() {
            Ok((news, outcomes)) => self.take_up(news, inserting.rest, outcomes),
            // The blocking pool shut down under the write: nothing was stored.
            Err(_) => {
                for (_, _, _, reply) in inserting.rest {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(Error::Stopped));
                    }
                }
            }
        }
    }

    /// Takes up a write's runs: makes the stored ones' first steps ready and
    /// answers their triggers (with the existing run for a known key).
    fn take_up(
        &mut self,
        news: Vec<NewRun>,
        rest: Vec<PendingRest>,
        outcomes: crate::store::Result<Vec<Insert>>,
    ) {
        let now = self.clock.now_ms();
        for (i, (new, (spec, actor, shed, reply))) in news.into_iter().zip(rest).enumerate() {
            let rec = new.run;
            let outcome = match &outcomes {
                Ok(outcomes) => Ok(outcomes[i].clone()),
                Err(e) => Err(Error::Store(crate::store::Error::Backend(e.to_string()))),
            };
            let created = matches!(outcome, Ok(Insert::Created));
            if !created && shed.is_none() {
                self.queued_runs
                    .entry(rec.tenant.clone())
                    .and_modify(|n| *n = n.saturating_sub(1));
            }
            let answer = match outcome {
                Err(e) => {
                    tracing::error!(tenant = %rec.tenant, task = %rec.task, error = %e, "storing a new run failed");
                    Err(e)
                }
                Ok(Insert::Existing(existing)) => Ok((*existing, false)),
                Ok(Insert::Created) => self.on_created(rec, spec, shed.is_some(), &actor, now),
            };
            if let Some(reply) = reply {
                let _ = reply.send(answer);
            }
        }
    }

    /// Takes up a run just stored: tracks it and makes its first steps ready.
    fn on_created(
        &mut self,
        rec: RunRecord,
        spec: TaskSpec,
        shed: bool,
        actor: &str,
        now: Millis,
    ) -> Result<(RunRecord, bool)> {
        self.stats.runs_created.fetch_add(1, Ordering::Relaxed);
        if shed {
            self.stats.shed.fetch_add(1, Ordering::Relaxed);
            self.tenant_metrics.of(&rec.tenant).run_finished(rec.status);
            return Ok((rec, true));
        }
        let key = (rec.tenant.clone(), rec.task.clone());
        let held = rec.trigger != TriggerKind::Manual
            && spec.overlap == Overlap::QueueOne
            && self.by_task.get(&key).is_some_and(|t| t.active > 0);
        self.track(key, &rec.id, held);
        let id = rec.id.clone();
        self.runs
            .insert(id.clone(), ActiveRun::new(rec, spec, held));
        let mut events = Vec::new();
        self.advance(&id, now, actor, &mut events)?;
        let rec = self
            .runs
            .get(&id)
            .map(|r| r.rec.clone())
            .or_else(|| self.finished.get(&id).cloned());
        rec.map(|rec| (rec, true))
            .ok_or_else(|| Error::NotFound(format!("run `{id}`")))
    }

    // ----------------------------------------------------------------------
    // Firing
    // ----------------------------------------------------------------------

    /// Arms a task's timer for its next instant `at`: `fire_ahead` before
    /// it, or at the instant itself when `ahead` is false.
    fn arm_fire(&mut self, tenant: &str, task: &str, at: Millis, ahead: bool) {
        let at = if ahead {
            at.saturating_sub(self.config.fire_ahead_ms)
        } else {
            at
        };
        let key = (tenant.to_string(), task.to_string());
        if let Some(old) = self.fire_timers.insert(key.clone(), at) {
            self.timers.remove(&(
                old,
                Timer::Fire {
                    tenant: key.0.clone(),
                    task: key.1.clone(),
                },
            ));
        }
        self.timers.insert((
            at,
            Timer::Fire {
                tenant: key.0,
                task: key.1,
            },
        ));
    }

    fn disarm_fire(&mut self, tenant: &str, task: &str) {
        if let Some(old) = self
            .fire_timers
            .remove(&(tenant.to_string(), task.to_string()))
        {
            self.timers.remove(&(
                old,
                Timer::Fire {
                    tenant: tenant.to_string(),
                    task: task.to_string(),
                },
            ));
        }
    }

    fn on_put_task(&mut self, record: crate::model::TaskRecord) -> Result<ScheduleState> {
        let now = self.clock.now();
        let spec: TaskSpec = serde_json::from_value(record.spec.clone())
            .map_err(|e| Error::Conflict(format!("definition of `{}`: {e}", record.name)))?;
        let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
            .map_err(|e| Error::Conflict(format!("trigger of `{}`: {e}", record.name)))?;
        let old = self.store.get_schedule(&record.tenant, &record.name)?;
        let replaced = record.version > 1;
        let next_fire = match (&old, replaced) {
            (Some(s), true) if s.last_fired.is_some() => {
                trigger.next_after(now.max(from_ms(s.last_fired.unwrap_or_default())))
            }
            (_, true) => trigger
                .next_after(now)
                .or_else(|| trigger.first_fire(from_ms(record.created_at))),
            (_, false) => trigger.first_fire(from_ms(record.created_at)),
        };
        let schedule = ScheduleState {
            tenant: record.tenant.clone(),
            task: record.name.clone(),
            next_fire: next_fire.map(|d| d.timestamp_millis()),
            last_fired: old.as_ref().and_then(|s| s.last_fired),
            paused: old.as_ref().is_some_and(|s| s.paused),
        };
        self.store.put_task(&record, &schedule)?;
        self.index_after(&record);
        self.on_task_changed(&record.tenant, &record.name)?;
        Ok(schedule)
    }

    fn on_set_paused(&mut self, tenant: &str, task: &str, paused: bool) -> Result<ScheduleState> {
        let (record, spec) = self.load_task(tenant, task)?;
        let mut schedule = self
            .store
            .get_schedule(tenant, task)?
            .unwrap_or(ScheduleState {
                tenant: tenant.to_string(),
                task: task.to_string(),
                next_fire: None,
                last_fired: None,
                paused: false,
            });
        schedule.paused = paused;
        if !paused {
            let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
                .map_err(|e| Error::Conflict(format!("trigger of `{task}`: {e}")))?;
            let now = self.clock.now();
            schedule.next_fire = match schedule.last_fired {
                Some(_) => trigger.next_after(now),
                None => trigger
                    .first_fire(from_ms(record.created_at))
                    .map(|f| f.max(now)),
            }
            .map(|d| d.timestamp_millis());
        }
        self.store.put_schedule(&schedule)?;
        self.on_task_changed(tenant, task)?;
        Ok(schedule)
    }

    /// (Re)loads a task's definition and schedule and (re)arms its timer.
    fn on_task_changed(&mut self, tenant: &str, task: &str) -> Result<()> {
        let key = (tenant.to_string(), task.to_string());
        self.armed.remove(&key);
        let schedule = self.store.get_schedule(tenant, task)?;
        let Some(schedule) = schedule.filter(|s| !s.paused && s.next_fire.is_some()) else {
            self.disarm_fire(tenant, task);
            return Ok(());
        };
        let (record, spec) = self.load_task(tenant, task)?;
        let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
            .map_err(|e| Error::Conflict(format!("trigger of `{task}`: {e}")))?;
        let next = schedule.next_fire.unwrap_or_default();
        self.armed.insert(
            key,
            Armed {
                task: Arc::new(record),
                spec: Arc::new(spec),
                trigger,
                schedule,
            },
        );
        self.arm_fire(tenant, task, next, true);
        Ok(())
    }

    fn on_timers(&mut self) -> Result<()> {
        let now = self.clock.now_ms();
        while let Some((at, _)) = self.timers.first() {
            if *at > now {
                break;
            }
            let (_, timer) = self.timers.pop_first().expect("non-empty");
            match timer {
                Timer::Fire { tenant, task } => {
                    self.fire_timers.remove(&(tenant.clone(), task.clone()));
                    if let Err(e) = self.fire(&tenant, &task, now) {
                        tracing::error!(%tenant, %task, error = %e, "firing failed");
                    }
                }
                Timer::Retry { run_id, step } => {
                    if let Err(e) = self.retry_due(&run_id, step, now) {
                        tracing::error!(run = %run_id, error = %e, "requeueing a retry failed");
                    }
                }
                Timer::Release { run_id } => {
                    let mut events = Vec::new();
                    if let Err(e) = self.advance(&run_id, now, "scheduler", &mut events) {
                        tracing::error!(run = %run_id, error = %e, "releasing a run failed");
                    }
                }
                Timer::Window { tenant } => {
                    if let Some(q) = self.quotas.get_mut(&tenant)
                        && q.roll(now)
                    {
                        tracing::info!(%tenant, "fuel window reset");
                    }
                    self.apply_quota(&tenant);
                }
            }
        }
        Ok(())
    }

    /// Fires a task's due instants (per `catch_up`), and its next instant
    /// too when that is within `fire_ahead`: the run is stored ahead and
    /// released at its instant (see `advance`), so storing it is not part of
    /// its lateness. Should the overlap policy skip that instant now, it is
    /// judged at the instant itself instead, as without the lead: a run still
    /// active now may have ended by then.
    fn fire(&mut self, tenant: &str, task_name: &str, now: Millis) -> Result<()> {
        let key = (tenant.to_string(), task_name.to_string());
        let Some(armed) = self.armed.get(&key) else {
            return Ok(());
        };
        let (task, spec) = (armed.task.clone(), armed.spec.clone());
        let mut sched = armed.schedule.clone();
        let Some(next_fire) = sched.next_fire else {
            return Ok(());
        };
        let due = schedule::due(
            &armed.trigger,
            from_ms(next_fire),
            from_ms(now),
            spec.catch_up,
        );
        let kind = armed.trigger.kind();
        if due.skipped > 0 {
            tracing::info!(%tenant, task = %task_name, skipped = due.skipped, "missed fires skipped per catch_up");
        }
        sched.next_fire = due.next.map(|d| d.timestamp_millis());
        let mut fires: Vec<Millis> = due.fire.iter().map(|d| d.timestamp_millis()).collect();
        let active = self.by_task.get(&key).map_or(0, |t| t.active);
        // Runs created by this call are active too once stored.
        let overlaps = |created: usize| match spec.overlap {
            Overlap::Skip => active + created >= 1,
            Overlap::QueueOne => active + created >= 2,
            Overlap::Allow => false,
        };
        let (mut last_created, mut created) = (None, 0);
        let mut ahead = true;
        let mut taken = 0;
        loop {
            // The due instants, then the next one if it is within the lead.
            if taken == fires.len() {
                match sched.next_fire {
                    Some(next) if next <= now + self.config.fire_ahead_ms => {
                        if overlaps(created) {
                            ahead = false;
                            break;
                        }
                        fires.push(next);
                        sched.next_fire = self
                            .armed
                            .get(&key)
                            .and_then(|a| a.trigger.next_after(from_ms(next)))
                            .map(|d| d.timestamp_millis());
                    }
                    _ => break,
                }
            }
            let instant = fires[taken];
            taken += 1;
            sched.last_fired = Some(instant);
            if overlaps(created) {
                self.stats.overlap_skips.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%tenant, task = %task_name, at = %rfc3339(instant), overlap = ?spec.overlap, "fire skipped: previous run still active");
                continue;
            }
            let origin = Origin {
                trigger: kind,
                scheduled_for: instant,
                input: serde_json::json!({}),
                idempotency_key: None,
                priority: spec.priority,
            };
            let rec = self.new_run(&task, &spec, origin, now);
            let pending = self.create_run(rec, (*spec).clone(), true, "scheduler", now, None);
            created += usize::from(self.pending[pending].shed.is_none());
            last_created = Some(pending);
        }
        // The runs, their fire keys and the schedule's progress are one
        // write: after a crash either all are there or none, so no instant
        // fires twice.
        match last_created {
            Some(i) => self.pending[i].new.schedule = Some(sched.clone()),
            None if self.armed.get(&key).is_none_or(|a| a.schedule != sched) => {
                self.store.put_schedule(&sched)?;
            }
            None => {}
        }
        if let Some(armed) = self.armed.get_mut(&key) {
            armed.schedule = sched.clone();
        }
        match sched.next_fire {
            Some(next) => self.arm_fire(tenant, task_name, next, ahead),
            None => {
                self.armed.remove(&key);
            }
        }
        Ok(())
    }

    // ----------------------------------------------------------------------
    // Readiness and completion
    // ----------------------------------------------------------------------

    fn entry_for(&self, run_id: &str, step: usize, now: Millis) -> Entry {
        let run = &self.runs[run_id];
        Entry {
            run_id: run_id.to_string(),
            step,
            tenant: run.rec.tenant.clone(),
            pool: self.queue.pool_for(run.spec.steps[step].pool.as_deref()),
            priority: run.rec.priority,
            enqueued_at: now,
        }
    }

    /// Counts steps that ended since the last call, decides the steps whose
    /// upstreams have all ended (queue, skip or cancel them per trigger rule
    /// and `when`), finishes the run when every step is terminal, and marks
    /// the run for the next write with `events`.
    fn advance(
        &mut self,
        id: &str,
        now: Millis,
        actor: &str,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let Some(run) = self.runs.get_mut(id) else {
            return Ok(());
        };
        let mut ready = Vec::new();
        let mut decidable = std::mem::take(&mut run.candidates);
        for i in 0..run.rec.steps.len() {
            let status = run.rec.steps[i].status;
            if status.is_terminal() && !run.readiness.is_settled(i) {
                run.readiness.settle(&run.graph, i, status, &mut decidable);
            }
        }
        // A run created ahead of its instant waits for it (`fire`). Only for
        // as long as the lead: a run further ahead means the clock stepped
        // back, and its runs (manual ones too) must not wait for that.
        let ahead = run.rec.scheduled_for - now;
        let early = ahead > 0 && ahead <= self.config.fire_ahead_ms;
        if early && !run.cancelled {
            self.timers.insert((
                run.rec.scheduled_for,
                Timer::Release {
                    run_id: id.to_string(),
                },
            ));
        }
        if run.held || run.cancelled || early {
            run.candidates = decidable;
        } else {
            while let Some(i) = decidable.pop() {
                if run.rec.steps[i].status != StepStatus::Pending {
                    continue;
                }
                // A condition out for evaluation decides the step when it is back.
                if run.evaluating.contains_key(&i) {
                    continue;
                }
                let settle_as = match run.readiness.decide(&run.graph, i) {
                    Decision::Run if run.spec.steps[i].when.is_some() => {
                        // Parsed when the run was loaded; one that did not
                        // parse then is tried again, and fails its step now.
                        let parsed = match &run.conds[i] {
                            Some(_) => Ok(()),
                            None => Condition::parse_cached(
                                run.spec.steps[i].when.as_deref().unwrap_or_default(),
                            )
                            .map(|c| run.conds[i] = Some(c)),
                        };
                        match parsed {
                            Ok(()) => {
                                self.cond_token += 1;
                                run.evaluating.insert(i, self.cond_token);
                                self.cond_pool.request(CondRequest {
                                    run_id: id.to_string(),
                                    step: i,
                                    token: self.cond_token,
                                    tenant: run.rec.tenant.clone(),
                                });
                                None
                            }
                            Err(e) => Some(condition_failed(&e)),
                        }
                    }
                    Decision::Run => {
                        set_step(
                            &mut run.rec,
                            i,
                            StepStatus::Queued,
                            now,
                            "ready",
                            actor,
                            events,
                        );
                        ready.push(i);
                        None
                    }
                    Decision::Settle(status, reason) => Some((status, reason.to_string())),
                };
                if let Some((status, reason)) = settle_as {
                    run.rec.steps[i].error = Some(reason.clone());
                    set_step(&mut run.rec, i, status, now, reason, actor, events);
                    run.readiness.settle(&run.graph, i, status, &mut decidable);
                }
            }
        }
        let finished = run.rec.steps.iter().all(|s| s.status.is_terminal());
        // Steps of a cancelled run are terminal before their attempts end:
        // the run is forgotten only once those have reported (`on_done`).
        let attempts_out = !run.cancels.is_empty();
        if finished && !run.rec.status.is_terminal() {
            // Like Airflow: the run's result is its leaf steps' results. A
            // failure handled downstream (`one_success`, `all_done`) does not
            // fail the run; an unhandled one reaches a leaf as `cancelled`.
            let graph = &run.graph;
            let failed = run
                .rec
                .steps
                .iter()
                .enumerate()
                .find(|(i, s)| {
                    graph.is_leaf(*i)
                        && matches!(
                            s.status,
                            StepStatus::Failed | StepStatus::Dead | StepStatus::Cancelled
                        )
                })
                .map(|(_, s)| s);
            let (status, reason) = if run.cancelled {
                (
                    RunStatus::Cancelled,
                    run.rec.reason.clone().unwrap_or_else(|| "cancelled".into()),
                )
            } else if let Some(step) = failed {
                (
                    RunStatus::Failed,
                    format!("step `{}` {}", step.name, step_status_name(step.status)),
                )
            } else {
                (RunStatus::Succeeded, String::new())
            };
            if run.rec.status == RunStatus::Queued {
                self.queued_runs
                    .entry(run.rec.tenant.clone())
                    .and_modify(|n| *n = n.saturating_sub(1));
            }
            set_run(&mut run.rec, status, now, reason, actor, events);
        }
        self.dirty.add(id, run.rec.steps.len(), events);
        for i in ready {
            let entry = self.entry_for(id, i, now);
            self.queue.push(entry);
        }
        if finished && !attempts_out {
            self.finish_run(id, now)?;
        }
        self.start_conditions();
        Ok(())
    }

    /// Hands waiting conditions to free evaluation threads, tenants in
    /// turn, copying each one's data out of its run now; drops those whose
    /// step no longer waits (the run ended or was cancelled).
    fn start_conditions(&mut self) {
        let budget = self.config.cond_budget;
        while let Some(request) = self.cond_pool.next() {
            let Some(run) = self.runs.get(&request.run_id) else {
                continue;
            };
            let i = request.step;
            let waits = !run.cancelled
                && run.evaluating.get(&i) == Some(&request.token)
                && run.rec.steps.get(i).map(|s| s.status) == Some(StepStatus::Pending);
            if let Some((cond, data)) = waits.then(|| run.condition_job(i, &budget)).flatten() {
                self.cond_pool.start(CondJob {
                    request,
                    cond,
                    data,
                });
            }
        }
    }

    /// Takes up an evaluated condition: runs, skips or fails its step, then
    /// decides what follows. A result nobody waits for any more (the run
    /// ended or was cancelled, the step was decided otherwise) is dropped.
    fn on_condition(&mut self, done: CondDone) -> Result<()> {
        self.cond_pool.finished();
        let taken = self.take_condition(done);
        self.start_conditions();
        taken
    }

    fn take_condition(&mut self, done: CondDone) -> Result<()> {
        let now = self.clock.now_ms();
        let Some(run) = self.runs.get_mut(&done.run_id) else {
            return Ok(());
        };
        let i = done.step;
        if run.evaluating.get(&i) != Some(&done.token) {
            return Ok(());
        }
        run.evaluating.remove(&i);
        if run.cancelled || run.rec.steps.get(i).map(|s| s.status) != Some(StepStatus::Pending) {
            return Ok(());
        }
        let mut events = Vec::new();
        let settle_as = match done.result {
            Ok(true) => None,
            Ok(false) => Some((
                StepStatus::Skipped,
                format!(
                    "condition is false: {}",
                    run.spec.steps[i].when.as_deref().unwrap_or_default()
                ),
            )),
            Err(e) => Some(condition_failed(&e)),
        };
        match settle_as {
            None => {
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Queued,
                    now,
                    "ready",
                    "scheduler",
                    &mut events,
                );
                let entry = self.entry_for(&done.run_id, i, now);
                self.queue.push(entry);
            }
            Some((status, reason)) => {
                run.rec.steps[i].error = Some(reason.clone());
                set_step(
                    &mut run.rec,
                    i,
                    status,
                    now,
                    reason,
                    "scheduler",
                    &mut events,
                );
            }
        }
        // Settles the step for its downstream steps and marks the run dirty.
        self.advance(&done.run_id, now, "scheduler", &mut events)
    }

    /// The write-behind interval for the runs now waiting to be written.
    fn flush_interval(&self) -> std::time::Duration {
        let largest = self.dirty.most_steps;
        (FLUSH_EVERY * (largest.div_ceil(64).max(1) as u32)).min(FLUSH_MAX)
    }

    /// Stores the pending runs, then writes every run changed since the last
    /// flush, with its new events (through the writer once the main loop
    /// runs); `then` runs once all of it is stored.
    fn flush_then(&mut self, then: Option<Box<dyn FnOnce(Result<()>) + Send>>) -> Result<()> {
        self.insert_pending();
        self.write_behind(then)
    }

    /// Writes every run changed since the last flush (see `flush_then`).
    fn write_behind(&mut self, then: Option<Box<dyn FnOnce(Result<()>) + Send>>) -> Result<()> {
        let dirty = std::mem::take(&mut self.dirty).runs;
        let mut runs = Vec::with_capacity(dirty.len());
        for (id, events) in dirty {
            let rec = self
                .runs
                .get(&id)
                .map(|r| &r.rec)
                .or_else(|| self.finished.get(&id));
            if let Some(rec) = rec {
                runs.push((rec.clone(), events));
            }
        }
        self.finished.clear();
        let usage: Vec<UsageBucket> = self.usage.drain().map(|(_, b)| b).collect();
        match &self.writer {
            Some(writer) => {
                if runs.is_empty() && usage.is_empty() && then.is_none() {
                    return Ok(());
                }
                if let Err(mpsc::error::SendError(job)) =
                    writer.send(WriteJob { runs, usage, then })
                {
                    if let Some(then) = job.then {
                        then(Err(Error::Stopped));
                    }
                    return Err(Error::Stopped);
                }
                Ok(())
            }
            None => {
                let result = self.store.write_runs(&runs, &usage).map_err(Error::from);
                match then {
                    Some(then) => {
                        then(result);
                        Ok(())
                    }
                    None => result,
                }
            }
        }
    }

    /// Starts writing the changed runs (write-behind).
    fn flush(&mut self) -> Result<()> {
        // Runs not yet stored have no changes to write: they are taken up
        // (and changed) only once stored. So this need not wait for them.
        self.write_behind(None)
    }

    /// Handles `cmd` again once everything changed so far is stored, for
    /// commands that read finished runs back from the store.
    fn after_writes(&mut self, cmd: Command) {
        let Some(mailbox) = self.mailbox.clone() else {
            return self.handle(Command::AfterWrites(Box::new(cmd)));
        };
        let requeue = Box::new(move |_written: Result<()>| {
            if let Some(mailbox) = mailbox.upgrade() {
                let _ = mailbox.send(Command::AfterWrites(Box::new(cmd)));
            }
        });
        if let Err(e) = self.flush_then(Some(requeue)) {
            tracing::error!(error = %e, "cannot write runs before a read-back");
        }
    }

    /// Records the `after` edges of a task (replacing its old ones).
    fn index_after(&mut self, record: &crate::model::TaskRecord) {
        self.unindex_after(&record.tenant, &record.name);
        let Ok(spec) = serde_json::from_value::<TaskSpec>(record.spec.clone()) else {
            return;
        };
        if let Some(trigger) = spec.trigger {
            for up in trigger.after {
                self.after_index
                    .entry((record.tenant.clone(), up))
                    .or_default()
                    .push((record.name.clone(), trigger.on.unwrap_or_default()));
            }
        }
    }

    fn unindex_after(&mut self, tenant: &str, task: &str) {
        for ((t, _), downs) in self.after_index.iter_mut() {
            if t == tenant {
                downs.retain(|(d, _)| d != task);
            }
        }
        self.after_index.retain(|_, downs| !downs.is_empty());
    }

    /// Starts the tasks that wait for `rec`'s task to finish (`after`), with
    /// the upstream run's outputs as input. The idempotency key
    /// `after:<run id>` makes a repeated finish (after a crash) start nothing twice.
    fn fire_after(&mut self, rec: &RunRecord, now: Millis) {
        let key = (rec.tenant.clone(), rec.task.clone());
        let Some(downs) = self.after_index.get(&key).cloned() else {
            return;
        };
        for (down, on) in downs {
            let fires = match on {
                AfterOn::Success => rec.status == RunStatus::Succeeded,
                AfterOn::Failure => rec.status == RunStatus::Failed,
                AfterOn::Done => rec.status.is_terminal(),
            };
            if !fires {
                continue;
            }
            let made = self.load_task(&rec.tenant, &down).map(|(task, spec)| {
                let outputs: serde_json::Map<String, serde_json::Value> = rec
                    .steps
                    .iter()
                    .filter_map(|s| s.output.clone().map(|o| (s.name.clone(), o)))
                    .collect();
                let input = serde_json::json!({ "upstream": {
                    "task": rec.task, "run_id": rec.id, "status": rec.status.as_str(), "outputs": outputs,
                }});
                let origin = Origin {
                    trigger: TriggerKind::After,
                    scheduled_for: now,
                    input,
                    idempotency_key: Some(format!("after:{}", rec.id)),
                    priority: spec.priority,
                };
                (self.new_run(&task, &spec, origin, now), spec)
            });
            match made {
                Ok((new, spec)) => {
                    self.create_run(new, spec, false, "scheduler", now, None);
                }
                Err(e) => {
                    tracing::error!(upstream = %rec.task, task = %down, error = %e, "starting an `after` task failed");
                }
            }
        }
    }

    /// Counts a run as active for its task (and queues it behind the others when held).
    fn track(&mut self, key: (String, String), id: &str, held: bool) {
        let t = self.by_task.entry(key).or_default();
        t.active += 1;
        if held {
            t.held.push_back(id.to_string());
        }
    }

    /// Forgets a terminal run and lets the next held run of its task go.
    fn finish_run(&mut self, id: &str, now: Millis) -> Result<()> {
        let Some(run) = self.runs.remove(id) else {
            return Ok(());
        };
        let key = (run.rec.tenant.clone(), run.rec.task.clone());
        self.tenant_metrics
            .of(&run.rec.tenant)
            .run_finished(run.rec.status);
        self.config.alerts.run_ended(&run.rec, &run.spec, now);
        let r = &run.rec;
        if r.status == RunStatus::Succeeded {
            tracing::debug!(run = %r.id, tenant = %r.tenant, task = %r.task, "run succeeded");
        } else {
            tracing::info!(run = %r.id, tenant = %r.tenant, task = %r.task, status = r.status.as_str(),
                reason = r.reason.as_deref().unwrap_or(""), "run ended without success");
        }
        self.fire_after(&run.rec, now);
        let was_held = run.held;
        self.finished.insert(id.to_string(), run.rec);
        let mut next_held = None;
        if let Some(t) = self.by_task.get_mut(&key) {
            t.active = t.active.saturating_sub(1);
            if was_held {
                // A held run that ended (cancelled) frees no slot.
                t.held.retain(|r| r != id);
            } else {
                next_held = t.held.pop_front();
            }
            if t.active == 0 {
                self.by_task.remove(&key);
            }
        }
        if let Some(next) = next_held {
            if let Some(r) = self.runs.get_mut(&next) {
                r.held = false;
            }
            let mut events = Vec::new();
            self.advance(&next, now, "scheduler", &mut events)?;
        }
        Ok(())
    }

    // ----------------------------------------------------------------------
    // Dispatching and finishing attempts
    // ----------------------------------------------------------------------

    fn dispatch(&mut self) {
        let now = self.clock.now_ms();
        while let Some(entry) = self.queue.pop(now) {
            if let Err(e) = self.start(&entry, now) {
                tracing::error!(run = %entry.run_id, error = %e, "starting an attempt failed");
                self.queue.finish(&entry.tenant, &entry.pool);
            }
        }
    }

    fn start(&mut self, entry: &Entry, now: Millis) -> Result<()> {
        let Some(run) = self.runs.get_mut(&entry.run_id) else {
            self.queue.finish(&entry.tenant, &entry.pool);
            return Ok(());
        };
        let i = entry.step;
        if run.rec.steps[i].status != StepStatus::Queued || run.cancelled {
            self.queue.finish(&entry.tenant, &entry.pool);
            return Ok(());
        }
        let spec = run.spec.steps[i].clone();
        let caps = match self.quotas.get(&entry.tenant) {
            Some(q) => q.quota.caps(&self.config.caps),
            None => self.config.caps.clone(),
        };
        let mut limits = spec.limits_capped(&caps);
        let mut grant = Grant::default();
        let mut wall_cut = false;
        if let Some(q) = self.quotas.get_mut(&entry.tenant) {
            q.roll(now);
            match q.admit(&limits) {
                Admit::Go(g) => {
                    let asked = limits.timeout;
                    limits = q.granted(limits, g);
                    wall_cut = limits.timeout < asked;
                    grant = g;
                }
                Admit::Wait | Admit::Exhausted => {
                    // Back in line, behind nothing: it keeps its place.
                    self.queue.finish(&entry.tenant, &entry.pool);
                    self.queue.push(entry.clone());
                    self.apply_quota(&entry.tenant);
                    return Ok(());
                }
            }
            if q.held() {
                self.apply_quota(&entry.tenant);
            }
        }
        let run = self.runs.get_mut(&entry.run_id).expect("checked above");
        let mut events = Vec::new();
        let number = run.rec.steps[i].attempts.len() as u32 + 1;
        let grants = run.spec.step_grants(i);
        // Resolve the input and the plugin; either failing fails the step for good.
        let input = self.resolve_input(&entry.run_id, i, number);
        let plugin = self.plugin(&entry.tenant, &spec.plugin.name, &spec.plugin.version)?;
        let run = self.runs.get_mut(&entry.run_id).expect("present");
        let prepared = match (input, plugin) {
            (Ok(input), Some(plugin)) => Ok((input, plugin)),
            (Err(e), _) => Err(format!("input: {e}")),
            (_, None) => Err(format!("plugin `{}` is not uploaded", spec.plugin)),
        };
        if run.rec.status == RunStatus::Queued {
            self.queued_runs
                .entry(run.rec.tenant.clone())
                .and_modify(|n| *n = n.saturating_sub(1));
            run.rec.started_at = Some(now);
            set_run(
                &mut run.rec,
                RunStatus::Running,
                now,
                "first step started",
                "scheduler",
                &mut events,
            );
            if run.rec.trigger != TriggerKind::Manual {
                let late = (now - run.rec.scheduled_for).max(0) as f64;
                self.stats.record_lateness(late);
                self.config
                    .alerts
                    .started_late(&run.rec, &run.spec, late as i64, now);
                self.tenant_metrics.of(&run.rec.tenant).fire_late(late);
            }
        }
        let (input, plugin) = match prepared {
            Ok(p) => p,
            Err(reason) => {
                if let Some(q) = self.quotas.get_mut(&entry.tenant) {
                    q.settle(grant, WindowUse::default(), now);
                }
                let run = self.runs.get_mut(&entry.run_id).expect("present");
                run.rec.steps[i].error = Some(reason.clone());
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Failed,
                    now,
                    reason,
                    "scheduler",
                    &mut events,
                );
                self.queue.finish(&entry.tenant, &entry.pool);
                return self.advance(&entry.run_id, now, "scheduler", &mut events);
            }
        };
        run.rec.steps[i].input = Some(input.clone());
        run.rec.steps[i].attempts.push(AttemptRecord {
            number,
            outcome: None,
            started_at: now,
            finished_at: None,
            fuel_consumed: 0,
            memory_peak_bytes: 0,
            duration_ms: 0.0,
            error: None,
            error_kind: None,
        });
        set_step(
            &mut run.rec,
            i,
            StepStatus::Running,
            now,
            format!("attempt {number} started"),
            "scheduler",
            &mut events,
        );
        self.dirty
            .add(&entry.run_id, run.rec.steps.len(), &mut events);
        let cancel = CancellationToken::new();
        run.cancels.insert(i, cancel.clone());
        let request = AttemptRequest {
            digest: plugin.digest,
            ctx: AttemptContext {
                run_id: run.rec.id.clone(),
                tenant: run.rec.tenant.clone(),
                task: run.rec.task.clone(),
                step: spec.name.clone(),
                attempt: number,
                scheduled_for: rfc3339(run.rec.scheduled_for),
                trigger: run.rec.trigger,
            },
            input: input.to_string(),
            limits,
            grants,
            cancel,
        };
        let fut = self.runner.run(request);
        let done_tx = self.done_tx.clone();
        let (run_id, tenant, task, pool) = (
            entry.run_id.clone(),
            entry.tenant.clone(),
            run.rec.task.clone(),
            entry.pool.clone(),
        );
        // Log lines of the attempt (runtime, plugin loading) carry its ids.
        let span = tracing::info_span!("attempt", run = %run.rec.id, tenant = %run.rec.tenant,
            task = %run.rec.task, step = %spec.name, attempt = number);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let result = fut.await;
                match &result {
                    Ok(r) => {
                        tracing::debug!(outcome = %r.outcome, duration_ms = r.duration_ms, fuel = r.fuel_consumed, "attempt finished")
                    }
                    Err(e) => tracing::warn!(error = %e, "attempt could not run (host fault)"),
                }
                let _ = done_tx.send(AttemptDone {
                    run_id,
                    step: i,
                    attempt: number,
                    tenant,
                    task,
                    pool,
                    grant,
                    wall_cut,
                    result,
                });
            },
            span,
        ));
        Ok(())
    }

    /// A plugin version's record, from memory once read.
    fn plugin(
        &mut self,
        tenant: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<crate::model::PluginRecord>> {
        let key = (tenant.to_string(), name.to_string(), version.to_string());
        if let Some(record) = self.plugins.get(&key) {
            return Ok(Some(record.clone()));
        }
        let record = self.store.get_plugin(tenant, name, version)?;
        if let Some(record) = &record {
            self.plugins.insert(key, record.clone());
        }
        Ok(record)
    }

    fn resolve_input(
        &self,
        run_id: &str,
        i: usize,
        attempt: u32,
    ) -> std::result::Result<serde_json::Value, String> {
        let run = &self.runs[run_id];
        let biz_date = schedule::biz_date(from_ms(run.rec.scheduled_for), run.tz);
        let scheduled_for = rfc3339(run.rec.scheduled_for);
        let trigger_time = rfc3339(run.rec.created_at);
        let steps = &run.rec.steps;
        let outputs = |name: &str| {
            steps
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.output.as_ref())
        };
        let vars = template::Vars {
            biz_date: &biz_date,
            scheduled_for: &scheduled_for,
            trigger_time: &trigger_time,
            run_id: &run.rec.id,
            attempt,
            input: &run.rec.input,
            step_outputs: &outputs,
        };
        template::render(&run.spec.steps[i].input, &vars).map_err(|e| e.to_string())
    }

    /// An attempt ended: charge it (metrics, usage, the tenant's window
    /// budgets) whatever ended it and whatever became of its run, then
    /// record it in its run and move the run on.
    fn on_done(&mut self, done: AttemptDone) -> Result<()> {
        self.queue.finish(&done.tenant, &done.pool);
        let now = self.clock.now_ms();
        let i = done.step;
        let mut report = done.result.unwrap_or_else(|e| AttemptReport {
            outcome: Outcome::Failed,
            output: None,
            error: Some(format!("host fault: {e}")),
            error_kind: Some(ErrorKind::Fatal),
            fuel_consumed: 0,
            memory_peak_bytes: 0,
            duration_ms: 0.0,
            stdout: String::new(),
            stderr: String::new(),
            logs: Vec::new(),
            progress: None,
        });
        if done.wall_cut
            && report.outcome == Outcome::TimedOut
            && let Some(e) = &mut report.error
        {
            e.push_str(" (its timeout was cut to what was left of the tenant's wall-time budget)");
        }
        self.stats.count_attempt(report.outcome);
        self.tenant_metrics.of(&done.tenant).attempt_done(
            report.outcome,
            report.fuel_consumed,
            report.duration_ms,
        );
        let usage = UsageBucket::attempt(
            &done.tenant,
            &done.task,
            now,
            report.fuel_consumed,
            report.duration_ms,
            report.outcome,
        );
        self.usage
            .entry((usage.tenant.clone(), usage.task.clone(), usage.hour))
            .and_modify(|b| b.add(&usage))
            .or_insert(usage);
        if let Some(q) = self.quotas.get_mut(&done.tenant) {
            let used = WindowUse {
                fuel: report.fuel_consumed,
                wall_ms: duration_ms(std::time::Duration::from_secs_f64(
                    report.duration_ms.max(0.0) / 1e3,
                )),
            };
            q.settle(done.grant, used, now);
            self.apply_quota(&done.tenant);
        }
        // A cancelled run stays in memory until its attempts have reported
        // (`on_cancel`), so this finds it.
        let Some(run) = self.runs.get_mut(&done.run_id) else {
            return Ok(());
        };
        run.cancels.remove(&done.step);
        let step = &mut run.rec.steps[i];
        if let Some(a) = step.attempts.iter_mut().find(|a| a.number == done.attempt) {
            a.outcome = Some(report.outcome);
            a.finished_at = Some(now);
            a.fuel_consumed = report.fuel_consumed;
            a.memory_peak_bytes = report.memory_peak_bytes;
            a.duration_ms = report.duration_ms;
            a.error = report.error.clone();
            a.error_kind = report.error_kind;
        }
        // An attempt that printed and logged nothing has no log entry.
        let quiet = report.stdout.is_empty()
            && report.stderr.is_empty()
            && report.logs.is_empty()
            && report.progress.is_none();
        if !quiet {
            self.store.put_logs(
                &done.run_id,
                &AttemptLogs {
                    step: step.name.clone(),
                    attempt: done.attempt,
                    stdout: report.stdout,
                    stderr: report.stderr,
                    logs: report.logs,
                    progress: report.progress,
                },
            )?;
        }
        let mut events = Vec::new();
        let outcome_reason = match &report.error {
            Some(e) => format!("attempt {}: {} ({e})", done.attempt, report.outcome),
            None => format!("attempt {}: {}", done.attempt, report.outcome),
        };
        if report.outcome != Outcome::Succeeded {
            tracing::info!(run = %done.run_id, tenant = %done.tenant, task = %run.rec.task,
                step = %step.name, attempt = done.attempt, outcome = %report.outcome,
                error = report.error.as_deref().unwrap_or(""), "attempt did not succeed");
        }
        if step.status != StepStatus::Running {
            // Cancelled while running: the step was already settled.
            return self.advance(&done.run_id, now, "scheduler", &mut events);
        }
        match report.outcome {
            Outcome::Succeeded => {
                step.output = report.output;
                step.error = None;
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Succeeded,
                    now,
                    outcome_reason,
                    "scheduler",
                    &mut events,
                );
            }
            Outcome::Cancelled => {
                step.error = report.error;
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Cancelled,
                    now,
                    outcome_reason,
                    "scheduler",
                    &mut events,
                );
            }
            outcome => {
                step.error = report.error.clone();
                let kind = report.error_kind;
                self.after_failure(
                    &done.run_id,
                    i,
                    (outcome, kind),
                    now,
                    "scheduler",
                    &mut events,
                );
            }
        }
        self.advance(&done.run_id, now, "scheduler", &mut events)
    }

    /// A failed attempt: wait and retry, or fail the step (dead-lettering it
    /// when its retries ran out).
    fn after_failure(
        &mut self,
        run_id: &str,
        i: usize,
        (outcome, kind): (Outcome, Option<ErrorKind>),
        now: Millis,
        actor: &str,
        events: &mut Vec<Event>,
    ) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        let policy = run.spec.steps[i].retry.clone();
        let step = &run.rec.steps[i];
        // Attempts lost to host crashes (up to the bound) do not use up retries.
        let counted = (step.attempts.len() as u32)
            .saturating_sub(step.round_start)
            .saturating_sub(step.lost_attempts.min(self.config.max_lost_attempts));
        let error = step.error.clone().unwrap_or_else(|| outcome.to_string());
        if policy.should_retry(counted, outcome, kind) && !run.cancelled {
            let delay = policy.delay(counted, &mut self.rng);
            let at = now + delay.as_millis() as Millis;
            run.rec.steps[i].next_attempt_at = Some(at);
            set_step(
                &mut run.rec,
                i,
                StepStatus::RetryWait,
                now,
                format!(
                    "{outcome}; retrying in {}",
                    humantime::format_duration(delay)
                ),
                actor,
                events,
            );
            self.timers.insert((
                at,
                Timer::Retry {
                    run_id: run_id.to_string(),
                    step: i,
                },
            ));
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let exhausted = policy.max_attempts > 1 && policy.should_retry(0, outcome, kind);
        if exhausted {
            let dead = DeadLetter {
                id: new_id("d", now),
                tenant: run.rec.tenant.clone(),
                task: run.rec.task.clone(),
                run_id: run_id.to_string(),
                step: run.rec.steps[i].name.clone(),
                input: run.rec.steps[i].input.clone(),
                error: Some(error.clone()),
                outcome: Some(outcome),
                attempts: run.rec.steps[i].attempts.len() as u32,
                created_at: now,
                resolution: None,
                resolved_at: None,
            };
            if let Err(e) = self.store.put_dead_letter(&dead) {
                tracing::error!(error = %e, "recording a dead letter failed");
            }
            self.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
            self.config.alerts.dead_letter(&run.rec, &run.spec, &dead);
            tracing::warn!(run = %run_id, tenant = %dead.tenant, task = %dead.task, step = %dead.step,
                attempts = dead.attempts, dead_letter = %dead.id, %outcome, "step dead-lettered");
            set_step(
                &mut run.rec,
                i,
                StepStatus::Dead,
                now,
                format!(
                    "{outcome} after {} attempts; dead letter {}",
                    dead.attempts, dead.id
                ),
                actor,
                events,
            );
        } else {
            set_step(
                &mut run.rec,
                i,
                StepStatus::Failed,
                now,
                format!("{outcome}: {error}"),
                actor,
                events,
            );
        }
    }

    fn retry_due(&mut self, run_id: &str, i: usize, now: Millis) -> Result<()> {
        let Some(run) = self.runs.get_mut(run_id) else {
            return Ok(());
        };
        if run.rec.steps[i].status != StepStatus::RetryWait {
            return Ok(());
        }
        let mut events = Vec::new();
        run.rec.steps[i].next_attempt_at = None;
        set_step(
            &mut run.rec,
            i,
            StepStatus::Queued,
            now,
            "backoff elapsed",
            "scheduler",
            &mut events,
        );
        self.dirty.add(run_id, run.rec.steps.len(), &mut events);
        let entry = self.entry_for(run_id, i, now);
        self.queue.push(entry);
        Ok(())
    }

    // ----------------------------------------------------------------------
    // Run control
    // ----------------------------------------------------------------------

    fn on_cancel(&mut self, run_id: &str, actor: &str) -> Result<RunRecord> {
        let now = self.clock.now_ms();
        let Some(run) = self.runs.get_mut(run_id) else {
            let rec = self
                .store
                .get_run(run_id)?
                .ok_or_else(|| Error::NotFound(format!("run `{run_id}`")))?;
            return Err(Error::Conflict(format!(
                "run `{}` is already {}",
                rec.id,
                rec.status.as_str()
            )));
        };
        if run.cancelled {
            return Err(Error::Conflict(format!(
                "run `{run_id}` is already cancelled"
            )));
        }
        run.cancelled = true;
        run.rec.reason = Some(format!("cancelled by {actor}"));
        let mut events = Vec::new();
        for i in 0..run.rec.steps.len() {
            match run.rec.steps[i].status {
                StepStatus::Running => {
                    if let Some(token) = run.cancels.get(&i) {
                        token.cancel();
                    }
                    set_step(
                        &mut run.rec,
                        i,
                        StepStatus::Cancelled,
                        now,
                        format!("cancelled by {actor}"),
                        actor,
                        &mut events,
                    );
                }
                s if !s.is_terminal() => set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Cancelled,
                    now,
                    format!("cancelled by {actor}"),
                    actor,
                    &mut events,
                ),
                _ => {}
            }
        }
        self.queue.remove_run(run_id);
        let reason = format!("cancelled by {actor}");
        let run = self.runs.get_mut(run_id).expect("present");
        if run.rec.status == RunStatus::Queued {
            self.queued_runs
                .entry(run.rec.tenant.clone())
                .and_modify(|n| *n = n.saturating_sub(1));
        }
        set_run(
            &mut run.rec,
            RunStatus::Cancelled,
            now,
            reason,
            actor,
            &mut events,
        );
        let rec = run.rec.clone();
        let attempts_out = !run.cancels.is_empty();
        self.dirty.add(run_id, run.rec.steps.len(), &mut events);
        // With attempts still running, the run stays in memory until they
        // report, so each is recorded (outcome, end, fuel) and charged.
        if !attempts_out {
            self.finish_run(run_id, now)?;
        }
        Ok(rec)
    }

    fn on_retry(&mut self, run_id: &str, actor: &str) -> Result<RunRecord> {
        // The stored run must be current before it is read back.
        self.flush()?;
        let now = self.clock.now_ms();
        if self.runs.contains_key(run_id) {
            return Err(Error::Conflict(format!("run `{run_id}` is still active")));
        }
        let rec = self
            .store
            .get_run(run_id)?
            .ok_or_else(|| Error::NotFound(format!("run `{run_id}`")))?;
        if rec.status == RunStatus::Succeeded {
            return Err(Error::Conflict(format!(
                "run `{run_id}` succeeded; nothing to retry"
            )));
        }
        self.reopen(
            rec,
            |s| !matches!(s.status, StepStatus::Succeeded | StepStatus::Skipped),
            actor,
            now,
            "retry requested",
        )
    }

    fn on_requeue(&mut self, dead_id: &str, actor: &str) -> Result<RunRecord> {
        self.flush()?;
        let now = self.clock.now_ms();
        let mut dead = self
            .store
            .get_dead_letter(dead_id)?
            .ok_or_else(|| Error::NotFound(format!("dead letter `{dead_id}`")))?;
        if dead.resolution.is_some() {
            return Err(Error::Conflict(format!(
                "dead letter `{dead_id}` is already resolved"
            )));
        }
        if self.runs.contains_key(&dead.run_id) {
            return Err(Error::Conflict(format!(
                "run `{}` is still active",
                dead.run_id
            )));
        }
        let rec = self
            .store
            .get_run(&dead.run_id)?
            .ok_or_else(|| Error::NotFound(format!("run `{}`", dead.run_id)))?;
        let step = dead.step.clone();
        let reopened = self.reopen(
            rec,
            |s| s.name == step || matches!(s.status, StepStatus::Cancelled),
            actor,
            now,
            "dead letter requeued",
        )?;
        dead.resolution = Some(format!("requeued by {actor}"));
        dead.resolved_at = Some(now);
        self.store.put_dead_letter(&dead)?;
        Ok(reopened)
    }

    fn on_rerun_step(&mut self, run_id: &str, step: &str, actor: &str) -> Result<RunRecord> {
        self.flush()?;
        let now = self.clock.now_ms();
        if self.runs.contains_key(run_id) {
            return Err(Error::Conflict(format!("run `{run_id}` is still active")));
        }
        let rec = self
            .store
            .get_run(run_id)?
            .ok_or_else(|| Error::NotFound(format!("run `{run_id}`")))?;
        let spec: TaskSpec = serde_json::from_value(rec.spec.clone())
            .map_err(|e| Error::Conflict(format!("the run's task snapshot is unreadable: {e}")))?;
        let i = spec
            .steps
            .iter()
            .position(|s| s.name == step)
            .ok_or_else(|| Error::NotFound(format!("step `{step}` in run `{run_id}`")))?;
        let names: std::collections::HashSet<String> = Graph::new(&spec)
            .with_descendants(i)
            .into_iter()
            .map(|j| spec.steps[j].name.clone())
            .collect();
        self.reopen(
            rec,
            |s| names.contains(&s.name),
            actor,
            now,
            &format!("rerun of step `{step}` requested"),
        )
    }

    /// Puts a finished run back to work: the steps `reset` selects go back to
    /// pending (their attempts kept, so numbering continues), the rest keep their results.
    fn reopen(
        &mut self,
        mut rec: RunRecord,
        reset: impl Fn(&StepRunRecord) -> bool,
        actor: &str,
        now: Millis,
        reason: &str,
    ) -> Result<RunRecord> {
        let spec: TaskSpec = serde_json::from_value(rec.spec.clone())
            .map_err(|e| Error::Conflict(format!("the run's task snapshot is unreadable: {e}")))?;
        let mut events = Vec::new();
        for i in 0..rec.steps.len() {
            if reset(&rec.steps[i]) {
                rec.steps[i].error = None;
                rec.steps[i].output = None;
                rec.steps[i].next_attempt_at = None;
                // Retries start afresh for the reopened step.
                rec.steps[i].lost_attempts = 0;
                rec.steps[i].round_start = rec.steps[i].attempts.len() as u32;
                set_step(
                    &mut rec,
                    i,
                    StepStatus::Pending,
                    now,
                    reason,
                    actor,
                    &mut events,
                );
            }
        }
        rec.finished_at = None;
        rec.reason = None;
        let from = rec.status;
        rec.status = RunStatus::Queued;
        events.push(event(
            &rec,
            None,
            Some(from.as_str()),
            "queued",
            now,
            reason,
            actor,
        ));
        self.store.update_run(&rec, &events)?;
        let key = (rec.tenant.clone(), rec.task.clone());
        self.track(key, &rec.id, false);
        *self.queued_runs.entry(rec.tenant.clone()).or_default() += 1;
        let id = rec.id.clone();
        self.runs
            .insert(id.clone(), ActiveRun::new(rec, spec, false));
        let mut events = Vec::new();
        self.advance(&id, now, actor, &mut events)?;
        Ok(
            match self
                .runs
                .get(&id)
                .map(|r| r.rec.clone())
                .or_else(|| self.finished.get(&id).cloned())
            {
                Some(r) => r,
                None => self
                    .store
                    .get_run(&id)?
                    .ok_or_else(|| Error::NotFound(format!("run `{id}`")))?,
            },
        )
    }
}
