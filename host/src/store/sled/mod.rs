//! [`SledStore`]: the embedded [`Store`], on sled 0.34 plus plain files. The
//! only module that names sled; no sled type leaves it.
//!
//! # Layout of a data directory
//! - `db/`: the sled database, one tree of prefixed keys (below).
//! - `blobs/<sha256>.wasm`: plugin components; `blobs/<sha256>.log`: attempt
//!   logs larger than [`LOG_INLINE_MAX`]. Content-addressed, written atomically
//!   (temporary file, fsync, rename, directory fsync) and checked against their
//!   digest when read.
//! - `store-format`: the store format, written once the database is created.
//!   It outlives a database that sled "recovers" as empty (sled 0.34 opens a
//!   database with a garbled log as an empty one), so that case is refused.
//!
//! # Keys
//! A key is a list of parts, each encoded so that no part contains the
//! separator and byte order of the encoded key is the order of the parts as
//! strings (see `key`). Written here as `kind/part/part`:
//!
//! | key | value |
//! |---|---|
//! | `sys/format` | store format |
//! | `meta/{key}` | a metadata string |
//! | `plug/{tenant}/{name}/{version}` | [`PluginRecord`] |
//! | `task/{tenant}/{name}` | [`TaskRecord`] |
//! | `sched/{tenant}/{task}` | [`ScheduleState`] |
//! | `run/{id}` | [`RunRecord`] |
//! | `ra/{id}`, `rt/{tenant}/{id}`, `rk/{tenant}/{task}/{id}` | run indexes: status and task |
//! | `act/{id}` | present while the run is not terminal (the persistent queue) |
//! | `idem/{tenant}/{task}/{key}` | run id |
//! | `fire/{tenant}/{task}/{scheduled_for}` | run id (runs inserted with `unique_fire`) |
//! | `ev/{run}/{seq:020}` | [`Event`]; `seq` from sled's monotonic id generator |
//! | `log/{run}/{step}/{attempt:010}` | attempt logs, inline or a blob reference |
//! | `lref/{digest}/{run}/{step}/{attempt:010}` | a log blob's references |
//! | `dead/{id}`, `dt/{tenant}/{id}` | [`DeadLetter`], and its tenant index |
//! | `ten/{name}` | [`TenantRecord`] |
//! | `tok/{id}` | [`TokenRecord`] (a digest of the secret, never the token) |
//! | `use/{tenant}/{hour:020}/{task}` | [`UsageBucket`]: one hour of a task's usage |
//!
//! Run ids and dead-letter ids sort by creation time, so iterating an index
//! backwards lists newest first.
//!
//! # Values
//! Every value is one format byte (`VALUE_FORMAT`) followed by JSON. A value
//! of an unknown format is reported as [`Error::Corrupt`], never a panic.
//!
//! # Atomicity and durability
//! `insert_runs`, `write_runs` (any number of runs and usage buckets),
//! `delete_run`, `put_task` and a large `put_logs` are one sled batch each
//! (atomic across a crash). sled seals and writes its log buffer twice for
//! every batch (to bracket it for recovery), so batches are costly and
//! callers write many changes in one. Run writes
//! are serialised by one mutex, so `insert_runs`' check-then-write holds.
//!
//! Writes reach the disk in groups: a [`SyncTicket`] asks one flusher thread
//! to call sled's `flush` and waits, on a `watch` channel, until a flush that
//! started after the ticket's writes has finished. sled's own `flush_async`
//! is never used: many concurrent callers hang it (sled#1308).

use std::fs::{self, File};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::memory::{MAX_SCAN, digest_of, missing_run, select_page};
use super::{AttemptLogs, Error, Insert, NewRun, Result, RunPage, RunQuery, Store, SyncTicket};
use crate::model::{
    DeadLetter, Event, Millis, PluginRecord, RECORD_FORMAT, RunRecord, RunStatus, ScheduleState,
    TaskRecord,
};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// Format of the store as a whole (key layout, value encoding). A store
/// written by a newer ax is refused rather than misread.
pub const STORE_FORMAT: u32 = 1;

/// Format byte that starts every value.
const VALUE_FORMAT: u8 = 1;

/// Serialized attempt logs larger than this go to a blob file: sled keeps
/// values in its page cache and rewrites them when it compacts, so large
/// values cost memory and write amplification.
pub const LOG_INLINE_MAX: usize = 16 << 10;

/// Name of the file, beside `db/`, holding the store format.
const FORMAT_FILE: &str = "store-format";

/// What an operator can do about a store that cannot be opened.
const RESTORE_HINT: &str = "Stop any other ax process using this data directory. If none is \
    running, the database is damaged: move the data directory aside and restore it from a \
    backup (plugin blobs in blobs/ are plain files checked by digest and can be copied over).";

/// Pause before retrying a flush that failed (a full disk, say): long enough
/// not to spin, short enough that waiters resume soon after space is freed.
const FLUSH_RETRY: Duration = Duration::from_millis(100);

/// The embedded store: sled for records, files for blobs. See the module docs.
pub struct SledStore {
    db: sled::Db,
    /// The data directory.
    dir: PathBuf,
    /// `dir/blobs`.
    blobs: PathBuf,
    /// Serialises run updates, deletes and dead-letter writes, which read
    /// before they write.
    run_lock: Mutex<()>,
    /// Serialises run inserts (which check claims, then write them) with
    /// deletes (which free them). Apart from `run_lock`: inserts touch only
    /// keys of new runs, and the scheduler's inserts must not wait behind a
    /// large batch of updates (they did, for up to 8 ms, delaying fires).
    claim_lock: Mutex<()>,
    /// Serialises log blob writes with their release, so a blob is never
    /// unlinked while a new reference to it is being written.
    blob_lock: Mutex<()>,
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
}

/// Group commit state shared by writers, tickets and the flusher thread.
struct SyncShared {
    /// Writes completed so far; bumped after each write lands in sled.
    written: AtomicU64,
    /// What the flusher is asked to do.
    request: Mutex<FlushRequest>,
    /// Wakes the flusher when `request` changes.
    wake: Condvar,
    /// What has been flushed, for tickets to wait on.
    status: watch::Sender<FlushStatus>,
}

#[derive(Default)]
struct FlushRequest {
    /// Flush until at least this many writes are on disk.
    up_to: u64,
    /// Flush once more and exit.
    stop: bool,
}

#[derive(Clone, Debug, Default)]
struct FlushStatus {
    /// Writes on disk.
    flushed: u64,
    /// The last flush failed: writes up to `.0` are not known to be on disk.
    failure: Option<(u64, String)>,
}

