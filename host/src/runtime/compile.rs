//! How many compilations run at once, and how many uploads may wait for one.
//!
//! Compiling untrusted input is the most expensive thing ax does for a
//! client: an 18 MiB component takes seconds of CPU and hundreds of MiB of
//! compiler memory, and wasmtime does not promise compile-time DoS
//! resistance. So at most `max_compiles` compilations run at once (others
//! wait their turn), and an upload takes a place in line *before* its body is
//! read: at most `max_compiles + compile_queue` uploads are in progress, the
//! next one is refused at once ([`super::Error::CompileQueueFull`]). That
//! bounds both the compiler's memory and the upload bodies held.
//!
//! A compilation cannot be interrupted (wasmtime has no cancellation for it),
//! so its wall time is bounded only through its input's size
//! (`max_plugin_mb`) and by this gate keeping it to its share of the cores.
//!
//! Loads by the scheduler (a plugin whose artifact is gone) also take a
//! compile permit, but never an upload's place: they wait rather than fail.
//!
//! A tier-up (the optimizing compilation behind a Winch first tier,
//! [`super::tier`]) takes no permit: it starts only when no compilation
//! holds or waits for one ([`Gate::wait_idle`]), one at a time, and a first
//! compilation that arrives while it runs does not wait for it. So at most
//! `max_compiles + 1` compilations run at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Compilations at once by default: half the cores, at least one. Cranelift
/// already spreads one compilation over all cores (`parallel_compilation`),
/// so more at once mostly adds their memory.
pub fn default_max_compiles() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Uploads that may wait for a compilation by default, beyond those
/// compiling. Each holds its body (up to `max_plugin_mb`) while it waits.
pub const DEFAULT_COMPILE_QUEUE: usize = 4;

/// The counters behind the gate.
#[derive(Default)]
struct Counts {
    /// Compilations running (permits out).
    running: usize,
    /// Threads waiting for a permit.
    waiting: usize,
    /// Uploads admitted and not finished.
    uploads: usize,
}

/// The gate: permits for compilations, places for uploads.
pub(crate) struct Gate {
    max_compiles: usize,
    max_uploads: usize,
    counts: Mutex<Counts>,
    freed: Condvar,
    refused: AtomicU64,
}

/// What the gate holds now, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Compilations running.
    pub running: usize,
    /// Loads waiting for a compilation permit.
    pub waiting: usize,
    /// Uploads in progress (reading their body, waiting or compiling).
    pub uploads: usize,
    /// Uploads refused because the line was full, since the start.
    pub refused: u64,
}

impl Gate {
    /// At most `max_compiles` (at least one) compilations at once, and
    /// `max_compiles + queue` uploads in progress.
    pub(crate) fn new(max_compiles: usize, queue: usize) -> Self {
        let max_compiles = max_compiles.max(1);
        Self {
            max_compiles,
            max_uploads: max_compiles.saturating_add(queue),
            counts: Mutex::default(),
            freed: Condvar::new(),
            refused: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        // Plain counters, each update a single statement: a panic elsewhere
        // cannot leave them half-written, so a poisoned lock is safe to use.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for an upload, or `None` when `max_compiles + queue` are in
    /// progress already.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<UploadTicket> {
        let mut counts = self.lock();
        if counts.uploads >= self.max_uploads {
            drop(counts);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        counts.uploads += 1;
        Some(UploadTicket { gate: self.clone() })
    }

    /// Waits (blocking the thread) for a compilation permit.
    pub(crate) fn permit(&self) -> CompilePermit<'_> {
        let mut counts = self.lock();
        counts.waiting += 1;
        while counts.running >= self.max_compiles {
            counts = self
                .freed
                .wait(counts)
                .unwrap_or_else(PoisonError::into_inner);
        }
        counts.waiting -= 1;
        counts.running += 1;
        CompilePermit { gate: self }
    }

    /// Waits (blocking the thread) until no compilation holds or waits for
    /// a permit: a tier-up ([`super::tier`]) starts only then, so a first
    /// compilation never queues behind one.
    pub(crate) fn wait_idle(&self) {
        let mut counts = self.lock();
        while counts.running > 0 || counts.waiting > 0 {
            counts = self
                .freed
                .wait(counts)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> GateStats {
        let counts = self.lock();
        GateStats {
            running: counts.running,
            waiting: counts.waiting,
            uploads: counts.uploads,
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// Uploads that may be in progress at once.
    pub(crate) fn max_uploads(&self) -> usize {
        self.max_uploads
    }
}

/// An upload's place in line; dropping it frees the place.
#[must_use = "the place is freed when the ticket is dropped"]
pub struct UploadTicket {
    gate: Arc<Gate>,
}

impl Drop for UploadTicket {
    fn drop(&mut self) {
        self.gate.lock().uploads -= 1;
    }
}

impl std::fmt::Debug for UploadTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadTicket").finish_non_exhaustive()
    }
}

/// A running compilation's permit; dropping it lets the next one start.
pub(crate) struct CompilePermit<'a> {
    gate: &'a Gate,
}

impl Drop for CompilePermit<'_> {
    fn drop(&mut self) {
        self.gate.lock().running -= 1;
        // All: a waiter for a permit and the tier-up worker waiting for the
        // gate to be idle (`wait_idle`) wait on the same condition variable.
        self.gate.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn uploads_past_compiles_plus_queue_are_refused_until_one_finishes() {
        let gate = Arc::new(Gate::new(1, 2));
        let tickets: Vec<_> = (0..3).map(|_| gate.admit().expect("a place")).collect();
        assert!(
            gate.admit().is_none(),
            "1 compiling + 2 waiting is the line"
        );
        assert_eq!(gate.stats().uploads, 3);
        assert_eq!(gate.stats().refused, 1);
        drop(tickets);
        assert_eq!(gate.stats().uploads, 0);
        assert!(gate.admit().is_some());
    }

    #[test]
    fn at_most_max_compiles_permits_are_out_and_a_freed_one_wakes_a_waiter() {
        let gate = Arc::new(Gate::new(1, 0));
        let first = gate.permit();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let _second = gate.permit();
                tx.send(()).expect("the test waits");
            })
        };
        // The waiter is blocked: it counts as waiting, no second permit is out.
        // (Polling a counter, not timing: it ends when the thread has arrived.)
        while gate.stats().waiting == 0 {
            std::thread::yield_now();
        }
        assert_eq!(gate.stats().running, 1);
        assert!(rx.try_recv().is_err());
        drop(first);
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the waiter got the freed permit");
        waiter.join().expect("the waiter ends");
        assert_eq!(gate.stats(), GateStats::default());
    }
}
