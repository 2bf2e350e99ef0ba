//! [`SimStore`]: the in-memory store behind a wrapper that injects the
//! faults of a real disk: a write refused (I/O error, full disk), a crash
//! (writes of a dead incarnation are refused from then on), and a lost
//! flush (the writes after the last durable point are dropped).
//!
//! `MemoryStore` has no synced-versus-unsynced state of its own (every
//! ticket is ready at once), so the wrapper keeps one: every write it lets
//! through is also appended to a log, a [`SyncTicket`] that someone waits on
//! marks the log up to where it was taken as durable, and so does the
//! simulated background flusher ([`SimStore::flush_all`]). A crash with a lost
//! flush keeps a prefix of the log at least as long as the durable part and
//! replays it into a fresh `MemoryStore`: sled also loses a suffix of its
//! log, never a write in the middle.
//!
//! Why this is not a [`crate::store::guard::Layer`] like the guard and the
//! test faults: a layer sees each write as a closure over the call's
//! borrowed arguments, run once, and a crash here must apply a prefix of
//! the writes *again* to another store; so each write is kept as owned data
//! ([`Write`]), which only a forward per method can build.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::model::ids::{RunId, TaskName, TenantId};
use crate::model::{
    DeadLetter, Event, Millis, PluginRecord, PluginTag, RunRecord, ScheduleState, TaskRecord,
};
use crate::store::memory::MemoryStore;
use crate::store::{
    AlertQuery, AlertStatus, AttemptLogs, Catalog, Error, Insert, KeyEntry, Lease, Leases, NewRun,
    Operations, Outbox, OutboxAlert, Result, RunPage, RunQuery, RunSummary, RunWrite, Runs,
    SyncTicket, Tenancy, kv, secrets,
};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// One write as it was let through, to replay after a crash.
#[derive(Clone)]
enum Write {
    Meta(String, String),
    Blob(Vec<u8>),
    DeleteBlob(String),
    Plugin(PluginRecord),
    DeletePlugin(String, String, String),
    PluginTag(PluginTag),
    DeletePluginTag(String, String, String),
    Tasks(Vec<(TaskRecord, ScheduleState)>),
    DeleteTask(String, String),
    Schedule(ScheduleState),
    InsertRuns(Vec<NewRun>),
    Runs(Vec<RunWrite>, Vec<UsageBucket>, Vec<OutboxAlert>),
    Alerts(Vec<OutboxAlert>),
    TrimAlerts(String, AlertStatus, usize),
    DeleteRun(String),
    ExpireKeys(Millis, usize),
    RestoreKeys(Vec<KeyEntry>),
    Logs(String, String, AttemptLogs),
    DeadLetter(Box<DeadLetter>),
    Tenant(Box<TenantRecord>),
    Token(TokenRecord),
    Lease(String, String, Millis, Millis),
    ReleaseLease(String, String, Millis),
}