impl SledStore {
    /// Opens (or creates) the store in `data_dir`. A damaged, locked or newer
    /// store is refused with [`Error::Unusable`], which says what to do.
    pub fn open(data_dir: &Path) -> Result<SledStore> {
        let unusable = |reason: String| Error::Unusable {
            path: data_dir.display().to_string(),
            reason,
            hint: RESTORE_HINT.to_owned(),
        };
        let blobs = data_dir.join("blobs");
        fs::create_dir_all(&blobs)
            .map_err(|e| unusable(format!("cannot create {}: {e}", blobs.display())))?;

        let format_file = data_dir.join(FORMAT_FILE);
        let file_format = match fs::read_to_string(&format_file) {
            Ok(text) => Some(
                parse_format(text.trim())
                    .map_err(|reason| unusable(format!("{}: {reason}", format_file.display())))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(unusable(format!("{}: {e}", format_file.display()))),
        };
        if let Some(format) = file_format {
            check_format(format).map_err(unusable)?;
        }

        let db = open_sled(&data_dir.join("db")).map_err(unusable)?;
        // Only now: another process holding the store may be writing them.
        remove_stale_tmp_files(&blobs);
        let stored = match db.get(key("sys", &["format"])) {
            Ok(Some(value)) => {
                let text: String = decode(b"sys/format", &value)
                    .map_err(|e| unusable(format!("unreadable format marker: {e}")))?;
                Some(parse_format(&text).map_err(unusable)?)
            }
            Ok(None) => None,
            Err(e) => return Err(unusable(format!("cannot read the format marker: {e}"))),
        };
        match (stored, file_format) {
            (Some(format), _) => check_format(format).map_err(unusable)?,
            (None, Some(_)) => {
                return Err(unusable(
                    "the database has lost its contents: sled opened it as empty, but this \
                     directory held an ax store (its log is damaged)"
                        .to_owned(),
                ));
            }
            (None, None) if !db.is_empty() => {
                return Err(unusable(
                    "db/ holds a sled database that is not an ax store".to_owned(),
                ));
            }
            (None, None) => {
                let marker = encode(&STORE_FORMAT.to_string())?;
                db.insert(key("sys", &["format"]), marker)
                    .and_then(|_| db.flush())
                    .map_err(|e| unusable(format!("cannot initialise the database: {e}")))?;
            }
        }
        if file_format.is_none() {
            write_atomically(
                &format_file,
                &data_dir.join(format!(".{FORMAT_FILE}.tmp")),
                format!("{STORE_FORMAT}\n").as_bytes(),
            )
            .map_err(|e| unusable(format!("cannot write {}: {e}", format_file.display())))?;
        }

        let (status, _) = watch::channel(FlushStatus::default());
        let sync = Arc::new(SyncShared {
            written: AtomicU64::new(0),
            request: Mutex::new(FlushRequest::default()),
            wake: Condvar::new(),
            status,
        });
        // sled 0.34 keeps its log in `db/db`. Without it tickets still wait
        // for sled's flush (safe against a killed process), so go on.
        let log_path = data_dir.join("db").join("db");
        let log = File::open(&log_path)
            .inspect_err(|e| {
                tracing::warn!(path = %log_path.display(), error = %e,
                    "cannot open sled's log file to fsync it; flushes will not fsync")
            })
            .ok();
        let flusher = {
            let (db, sync) = (db.clone(), Arc::clone(&sync));
            std::thread::Builder::new()
                .name("ax-store-flush".to_owned())
                .spawn(move || run_flusher(&db, log.as_ref(), &sync))?
        };
        // KV and secret writes count for group commit like the store's own.
        let hook: super::kv::WriteHook = {
            let sync = Arc::clone(&sync);
            Arc::new(move || {
                sync.written.fetch_add(1, Ordering::SeqCst);
            })
        };
        let kv = super::kv::SledKv::in_db(&db, Some(hook.clone()))
            .map_err(|e| unusable(e.to_string()))?;
        let secrets = super::secrets::SledSecrets::in_db(&db, Some(hook))
            .map_err(|e| unusable(e.to_string()))?;
        let (kv, secrets) = (Arc::new(kv), Arc::new(secrets));
        Ok(SledStore {
            kv,
            secrets,
            db,
            dir: data_dir.to_owned(),
            blobs,
            run_lock: Mutex::new(()),
            claim_lock: Mutex::new(()),
            blob_lock: Mutex::new(()),
            tmp_counter: AtomicU64::new(0),
            sync,
            flusher: Some(flusher),
            scan_limit: MAX_SCAN,
        })
    }

    /// Lowers the `list_runs` scan bound, so tests reach it with few runs.
    #[cfg(test)]
    pub(crate) fn with_scan_limit(mut self, scan_limit: usize) -> Self {
        self.scan_limit = scan_limit;
        self
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Counts a completed write, for [`Store::sync_ticket`].
    fn wrote(&self) {
        self.sync.written.fetch_add(1, Ordering::SeqCst);
    }

    fn get<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>> {
        match self.db.get(key).map_err(sled_error)? {
            Some(value) => decode(key, &value).map(Some),
            None => Ok(None),
        }
    }

    fn get_run_at(&self, key: &[u8]) -> Result<Option<RunRecord>> {
        let run: Option<RunRecord> = self.get(key)?;
        match run {
            Some(run) if run.format > RECORD_FORMAT => Err(newer_record(key, run.format)),
            run => Ok(run),
        }
    }

    fn put<T: Serialize + ?Sized>(&self, key: Vec<u8>, value: &T) -> Result<()> {
        self.db.insert(key, encode(value)?).map_err(sled_error)?;
        self.wrote();
        Ok(())
    }

    fn apply(&self, batch: sled::Batch) -> Result<()> {
        self.db.apply_batch(batch).map_err(sled_error)?;
        self.wrote();
        Ok(())
    }

    /// Every `(key, value)` under `prefix`, in key order.
    fn scan(
        &self,
        prefix: &[u8],
    ) -> impl DoubleEndedIterator<Item = Result<(sled::IVec, sled::IVec)>> {
        self.db
            .scan_prefix(prefix)
            .map(|item| item.map_err(sled_error))
    }

    /// Every value under `prefix`, decoded, in key order.
    fn values<T: DeserializeOwned>(&self, prefix: &[u8]) -> Result<Vec<T>> {
        self.scan(prefix)
            .map(|item| item.and_then(|(k, v)| decode(&k, &v)))
            .collect()
    }

    /// Writes a blob file atomically unless it is there already (the name is
    /// the content's digest, so an existing file holds the same bytes).
    fn write_blob(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.blobs.join(name);
        if path.exists() {
            return Ok(());
        }
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .blobs
            .join(format!(".tmp-{}-{n}-{name}", std::process::id()));
        write_atomically(&path, &tmp, bytes)?;
        Ok(())
    }

    /// Reads a blob file and checks it against its digest.
    fn read_blob(&self, digest: &str, ext: &str) -> Result<Option<Vec<u8>>> {
        if !is_digest(digest) {
            return Ok(None);
        }
        let path = self.blobs.join(format!("{digest}.{ext}"));
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if digest_of(&bytes) != digest {
            return Err(Error::Corrupt {
                key: path.display().to_string(),
                reason: "the file's content does not match its digest".to_owned(),
            });
        }
        Ok(Some(bytes))
    }

    /// Unlinks the log blobs in `digests` that no log references any more.
    /// The caller holds `blob_lock`.
    fn release_log_blobs(&self, digests: impl IntoIterator<Item = String>) -> Result<()> {
        for digest in digests {
            if self.scan(&key("lref", &[&digest])).next().is_none() && is_digest(&digest) {
                remove_file_if_present(&self.blobs.join(format!("{digest}.log")))?;
            }
        }
        Ok(())
    }

    fn load_logs(&self, key: &[u8], value: &[u8]) -> Result<AttemptLogs> {
        match decode::<StoredLogs>(key, value)? {
            StoredLogs::Inline(logs) => Ok(logs),
            StoredLogs::Blob { digest } => {
                let bytes = self
                    .read_blob(&digest, "log")?
                    .ok_or_else(|| Error::Corrupt {
                        key: show_key(key),
                        reason: format!("its log blob {digest}.log is missing"),
                    })?;
                serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                    key: format!("{digest}.log"),
                    reason: e.to_string(),
                })
            }
        }
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        lock(&self.sync.request).stop = true;
        self.sync.wake.notify_one();
        if let Some(flusher) = self.flusher.take() {
            // The flusher makes a last flush and exits; joining it also
            // releases its database handle, so the directory can be reopened.
            let _ = flusher.join();
        }
    }
}

