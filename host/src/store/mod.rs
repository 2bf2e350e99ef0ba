//! Durable state behind one domain-level trait: tasks, plugins, runs (with
//! their step runs and attempts), events, schedules, idempotency keys, dead
//! letters, attempt logs. The scheduler and the API see only [`Store`]; sled
//! appears only in [`sled`], so a PostgreSQL store can be added later.
//!
//! The persistent *queue* is the set of `queued` runs, indexed in dispatch
//! order per tenant ([`Store::queued_runs`]): the scheduler holds a bounded
//! head of it in memory and reads on as it drains; on start it reads the
//! running runs and each tenant's head. The index is written with the run,
//! so there is no second copy of the queue to drift.
//!
//! The alert **outbox** ([`OutboxAlert`]) is written with the run change
//! that raised it ([`Store::write_runs_with_alerts`], one atomic write), and
//! read back by the delivery worker in next-try order
//! ([`Store::due_alerts`]); see `scheduler/alerts`.
//!
//! Durability: writes land in the store at once but reach the disk in groups.
//! Whoever must not answer a client before a write is on disk takes a
//! [`SyncTicket`] after writing and awaits it (group commit: one flusher
//! thread, many waiters).

pub mod faults;
pub mod guard;
pub mod kv;
pub mod memory;
mod resolve;
pub mod secrets;
pub mod sled;

#[cfg(test)]
mod conformance;

pub use self::resolve::{Unresolved, resolve_plugin};
pub use self::sled::SledStore;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::record::AttemptRecord;
use crate::model::{
    DeadLetter, Event, LogRecord, Millis, PluginRecord, PluginTag, Progress, RunRecord, RunStatus,
    ScheduleState, TaskRecord,
};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store on disk cannot be used (corrupt, wrong format, locked).
    #[error("the store at {path} cannot be opened: {reason}. {hint}")]
    Unusable {
        /// The data directory.
        path: String,
        /// What went wrong.
        reason: String,
        /// What the operator can do.
        hint: String,
    },
    /// An I/O error on the data directory.
    #[error("store I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A stored value could not be decoded.
    #[error("corrupt record {key}: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// Any other backend failure.
    #[error("store backend error: {0}")]
    Backend(String),
    /// The store cannot write now (a full disk, an I/O error, a database
    /// being reopened after one): nothing of the write was stored, and the
    /// same write may succeed later ([`Error::is_unavailable`]).
    #[error("the store cannot write now: {0}")]
    Unavailable(String),
}

impl Error {
    /// Whether this is a refusal to write *now* (full disk, I/O error) that
    /// goes away by itself once writes succeed again: [`Error::Io`] and
    /// [`Error::Unavailable`]. The API answers it 503 `store_unavailable`
    /// with `Retry-After`; the scheduler holds its writes and stops firing
    /// until the store writes again (docs/RELIABILITY.md, "Store faults").
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Unavailable(_))
    }

    /// The same error again, for a second waiter (errors are not `Clone`:
    /// an I/O error keeps its kind and text, the rest their text).
    pub fn duplicate(&self) -> Self {
        match self {
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::Unavailable(m) => Error::Unavailable(m.clone()),
            Error::Unusable { path, reason, hint } => Error::Unusable {
                path: path.clone(),
                reason: reason.clone(),
                hint: hint.clone(),
            },
            Error::Corrupt { key, reason } => Error::Corrupt {
                key: key.clone(),
                reason: reason.clone(),
            },
            Error::Backend(m) => Error::Backend(m.clone()),
        }
    }
}

/// Result type of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// ([`Insert::Forgotten`]); [`Store::expire_keys`] frees it after.
    pub key_expires_at: Millis,
}

/// What `insert_run` did.
#[derive(Clone, Debug, PartialEq)]
pub enum Insert {
    /// The run was stored.
    Created,
    /// A run with the same idempotency key, or for the same (task,
    /// scheduled_for) fire, already exists: nothing was written.
    Existing(Box<RunRecord>),
    /// The idempotency key belongs to a run that retention has deleted (its
    /// id here); the key is remembered until it expires: nothing was written.
    Forgotten(String),
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

/// Where an outbox alert is (see [`OutboxAlert`]).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    /// Waiting for its next try (`next_try`).
    Pending,
    /// Delivered (a 2xx answer); kept for a while to be seen, then aged out.
    Delivered,
    /// Given up: attempts exhausted, refused by the receiver (4xx, 3xx) or
    /// by the rules; kept until retried or aged out.
    Dead,
}

