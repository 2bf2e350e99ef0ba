//! The ordered key-value engine under the embedded store: the narrow part of
//! an engine the store's logic uses, and nothing more. A [`Db`] is a set of
//! named [`Tree`]s (the store's keys in the default one; the plugins' KV and
//! the secrets in their own), a monotonic id generator, a flush and a size.
//! A [`Tree`] maps byte keys to byte [`Value`]s in key order: point reads and
//! writes, prefix and range scans in both directions ([`Iter`]), and an
//! atomic [`Batch`] of inserts and removes.
//!
//! Two engines ([`EngineKind`]): sled 0.34, the default, and fjall 2 (an
//! LSM tree whose atomic batches go to a journal). The seam exists because
//! sled's atomic write is most of a run's cost: every batch rolls sled's log
//! buffer twice through a thread pool that wakes seven threads
//! (docs/PERFORMANCE.md, *What the embedded engine costs per run*), and
//! fjall measured a third of that CPU per run. Nothing outside this module
//! names either engine's types: the store's logic and its tests run the
//! same on both.
//!
//! fjall, as used here: one keyspace in `fjall/lsm`, a partition per tree,
//! the journal persisted (`fdatasync`) by [`Tree::flush`] only (the group
//! commit, `flush.rs`), memtables and journal bounded
//! ([`FJALL_MEMTABLE`], [`FJALL_WRITE_BUFFER`], [`FJALL_JOURNAL`]: what a
//! restart replays, and why they are set as they are), the
//! directory locked by `fjall/ax.lock` (fjall does not lock it), ids
//! reserved durably a block at a time in a partition of their own.

use std::ops::{Bound, Deref, RangeBounds};
use std::sync::Arc;

/// An engine failure.
#[derive(Debug)]
pub(crate) enum EngineError {
    /// The operating system refused a read or write.
    Io(std::io::Error),
    /// The engine found its files damaged, at `at`.
    Corruption { at: String },
    /// Another handle (another process, or a store in this one) holds the
    /// database's lock.
    InUse,
    /// Anything else, in the engine's words.
    Other(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Corruption { at } => write!(f, "the database is damaged at {at}"),
            Self::InUse => f.write_str("the database is in use"),
            Self::Other(e) => f.write_str(e),
        }
    }
}

impl From<sled::Error> for EngineError {
    fn from(e: sled::Error) -> Self {
        match e {
            // sled says so only in its message.
            sled::Error::Io(e) if e.to_string().contains("could not acquire lock") => Self::InUse,
            sled::Error::Io(e) => Self::Io(e),
            sled::Error::Corruption { at, .. } => Self::Corruption {
                at: format!("sled log at {at:?}"),
            },
            other => Self::Other(other.to_string()),
        }
    }
}

impl From<fjall::Error> for EngineError {
    fn from(e: fjall::Error) -> Self {
        match e {
            fjall::Error::Io(e) => Self::Io(e),
            fjall::Error::JournalRecovery(e) => Self::Corruption {
                at: format!("fjall journal: {e:?}"),
            },
            other => Self::Other(format!("fjall: {other}")),
        }
    }
}

pub(crate) type EngineResult<T> = std::result::Result<T, EngineError>;

impl EngineKind {
    /// The engine of a new store unless the configuration names one:
    /// `AX_STORE_ENGINE` (`sled` or `fjall`), else sled.
    pub fn from_env() -> Self {
        match std::env::var("AX_STORE_ENGINE").as_deref() {
            Ok("fjall") => Self::Fjall,
            _ => Self::Sled,
        }
    }

    /// Its name, as the configuration spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sled => "sled",
            Self::Fjall => "fjall",
        }
    }
}

/// Which engine a store's database is on (`store.engine`). A new store
/// gets the configured one; an existing store keeps its own, whatever the
/// configuration says (`ax store export` and `import` move a store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// sled 0.34: a B-tree over a log, atomic batches by rolling the log.
    Sled,
    /// fjall 2: an LSM tree, atomic batches in a journal.
    Fjall,
}

/// A stored value: shared, cheap to clone, read as bytes.
#[derive(Clone)]
pub(crate) enum Value {
    Sled(sled::IVec),
    Fjall(fjall::Slice),
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Sled(v) => v,
            Self::Fjall(v) => v,
        }
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Value {}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        sled::IVec::from(&**self).fmt(f)
    }
}

impl From<Value> for Vec<u8> {
    fn from(value: Value) -> Self {
        value.to_vec()
    }
}

