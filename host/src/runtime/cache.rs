//! The caches of compiled plugins: artifacts on disk, and loaded plugins in
//! memory, bounded by bytes.
//!
//! **On disk.** Compiling a component takes ~100 ms (seconds for an 18 MiB
//! componentize-py one); loading an artifact ax compiled earlier takes about a
//! millisecond. Artifacts are keyed by the component's sha256 *and* a
//! fingerprint of the engine's settings, because an artifact compiled with
//! other settings is refused. Only components that passed validation are
//! written, so a stream of distinct invalid uploads leaves nothing behind.
//! Each engine has its own cache: with the Winch first tier, Winch's
//! artifacts end in `-baseline.cwasm` and live only until Cranelift's
//! replaces them (`super::tier`).
//!
//! Only files this module wrote are ever deserialized (deserializing is
//! `unsafe`: the bytes become machine code). Bytes a user sent are always
//! compiled, never deserialized.
//!
//! **In memory.** [`Lru`] holds loaded plugins by digest, least recently used
//! out first, within a byte budget. Each entry is charged [`resident_bytes`]
//! of its component. Dropping an entry drops only the cache's reference: a
//! running attempt holds its own (`Arc`), and the next use of an evicted
//! plugin deserializes its artifact again.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::hash::Hasher;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{Error, Result};

/// Bytes charged per loaded plugin on top of its image: the `InstancePre`
/// (one resolved definition per import, ~100 for a WASI component), the
/// component's type tables and the map entry. Measured: RSS grows by the
/// image plus ~3 KiB per loaded copy of an example plugin (200 distinct
/// copies, each run once); 64 KiB leaves room for components with many more
/// imports and types.
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 64 << 10;

/// A wasm page.
const WASM_PAGE: u64 = 64 << 10;

/// The sha256 of `bytes`, hex: a plugin's identity.
pub(crate) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What a loaded component keeps in memory, as charged to the [`Lru`]:
///
/// - its **image**: the compiled artifact as laid out in memory (machine
///   code, the wasm data segments, metadata) — `Component::image_range`;
/// - its **memory-initialisation images**: at first instantiation wasmtime
///   copies each memory's data segments into a sealed memfd to map them
///   copy-on-write (the artifact is read into memory, not mapped from its
///   file, so the file cannot serve). Those bytes come from the data inside
///   the image and are at most each memory's initial size, so the smaller of
///   the image and `memories × largest initial size` bounds them;
/// - [`ENTRY_OVERHEAD_BYTES`] for the rest.
///
/// An upper bound by construction, so the budget is never exceeded by more
/// than the estimate of the entries' heap bookkeeping.
pub(crate) fn resident_bytes(component: &Component) -> u64 {
    let range = component.image_range();
    let image = (range.end as usize).saturating_sub(range.start as usize) as u64;
    let initial = component.resources_required().map_or(image, |r| {
        u64::from(r.num_memories)
            .saturating_mul(r.max_initial_memory_size.unwrap_or(0))
            .saturating_mul(WASM_PAGE)
    });
    image
        .saturating_add(initial.min(image))
        .saturating_add(ENTRY_OVERHEAD_BYTES)
}

/// Feeds `std::hash::Hash` output into sha256 so the fingerprint is stable
/// (unlike `DefaultHasher`, whose algorithm may change between Rust releases).
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        let bytes = self.0.clone().finalize();
        u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default())
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
    fingerprint: String,
}