/// The flusher thread: flushes whenever a ticket asks for writes not yet on
/// disk, then publishes how far it got. One flush covers every write made
/// before it started, so all tickets waiting meanwhile are served at once.
///
/// sled's `flush` writes its log with `sync_file_range`, which neither
/// flushes the device's write cache nor makes the file's new length durable;
/// enough for a killed process, not for a power cut. So each flush is
/// followed by an `fdatasync` of sled's log file (`log`, opened by us: an
/// fsync applies to the file, whichever descriptor asks).
fn run_flusher(db: &sled::Db, log: Option<&File>, sync: &SyncShared) {
    let mut flushed = 0;
    loop {
        let stop = {
            let mut request = lock(&sync.request);
            while request.up_to <= flushed && !request.stop {
                request = sync
                    .wake
                    .wait(request)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            request.stop
        };
        // Read before flushing: every write counted here has landed in sled,
        // so the flush below covers it.
        let target = sync.written.load(Ordering::SeqCst);
        let outcome = db
            .flush()
            .map_err(|e| e.to_string())
            .and_then(|_| match log {
                Some(log) => log.sync_data().map_err(|e| e.to_string()),
                None => Ok(()),
            });
        match outcome {
            Ok(()) => {
                flushed = target;
                sync.status.send_modify(|s| {
                    s.flushed = target;
                    s.failure = None;
                });
            }
            Err(e) => {
                tracing::error!(error = %e, "flushing the store to disk failed; retrying");
                sync.status.send_modify(|s| s.failure = Some((target, e)));
                if !stop {
                    std::thread::sleep(FLUSH_RETRY);
                }
            }
        }
        if stop {
            return;
        }
    }
}

/// How attempt logs are kept under `log/…`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StoredLogs {
    /// Small enough to live in sled.
    Inline(AttemptLogs),
    /// In `blobs/<digest>.log`.
    Blob { digest: String },
}

impl StoredLogs {
    fn blob(&self) -> Option<&str> {
        match self {
            StoredLogs::Blob { digest } => Some(digest),
            StoredLogs::Inline(_) => None,
        }
    }
}

impl Store for SledStore {
    fn sync_ticket(&self) -> SyncTicket {
        let target = self.sync.written.load(Ordering::SeqCst);
        let mut status = self.sync.status.subscribe();
        if status.borrow().flushed >= target {
            return SyncTicket::ready();
        }
        {
            let mut request = lock(&self.sync.request);
            request.up_to = request.up_to.max(target);
        }
        self.sync.wake.notify_one();
        SyncTicket::new(async move {
            let outcome = status
                .wait_for(|s| {
                    s.flushed >= target || s.failure.as_ref().is_some_and(|f| f.0 >= target)
                })
                .await
                .map(|s| {
                    if s.flushed >= target {
                        Ok(())
                    } else {
                        Err(s.failure.clone())
                    }
                });
            match outcome {
                Ok(Ok(())) => Ok(()),
                Ok(Err(failure)) => Err(Error::Backend(format!(
                    "flushing the store to disk failed: {}",
                    failure.map(|f| f.1).unwrap_or_default()
                ))),
                Err(_closed) => Err(Error::Backend(
                    "the store was closed before the write reached the disk".to_owned(),
                )),
            }
        })
    }

    fn get_meta(&self, key: &str) -> Result<Option<String>> {
        self.get(&self::key("meta", &[key]))
    }