impl From<&[u8]> for Value {
    fn from(bytes: &[u8]) -> Self {
        Self::Sled(bytes.into())
    }
}

/// Inserts and removes (`None`) applied together by [`Tree::apply_batch`]:
/// all of them or, after a crash, none.
#[derive(Default)]
pub(crate) struct Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>);

impl Batch {
    pub(crate) fn insert(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.0.push((key.into(), Some(value.into())));
    }

    pub(crate) fn remove(&mut self, key: impl Into<Vec<u8>>) {
        self.0.push((key.into(), None));
    }
}

type Entries = Box<dyn DoubleEndedIterator<Item = fjall::Result<fjall::KvPair>>>;

/// Entries of a [`Tree`] in key order, from either end. Lives on the stack
/// for one scan: sled's iterator is kept unboxed (no allocation per scan).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Iter {
    Sled(sled::Iter),
    Fjall(Entries),
}

fn sled_entry(item: sled::Result<(sled::IVec, sled::IVec)>) -> EngineResult<(Value, Value)> {
    let (k, v) = item?;
    Ok((Value::Sled(k), Value::Sled(v)))
}

fn fjall_entry(item: fjall::Result<fjall::KvPair>) -> EngineResult<(Value, Value)> {
    let (k, v) = item?;
    Ok((Value::Fjall(k), Value::Fjall(v)))
}

impl Iterator for Iter {
    type Item = EngineResult<(Value, Value)>;
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Sled(i) => i.next().map(sled_entry),
            Self::Fjall(i) => i.next().map(fjall_entry),
        }
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Self::Sled(i) => i.next_back().map(sled_entry),
            Self::Fjall(i) => i.next_back().map(fjall_entry),
        }
    }
}

impl Iter {
    /// The keys alone.
    pub(crate) fn keys(self) -> impl DoubleEndedIterator<Item = EngineResult<Value>> {
        self.map(|item| item.map(|(k, _)| k))
    }
}

/// An ordered map of byte keys to byte values. Cloning is cheap: clones are
/// handles of the same tree.
#[derive(Clone)]
pub(crate) enum Tree {
    Sled(sled::Tree),
    Fjall {
        // Dropped before `db`: a partition never outlives its database.
        tree: fjall::PartitionHandle,
        db: Arc<Fjall>,
    },
}

/// A fjall database, shared by its trees: its directory stays locked until
/// the last of them is dropped (and with it fjall's background threads), so
/// that another open waits, as it does for sled's own lock.
pub(crate) struct Fjall {
    // Dropped in this order: the id partition, the keyspace (whose last
    // handle waits for fjall's threads), then the lock.
    ids: Ids,
    keyspace: fjall::Keyspace,
    _lock: std::fs::File,
}

/// The range `range` as owned bounds (fjall's iterators outlive the call).
fn owned<K: AsRef<[u8]>, R: RangeBounds<K>>(range: &R) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(range.start_bound()), own(range.end_bound()))
}

impl Tree {
    pub(crate) fn get(&self, key: impl AsRef<[u8]>) -> EngineResult<Option<Value>> {
        Ok(match self {
            Self::Sled(t) => t.get(key)?.map(Value::Sled),
            Self::Fjall { tree, .. } => tree.get(key)?.map(Value::Fjall),
        })
    }

    pub(crate) fn contains_key(&self, key: impl AsRef<[u8]>) -> EngineResult<bool> {
        Ok(match self {
            Self::Sled(t) => t.contains_key(key)?,
            Self::Fjall { tree, .. } => tree.contains_key(key)?,
        })
    }

    pub(crate) fn insert(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Vec<u8>>,
    ) -> EngineResult<()> {
        match self {
            Self::Sled(t) => drop(t.insert(key.as_ref(), value.into())?),
            Self::Fjall { tree, .. } => tree.insert(key.as_ref(), value.into())?,
        }
        Ok(())
    }

    /// Removes `key`; whether it was there.
    pub(crate) fn remove(&self, key: impl AsRef<[u8]>) -> EngineResult<bool> {
        Ok(match self {
            Self::Sled(t) => t.remove(key)?.is_some(),
            Self::Fjall { tree, .. } => {
                let was = tree.contains_key(key.as_ref())?;
                tree.remove(key.as_ref())?;
                was
            }
        })
    }

