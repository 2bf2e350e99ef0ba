//! [`SledStore`]: the embedded [`Store`](super::Store), on sled 0.34 plus plain files.
//! Only `engine.rs` names sled's types: the store's logic sees an ordered
//! key-value engine of a few operations (`engine.rs`), so that a second
//! engine can run it.
//!
//! # Layout of a data directory
//! - `db/`: the sled database, one tree of prefixed keys (below).
//! - `blobs/<sha256>.wasm`: plugin components; `blobs/<sha256>.log`: attempt
//!   logs larger than [`LOG_INLINE_MAX`]. Content-addressed, written atomically
//!   (temporary file, fsync, rename, directory fsync) and checked against their
//!   digest when read.
//! - `inputs/<run>`: run inputs over 64 KiB, written atomically before the
//!   run's batch (`inputs.rs`).
//! - `store-format`: the store format, written once the database is created.
//!   It outlives a database that sled "recovers" as empty (sled 0.34 opens a
//!   database with a garbled log as an empty one), so that case is refused.
//!
//! # Keys
//! A key is a list of parts, each encoded so that no part contains the
//! separator and byte order of the encoded key is the order of the parts as
//! strings (see `keys.rs`). Written here as `kind/part/part`:
//!
//! | key | value |
//! |---|---|
//! | `sys/format` | store format |
//! | `meta/{key}` | a metadata string |
//! | `plug/{tenant}/{name}/{version}` | [`PluginRecord`] |
//! | `ptag/{tenant}/{name}/{tag}` | [`PluginTag`]: a movable name for one version |
//! | `task/{tenant}/{name}` | [`TaskRecord`] |
//! | `sched/{tenant}/{task}` | [`ScheduleState`] |
//! | `nf/{next_fire:020}/{tenant}/{task}` | `[tenant, task]`: the next-fire index (unpaused schedules) |
//! | `aft/{tenant}/{upstream}/{downstream}` | downstream task name: the `after` index |
//! | `run/{id}` | [`RunRecord`] without its id, compact (`compact.rs`), its task definition named by digest (`definitions.rs`); a run of many steps without them (`steps.rs`) |
//! | `step/{run}/{index:05}` | a step run of a run of many steps (`steps.rs`) |
//! | `inp/{run}/{n:05}` | a chunk of a large run input (`inputs.rs`) |
//! | `def/{digest}`, `dref/{digest}` | a task definition runs name, and how many do |
//! | `rt/{tenant}/{id}`, `rk/{tenant}/{task}/{id}` | nothing (since store format 10; before, the run's status): a run listed by tenant and by task, written once; a listing reads the state from the record's first fields, and listing every tenant's runs reads `run/` itself (no `ra/{id}` since format 10) |
//! | `act/{id}` | present while the run is `running` |
//! | `q/{tenant}/{order:020}/{id}` | task name; present while the run is `queued`: the persistent queue in dispatch order (`order`: priority with aging) |
//! | `qn/{tenant}/{task}/c`, `qn/{tenant}/{task}/r` | how many of the task's runs `q` holds: the sum of the two (`counts.rs`) |
//! | `tb/{tenant}/c`, `tb/{tenant}/r`, `tb/{tenant}/l` | bytes of the tenant's run data: the sum of the three (`footprint.rs`) |
//! | `idem/{tenant}/{task}/{key}` | run id (kept after the run is deleted, until the key expires) |
//! | `ik/{expires:020}/{tenant}/{task}/{key}` | run id: idempotency keys by when they expire |
//! | `fire/{tenant}/{task}/{scheduled_for}` | run id (runs inserted with `unique_fire`) |
//! | `ev/{run}/{seq:020}` | the [`Event`]s of one write, a compact list without the run id (`events.rs`; states by number since format 8; JSON in stores of format 5 and before, one [`Event`] per key before lists); `seq` from sled's monotonic id generator |
//! | `log/{run}/{step}/{attempt:010}` | attempt logs, inline or a blob reference |
//! | `lref/{digest}/{run}/{step}/{attempt:010}` | a log blob's references |
//! | `rec/{run}/{step}/{attempt:010}` | an attempt's record (`record:`), inline: at most `MAX_RECORD_BYTES` |
//! | `dead/{id}`, `dt/{tenant}/{id}` | [`DeadLetter`], and its tenant index |
//! | `ten/{name}` | [`TenantRecord`] |
//! | `tok/{id}` | [`TokenRecord`] (a digest of the secret, never the token) |
//! | `use/{tenant}/{hour:020}/{task}` | [`UsageBucket`]: one hour of a task's usage |
//! | `al/{id}`, `alt/{tenant}/{status}/{id}`, `ald/{next_try:020}/{id}` | [`OutboxAlert`](super::OutboxAlert) and its indexes (`outbox.rs`) |
//!
//! Run ids and dead-letter ids sort by creation time, so iterating an index
//! backwards lists newest first.
//!
//! # Values
//! Every value is one format byte followed by JSON (see `keys.rs`), except
//! the hot ones: a write's events (`events.rs`), run records and step runs
//! (`compact.rs`) and inline logs (`logs.rs`) are postcard after a byte of
//! their own. A value of an
//! unknown format is reported as [`Error::Corrupt`], never a panic.
//!
//! # Atomicity and durability
//! `insert_runs`, `write_runs` (any number of runs and usage buckets, and
//! the outbox alerts they raised),
//! `delete_run`, `put_task` and a large `put_logs` are one sled batch each
//! (atomic across a crash). sled seals and writes its log buffer twice for
//! every batch (to bracket it for recovery), so batches are costly and
//! callers write many changes in one. Run writes
//! are serialised by one mutex, so `insert_runs`' check-then-write holds.
//!
//! Writes reach the disk in groups: a [`SyncTicket`] waits for one flusher
//! thread to flush the writes made before it (`flush.rs`).
//!
//! # Files
//! This file holds the store, its record access and the [`Store`](super::Store) impl, which
//! says for each method which key it reads or writes, or hands over to the
//! file of the method's concept:
//! - `engine.rs`: the key-value engine under the rest (sled), its few operations;
//! - `open.rs`: opening a data directory, format markers, refusing damage;
//! - `keys.rs`: key and value encoding, run index entries;
//! - `runs.rs`: runs, their indexes, claims and events;
//! - `definitions.rs`: task definitions, stored once for the runs made from them;
//! - `compact.rs`: run records and step runs in postcard (store format 8);
//! - `counts.rs`: the queue's counters per task;
//! - `footprint.rs`: the bytes of run data each tenant keeps;
//! - `schedules.rs`: tasks, schedules, the next-fire and `after` indexes;
//! - `logs.rs`: attempt logs, inline or in shared blobs;
//! - `blobs.rs`: content-addressed files, atomic file writes;
//! - `usage.rs`: hourly usage buckets;
//! - `outbox.rs`: the alert outbox;
//! - `flush.rs`: group commit (the flusher thread and sync tickets).

