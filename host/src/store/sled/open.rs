//! Opening a data directory: the format markers (`store-format` beside the
//! database and `sys/format` inside it), refusing a store that is damaged,
//! locked, foreign or newer, and reading every entry once on a thread of its
//! own ([`Verify`]) so that damage shows soon after start rather than in the
//! middle of serving.
//!
//! `ax serve` lets that read begin once the scheduler has recovered
//! ([`SledStore::open_unchecked`]): the two share sled's page cache.
//!
//! The full read used to run before the store was handed out. On a large
//! store it was most of a restart (issue 14): recovery itself reads only the
//! running attempts, the queue heads and the fire window. It now runs beside
//! the server: what it finds is logged with the restore hint, turns `/readyz`
//! to 503 and the `ax_store_damaged` gauge to 1
//! ([`crate::store::Operations::damage`]).

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::blobs::{remove_stale_tmp_files, write_atomically};
use super::engine::{Db, EngineError, EngineKind};
use super::keys::{decode, encode, key};
use super::{SledStore, flush};
use crate::store::rules::MAX_SCAN;
use crate::store::{Error, Result, kv, secrets};

/// Format of the store as a whole (key layout, value encoding). A store
/// written by a newer ax is refused rather than misread.
/// 2: queue counters (`qn`, `counts.rs`), which a store of format 1 gets
/// at open; an older ax would leave them wrong, so it refuses format 2.
/// 3: bytes of run data per tenant (`tb`, `footprint.rs`), counted at open
/// for a store of format 2; an older ax would leave them wrong, so it
/// refuses format 3.
/// 4: task definitions stored once, runs naming them (`def`, `dref`,
/// `definitions.rs`); a store of format 3 is upgraded at open, resumably.
/// 5: the step runs of a run of many steps under their own keys (`step`,
/// `steps.rs`); a store of format 3 or 4 is upgraded at open, resumably
/// (`upgrade.rs`).
/// 6: a write's events in a compact encoding (`events.rs`), which an older
/// ax cannot read; a store of format 5 and before keeps its JSON events
/// (read as they are), so the upgrade only marks it.
/// 7: inputs over 64 KiB in files of `inputs/` (`inputs.rs`), which an
/// older ax would miss; a store of format 6 keeps its chunks (read as they
/// are, moved at a run's next write), so the upgrade only marks it.
/// 8: run records, step runs (`compact.rs`) and inline logs (`logs.rs`) in
/// a compact encoding, event lists naming states by number (`events.rs`),
/// which an older ax cannot read; a store of format 7
/// and before keeps its JSON values (read as they are, compact at a run's
/// next write), so the upgrade only marks it.
/// 9: event lists storing the scheduler's reasons by pattern (`events.rs`)
/// and `rk` index entries without the task their key names (`keys.rs`),
/// which an older ax cannot read; a store of format 8 and before keeps its
/// lists and entries (read as they are), so the upgrade only marks it.
/// 10: no `ra/{id}` index entries, and `rt`/`rk` entries without a value:
/// a listing reads a run's state from its record (`runs.rs`), so a run's
/// change of state rewrites no listing entry (only `q`/`act`). An older ax
/// would list no runs across tenants and take the empty values for damage,
/// so it refuses format 10; the upgrade removes a store's `ra` entries, a
/// batch at a time, and is resumable (`runs::drop_ra`); the values of older
/// `rt`/`rk` entries are left as they are, never read.
pub const STORE_FORMAT: u32 = 10;

/// Name of the file, beside `db/`, holding the store format.
const FORMAT_FILE: &str = "store-format";

/// What an operator can do about a store that cannot be opened.
const RESTORE_HINT: &str = "Stop any other ax process using this data directory. If none is \
    running, the database is damaged: move the data directory aside and restore it from a \
    backup (plugin blobs in blobs/ are plain files checked by digest and can be copied over).";

impl SledStore {
    /// sled's page cache unless the config says otherwise (`store.cache_mb`):
    /// 64 MiB, not sled's 1 GiB. The scheduler reads the store for what is
    /// due soon and what is queued next, a working set of some MiB; a cache
    /// of 1 GiB would be most of the memory budget of a host with a million
    /// tasks (issue 14) and buys nothing once that working set fits.
    pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