impl AlertStatus {
    /// Every status, in the order listings show them.
    pub const ALL: [AlertStatus; 3] = [Self::Pending, Self::Delivered, Self::Dead];

    /// The status as written in the API and in keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    /// Parses [`AlertStatus::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// One alert to one webhook, in the store's outbox: written with the run
/// change that raised it, read back by the delivery worker, which records
/// every try on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutboxAlert {
    /// `a…` ([`new_id`]): sorts by creation. Also the payload's `id`, which
    /// receivers dedupe on (a crash may deliver an alert twice).
    pub id: String,
    /// The tenant whose run raised it.
    pub tenant: String,
    /// Where it is POSTed.
    pub url: String,
    /// Whether the admin set the webhook (it grants itself) rather than a
    /// task (it needs the tenant's `allow_http` at every delivery).
    pub admin: bool,
    /// The JSON body POSTed, exactly as stored.
    pub body: serde_json::Value,
    /// Where it is.
    pub status: AlertStatus,
    /// Delivery attempts made so far.
    pub attempts: u32,
    /// When it is tried next (`pending`), or when it left that state.
    pub next_try: Millis,
    /// When it was raised.
    pub created_at: Millis,
    /// What the last failed try said.
    pub last_error: Option<String>,
}

/// Which outbox alerts to list, newest first.
#[derive(Clone, Debug, Default)]
pub struct AlertQuery {
    /// Only this tenant's.
    pub tenant: String,
    /// Only those in this state.
    pub status: Option<AlertStatus>,
    /// At most this many (at least 1).
    pub limit: usize,
    /// Continue after this id (the `next` of the previous page).
    pub cursor: Option<String>,
}

/// Resolves once every write made before the ticket was taken is on disk.
pub struct SyncTicket(Pin<Box<dyn Future<Output = Result<()>> + Send>>);

impl SyncTicket {
    /// A ticket that is already satisfied (stores without a disk).
    pub fn ready() -> Self {
        Self(Box::pin(async { Ok(()) }))
    }

    /// A ticket resolved by `fut`.
    pub fn new(fut: impl Future<Output = Result<()>> + Send + 'static) -> Self {
        Self(Box::pin(fut))
    }

    /// Waits until the writes are durable.
    pub async fn wait(self) -> Result<()> {
        self.0.await
    }
}

