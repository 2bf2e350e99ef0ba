//! [`Operations`]: what keeps a store running rather than what it stores —
//! durability tickets, metadata, the capability stores it hands out, its
//! size, whether it writes, and what it is ([`StoreHealth`]: its kind, where
//! it lives and, for a store over a connection pool, the pool's use).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Result;
use super::kv::KvStore;
use super::secrets::SecretStore;
use crate::metrics::Histogram;

/// Resolves once every write made before the ticket was taken is on disk.
pub struct SyncTicket(Pin<Box<dyn Future<Output = Result<()>> + Send>>);

impl SyncTicket {
    /// A ticket that is already satisfied (stores without a disk).
    pub fn ready() -> Self {
        Self(Box::pin(async { Ok(()) }))
    }

    /// A ticket resolved by `fut`.
    pub fn new(fut: impl Future<Output = Result<()>> + Send + 'static) -> Self {
        Self(Box::pin(fut))
    }

    /// Waits until the writes are durable.
    pub async fn wait(self) -> Result<()> {
        self.0.await
    }
}

/// Which implementation of the seam a store is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded default: sled in the data directory.
    Sled,
    /// The embedded store on its second engine, fjall (`store.engine:
    /// fjall`): the same store as [`StoreKind::Sled`] over another engine.
    Fjall,
    /// A PostgreSQL database (`--store postgres://…`).
    Postgres,
    /// Nothing on disk (tests, the simulator).
    Memory,
}

impl StoreKind {
    /// `sled`, `fjall`, `postgres` or `memory`, as `/readyz`, `/metrics`
    /// and `ax status` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Sled => "sled",
            StoreKind::Fjall => "fjall",
            StoreKind::Postgres => "postgres",
            StoreKind::Memory => "memory",
        }
    }
}

/// What a store says of itself for the probes, `/metrics` and `ax status`:
/// cheap to take (no I/O; counters read from atomics).
#[derive(Debug, Clone)]
pub struct StoreHealth {
    /// Which store.
    pub kind: StoreKind,
    /// Where it lives, fit to show: the data directory, or the database's
    /// URL without its password.
    pub location: String,
    /// The connection pool of a store that has one (PostgreSQL).
    pub pool: Option<PoolHealth>,
}

impl StoreHealth {
    /// A store without a pool.
    pub fn new(kind: StoreKind, location: impl Into<String>) -> Self {
        Self {
            kind,
            location: location.into(),
            pool: None,
        }
    }
}

/// The use of a store's connection pool, since the process started.
#[derive(Debug, Clone)]
pub struct PoolHealth {
    /// Connections open now (in use or idle).
    pub open: usize,
    /// Connections taken by a call now.
    pub in_use: usize,
    /// Connections the pool opens at most (`store.connections`).
    pub max: usize,
    /// Connections that could not be opened or were found broken.
    pub connection_errors: u64,
    /// Statements the seam's calls ran (a transaction's `BEGIN` and
    /// `COMMIT` included): what docs/POSTGRES.md counts per run.
    pub statements: u64,
    /// Seam calls timed from asking for a connection to giving it back
    /// (the wait for a free one included), seconds.
    pub calls: Arc<Histogram>,
}

/// Durability, metadata and health of a store.
pub trait Operations {
    /// A ticket resolving once every write made so far is on disk.
    fn sync_ticket(&self) -> SyncTicket;
    /// Reads a metadata value (admin token hash, format markers…).
    fn get_meta(&self, key: &str) -> Result<Option<String>>;
    /// Writes a metadata value.
    fn put_meta(&self, key: &str, value: &str) -> Result<()>;
    /// The plugins' key-value store (see [`super::kv`]).
    fn kv(&self) -> Arc<dyn KvStore>;
    /// Tenants' secrets (see [`super::secrets`]).
    fn secrets(&self) -> Arc<dyn SecretStore>;
    /// Bytes the store occupies on disk (0 in memory).
    fn size_on_disk(&self) -> u64;
    /// Whether the last write succeeded (false from a write refused with an
    /// [`super::Error::is_unavailable`] error until one succeeds again). A
    /// store that does not track it is always writable; see
    /// [`super::guard::Guarded`].
    fn writable(&self) -> bool {
        true
    }
    /// What a check of the whole database found damaged, with what to do
    /// about it; `None` while nothing is found (sled reads every entry once
    /// after opening, on a thread of its own: `store/sled/open.rs`).
    fn damage(&self) -> Option<String> {
        None
    }
    /// Bumped each time the store reopened its database after a fault, which
    /// loses the writes not yet on disk (as a crash would): whoever holds
    /// state derived from the store rebuilds it from the store then.
    fn generation(&self) -> u64 {
        0
    }
    /// Which store this is and how its connections fare. A store that says
    /// nothing is one without a disk or a pool.
    fn health(&self) -> StoreHealth {
        StoreHealth::new(StoreKind::Memory, "memory")
    }
}