    fn put_meta(&self, key: &str, value: &str) -> Result<()> {
        self.put(self::key("meta", &[key]), value)
    }

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
        let old = self
            .db
            .remove(key("plug", &[tenant, name, version]))
            .map_err(sled_error)?;
        self.wrote();
        Ok(old.is_some())
    }

    fn put_task(&self, task: &TaskRecord, schedule: &ScheduleState) -> Result<()> {
        let mut batch = sled::Batch::default();
        batch.insert(key("task", &[&task.tenant, &task.name]), encode(task)?);
        batch.insert(
            key("sched", &[&schedule.tenant, &schedule.task]),
            encode(schedule)?,
        );
        self.apply(batch)
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

    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool> {
        let task_key = key("task", &[tenant, name]);
        let existed = self.db.contains_key(&task_key).map_err(sled_error)?;
        let mut batch = sled::Batch::default();
        batch.remove(task_key);
        batch.remove(key("sched", &[tenant, name]));
        self.apply(batch)?;
        Ok(existed)
    }

    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()> {
        self.put(key("sched", &[&schedule.tenant, &schedule.task]), schedule)
    }

    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>> {
        self.get(&key("sched", &[tenant, task]))
    }

    fn list_schedules(&self) -> Result<Vec<ScheduleState>> {
        self.values(&key("sched", &[]))
    }

    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>> {
        let _serial = lock(&self.claim_lock);
        let mut batch = sled::Batch::default();
        let mut outcomes = Vec::with_capacity(runs.len());
        // Keys claimed by runs earlier in this batch, to their run.
        let mut claimed: std::collections::HashMap<Vec<u8>, &RunRecord> = Default::default();
        for new in runs {
            let run = &new.run;
            let run_key = key("run", &[&run.id]);
            let idem_key = run
                .idempotency_key
                .as_deref()
                .map(|k| key("idem", &[&run.tenant, &run.task, k]));
            let fire_key = new.unique_fire.then(|| fire_key(run));
            let claims = [Some(&run_key), idem_key.as_ref(), fire_key.as_ref()];
            if let Some(earlier) = claims.iter().flatten().find_map(|k| claimed.get(*k)) {
                outcomes.push(Insert::Existing(Box::new((*earlier).clone())));
                continue;
            }
            if let Some(existing) = self.claimed_by(&run_key, [&idem_key, &fire_key])? {
                outcomes.push(Insert::Existing(Box::new(existing)));
                continue;
            }
            batch.insert(run_key.clone(), encode(run)?);
            for (index_key, value) in run_indexes(run) {
                batch.insert(index_key, value);
            }
            for claim in [&idem_key, &fire_key].into_iter().flatten() {
                batch.insert(claim.clone(), encode(&run.id)?);
            }
            if let Some(schedule) = &new.schedule {
                let sched_key = key("sched", &[&schedule.tenant, &schedule.task]);
                batch.insert(sched_key, encode(schedule)?);
            }
            self.add_events(&mut batch, &run.id, &new.events)?;
            for claim in [Some(run_key), idem_key, fire_key].into_iter().flatten() {
                claimed.insert(claim, run);
            }
            outcomes.push(Insert::Created);
        }
        if outcomes.contains(&Insert::Created) {
            self.apply(batch)?;
        }
        Ok(outcomes)
    }

    fn write_runs(&self, runs: &[(RunRecord, Vec<Event>)], usage: &[UsageBucket]) -> Result<()> {
        if runs.is_empty() && usage.is_empty() {
            return Ok(());
        }
        // A run given twice: its last record, with the events of both.
        let mut order: Vec<(&RunRecord, Vec<&Event>)> = Vec::with_capacity(runs.len());
        let mut at: std::collections::HashMap<&str, usize> = Default::default();
        for (run, events) in runs {
            match at.get(run.id.as_str()) {
                Some(&i) => {
                    order[i].0 = run;
                    order[i].1.extend(events);
                }
                None => {
                    at.insert(&run.id, order.len());
                    order.push((run, events.iter().collect()));
                }
            }
        }
        // Encoded before taking the lock: most of a write's time.
        let encoded = order
            .into_iter()
            .map(|(run, events)| {
                let events = events.into_iter().map(encode).collect::<Result<Vec<_>>>()?;
                Ok((run, encode(run)?, events))
            })
            .collect::<Result<Vec<_>>>()?;
        let _serial = lock(&self.run_lock);
        let mut batch = sled::Batch::default();
        let mut missing = None;
        for (run, record, events) in encoded {
            if !self.run_changes(&mut batch, run, record)? {
                missing.get_or_insert(&run.id);
                continue;
            }
            for event in events {
                self.add_event(&mut batch, &run.id, event)?;
            }
        }
        self.usage_changes(&mut batch, usage)?;
        self.apply(batch)?;
        missing.map_or(Ok(()), |id| Err(missing_run(id)))
    }

    fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        self.get_run_at(&key("run", &[id]))
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage> {
        let (prefix, task_filter) = match (&query.tenant, &query.task) {
            (Some(tenant), Some(task)) => (key("rk", &[tenant, task]), None),
            (Some(tenant), None) => (key("rt", &[tenant]), None),
            (None, task) => (key("ra", &[]), task.as_deref()),
        };
        let entries = match query.cursor.as_deref().filter(|c| !c.is_empty()) {
            Some(cursor) => {
                let mut end = prefix.clone();
                push_part(&mut end, cursor);
                self.db.range(prefix.clone()..end)
            }
            None => self.db.scan_prefix(&prefix),
        };
        let entries = entries.rev().map(|item| {
            let (k, v) = item.map_err(sled_error)?;
            let id = decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
            let (status, task) = decode_index(&k, &v)?;
            Ok((id, status, task))
        });
        let (ids, next) = select_page(
            entries,
            task_filter,
            query.status,
            query.limit,
            self.scan_limit,
        )?;
        let mut runs = Vec::with_capacity(ids.len());
        for id in ids {
            // Indexes and records are read without a snapshot: a run deleted
            // since its index entry was read is left out.
            if let Some(run) = self.get_run(&id)? {
                runs.push(run);
            }
        }
        Ok(RunPage { runs, next })
    }

    fn active_runs(&self) -> Result<Vec<RunRecord>> {
        let prefix = key("act", &[]);
        let mut runs = Vec::new();
        for item in self.scan(&prefix) {
            let (k, _) = item?;
            let id = decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
            if let Some(run) = self.get_run(&id)? {
                runs.push(run);
            }
        }
        Ok(runs)
    }

    fn run_summaries(&self) -> Result<Vec<super::RunSummary>> {
        // `rt/<tenant>/<id>` → status and task: every run once, no record read.
        let prefix = key("rt", &[]);
        self.scan(&prefix)
            .map(|item| {
                let (k, v) = item?;
                let rest = &k[prefix.len()..];
                // Parts end with an unescaped 0 (escapes are 1,1 and 1,2).
                let split = rest
                    .iter()
                    .position(|b| *b == 0)
                    .ok_or_else(|| corrupt_key(&k))?;
                let tenant = decode_part(&rest[..=split]).ok_or_else(|| corrupt_key(&k))?;
                let id = decode_part(&rest[split + 1..]).ok_or_else(|| corrupt_key(&k))?;
                let (status, task) = decode_index(&k, &v)?;
                Ok(super::RunSummary {
                    tenant,
                    task,
                    id,
                    status,
                })
            })
            .collect()
    }

    fn delete_run(&self, id: &str) -> Result<bool> {
        let _claims = lock(&self.claim_lock);
        let _serial = lock(&self.run_lock);
        let Some(run) = self.get_run(id)? else {
            return Ok(false);
        };
        if !run.status.is_terminal() {
            return Ok(false);
        }
        let mut batch = sled::Batch::default();
        batch.remove(key("run", &[id]));
        for (index_key, _) in run_indexes(&run) {
            batch.remove(index_key);
        }
        let idem_key = run
            .idempotency_key
            .as_deref()
            .map(|k| key("idem", &[&run.tenant, &run.task, k]));
        for claim in [idem_key, Some(fire_key(&run))].into_iter().flatten() {
            let owner: Option<String> = self.get(&claim)?;
            if owner.as_deref() == Some(id) {
                batch.remove(claim);
            }
        }
        for item in self.scan(&key("ev", &[id])) {
            batch.remove(item?.0);
        }
        let log_prefix = key("log", &[id]);
        let mut blobs = Vec::new();
        for item in self.scan(&log_prefix) {
            let (k, v) = item?;
            if let Some(digest) = decode::<StoredLogs>(&k, &v)?.blob() {
                let mut lref = key("lref", &[digest]);
                lref.extend_from_slice(&k[key("log", &[]).len()..]);
                batch.remove(lref);
                blobs.push(digest.to_owned());
            }
            batch.remove(k);
        }
        let _blobs = lock(&self.blob_lock);
        self.apply(batch)?;
        self.release_log_blobs(blobs)?;
        Ok(true)
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event>> {
        self.values(&key("ev", &[run_id]))
    }

    fn put_logs(&self, run_id: &str, logs: &AttemptLogs) -> Result<()> {
        let attempt = format!("{:010}", logs.attempt);
        let log_key = key("log", &[run_id, &logs.step, &attempt]);
        let json = serde_json::to_vec(logs).map_err(|e| Error::Backend(e.to_string()))?;
        let _blobs = lock(&self.blob_lock);
        let old = self.get::<StoredLogs>(&log_key)?;
        let old_blob = old.as_ref().and_then(StoredLogs::blob);
        let lref = |digest: &str| key("lref", &[digest, run_id, &logs.step, &attempt]);
        let mut batch = sled::Batch::default();
        let stored = if json.len() > LOG_INLINE_MAX {
            let digest = digest_of(&json);
            self.write_blob(&format!("{digest}.log"), &json)?;
            batch.insert(lref(&digest), Vec::new());
            StoredLogs::Blob { digest }
        } else {
            StoredLogs::Inline(logs.clone())
        };
        let released = old_blob.filter(|&d| Some(d) != stored.blob());
        if let Some(digest) = released {
            batch.remove(lref(digest));
        }
        batch.insert(log_key, encode(&stored)?);
        self.apply(batch)?;
        self.release_log_blobs(released.map(str::to_owned))
    }

    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>> {
        self.scan(&key("log", &[run_id]))
            .map(|item| item.and_then(|(k, v)| self.load_logs(&k, &v)))
            .collect()
    }

    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()> {
        let _serial = lock(&self.run_lock);
        let dead_key = key("dead", &[&dead.id]);
        let old: Option<DeadLetter> = self.get(&dead_key)?;
        let mut batch = sled::Batch::default();
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
        if from >= to {
            return Ok(Vec::new());
        }
        let lo = usage_key(tenant, from, "");
        let hi = key("use", &[tenant, &hour_part(to)]);
        self.db
            .range(lo..hi)
            .map(|item| {
                let (k, v) = item.map_err(sled_error)?;
                decode(&k, &v)
            })
            .collect()
    }

    fn kv(&self) -> Arc<dyn super::kv::KvStore> {
        self.kv.clone()
    }

    fn secrets(&self) -> Arc<dyn super::secrets::SecretStore> {
        self.secrets.clone()
    }

    fn size_on_disk(&self) -> u64 {
        let db = self.db.size_on_disk().unwrap_or(0);
        let blobs = fs::read_dir(&self.blobs)
            .map(|dir| {
                dir.filter_map(|entry| entry.ok()?.metadata().ok())
                    .map(|meta| meta.len())
                    .sum::<u64>()
            })
            .unwrap_or(0);
        db + blobs
    }
}

impl SledStore {
    /// Adds `events` for `run_id` to `batch`, each under a fresh sequence number.
    fn add_events(&self, batch: &mut sled::Batch, run_id: &str, events: &[Event]) -> Result<()> {
        events
            .iter()
            .try_for_each(|event| self.add_event(batch, run_id, encode(event)?))
    }

    /// Adds one encoded event for `run_id` to `batch`.
    fn add_event(&self, batch: &mut sled::Batch, run_id: &str, event: Vec<u8>) -> Result<()> {
        let seq = self.db.generate_id().map_err(sled_error)?;
        batch.insert(key("ev", &[run_id, &format!("{seq:020}")]), event);
        Ok(())
    }

    /// The stored run at `run_key`, or the run that holds one of `claims`.
    fn claimed_by(
        &self,
        run_key: &[u8],
        claims: [&Option<Vec<u8>>; 2],
    ) -> Result<Option<RunRecord>> {
        if let Some(existing) = self.get_run_at(run_key)? {
            return Ok(Some(existing));
        }
        for claim in claims.into_iter().flatten() {
            let owner: Option<String> = self.get(claim)?;
            // A claim whose run is gone (it cannot be, delete_run removes
            // both) is treated as free rather than blocking new runs.
            if let Some(existing) = owner.map(|id| self.get_run(&id)).transpose()?.flatten() {
                return Ok(Some(existing));
            }
        }
        Ok(None)
    }

    /// Adds the replacement of `run` (record and changed indexes) to
    /// `batch` (`record`: the run, encoded); false if the run is not stored.
    /// Callers hold `run_lock`.
    fn run_changes(
        &self,
        batch: &mut sled::Batch,
        run: &RunRecord,
        record: Vec<u8>,
    ) -> Result<bool> {
        // The small index entry says whether the indexes must change; reading
        // and decoding the whole old record (all its steps) on every write
        // cost ~100 µs for a large run, most of a write's time.
        let ra = key("ra", &[&run.id]);
        let Some(entry) = self.db.get(&ra).map_err(sled_error)? else {
            return Ok(false);
        };
        let (old_status, old_task) = decode_index(&ra, &entry)?;
        let same_tenant = self
            .db
            .contains_key(key("rt", &[&run.tenant, &run.id]))
            .map_err(sled_error)?;
        let unchanged = same_tenant && old_task == run.task && old_status == run.status;
        batch.insert(key("run", &[&run.id]), record);
        if !unchanged {
            // Same tenant: the old entries follow from the index entry alone;
            // otherwise read the old record to find them.
            let old_indexes = if same_tenant {
                indexes_of(&run.id, &run.tenant, &old_task, old_status)
            } else {
                let Some(old) = self.get_run_at(&key("run", &[&run.id]))? else {
                    return Ok(false);
                };
                run_indexes(&old)
            };
            for (index_key, _) in old_indexes {
                batch.remove(index_key);
            }
            for (index_key, value) in run_indexes(run) {
                batch.insert(index_key, value);
            }
        }
        Ok(true)
    }

    /// Adds `usage` to the stored hourly buckets, in `batch` (read-add-write:
    /// callers hold `run_lock`).
    fn usage_changes(&self, batch: &mut sled::Batch, usage: &[UsageBucket]) -> Result<()> {
        let mut merged: std::collections::BTreeMap<Vec<u8>, UsageBucket> = Default::default();
        for u in usage {
            let k = usage_key(&u.tenant, u.hour, &u.task);
            if let Some(b) = merged.get_mut(&k) {
                b.add(u);
                continue;
            }
            let mut bucket = self.get::<UsageBucket>(&k)?.unwrap_or_else(|| UsageBucket {
                outcomes: Default::default(),
                fuel: 0,
                attempts: 0,
                wall_ms: 0.0,
                ..u.clone()
            });
            bucket.add(u);
            merged.insert(k, bucket);
        }
        for (k, bucket) in merged {
            batch.insert(k, encode(&bucket)?);
        }
        Ok(())
    }
}

// --- keys -----------------------------------------------------------------

/// Encodes `kind` and `parts` as one key. Each part is written with bytes
/// 0x00 and 0x01 escaped (as 0x01 0x01 and 0x01 0x02) and ends with 0x00.
/// No encoded part contains 0x00, so a prefix of whole parts selects exactly
/// the keys below it; and since 0x00 sorts before any encoded byte, keys sort
/// like their parts compared as strings (`a` < `a.b` < `b`).
fn key(kind: &str, parts: &[&str]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(kind.len() + 1 + parts.iter().map(|p| p.len() + 1).sum::<usize>());
    push_part(&mut out, kind);
    for part in parts {
        push_part(&mut out, part);
    }
    out
}

/// Hours as fixed-width text so keys sort by time (instants before 1970
/// are clamped: usage is never recorded for them).
fn hour_part(hour: Millis) -> String {
    format!("{:020}", hour.max(0))
}

fn usage_key(tenant: &str, hour: Millis, task: &str) -> Vec<u8> {
    key("use", &[tenant, &hour_part(hour), task])
}

fn push_part(out: &mut Vec<u8>, part: &str) {
    for &b in part.as_bytes() {
        match b {
            0 => out.extend_from_slice(&[1, 1]),
            1 => out.extend_from_slice(&[1, 2]),
            b => out.push(b),
        }
    }
    out.push(0);
}

/// Decodes the single part that `bytes` holds (the rest of a key after a prefix).
fn decode_part(bytes: &[u8]) -> Option<String> {
    let (&0, body) = bytes.split_last()? else {
        return None;
    };
    let mut out = Vec::with_capacity(body.len());
    let mut it = body.iter();
    while let Some(&b) = it.next() {
        out.push(match b {
            0 => return None,
            1 => match it.next()? {
                1 => 0,
                2 => 1,
                _ => return None,
            },
            b => b,
        });
    }
    String::from_utf8(out).ok()
}

/// A key made readable for messages: parts joined by `/`.
fn show_key(key: &[u8]) -> String {
    let text = String::from_utf8_lossy(key);
    text.trim_end_matches('\0').replace('\0', "/")
}

fn fire_key(run: &RunRecord) -> Vec<u8> {
    let instant = run.scheduled_for.to_string();
    key("fire", &[&run.tenant, &run.task, &instant])
}

/// The index entries of a run: `ra`, `rt`, `rk` (value: status byte and task
/// name, so listing filters without reading records) and `act` while active.
fn run_indexes(run: &RunRecord) -> Vec<(Vec<u8>, Vec<u8>)> {
    indexes_of(&run.id, &run.tenant, &run.task, run.status)
}

/// The index entries of a run with these fields.
fn indexes_of(id: &str, tenant: &str, task: &str, status: RunStatus) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut value = vec![status_code(status)];
    value.extend_from_slice(task.as_bytes());
    let mut out = vec![
        (key("ra", &[id]), value.clone()),
        (key("rt", &[tenant, id]), value.clone()),
        (key("rk", &[tenant, task, id]), value),
    ];
    if !status.is_terminal() {
        out.push((key("act", &[id]), Vec::new()));
    }
    out
}