mod blobs;
mod compact;
mod counts;
mod definitions;
pub(crate) mod engine;
mod events;
#[cfg(test)]
mod fixtures;
mod flush;
mod footprint;
mod inputs;
mod keys;
mod logs;
mod open;
mod outbox;
mod runs;
mod schedules;
mod steps;
mod upgrade;
mod usage;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use serde::Serialize;
use serde::de::DeserializeOwned;

use self::blobs::{is_digest, remove_file_if_present};
use self::engine::{Batch, EngineError, Value};
use self::flush::SyncShared;
use self::keys::{corrupt_key, decode, decode_part, encode, key, newer_record};
use super::rules::digest_of;
use super::{
    AttemptLogs, Catalog, Error, Insert, KeyEntry, Lease, Leases, NewRun, Operations, Outbox,
    Result, RunPage, RunQuery, RunSummary, RunWrite, Runs, SyncTicket, Tenancy, rules,
};
use crate::model::ids::{RunId, TaskName, TenantId};
use crate::model::record::AttemptRecord;
use crate::model::{
    DeadLetter, Event, Millis, PluginRecord, PluginTag, RECORD_FORMAT, RunRecord, ScheduleState,
    TaskRecord,
};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

pub use self::engine::EngineKind;
pub use self::logs::LOG_INLINE_MAX;
pub use self::open::{Checked, KindSize, STORE_FORMAT};

