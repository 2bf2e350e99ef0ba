//! The ordered key-value engine under the embedded store: the narrow part of
//! an engine the store's logic uses, and nothing more. A [`Db`] is a set of
//! named [`Tree`]s (the store's keys in the default one; the plugins' KV and
//! the secrets in their own), a monotonic id generator, a flush and a size.
//! A [`Tree`] maps byte keys to byte [`Value`]s in key order: point reads and
//! writes, prefix and range scans in both directions ([`Iter`]), and an
//! atomic [`Batch`] of inserts and removes.
//!
//! Today the engine is sled 0.34. The seam exists because sled's atomic
//! write is most of a run's cost: every batch rolls sled's log buffer twice
//! through a thread pool that wakes seven threads (docs/PERFORMANCE.md,
//! *What the embedded engine costs per run*), and an engine whose batches
//! go to a journal measured a third of that CPU per run. Nothing outside
//! this module names sled's types, so that a second engine is a second
//! implementation of these few types, under the same store logic and its
//! tests.

use std::ops::{Deref, RangeBounds};

/// An engine failure.
#[derive(Debug)]
pub(crate) enum EngineError {
    /// The operating system refused a read or write.
    Io(std::io::Error),
    /// The engine found its files damaged, at `at`.
    Corruption { at: String },
    /// Anything else, in the engine's words.
    Other(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Corruption { at } => write!(f, "the database is damaged at {at}"),
            Self::Other(e) => f.write_str(e),
        }
    }
}

impl From<sled::Error> for EngineError {
    fn from(e: sled::Error) -> Self {
        match e {
            sled::Error::Io(e) => Self::Io(e),
            sled::Error::Corruption { at, .. } => Self::Corruption {
                at: format!("sled log at {at:?}"),
            },
            other => Self::Other(other.to_string()),
        }
    }
}

pub(crate) type EngineResult<T> = std::result::Result<T, EngineError>;

/// A stored value: shared, cheap to clone, read as bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Value(sled::IVec);

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Value> for Vec<u8> {
    fn from(value: Value) -> Self {
        value.0.to_vec()
    }
}

impl From<&[u8]> for Value {
    fn from(bytes: &[u8]) -> Self {
        Self(bytes.into())
    }
}

/// Inserts and removes applied together by [`Tree::apply_batch`]: all of
/// them or, after a crash, none.
#[derive(Default)]
pub(crate) struct Batch(sled::Batch);

impl Batch {
    pub(crate) fn insert(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.0.insert(key.into(), value.into());
    }

    pub(crate) fn remove(&mut self, key: impl Into<Vec<u8>>) {
        self.0.remove(key.into());
    }
}

/// Entries of a [`Tree`] in key order, from either end.
pub(crate) struct Iter(sled::Iter);

fn entry(item: sled::Result<(sled::IVec, sled::IVec)>) -> EngineResult<(Value, Value)> {
    let (k, v) = item?;
    Ok((Value(k), Value(v)))
}

impl Iterator for Iter {
    type Item = EngineResult<(Value, Value)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(entry)
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(entry)
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
pub(crate) struct Tree(sled::Tree);

impl Tree {
    pub(crate) fn get(&self, key: impl AsRef<[u8]>) -> EngineResult<Option<Value>> {
        Ok(self.0.get(key)?.map(Value))
    }

    pub(crate) fn contains_key(&self, key: impl AsRef<[u8]>) -> EngineResult<bool> {
        Ok(self.0.contains_key(key)?)
    }

    pub(crate) fn insert(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Vec<u8>>,
    ) -> EngineResult<()> {
        self.0.insert(key.as_ref(), value.into())?;
        Ok(())
    }

    /// Removes `key`; whether it was there.
    pub(crate) fn remove(&self, key: impl AsRef<[u8]>) -> EngineResult<bool> {
        Ok(self.0.remove(key)?.is_some())
    }

    pub(crate) fn apply_batch(&self, batch: Batch) -> EngineResult<()> {
        Ok(self.0.apply_batch(batch.0)?)
    }

    /// Every entry whose key starts with `prefix`.
    pub(crate) fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        Iter(self.0.scan_prefix(prefix))
    }

    /// Every entry whose key is in `range`.
    pub(crate) fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        Iter(self.0.range(range))
    }

    /// Every entry.
    pub(crate) fn iter(&self) -> Iter {
        Iter(self.0.iter())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Makes every write to every tree of the database so far durable
    /// against a killed process (see `flush.rs` for a power cut).
    pub(crate) fn flush(&self) -> EngineResult<()> {
        self.0.flush()?;
        Ok(())
    }
}

/// A database: its default tree (which it derefs to), named trees, ids.
#[derive(Clone)]
pub(crate) struct Db {
    sled: sled::Db,
    tree: Tree,
}

impl Deref for Db {
    type Target = Tree;
    fn deref(&self) -> &Tree {
        &self.tree
    }
}

impl Db {
    /// Opens (or creates) the database in `path`, keeping up to
    /// `cache_bytes` of it in memory.
    pub(crate) fn open(path: &std::path::Path, cache_bytes: u64) -> EngineResult<Self> {
        let sled = sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            .open()?;
        Ok(Self::from_sled(sled))
    }

    /// Opens (or creates) the database in `path` with the engine's defaults.
    pub(crate) fn open_default(path: &std::path::Path) -> EngineResult<Self> {
        Ok(Self::from_sled(sled::open(path)?))
    }

    fn from_sled(sled: sled::Db) -> Self {
        let tree = Tree((*sled).clone());
        Self { sled, tree }
    }

    /// The tree `name`, created if missing.
    pub(crate) fn open_tree(&self, name: &str) -> EngineResult<Tree> {
        Ok(Tree(self.sled.open_tree(name)?))
    }

    /// A number greater than any this database gave before, across restarts.
    pub(crate) fn generate_id(&self) -> EngineResult<u64> {
        Ok(self.sled.generate_id()?)
    }

    /// Bytes of the database's files.
    pub(crate) fn size_on_disk(&self) -> EngineResult<u64> {
        Ok(self.sled.size_on_disk()?)
    }
}
