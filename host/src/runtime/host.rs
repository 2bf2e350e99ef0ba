//! What lives inside one attempt's `Store`: the WASI context, the memory
//! limiter, captured logs and progress, the deadline, the attempt's grants.
//! Also the ax host imports plugins call: `log`, `progress`, and the
//! capabilities `config`, `secrets` and `kv` (outbound HTTP is in [`super::http`]).
//!
//! KV calls reach the store synchronously: a sled read or write takes
//! microseconds, less than handing it to a blocking thread would.

use std::collections::BTreeMap;
use std::sync::PoisonError;
use std::time::Instant;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::ax::plugin::{config, kv, log, progress, secrets, types};
use super::http::{HttpHooks, SharedLogs};
use super::record::Tape;
use crate::capability::KvGrant;
use crate::capability::kv::MAX_LIST;
use crate::capability::kv::{KvBackendError, SetOutcome};
use crate::model::record::KvOp;
use crate::model::{LogLevel, LogRecord, Progress};

/// Caps on the other instance resources a plugin could ask for. Generous for
/// real components (a Rust plugin uses ~4 instances and a few tables), small
/// enough that a hostile one cannot pile them up.
const MAX_INSTANCES: usize = 64;
const MAX_TABLES: usize = 64;
const MAX_MEMORIES: usize = 8;
const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Longest progress note kept.
const MAX_NOTE: usize = 256;

/// The per-attempt state of a `Store`.
pub(crate) struct HostState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    /// Shared with HTTP request futures, which log denials and cuts.
    pub(crate) logs: SharedLogs,
    pub(crate) http: WasiHttpCtx,
    pub(crate) hooks: HttpHooks,
    pub(crate) config: BTreeMap<String, String>,
    /// Listed secret names, with the value where the tenant set one.
    pub(crate) secrets: BTreeMap<String, Option<String>>,
    pub(crate) kv: Option<KvGrant>,
    pub(crate) progress: Option<Progress>,
    pub(crate) started: Instant,
    /// When the attempt's wall-clock budget ends; checked at every epoch tick.
    pub(crate) deadline: Instant,
    /// Set by the epoch callback when it interrupts the guest for its deadline.
    pub(crate) timed_out: bool,
    /// Where boundary values are recorded or replayed from, if anywhere.
    pub(crate) tape: Option<Tape>,
}

impl HostState {
    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// Caps the total linear memory of an instance and remembers a refused grow,
/// which is what tells `memory_exceeded` apart from an ordinary trap: a guest
/// whose allocation fails aborts with the same `unreachable` as a panic.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    cap: u64,
    total: u64,
    peak: u64,
    denied: Option<u64>,
}

impl MemoryLimiter {
    pub(crate) fn new(cap: u64) -> Self {
        Self {
            cap,
            total: 0,
            peak: 0,
            denied: None,
        }
    }

    /// The largest total linear memory reached.
    pub(crate) fn peak(&self) -> u64 {
        self.peak
    }

    /// The total that a refused grow asked for, if any grow was refused.
    pub(crate) fn denied(&self) -> Option<u64> {
        self.denied
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let wanted = self.total + (desired as u64).saturating_sub(current as u64);
        if wanted > self.cap || maximum.is_some_and(|max| desired > max) {
            self.denied = Some(wanted);
            return Ok(false);
        }
        self.total = wanted;
        self.peak = self.peak.max(wanted);
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // The grow was allowed here but failed in the allocator (the pool's slot
        // is smaller than asked): for the plugin it is the same denial.
        self.denied = Some(self.total);
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        let level = match level {
            log::Level::Trace => LogLevel::Trace,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Info => LogLevel::Info,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Error => LogLevel::Error,
        };
        let at_ms = self.elapsed_ms();
        // A poisoned lock only means a logging call panicked; the sink is intact.
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(LogRecord {
                at_ms,
                level,
                message,
                fields,
            });
    }
}