/// The embedded store: sled for records, files for blobs. See the module docs.
pub struct SledStore {
    db: engine::Db,
    /// The data directory.
    dir: PathBuf,
    /// `dir/blobs`.
    blobs: PathBuf,
    /// Serialises run updates, deletes, dead-letter and outbox writes, which
    /// read before they write.
    run_lock: Mutex<()>,
    /// Serialises run inserts (which check claims, then write them) with
    /// deletes (which free them). Apart from `run_lock`: inserts touch only
    /// keys of new runs, and the scheduler's inserts must not wait behind a
    /// large batch of updates (they did, for up to 8 ms, delaying fires).
    claim_lock: Mutex<()>,
    /// Serialises log blob writes with their release, so a blob is never
    /// unlinked while a new reference to it is being written.
    blob_lock: Mutex<()>,
    /// Tasks whose insert-side queue counter changed since the last fold
    /// (`counts.rs`).
    counted: Mutex<std::collections::HashSet<(String, String)>>,
    /// When the queue counters were last folded.
    folded_at: Mutex<std::time::Instant>,
    /// Makes temporary file names unique within the process.
    tmp_counter: AtomicU64,
    /// State shared with the flusher thread.
    sync: Arc<SyncShared>,
    /// The flusher thread, joined on drop.
    flusher: Option<JoinHandle<()>>,
    /// Bound on index entries one `list_runs` call examines.
    scan_limit: usize,
    /// The plugins' key-value store (tree `kv` of the same database).
    kv: Arc<super::kv::SledKv>,
    /// Tenants' secrets (tree `secrets`).
    secrets: Arc<super::secrets::SledSecrets>,
    /// The read of every entry after opening (`open`).
    verify: open::Verify,
    /// Task definitions records in memory hold (`definitions.rs`).
    definitions: Mutex<definitions::Definitions>,
}

impl SledStore {
    /// Lowers the `list_runs` scan bound, so tests reach it with few runs.
    #[cfg(test)]
    pub(crate) fn with_scan_limit(mut self, scan_limit: usize) -> Self {
        self.scan_limit = scan_limit;
        self
    }

    /// The engine its database is on.
    pub fn engine(&self) -> EngineKind {
        self.db.kind()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Counts a completed write, for [`Operations::sync_ticket`](crate::store::Operations::sync_ticket).
    fn wrote(&self) {
        self.sync.count_write();
    }

    fn get<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>> {
        match self.db.get(key).map_err(engine_error)? {
            Some(value) => decode(key, &value).map(Some),
            None => Ok(None),
        }
    }

    fn get_run_at(&self, key: &[u8]) -> Result<Option<RunRecord>> {
        let Some(bytes) = self.db.get(key).map_err(engine_error)? else {
            return Ok(None);
        };
        let Some(run) = self.decode_run(key, &bytes)? else {
            return Ok(None);
        };
        if run.format > RECORD_FORMAT {
            return Err(newer_record(key, run.format));
        }
        Ok(Some(run))
    }

    fn put<T: Serialize + ?Sized>(&self, key: Vec<u8>, value: &T) -> Result<()> {
        self.db.insert(key, encode(value)?).map_err(engine_error)?;
        self.wrote();
        Ok(())
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        self.db.apply_batch(batch).map_err(engine_error)?;
        self.wrote();
        Ok(())
    }

    /// Every `(key, value)` under `prefix`, in key order.
    fn scan(&self, prefix: &[u8]) -> impl DoubleEndedIterator<Item = Result<(Value, Value)>> {
        self.db
            .scan_prefix(prefix)
            .map(|item| item.map_err(engine_error))
    }

    /// Every value under `prefix`, decoded, in key order.
    fn values<T: DeserializeOwned>(&self, prefix: &[u8]) -> Result<Vec<T>> {
        self.scan(prefix)
            .map(|item| item.and_then(|(k, v)| decode(&k, &v)))
            .collect()
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        self.verify.stop();
        self.sync.stop();
        if let Some(flusher) = self.flusher.take() {
            // The flusher makes a last flush and exits; joining it also
            // releases its database handle, so the directory can be reopened.
            let _ = flusher.join();
        }
    }
}

impl Operations for SledStore {
    fn sync_ticket(&self) -> SyncTicket {
        self.sync.ticket()
    }

