//! Group commit: writes land in sled at once and reach the disk in groups.
//! A [`SyncTicket`] asks one flusher thread to call sled's `flush` and waits,
//! on a `watch` channel, until a flush that started after the ticket's writes
//! has finished. sled's own `flush_async` is never used: many concurrent
//! callers hang it (sled#1308).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

use super::engine::{Db, EngineKind};
use super::lock;
use crate::store::{Error, SyncTicket};

/// Pause before retrying a flush that failed (a full disk, say): long enough
/// not to spin, short enough that waiters resume soon after space is freed.
const FLUSH_RETRY: Duration = Duration::from_millis(100);

/// Group commit state shared by writers, tickets and the flusher thread.
pub(super) struct SyncShared {
    /// Writes completed so far; bumped after each write lands in sled.
    written: AtomicU64,
    /// What the flusher is asked to do.
    request: Mutex<FlushRequest>,
    /// Wakes the flusher when `request` changes.
    wake: Condvar,
    /// What has been flushed, for tickets to wait on.
    status: watch::Sender<FlushStatus>,
}

#[derive(Default)]
struct FlushRequest {
    /// Flush until at least this many writes are on disk.
    up_to: u64,
    /// Flush once more and exit.
    stop: bool,
}

#[derive(Clone, Debug, Default)]
struct FlushStatus {
    /// Writes on disk.
    flushed: u64,
    /// The last flush failed: writes up to `.0` are not known to be on disk.
    failure: Option<(u64, String)>,
}

/// Starts the flusher thread of the database `db` in `data_dir`.
pub(super) fn start(
    db: &Db,
    data_dir: &Path,
) -> std::io::Result<(Arc<SyncShared>, JoinHandle<()>)> {
    let (status, _) = watch::channel(FlushStatus::default());
    let sync = Arc::new(SyncShared {
        written: AtomicU64::new(0),
        request: Mutex::new(FlushRequest::default()),
        wake: Condvar::new(),
        status,
    });
    // sled 0.34 keeps its log in `db/db`. Without it tickets still wait
    // for sled's flush (safe against a killed process), so go on. fjall's
    // flush syncs its journal itself.
    let log = (db.kind() == EngineKind::Sled)
        .then(|| {
            let log_path = data_dir.join("db").join("db");
            File::open(&log_path)
                .inspect_err(|e| {
                    tracing::warn!(path = %log_path.display(), error = %e,
                        "cannot open sled's log file to fsync it; flushes will not fsync")
                })
                .ok()
        })
        .flatten();
    let flusher = {
        let (db, sync) = (db.clone(), Arc::clone(&sync));
        std::thread::Builder::new()
            .name("ax-store-flush".to_owned())
            .spawn(move || run_flusher(&db, log.as_ref(), &sync))?
    };
    Ok((sync, flusher))
}

impl SyncShared {
    /// Counts a completed write, for [`SyncShared::ticket`].
    pub(super) fn count_write(&self) {
        self.written.fetch_add(1, Ordering::SeqCst);
    }

    /// A ticket resolving once every write counted so far is on disk.
    pub(super) fn ticket(&self) -> SyncTicket {
        let target = self.written.load(Ordering::SeqCst);
        let mut status = self.status.subscribe();
        if status.borrow().flushed >= target {
            return SyncTicket::ready();
        }
        {
            let mut request = lock(&self.request);
            request.up_to = request.up_to.max(target);
        }
        self.wake.notify_one();
        SyncTicket::new(async move {
            let outcome = status
                .wait_for(|s| {
                    s.flushed >= target || s.failure.as_ref().is_some_and(|f| f.0 >= target)
                })
                .await
                .map(|s| {
                    if s.flushed >= target {
                        Ok(())
                    } else {
                        Err(s.failure.clone())
                    }
                });
            match outcome {
                Ok(Ok(())) => Ok(()),
                // A full disk or an I/O error: the writes may reach the disk
                // later (or be lost if the database is reopened).
                Ok(Err(failure)) => Err(Error::Unavailable(format!(
                    "flushing the store to disk failed: {}",
                    failure.map(|f| f.1).unwrap_or_default()
                ))),
                Err(_closed) => Err(Error::Unavailable(
                    "the store was closed before the write reached the disk".to_owned(),
                )),
            }
        })
    }

    /// Asks the flusher for a last flush, after which it exits.
    pub(super) fn stop(&self) {
        lock(&self.request).stop = true;
        self.wake.notify_one();
    }
}