    pub(crate) fn apply_batch(&self, batch: Batch) -> EngineResult<()> {
        match self {
            Self::Sled(t) => {
                let mut b = sled::Batch::default();
                for (k, v) in batch.0 {
                    match v {
                        Some(v) => b.insert(k, v),
                        None => b.remove(k),
                    }
                }
                t.apply_batch(b)?;
            }
            Self::Fjall { tree, db } => {
                let mut b = db.keyspace.batch();
                for (k, v) in batch.0 {
                    match v {
                        Some(v) => b.insert(tree, k, v),
                        None => b.remove(tree, k),
                    }
                }
                b.commit()?;
            }
        }
        Ok(())
    }

    /// Every entry whose key starts with `prefix`.
    pub(crate) fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        match self {
            Self::Sled(t) => Iter::Sled(t.scan_prefix(prefix)),
            Self::Fjall { tree, .. } => {
                Iter::Fjall(Box::new(tree.prefix(prefix.as_ref().to_vec())))
            }
        }
    }

    /// Every entry whose key is in `range`.
    pub(crate) fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        match self {
            Self::Sled(t) => Iter::Sled(t.range(range)),
            Self::Fjall { tree, .. } => Iter::Fjall(Box::new(tree.range(owned(&range)))),
        }
    }

    /// Every entry.
    pub(crate) fn iter(&self) -> Iter {
        match self {
            Self::Sled(t) => Iter::Sled(t.iter()),
            Self::Fjall { tree, .. } => Iter::Fjall(Box::new(tree.iter())),
        }
    }

    pub(crate) fn is_empty(&self) -> EngineResult<bool> {
        Ok(match self {
            Self::Sled(t) => t.is_empty(),
            Self::Fjall { tree, .. } => tree.is_empty()?,
        })
    }

    /// Makes every write to every tree of the database so far durable
    /// against a killed process; on fjall, against a power cut too (sled's
    /// needs the fsync of `flush.rs`).
    pub(crate) fn flush(&self) -> EngineResult<()> {
        match self {
            Self::Sled(t) => drop(t.flush()?),
            Self::Fjall { db, .. } => db.keyspace.persist(fjall::PersistMode::SyncData)?,
        }
        Ok(())
    }
}

/// Ids handed out by a fjall database: a block reserved durably at a time.
struct Ids {
    meta: fjall::PartitionHandle,
    /// The next id, and the end of the reserved block.
    next: std::sync::Mutex<(u64, u64)>,
}

/// Ids reserved (durably) at a time.
const ID_BLOCK: u64 = 1 << 20;
const ID_KEY: &[u8] = b"ids";

impl Ids {
    fn open(keyspace: &fjall::Keyspace) -> EngineResult<Self> {
        let meta = keyspace.open_partition("engine", Default::default())?;
        let start = match meta.get(ID_KEY)? {
            Some(v) => {
                u64::from_be_bytes(v.as_ref().try_into().map_err(|_| EngineError::Corruption {
                    at: "fjall engine's id reservation".to_owned(),
                })?)
            }
            None => 0,
        };
        Ok(Self {
            meta,
            next: std::sync::Mutex::new((start, start)),
        })
    }

    fn generate(&self, keyspace: &fjall::Keyspace) -> EngineResult<u64> {
        let mut next = self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if next.0 >= next.1 {
            // Durable before any id of the block is used: a restart starts
            // past every id given.
            let end = next.1 + ID_BLOCK;
            self.meta.insert(ID_KEY, end.to_be_bytes())?;
            keyspace.persist(fjall::PersistMode::SyncAll)?;
            next.1 = end;
        }
        let id = next.0;
        next.0 += 1;
        Ok(id)
    }
}

/// What a [`Db`] is besides its default tree.
#[derive(Clone)]
enum Handle {
    Sled(sled::Db),
    Fjall(Arc<Fjall>),
}

/// A database: its default tree (which it derefs to), named trees, ids.
#[derive(Clone)]
pub(crate) struct Db {
    tree: Tree,
    handle: Handle,
}

impl Deref for Db {
    type Target = Tree;
    fn deref(&self) -> &Tree {
        &self.tree
    }
}

/// The name of fjall's lock file in its directory.
const FJALL_LOCK: &str = "ax.lock";