    fn damage(&self) -> Option<String> {
        self.verify.damage()
    }

    fn get_meta(&self, key: &str) -> Result<Option<String>> {
        self.get(&self::key("meta", &[key]))
    }

    fn put_meta(&self, key: &str, value: &str) -> Result<()> {
        self.put(self::key("meta", &[key]), value)
    }

    fn kv(&self) -> Arc<dyn super::kv::KvStore> {
        self.kv.clone()
    }

    fn secrets(&self) -> Arc<dyn super::secrets::SecretStore> {
        self.secrets.clone()
    }

    fn size_on_disk(&self) -> u64 {
        let db = self.db.size_on_disk().unwrap_or(0);
        db + blobs::dir_size(&self.blobs) + blobs::dir_size(&self.dir.join(inputs::INPUTS_DIR))
    }

    fn health(&self) -> super::StoreHealth {
        let kind = match self.engine() {
            super::EngineKind::Sled => super::StoreKind::Sled,
            super::EngineKind::Fjall => super::StoreKind::Fjall,
        };
        super::StoreHealth::new(kind, self.dir.display().to_string())
    }
}

impl Catalog for SledStore {
    fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        let digest = digest_of(bytes);
        self.write_blob(&format!("{digest}.wasm"), bytes)?;
        Ok(digest)
    }

    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        self.read_blob(digest, "wasm")
    }

    fn delete_blob(&self, digest: &str) -> Result<()> {
        if is_digest(digest) {
            remove_file_if_present(&self.blobs.join(format!("{digest}.wasm")))?;
        }
        Ok(())
    }

    fn put_plugin(&self, plugin: &PluginRecord) -> Result<()> {
        let parts = [&*plugin.tenant, &plugin.name, &plugin.version];
        self.put(key("plug", &parts), plugin)
    }

    fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<Option<PluginRecord>> {
        self.get(&key("plug", &[tenant, name, version]))
    }

    fn list_plugins(&self, tenant: &str) -> Result<Vec<PluginRecord>> {
        self.values(&key("plug", &[tenant]))
    }

    fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool> {
        let was = self
            .db
            .remove(key("plug", &[tenant, name, version]))
            .map_err(engine_error)?;
        self.wrote();
        Ok(was)
    }

    fn put_plugin_tag(&self, tag: &PluginTag) -> Result<()> {
        let parts = [&*tag.tenant, &tag.name, &tag.tag];
        self.put(key("ptag", &parts), tag)
    }

    fn get_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<Option<PluginTag>> {
        self.get(&key("ptag", &[tenant, name, tag]))
    }

    fn list_plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>> {
        self.values(&key("ptag", &[tenant]))
    }

    fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<bool> {
        let was = self
            .db
            .remove(key("ptag", &[tenant, name, tag]))
            .map_err(engine_error)?;
        self.wrote();
        Ok(was)
    }

    fn put_tasks(&self, tasks: &[(TaskRecord, ScheduleState)]) -> Result<()> {
        let tasks: Vec<_> = tasks.iter().map(|(t, s)| (t, s)).collect();
        self.put_tasks_at(&tasks)
    }

    fn get_task(&self, tenant: &str, name: &str) -> Result<Option<TaskRecord>> {
        let key = key("task", &[tenant, name]);
        let task: Option<TaskRecord> = self.get(&key)?;
        match task {
            Some(task) if task.format > RECORD_FORMAT => Err(newer_record(&key, task.format)),
            task => Ok(task),
        }
    }

    fn list_tasks(&self, tenant: Option<&str>) -> Result<Vec<TaskRecord>> {
        let tasks: Vec<TaskRecord> = match tenant {
            Some(tenant) => self.values(&key("task", &[tenant]))?,
            None => self.values(&key("task", &[]))?,
        };
        if let Some(task) = tasks.iter().find(|t| t.format > RECORD_FORMAT) {
            let key = key("task", &[&task.tenant, &task.name]);
            return Err(newer_record(&key, task.format));
        }
        Ok(tasks)
    }

    fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.tasks_page(tenant, after, limit)
    }

    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool> {
        self.delete_task_at(tenant, name)
    }

    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()> {
        self.put_schedule_at(schedule)
    }

    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>> {
        self.get(&key("sched", &[tenant, task]))
    }

    fn due_schedules(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>> {
        self.due_schedules_in(from, until, limit)
    }

    fn downstream_tasks(&self, tenant: &str, upstream: &str) -> Result<Vec<String>> {
        self.downstream_of(tenant, upstream)
    }
}

