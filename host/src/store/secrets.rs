//! Per-tenant secrets: the [`SecretStore`] trait over the same ordered maps
//! as the KV store, in a sled tree of their own (`secrets`), apart from task
//! definitions, runs and logs: nothing that reads those can reach a secret.
//!
//! Values are written by the API (`PUT /v1/secrets/{name}`) and read only by
//! the runner, for a step that lists the secret. Listing returns names and
//! update instants, never values. Values are stored as written: the data
//! directory must be protected like the credentials it holds (docs/CAPABILITIES.md).

use serde::{Deserialize, Serialize};

use super::kv::{MemoryMap, OrderedMap, SledMap};
use super::sled::engine::Db;
use super::{Error, Result};
use crate::model::Millis;

/// A secret as listed: no value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretInfo {
    /// The secret's name.
    pub name: String,
    /// When it was last set.
    pub updated_at: Millis,
}

/// Where tenants' secrets live.
pub trait SecretStore: Send + Sync + 'static {
    /// Sets (creates or replaces) a secret; says whether it was new.
    fn put_secret(&self, tenant: &str, name: &str, value: &str, now: Millis) -> Result<bool>;
    /// A secret's value (for the runner only).
    fn get_secret(&self, tenant: &str, name: &str) -> Result<Option<String>>;
    /// The tenant's secrets, by name, without values.
    fn list_secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>>;
    /// Removes a secret; says whether it existed.
    fn delete_secret(&self, tenant: &str, name: &str) -> Result<bool>;
}

#[derive(Serialize, Deserialize)]
struct Stored {
    value: String,
    updated_at: Millis,
}

/// The secret algorithm over any ordered map.
pub struct SecretEngine<M> {
    map: M,
}

/// Secrets kept in memory.
pub type MemorySecrets = SecretEngine<MemoryMap>;
/// Secrets in a sled tree.
pub type SledSecrets = SecretEngine<SledMap>;

impl Default for MemorySecrets {
    fn default() -> Self {
        Self {
            map: MemoryMap::default(),
        }
    }
}

impl SledSecrets {
    /// The tree `secrets` of an open database.
    pub(crate) fn in_db(db: &Db, on_write: Option<super::kv::WriteHook>) -> Result<Self> {
        Ok(Self {
            map: SledMap::open(db, "secrets", on_write)?,
        })
    }
}

impl<M: OrderedMap> SecretEngine<M> {
    /// Secrets over `map` (the PostgreSQL store builds them over its own
    /// map).
    pub(crate) fn with_map(map: M) -> Self {
        Self { map }
    }

    /// The map it runs over (a whole-store dump reads and restores it
    /// verbatim: [`super::Backup`]).
    pub(crate) fn map(&self) -> &M {
        &self.map
    }
}

fn key(tenant: &str, name: &str) -> Vec<u8> {
    let mut k = tenant.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(name.as_bytes());
    k
}

fn read(raw_key: &[u8], raw: &[u8]) -> Result<Stored> {
    serde_json::from_slice(raw).map_err(|e| Error::Corrupt {
        // The key names tenant and secret, never the value.
        key: String::from_utf8_lossy(raw_key).replace('\0', "/"),
        reason: format!("unreadable secret record: {}", e.classify_name()),
    })
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    // The error's text could quote the value; only its class is reported.
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O",
            serde_json::error::Category::Syntax => "syntax",
            serde_json::error::Category::Data => "data",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

impl<M: OrderedMap> SecretStore for SecretEngine<M> {
    fn put_secret(&self, tenant: &str, name: &str, value: &str, now: Millis) -> Result<bool> {
        let k = key(tenant, name);
        let existed = self.map.get(&k)?.is_some();
        let raw = serde_json::to_vec(&Stored {
            value: value.to_owned(),
            updated_at: now,
        })
        .map_err(|e| Error::Backend(format!("encoding a secret: {}", e.classify_name())))?;
        self.map.insert(&k, &raw)?;
        Ok(!existed)
    }

    fn get_secret(&self, tenant: &str, name: &str) -> Result<Option<String>> {
        let k = key(tenant, name);
        self.map
            .get(&k)?
            .map(|raw| read(&k, &raw).map(|s| s.value))
            .transpose()
    }

    fn list_secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>> {
        let mut prefix = tenant.as_bytes().to_vec();
        prefix.push(0);
        self.map
            .scan(&prefix, usize::MAX)?
            .into_iter()
            .map(|(k, raw)| {
                Ok(SecretInfo {
                    name: String::from_utf8_lossy(&k[prefix.len()..]).into_owned(),
                    updated_at: read(&k, &raw)?.updated_at,
                })
            })
            .collect()
    }

    fn delete_secret(&self, tenant: &str, name: &str) -> Result<bool> {
        let k = key(tenant, name);
        let existed = self.map.get(&k)?.is_some();
        self.map.remove(&k)?;
        Ok(existed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What every secret store does (run on each store).
    pub(crate) fn conformance(s: &dyn SecretStore) {
        assert!(s.put_secret("a", "api", "v1", 10).unwrap());
        assert!(!s.put_secret("a", "api", "v2", 20).unwrap());
        s.put_secret("ab", "api", "other", 5).unwrap();
        s.put_secret("a", "db", "pw", 30).unwrap();
        assert_eq!(s.get_secret("a", "api").unwrap().as_deref(), Some("v2"));
        assert_eq!(s.get_secret("b", "api").unwrap(), None);
        assert_eq!(
            s.list_secrets("a").unwrap(),
            vec![
                SecretInfo {
                    name: "api".into(),
                    updated_at: 20
                },
                SecretInfo {
                    name: "db".into(),
                    updated_at: 30
                },
            ]
        );
        assert!(s.delete_secret("a", "api").unwrap());
        assert!(!s.delete_secret("a", "api").unwrap());
        assert_eq!(s.get_secret("a", "api").unwrap(), None);
        assert_eq!(s.get_secret("ab", "api").unwrap().as_deref(), Some("other"));
    }

    #[test]
    fn memory_secrets_conform() {
        conformance(&MemorySecrets::default());
    }

    #[test]
    fn sled_secrets_conform() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_default(dir.path()).unwrap();
        conformance(&SledSecrets::in_db(&db, None).unwrap());
    }
}