impl Write {
    /// Applies the write to `store`; replaying a prefix of the log gives the
    /// state the store had after it (the memory store is deterministic).
    fn apply(&self, store: &MemoryStore) -> Result<()> {
        match self {
            Self::Meta(k, v) => store.put_meta(k, v),
            Self::Blob(b) => store.put_blob(b).map(drop),
            Self::DeleteBlob(d) => store.delete_blob(d),
            Self::Plugin(p) => store.put_plugin(p),
            Self::DeletePlugin(t, n, v) => store.delete_plugin(t, n, v).map(drop),
            Self::PluginTag(t) => store.put_plugin_tag(t),
            Self::DeletePluginTag(t, n, g) => store.delete_plugin_tag(t, n, g).map(drop),
            Self::Tasks(tasks) => store.put_tasks(tasks),
            Self::DeleteTask(t, n) => store.delete_task(t, n).map(drop),
            Self::Schedule(s) => store.put_schedule(s),
            Self::InsertRuns(runs) => store.insert_runs(runs).map(drop),
            Self::Runs(runs, usage, alerts) => store.write_runs_with_alerts(runs, usage, alerts),
            Self::Alerts(alerts) => store.put_alerts(alerts),
            Self::TrimAlerts(t, status, keep) => store.trim_alerts(t, *status, *keep).map(drop),
            Self::DeleteRun(id) => store.delete_run(id).map(drop),
            Self::ExpireKeys(now, limit) => store.expire_keys(*now, *limit).map(drop),
            Self::RestoreKeys(keys) => store.restore_keys(keys),
            Self::Logs(tenant, id, logs) => store.put_logs(tenant, id, logs),
            Self::DeadLetter(d) => store.put_dead_letter(d),
            Self::Tenant(t) => store.put_tenant(t),
            Self::Token(t) => store.put_token(t),
            Self::Lease(name, holder, now, until) => {
                store.take_lease(name, holder, *now, *until).map(drop)
            }
            Self::ReleaseLease(name, holder, now) => {
                store.release_lease(name, holder, *now).map(drop)
            }
        }
    }
}

/// What every incarnation's handle shares.
struct Shared {
    inner: Arc<MemoryStore>,
    /// The live incarnation; a handle of an older one is a dead process.
    epoch: u64,
    log: Vec<Write>,
    /// The log up to here is durable.
    synced: usize,
    /// While set, a write fails when its draw (seeded by the write's
    /// position in the log) is below this per-mille rate.
    fail_per_mille: u32,
    seed: u64,
    /// Writes attempted since the start (the draw's counter).
    attempts: u64,
    /// Writes refused by an injected fault.
    pub(super) refused: u64,
}

/// The store as one incarnation of the scheduler sees it (see the module doc).
#[derive(Clone)]
pub(super) struct SimStore {
    shared: Arc<Mutex<Shared>>,
    epoch: u64,
}

