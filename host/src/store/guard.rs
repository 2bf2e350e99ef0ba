//! Store faults: a store that refuses writes (full disk, I/O error) and
//! comes back by itself.
//!
//! [`Layered`] turns a [`Layer`] (what to do around each read and each
//! write) into a whole [`Store`], so a wrapper states only its policy:
//! - [`Guard`] (`ax serve` wraps its store in it): tracks whether the store
//!   writes ([`Operations::writable`](crate::store::Operations::writable)), and after a refused write reopens the
//!   database once the data directory takes writes again. sled 0.34 keeps
//!   an I/O error as a global error: every later write of the same `Db`
//!   fails, even after space is freed (measured: a flush on a full tmpfs
//!   fails, the filler is deleted, the next insert still fails with the
//!   same error; a reopened `Db` writes). A reopen loses what was written
//!   after the last flush that reached the disk, as a crash would, so it
//!   bumps [`Operations::generation`](crate::store::Operations::generation) and the scheduler rebuilds its memory from
//!   the store then (`scheduler::actor`).
//! - [`super::faults::Faults`]: refuses writes while a switch is on (tests).
//!
//! Nothing here names sled: the reopen is a [`Reopen`] given by the wiring.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::secrets::{SecretInfo, SecretStore};
use super::{
    AlertQuery, AlertStatus, AttemptLogs, Catalog, Error, Insert, KeyEntry, Lease, Leases, NewRun,
    Operations, Outbox, OutboxAlert, Result, RunLogs, RunPage, RunQuery, RunSummary, RunWrite,
    Runs, Store, StoreHealth, SyncTicket, Tenancy, WholeRun,
};
use crate::capability::kv::{KvNamespace, KvResult, KvStore, SetOutcome};
use crate::model::ids::{RunId, TaskName, TenantId};
use crate::model::record::AttemptRecord;
use crate::model::{
    DeadLetter, Event, Millis, PluginRecord, PluginTag, RunRecord, ScheduleState, TaskRecord,
};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// The shortest time between two reopen attempts: a reopen replays the
/// store's log, and while the disk stays full every try fails anyway.
pub const REOPEN_EVERY: Duration = Duration::from_secs(1);

/// Bytes written (and removed) in the data directory to learn whether it
/// takes writes again before reopening: more than sled's log needs to
/// write its first segment after a reopen.
const PROBE_BYTES: usize = 1 << 20;

/// What a wrapper does around the calls of the store it wraps.
pub trait Layer: Send + Sync + 'static {
    /// The store a call goes to now.
    fn inner(&self) -> Result<Arc<dyn Store>>;
    /// Runs a read.
    fn read<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T>) -> Result<T> {
        f(&*self.inner()?)
    }
    /// Runs a write.
    fn write<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T>) -> Result<T> {
        f(&*self.inner()?)
    }
    /// A sync ticket of the store.
    fn ticket(&self) -> SyncTicket {
        match self.inner() {
            Ok(store) => store.sync_ticket(),
            Err(e) => SyncTicket::new(async move { Err(e) }),
        }
    }
    /// See [`Operations::damage`](crate::store::Operations::damage).
    fn damage(&self) -> Option<String> {
        self.inner().ok().and_then(|s| s.damage())
    }
    /// See [`Operations::writable`](crate::store::Operations::writable).
    fn writable(&self) -> bool {
        self.inner().is_ok_and(|s| s.writable())
    }
    /// See [`Operations::generation`](crate::store::Operations::generation).
    fn generation(&self) -> u64 {
        self.inner().map_or(0, |s| s.generation())
    }
    /// See [`Operations::health`](crate::store::Operations::health).
    fn health(&self) -> StoreHealth {
        self.inner().map_or_else(
            |e| StoreHealth::new(crate::store::StoreKind::Memory, e.to_string()),
            |s| s.health(),
        )
    }
}

/// A [`Store`] made of a [`Layer`]: every read goes through
/// [`Layer::read`], every write through [`Layer::write`]. The plugins'
/// key-value store and the secrets are reached through the layer on each
/// call too, so a handle taken once (the runner's) follows a reopen.
pub struct Layered<L: Layer>(Arc<L>);

impl<L: Layer> Layered<L> {
    /// The store `layer` makes.
    pub fn new(layer: L) -> Self {
        Self(Arc::new(layer))
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.0
    }
}

/// The capability handles of a [`Layered`] store.
struct Handles<L: Layer>(Arc<L>);

fn kv_error(e: Error) -> crate::capability::kv::KvBackendError {
    e.into()
}