fn status_code(status: RunStatus) -> u8 {
    match status {
        RunStatus::Queued => 0,
        RunStatus::Running => 1,
        RunStatus::Succeeded => 2,
        RunStatus::Failed => 3,
        RunStatus::Cancelled => 4,
    }
}

fn decode_index(key: &[u8], value: &[u8]) -> Result<(RunStatus, String)> {
    let bad = || corrupt_key(key);
    let (&code, task) = value.split_first().ok_or_else(bad)?;
    let status = match code {
        0 => RunStatus::Queued,
        1 => RunStatus::Running,
        2 => RunStatus::Succeeded,
        3 => RunStatus::Failed,
        4 => RunStatus::Cancelled,
        _ => return Err(bad()),
    };
    let task = String::from_utf8(task.to_vec()).map_err(|_| bad())?;
    Ok((status, task))
}

fn corrupt_key(key: &[u8]) -> Error {
    Error::Corrupt {
        key: show_key(key),
        reason: "malformed index entry".to_owned(),
    }
}

// --- values ---------------------------------------------------------------

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut out = vec![VALUE_FORMAT];
    serde_json::to_writer(&mut out, value).map_err(|e| Error::Backend(e.to_string()))?;
    Ok(out)
}

fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T> {
    let corrupt = |reason: String| Error::Corrupt {
        key: show_key(key),
        reason,
    };
    match bytes.split_first() {
        Some((&VALUE_FORMAT, json)) => {
            serde_json::from_slice(json).map_err(|e| corrupt(e.to_string()))
        }
        Some((&format, _)) if format > VALUE_FORMAT => Err(corrupt(format!(
            "written by a newer ax (value format {format}; this build reads {VALUE_FORMAT})"
        ))),
        _ => Err(corrupt(
            "not a stored value (unknown format byte)".to_owned(),
        )),
    }
}

