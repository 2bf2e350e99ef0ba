//! [`Operations`]: what keeps a store running rather than what it stores —
//! durability tickets, metadata, the capability stores it hands out, its
//! size, and whether it writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Result;
use super::kv::KvStore;
use super::secrets::SecretStore;

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
}