impl<L: Layer> KvStore for Handles<L> {
    fn get(&self, ns: &KvNamespace, key: &str, now: Millis) -> KvResult<Option<Vec<u8>>> {
        self.0.inner().map_err(kv_error)?.kv().get(ns, key, now)
    }

    fn set(
        &self,
        ns: &KvNamespace,
        key: &str,
        value: &[u8],
        expires_at: Option<Millis>,
        quota: u64,
        now: Millis,
    ) -> KvResult<SetOutcome> {
        // Through `inner`, not `write`: the guard's writability follows the
        // store's own writes (a key-value write may fail after the handle is
        // taken, which `write` would not see).
        let kv = self.0.inner().map_err(kv_error)?.kv();
        kv.set(ns, key, value, expires_at, quota, now)
    }

    fn delete(&self, ns: &KvNamespace, key: &str, now: Millis) -> KvResult<bool> {
        let kv = self.0.inner().map_err(kv_error)?.kv();
        kv.delete(ns, key, now)
    }

    fn list(
        &self,
        ns: &KvNamespace,
        prefix: &str,
        limit: usize,
        now: Millis,
    ) -> KvResult<Vec<String>> {
        let kv = self.0.inner().map_err(kv_error)?.kv();
        kv.list(ns, prefix, limit, now)
    }

    fn usage(&self, tenant: &str) -> KvResult<u64> {
        self.0.inner().map_err(kv_error)?.kv().usage(tenant)
    }

    fn flush(&self) -> KvResult<()> {
        self.0.inner().map_err(kv_error)?.kv().flush()
    }
}

impl<L: Layer> SecretStore for Handles<L> {
    fn put_secret(&self, tenant: &str, name: &str, value: &str, now: Millis) -> Result<bool> {
        self.0
            .write(|s| s.secrets().put_secret(tenant, name, value, now))
    }

    fn get_secret(&self, tenant: &str, name: &str) -> Result<Option<String>> {
        self.0.read(|s| s.secrets().get_secret(tenant, name))
    }

    fn list_secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>> {
        self.0.read(|s| s.secrets().list_secrets(tenant))
    }

    fn delete_secret(&self, tenant: &str, name: &str) -> Result<bool> {
        self.0.write(|s| s.secrets().delete_secret(tenant, name))
    }
}

impl<L: Layer> Operations for Layered<L> {
    fn sync_ticket(&self) -> SyncTicket {
        self.0.ticket()
    }

    fn get_meta(&self, key: &str) -> Result<Option<String>> {
        self.0.read(|s| s.get_meta(key))
    }

    fn put_meta(&self, key: &str, value: &str) -> Result<()> {
        self.0.write(|s| s.put_meta(key, value))
    }

    fn kv(&self) -> Arc<dyn KvStore> {
        Arc::new(Handles(self.0.clone()))
    }

    fn secrets(&self) -> Arc<dyn SecretStore> {
        Arc::new(Handles(self.0.clone()))
    }

    fn size_on_disk(&self) -> u64 {
        self.0.inner().map_or(0, |s| s.size_on_disk())
    }

    fn damage(&self) -> Option<String> {
        self.0.damage()
    }

    fn writable(&self) -> bool {
        self.0.writable()
    }

    fn generation(&self) -> u64 {
        self.0.generation()
    }

    fn health(&self) -> StoreHealth {
        self.0.health()
    }
}

