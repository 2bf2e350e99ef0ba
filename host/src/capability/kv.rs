//! Key-value rules shared by the runtime (which checks a plugin's calls) and
//! the stores (which persist and count): scopes, namespaces, size caps and
//! the quota arithmetic. No I/O.
//!
//! Decisions:
//! - A step that declares `kv` sees its tenant's keys (`kv: tenant`, what
//!   `kv: true` means) or only its task's (`kv: task`); a step that declares
//!   nothing has no KV at all.
//! - Keys are 1..=512 bytes of UTF-8 without control characters; values are
//!   bytes, at most 1 MiB by default.
//! - The quota counts `key + value` bytes of every live entry of the tenant,
//!   both scopes together (the tenant pays for its tasks' keys). A write that
//!   would cross it fails and changes nothing; expired entries are swept
//!   before the quota is enforced, so they never block a write.
//! - TTLs are exact for reads (an expired key is absent) and lazy for
//!   storage (removed on the next touch or quota sweep).

use serde::{Deserialize, Serialize};

use crate::model::Millis;

/// A failure of the storage under the capability (I/O, a corrupt entry). The
/// store that implements [`KvStore`] boxes its own error here, keeping it as
/// the source, so this layer need not name the store.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct KvBackendError(pub Box<dyn std::error::Error + Send + Sync>);

/// Result of a [`KvStore`] call.
pub type KvResult<T> = Result<T, KvBackendError>;

/// What a `set` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetOutcome {
    /// The value is stored.
    Stored,
    /// Refused: the tenant's quota would be exceeded (the reason says by how much).
    OverQuota(String),
}

/// A tenant-scoped key-value store with TTLs and a per-tenant byte quota.
/// `now` is passed in so expiry is testable without sleeping.
pub trait KvStore: Send + Sync + 'static {
    /// The live value of `key`, if any.
    fn get(&self, ns: &KvNamespace, key: &str, now: Millis) -> KvResult<Option<Vec<u8>>>;
    /// Stores `value` under `key` (expiring at `expires_at`, if given) unless
    /// the tenant would then hold more than `quota` bytes.
    fn set(
        &self,
        ns: &KvNamespace,
        key: &str,
        value: &[u8],
        expires_at: Option<Millis>,
        quota: u64,
        now: Millis,
    ) -> KvResult<SetOutcome>;
    /// Removes `key`; says whether a live value was there.
    fn delete(&self, ns: &KvNamespace, key: &str, now: Millis) -> KvResult<bool>;
    /// Live keys starting with `prefix`, in order, at most `limit`.
    fn list(
        &self,
        ns: &KvNamespace,
        prefix: &str,
        limit: usize,
        now: Millis,
    ) -> KvResult<Vec<String>>;
    /// Bytes the tenant holds (keys + values, both scopes).
    fn usage(&self, tenant: &str) -> KvResult<u64>;
    /// Makes every write so far durable (a no-op in memory).
    fn flush(&self) -> KvResult<()>;
}

/// How wide a step's view of the key-value store is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvScope {
    /// Every key of the tenant (shared by its tasks).
    Tenant,
    /// Only keys of this task.
    Task,
}

/// Where one attempt's keys live.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KvNamespace {
    /// The owning tenant (the quota is counted per tenant).
    pub tenant: String,
    /// `Some(task)` when the step's scope is `task`.
    pub task: Option<String>,
}

impl KvNamespace {
    /// The namespace a step of `task` with `scope` sees.
    pub fn new(tenant: &str, task: &str, scope: KvScope) -> Self {
        Self {
            tenant: tenant.to_owned(),
            task: match scope {
                KvScope::Tenant => None,
                KvScope::Task => Some(task.to_owned()),
            },
        }
    }
}

/// Longest key by default, in bytes.
pub const DEFAULT_MAX_KEY_BYTES: usize = 512;
/// Largest value by default, in bytes.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1 << 20;
/// Bytes of keys and values a tenant may keep by default.
pub const DEFAULT_QUOTA_BYTES: u64 = 16 << 20;
/// Most keys one `list` call returns.
pub const MAX_LIST: usize = 1000;
/// Longest TTL accepted (a year); longer ones are cut to it.
pub const MAX_TTL_MS: u64 = 365 * 24 * 3600 * 1000;

/// Caps on keys, values and the tenant's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLimits {
    /// Longest key, bytes.
    pub max_key_bytes: usize,
    /// Largest value, bytes.
    pub max_value_bytes: usize,
    /// Key + value bytes the tenant may keep in all.
    pub quota_bytes: u64,
}

impl Default for KvLimits {
    fn default() -> Self {
        Self {
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            quota_bytes: DEFAULT_QUOTA_BYTES,
        }
    }
}

impl KvLimits {
    /// Checks a key a plugin passed.
    pub fn check_key(&self, key: &str) -> Result<(), String> {
        if key.is_empty() {
            return Err("the key is empty".into());
        }
        if key.len() > self.max_key_bytes {
            return Err(format!(
                "the key is {} bytes; the limit is {}",
                key.len(),
                self.max_key_bytes
            ));
        }
        if key.chars().any(char::is_control) {
            return Err("the key contains a control character".into());
        }
        Ok(())
    }

    /// Checks a value a plugin wants to store.
    pub fn check_value(&self, value: &[u8]) -> Result<(), String> {
        if value.len() > self.max_value_bytes {
            return Err(format!(
                "the value is {} bytes; the limit is {}",
                value.len(),
                self.max_value_bytes
            ));
        }
        Ok(())
    }
}

/// The bytes an entry counts against the quota.
pub fn entry_bytes(key: &str, value_len: usize) -> u64 {
    (key.len() + value_len) as u64
}

/// Whether replacing an entry of `old` bytes (0 if new) by one of `new` bytes
/// keeps the tenant, now at `used`, within `quota`. Shrinking always passes.
pub fn fits_quota(used: u64, old: u64, new: u64, quota: u64) -> Result<(), String> {
    if new <= old {
        return Ok(());
    }
    let after = used.saturating_sub(old).saturating_add(new);
    if after > quota {
        return Err(format!(
            "the tenant's key-value quota of {quota} bytes would be exceeded ({used} used, this write needs {} more)",
            new - old
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_and_printable() {
        let l = KvLimits::default();
        assert!(l.check_key("cursor/orders").is_ok());
        assert!(l.check_key("").is_err());
        assert!(l.check_key("a\nb").is_err());
        assert!(
            l.check_key(&"k".repeat(513))
                .unwrap_err()
                .contains("513 bytes")
        );
        assert!(l.check_value(&vec![0; (1 << 20) + 1]).is_err());
        assert!(l.check_value(b"").is_ok());
    }

    #[test]
    fn quota_counts_growth_only() {
        assert!(fits_quota(90, 0, 10, 100).is_ok());
        assert!(
            fits_quota(90, 0, 11, 100)
                .unwrap_err()
                .contains("quota of 100")
        );
        assert!(fits_quota(100, 50, 50, 100).is_ok());
        assert!(
            fits_quota(150, 50, 10, 100).is_ok(),
            "shrinking always passes"
        );
        assert!(fits_quota(95, 5, 10, 100).is_ok());
    }

    #[test]
    fn namespaces_follow_the_scope() {
        assert_eq!(KvNamespace::new("a", "t", KvScope::Tenant).task, None);
        assert_eq!(
            KvNamespace::new("a", "t", KvScope::Task).task.as_deref(),
            Some("t")
        );
    }
}