impl Db {
    /// Opens (or creates) the database in `path` on `kind`, keeping up to
    /// `cache_bytes` of it in memory.
    pub(crate) fn open(
        path: &std::path::Path,
        kind: EngineKind,
        cache_bytes: u64,
    ) -> EngineResult<Self> {
        match kind {
            EngineKind::Sled => {
                let sled = sled::Config::new()
                    .path(path)
                    .cache_capacity(cache_bytes)
                    .open()?;
                Ok(Self::from_sled(sled))
            }
            EngineKind::Fjall => {
                std::fs::create_dir_all(path).map_err(EngineError::Io)?;
                let lock = std::fs::File::create(path.join(FJALL_LOCK)).map_err(EngineError::Io)?;
                lock.try_lock().map_err(|e| match e {
                    std::fs::TryLockError::WouldBlock => EngineError::InUse,
                    std::fs::TryLockError::Error(e) => EngineError::Io(e),
                })?;
                let keyspace = fjall::Config::new(path.join("lsm"))
                    .cache_size(cache_bytes)
                    .manual_journal_persist(true)
                    .max_write_buffer_size(FJALL_WRITE_BUFFER)
                    .max_journaling_size(FJALL_JOURNAL)
                    .open()?;
                let tree = keyspace.open_partition("default", partition_options())?;
                let db = Arc::new(Fjall {
                    ids: Ids::open(&keyspace)?,
                    keyspace,
                    _lock: lock,
                });
                Ok(Self {
                    tree: Tree::Fjall {
                        tree,
                        db: Arc::clone(&db),
                    },
                    handle: Handle::Fjall(db),
                })
            }
        }
    }

    /// Opens (or creates) a sled database in `path` with sled's defaults.
    pub(crate) fn open_default(path: &std::path::Path) -> EngineResult<Self> {
        Ok(Self::from_sled(sled::open(path)?))
    }

    fn from_sled(sled: sled::Db) -> Self {
        let tree = Tree::Sled((*sled).clone());
        Self {
            handle: Handle::Sled(sled),
            tree,
        }
    }

    pub(crate) fn kind(&self) -> EngineKind {
        match self.handle {
            Handle::Sled(_) => EngineKind::Sled,
            Handle::Fjall(_) => EngineKind::Fjall,
        }
    }

    /// The tree `name`, created if missing.
    pub(crate) fn open_tree(&self, name: &str) -> EngineResult<Tree> {
        Ok(match &self.handle {
            Handle::Sled(db) => Tree::Sled(db.open_tree(name)?),
            Handle::Fjall(db) => Tree::Fjall {
                tree: db.keyspace.open_partition(name, partition_options())?,
                db: Arc::clone(db),
            },
        })
    }

    /// A number greater than any this database gave before, across restarts.
    pub(crate) fn generate_id(&self) -> EngineResult<u64> {
        match &self.handle {
            Handle::Sled(db) => Ok(db.generate_id()?),
            Handle::Fjall(db) => db.ids.generate(&db.keyspace),
        }
    }

    /// Bytes of the database's files.
    pub(crate) fn size_on_disk(&self) -> EngineResult<u64> {
        Ok(match &self.handle {
            Handle::Sled(db) => db.size_on_disk()?,
            Handle::Fjall(db) => db.keyspace.disk_space(),
        })
    }
}

/// A new partition's options: its memtable flushed at [`FJALL_MEMTABLE`].
/// (fjall keeps the options a partition was created with.)
fn partition_options() -> fjall::PartitionCreateOptions {
    fjall::PartitionCreateOptions::default().max_memtable_size(FJALL_MEMTABLE)
}

// How fjall's three limits are set, and why (docs/PERFORMANCE.md, *fjall's
// journal and write buffer*). fjall slows writers down by sleeping in the
// writing thread — here the store's single writer, so every fire and
// trigger waits with it: 500 ms at each memtable rotation while its journal
// is past 90 % of `max_journaling_size`, 100 ms per write while its
// memtables are past 90 % of `max_write_buffer_size`, 10 ms loops past
// 100 %. With a 64 MiB journal and a 32 MiB write buffer a million-run
// bulk write met the journal's 500 ms sleep twice, once while fires were
// due (fire lateness p99 614 ms), and a restart that replays more journal
// than the write buffer holds starts over the limit. So: small memtables
// (flushed, and their journal freed, sooner), a journal four times the
// size fjall starts flushing at half of, and a write buffer as large as the
// journal, which is what a restart replays into memtables.

/// A partition's memtable: flushed to a segment on disk past this.
const FJALL_MEMTABLE: u32 = 8 << 20;

/// fjall's memtables, in all: never more than the journal holds (what is
/// not flushed is in the journal), so a restart's replay is within it.
const FJALL_WRITE_BUFFER: u64 = FJALL_JOURNAL;

/// fjall's journal before its memtables are flushed: what a restart reads
/// again (0.44 s to ready with a million queued runs), and the bound past
/// 90 % of which fjall sleeps writers.
const FJALL_JOURNAL: u64 = 256 << 20;
