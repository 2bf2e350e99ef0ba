//! Writing runs: dirty tracking, the write-behind interval, the run writer
//! (batches applied in order off the actor) and commands ordered after writes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use tokio::sync::mpsc;

use super::Actor;
use super::changed::StoredSteps;
use crate::model::Event;
use crate::scheduler::{Command, Error, Result};
use crate::store::{OutboxAlert, RunLogs, RunWrite, Store};
use crate::tenant::UsageBucket;

/// How often changed runs are written when nobody waits for them: a busy
/// run is written at most this often rather than at every step change.
/// Replies to clients flush at once. The same for every run: a write costs
/// what changed (`changed.rs`), so a run of many steps no longer waits
/// longer (it waited 10 ms per 64 steps, up to 250 ms, which was most of
/// `ax bench dag`'s overhead per step; docs/PERFORMANCE.md).
pub(super) const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// The first wait before a refused write is tried again; it doubles up to
/// [`WRITE_RETRY_MAX`].
pub(super) const WRITE_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest wait between two tries of a refused write.
pub(super) const WRITE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs to write, in order, and what to do once they are written.
pub(super) struct WriteJob {
    pub(super) runs: Vec<RunWrite>,
    pub(super) usage: Vec<UsageBucket>,
    /// Outbox alerts the changes raised, stored in the same write.
    pub(super) alerts: Vec<OutboxAlert>,
    /// Attempt logs, stored before the runs ([`put_logs`]).
    pub(super) logs: Vec<RunLogs>,
    pub(super) then: Option<Box<dyn FnOnce(Result<()>) + Send>>,
    /// The job's number ([`InFlight`]); the writer marks it written.
    pub(super) seq: u64,
}

/// Runs handed to the writer and not yet stored. While a run is in flight
/// the store's copy is stale (a finished run still reads `queued` there,
/// with its queue index entry), so whatever reads runs back from the store
/// — refilling the queue's head, taking up a parked run to cancel it — must
/// treat it as held in memory. Without this a run that had just finished
/// was taken up again as parked: run twice, and the parked count fell below
/// the stored one, so the last parked runs were never taken up.
#[derive(Default)]
pub(super) struct InFlight {
    /// The last job the writer has finished with (stored, or given up).
    written: Arc<AtomicU64>,
    /// The last job handed to the writer.
    sent: u64,
    /// Each job still in flight with its runs, oldest first.
    jobs: VecDeque<(u64, Vec<String>)>,
    /// Each run in flight, with the last job that writes it.
    ids: HashMap<String, u64>,
}

impl InFlight {
    /// Numbers the next job, which writes `ids`, and forgets the jobs
    /// already written.
    fn send(&mut self, ids: Vec<String>) -> u64 {
        let written = self.written.load(Ordering::Acquire);
        while self.jobs.front().is_some_and(|(seq, _)| *seq <= written) {
            let (seq, done) = self.jobs.pop_front().expect("checked above");
            for id in done {
                if self.ids.get(&id) == Some(&seq) {
                    self.ids.remove(&id);
                }
            }
        }
        self.sent += 1;
        for id in &ids {
            self.ids.insert(id.clone(), self.sent);
        }
        self.jobs.push_back((self.sent, ids));
        self.sent
    }

    /// Whether run `id` has changes the writer has not stored yet.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.ids
            .get(id)
            .is_some_and(|seq| *seq > self.written.load(Ordering::Acquire))
    }
}

/// Runs `f`, a store call, off the actor on a blocking thread, or at once
/// when `inline` ([`crate::scheduler::SchedulerConfig::inline_store`]); the
/// handle then completes on the runtime's next turn for it, in the order the
/// runtime's own scheduling gives (deterministic on a `current_thread` one).
pub(super) fn off_actor<R: Send + 'static>(
    inline: bool,
    f: impl FnOnce() -> R + Send + 'static,
) -> tokio::task::JoinHandle<R> {
    if inline {
        let done = f();
        tokio::spawn(async move { done })
    } else {
        tokio::task::spawn_blocking(f)
    }
}