impl config::Host for HostState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }

    fn get_all(&mut self) -> Vec<(String, String)> {
        self.config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

impl secrets::Host for HostState {
    fn get(&mut self, name: String) -> Result<Option<String>, String> {
        match self.secrets.get(&name) {
            Some(value) => Ok(value.clone()),
            None => Err(format!(
                "secret `{name}` is not granted to this step (list it in the step's `secrets`)"
            )),
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl HostState {
    fn kv_grant(&self) -> Result<&KvGrant, kv::KvError> {
        self.kv.as_ref().ok_or_else(|| {
            kv::KvError::Denied(
                "this step has no key-value store (declare `kv: tenant` or `kv: task`)".into(),
            )
        })
    }
}

fn unavailable(e: KvBackendError) -> kv::KvError {
    kv::KvError::Unavailable(format!("the key-value store failed: {e}"))
}

impl kv::Host for HostState {
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, kv::KvError> {
        match self.tape.clone() {
            Some(tape) => tape.kv(KvOp::Get, &key, || self.kv_get(key.clone())),
            None => self.kv_get(key),
        }
    }

    fn set(&mut self, key: String, value: Vec<u8>, ttl_ms: Option<u64>) -> Result<(), kv::KvError> {
        match self.tape.clone() {
            Some(tape) => tape.kv(KvOp::Set, &key, || self.kv_set(key.clone(), value, ttl_ms)),
            None => self.kv_set(key, value, ttl_ms),
        }
    }

    fn delete(&mut self, key: String) -> Result<bool, kv::KvError> {
        match self.tape.clone() {
            Some(tape) => tape.kv(KvOp::Delete, &key, || self.kv_delete(key.clone())),
            None => self.kv_delete(key),
        }
    }

    fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, kv::KvError> {
        match self.tape.clone() {
            Some(tape) => tape.kv(KvOp::ListKeys, &prefix, || self.kv_list(prefix.clone())),
            None => self.kv_list(prefix),
        }
    }
}

/// The KV calls against the store (a tape, when there is one, records them
/// or answers in their place).
impl HostState {
    fn kv_get(&mut self, key: String) -> Result<Option<Vec<u8>>, kv::KvError> {
        let grant = self.kv_grant()?;
        grant.limits.check_key(&key).map_err(kv::KvError::Invalid)?;
        grant
            .store
            .get(&grant.namespace, &key, now_ms())
            .map_err(unavailable)
    }

    fn kv_set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), kv::KvError> {
        let grant = self.kv_grant()?;
        grant.limits.check_key(&key).map_err(kv::KvError::Invalid)?;
        grant
            .limits
            .check_value(&value)
            .map_err(kv::KvError::Invalid)?;
        let now = now_ms();
        let expires_at = match ttl_ms {
            None => None,
            Some(0) => return Err(kv::KvError::Invalid("a TTL must be above zero".into())),
            Some(ttl) => Some(now + ttl.min(crate::capability::kv::MAX_TTL_MS) as i64),
        };
        match grant
            .store
            .set(
                &grant.namespace,
                &key,
                &value,
                expires_at,
                grant.limits.quota_bytes,
                now,
            )
            .map_err(unavailable)?
        {
            SetOutcome::Stored => Ok(()),
            SetOutcome::OverQuota(why) => Err(kv::KvError::QuotaExceeded(why)),
        }
    }

    fn kv_delete(&mut self, key: String) -> Result<bool, kv::KvError> {
        let grant = self.kv_grant()?;
        grant.limits.check_key(&key).map_err(kv::KvError::Invalid)?;
        grant
            .store
            .delete(&grant.namespace, &key, now_ms())
            .map_err(unavailable)
    }

    fn kv_list(&mut self, prefix: String) -> Result<Vec<String>, kv::KvError> {
        let grant = self.kv_grant()?;
        if prefix.len() > grant.limits.max_key_bytes {
            return Err(kv::KvError::Invalid(
                "the prefix is longer than a key may be".into(),
            ));
        }
        grant
            .store
            .list(&grant.namespace, &prefix, MAX_LIST, now_ms())
            .map_err(unavailable)
    }
}

impl progress::Host for HostState {
    fn report(&mut self, percent: u8, mut note: String) {
        super::capture::truncate_utf8(&mut note, MAX_NOTE);
        self.progress = Some(Progress {
            percent: percent.min(100),
            note,
            at_ms: self.elapsed_ms(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_caps_the_total_and_records_the_denial() {
        let mut limiter = MemoryLimiter::new(100);
        assert!(limiter.memory_growing(0, 60, None).unwrap());
        assert!(limiter.memory_growing(0, 30, None).unwrap());
        assert!(!limiter.memory_growing(30, 50, None).unwrap());
        assert_eq!(limiter.denied(), Some(110));
        assert_eq!(limiter.peak(), 90);
    }

    #[test]
    fn limiter_without_denial_reports_none() {
        let mut limiter = MemoryLimiter::new(100);
        assert!(limiter.memory_growing(0, 100, None).unwrap());
        assert_eq!(limiter.denied(), None);
        assert_eq!(limiter.peak(), 100);
    }
}