impl Runs for SledStore {
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>> {
        runs::insert(self, runs)
    }

    fn write_runs_with_alerts(
        &self,
        runs: &[RunWrite],
        usage: &[UsageBucket],
        alerts: &[super::OutboxAlert],
    ) -> Result<()> {
        runs::write(self, runs, usage, alerts)
    }

    fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        self.get_run_at(&key("run", &[id]))
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage> {
        runs::list(self, query)
    }

    fn running_runs(&self) -> Result<Vec<RunRecord>> {
        runs::running(self)
    }

    fn queued_runs(&self, tenant: &str, limit: usize) -> Result<Vec<RunRecord>> {
        runs::queued(self, tenant, limit)
    }

    fn queued_ids(&self, tenant: &str, limit: usize) -> Result<Vec<RunId>> {
        runs::queued_ids(self, tenant, limit)
    }

    fn queued_counts(&self) -> Result<Vec<(TenantId, TaskName, usize)>> {
        counts::queued_counts(self)
    }

    fn run_summaries_page(
        &self,
        after: Option<&RunSummary>,
        limit: usize,
    ) -> Result<Vec<RunSummary>> {
        runs::summaries_page(self, after, limit)
    }

    fn delete_run(&self, id: &str) -> Result<bool> {
        runs::delete(self, id)
    }

    fn expire_keys(&self, now: Millis, limit: usize) -> Result<usize> {
        runs::expire(self, now, limit)
    }

    fn forgotten_keys(&self, after: Option<&KeyEntry>, limit: usize) -> Result<Vec<KeyEntry>> {
        runs::forgotten_keys(self, after, limit)
    }

    fn restore_keys(&self, keys: &[KeyEntry]) -> Result<()> {
        runs::restore_keys(self, keys)
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        for item in self.scan(&key("ev", &[run_id])) {
            let (k, v) = item?;
            events.extend(events::decode_at(&k, run_id, &v)?);
        }
        Ok(events)
    }

    fn put_logs(&self, tenant: &str, run_id: &str, attempt: &AttemptLogs) -> Result<()> {
        logs::put(self, tenant, run_id, attempt)
    }

    fn put_logs_batch(&self, all: &[super::RunLogs]) -> Result<()> {
        logs::put_batch(self, all)
    }

    fn run_bytes(&self, tenant: &str) -> Result<u64> {
        footprint::run_bytes(self, tenant)
    }

    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>> {
        logs::list(self, run_id)
    }

    fn put_record(&self, record: &AttemptRecord) -> Result<()> {
        let ctx = &record.context;
        let attempt = format!("{:010}", ctx.attempt);
        let rec_key = key("rec", &[&ctx.run_id, &ctx.step, &attempt]);
        let value = encode(record)?;
        let _blobs = lock(&self.blob_lock);
        let old = self.db.get(&rec_key).map_err(engine_error)?;
        let mut weight = footprint::Weight::default();
        weight.add(
            &ctx.tenant,
            footprint::signed(value.len()) - old.map_or(0, |v| footprint::signed(v.len())),
        );
        let mut batch = Batch::default();
        batch.insert(rec_key, value);
        self.weigh(&mut batch, &weight, footprint::Side::Logs)?;
        self.apply(batch)
    }

    fn get_record(&self, run_id: &str, step: &str, attempt: u32) -> Result<Option<AttemptRecord>> {
        self.get(&key("rec", &[run_id, step, &format!("{attempt:010}")]))
    }

    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()> {
        let _serial = lock(&self.run_lock);
        let dead_key = key("dead", &[&dead.id]);
        let old: Option<DeadLetter> = self.get(&dead_key)?;
        let mut batch = Batch::default();
        if let Some(old) = old.filter(|old| old.tenant != dead.tenant) {
            batch.remove(key("dt", &[&old.tenant, &old.id]));
        }
        batch.insert(key("dt", &[&dead.tenant, &dead.id]), Vec::new());
        batch.insert(dead_key, encode(dead)?);
        self.apply(batch)
    }