impl SimStore {
    /// An empty store; `seed` drives which writes a fault refuses.
    pub(super) fn new(seed: u64) -> Self {
        Self {
            shared: Arc::new(Mutex::new(Shared {
                inner: Arc::new(MemoryStore::new()),
                epoch: 0,
                log: Vec::new(),
                synced: 0,
                fail_per_mille: 0,
                seed,
                attempts: 0,
                refused: 0,
            })),
            epoch: 0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Sound after a panic elsewhere: every change is a push or a swap.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn inner(&self) -> Arc<MemoryStore> {
        self.lock().inner.clone()
    }

    /// Calls `f` with every stored run, borrowed, sorted by their names in
    /// the trace.
    pub(super) fn with_runs<R>(&self, f: impl FnOnce(&[&RunRecord]) -> R) -> R {
        self.inner().with_runs(|mut runs| {
            runs.sort_by_cached_key(|r| super::check::name(r));
            f(&runs)
        })
    }

    /// Refuses about `per_mille`/1000 of the writes from now on (0: none).
    pub(super) fn set_faults(&self, per_mille: u32) {
        self.lock().fail_per_mille = per_mille;
    }

    /// Writes refused by injected faults so far.
    pub(super) fn refused(&self) -> u64 {
        self.lock().refused
    }

    /// (writes logged, writes tried): unchanged while nothing writes.
    pub(super) fn progress(&self) -> (usize, u64) {
        let s = self.lock();
        (s.log.len(), s.attempts)
    }

    /// The background flusher: everything written so far is durable.
    pub(super) fn flush_all(&self) {
        let mut s = self.lock();
        s.synced = s.log.len();
    }

    /// The process dies: writes through this handle (and every older one)
    /// are refused from now on. With `keep` (a fraction in 0..=1 of the
    /// writes after the durable point), a flush is lost: the store keeps the
    /// durable writes and that share of the later ones, in order. Returns the
    /// handle of the next incarnation and how many writes were lost.
    pub(super) fn crash(&self, keep: Option<f64>) -> (Self, usize) {
        let mut s = self.lock();
        s.epoch += 1;
        let mut lost = 0;
        if let Some(keep) = keep {
            let volatile = s.log.len() - s.synced;
            let cut = s.synced + ((volatile as f64) * keep.clamp(0.0, 1.0)) as usize;
            lost = s.log.len() - cut;
            s.log.truncate(cut);
            let fresh = MemoryStore::new();
            for w in &s.log {
                // The writes succeeded when they were made; replayed in the
                // same order on an empty store they succeed the same way.
                let _ = w.apply(&fresh);
            }
            s.inner = Arc::new(fresh);
        }
        s.synced = s.log.len();
        let epoch = s.epoch;
        drop(s);
        (
            Self {
                shared: self.shared.clone(),
                epoch,
            },
            lost,
        )
    }

    /// Lets `w` through (applied and logged) unless this incarnation is dead
    /// or a fault refuses it; the lock is held throughout, so a crash falls
    /// before or after a write, never inside it.
    fn write<T>(&self, w: Write, apply: impl FnOnce(&MemoryStore) -> Result<T>) -> Result<T> {
        let mut s = self.lock();
        if s.epoch != self.epoch {
            return Err(Error::Backend("the process has crashed".into()));
        }
        s.attempts += 1;
        if s.fail_per_mille > 0 {
            let draw = super::mix(s.seed ^ 0x0057_04e5, s.attempts) % 1000;
            if draw < u64::from(s.fail_per_mille) {
                s.refused += 1;
                return Err(Error::Io(std::io::Error::other(
                    "injected fault: no space left on device",
                )));
            }
        }
        // The memory store fails only a `write_runs` naming a run it does
        // not hold, after writing the others: logged either way.
        let out = apply(&s.inner);
        s.log.push(w);
        out
    }
}

impl Operations for SimStore {
    fn sync_ticket(&self) -> SyncTicket {
        // Durable once waited on, up to the writes made before the ticket.
        let (shared, upto) = (self.shared.clone(), self.lock().log.len());
        SyncTicket::new(async move {
            let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
            s.synced = s.synced.max(upto.min(s.log.len()));
            Ok(())
        })
    }

    fn get_meta(&self, key: &str) -> Result<Option<String>> {
        self.inner().get_meta(key)
    }

    fn put_meta(&self, key: &str, value: &str) -> Result<()> {
        self.write(Write::Meta(key.into(), value.into()), |s| {
            s.put_meta(key, value)
        })
    }

    fn kv(&self) -> Arc<dyn kv::KvStore> {
        // Not simulated: the fake runner's plugins keep no data.
        self.inner().kv()
    }

    fn secrets(&self) -> Arc<dyn secrets::SecretStore> {
        self.inner().secrets()
    }

    fn size_on_disk(&self) -> u64 {
        0
    }
}

impl Catalog for SimStore {
    fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        self.write(Write::Blob(bytes.to_vec()), |s| s.put_blob(bytes))
    }

    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        self.inner().get_blob(digest)
    }

    fn delete_blob(&self, digest: &str) -> Result<()> {
        self.write(Write::DeleteBlob(digest.into()), |s| s.delete_blob(digest))
    }

    fn put_plugin(&self, plugin: &PluginRecord) -> Result<()> {
        self.write(Write::Plugin(plugin.clone()), |s| s.put_plugin(plugin))
    }

    fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<Option<PluginRecord>> {
        self.inner().get_plugin(tenant, name, version)
    }

    fn list_plugins(&self, tenant: &str) -> Result<Vec<PluginRecord>> {
        self.inner().list_plugins(tenant)
    }

    fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool> {
        let w = Write::DeletePlugin(tenant.into(), name.into(), version.into());
        self.write(w, |s| s.delete_plugin(tenant, name, version))
    }

    fn put_plugin_tag(&self, tag: &PluginTag) -> Result<()> {
        self.write(Write::PluginTag(tag.clone()), |s| s.put_plugin_tag(tag))
    }