impl ArtifactCache {
    /// The cache of `engine`'s artifacts in `dir`; their file names end in
    /// `-{fingerprint}{suffix}.cwasm`.
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine, suffix: &str) -> Result<Self> {
        if let Some(dir) = &dir {
            fs::create_dir_all(dir).map_err(|e| {
                Error::Host(format!(
                    "creating the artifact cache {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let mut hasher = ShaHasher(Sha256::new());
        std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
        let fingerprint = format!("{}{suffix}", hex::encode(&hasher.0.finalize()[..8]));
        Ok(Self { dir, fingerprint })
    }

    fn path(&self, digest: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{digest}-{}.cwasm", self.fingerprint)))
    }

    /// The artifact ax compiled earlier for `digest`, if there is a usable one.
    /// An unusable one (damaged, truncated) is deleted.
    pub(crate) fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest).filter(|p| p.exists())?;
        match load_artifact(engine, &path) {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "discarding unusable cached artifact");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Compiles `bytes` (no caching: see [`ArtifactCache::store`]).
    pub(crate) fn compile(engine: &Engine, bytes: &[u8]) -> Result<Component> {
        Component::new(engine, bytes).map_err(|e| Error::Invalid(format!("{e:#}")))
    }

    /// Keeps `component`'s artifact for `digest`; call it once the component
    /// is known valid.
    pub(crate) fn store(&self, digest: &str, component: &Component) {
        if let Some(path) = self.path(digest)
            && let Err(e) = store_artifact(component, &path)
        {
            // The cache is an optimisation: a failed write costs a recompile later.
            tracing::warn!(path = %path.display(), error = %e, "could not cache compiled artifact");
        }
    }

    pub(crate) fn remove(&self, digest: &str) {
        if let Some(path) = self.path(digest) {
            let _ = fs::remove_file(path);
        }
    }
}

#[allow(unsafe_code)]
fn load_artifact(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // Read into memory rather than `deserialize_file`'s mmap: a mapped file
    // truncated underneath us (someone clearing the cache) would SIGBUS the host.
    let bytes = fs::read(path)?;
    // SAFETY: the file sits in ax's own cache directory under a name derived
    // from the digest of bytes ax compiled, and was written by `store_artifact`
    // below (atomically, via rename). wasmtime additionally checks its header
    // against this engine's settings and refuses a mismatch.
    unsafe { Component::deserialize(engine, &bytes) }
}

/// Why an artifact could not be written (only logged: the cache is an
/// optimisation).
#[derive(Debug, thiserror::Error)]
enum ArtifactError {
    /// wasmtime could not serialize the compiled component.
    #[error("serializing the component: {0:#}")]
    Serialize(wasmtime::Error),
    /// Writing, syncing or renaming the file failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn store_artifact(component: &Component, path: &Path) -> Result<(), ArtifactError> {
    let bytes = component.serialize().map_err(ArtifactError::Serialize)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    Ok(())
}

/// A map by key, bounded by the bytes charged to its entries: inserting past
/// the budget drops the least recently used entries. Generic so its rules are
/// tested without wasmtime; the runtime keeps `Plugin`s in it.
pub(crate) struct Lru<V> {
    budget: u64,
    used: u64,
    /// A counter, not time: each use takes the next value.
    tick: u64,
    entries: HashMap<String, LruEntry<V>>,
    /// Keys by last use, oldest first.
    order: BTreeMap<u64, String>,
    evictions: u64,
}

struct LruEntry<V> {
    value: V,
    bytes: u64,
    used_at: u64,
}

impl<V: Clone> Lru<V> {
    /// An empty map holding at most `budget` bytes.
    pub(crate) fn new(budget: u64) -> Self {
        Self {
            budget,
            used: 0,
            tick: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            evictions: 0,
        }
    }

    /// The entry for `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: &str) -> Option<V> {
        self.tick += 1;
        let entry = self.entries.get_mut(key)?;
        self.order.remove(&entry.used_at);
        entry.used_at = self.tick;
        self.order.insert(self.tick, key.to_string());
        Some(entry.value.clone())
    }

    /// The entry for `key`, leaving the order of use as it is (a look,
    /// not a use).
    pub(crate) fn peek(&self, key: &str) -> Option<&V> {
        self.entries.get(key).map(|e| &e.value)
    }

    /// Keeps `value` under `key`, charged `bytes`, dropping the least recently
    /// used entries until it fits. An entry larger than the whole budget is
    /// not kept (`false`): every use of it loads it again.
    pub(crate) fn insert(&mut self, key: String, value: V, bytes: u64) -> bool {
        self.remove(&key);
        if bytes > self.budget {
            return false;
        }
        while self.used + bytes > self.budget {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(gone) = self.entries.remove(&oldest) {
                self.used -= gone.bytes;
                self.evictions += 1;
            }
        }
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.entries.insert(
            key,
            LruEntry {
                value,
                bytes,
                used_at: self.tick,
            },
        );
        self.used += bytes;
        true
    }

    /// Drops `key`'s entry, if any (not counted as an eviction).
    pub(crate) fn remove(&mut self, key: &str) {
        if let Some(gone) = self.entries.remove(key) {
            self.order.remove(&gone.used_at);
            self.used -= gone.bytes;
        }
    }

    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes charged to the entries kept.
    pub(crate) fn bytes(&self) -> u64 {
        self.used
    }

    /// The budget.
    pub(crate) fn budget(&self) -> u64 {
        self.budget
    }

    /// Entries dropped to make room, since the start.
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_least_recently_used_entries_go_first_when_the_bytes_run_out() {
        let mut lru = Lru::new(100);
        assert!(lru.insert("a".into(), 1, 40));
        assert!(lru.insert("b".into(), 2, 40));
        // `a` used since `b`: `b` is now the oldest.
        assert_eq!(lru.get("a"), Some(1));
        assert!(lru.insert("c".into(), 3, 40));
        assert_eq!(lru.get("b"), None, "b was the least recently used");
        assert_eq!((lru.get("a"), lru.get("c")), (Some(1), Some(3)));
        assert_eq!((lru.len(), lru.bytes(), lru.evictions()), (2, 80, 1));
        // A big entry pushes out as many as it needs, oldest first.
        assert!(lru.insert("d".into(), 4, 90));
        assert_eq!((lru.len(), lru.bytes(), lru.evictions()), (1, 90, 3));
        assert_eq!(lru.get("d"), Some(4));
    }

    #[test]
    fn the_bytes_kept_never_exceed_the_budget() {
        let mut lru = Lru::new(1000);
        for i in 0..500u64 {
            lru.insert(format!("k{i}"), i, 1 + (i * 37) % 300);
            assert!(lru.bytes() <= 1000, "{} after {i}", lru.bytes());
            let charged: u64 = lru.entries.values().map(|e| e.bytes).sum();
            assert_eq!(charged, lru.bytes());
            assert_eq!(lru.order.len(), lru.len());
        }
    }

    #[test]
    fn an_entry_above_the_budget_is_not_kept_and_evicts_nothing() {
        let mut lru = Lru::new(100);
        lru.insert("a".into(), 1, 60);
        assert!(!lru.insert("huge".into(), 2, 101));
        assert_eq!(lru.get("huge"), None);
        assert_eq!((lru.len(), lru.bytes(), lru.evictions()), (1, 60, 0));
    }

    #[test]
    fn replacing_or_removing_an_entry_keeps_the_accounting() {
        let mut lru = Lru::new(100);
        lru.insert("a".into(), 1, 60);
        lru.insert("a".into(), 2, 30);
        assert_eq!((lru.get("a"), lru.bytes(), lru.len()), (Some(2), 30, 1));
        lru.remove("a");
        assert_eq!((lru.bytes(), lru.len(), lru.evictions()), (0, 0, 0));
    }

    #[test]
    fn an_evicted_entry_stays_valid_for_whoever_holds_it() {
        let mut lru = Lru::new(10);
        lru.insert("a".into(), Arc::new(vec![7u8; 4]), 10);
        let held = lru.get("a").unwrap();
        lru.insert("b".into(), Arc::new(vec![0u8; 4]), 10);
        assert_eq!(lru.get("a"), None);
        // The cache dropped its reference only.
        assert_eq!((*held).as_slice(), &[7, 7, 7, 7]);
        assert_eq!(Arc::strong_count(&held), 1);
    }
}