    /// Opens (or creates) the store in `data_dir` with the default cache
    /// ([`Self::DEFAULT_CACHE_BYTES`]); see [`Self::open_with_cache`].
    pub fn open(data_dir: &Path) -> Result<SledStore> {
        Self::open_with_cache(data_dir, Self::DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the store in `data_dir`, sled's page cache bounded
    /// to `cache_bytes`. A damaged, locked or newer store is refused with
    /// [`Error::Unusable`], which says what to do.
    pub fn open_with_cache(data_dir: &Path, cache_bytes: u64) -> Result<SledStore> {
        let store = Self::open_unchecked(data_dir, cache_bytes)?;
        store.check_in_background();
        Ok(store)
    }

    /// Starts the read of every entry of a store opened with
    /// [`Self::open_unchecked`] (a no-op once started).
    pub fn check_in_background(&self) {
        self.verify.begin();
    }

    /// [`Self::open_with_cache`], but the read of every entry waits for
    /// [`Self::check_in_background`]. `ax serve` starts it once the
    /// scheduler has recovered: on a large store the two read beside each
    /// other through one page cache, and the read evicted what recovery
    /// needed (a restart with a million queued runs took 1.5× as long).
    pub fn open_unchecked(data_dir: &Path, cache_bytes: u64) -> Result<SledStore> {
        Self::open_unchecked_as(data_dir, cache_bytes, EngineKind::from_env())
    }

    /// Opens (or creates, on `engine`) the store in `data_dir`, checked in
    /// the background as [`Self::open_with_cache`] is.
    pub fn open_as(data_dir: &Path, engine: EngineKind) -> Result<SledStore> {
        let store = Self::open_unchecked_as(data_dir, Self::DEFAULT_CACHE_BYTES, engine)?;
        store.check_in_background();
        Ok(store)
    }

    /// [`Self::open_unchecked`], a new store created on `new` (an existing
    /// one keeps its engine).
    pub fn open_unchecked_as(
        data_dir: &Path,
        cache_bytes: u64,
        new: EngineKind,
    ) -> Result<SledStore> {
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

        let (kind, db_dir) = engine_of(data_dir, new);
        let db = open_engine(&db_dir, kind, cache_bytes).map_err(unusable)?;
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
            (None, None) if !db.is_empty().map_err(|e| unusable(e.to_string()))? => {
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
            write_format_file(&format_file, data_dir).map_err(unusable)?;
        }

        let (sync, flusher) = flush::start(&db, data_dir)?;
        // KV and secret writes count for group commit like the store's own.
        let hook: kv::WriteHook = {
            let sync = Arc::clone(&sync);
            Arc::new(move || sync.count_write())
        };
        let kv = kv::SledKv::in_db(&db, Some(hook.clone())).map_err(|e| unusable(e.to_string()))?;
        let secrets =
            secrets::SledSecrets::in_db(&db, Some(hook)).map_err(|e| unusable(e.to_string()))?;
        let (kv, secrets) = (Arc::new(kv), Arc::new(secrets));
        let verify = Verify::start(&db);
        let store = SledStore {
            kv,
            secrets,
            verify,
            db,
            dir: data_dir.to_owned(),
            blobs,
            run_lock: Mutex::new(()),
            claim_lock: Mutex::new(()),
            blob_lock: Mutex::new(()),
            counted: Mutex::default(),
            folded_at: Mutex::new(std::time::Instant::now()),
            tmp_counter: AtomicU64::new(0),
            sync,
            flusher: Some(flusher),
            scan_limit: MAX_SCAN,
            definitions: Mutex::default(),
        };
        super::schedules::build_indexes(&store)?;
        super::runs::build_queue_index(&store)?;
        super::counts::build_counts(&store)?;
        super::footprint::build_run_bytes(&store)?;
        super::upgrade::upgrade(&store)?;
        let dropped = super::runs::drop_ra(&store)?;
        if dropped > 0 {
            tracing::info!(
                entries = dropped,
                "store format 10: removed the ra run index"
            );
        }
        super::inputs::remove_orphan_inputs(&store)
            .map_err(|e| unusable(format!("cannot tidy {}/: {e}", super::inputs::INPUTS_DIR)))?;
        super::runs::build_key_expiry(
            &store,
            crate::task::retention::DEFAULT_IDEMPOTENCY_TTL.as_millis() as crate::model::Millis,
        )?;
        // Upgraded by the builds above: marked only now, so a crash in the
        // middle builds again at the next open.
        if stored.is_some_and(|f| f < STORE_FORMAT) || file_format.is_some_and(|f| f < STORE_FORMAT)
        {
            let marker = encode(&STORE_FORMAT.to_string())?;
            store
                .db
                .insert(key("sys", &["format"]), marker)
                .and_then(|_| store.db.flush())
                .map_err(|e| unusable(format!("cannot mark the upgraded database: {e}")))?;
            write_format_file(&format_file, data_dir).map_err(unusable)?;
        }
        Ok(store)
    }
}

/// What [`SledStore::check`] found (`ax store check`).
#[derive(Debug, serde::Serialize)]
pub struct Checked {
    /// The directory's store format.
    pub format: u32,
    /// This build's ([`STORE_FORMAT`]).
    pub current: u32,
    /// Entries read (every one, when the format is current; none when it
    /// is older: the directory is then not opened, since opening upgrades
    /// it).
    pub entries: usize,
    /// Runs stored.
    pub runs: usize,
    /// Task definitions stored apart (format 4).
    pub definitions: usize,
    /// Entries and bytes (key and value) by kind, the first part of a key
    /// (`run`, `ev`, `rec`, ...; docs/ARCHITECTURE.md tables them): where
    /// the store's bytes go, before sled's own overhead and compaction.
    pub kinds: std::collections::BTreeMap<String, KindSize>,
    /// The files of `inputs/` (`inputs.rs`): the run data kept outside the
    /// database.
    pub input_files: KindSize,
    /// Run records, step runs and inline logs still in the JSON of a store
    /// of format 7 or before: each turns compact when it is next written
    /// (`compact.rs`), and retention deletes the others with their runs.
    pub json_values: usize,
}

/// The entries of one kind of key and their bytes ([`Checked::kinds`]).
#[derive(Debug, Default, serde::Serialize)]
pub struct KindSize {
    pub entries: usize,
    pub bytes: u64,
}

impl SledStore {
    /// Checks the data directory `data_dir` without serving it: its format
    /// (a newer one is refused; an older one is reported, not upgraded), and
    /// for a current one every entry read, as the read after opening does
    /// (damage is [`Error::Unusable`], with the restore hint). Refused while
    /// another process holds the store.
    pub fn check(data_dir: &Path) -> Result<Checked> {
        let unusable = |reason: String| Error::Unusable {
            path: data_dir.display().to_string(),
            reason,
            hint: RESTORE_HINT.to_owned(),
        };
        let format_file = data_dir.join(FORMAT_FILE);
        let text = fs::read_to_string(&format_file).map_err(|e| {
            unusable(format!(
                "{}: {e} (not an ax data directory?)",
                format_file.display()
            ))
        })?;
        let format = parse_format(text.trim()).map_err(unusable)?;
        check_format(format).map_err(unusable)?;
        let mut checked = Checked {
            format,
            current: STORE_FORMAT,
            entries: 0,
            runs: 0,
            definitions: 0,
            kinds: Default::default(),
            input_files: KindSize::default(),
            json_values: 0,
        };
        if format < STORE_FORMAT {
            return Ok(checked);
        }
        let store = Self::open_unchecked(data_dir, Self::DEFAULT_CACHE_BYTES)?;
        let (kinds, json_values) = (&mut checked.kinds, &mut checked.json_values);
        checked.entries = read_every_entry(&store.db, &AtomicBool::new(false), |k, v| {
            let kind = k
                .split_inclusive(|&b| b == 0)
                .next()
                .and_then(super::keys::decode_part)
                .unwrap_or_else(|| "?".to_owned());
            if super::compact::older_json(&kind, v) {
                *json_values += 1;
            }
            let size = kinds.entry(kind).or_default();
            size.entries += 1;
            size.bytes += (k.len() + v.len()) as u64;
        })
        .map_err(unusable)?;
        let inputs = data_dir.join(super::inputs::INPUTS_DIR);
        checked.input_files = KindSize {
            entries: fs::read_dir(&inputs).map_or(0, |dir| dir.count()),
            bytes: super::blobs::dir_size(&inputs),
        };
        checked.runs = checked.kinds.get("run").map_or(0, |k| k.entries);
        checked.definitions = checked.kinds.get("def").map_or(0, |k| k.entries);
        Ok(checked)
    }
}

/// Writes [`STORE_FORMAT`] to `format_file` (in `data_dir`), atomically.
fn write_format_file(format_file: &Path, data_dir: &Path) -> Result<(), String> {
    write_atomically(
        format_file,
        &data_dir.join(format!(".{FORMAT_FILE}.tmp")),
        format!("{STORE_FORMAT}\n").as_bytes(),
    )
    .map_err(|e| format!("cannot write {}: {e}", format_file.display()))
}

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

/// The engine of the store in `data_dir` and its directory: `db/` for
/// sled, `fjall/` for fjall; `new` for a new store.
fn engine_of(data_dir: &Path, new: EngineKind) -> (EngineKind, std::path::PathBuf) {
    let (sled, fjall) = (data_dir.join("db"), data_dir.join("fjall"));
    let kind = if sled.exists() {
        EngineKind::Sled
    } else if fjall.exists() {
        EngineKind::Fjall
    } else {
        new
    };
    match kind {
        EngineKind::Sled => (kind, sled),
        EngineKind::Fjall => (kind, fjall),
    }
}

/// Opens the database in `path` on `kind`.
///
/// sled 0.34 panics on some damaged files instead of returning an error
/// (measured: overwriting 5 KB at various offsets of `db/db` panicked in
/// `open`). As a last resort the open runs under `catch_unwind`; the panic
/// message still reaches the panic hook (stderr).
fn open_engine(path: &Path, kind: EngineKind, cache_bytes: u64) -> Result<Db, String> {
    // sled lets go of its lock a moment after the last handle is dropped
    // (its background threads finish first; measured up to some hundred
    // ms on a loaded machine), so a store closed and opened again at once —
    // a quick restart, a test — is given a second before it is "in use".
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match try_open_engine(path, kind, cache_bytes) {
            Err(e) if e == IN_USE && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened => return opened,
        }
    }
}

/// Why [`try_open_engine`] could not open a store another handle holds.
const IN_USE: &str = "it is in use by another process (or another store in this process)";

fn try_open_engine(path: &Path, kind: EngineKind, cache_bytes: u64) -> Result<Db, String> {
    let opened = catch_unwind(AssertUnwindSafe(|| -> Result<Db, String> {
        Db::open(path, kind, cache_bytes).map_err(|e| match e {
            EngineError::InUse => IN_USE.to_owned(),
            other => format!("{} cannot open it: {other}", kind.name()),
        })
    }));
    opened.unwrap_or_else(|panic| {
        Err(format!(
            "{} failed on damaged files: {}",
            kind.name(),
            panic_text(&*panic)
        ))
    })
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Reads every entry (until `stop`), under `catch_unwind` as the open is;
/// the entries read.
fn read_every_entry(
    db: &Db,
    stop: &AtomicBool,
    mut visit: impl FnMut(&[u8], &[u8]),
) -> Result<usize, String> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut entries = 0;
        for item in db.iter() {
            let (k, v) = item.map_err(|e| format!("reading the database failed: {e}"))?;
            visit(&k, &v);
            entries += 1;
            if entries % Verify::STOP_EVERY == 0 && stop.load(Ordering::Relaxed) {
                break;
            }
        }
        Ok(entries)
    }))
    .unwrap_or_else(|panic| {
        Err(format!(
            "sled failed on damaged files: {}",
            panic_text(&*panic)
        ))
    })
}

