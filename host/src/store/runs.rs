//! [`Runs`]: runs with their events, attempt logs and attempt records, the
//! persistent queue, idempotency keys and dead letters.
//!
//! The persistent *queue* is the set of `queued` runs, indexed in dispatch
//! order per tenant ([`Runs::queued_runs`]): the scheduler holds a bounded
//! head of it in memory and reads on as it drains; on start it reads the
//! running runs and each tenant's head. The index is written with the run,
//! so there is no second copy of the queue to drift.

use serde::{Deserialize, Serialize};

use super::Result;
use super::outbox::OutboxAlert;
use crate::model::ids::{RunId, TaskName, TenantId};
use crate::model::record::AttemptRecord;
use crate::model::{
    DeadLetter, Event, LogRecord, Millis, Progress, RunRecord, RunStatus, ScheduleState,
    TriggerKind,
};
use crate::tenant::UsageBucket;

/// A run to insert, with what is written in the same atomic write.
#[derive(Clone, Debug)]
pub struct NewRun {
    /// The run.
    pub run: RunRecord,
    /// Refuse it if a run exists for (tenant, task, scheduled_for).
    pub unique_fire: bool,
    /// The schedule's progress, stored with the run.
    pub schedule: Option<ScheduleState>,
    /// Its creation events.
    pub events: Vec<Event>,
    /// When the run's idempotency key (if it has one) is forgotten: until
    /// then the key answers with this run, even after retention deleted it
    /// ([`Insert::Forgotten`]); [`Runs::expire_keys`] frees it after.
    pub key_expires_at: Millis,
}

/// An idempotency key as a store holds it: the run it answers with (which
/// retention may have deleted: the key then answers
/// [`Insert::Forgotten`]) until it expires. What a dump carries of the
/// keys whose run is gone ([`Runs::forgotten_keys`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyEntry {
    /// The tenant.
    pub tenant: TenantId,
    /// The task.
    pub task: TaskName,
    /// The key.
    pub key: String,
    /// The run it answers with.
    pub run_id: RunId,
    /// When it is freed ([`NewRun::key_expires_at`]).
    pub expires_at: Millis,
}

impl KeyEntry {
    /// Its place in [`Runs::forgotten_keys`]' order.
    pub fn order(&self) -> (Millis, &str, &str, &str) {
        (
            self.expires_at,
            self.tenant.as_str(),
            self.task.as_str(),
            self.key.as_str(),
        )
    }
}

/// A run with everything kept beside it: what a dump holds of it
/// ([`Runs::whole_runs`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WholeRun {
    /// The run.
    pub run: RunRecord,
    /// Its events, oldest first.
    pub events: Vec<Event>,
    /// Its attempts' captured output, by step then attempt.
    pub logs: Vec<AttemptLogs>,
    /// The records kept of its attempts, in the order of its steps and
    /// their attempts.
    pub records: Vec<AttemptRecord>,
    /// The run's and its logs' JSON as a dump holds them, when it is what
    /// encoding them again gives (`store::dump` says when): a store that
    /// keeps them as JSON stores these bytes instead of encoding them
    /// again. Not serialized, and not compared.
    #[serde(skip)]
    pub json: DumpJson,
}

/// The JSON text a dump line holds of a run, of its events and of each of
/// its logs ([`WholeRun::json`]); none unless read from a dump.
#[derive(Clone, Debug, Default)]
pub struct DumpJson(Option<std::sync::Arc<JsonSpans>>);

/// A dump's line and where in it are a run's record, its events and its
/// logs.
#[derive(Debug)]
pub struct JsonSpans {
    /// The line.
    pub line: Vec<u8>,
    /// The run's record.
    pub run: std::ops::Range<usize>,
    /// Its events, as one list.
    pub events: std::ops::Range<usize>,
    /// Each of its logs, in order.
    pub logs: Vec<std::ops::Range<usize>>,
}

impl DumpJson {
    /// Spans of `spans.line`.
    pub fn new(spans: JsonSpans) -> Self {
        DumpJson(Some(std::sync::Arc::new(spans)))
    }