impl<L: Layer> Catalog for Layered<L> {
    fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        self.0.write(|s| s.put_blob(bytes))
    }

    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        self.0.read(|s| s.get_blob(digest))
    }

    fn delete_blob(&self, digest: &str) -> Result<()> {
        self.0.write(|s| s.delete_blob(digest))
    }

    fn put_plugin(&self, plugin: &PluginRecord) -> Result<()> {
        self.0.write(|s| s.put_plugin(plugin))
    }

    fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<Option<PluginRecord>> {
        self.0.read(|s| s.get_plugin(tenant, name, version))
    }

    fn list_plugins(&self, tenant: &str) -> Result<Vec<PluginRecord>> {
        self.0.read(|s| s.list_plugins(tenant))
    }

    fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool> {
        self.0.write(|s| s.delete_plugin(tenant, name, version))
    }

    fn put_plugin_tag(&self, tag: &PluginTag) -> Result<()> {
        self.0.write(|s| s.put_plugin_tag(tag))
    }

    fn get_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<Option<PluginTag>> {
        self.0.read(|s| s.get_plugin_tag(tenant, name, tag))
    }

    fn list_plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>> {
        self.0.read(|s| s.list_plugin_tags(tenant))
    }

    fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<bool> {
        self.0.write(|s| s.delete_plugin_tag(tenant, name, tag))
    }

    fn put_tasks(&self, tasks: &[(TaskRecord, ScheduleState)]) -> Result<()> {
        self.0.write(|s| s.put_tasks(tasks))
    }

    fn get_task(&self, tenant: &str, name: &str) -> Result<Option<TaskRecord>> {
        self.0.read(|s| s.get_task(tenant, name))
    }

    fn list_tasks(&self, tenant: Option<&str>) -> Result<Vec<TaskRecord>> {
        self.0.read(|s| s.list_tasks(tenant))
    }

    fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.0.read(|s| s.list_tasks_page(tenant, after, limit))
    }

    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool> {
        self.0.write(|s| s.delete_task(tenant, name))
    }

    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()> {
        self.0.write(|s| s.put_schedule(schedule))
    }

    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>> {
        self.0.read(|s| s.get_schedule(tenant, task))
    }

    fn due_schedules(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>> {
        self.0.read(|s| s.due_schedules(from, until, limit))
    }

    fn downstream_tasks(&self, tenant: &str, upstream: &str) -> Result<Vec<String>> {
        self.0.read(|s| s.downstream_tasks(tenant, upstream))
    }
}

impl<L: Layer> Runs for Layered<L> {
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>> {
        self.0.write(|s| s.insert_runs(runs))
    }

    fn write_runs_with_alerts(
        &self,
        runs: &[RunWrite],
        usage: &[UsageBucket],
        alerts: &[OutboxAlert],
    ) -> Result<()> {
        self.0
            .write(|s| s.write_runs_with_alerts(runs, usage, alerts))
    }

    fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        self.0.read(|s| s.get_run(id))
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage> {
        self.0.read(|s| s.list_runs(query))
    }

    fn running_runs(&self) -> Result<Vec<RunRecord>> {
        self.0.read(|s| s.running_runs())
    }

    fn queued_runs(&self, tenant: &str, limit: usize) -> Result<Vec<RunRecord>> {
        self.0.read(|s| s.queued_runs(tenant, limit))
    }

    fn queued_ids(&self, tenant: &str, limit: usize) -> Result<Vec<RunId>> {
        self.0.read(|s| s.queued_ids(tenant, limit))
    }

    fn queued_counts(&self) -> Result<Vec<(TenantId, TaskName, usize)>> {
        self.0.read(|s| s.queued_counts())
    }

    fn delete_run(&self, id: &str) -> Result<bool> {
        self.0.write(|s| s.delete_run(id))
    }

    fn expire_keys(&self, now: Millis, limit: usize) -> Result<usize> {
        self.0.write(|s| s.expire_keys(now, limit))
    }

    fn forgotten_keys(&self, after: Option<&KeyEntry>, limit: usize) -> Result<Vec<KeyEntry>> {
        self.0.read(|s| s.forgotten_keys(after, limit))
    }

    fn restore_keys(&self, keys: &[KeyEntry]) -> Result<()> {
        self.0.write(|s| s.restore_keys(keys))
    }

    fn restore_runs(&self, runs: Vec<WholeRun>, key_ttl: Millis) -> Result<Option<RunId>> {
        self.0.write(|s| s.restore_runs(runs, key_ttl))
    }

    fn run_summaries_page(
        &self,
        after: Option<&RunSummary>,
        limit: usize,
    ) -> Result<Vec<RunSummary>> {
        self.0.read(|s| s.run_summaries_page(after, limit))
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event>> {
        self.0.read(|s| s.events(run_id))
    }

    fn put_logs(&self, tenant: &str, run_id: &str, logs: &AttemptLogs) -> Result<()> {
        self.0.write(|s| s.put_logs(tenant, run_id, logs))
    }

    fn put_logs_batch(&self, logs: &[RunLogs]) -> Result<()> {
        self.0.write(|s| s.put_logs_batch(logs))
    }

    fn run_bytes(&self, tenant: &str) -> Result<u64> {
        self.0.read(|s| s.run_bytes(tenant))
    }

    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>> {
        self.0.read(|s| s.logs(run_id))
    }

    fn put_record(&self, record: &AttemptRecord) -> Result<()> {
        self.0.write(|s| s.put_record(record))
    }

    fn put_records(&self, records: &[AttemptRecord]) -> Result<()> {
        self.0.write(|s| s.put_records(records))
    }

    fn whole_runs(&self, ids: &[&str]) -> Result<Vec<WholeRun>> {
        self.0.read(|s| s.whole_runs(ids))
    }

    fn get_record(&self, run_id: &str, step: &str, attempt: u32) -> Result<Option<AttemptRecord>> {
        self.0.read(|s| s.get_record(run_id, step, attempt))
    }

    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()> {
        self.0.write(|s| s.put_dead_letter(dead))
    }

    fn get_dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        self.0.read(|s| s.get_dead_letter(id))
    }

    fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>> {
        self.0.read(|s| s.list_dead_letters(tenant, open_only))
    }
}

impl<L: Layer> Outbox for Layered<L> {
    fn put_alerts(&self, alerts: &[OutboxAlert]) -> Result<()> {
        self.0.write(|s| s.put_alerts(alerts))
    }

    fn get_alert(&self, id: &str) -> Result<Option<OutboxAlert>> {
        self.0.read(|s| s.get_alert(id))
    }

    fn due_alerts(&self, until: Millis, limit: usize) -> Result<Vec<OutboxAlert>> {
        self.0.read(|s| s.due_alerts(until, limit))
    }

    fn list_alerts(&self, query: &AlertQuery) -> Result<(Vec<OutboxAlert>, Option<String>)> {
        self.0.read(|s| s.list_alerts(query))
    }

    fn trim_alerts(&self, tenant: &str, status: AlertStatus, keep: usize) -> Result<usize> {
        self.0.write(|s| s.trim_alerts(tenant, status, keep))
    }

    fn alert_counts(&self) -> Result<Vec<(String, AlertStatus, usize)>> {
        self.0.read(|s| s.alert_counts())
    }
}

impl<L: Layer> Leases for Layered<L> {
    fn take_lease(&self, name: &str, holder: &str, now: Millis, until: Millis) -> Result<Lease> {
        self.0.write(|s| s.take_lease(name, holder, now, until))
    }

    fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<bool> {
        self.0.write(|s| s.release_lease(name, holder, now))
    }
}

impl<L: Layer> Tenancy for Layered<L> {
    fn put_tenant(&self, tenant: &TenantRecord) -> Result<()> {
        self.0.write(|s| s.put_tenant(tenant))
    }

    fn list_tenants(&self) -> Result<Vec<TenantRecord>> {
        self.0.read(|s| s.list_tenants())
    }

    fn put_token(&self, token: &TokenRecord) -> Result<()> {
        self.0.write(|s| s.put_token(token))
    }

    fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        self.0.read(|s| s.list_tokens())
    }

    fn usage(&self, tenant: &str, from: Millis, to: Millis) -> Result<Vec<UsageBucket>> {
        self.0.read(|s| s.usage(tenant, from, to))
    }
}

impl<L: Layer> super::Backup for Layered<L> {
    fn map_page(
        &self,
        tree: super::Tree,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.0.read(|s| s.map_page(tree, after, limit))
    }

    fn restore_map(&self, tree: super::Tree, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        self.0.write(|s| s.restore_map(tree, entries))
    }
}

/// How to reopen a store after a fault: check that its directory takes
/// writes, then open it again.
pub struct Reopen {
    /// The data directory (probed with a file of [`PROBE_BYTES`]).
    pub dir: PathBuf,
    /// Opens the store again.
    pub open: Box<dyn Fn() -> Result<Arc<dyn Store>> + Send + Sync>,
}

impl Reopen {
    /// Whether the directory takes writes: a file written, synced and
    /// removed. A full disk fails here, before the database is touched.
    fn probe(&self) -> std::io::Result<()> {
        use std::io::Write;
        let path = self.dir.join(".ax-write-probe");
        let written = std::fs::File::create(&path).and_then(|mut f| {
            f.write_all(&vec![0u8; PROBE_BYTES])?;
            f.sync_all()
        });
        let _ = std::fs::remove_file(&path);
        written
    }
}

/// The production layer: tracks [`Operations::writable`](crate::store::Operations::writable), and after a refused
/// write reopens the store (at most every [`REOPEN_EVERY`], once the
/// directory takes writes) when a [`Reopen`] is given. See the module docs.
pub struct Guard {
    /// The open store (`None` after a reopen that failed to open it).
    current: RwLock<Option<Arc<dyn Store>>>,
    reopen: Option<Reopen>,
    /// Cleared by a write refused as unavailable, set by one that succeeds.
    writable: Arc<AtomicBool>,
    /// Reopens so far ([`Operations::generation`](crate::store::Operations::generation)).
    generation: AtomicU64,
    /// When the last reopen was tried.
    tried: Mutex<Option<Instant>>,
    /// The guarded store's kind and place, said while a reopen is pending
    /// (a reopen opens the same store again).
    opened: StoreHealth,
}