    fn get_dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        self.get(&key("dead", &[id]))
    }

    fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>> {
        let prefix = key("dt", &[tenant]);
        let mut found = Vec::new();
        for item in self.scan(&prefix).rev() {
            let (k, _) = item?;
            let id = decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
            let dead = self.get_dead_letter(&id)?;
            if let Some(dead) = dead.filter(|d| !open_only || d.resolution.is_none()) {
                found.push(dead);
            }
        }
        Ok(found)
    }
}

impl Outbox for SledStore {
    fn put_alerts(&self, alerts: &[super::OutboxAlert]) -> Result<()> {
        outbox::put(self, alerts)
    }

    fn get_alert(&self, id: &str) -> Result<Option<super::OutboxAlert>> {
        outbox::get(self, id)
    }

    fn due_alerts(&self, until: Millis, limit: usize) -> Result<Vec<super::OutboxAlert>> {
        outbox::due(self, until, limit)
    }

    fn list_alerts(
        &self,
        query: &super::AlertQuery,
    ) -> Result<(Vec<super::OutboxAlert>, Option<String>)> {
        outbox::list(self, query)
    }

    fn trim_alerts(&self, tenant: &str, status: super::AlertStatus, keep: usize) -> Result<usize> {
        outbox::trim(self, tenant, status, keep)
    }

    fn alert_counts(&self) -> Result<Vec<(String, super::AlertStatus, usize)>> {
        outbox::counts(self)
    }
}

impl Leases for SledStore {
    fn take_lease(&self, name: &str, holder: &str, now: Millis, until: Millis) -> Result<Lease> {
        // Under the claim lock, as idempotency claims: one taker at a time.
        let _claims = lock(&self.claim_lock);
        let key = key("lease", &[name]);
        let current: Option<Lease> = self.get(&key)?;
        match rules::take_lease(current.as_ref(), name, holder, now, until) {
            Some(taken) => {
                self.put(key, &taken)?;
                Ok(taken)
            }
            None => Ok(current.expect("a live lease was compared")),
        }
    }

    fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<bool> {
        let _claims = lock(&self.claim_lock);
        let key = key("lease", &[name]);
        match self.get::<Lease>(&key)? {
            Some(mut lease) if lease.held_by(holder, now) => {
                lease.until = now;
                self.put(key, &lease)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

impl Tenancy for SledStore {
    fn put_tenant(&self, tenant: &TenantRecord) -> Result<()> {
        self.put(key("ten", &[&tenant.name]), tenant)
    }

    fn list_tenants(&self) -> Result<Vec<TenantRecord>> {
        self.values(&key("ten", &[]))
    }

    fn put_token(&self, token: &TokenRecord) -> Result<()> {
        self.put(key("tok", &[&token.id]), token)
    }

    fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        self.values(&key("tok", &[]))
    }

    fn usage(&self, tenant: &str, from: Millis, to: Millis) -> Result<Vec<UsageBucket>> {
        usage::read(self, tenant, from, to)
    }
}

fn engine_error(e: EngineError) -> Error {
    match e {
        EngineError::Io(e) => Error::Io(e),
        EngineError::Corruption { at } => Error::Corrupt {
            key: at,
            reason: "the database is damaged".to_owned(),
        },
        EngineError::InUse | EngineError::Other(_) => Error::Backend(e.to_string()),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data are plain flags or `()`; a panic elsewhere while
    // holding the lock cannot leave them half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl super::Backup for SledStore {
    fn map_page(
        &self,
        tree: super::Tree,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.maps().page(tree, after, limit)
    }

    fn restore_map(&self, tree: super::Tree, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        self.maps().restore(tree, entries)
    }
}

impl SledStore {
    fn maps(&self) -> super::backup::Maps<'_, super::kv::SledMap> {
        super::backup::Maps {
            kv: &self.kv,
            secrets: &self.secrets,
        }
    }
}
