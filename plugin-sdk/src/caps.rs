//! Config, secrets and the key-value store: thin, typed wrappers over the ax
//! world's `config`, `secrets` and `kv` imports. Each works only when the step
//! is granted it (see docs/CAPABILITIES.md); otherwise calls return errors that
//! say which field of the step to add.

/// Config values of the task and step (`config:` in the task definition).
///
/// ```no_run
/// use ax_plugin_sdk::config;
///
/// let endpoint = config::get("endpoint").unwrap_or_else(|| "none".into());
/// let batch: u32 = config::parse("batch_size")?.unwrap_or(100);
/// # Ok::<(), ax_plugin_sdk::Error>(())
/// ```
pub mod config {
    use crate::bindings::ax::plugin::config as wit;
    use crate::{Error, Result};

    /// The value of `key`, if the task or step sets it.
    pub fn get(key: &str) -> Option<String> {
        wit::get(key)
    }

    /// The value of `key` parsed as `T` (`"42"` as a number, `"true"` as a bool).
    /// A value that does not parse is a fatal error naming the key.
    pub fn parse<T: std::str::FromStr>(key: &str) -> Result<Option<T>>
    where
        T::Err: std::fmt::Display,
    {
        get(key)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|e| Error::fatal(format!("config `{key}` = `{v}`: {e}")))
            })
            .transpose()
    }

    /// Every config entry, sorted by key.
    pub fn all() -> Vec<(String, String)> {
        wit::get_all()
    }
}

/// The tenant's secrets, for steps that list them (`secrets: [name]`).
///
/// The host redacts a secret's value from everything it records (stdout,
/// stderr, logs, output, errors), but only exact copies: do not print a
/// secret transformed (encoded, split) and expect it hidden.
///
/// ```no_run
/// use ax_plugin_sdk::secrets;
///
/// let token = secrets::require("chat_token")?;
/// # Ok::<(), ax_plugin_sdk::Error>(())
/// ```
pub mod secrets {
    use crate::bindings::ax::plugin::secrets as wit;
    use crate::{Error, Result};

    /// The secret's value: `None` if the step lists it but the tenant has not
    /// set it; a fatal error if the step does not list it.
    pub fn get(name: &str) -> Result<Option<String>> {
        wit::get(name).map_err(Error::fatal)
    }

    /// Like [`get`], with an unset secret a fatal error too.
    pub fn require(name: &str) -> Result<String> {
        get(name)?.ok_or_else(|| {
            Error::fatal(format!(
                "secret `{name}` is not set for this tenant (PUT /v1/secrets/{name})"
            ))
        })
    }
}

/// The key-value store (`kv: tenant` or `kv: task` on the step): typed values
/// as JSON, optional TTLs, listing by prefix.
///
/// ```no_run
/// use ax_plugin_sdk::kv;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Cursor { last_id: u64 }
///
/// let cursor: Cursor = kv::get("orders/cursor")?.unwrap_or(Cursor { last_id: 0 });
/// kv::set("orders/cursor", &Cursor { last_id: cursor.last_id + 100 })?;
/// kv::set_with_ttl("cache/rates", &vec![1.5, 2.5], std::time::Duration::from_secs(600))?;
/// for key in kv::list("orders/")? {
///     ax_plugin_sdk::log::info(&key);
/// }
/// # Ok::<(), ax_plugin_sdk::Error>(())
/// ```
pub mod kv {
    use std::time::Duration;

    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use crate::bindings::ax::plugin::kv as wit;
    use crate::{Error, Result};

    /// A KV failure as an SDK error: an unavailable store is worth a retry,
    /// the rest (not granted, invalid, over quota) is not.
    fn error(e: wit::KvError) -> Error {
        match e {
            wit::KvError::Denied(m) => Error::fatal(format!("kv: {m}")),
            wit::KvError::Invalid(m) => Error::fatal(format!("kv: {m}")),
            wit::KvError::QuotaExceeded(m) => Error::fatal(format!("kv: {m}")),
            wit::KvError::Unavailable(m) => Error::retryable(format!("kv: {m}")),
        }
    }

    /// The raw bytes under `key`.
    pub fn get_bytes(key: &str) -> Result<Option<Vec<u8>>> {
        wit::get(key).map_err(error)
    }

    /// Stores raw bytes under `key`, with an optional time to live.
    pub fn set_bytes(key: &str, value: &[u8], ttl: Option<Duration>) -> Result<()> {
        let ttl_ms = ttl.map(|d| d.as_millis().clamp(1, u64::MAX as u128) as u64);
        wit::set(key, value, ttl_ms).map_err(error)
    }

    /// The value under `key`, decoded from JSON.
    pub fn get<T: DeserializeOwned>(key: &str) -> Result<Option<T>> {
        get_bytes(key)?
            .map(|bytes| {
                serde_json::from_slice(&bytes)
                    .map_err(|e| Error::fatal(format!("kv: `{key}` does not decode: {e}")))
            })
            .transpose()
    }

    /// Stores `value` as JSON under `key`.
    pub fn set<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<()> {
        set_bytes(key, &serde_json::to_vec(value)?, None)
    }

    /// Stores `value` as JSON under `key` for `ttl`.
    pub fn set_with_ttl<T: Serialize + ?Sized>(key: &str, value: &T, ttl: Duration) -> Result<()> {
        set_bytes(key, &serde_json::to_vec(value)?, Some(ttl))
    }

    /// Removes `key`; `true` if a value was there.
    pub fn delete(key: &str) -> Result<bool> {
        wit::delete(key).map_err(error)
    }

    /// Keys starting with `prefix`, in byte order (at most 1000).
    pub fn list(prefix: &str) -> Result<Vec<String>> {
        wit::list_keys(prefix).map_err(error)
    }
}