/// The store `ax serve` runs on: `store` guarded, reopened by `reopen`.
pub type Guarded = Layered<Guard>;

impl Guarded {
    /// Guards `store` (reopened with `reopen` after a fault, if given).
    pub fn guard(store: Arc<dyn Store>, reopen: Option<Reopen>) -> Self {
        let opened = StoreHealth {
            pool: None,
            ..store.health()
        };
        Layered::new(Guard {
            opened,
            current: RwLock::new(Some(store)),
            reopen,
            writable: Arc::new(AtomicBool::new(true)),
            generation: AtomicU64::new(0),
            tried: Mutex::new(None),
        })
    }
}

impl Guard {
    fn note<T>(&self, result: &Result<T>) {
        match result {
            Ok(_) => {
                if !self.writable.swap(true, Ordering::AcqRel) {
                    tracing::info!("the store writes again");
                }
            }
            Err(e) if e.is_unavailable() => {
                if self.writable.swap(false, Ordering::AcqRel) {
                    tracing::error!(error = %e, "the store refuses writes; holding them until it writes again");
                }
            }
            Err(_) => {}
        }
    }

    /// After a fault, reopens the store once its directory takes writes,
    /// at most every [`REOPEN_EVERY`]. Other calls keep going meanwhile:
    /// the old store is dropped (its directory lock released) only once no
    /// call holds it; until then the reopen waits for a later try.
    fn maybe_reopen(&self) {
        let Some(reopen) = &self.reopen else { return };
        let closed = self.read_current().is_none();
        if self.writable.load(Ordering::Acquire) && !closed {
            return;
        }
        {
            let mut tried = self.tried.lock().unwrap_or_else(PoisonError::into_inner);
            if tried.is_some_and(|at| at.elapsed() < REOPEN_EVERY) {
                return;
            }
            *tried = Some(Instant::now());
        }
        if let Err(e) = reopen.probe() {
            tracing::warn!(dir = %reopen.dir.display(), error = %e, "the data directory still refuses writes");
            return;
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = current.take() {
            if Arc::strong_count(&old) > 1 {
                // A call (or a sync ticket's flusher) still uses it.
                *current = Some(old);
                return;
            }
            drop(old);
        }
        match (reopen.open)() {
            Ok(store) => {
                *current = Some(store);
                self.generation.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(dir = %reopen.dir.display(), "the store was reopened after a write fault; writes not on disk before the fault are lost, as after a crash");
            }
            Err(e) => {
                tracing::error!(dir = %reopen.dir.display(), error = %e, "reopening the store failed; retrying");
            }
        }
    }

    fn read_current(&self) -> Option<Arc<dyn Store>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Layer for Guard {
    fn inner(&self) -> Result<Arc<dyn Store>> {
        self.read_current()
            .ok_or_else(|| Error::Unavailable("the store is being reopened after a fault".into()))
    }

    fn read<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T>) -> Result<T> {
        if self.read_current().is_none() {
            self.maybe_reopen();
        }
        f(&*self.inner()?)
    }

    fn write<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T>) -> Result<T> {
        self.maybe_reopen();
        let result = self.inner().and_then(|store| f(&*store));
        self.note(&result);
        result
    }

    fn ticket(&self) -> SyncTicket {
        let store = match self.inner() {
            Ok(store) => store,
            Err(e) => return SyncTicket::new(async move { Err(e) }),
        };
        let ticket = store.sync_ticket();
        drop(store);
        // A flush that fails also makes the store unwritable (sled: the
        // next writes fail too); the guard needs to see it to reopen.
        let writable = self.writable.clone();
        SyncTicket::new(async move {
            let result = ticket.wait().await;
            if let Err(e) = &result
                && e.is_unavailable()
                && writable.swap(false, Ordering::AcqRel)
            {
                tracing::error!(error = %e, "the store refuses writes; holding them until it writes again");
            }
            result
        })
    }

    fn writable(&self) -> bool {
        self.writable.load(Ordering::Acquire)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn health(&self) -> StoreHealth {
        self.read_current()
            .map_or_else(|| self.opened.clone(), |s| s.health())
    }
}