/// The run writer: applies the actor's write-behind batches in order, each in
/// `spawn_blocking`, so the actor never waits for the store while runs are
/// due (flushing 50-100 runs took 5-17 ms, during which nothing was
/// dispatched). A job's `then` runs once its runs are written. Blocking tasks
/// also hold tokio's paused test clock, so tests see writes as they happen.
pub(super) fn spawn_writer(
    store: Arc<dyn Store>,
    in_flight: &InFlight,
    alerter: crate::scheduler::alerts::Alerter,
    inline: bool,
) -> mpsc::UnboundedSender<WriteJob> {
    let (tx, mut rx) = mpsc::unbounded_channel::<WriteJob>();
    let written = in_flight.written.clone();
    // Jobs hold what this actor's memory says; once the store is reopened
    // (`Operations::generation`) memory is rebuilt from the store and they are
    // stale: writing them would undo the rebuild.
    let generation = store.generation();
    let stored_steps = Arc::new(std::sync::Mutex::new(StoredSteps::default()));
    tokio::spawn(async move {
        while let Some(WriteJob {
            mut runs,
            mut usage,
            mut alerts,
            logs,
            mut then,
            seq,
        }) = rx.recv().await
        {
            let mut logs = Some(logs);
            let raised_alerts = !alerts.is_empty();
            let mut wait = WRITE_RETRY_FIRST;
            let mut rebased = false;
            let result = loop {
                if runs.is_empty() && usage.is_empty() && alerts.is_empty() {
                    if let Some(logs) = logs.take() {
                        let store = store.clone();
                        let _ = off_actor(inline, move || put_logs(store.as_ref(), logs)).await;
                    }
                    break Ok(());
                }
                if store.generation() != generation {
                    break Err(Error::Store(crate::store::Error::Unavailable(
                        "the store was reopened after a fault; the scheduler starts over from it"
                            .into(),
                    )));
                }
                let job_store = store.clone();
                let logs = logs.take();
                let steps = stored_steps.clone();
                let written = off_actor(inline, move || {
                    put_logs(job_store.as_ref(), logs.unwrap_or_default());
                    let mut steps = steps.lock().unwrap_or_else(PoisonError::into_inner);
                    steps.mark(&mut runs);
                    let result = job_store
                        .write_runs_with_alerts(&runs, &usage, &alerts)
                        .map_err(Error::from);
                    match &result {
                        // The records are not needed after: their steps are
                        // what the next write of each run compares with.
                        Ok(()) => steps.stored(std::mem::take(&mut runs)),
                        Err(_) => steps.forget(),
                    }
                    (result, runs, usage, alerts)
                })
                .await;
                let Ok((result, back_runs, back_usage, back_alerts)) = written else {
                    break Err(Error::Stopped);
                };
                (runs, usage, alerts) = (back_runs, back_usage, back_alerts);
                // A write refused for now (full disk, I/O error) passes: the
                // changes are already applied in memory, so the same records
                // are written again until they are stored (later jobs wait
                // behind them, in order). A waiting reply is told at once.
                let Err(Error::Store(e)) = &result else {
                    break result;
                };
                if matches!(e, crate::store::Error::Conflict { .. }) && !rebased {
                    // This host owns the runs it holds: memory is their
                    // truth. A conflict means an earlier job of theirs was
                    // lost (refused for good, not for now), so memory is
                    // ahead of the store: the records are written over the
                    // stored revisions, once, instead of being lost too.
                    // (Several hosts: only a run's lease holder may.)
                    tracing::warn!(error = %e, "a run's stored revision is behind this host's; writing its records over it");
                    rebased = true;
                    let job_store = store.clone();
                    let back = off_actor(inline, move || {
                        let result = rebase(job_store.as_ref(), &mut runs);
                        (result, runs)
                    })
                    .await;
                    let Ok((rebase_result, back_runs)) = back else {
                        break Err(Error::Stopped);
                    };
                    runs = back_runs;
                    if let Err(e) = rebase_result {
                        break Err(Error::from(e));
                    }
                    continue;
                }
                if !e.is_unavailable() {
                    break result;
                }
                tracing::error!(error = %e, retry_in = ?wait, "writing runs failed; retrying");
                if let Some(then) = then.take() {
                    then(Err(Error::Store(crate::store::Error::Unavailable(
                        format!("writing runs failed: {e}"),
                    ))));
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(WRITE_RETRY_MAX);
            };
            if let Err(e) = &result {
                tracing::error!(error = %e, "writing runs failed");
            }
            written.store(seq, Ordering::Release);
            if raised_alerts {
                alerter.wake();
            }
            if let Some(then) = then {
                then(result);
            }
        }
    });
    tx
}

/// Gives `runs` the revisions that follow the stored ones (a run given
/// twice: the one after the other), for a write over a store that missed
/// some of this host's writes (see the writer).
fn rebase(store: &dyn Store, runs: &mut [RunWrite]) -> crate::store::Result<()> {
    let mut last: HashMap<String, u64> = HashMap::new();
    for RunWrite { run: rec, .. } in runs.iter_mut() {
        let before = match last.get(rec.id.as_str()) {
            Some(&revision) => revision,
            None => match store.get_run(&rec.id)? {
                Some(stored) => stored.revision,
                // Not stored: the write says so itself.
                None => continue,
            },
        };
        rec.revision = before + 1;
        last.insert(rec.id.clone().into(), rec.revision);
    }
    Ok(())
}

/// Stores attempt logs. They are kept apart from the run: a store that
/// refuses them must not cost the attempt its result (the run would wait
/// forever), so a refusal is reported and the logs are dropped.
///
/// Logs travel with the write-behind rather than being stored when the
/// attempt reports: stored on the actor, one sled batch per attempt, they
/// were most of the actor's time per finished attempt (6 % of the server's
/// CPU under bulk triggers, docs/PERFORMANCE.md). They are stored before the
/// runs of the same job, so a run read back finished has its logs.
fn put_logs(store: &dyn Store, logs: Vec<RunLogs>) {
    if logs.is_empty() {
        return;
    }
    // One write for the batch (one transaction on PostgreSQL).
    if let Err(e) = store.put_logs_batch(&logs) {
        let runs: Vec<&str> = logs.iter().map(|l| l.run_id.as_str()).collect();
        tracing::error!(?runs, error = %e, "cannot store attempts' logs");
    }
}

/// How long a deferred change ([`Dirty::defer`]) may wait for its run's
/// next change before the write-behind writes it alone.
pub(super) const DEFER_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs changed since the last flush, with their events not yet stored.
///
/// *Deferred changes.* A run just stored, or taken up from the store as it
/// is (a parked run, a queued run read at start), has its first steps made
/// ready at once (steps `pending` → `queued`, conditions asked for, a
/// release timer set). A restart derives exactly that again from the stored
/// run (recovery advances every queued run it reads), so it need not cost a
/// write of its own: it is held in `deferred` and goes with the run's next change (its
/// attempt's start and end, usually in one write), or alone once it is
/// [`DEFER_MAX`] old, or at a clean stop. Until then the store shows the run
/// `queued` with its steps `pending`, a view at most `DEFER_MAX` behind.
/// This took one of a one-step run's three writes away (docs/PERFORMANCE.md,
/// *A new run's first steps written with its next change*).
#[derive(Default)]
pub(super) struct Dirty {
    pub(super) runs: HashMap<String, Vec<Event>>,
    /// Outbox alerts raised by these changes: written with them.
    pub(super) alerts: Vec<OutboxAlert>,
    /// Attempt logs of the attempts that reported since.
    pub(super) logs: Vec<RunLogs>,
    /// Deferred changes (above): never a run that is also in `runs`.
    deferred: HashMap<String, Vec<Event>>,
    /// When each run was deferred, oldest first; a run since written or
    /// deferred again is skipped or written early, never late.
    deferred_at: VecDeque<(tokio::time::Instant, String)>,
}

impl Dirty {
    pub(super) fn add(&mut self, id: &str, events: &mut Vec<Event>) {
        if let Some(mut earlier) = self.deferred.remove(id) {
            earlier.append(events);
            *events = earlier;
        }
        match self.runs.get_mut(id) {
            Some(pending) => pending.append(events),
            None => {
                self.runs.insert(id.to_string(), std::mem::take(events));
            }
        }
    }

    /// Holds a change a restart derives again from the stored run until
    /// the run's next change (type doc); joins the changes to write if the
    /// run has some already.
    pub(super) fn defer(&mut self, id: &str, events: &mut Vec<Event>, now: tokio::time::Instant) {
        if let Some(pending) = self.runs.get_mut(id) {
            pending.append(events);
            return;
        }
        match self.deferred.get_mut(id) {
            Some(earlier) => earlier.append(events),
            None => {
                self.deferred.insert(id.to_string(), std::mem::take(events));
                self.deferred_at.push_back((now, id.to_string()));
            }
        }
    }

    /// Moves the deferred changes due at `now` (all of them with `all`) to
    /// the changes to write.
    fn take_deferred(&mut self, now: tokio::time::Instant, all: bool) {
        while let Some((at, _)) = self.deferred_at.front() {
            if !all && *at + DEFER_MAX > now {
                break;
            }
            let (_, id) = self.deferred_at.pop_front().expect("checked above");
            if let Some(events) = self.deferred.remove(&id) {
                self.runs.insert(id, events);
            }
        }
    }

    /// When the oldest deferred change falls due.
    pub(super) fn deferred_due(&mut self) -> Option<tokio::time::Instant> {
        while let Some((at, id)) = self.deferred_at.front() {
            if self.deferred.contains_key(id) {
                return Some(*at + DEFER_MAX);
            }
            self.deferred_at.pop_front();
        }
        None
    }

    /// Whether run `id` has changes not written yet, deferred or not.
    fn holds(&self, id: &str) -> bool {
        self.runs.contains_key(id) || self.deferred.contains_key(id)
    }

    /// Whether there is nothing to write at the next flush (deferred
    /// changes not counted: [`Dirty::deferred_due`] says when they are).
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.alerts.is_empty() && self.logs.is_empty()
    }
}

