//! Gives the heap a burst freed back to the system, every
//! [`TRIM_EVERY`].
//!
//! glibc's allocator keeps freed memory in its arenas (one per thread that
//! allocated, up to eight per core) and returns little of it by itself. After
//! a million runs were queued through `runs:batch` the server's RSS was
//! 730 MiB, and `malloc_trim(0)` called from a debugger brought it to
//! 331 MiB: the request bodies, the records built from them and the tree
//! nodes sled replaced were free but resident. The scheduler's own working
//! set is bounded (docs/SCHEDULER.md, *Memory*); this keeps RSS near it
//! after bursts. On other allocators (musl, macOS) there is nothing to do.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often freed heap is returned.
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Trims every [`TRIM_EVERY`] until `shutdown`.
pub(super) fn spawn(shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TRIM_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            // It walks every arena: not on a worker thread.
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    let started = std::time::Instant::now();
    // SAFETY: malloc_trim takes no pointers and only works on glibc's own
    // heap state, under its own locks; any thread may call it at any time.
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!(released = released != 0, took = ?started.elapsed(), "returned freed heap to the system");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