    /// The run's record's JSON, if known.
    pub fn run(&self) -> Option<&[u8]> {
        self.0.as_deref().map(|s| &s.line[s.run.clone()])
    }

    /// The JSON of the run's list of events, if known.
    pub fn events(&self) -> Option<&[u8]> {
        self.0.as_deref().map(|s| &s.line[s.events.clone()])
    }

    /// The JSON of the run's `i`th logs, if known.
    pub fn logs(&self, i: usize) -> Option<&[u8]> {
        let spans = self.0.as_deref()?;
        spans.logs.get(i).map(|r| &spans.line[r.clone()])
    }
}

/// Text the value came from, not part of it: any two are equal.
impl PartialEq for DumpJson {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// One attempt's captured output with the run it belongs to and the
/// tenant its bytes are charged to ([`Runs::put_logs_batch`]).
#[derive(Clone, Debug)]
pub struct RunLogs {
    /// Charged with the bytes unless the run is stored (then its tenant is).
    pub tenant: String,
    /// The run.
    pub run_id: String,
    /// The attempt's output.
    pub logs: AttemptLogs,
}

/// A run to write ([`Runs::write_runs_with_alerts`]): its new record, the
/// events the change made, and which of its step runs changed.
#[derive(Clone, Debug)]
pub struct RunWrite {
    /// The run as it is now, carrying the revision the write makes.
    pub run: RunRecord,
    /// Its events since the last write.
    pub events: Vec<Event>,
    /// Which of `run.steps` differ from the stored revision's.
    pub changed: Changed,
}

impl RunWrite {
    /// A write of `run` with `events` that does not say which steps changed.
    pub fn whole(run: RunRecord, events: Vec<Event>) -> Self {
        RunWrite {
            run,
            events,
            changed: Changed::All,
        }
    }
}

/// Which step runs of a [`RunWrite`] changed since the stored revision (the
/// one before the write's): a store that keeps step runs apart writes only
/// those (sled's large runs, `sled/definitions.rs`). What a writer says is
/// trusted: it must know the stored revision's steps, as the scheduler's
/// run writer does for the runs it wrote last (`scheduler/actor/write.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Changed {
    /// Any of them (or not known): every step is written.
    #[default]
    All,
    /// Only these, by index into [`RunRecord::steps`]; a step past the
    /// stored revision's last is written whether it is named or not.
    Steps(Vec<usize>),
}

impl Changed {
    /// What two writes of one run in one call changed together.
    pub fn union(self, other: Changed) -> Changed {
        match (self, other) {
            (Changed::Steps(mut a), Changed::Steps(b)) => {
                a.extend(b);
                a.sort_unstable();
                a.dedup();
                Changed::Steps(a)
            }
            _ => Changed::All,
        }
    }

    /// Whether step `index` is to be written.
    pub fn has(&self, index: usize) -> bool {
        match self {
            Changed::All => true,
            Changed::Steps(steps) => steps.binary_search(&index).is_ok(),
        }
    }
}

/// What inserting a run did ([`Runs::insert_runs`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Insert {
    /// The run was stored.
    Created,
    /// A run with the same idempotency key, or for the same (task,
    /// scheduled_for) fire, already exists: nothing was written.
    Existing(Box<RunRecord>),
    /// The idempotency key belongs to a run that retention has deleted (its
    /// id here); the key is remembered until it expires: nothing was written.
    Forgotten(RunId),
}

/// Which runs to list, newest first.
#[derive(Clone, Debug, Default)]
pub struct RunQuery {
    /// Only this tenant's runs (`None`: all tenants — admin and internal use).
    pub tenant: Option<String>,
    /// Only this task's runs.
    pub task: Option<String>,
    /// Only runs in this state.
    pub status: Option<RunStatus>,
    /// At most this many (at least 1).
    pub limit: usize,
    /// Continue after this cursor (the `next` of the previous page).
    pub cursor: Option<String>,
    /// Only runs created at or after this instant. Ids sort by creation
    /// ([`super::rules::new_id`]), so this bounds the index scan itself:
    /// the listing ends at the first older id ([`super::rules::id_floor`]).
    pub since: Option<Millis>,
    /// Only runs created before this instant: the scan starts below it, as
    /// below a cursor.
    pub until: Option<Millis>,
}