fn newer_record(key: &[u8], format: u32) -> Error {
    Error::Corrupt {
        key: show_key(key),
        reason: format!(
            "written by a newer ax (record format {format}; this build reads {RECORD_FORMAT})"
        ),
    }
}

fn sled_error(e: sled::Error) -> Error {
    match e {
        sled::Error::Io(e) => Error::Io(e),
        sled::Error::Corruption { at, .. } => Error::Corrupt {
            key: format!("sled log at {at:?}"),
            reason: "the database is damaged".to_owned(),
        },
        other => Error::Backend(other.to_string()),
    }
}

// --- opening --------------------------------------------------------------

fn parse_format(text: &str) -> Result<u32, String> {
    text.parse()
        .map_err(|_| format!("unreadable store format `{text}`"))
}

fn check_format(format: u32) -> Result<(), String> {
    if format > STORE_FORMAT {
        return Err(format!(
            "it was written by a newer ax (store format {format}; this build reads up to \
             {STORE_FORMAT})"
        ));
    }
    Ok(())
}

/// Opens sled and reads every entry once, so damage shows now rather than
/// as a failure in the middle of serving.
///
/// sled 0.34 panics on some damaged files instead of returning an error
/// (measured: overwriting 5 KB at various offsets of `db/db` panicked in
/// `open`). As a last resort the open and the check run under
/// `catch_unwind`; the panic message still reaches the panic hook (stderr).
fn open_sled(path: &Path) -> Result<sled::Db, String> {
    let opened = catch_unwind(AssertUnwindSafe(|| -> Result<sled::Db, String> {
        let db = sled::Config::new().path(path).open().map_err(|e| match e {
            sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
                "it is in use by another process (or another store in this process)".to_owned()
            }
            other => format!("sled cannot open it: {other}"),
        })?;
        for item in db.iter() {
            item.map_err(|e| format!("reading the database failed: {e}"))?;
        }
        Ok(db)
    }));
    match opened {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!("sled failed on damaged files: {what}"))
        }
    }
}

// --- files ----------------------------------------------------------------