    fn get_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<Option<PluginTag>> {
        self.inner().get_plugin_tag(tenant, name, tag)
    }

    fn list_plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>> {
        self.inner().list_plugin_tags(tenant)
    }

    fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<bool> {
        let w = Write::DeletePluginTag(tenant.into(), name.into(), tag.into());
        self.write(w, |s| s.delete_plugin_tag(tenant, name, tag))
    }

    fn put_tasks(&self, tasks: &[(TaskRecord, ScheduleState)]) -> Result<()> {
        self.write(Write::Tasks(tasks.to_vec()), |s| s.put_tasks(tasks))
    }

    fn get_task(&self, tenant: &str, name: &str) -> Result<Option<TaskRecord>> {
        self.inner().get_task(tenant, name)
    }

    fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.inner().list_tasks_page(tenant, after, limit)
    }

    fn list_tasks(&self, tenant: Option<&str>) -> Result<Vec<TaskRecord>> {
        self.inner().list_tasks(tenant)
    }

    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool> {
        let w = Write::DeleteTask(tenant.into(), name.into());
        self.write(w, |s| s.delete_task(tenant, name))
    }

    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()> {
        self.write(Write::Schedule(schedule.clone()), |s| {
            s.put_schedule(schedule)
        })
    }

    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>> {
        self.inner().get_schedule(tenant, task)
    }

    fn due_schedules(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>> {
        self.inner().due_schedules(from, until, limit)
    }

    fn downstream_tasks(&self, tenant: &str, upstream: &str) -> Result<Vec<String>> {
        self.inner().downstream_tasks(tenant, upstream)
    }
}

impl Runs for SimStore {
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>> {
        self.write(Write::InsertRuns(runs.to_vec()), |s| s.insert_runs(runs))
    }

    fn write_runs_with_alerts(
        &self,
        runs: &[RunWrite],
        usage: &[UsageBucket],
        alerts: &[OutboxAlert],
    ) -> Result<()> {
        let w = Write::Runs(runs.to_vec(), usage.to_vec(), alerts.to_vec());
        self.write(w, |s| s.write_runs_with_alerts(runs, usage, alerts))
    }

    fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        self.inner().get_run(id)
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage> {
        self.inner().list_runs(query)
    }

    fn running_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner().running_runs()
    }

    fn queued_runs(&self, tenant: &str, limit: usize) -> Result<Vec<RunRecord>> {
        self.inner().queued_runs(tenant, limit)
    }

    fn queued_ids(&self, tenant: &str, limit: usize) -> Result<Vec<RunId>> {
        self.inner().queued_ids(tenant, limit)
    }

    fn queued_counts(&self) -> Result<Vec<(TenantId, TaskName, usize)>> {
        self.inner().queued_counts()
    }

    fn delete_run(&self, id: &str) -> Result<bool> {
        self.write(Write::DeleteRun(id.into()), |s| s.delete_run(id))
    }

    fn expire_keys(&self, now: Millis, limit: usize) -> Result<usize> {
        self.write(Write::ExpireKeys(now, limit), |s| s.expire_keys(now, limit))
    }

    fn forgotten_keys(&self, after: Option<&KeyEntry>, limit: usize) -> Result<Vec<KeyEntry>> {
        self.inner().forgotten_keys(after, limit)
    }

    fn restore_keys(&self, keys: &[KeyEntry]) -> Result<()> {
        self.write(Write::RestoreKeys(keys.to_vec()), |s| s.restore_keys(keys))
    }

    fn run_summaries_page(
        &self,
        after: Option<&RunSummary>,
        limit: usize,
    ) -> Result<Vec<RunSummary>> {
        self.inner().run_summaries_page(after, limit)
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event>> {
        self.inner().events(run_id)
    }

    fn put_logs(&self, tenant: &str, run_id: &str, logs: &AttemptLogs) -> Result<()> {
        let write = Write::Logs(tenant.into(), run_id.into(), logs.clone());
        self.write(write, |s| s.put_logs(tenant, run_id, logs))
    }

    fn run_bytes(&self, tenant: &str) -> Result<u64> {
        self.inner().run_bytes(tenant)
    }

    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>> {
        self.inner().logs(run_id)
    }

    // Records are not among the writes the simulator breaks: the scheduler
    // never writes them (the production runner does).
    fn put_record(&self, record: &crate::model::record::AttemptRecord) -> Result<()> {
        self.inner().put_record(record)
    }

    fn get_record(
        &self,
        run_id: &str,
        step: &str,
        attempt: u32,
    ) -> Result<Option<crate::model::record::AttemptRecord>> {
        self.inner().get_record(run_id, step, attempt)
    }

    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()> {
        self.write(Write::DeadLetter(Box::new(dead.clone())), |s| {
            s.put_dead_letter(dead)
        })
    }

    fn get_dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        self.inner().get_dead_letter(id)
    }

    fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>> {
        self.inner().list_dead_letters(tenant, open_only)
    }
}