/// The read of every entry, on its own thread from the open on, reading
/// once [`Verify::begin`] is called; stopped and joined when the store is
/// dropped (it holds a handle of the database, and the directory cannot be
/// opened again while one lives).
pub(super) struct Verify {
    stop: Arc<AtomicBool>,
    /// Set by [`Verify::begin`] (and by [`Verify::stop`], to end the wait).
    go: Arc<(Mutex<bool>, Condvar)>,
    found: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Verify {
    /// Entries read between two looks at the stop flag.
    const STOP_EVERY: usize = 1024;

    fn start(db: &Db) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let go = Arc::new((Mutex::new(false), Condvar::new()));
        let found = Arc::new(Mutex::new(None));
        let thread = {
            let (db, stop, go, found) = (db.clone(), stop.clone(), go.clone(), found.clone());
            std::thread::Builder::new()
                .name("ax-store-verify".into())
                .spawn(move || {
                    let (flag, turned) = &*go;
                    let mut started = flag.lock().unwrap_or_else(PoisonError::into_inner);
                    while !*started {
                        started = turned.wait(started).unwrap_or_else(PoisonError::into_inner);
                    }
                    drop(started);
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let started = std::time::Instant::now();
                    match read_every_entry(&db, &stop, |_, _| {}) {
                        Ok(entries) => {
                            tracing::debug!(entries, took = ?started.elapsed(), "read every entry of the store");
                        }
                        Err(reason) => {
                            tracing::error!(%reason, hint = RESTORE_HINT, "the store is damaged");
                            *found.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
                        }
                    }
                })
                .inspect_err(|e| tracing::warn!(error = %e, "no thread to read the store with; not checked"))
                .ok()
        };
        Self {
            stop,
            go,
            found,
            thread,
        }
    }