/// A page of runs.
#[derive(Clone, Debug, Default)]
pub struct RunPage {
    /// The runs, newest first.
    pub runs: Vec<RunRecord>,
    /// Cursor for the next page, if there may be more.
    pub next: Option<String>,
}

/// Captured output of one attempt (kept apart from the run record: it can be large).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttemptLogs {
    /// The step.
    pub step: String,
    /// The attempt number.
    pub attempt: u32,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
    /// Structured log records.
    pub logs: Vec<LogRecord>,
    /// Last progress reported.
    pub progress: Option<Progress>,
}

/// A run as the indexes know it (see [`Runs::run_summaries_page`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// Owning tenant.
    pub tenant: TenantId,
    /// Task name.
    pub task: TaskName,
    /// Run id (sorts by creation; see [`super::rules::new_id`]).
    pub id: RunId,
    /// Current state.
    pub status: RunStatus,
}

/// Runs and what hangs off them.
pub trait Runs {
    /// Stores new runs, each with its creation events and (if given) its
    /// schedule's progress, in one atomic write, with one outcome per run,
    /// in order. A run is not stored if a run exists for the same
    /// idempotency key (tenant, task, key) or — when `unique_fire` — for the
    /// same (tenant, task, scheduled_for): it is checked against the stored
    /// runs and the runs before it in `runs` (a repeated key or fire yields
    /// [`Insert::Existing`] with the earlier run).
    /// A run is stored with the revision it carries
    /// ([`super::rules::FIRST_REVISION`] for a new one).
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>>;
    /// Replaces runs, appends their events, adds `usage` and stores new
    /// outbox alerts, as one atomic write (an alert is stored with the
    /// change that raised it, or not at all).
    ///
    /// Each run is a compare-and-set: it carries the revision it makes
    /// ([`RunRecord::revision`]), which must be the stored one + 1 (a run
    /// given twice: its revisions follow each other). Otherwise another
    /// writer stored the run meanwhile, and the whole write is refused with
    /// [`super::Error::Conflict`], nothing stored. The scheduler writes every run
    /// it changed since its last write this way: sled seals and writes its
    /// log buffer twice per batch, so one batch per run cost more than the
    /// runs themselves. A run given twice is written as its last record with
    /// both lists of events. A run that is not stored is left out (writing
    /// it would resurrect half a run) and reported as an error once the
    /// others are written. Each run says which of its steps changed
    /// ([`Changed`]); a store may write only those.
    fn write_runs_with_alerts(
        &self,
        runs: &[RunWrite],
        usage: &[UsageBucket],
        alerts: &[OutboxAlert],
    ) -> Result<()>;
    /// One run.
    fn get_run(&self, id: &str) -> Result<Option<RunRecord>>;
    /// Runs matching `query`, newest first, with a cursor.
    fn list_runs(&self, query: &RunQuery) -> Result<RunPage>;
    /// Every run in `running` state (recovery reads them whole: their
    /// attempts that were running are lost).
    fn running_runs(&self) -> Result<Vec<RunRecord>>;
    /// The persistent queue: a tenant's `queued` runs in dispatch order
    /// ([`queue_order`](crate::model::priority::queue_order) of creation and
    /// priority, then id), at most `limit`. The scheduler holds a bounded
    /// head of it and reads on as the head drains.
    fn queued_runs(&self, tenant: &str, limit: usize) -> Result<Vec<RunRecord>>;
    /// The ids of [`Runs::queued_runs`], from the index alone (no record
    /// read): what the scheduler scans past its head with.
    fn queued_ids(&self, tenant: &str, limit: usize) -> Result<Vec<RunId>>;
    /// Queued runs counted per (tenant, task), by tenant then task: what
    /// recovery reads instead of the queue, so a store answers it without
    /// reading a key per queued run (sled keeps counters beside the queue's
    /// index, `sled/counts.rs`).
    fn queued_counts(&self) -> Result<Vec<(TenantId, TaskName, usize)>>;
    /// Deletes a terminal run with its events, logs and fire key
    /// (retention). Its idempotency key stays until it expires.
    fn delete_run(&self, id: &str) -> Result<bool>;
    /// Frees the idempotency keys that expired at or before `now` (their
    /// [`NewRun::key_expires_at`]), oldest first, at most `limit`; returns
    /// how many. A later run may take a freed key.
    fn expire_keys(&self, now: Millis, limit: usize) -> Result<usize>;
    /// The idempotency keys held whose run is no longer stored (retention
    /// deleted it; the key answers [`Insert::Forgotten`] until it expires),
    /// at most `limit`, in [`KeyEntry::order`] — by when they expire, then
    /// tenant, task and key — starting after `after` (`None`: from the
    /// start). A dump carries them; a kept run's key comes back with it.
    fn forgotten_keys(&self, after: Option<&KeyEntry>, limit: usize) -> Result<Vec<KeyEntry>>;
    /// Stores `keys` as given (an import), each unless its (tenant, task,
    /// key) is already held.
    fn restore_keys(&self, keys: &[KeyEntry]) -> Result<()>;
    /// Runs as their indexes know them, at most `limit`, in descending
    /// (tenant, task, id) order — newest first within a task, since ids sort
    /// by creation — starting after `after` in that order (`None`: from the
    /// start). Reads no run record; the retention sweep walks it a page at a
    /// time, so a sweep holds one page however many runs are stored.
    fn run_summaries_page(
        &self,
        after: Option<&RunSummary>,
        limit: usize,
    ) -> Result<Vec<RunSummary>>;
    /// A run's events, oldest first.
    fn events(&self, run_id: &str) -> Result<Vec<Event>>;
    /// Bytes of run data `tenant` keeps: its runs' records, events, logs
    /// and attempt records, as the store holds them. Counted as they are
    /// written and deleted, never by reading the runs (sled:
    /// `sled/footprint.rs`), so the scheduler can read it at every trigger:
    /// it is what the tenant's `run_bytes` quota bounds (docs/TENANTS.md,
    /// *Storage*).
    fn run_bytes(&self, tenant: &str) -> Result<u64>;
    /// Stores an attempt's captured output, counted in `tenant`'s
    /// [`Runs::run_bytes`].
    fn put_logs(&self, tenant: &str, run_id: &str, logs: &AttemptLogs) -> Result<()>;
    /// Stores several attempts' captured output, each as [`Runs::put_logs`]
    /// does, in one write where the store can (PostgreSQL: one transaction
    /// of a few statements whatever their number; one each was a commit per
    /// attempt). All or nothing where it is one write.
    /// Elsewhere each is its own write: one refused does not keep the
    /// others out, and the first refusal is returned.
    fn put_logs_batch(&self, logs: &[RunLogs]) -> Result<()> {
        let mut refused = None;
        for l in logs {
            if let Err(e) = self.put_logs(&l.tenant, &l.run_id, &l.logs) {
                refused.get_or_insert(e);
            }
        }
        refused.map_or(Ok(()), Err)
    }
    /// A run's captured output, by step then attempt.
    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>>;
    /// Keeps the record of one attempt (`record:`, for `ax run replay`),
    /// replacing one kept before for the same attempt. Removed with its run.
    fn put_record(&self, record: &AttemptRecord) -> Result<()>;
    /// The runs of `ids` that are stored (one deleted meanwhile is left
    /// out), in that order, each whole ([`WholeRun`]): what `ax store
    /// export` writes. By default a read of each part per run; PostgreSQL
    /// reads the whole page in four statements (one round trip per part of
    /// each run held its export near 800 runs/s).
    fn whole_runs(&self, ids: &[&str]) -> Result<Vec<WholeRun>> {
        let mut whole = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(run) = self.get_run(id)? else {
                continue;
            };
            let events = self.events(id)?;
            let logs = self.logs(id)?;
            let mut records = Vec::new();
            for step in &run.steps {
                for attempt in &step.attempts {
                    if let Some(record) = self.get_record(id, &step.name, attempt.number)? {
                        records.push(record);
                    }
                }
            }
            whole.push(WholeRun {
                run,
                events,
                logs,
                records,
                json: Default::default(),
            });
        }
        Ok(whole)
    }
    /// Stores runs read from a dump (`ax store import`) into a store that
    /// holds none of them yet, in their order, each whole: with its
    /// events, logs and attempt records, its idempotency key (remembered
    /// until `key_ttl` after the run's creation) and, for a run its task's
    /// trigger made for an instant ([`claims_fire`]), that fire; of two
    /// runs for one fire the first claims it, the second is stored without
    /// it (as in the store they came from). Returns the first run refused
    /// because its id or idempotency key is already held (the dump holds
    /// it twice): runs before it may be stored. By default
    /// [`restore_by_inserts`]; PostgreSQL copies each part in bulk.
    fn restore_runs(&self, runs: Vec<WholeRun>, key_ttl: Millis) -> Result<Option<RunId>> {
        restore_by_inserts(self, runs, key_ttl)
    }
    /// Keeps several attempts' records, each as [`Runs::put_record`] does,
    /// in one write where the store can (as [`Runs::put_logs_batch`]).
    fn put_records(&self, records: &[AttemptRecord]) -> Result<()> {
        let mut refused = None;
        for record in records {
            if let Err(e) = self.put_record(record) {
                refused.get_or_insert(e);
            }
        }
        refused.map_or(Ok(()), Err)
    }
    /// The record of attempt `attempt` of `step` in run `run_id`, if kept.
    fn get_record(&self, run_id: &str, step: &str, attempt: u32) -> Result<Option<AttemptRecord>>;

    /// Creates or replaces a dead letter.
    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()>;
    /// One dead letter.
    fn get_dead_letter(&self, id: &str) -> Result<Option<DeadLetter>>;
    /// A tenant's dead letters, newest first (`open_only`: unresolved ones).
    fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>>;
}