/// The flusher thread: flushes whenever a ticket asks for writes not yet on
/// disk, then publishes how far it got. One flush covers every write made
/// before it started, so all tickets waiting meanwhile are served at once.
///
/// sled's `flush` writes its log with `sync_file_range`, which neither
/// flushes the device's write cache nor makes the file's new length durable;
/// enough for a killed process, not for a power cut. So each flush is
/// followed by an `fdatasync` of sled's log file (`log`, opened by us: an
/// fsync applies to the file, whichever descriptor asks).
fn run_flusher(db: &Db, log: Option<&File>, sync: &SyncShared) {
    let mut flushed = 0;
    loop {
        let stop = {
            let mut request = lock(&sync.request);
            while request.up_to <= flushed && !request.stop {
                request = sync
                    .wake
                    .wait(request)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            request.stop
        };
        // Read before flushing: every write counted here has landed in sled,
        // so the flush below covers it.
        let target = sync.written.load(Ordering::SeqCst);
        let outcome = db
            .flush()
            .map_err(|e| e.to_string())
            .and_then(|_| match log {
                Some(log) => log.sync_data().map_err(|e| e.to_string()),
                None => Ok(()),
            });
        match outcome {
            Ok(()) => {
                flushed = target;
                sync.status.send_modify(|s| {
                    s.flushed = target;
                    s.failure = None;
                });
            }
            Err(e) => {
                tracing::error!(error = %e, "flushing the store to disk failed; retrying");
                sync.status.send_modify(|s| s.failure = Some((target, e)));
                if !stop {
                    std::thread::sleep(FLUSH_RETRY);
                }
            }
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::super::SledStore;
    use super::super::fixtures::{event, run};
    use crate::model::RunStatus;
    use crate::store::prelude::*;

    #[test]
    fn a_ticket_resolves_once_the_writes_are_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            store.put_meta("k", "v").unwrap();
            let ticket = store.sync_ticket();
            tokio::time::timeout(Duration::from_secs(10), ticket.wait())
                .await
                .expect("the ticket resolves")
                .unwrap();
            let status = store.sync.status.borrow().clone();
            assert!(status.flushed >= 1, "{status:?}");
        });
    }

    #[test]
    fn many_concurrent_tickets_all_resolve_promptly() {
        // The case that hangs with sled's `flush_async` (sled#1308): many
        // tasks waiting for durability at once on a small runtime.
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path()).unwrap());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let started = Instant::now();
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..64 {
                let store = Arc::clone(&store);
                tasks.spawn(async move {
                    for n in 0..5 {
                        let r = run(&format!("r{t:03}{n:03}"), RunStatus::Queued);
                        store
                            .insert_run(&r, false, None, &[event(&r.id, "queued")])
                            .unwrap();
                        store.sync_ticket().wait().await.unwrap();
                    }
                });
            }
            let all = async {
                while let Some(done) = tasks.join_next().await {
                    done.unwrap();
                }
            };
            tokio::time::timeout(Duration::from_secs(20), all)
                .await
                .expect("every ticket resolves");
        });
        assert_eq!(store.active_runs().unwrap().len(), 320);
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn dropping_the_store_stops_the_flusher_and_releases_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..3 {
            let store = SledStore::open(dir.path()).unwrap();
            store.put_meta("round", &round.to_string()).unwrap();
            let flusher = store.flusher.as_ref().unwrap().thread().clone();
            assert_eq!(flusher.name(), Some("ax-store-flush"));
            drop(store);
            // Reopening at once works only if the flusher's database handle is gone.
        }
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(store.get_meta("round").unwrap().as_deref(), Some("2"));
    }

    /// Throughput of the run write path with durability: 8 tasks, each
    /// inserting a run (awaiting a sync ticket) then updating it twice.
    /// Not a test: run by hand with
    /// `cargo test --release -- --ignored --nocapture durable_run_throughput`.
    #[test]
    #[ignore]
    fn durable_run_throughput() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path()).unwrap());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let per_task = 2_500;
        let started = Instant::now();
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..8 {
                let store = Arc::clone(&store);
                tasks.spawn(async move {
                    for n in 0..per_task {
                        let mut r = run(&format!("r{t:03}{n:08}"), RunStatus::Queued);
                        store
                            .insert_run(&r, false, None, &[event(&r.id, "queued")])
                            .unwrap();
                        store.sync_ticket().wait().await.unwrap();
                        r.status = RunStatus::Running;
                        let events = [event(&r.id, "running")];
                        store.update_run(&mut r, &events).unwrap();
                        r.status = RunStatus::Succeeded;
                        let events = [event(&r.id, "succeeded")];
                        store.update_run(&mut r, &events).unwrap();
                    }
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        });
        let elapsed = started.elapsed();
        let runs = 8 * per_task;
        println!(
            "{runs} runs (insert + ticket + 2 updates) in {elapsed:?}: {:.0} runs/s",
            runs as f64 / elapsed.as_secs_f64()
        );
    }
}