/// Writes `bytes` to `path` so that `path` holds either nothing or all of
/// them, even across a crash: write `tmp`, fsync it, rename it over `path`,
/// fsync the directory (which makes the rename itself durable).
fn write_atomically(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let result = (|| {
        let mut file = File::create(tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(tmp);
    }
    result
}

fn remove_file_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Removes temporary files a crash left in `blobs/` (best effort).
fn remove_stale_tmp_files(blobs: &Path) {
    let Ok(dir) = fs::read_dir(blobs) else {
        return;
    };
    for entry in dir.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether `s` can name a blob: 64 lower-case hex digits (anything else could
/// escape the blobs folder or never match a digest).
fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data are plain flags or `()`; a panic elsewhere while
    // holding the lock cannot leave them half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    //! Behaviour only the disk store has: reopening, damage, locking, format
    //! checks, blob files, group commit. Shared behaviour is in `conformance`.

    use std::io::{Seek, SeekFrom};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::model::{StepRunRecord, StepStatus, TriggerKind};

    fn run(id: &str, status: RunStatus) -> RunRecord {
        RunRecord {
            format: RECORD_FORMAT,
            id: id.to_owned(),
            tenant: "t1".to_owned(),
            task: "a".to_owned(),
            spec: json!({"steps": [{"name": "s1"}]}),
            status,
            reason: None,
            priority: 5,
            trigger: TriggerKind::Cron,
            scheduled_for: 60_000,
            created_at: 60_001,
            started_at: None,
            finished_at: None,
            input: json!({}),
            idempotency_key: None,
            steps: vec![StepRunRecord {
                name: "s1".to_owned(),
                status: StepStatus::Queued,
                input: Some(json!({"payload": "x".repeat(100)})),
                output: None,
                error: None,
                attempts: Vec::new(),
                next_attempt_at: None,
                lost_attempts: 0,
                round_start: 0,
            }],
        }
    }

    fn event(run_id: &str, to: &str) -> Event {
        Event {
            run_id: run_id.to_owned(),
            step: None,
            attempt: None,
            from: None,
            to: to.to_owned(),
            at: 1,
            reason: "test".to_owned(),
            actor: "scheduler".to_owned(),
        }
    }

    fn logs(attempt: u32, stdout: String) -> AttemptLogs {
        AttemptLogs {
            step: "s1".to_owned(),
            attempt,
            stdout,
            ..AttemptLogs::default()
        }
    }

    fn unusable(result: Result<SledStore>) -> String {
        match result {
            Err(e @ Error::Unusable { .. }) => e.to_string(),
            Err(other) => panic!("expected Unusable, got {other:?}"),
            Ok(_) => panic!("expected Unusable, the store opened"),
        }
    }

    fn files_under(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(files_under(&path));
            } else {
                out.push(path);
            }
        }
        out
    }

    /// A store with a few hundred runs, flushed and closed.
    fn populated(dir: &Path) {
        let store = SledStore::open(dir).unwrap();
        for n in 0..300 {
            let r = run(&format!("r{n:06}"), RunStatus::Queued);
            store
                .insert_run(&r, true, None, &[event(&r.id, "queued")])
                .unwrap();
        }
    }

    #[test]
    fn everything_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let digest;
        {
            let store = SledStore::open(dir.path()).unwrap();
            let r = run("r1", RunStatus::Queued);
            store
                .insert_run(&r, true, None, &[event("r1", "queued")])
                .unwrap();
            store.put_meta("admin", "hash").unwrap();
            store.put_logs("r1", &logs(1, "z".repeat(50_000))).unwrap();
            digest = store.put_blob(b"component").unwrap();
        }
        let store = SledStore::open(dir.path()).unwrap();
        let mut r = store.get_run("r1").unwrap().unwrap();
        assert_eq!(store.active_runs().unwrap(), [r.clone()]);
        r.status = RunStatus::Running;
        store.update_run(&r, &[event("r1", "running")]).unwrap();
        let tos: Vec<_> = store
            .events("r1")
            .unwrap()
            .into_iter()
            .map(|e| e.to)
            .collect();
        assert_eq!(
            tos,
            ["queued", "running"],
            "event order continues across a reopen"
        );
        assert_eq!(store.get_meta("admin").unwrap().as_deref(), Some("hash"));
        assert_eq!(store.logs("r1").unwrap()[0].stdout.len(), 50_000);
        assert_eq!(
            store.get_blob(&digest).unwrap().as_deref(),
            Some(&b"component"[..])
        );
        // The fire key survived too.
        let mut twin = run("r2", RunStatus::Queued);
        twin.scheduled_for = r.scheduled_for;
        assert!(matches!(
            store.insert_run(&twin, true, None, &[]).unwrap(),
            Insert::Existing(_)
        ));
    }

    #[test]
    fn a_second_open_of_a_store_in_use_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = SledStore::open(dir.path()).unwrap();
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("in use by another process"), "{message}");
        assert!(message.contains("Stop any other ax process"), "{message}");
    }

    #[test]
    fn garbage_over_every_db_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        populated(dir.path());
        for file in files_under(&dir.path().join("db")) {
            let len = fs::metadata(&file).unwrap().len().max(64) as usize;
            let garbage: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
            fs::write(&file, garbage).unwrap();
        }
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("restore it from a backup"), "{message}");
    }

    #[test]
    fn a_garbled_log_that_sled_reads_as_empty_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        populated(dir.path());
        // sled 0.34 opens a database whose log file is all garbage as an
        // empty database (measured); the format file tells us it was not.
        let log = dir.path().join("db").join("db");
        let len = fs::metadata(&log).unwrap().len() as usize;
        fs::write(&log, vec![0x5a; len]).unwrap();
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("lost its contents"), "{message}");
    }

    #[test]
    fn damaged_log_segments_never_panic_out_of_open() {
        for offset in [0u64, 100, 4096, 100_000] {
            let dir = tempfile::tempdir().unwrap();
            populated(dir.path());
            let mut file = fs::OpenOptions::new()
                .write(true)
                .open(dir.path().join("db").join("db"))
                .unwrap();
            file.seek(SeekFrom::Start(offset)).unwrap();
            let garbage: Vec<u8> = (0..5_000).map(|i| (i * 131 % 251) as u8).collect();
            file.write_all(&garbage).unwrap();
            drop(file);
            // sled may refuse, panic (caught) or truncate; the outcome must be
            // an error or a store that answers without panicking.
            match SledStore::open(dir.path()) {
                Err(Error::Unusable { .. }) => {}
                Err(other) => panic!("offset {offset}: expected Unusable, got {other:?}"),
                Ok(store) => {
                    let _ = store.active_runs();
                }
            }
        }
    }

    #[test]
    fn a_newer_store_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(SledStore::open(dir.path()).unwrap());
        assert_eq!(
            fs::read_to_string(dir.path().join(FORMAT_FILE)).unwrap(),
            "1\n"
        );
        fs::write(dir.path().join(FORMAT_FILE), "2\n").unwrap();
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("newer ax"), "{message}");

        // The marker inside the database is checked as well.
        fs::write(dir.path().join(FORMAT_FILE), "1\n").unwrap();
        {
            let db = sled::open(dir.path().join("db")).unwrap();
            db.insert(key("sys", &["format"]), encode("7").unwrap())
                .unwrap();
            db.flush().unwrap();
        }
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("store format 7"), "{message}");
    }

    #[test]
    fn a_foreign_sled_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path().join("db")).unwrap();
            db.insert("hello", "world").unwrap();
            db.flush().unwrap();
        }
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("not an ax store"), "{message}");
    }

    #[test]
    fn values_of_an_unknown_format_are_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let mut value = encode("v").unwrap();
        value[0] = 2;
        store.db.insert(key("meta", &["m"]), value).unwrap();
        store
            .db
            .insert(key("meta", &["junk"]), &b"\x01{not json"[..])
            .unwrap();
        store.db.insert(key("meta", &["empty"]), &b""[..]).unwrap();
        for (name, expected) in [
            ("m", "value format 2"),
            ("junk", "invalid type"),
            ("empty", "unknown format"),
        ] {
            match store.get_meta(name) {
                Err(e @ Error::Corrupt { .. }) => {
                    assert!(e.to_string().contains(expected), "{e}");
                    assert!(e.to_string().contains(&format!("meta/{name}")), "{e}");
                }
                other => panic!("{name}: expected Corrupt, got {other:?}"),
            }
        }

        let mut newer = run("r1", RunStatus::Queued);
        newer.format = RECORD_FORMAT + 1;
        store.insert_run(&newer, false, None, &[]).unwrap();
        match store.get_run("r1") {
            Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("newer ax"), "{reason}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn blobs_are_files_named_by_digest_and_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let digest = store.put_blob(b"\0asm\x01\0\0\0").unwrap();
        let path = dir.path().join("blobs").join(format!("{digest}.wasm"));
        assert_eq!(fs::read(&path).unwrap(), b"\0asm\x01\0\0\0");
        let leftovers: Vec<_> = files_under(&dir.path().join("blobs"));
        assert_eq!(
            leftovers,
            std::slice::from_ref(&path),
            "no temporary file is left behind"
        );
        fs::write(&path, b"tampered").unwrap();
        assert!(matches!(
            store.get_blob(&digest),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn large_logs_live_in_shared_blobs_removed_with_their_last_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let log_blobs = || -> Vec<PathBuf> {
            let all = files_under(&dir.path().join("blobs"));
            all.into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .collect()
        };
        let big = "same output\n".repeat(2_000);
        for id in ["r1", "r2"] {
            let r = run(id, RunStatus::Succeeded);
            store.insert_run(&r, false, None, &[]).unwrap();
            store.put_logs(id, &logs(1, big.clone())).unwrap();
            store.put_logs(id, &logs(2, "small".to_owned())).unwrap();
        }
        assert_eq!(log_blobs().len(), 1, "identical logs share one blob");
        assert!(store.delete_run("r1").unwrap());
        assert_eq!(log_blobs().len(), 1, "r2 still references it");
        assert_eq!(store.logs("r2").unwrap()[0].stdout, big);
        // Replacing the large logs with small ones releases the blob.
        store
            .put_logs("r2", &logs(1, "now small".to_owned()))
            .unwrap();
        assert!(log_blobs().is_empty());
        store.put_logs("r2", &logs(1, big.clone())).unwrap();
        assert_eq!(log_blobs().len(), 1);
        assert!(store.delete_run("r2").unwrap());
        assert!(log_blobs().is_empty());
    }

    #[test]
    fn size_on_disk_counts_the_database_and_the_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let before = store.size_on_disk();
        assert!(before > 0);
        store.put_blob(&vec![7; 1 << 20]).unwrap();
        assert!(store.size_on_disk() >= before + (1 << 20));
    }

    #[test]
    fn a_ticket_resolves_once_the_writes_are_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            store.put_meta("k", "v").unwrap();
            let ticket = store.sync_ticket();
            tokio::time::timeout(Duration::from_secs(10), ticket.wait())
                .await
                .expect("the ticket resolves")
                .unwrap();
            let status = store.sync.status.borrow().clone();
            assert!(status.flushed >= 1, "{status:?}");
        });
    }

    #[test]
    fn many_concurrent_tickets_all_resolve_promptly() {
        // The case that hangs with sled's `flush_async` (sled#1308): many
        // tasks waiting for durability at once on a small runtime.
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path()).unwrap());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let started = Instant::now();
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..64 {
                let store = Arc::clone(&store);
                tasks.spawn(async move {
                    for n in 0..5 {
                        let r = run(&format!("r{t:03}{n:03}"), RunStatus::Queued);
                        store
                            .insert_run(&r, false, None, &[event(&r.id, "queued")])
                            .unwrap();
                        store.sync_ticket().wait().await.unwrap();
                    }
                });
            }
            let all = async {
                while let Some(done) = tasks.join_next().await {
                    done.unwrap();
                }
            };
            tokio::time::timeout(Duration::from_secs(20), all)
                .await
                .expect("every ticket resolves");
        });
        assert_eq!(store.active_runs().unwrap().len(), 320);
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn dropping_the_store_stops_the_flusher_and_releases_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..3 {
            let store = SledStore::open(dir.path()).unwrap();
            store.put_meta("round", &round.to_string()).unwrap();
            let flusher = store.flusher.as_ref().unwrap().thread().clone();
            assert_eq!(flusher.name(), Some("ax-store-flush"));
            drop(store);
            // Reopening at once works only if the flusher's database handle is gone.
        }
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(store.get_meta("round").unwrap().as_deref(), Some("2"));
    }

    /// Throughput of the run write path with durability: 8 tasks, each
    /// inserting a run (awaiting a sync ticket) then updating it twice.
    /// Not a test: run by hand with
    /// `cargo test --release -- --ignored --nocapture durable_run_throughput`.
    #[test]
    #[ignore]
    fn durable_run_throughput() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path()).unwrap());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let per_task = 2_500;
        let started = Instant::now();
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..8 {
                let store = Arc::clone(&store);
                tasks.spawn(async move {
                    for n in 0..per_task {
                        let mut r = run(&format!("r{t:03}{n:08}"), RunStatus::Queued);
                        store
                            .insert_run(&r, false, None, &[event(&r.id, "queued")])
                            .unwrap();
                        store.sync_ticket().wait().await.unwrap();
                        r.status = RunStatus::Running;
                        store.update_run(&r, &[event(&r.id, "running")]).unwrap();
                        r.status = RunStatus::Succeeded;
                        store.update_run(&r, &[event(&r.id, "succeeded")]).unwrap();
                    }
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        });
        let elapsed = started.elapsed();
        let runs = 8 * per_task;
        println!(
            "{runs} runs (insert + ticket + 2 updates) in {elapsed:?}: {:.0} runs/s",
            runs as f64 / elapsed.as_secs_f64()
        );
    }
}