/// Whether `run` was made by its task's trigger for an instant, and so
/// claims the fire (tenant, task, instant) as the scheduler's fires do.
pub fn claims_fire(run: &RunRecord) -> bool {
    trigger_claims_fire(run.trigger)
}

/// Whether a run started by `trigger` claims its fire ([`claims_fire`]).
pub fn trigger_claims_fire(trigger: TriggerKind) -> bool {
    matches!(
        trigger,
        TriggerKind::Cron | TriggerKind::At | TriggerKind::Every | TriggerKind::Delay
    )
}

/// [`Runs::restore_runs`] through the seam's own writes: the runs by
/// [`Runs::insert_runs`] (a run whose fire an earlier run holds inserted
/// again without it), then their logs and records in one write each.
pub fn restore_by_inserts<S: Runs + ?Sized>(
    store: &S,
    runs: Vec<WholeRun>,
    key_ttl: Millis,
) -> Result<Option<RunId>> {
    let mut news = Vec::with_capacity(runs.len());
    let (mut logs, mut records) = (Vec::new(), Vec::new());
    for whole in runs {
        let WholeRun {
            run,
            events,
            logs: run_logs,
            records: run_records,
            ..
        } = whole;
        logs.extend(run_logs.into_iter().map(|logs| RunLogs {
            tenant: run.tenant.to_string(),
            run_id: run.id.to_string(),
            logs,
        }));
        records.extend(run_records);
        news.push(NewRun {
            unique_fire: claims_fire(&run),
            key_expires_at: run.created_at.saturating_add(key_ttl),
            run,
            schedule: None,
            events,
        });
    }
    let outcomes = store.insert_runs(&news)?;
    for (new, outcome) in news.iter_mut().zip(outcomes) {
        match outcome {
            Insert::Created => {}
            Insert::Existing(other) if other.id != new.run.id && new.unique_fire => {
                new.unique_fire = false;
                if store.insert_runs(std::slice::from_ref(new))? != [Insert::Created] {
                    return Ok(Some(new.run.id.clone()));
                }
            }
            _ => return Ok(Some(new.run.id.clone())),
        }
    }
    store.put_logs_batch(&logs)?;
    store.put_records(&records)?;
    Ok(None)
}
