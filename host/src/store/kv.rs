//! The plugins' key-value store: the sled and in-memory implementations of
//! the capability's [`KvStore`] trait, over one shared algorithm.
//!
//! Kept apart from the big [`super::Store`] trait on purpose: it is reached
//! through one accessor ([`super::Operations::kv`]), has its own conformance tests
//! (below), and `ax exec --kv-dir` opens it alone ([`SledKv::open_dir`]).
//!
//! Layout of the ordered map (the sled tree `kv`, or a `BTreeMap`):
//! - `e\0{tenant}\0{scope}\0{key}` → 8 bytes of expiry (ms since the epoch,
//!   big-endian; 0 = never) followed by the value. `scope` is empty for
//!   tenant-wide keys and `t:{task}` for task-scoped ones. Tenant and task
//!   names cannot hold `\0` and keys hold no control characters, so a prefix
//!   scan never crosses a namespace.
//! - `u\0{tenant}` → the tenant's live key + value bytes (u64, big-endian).
//!
//! A mutex serialises writes so an entry and the usage counter change
//! together; reads take no lock. In sled they live in the store's database,
//! and the runner waits for the store's group commit after an attempt that
//! had the KV grant, so a step recorded as done never loses what it wrote.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::sled::engine::{Db, EngineError, Tree};
use super::{Error, Result};
use crate::capability::kv::{KvBackendError, KvNamespace, KvResult, entry_bytes, fits_quota};
pub use crate::capability::kv::{KvStore, SetOutcome};
use crate::model::Millis;

impl From<Error> for KvBackendError {
    fn from(e: Error) -> Self {
        KvBackendError(Box::new(e))
    }
}

/// An ordered byte map: what the KV and secret algorithms need from a backend.
pub trait OrderedMap: Send + Sync + 'static {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Sets `key` to `value`.
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes `key` (absent is fine).
    fn remove(&self, key: &[u8]) -> Result<()>;
    /// Entries whose key starts with `prefix`, in key order, at most `limit`.
    fn scan(&self, prefix: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Entries whose key is greater than `after` (`None`: every entry), in
    /// key order, at most `limit`: the whole map a page at a time
    /// ([`super::Backup::map_page`]).
    fn range(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Makes writes so far durable.
    fn flush(&self) -> Result<()>;
}

/// The in-memory ordered map.
#[derive(Default)]
pub struct MemoryMap(Mutex<BTreeMap<Vec<u8>, Vec<u8>>>);

impl MemoryMap {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        // Each operation is one map call: a panic cannot leave it half-done.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl OrderedMap for MemoryMap {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().get(key).cloned())
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.lock().insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn remove(&self, key: &[u8]) -> Result<()> {
        self.lock().remove(key);
        Ok(())
    }
    fn scan(&self, prefix: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .lock()
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
    fn range(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::ops::Bound;
        let start = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_vec()));
        Ok(self
            .lock()
            .range((start, Bound::Unbounded))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// A sled tree as an ordered map.
pub struct SledMap {
    tree: Tree,
    /// Called after each write: the store counts writes so that its sync
    /// tickets (group commit) cover these too.
    on_write: Option<WriteHook>,
}

/// Told about every completed write (see [`SledMap`]).
pub(crate) type WriteHook = std::sync::Arc<dyn Fn() + Send + Sync>;

impl SledMap {
    /// The tree `name` of `db`.
    pub(crate) fn open(db: &Db, name: &str, on_write: Option<WriteHook>) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(name).map_err(backend)?,
            on_write,
        })
    }

    fn wrote(&self) {
        if let Some(hook) = &self.on_write {
            hook();
        }
    }
}

fn backend(e: EngineError) -> Error {
    Error::Backend(e.to_string())
}

impl OrderedMap for SledMap {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.get(key).map_err(backend)?.map(|v| v.to_vec()))
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree.insert(key, value).map_err(backend)?;
        self.wrote();
        Ok(())
    }
    fn remove(&self, key: &[u8]) -> Result<()> {
        self.tree.remove(key).map_err(backend)?;
        self.wrote();
        Ok(())
    }
    fn scan(&self, prefix: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.tree
            .scan_prefix(prefix)
            .take(limit)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(backend))
            .collect()
    }
    fn range(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::ops::Bound;
        let start = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_vec()));
        self.tree
            .range::<Vec<u8>, _>((start, Bound::Unbounded))
            .take(limit)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(backend))
            .collect()
    }
    fn flush(&self) -> Result<()> {
        // One log for every tree: this makes the whole database durable.
        self.tree.flush().map(|_| ()).map_err(backend)
    }
}