    /// Lets the read start (again: a no-op).
    pub(super) fn begin(&self) {
        let (flag, turned) = &*self.go;
        *flag.lock().unwrap_or_else(PoisonError::into_inner) = true;
        turned.notify_all();
    }

    /// What the read found wrong, with the restore hint, if anything.
    pub(super) fn damage(&self) -> Option<String> {
        self.found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|reason| format!("{reason}. {RESTORE_HINT}"))
    }

    /// Waits for the read to end (tests).
    #[cfg(test)]
    pub(super) fn wait(&self) {
        while self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Stops the read and joins its thread.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.begin();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::{Seek, SeekFrom, Write};
    use std::path::Path;

    use super::super::fixtures::{event, files_under, logs, run};
    use super::*;
    use crate::model::RunStatus;
    use crate::store::Insert;
    use crate::store::prelude::*;

    fn unusable(result: Result<SledStore>) -> String {
        match result {
            Err(e @ Error::Unusable { .. }) => e.to_string(),
            Err(other) => panic!("expected Unusable, got {other:?}"),
            Ok(_) => panic!("expected Unusable, the store opened"),
        }
    }

    /// Marks the reopened `store`'s run `r` (inserted queued, with a
    /// `queued` event, beside meta `admin` = `hash`) running: its events
    /// keep their order across the reopen, and the meta is there.
    fn goes_on_after_a_reopen(store: &SledStore, r: &mut crate::model::RunRecord) {
        r.status = RunStatus::Running;
        store.update_run(r, &[event("r1", "running")]).unwrap();
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
    }

    /// A store on sled with a few hundred runs, flushed and closed (the
    /// damage tests below garble sled's own files).
    fn populated(dir: &Path) {
        let store = SledStore::open_as(dir, EngineKind::Sled).unwrap();
        assert_eq!(store.health().kind, crate::store::StoreKind::Sled);
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
            store
                .put_logs("t1", "r1", &logs(1, "z".repeat(50_000)))
                .unwrap();
            digest = store.put_blob(b"component").unwrap();
        }
        let store = SledStore::open(dir.path()).unwrap();
        let mut r = store.get_run("r1").unwrap().unwrap();
        assert_eq!(store.active_runs().unwrap(), [r.clone()]);
        goes_on_after_a_reopen(&store, &mut r);
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

    /// The read of every entry runs beside the open, finds nothing on a
    /// sound store, and is stopped and joined when the store is dropped (the
    /// directory opens again at once), begun or not.
    #[test]
    fn a_sound_store_is_read_through_beside_the_open() {
        let dir = tempfile::tempdir().unwrap();
        populated(dir.path());
        let store = SledStore::open(dir.path()).unwrap();
        store.verify.wait();
        assert_eq!(store.damage(), None);
        let runs = store.active_runs().unwrap();
        assert!(!runs.is_empty());
        drop(store);
        // Dropped in the middle of its read, too.
        let store = SledStore::open(dir.path()).unwrap();
        drop(store);
        let again = SledStore::open(dir.path()).unwrap();
        assert_eq!(again.active_runs().unwrap(), runs);
        drop(again);

        // Opened unchecked (as `ax serve` does), the read waits to be
        // started; a store dropped before that closes at once.
        let store = SledStore::open_unchecked(dir.path(), SledStore::DEFAULT_CACHE_BYTES).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            store
                .verify
                .thread
                .as_ref()
                .is_some_and(|t| !t.is_finished())
        );
        store.check_in_background();
        store.verify.wait();
        assert_eq!(store.damage(), None);
        drop(store);
        drop(SledStore::open_unchecked(dir.path(), SledStore::DEFAULT_CACHE_BYTES).unwrap());
        assert_eq!(
            SledStore::open(dir.path()).unwrap().active_runs().unwrap(),
            runs
        );
    }

    /// On fjall as on sled: what was written survives a reopen, ids go on
    /// past those given before it (events keep their order), a second open
    /// is refused while the store is in use, and an existing store keeps
    /// its engine whatever a new one would get.
    #[test]
    fn a_fjall_store_reopens_on_fjall_and_refuses_a_second_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open_as(dir.path(), EngineKind::Fjall).unwrap();
            assert_eq!(store.engine(), EngineKind::Fjall);
            let r = run("r1", RunStatus::Queued);
            store
                .insert_run(&r, true, None, &[event("r1", "queued")])
                .unwrap();
            store.put_meta("admin", "hash").unwrap();
            let message = unusable(SledStore::open_as(dir.path(), EngineKind::Fjall));
            assert!(message.contains("in use by another process"), "{message}");
        }
        assert!(dir.path().join("fjall").is_dir() && !dir.path().join("db").exists());
        let store = SledStore::open_as(dir.path(), EngineKind::Sled).unwrap();
        assert_eq!(store.engine(), EngineKind::Fjall);
        // `/readyz`, `/metrics` and `ax status` name the engine.
        assert_eq!(store.health().kind, crate::store::StoreKind::Fjall);
        let mut r = store.get_run("r1").unwrap().unwrap();
        goes_on_after_a_reopen(&store, &mut r);
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
            // an error, or a store that answers without panicking and whose
            // read of every entry ends, naming what to do if it found damage.
            match SledStore::open(dir.path()) {
                Err(Error::Unusable { .. }) => {}
                Err(other) => panic!("offset {offset}: expected Unusable, got {other:?}"),
                Ok(store) => {
                    let _ = store.active_runs();
                    store.verify.wait();
                    if let Some(damage) = store.damage() {
                        assert!(damage.contains("restore it from a backup"), "{damage}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_newer_store_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(SledStore::open_as(dir.path(), EngineKind::Sled).unwrap());
        assert_eq!(
            fs::read_to_string(dir.path().join(FORMAT_FILE)).unwrap(),
            format!("{STORE_FORMAT}\n")
        );
        fs::write(
            dir.path().join(FORMAT_FILE),
            format!("{}\n", STORE_FORMAT + 1),
        )
        .unwrap();
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("newer ax"), "{message}");

        // The marker inside the database is checked as well.
        fs::write(dir.path().join(FORMAT_FILE), "1\n").unwrap();
        {
            let db = Db::open_default(&dir.path().join("db")).unwrap();
            let newer = (STORE_FORMAT + 1).to_string();
            db.insert(key("sys", &["format"]), encode(&newer).unwrap())
                .unwrap();
            db.flush().unwrap();
        }
        let message = unusable(SledStore::open(dir.path()));
        let newer = format!("store format {}", STORE_FORMAT + 1);
        assert!(message.contains(&newer), "{message}");
    }

    #[test]
    fn a_foreign_sled_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open_default(&dir.path().join("db")).unwrap();
            db.insert("hello", "world").unwrap();
            db.flush().unwrap();
        }
        let message = unusable(SledStore::open(dir.path()));
        assert!(message.contains("not an ax store"), "{message}");
    }
}