impl Outbox for SimStore {
    fn put_alerts(&self, alerts: &[OutboxAlert]) -> Result<()> {
        self.write(Write::Alerts(alerts.to_vec()), |s| s.put_alerts(alerts))
    }

    fn get_alert(&self, id: &str) -> Result<Option<OutboxAlert>> {
        self.inner().get_alert(id)
    }

    fn due_alerts(&self, until: Millis, limit: usize) -> Result<Vec<OutboxAlert>> {
        self.inner().due_alerts(until, limit)
    }

    fn list_alerts(&self, query: &AlertQuery) -> Result<(Vec<OutboxAlert>, Option<String>)> {
        self.inner().list_alerts(query)
    }

    fn trim_alerts(&self, tenant: &str, status: AlertStatus, keep: usize) -> Result<usize> {
        let w = Write::TrimAlerts(tenant.into(), status, keep);
        self.write(w, |s| s.trim_alerts(tenant, status, keep))
    }

    fn alert_counts(&self) -> Result<Vec<(String, AlertStatus, usize)>> {
        self.inner().alert_counts()
    }
}

impl Leases for SimStore {
    fn take_lease(&self, name: &str, holder: &str, now: Millis, until: Millis) -> Result<Lease> {
        let w = Write::Lease(name.into(), holder.into(), now, until);
        self.write(w, |s| s.take_lease(name, holder, now, until))
    }

    fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<bool> {
        let w = Write::ReleaseLease(name.into(), holder.into(), now);
        self.write(w, |s| s.release_lease(name, holder, now))
    }
}

// Not simulated, as the KV and secret stores it reads are not
// (`Operations::kv`): a dump of a simulated store reads the real one.
impl crate::store::Backup for SimStore {
    fn map_page(
        &self,
        tree: crate::store::Tree,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        crate::store::Backup::map_page(&*self.inner(), tree, after, limit)
    }

    fn restore_map(&self, tree: crate::store::Tree, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        crate::store::Backup::restore_map(&*self.inner(), tree, entries)
    }
}

impl Tenancy for SimStore {
    fn put_tenant(&self, tenant: &TenantRecord) -> Result<()> {
        self.write(Write::Tenant(Box::new(tenant.clone())), |s| {
            s.put_tenant(tenant)
        })
    }

    fn list_tenants(&self) -> Result<Vec<TenantRecord>> {
        self.inner().list_tenants()
    }

    fn put_token(&self, token: &TokenRecord) -> Result<()> {
        self.write(Write::Token(token.clone()), |s| s.put_token(token))
    }

    fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        self.inner().list_tokens()
    }

    fn usage(&self, tenant: &str, from: Millis, to: Millis) -> Result<Vec<UsageBucket>> {
        self.inner().usage(tenant, from, to)
    }
}