/// The KV algorithm over any [`OrderedMap`].
pub struct KvEngine<M> {
    map: M,
    /// Serialises writes: an entry and its tenant's usage change together.
    write: Mutex<()>,
}

/// The KV store kept in memory (tests, `MemoryStore`).
pub type MemoryKv = KvEngine<MemoryMap>;
/// The KV store in sled.
pub type SledKv = KvEngine<SledMap>;

impl Default for MemoryKv {
    fn default() -> Self {
        Self::with_map(MemoryMap::default())
    }
}

impl SledKv {
    /// The KV store in the tree `kv` of an open database (the store's own,
    /// whose sync tickets must cover KV writes: `on_write` counts them).
    pub(crate) fn in_db(db: &Db, on_write: Option<WriteHook>) -> Result<Self> {
        Ok(Self::with_map(SledMap::open(db, "kv", on_write)?))
    }

    /// A KV store of its own in `dir` (created if missing), for `ax exec --kv-dir`.
    pub fn open_dir(dir: &Path) -> Result<Self> {
        let db = Db::open_default(dir).map_err(|e| Error::Unusable {
            path: dir.display().to_string(),
            reason: e.to_string(),
            hint: "is another `ax exec` using it? Use another --kv-dir.".into(),
        })?;
        Self::in_db(&db, None)
    }
}

const NEVER: i64 = 0;

fn ns_prefix(ns: &KvNamespace) -> Vec<u8> {
    let mut k = b"e\0".to_vec();
    k.extend_from_slice(ns.tenant.as_bytes());
    k.push(0);
    if let Some(task) = &ns.task {
        k.extend_from_slice(b"t:");
        k.extend_from_slice(task.as_bytes());
    }
    k.push(0);
    k
}

fn entry_key(ns: &KvNamespace, key: &str) -> Vec<u8> {
    let mut k = ns_prefix(ns);
    k.extend_from_slice(key.as_bytes());
    k
}

fn usage_key(tenant: &str) -> Vec<u8> {
    let mut k = b"u\0".to_vec();
    k.extend_from_slice(tenant.as_bytes());
    k
}

fn tenant_prefix(tenant: &str) -> Vec<u8> {
    let mut k = b"e\0".to_vec();
    k.extend_from_slice(tenant.as_bytes());
    k.push(0);
    k
}

/// Splits a stored entry into (expiry, value).
fn decode(key: &[u8], raw: &[u8]) -> Result<(i64, Vec<u8>)> {
    if raw.len() < 8 {
        return Err(Error::Corrupt {
            key: String::from_utf8_lossy(key).replace('\0', "/"),
            reason: "a KV entry shorter than its expiry header".into(),
        });
    }
    let (head, value) = raw.split_at(8);
    let expires = i64::from_be_bytes(head.try_into().expect("8 bytes"));
    Ok((expires, value.to_vec()))
}

fn encode(expires: Option<Millis>, value: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(8 + value.len());
    raw.extend_from_slice(&expires.unwrap_or(NEVER).to_be_bytes());
    raw.extend_from_slice(value);
    raw
}

fn expired(expires: i64, now: Millis) -> bool {
    expires != NEVER && expires <= now
}

/// The user key of a stored entry key, given its namespace prefix length.
fn user_key(prefix_len: usize, raw: &[u8]) -> String {
    String::from_utf8_lossy(&raw[prefix_len..]).into_owned()
}

impl<M: OrderedMap> KvEngine<M> {
    /// The KV store over `map` (the PostgreSQL store builds one over its
    /// own map).
    pub(crate) fn with_map(map: M) -> Self {
        Self {
            map,
            write: Mutex::new(()),
        }
    }

