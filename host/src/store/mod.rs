//! Durable state behind one domain-level seam: tasks, plugins, runs (with
//! their step runs and attempts), events, schedules, idempotency keys, dead
//! letters, attempt logs. The scheduler and the API see only [`Store`]; sled
//! appears only in [`sled`], so a PostgreSQL store can be added beside it.
//!
//! [`Store`] is the sum of a few traits, one per concept, which a backend
//! implements (docs/ARCHITECTURE.md, *The store seam*):
//! - [`Catalog`]: plugin blobs and versions, tags, tasks, schedules;
//! - [`Runs`]: runs, their events, logs and attempt records, the persistent
//!   queue, idempotency keys, dead letters;
//! - [`Outbox`]: the alert outbox;
//! - [`Tenancy`]: tenants, tokens, usage;
//! - [`Leases`]: who does the work only one process may do (retention,
//!   alert delivery), until when;
//! - [`Operations`]: durability tickets, metadata, size, health;
//! - [`Backup`]: the capability maps (KV, secrets) read whole and restored
//!   verbatim, for [`dump`] (`ax store export` / `import`).
//!
//! [`StoreExt`] derives the conveniences (one run, one task, whole-store
//! listings) from them for every store; [`rules`] holds what every store
//! must decide the same way (ids, queue order, digests, paging);
//! [`guard::Layered`] is the one way to wrap a store (the fault guard of
//! `ax serve`, the fault switch of tests). Every backend passes the same
//! conformance suite (`store/conformance`).
//!
//! Durability: writes land in the store at once but reach the disk in groups.
//! Whoever must not answer a client before a write is on disk takes a
//! [`SyncTicket`] after writing and awaits it (group commit: one flusher
//! thread, many waiters).

mod backup;
mod catalog;
pub mod dump;
mod error;
mod ext;
pub mod faults;
pub mod guard;
pub mod kv;
mod leases;
pub mod memory;
mod operations;
mod outbox;
pub mod postgres;
mod resolve;
pub mod rules;
mod runs;
pub mod secrets;
pub mod sled;
mod tenancy;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

pub use self::backup::{Backup, Tree};
pub use self::catalog::Catalog;
pub use self::error::{Error, Result};
pub use self::ext::StoreExt;
pub use self::leases::{Lease, Leases};
pub use self::operations::{Operations, PoolHealth, StoreHealth, StoreKind, SyncTicket};
pub use self::outbox::{AlertQuery, AlertStatus, Outbox, OutboxAlert};
pub use self::resolve::{Unresolved, resolve_plugin};
pub use self::rules::{id_millis, new_id};
pub use self::runs::{
    AttemptLogs, Changed, DumpJson, Insert, JsonSpans, KeyEntry, NewRun, RunLogs, RunPage,
    RunQuery, RunSummary, RunWrite, Runs, WholeRun, claims_fire, restore_by_inserts,
    trigger_claims_fire,
};
pub use self::sled::{EngineKind, SledStore};
pub use self::tenancy::Tenancy;

/// The domain-level store: every concept's trait. Calls are synchronous and
/// short (µs): callers on async threads call them directly; nothing here
/// waits for the disk except [`SyncTicket::wait`]. Implemented for every
/// type that implements the concepts.
pub trait Store:
    Catalog + Runs + Outbox + Tenancy + Leases + Operations + Backup + Send + Sync + 'static
{
}

impl<T> Store for T where
    T: Catalog + Runs + Outbox + Tenancy + Leases + Operations + Backup + Send + Sync + 'static
{
}

/// Every trait of the seam, for code that calls a store by its concrete type
/// (`use crate::store::prelude::*`): concept traits' methods need their
/// trait in scope there, and the conveniences need [`StoreExt`].
pub mod prelude {
    pub use super::{Backup, Catalog, Leases, Operations, Outbox, Runs, Store, StoreExt, Tenancy};
}