/// The domain-level store. Calls are synchronous and short (µs): callers on
/// async threads call them directly; nothing here waits for the disk except
/// [`SyncTicket::wait`].
pub trait Store: Send + Sync + 'static {
    // --- durability -------------------------------------------------------
    /// A ticket resolving once every write made so far is on disk.
    fn sync_ticket(&self) -> SyncTicket;

    // --- metadata ---------------------------------------------------------
    /// Reads a metadata value (admin token hash, format markers…).
    fn get_meta(&self, key: &str) -> Result<Option<String>>;
    /// Writes a metadata value.
    fn put_meta(&self, key: &str, value: &str) -> Result<()>;

    // --- plugins ----------------------------------------------------------
    /// Stores component bytes as a content-addressed blob; returns its sha256 (hex).
    fn put_blob(&self, bytes: &[u8]) -> Result<String>;
    /// Reads a blob by digest.
    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>>;
    /// Deletes a blob (when no plugin record names it any more).
    fn delete_blob(&self, digest: &str) -> Result<()>;
    /// Creates or replaces a plugin record.
    fn put_plugin(&self, plugin: &PluginRecord) -> Result<()>;
    /// One plugin version.
    fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<Option<PluginRecord>>;
    /// A tenant's plugins, by name then version.
    fn list_plugins(&self, tenant: &str) -> Result<Vec<PluginRecord>>;
    /// Deletes a plugin version; true if it existed.
    fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool>;
    /// Creates or moves a plugin tag (keyed by tenant, plugin name and tag).
    fn put_plugin_tag(&self, tag: &PluginTag) -> Result<()>;
    /// One plugin tag.
    fn get_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<Option<PluginTag>>;
    /// A tenant's plugin tags, by plugin name then tag.
    fn list_plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>>;
    /// Deletes a plugin tag; whether it existed.
    fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<bool>;

    // --- tasks ------------------------------------------------------------
    /// Creates or replaces a task, with its schedule state in the same write.
    fn put_task(&self, task: &TaskRecord, schedule: &ScheduleState) -> Result<()>;
    /// [`Store::put_task`] for many tasks in one atomic write: all are
    /// stored or none (bulk apply).
    fn put_tasks(&self, tasks: &[(TaskRecord, ScheduleState)]) -> Result<()>;
    /// One task.
    fn get_task(&self, tenant: &str, name: &str) -> Result<Option<TaskRecord>>;
    /// A tenant's tasks by name (`None`: every tenant's).
    fn list_tasks(&self, tenant: Option<&str>) -> Result<Vec<TaskRecord>>;
    /// One page of a tenant's tasks by name: at most `limit` named after
    /// `after` (exclusive), read as a range (a page costs its size, not the
    /// tenant's task count).
    fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>>;
    /// Deletes a task and its schedule state; true if it existed.
    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool>;

    // --- schedules --------------------------------------------------------
    /// Writes a task's schedule state.
    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()>;
    /// A task's schedule state.
    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>>;
    /// Every schedule state (operations and tests; the scheduler reads
    /// only the fires due soon, [`Store::due_schedules`]).
    fn list_schedules(&self) -> Result<Vec<ScheduleState>>;
    /// The next-fire index: unpaused schedules whose next fire is in
    /// `from..=until`, earliest first (ties by tenant, then task), at most
    /// `limit`. Every write of a schedule keeps the index in step with it in
    /// the same atomic write, so the scheduler can hold only the fires due
    /// within its window and read the rest as time moves.
    fn due_schedules(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>>;
    /// The tenant's tasks whose `trigger.after` names `upstream`, by name
    /// (an index kept with every task write; see [`TaskRecord::upstreams`]).
    fn downstream_tasks(&self, tenant: &str, upstream: &str) -> Result<Vec<String>>;

    // --- runs -------------------------------------------------------------
    /// Stores a new run and its creation events, atomically with `schedule`
    /// if given, unless a run already exists for the same idempotency key
    /// (tenant, task, key) or — when `unique_fire` — for the same
    /// (tenant, task, scheduled_for).
    fn insert_run(
        &self,
        run: &RunRecord,
        unique_fire: bool,
        schedule: Option<&ScheduleState>,
        events: &[Event],
    ) -> Result<Insert> {
        let new = NewRun {
            run: run.clone(),
            unique_fire,
            schedule: schedule.cloned(),
            events: events.to_vec(),
            // Tests and tools insert this way: their keys never expire.
            key_expires_at: Millis::MAX,
        };
        let mut outcome = self.insert_runs(std::slice::from_ref(&new))?;
        Ok(outcome.pop().expect("one outcome per run"))
    }
    /// [`Store::insert_run`] for many runs in one atomic write, with one
    /// outcome per run, in order. A run is checked against the stored runs
    /// and the runs before it in `runs` (a repeated key or fire yields
    /// [`Insert::Existing`] with the earlier run).
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>>;
    /// Replaces runs, appends their events and adds `usage`, as one atomic
    /// write. The scheduler writes every run it changed since its last write
    /// this way: sled seals and writes its log buffer twice per batch, so one
    /// batch per run cost more than the runs themselves. A run given twice
    /// is written as its last record with both lists of events. A run that is
    /// not stored is left out (writing it would resurrect half a run) and
    /// reported as an error once the others are written.
    fn write_runs(&self, runs: &[(RunRecord, Vec<Event>)], usage: &[UsageBucket]) -> Result<()>;
    /// [`Store::write_runs`] with new outbox alerts in the same atomic write
    /// (an alert is stored with the change that raised it, or not at all).
    fn write_runs_with_alerts(
        &self,
        runs: &[(RunRecord, Vec<Event>)],
        usage: &[UsageBucket],
        alerts: &[OutboxAlert],
    ) -> Result<()>;
    /// Replaces a run and appends events, atomically.
    fn update_run(&self, run: &RunRecord, events: &[Event]) -> Result<()> {
        self.write_runs(&[(run.clone(), events.to_vec())], &[])
    }
    /// One run.
    fn get_run(&self, id: &str) -> Result<Option<RunRecord>>;
    /// Runs matching `query`, newest first, with a cursor.
    fn list_runs(&self, query: &RunQuery) -> Result<RunPage>;
    /// Every run not in a terminal state, by id (operations and tests; the
    /// scheduler reads [`Store::running_runs`] and queue heads).
    fn active_runs(&self) -> Result<Vec<RunRecord>>;
    /// Every run in `running` state (recovery reads them whole: their
    /// attempts that were running are lost).
    fn running_runs(&self) -> Result<Vec<RunRecord>>;
    /// The persistent queue: a tenant's `queued` runs in dispatch order
    /// ([`queue_order`](crate::model::priority::queue_order) of creation and
    /// priority, then id), at most `limit`. The scheduler holds a bounded
    /// head of it and reads on as the head drains.
    fn queued_runs(&self, tenant: &str, limit: usize) -> Result<Vec<RunRecord>>;
    /// The ids of [`Store::queued_runs`], from the index alone (no record
    /// read): what the scheduler scans past its head with.
    fn queued_ids(&self, tenant: &str, limit: usize) -> Result<Vec<String>>;
    /// Queued runs counted per (tenant, task), by tenant then task: what
    /// recovery reads instead of the queue, so a store answers it without
    /// reading a key per queued run (sled keeps counters beside the queue's
    /// index, `sled/counts.rs`).
    fn queued_counts(&self) -> Result<Vec<(String, String, usize)>>;
    /// Deletes a terminal run with its events, logs and fire key
    /// (retention). Its idempotency key stays until it expires.
    fn delete_run(&self, id: &str) -> Result<bool>;
    /// Frees the idempotency keys that expired at or before `now` (their
    /// [`NewRun::key_expires_at`]), oldest first, at most `limit`; returns
    /// how many. A later run may take a freed key.
    fn expire_keys(&self, now: Millis, limit: usize) -> Result<usize>;
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
    /// Every run as its indexes know it, in [`Store::run_summaries_page`]'s
    /// order (tests and benchmarks that count what is stored).
    fn run_summaries(&self) -> Result<Vec<RunSummary>> {
        let mut all: Vec<RunSummary> = Vec::new();
        loop {
            let page = self.run_summaries_page(all.last(), 4096)?;
            let done = page.len() < 4096;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }
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
    /// [`Store::run_bytes`].
    fn put_logs(&self, tenant: &str, run_id: &str, logs: &AttemptLogs) -> Result<()>;
    /// A run's captured output, by step then attempt.
    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>>;
    /// Keeps the record of one attempt (`record:`, for `ax run replay`),
    /// replacing one kept before for the same attempt. Removed with its run.
    fn put_record(&self, record: &AttemptRecord) -> Result<()>;
    /// The record of attempt `attempt` of `step` in run `run_id`, if kept.
    fn get_record(&self, run_id: &str, step: &str, attempt: u32) -> Result<Option<AttemptRecord>>;

    // --- dead letters -----------------------------------------------------
    /// Creates or replaces a dead letter.
    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()>;
    /// One dead letter.
    fn get_dead_letter(&self, id: &str) -> Result<Option<DeadLetter>>;
    /// A tenant's dead letters, newest first (`open_only`: unresolved ones).
    fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>>;

    // --- alert outbox -----------------------------------------------------
    /// Creates or replaces outbox alerts (by id), with their indexes, in one
    /// atomic write.
    fn put_alerts(&self, alerts: &[OutboxAlert]) -> Result<()>;
    /// One outbox alert.
    fn get_alert(&self, id: &str) -> Result<Option<OutboxAlert>>;
    /// Pending alerts whose `next_try` is at or before `until`, earliest
    /// first (ties by id), at most `limit`: what the worker delivers next.
    fn due_alerts(&self, until: Millis, limit: usize) -> Result<Vec<OutboxAlert>>;
    /// A tenant's alerts, newest first, with a cursor (the last id).
    fn list_alerts(&self, query: &AlertQuery) -> Result<(Vec<OutboxAlert>, Option<String>)>;
    /// Deletes all but the newest `keep` of a tenant's alerts in `status`;
    /// returns how many were deleted.
    fn trim_alerts(&self, tenant: &str, status: AlertStatus, keep: usize) -> Result<usize>;
    /// Outbox alerts counted per (tenant, status), from the index alone.
    fn alert_counts(&self) -> Result<Vec<(String, AlertStatus, usize)>>;

    // --- tenants ----------------------------------------------------------
    /// Creates or replaces a tenant.
    fn put_tenant(&self, tenant: &TenantRecord) -> Result<()>;
    /// Every tenant, by name.
    fn list_tenants(&self) -> Result<Vec<TenantRecord>>;
    /// Creates or replaces a tenant token record.
    fn put_token(&self, token: &TokenRecord) -> Result<()>;
    /// Every token record (revoked ones included), by id.
    fn list_tokens(&self) -> Result<Vec<TokenRecord>>;
    /// Adds usage to the hourly buckets `(tenant, hour, task)`, creating them
    /// as needed (counters add up; nothing is replaced).
    fn add_usage(&self, usage: &[UsageBucket]) -> Result<()> {
        self.write_runs(&[], usage)
    }
    /// A tenant's usage buckets with `from <= hour < to`, by hour then task.
    fn usage(&self, tenant: &str, from: Millis, to: Millis) -> Result<Vec<UsageBucket>>;

    // --- capabilities: traits of their own, reached from here -----------
    /// The plugins' key-value store (see [`kv`]).
    fn kv(&self) -> Arc<dyn kv::KvStore>;
    /// Tenants' secrets (see [`secrets`]).
    fn secrets(&self) -> Arc<dyn secrets::SecretStore>;

    // --- operations -------------------------------------------------------
    /// Bytes the store occupies on disk (0 in memory).
    fn size_on_disk(&self) -> u64;
    /// Whether the last write succeeded (false from a write refused with an
    /// [`Error::is_unavailable`] error until one succeeds again). A store
    /// that does not track it is always writable; see [`guard::Guarded`].
    fn writable(&self) -> bool {
        true
    }
    /// What a check of the whole database found damaged, with what to do
    /// about it; `None` while nothing is found (sled reads every entry once
    /// after opening, on a thread of its own: `store/sled/open.rs`).
    fn damage(&self) -> Option<String> {
        None
    }
    /// Bumped each time the store reopened its database after a fault, which
    /// loses the writes not yet on disk (as a crash would): whoever holds
    /// state derived from the store rebuilds it from the store then.
    fn generation(&self) -> u64 {
        0
    }
}

/// A run as the indexes know it (see [`Store::run_summaries_page`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// Owning tenant.
    pub tenant: String,
    /// Task name.
    pub task: String,
    /// Run id (sorts by creation; see [`new_id`]).
    pub id: String,
    /// Current state.
    pub status: RunStatus,
}

/// The creation instant written into an id by [`new_id`] (`None` for ids
/// of another shape).
pub fn id_millis(id: &str) -> Option<Millis> {
    let hex = id.get(1..13)?;
    i64::from_str_radix(hex, 16).ok()
}

/// A fresh id: 12 hex digits of milliseconds, 6 of a per-process sequence
/// and 4 random ones, after a prefix naming the kind (`r` run, `d` dead
/// letter). Ids sort by creation time, and within a millisecond by creation
/// order, so "newest first" listings are exact.
pub fn new_id(prefix: &str, now: Millis) -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xff_ffff;
    format!(
        "{prefix}{:012x}{seq:06x}{:04x}",
        now.max(0),
        rand::random::<u16>()
    )
}