    /// The map it runs over (a whole-store dump reads and restores it
    /// verbatim: [`super::Backup`]).
    pub(crate) fn map(&self) -> &M {
        &self.map
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // Guards no data of its own; a poisoned lock is safe to reuse.
        self.write.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn read_usage(&self, tenant: &str) -> Result<u64> {
        Ok(self
            .map
            .get(&usage_key(tenant))?
            .and_then(|v| v.try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    fn write_usage(&self, tenant: &str, used: u64) -> Result<()> {
        if used == 0 {
            self.map.remove(&usage_key(tenant))
        } else {
            self.map.insert(&usage_key(tenant), &used.to_be_bytes())
        }
    }

    /// Removes an entry (caller holds the write lock) and gives back its bytes.
    fn remove_entry(
        &self,
        tenant: &str,
        raw_key: &[u8],
        key_len: usize,
        value_len: usize,
    ) -> Result<()> {
        self.map.remove(raw_key)?;
        let used = self.read_usage(tenant)?;
        self.write_usage(tenant, used.saturating_sub((key_len + value_len) as u64))
    }

    /// Drops every expired entry of the tenant (caller holds the write lock).
    fn sweep(&self, tenant: &str, now: Millis) -> Result<()> {
        let prefix = tenant_prefix(tenant);
        for (raw_key, raw) in self.map.scan(&prefix, usize::MAX)? {
            let (expires, value) = decode(&raw_key, &raw)?;
            if expired(expires, now) {
                // Key length as counted: the user key after the namespace.
                let key_len = user_key_len(&raw_key, prefix.len());
                self.remove_entry(tenant, &raw_key, key_len, value.len())?;
            }
        }
        Ok(())
    }
}

/// Length of the user key inside an entry key (after `{scope}\0`).
fn user_key_len(raw_key: &[u8], tenant_prefix_len: usize) -> usize {
    let rest = &raw_key[tenant_prefix_len..];
    rest.iter()
        .position(|b| *b == 0)
        .map_or(0, |i| rest.len() - i - 1)
}

impl<M: OrderedMap> KvStore for KvEngine<M> {
    fn get(&self, ns: &KvNamespace, key: &str, now: Millis) -> KvResult<Option<Vec<u8>>> {
        let raw_key = entry_key(ns, key);
        let Some(raw) = self.map.get(&raw_key)? else {
            return Ok(None);
        };
        let (expires, value) = decode(&raw_key, &raw)?;
        if expired(expires, now) {
            return Ok(None);
        }
        Ok(Some(value))
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
        let raw_key = entry_key(ns, key);
        let _guard = self.lock();
        let old = match self.map.get(&raw_key)? {
            Some(raw) => entry_bytes(key, decode(&raw_key, &raw)?.1.len()),
            None => 0,
        };
        let new = entry_bytes(key, value.len());
        let mut used = self.read_usage(&ns.tenant)?;
        if fits_quota(used, old, new, quota).is_err() {
            // Expired entries still count until swept: sweep, then decide.
            self.sweep(&ns.tenant, now)?;
            used = self.read_usage(&ns.tenant)?;
            let old = match self.map.get(&raw_key)? {
                Some(raw) => entry_bytes(key, decode(&raw_key, &raw)?.1.len()),
                None => 0,
            };
            if let Err(why) = fits_quota(used, old, new, quota) {
                return Ok(SetOutcome::OverQuota(why));
            }
            self.map.insert(&raw_key, &encode(expires_at, value))?;
            self.write_usage(&ns.tenant, used - old + new)?;
            return Ok(SetOutcome::Stored);
        }
        self.map.insert(&raw_key, &encode(expires_at, value))?;
        self.write_usage(&ns.tenant, used.saturating_sub(old) + new)?;
        Ok(SetOutcome::Stored)
    }

    fn delete(&self, ns: &KvNamespace, key: &str, now: Millis) -> KvResult<bool> {
        let raw_key = entry_key(ns, key);
        let _guard = self.lock();
        let Some(raw) = self.map.get(&raw_key)? else {
            return Ok(false);
        };
        let (expires, value) = decode(&raw_key, &raw)?;
        self.remove_entry(&ns.tenant, &raw_key, key.len(), value.len())?;
        Ok(!expired(expires, now))
    }

    fn list(
        &self,
        ns: &KvNamespace,
        prefix: &str,
        limit: usize,
        now: Millis,
    ) -> KvResult<Vec<String>> {
        let base = ns_prefix(ns);
        let mut scan = base.clone();
        scan.extend_from_slice(prefix.as_bytes());
        // A tenant's entries are bounded by its quota, so one scan is bounded too.
        let mut keys = Vec::new();
        for (raw_key, raw) in self.map.scan(&scan, usize::MAX)? {
            let (expires, _) = decode(&raw_key, &raw)?;
            if !expired(expires, now) {
                keys.push(user_key(base.len(), &raw_key));
                if keys.len() == limit {
                    break;
                }
            }
        }
        Ok(keys)
    }

    fn usage(&self, tenant: &str) -> KvResult<u64> {
        Ok(self.read_usage(tenant)?)
    }

    fn flush(&self) -> KvResult<()> {
        Ok(self.map.flush()?)
    }
}

/// The conformance suite every [`KvStore`] passes (run on both below).
#[cfg(test)]
pub(crate) mod conformance {
    use super::*;

    fn ns(tenant: &str) -> KvNamespace {
        KvNamespace {
            tenant: tenant.into(),
            task: None,
        }
    }

    fn task_ns(tenant: &str, task: &str) -> KvNamespace {
        KvNamespace {
            tenant: tenant.into(),
            task: Some(task.into()),
        }
    }

    const Q: u64 = 1 << 20;

    pub(crate) fn set_get_delete(kv: &dyn KvStore) {
        let a = ns("a");
        assert_eq!(kv.get(&a, "k", 0).unwrap(), None);
        assert_eq!(
            kv.set(&a, "k", b"v1", None, Q, 0).unwrap(),
            SetOutcome::Stored
        );
        assert_eq!(kv.get(&a, "k", 0).unwrap().as_deref(), Some(&b"v1"[..]));
        kv.set(&a, "k", b"value2", None, Q, 0).unwrap();
        assert_eq!(kv.get(&a, "k", 0).unwrap().as_deref(), Some(&b"value2"[..]));
        assert_eq!(kv.usage("a").unwrap(), 7);
        assert!(kv.delete(&a, "k", 0).unwrap());
        assert!(!kv.delete(&a, "k", 0).unwrap());
        assert_eq!(kv.get(&a, "k", 0).unwrap(), None);
        assert_eq!(kv.usage("a").unwrap(), 0);
        kv.set(&a, "empty", b"", None, Q, 0).unwrap();
        assert_eq!(kv.get(&a, "empty", 0).unwrap().as_deref(), Some(&b""[..]));
    }

    pub(crate) fn tenants_and_scopes_are_isolated(kv: &dyn KvStore) {
        kv.set(&ns("a"), "k", b"of-a", None, Q, 0).unwrap();
        kv.set(&ns("ab"), "k", b"of-ab", None, Q, 0).unwrap();
        kv.set(&task_ns("a", "t1"), "k", b"of-t1", None, Q, 0)
            .unwrap();
        assert_eq!(kv.get(&ns("b"), "k", 0).unwrap(), None);
        assert_eq!(
            kv.get(&ns("a"), "k", 0).unwrap().as_deref(),
            Some(&b"of-a"[..])
        );
        assert_eq!(
            kv.get(&ns("ab"), "k", 0).unwrap().as_deref(),
            Some(&b"of-ab"[..])
        );
        assert_eq!(
            kv.get(&task_ns("a", "t1"), "k", 0).unwrap().as_deref(),
            Some(&b"of-t1"[..])
        );
        assert_eq!(kv.get(&task_ns("a", "t2"), "k", 0).unwrap(), None);
        assert_eq!(kv.list(&ns("a"), "", 100, 0).unwrap(), vec!["k"]);
        assert_eq!(kv.list(&ns("b"), "", 100, 0).unwrap(), Vec::<String>::new());
        // Task-scoped keys count against their tenant.
        assert_eq!(kv.usage("a").unwrap(), 5 + 6);
        assert_eq!(kv.usage("ab").unwrap(), 6);
    }

    pub(crate) fn list_filters_by_prefix_in_order_with_limit(kv: &dyn KvStore) {
        let a = ns("a");
        for k in ["b/2", "a/1", "b/1", "c", "b/3"] {
            kv.set(&a, k, b"x", None, Q, 0).unwrap();
        }
        assert_eq!(
            kv.list(&a, "b/", 100, 0).unwrap(),
            vec!["b/1", "b/2", "b/3"]
        );
        assert_eq!(kv.list(&a, "", 2, 0).unwrap(), vec!["a/1", "b/1"]);
        assert_eq!(kv.list(&a, "zz", 10, 0).unwrap(), Vec::<String>::new());
    }

    pub(crate) fn ttl_expires_reads_and_frees_quota(kv: &dyn KvStore) {
        let a = ns("a");
        kv.set(&a, "short", b"1234", Some(1_000), 100, 0).unwrap();
        kv.set(&a, "long", b"x", None, 100, 0).unwrap();
        assert!(kv.get(&a, "short", 999).unwrap().is_some());
        assert_eq!(kv.get(&a, "short", 1_000).unwrap(), None);
        assert_eq!(kv.list(&a, "", 10, 1_000).unwrap(), vec!["long"]);
        assert!(
            !kv.delete(&a, "short", 2_000).unwrap(),
            "expired: nothing live"
        );
        kv.set(&a, "again", b"12345678", Some(1_000), 30, 0)
            .unwrap();
        // 30-byte quota: 5+8 expired bytes are swept to make room.
        assert_eq!(kv.usage("a").unwrap(), 5 + 13);
        assert_eq!(
            kv.set(&a, "fresh", b"0123456789abcdef", None, 30, 5_000)
                .unwrap(),
            SetOutcome::Stored
        );
        assert_eq!(kv.usage("a").unwrap(), 5 + 21);
    }

    pub(crate) fn quota_refuses_and_changes_nothing(kv: &dyn KvStore) {
        let a = ns("a");
        assert_eq!(
            kv.set(&a, "k", &[0; 90], None, 100, 0).unwrap(),
            SetOutcome::Stored
        );
        let refused = kv.set(&a, "k2", &[0; 10], None, 100, 0).unwrap();
        assert!(
            matches!(&refused, SetOutcome::OverQuota(why) if why.contains("quota of 100")),
            "{refused:?}"
        );
        assert_eq!(kv.get(&a, "k2", 0).unwrap(), None);
        assert_eq!(kv.usage("a").unwrap(), 91);
        // Overwriting with something smaller is always fine.
        assert_eq!(
            kv.set(&a, "k", &[0; 10], None, 100, 0).unwrap(),
            SetOutcome::Stored
        );
        assert_eq!(kv.usage("a").unwrap(), 11);
        // Another tenant has its own quota.
        assert_eq!(
            kv.set(&ns("b"), "k", &[0; 90], None, 100, 0).unwrap(),
            SetOutcome::Stored
        );
    }

    macro_rules! suite {
        ($make:expr) => {
            #[test]
            fn set_get_delete() {
                conformance::set_get_delete(&$make);
            }
            #[test]
            fn tenants_and_scopes_are_isolated() {
                conformance::tenants_and_scopes_are_isolated(&$make);
            }
            #[test]
            fn list_filters_by_prefix_in_order_with_limit() {
                conformance::list_filters_by_prefix_in_order_with_limit(&$make);
            }
            #[test]
            fn ttl_expires_reads_and_frees_quota() {
                conformance::ttl_expires_reads_and_frees_quota(&$make);
            }
            #[test]
            fn quota_refuses_and_changes_nothing() {
                conformance::quota_refuses_and_changes_nothing(&$make);
            }
        };
    }
    pub(crate) use suite;
}

#[cfg(test)]
mod memory_tests {
    use super::*;
    conformance::suite!(MemoryKv::default());
}

#[cfg(test)]
mod sled_tests {
    use super::*;

    fn open() -> SledKv {
        let dir = tempfile::tempdir().unwrap();
        // Keep the directory for the test's life: leak the guard.
        let path = dir.keep();
        SledKv::open_dir(&path).unwrap()
    }

    conformance::suite!(open());

    #[test]
    fn values_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let ns = KvNamespace {
            tenant: "a".into(),
            task: None,
        };
        {
            let kv = SledKv::open_dir(dir.path()).unwrap();
            kv.set(&ns, "cursor", b"42", None, 100, 0).unwrap();
            kv.flush().unwrap();
        }
        let kv = SledKv::open_dir(dir.path()).unwrap();
        assert_eq!(
            kv.get(&ns, "cursor", 0).unwrap().as_deref(),
            Some(&b"42"[..])
        );
        assert_eq!(kv.usage("a").unwrap(), 8);
    }
}
