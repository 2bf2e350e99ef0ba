//! [`Faults`]: a fault-injecting store wrapper for tests. While its switch
//! is on, every write (and every sync ticket) fails with an I/O error
//! ("no space left on device") and changes nothing; reads go through
//! unless [`Faults::fail_reads`] (a database that is away refuses both). It
//! can also report damage, as sled's read of every entry does
//! ([`Operations::damage`](crate::store::Operations::damage)).
//! Wrapped in a [`super::guard::Guarded`] it behaves as a full disk does
//! under `ax serve`, minus the reopen (the memory store needs none).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::guard::{Layer, Layered};
use super::{Error, Result, Store, SyncTicket};

/// The switch and counters of a [`Faulty`] store.
pub struct Faults {
    inner: Arc<dyn Store>,
    failing: Arc<AtomicBool>,
    failing_reads: AtomicBool,
    refused: AtomicU64,
    damage: Mutex<Option<String>>,
}

/// A store whose writes fail while its switch is on ([`Faults`]).
pub type Faulty = Layered<Faults>;

impl Faulty {
    /// Wraps `inner`, writing normally until [`Faults::fail`].
    pub fn wrap(inner: Arc<dyn Store>) -> Self {
        Layered::new(Faults {
            inner,
            failing: Arc::new(AtomicBool::new(false)),
            failing_reads: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            damage: Mutex::new(None),
        })
    }
}

impl Faults {
    /// Turns the fault on (every write refused) or off.
    pub fn fail(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }

    /// Turns on (every read refused as unavailable, as a database that is
    /// away refuses it) or off.
    pub fn fail_reads(&self, on: bool) {
        self.failing_reads.store(on, Ordering::SeqCst);
    }

    /// Reports `reason` as damage found in the store from now on.
    pub fn damaged(&self, reason: &str) {
        *self.damage.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.to_owned());
    }

    /// Writes refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    fn refuse(&self) -> Error {
        self.refused.fetch_add(1, Ordering::SeqCst);
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            "injected fault: no space left on device",
        ))
    }
}

impl Layer for Faults {
    fn inner(&self) -> Result<Arc<dyn Store>> {
        Ok(self.inner.clone())
    }

    fn damage(&self) -> Option<String> {
        self.damage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn read<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T>) -> Result<T> {
        if self.failing_reads.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(Error::Unavailable(
                "injected fault: the database is away".into(),
            ));
        }
        f(&*self.inner)
    }

    fn write<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T>) -> Result<T> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(self.refuse());
        }
        f(&*self.inner)
    }

    fn ticket(&self) -> SyncTicket {
        if self.failing.load(Ordering::SeqCst) {
            let e = self.refuse();
            return SyncTicket::new(async move { Err(e) });
        }
        self.inner.sync_ticket()
    }
}