impl Actor {
    /// Stores the pending runs, then writes every run changed since the last
    /// flush, with its new events (through the writer once the main loop
    /// runs); `then` runs once all of it is stored.
    pub(super) fn flush_then(
        &mut self,
        then: Option<Box<dyn FnOnce(Result<()>) + Send>>,
    ) -> Result<()> {
        self.insert_pending();
        self.write_behind(then, false)
    }

    /// Writes every run changed since the last flush (see `flush_then`),
    /// with the deferred changes that are due ([`Dirty`]), or all of them
    /// with `all`.
    pub(super) fn write_behind(
        &mut self,
        then: Option<Box<dyn FnOnce(Result<()>) + Send>>,
        all: bool,
    ) -> Result<()> {
        self.dirty.take_deferred(tokio::time::Instant::now(), all);
        let dirty = std::mem::take(&mut self.dirty.runs);
        let alerts = std::mem::take(&mut self.dirty.alerts);
        let logs = std::mem::take(&mut self.dirty.logs);
        let mut runs = Vec::with_capacity(dirty.len());
        for (id, mut events) in dirty {
            // An ended run is written after the `after` runs it started.
            if self.after_held(&id) {
                self.dirty.add(&id, &mut events);
                continue;
            }
            // A spilled record written as it is would lose the stored input
            // (`spill`): it is read back first, or the write waits.
            if let Err(e) = self.unspill(&id) {
                tracing::error!(run = %id, error = %e, "cannot read a run's input back; its write waits");
                self.dirty.add(&id, &mut events);
                continue;
            }
            debug_assert!(!self.spilled.contains(&id), "a spilled run is written");
            // Each write stores the record's next revision; the writer
            // applies jobs in order, so memory stays the revision the
            // store will hold (a refused write is tried again as it is).
            let rec = match self.runs.get_mut(&id) {
                Some(run) => Some(&mut run.rec),
                None => self.finished.get_mut(&id),
            };
            if let Some(rec) = rec {
                rec.next_revision();
                runs.push(RunWrite::whole(rec.clone(), events));
            }
        }
        if self.after_holds.is_empty() && self.after_refire.is_empty() {
            self.finished.clear();
        } else {
            let (holds, refire) = (&self.after_holds, &self.after_refire);
            self.finished
                .retain(|id, _| holds.contains_key(id) || refire.contains(id));
        }
        // Queued runs are stored whole by this write: their inputs can go.
        let queued: Vec<String> = runs
            .iter()
            .filter(|w| w.run.status == crate::model::RunStatus::Queued)
            .map(|w| w.run.id.to_string())
            .collect();
        for id in queued {
            self.spill(&id);
        }
        let usage: Vec<UsageBucket> = self.usage.drain().map(|(_, b)| b).collect();
        match &self.writer {
            Some(writer) => {
                if runs.is_empty()
                    && usage.is_empty()
                    && alerts.is_empty()
                    && logs.is_empty()
                    && then.is_none()
                {
                    return Ok(());
                }
                let seq = self
                    .in_flight
                    .send(runs.iter().map(|w| w.run.id.to_string()).collect());
                if let Err(mpsc::error::SendError(job)) = writer.send(WriteJob {
                    runs,
                    usage,
                    alerts,
                    logs,
                    then,
                    seq,
                }) {
                    if let Some(then) = job.then {
                        then(Err(Error::Stopped));
                    }
                    return Err(Error::Stopped);
                }
                Ok(())
            }
            None => {
                put_logs(self.store.as_ref(), logs);
                let result = self
                    .store
                    .write_runs_with_alerts(&runs, &usage, &alerts)
                    .map_err(Error::from);
                if !alerts.is_empty() {
                    self.config.alerts.wake();
                }
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
    pub(super) fn flush(&mut self) -> Result<()> {
        // Runs not yet stored have no changes to write: they are taken up
        // (and changed) only once stored. So this need not wait for them.
        self.write_behind(None, false)
    }

    /// Whether run `id` has changes not yet stored (waiting for the next
    /// write-behind, held behind its `after` runs, or handed to the writer).
    pub(super) fn unwritten(&self, id: &str) -> bool {
        self.dirty.holds(id) || self.finished.contains_key(id) || self.in_flight.contains(id)
    }

    /// Handles `cmd` again once everything changed so far is stored, for
    /// commands that read finished runs back from the store.
    pub(super) fn after_writes(&mut self, cmd: Command) {
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
}
