//! Tier-ups: the optimizing compilation behind a Winch first tier.
//!
//! With tiering on ([`super::Tiering`]), a large component is compiled with
//! Winch first (seconds of CPU less than Cranelift for an 18 MiB one), kept
//! loaded and served at once, and queued here. One worker thread compiles
//! the queue with the configured compiler, one component at a time, and
//! replaces each loaded entry with the optimized plugin: the attempts that
//! start afterwards run on Cranelift's code, those that hold the Winch
//! plugin already finish on it (a [`super::Plugin`] is an `Arc`, and it keeps
//! its own engine). The optimized artifact is then the one kept on disk and
//! the Winch artifact is deleted, so a restart loads Cranelift's code; a
//! restart before that loads the Winch artifact and tiers up again.
//!
//! It does not decide what is compiled first (`plugin.rs` does), nor bound
//! first compilations (the gate, [`super::compile`]). The worker starts a
//! tier-up only when the gate is idle, and runs it on a rayon pool of its
//! own, so an upload's first compilation never queues behind one (the two
//! share the cores); a tier-up that fails leaves the plugin on
//! Winch's code (logged). Each queued tier-up holds its component's bytes
//! until it runs; a plugin deleted meanwhile is dropped from the queue, and
//! the result of one deleted while it compiles is thrown away.
//!
//! The worker exists only while the queue is not empty, and holds the
//! runtime only weakly between tier-ups: dropping the last [`Runtime`]
//! handle is not delayed by a queue, only by a tier-up in progress.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::cache::ArtifactCache;
use super::compile::Gate;
use super::{Inner, Runtime};

/// The queue and the worker's state.
#[derive(Default)]
pub(super) struct TierUps {
    state: Mutex<State>,
    /// Signalled when a tier-up ends or the worker leaves.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Digests and bytes waiting, oldest first.
    queue: VecDeque<(String, Arc<[u8]>)>,
    /// The digest compiling now.
    running: Option<String>,
    /// Set when the plugin compiling now was deleted: its result is dropped.
    cancelled: bool,
    /// Whether the worker thread is alive.
    worker: bool,
}

impl State {
    fn pending(&self) -> usize {
        self.queue.len() + usize::from(self.running.is_some())
    }
}

impl TierUps {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Each change completes under the lock and nothing in it calls out,
        // so a poisoned lock is safe to use.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tier-ups waiting or running.
    pub(super) fn pending(&self) -> usize {
        self.lock().pending()
    }

    /// Forgets `digest`'s tier-up (its plugin was deleted): dropped from the
    /// queue, or its result thrown away when it is compiling.
    pub(super) fn cancel(&self, digest: &str) {
        let mut state = self.lock();
        state.queue.retain(|(d, _)| d != digest);
        if state.running.as_deref() == Some(digest) {
            state.cancelled = true;
        }
    }
}

impl Runtime {
    /// Queues the optimizing compilation of `digest` (loaded now from Winch
    /// code), unless it is queued or compiling already; starts the worker.
    /// Nothing with [`super::Tiering::BaselineOnly`]: Winch's code is kept.
    pub(super) fn queue_tier_up(&self, digest: &str, bytes: &[u8]) {
        if !self.inner.config.compiler.tiers_up() {
            return;
        }
        let tier_ups = &self.inner.tier_ups;
        let mut state = tier_ups.lock();
        if state.running.as_deref() == Some(digest) {
            // Deleted and loaded again while it compiles: its result is
            // wanted after all.
            state.cancelled = false;
            return;
        }
        if state.queue.iter().any(|(d, _)| d == digest) {
            return;
        }
        state
            .queue
            .push_back((digest.to_string(), Arc::from(bytes)));
        if state.worker {
            return;
        }
        let (weak, gate) = (Arc::downgrade(&self.inner), self.inner.gate.clone());
        let spawned = std::thread::Builder::new()
            .name("ax-tier-up".into())
            .spawn(move || work(&weak, &gate));
        match spawned {
            Ok(_) => state.worker = true,
            Err(e) => {
                // Without a worker the plugin stays on Winch's code; it still
                // runs. The next queued tier-up tries to start one again.
                state.queue.clear();
                tracing::warn!(error = %e, "could not start the tier-up thread");
            }
        }
    }

    /// Tier-ups waiting or compiling.
    pub fn tier_ups_pending(&self) -> usize {
        self.inner.tier_ups.pending()
    }

    /// Waits (blocking the thread) until no tier-up is waiting or compiling,
    /// at most `timeout`; `true` when none is.
    pub fn wait_tier_ups(&self, timeout: Duration) -> bool {
        let tier_ups = &self.inner.tier_ups;
        let until = Instant::now() + timeout;
        let mut state = tier_ups.lock();
        while state.pending() > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = tier_ups
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Compiles `digest` with the configured compiler and, unless it was
    /// deleted meanwhile, replaces its Winch plugin and artifact.
    fn tier_up(&self, digest: &str, bytes: &[u8]) {
        let backend = &self.inner.backend;
        let started = Instant::now();
        let compiled = ArtifactCache::compile(&backend.engine, bytes).and_then(|component| {
            let plugin = self.prepare(backend, digest, bytes.len(), &component)?;
            Ok((plugin, component))
        });
        let (plugin, component) = match compiled {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(digest, error = %e, "the optimizing compilation failed: the plugin stays on Winch's code");
                return;
            }
        };
        // Written before the check below so that the lock is not held over
        // the disk write; removed again if the plugin was deleted meanwhile.
        backend.cache.store(digest, &component);
        let state = self.inner.tier_ups.lock();
        if state.cancelled {
            backend.cache.remove(digest);
            return;
        }
        if let Some(baseline) = &self.inner.baseline {
            baseline.cache.remove(digest);
        }
        // Under the tier-up lock, so a delete (`evict`, which cancels first)
        // cannot come between the check and the swap.
        self.keep(&plugin);
        drop(state);
        tracing::info!(
            digest,
            secs = started.elapsed().as_secs_f64(),
            "tier-up: optimized code replaces Winch's"
        );
    }
}

/// The worker: takes the queue in order, waiting before each for the
/// compile gate to be idle (without holding the runtime, so a dropped
/// runtime's queue is not compiled); leaves when the queue is empty or the
/// runtime is gone.
fn work(weak: &Weak<Inner>, gate: &Gate) {
    // wasmtime compiles a component's functions on the rayon pool of the
    // thread that asks. In the global pool, a tier-up's thousands of jobs
    // would sit ahead of an upload's first compilation (measured: a 160 KiB
    // upload waited 21 s behind the Python echo's tier-up); in a pool of
    // its own, the two share the cores through the OS scheduler instead.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .thread_name(|i| format!("ax-tier-up-{i}"))
        .build()
        .map_err(|e| tracing::warn!(error = %e, "no thread pool for tier-ups: they share rayon's global pool"))
        .ok();
    loop {
        gate.wait_idle();
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let runtime = Runtime { inner };
        let next = {
            let mut state = runtime.inner.tier_ups.lock();
            match state.queue.pop_front() {
                Some((digest, bytes)) => {
                    state.running = Some(digest.clone());
                    state.cancelled = false;
                    Some((digest, bytes))
                }
                None => {
                    state.worker = false;
                    runtime.inner.tier_ups.changed.notify_all();
                    None
                }
            }
        };
        let Some((digest, bytes)) = next else {
            return;
        };
        match &pool {
            Some(pool) => pool.install(|| runtime.tier_up(&digest, &bytes)),
            None => runtime.tier_up(&digest, &bytes),
        }
        let mut state = runtime.inner.tier_ups.lock();
        state.running = None;
        state.cancelled = false;
        runtime.inner.tier_ups.changed.notify_all();
    }
}

#[cfg(all(test, feature = "winch"))]
mod tests {
    //! The first tier end to end, and the sandbox's limits on Winch's code:
    //! the hostile plugins meet the same outcomes as on Cranelift's
    //! (tests/integration/sandbox.rs runs them there).

    use std::path::Path;

    use super::*;
    use crate::model::{AttemptReport, Limits, Outcome};
    use crate::runtime::fixtures::{context, example};
    use crate::runtime::{CompilerConfig, LoadSource, Plugin, RuntimeConfig, Tier, Tiering, cache};

    /// Tiered from the first byte, so the example plugins get Winch code;
    /// pooled as `ax serve` is (few slots: the tests need no more).
    fn tiered(cache_dir: Option<&Path>) -> Runtime {
        Runtime::new(RuntimeConfig {
            cache_dir: cache_dir.map(Path::to_path_buf),
            max_instances: 8,
            // One more than a test holds (see `hold_tier_ups`).
            max_compiles: 2,
            compiler: CompilerConfig {
                tiering: Tiering::Tiered { min_bytes: 0 },
                ..CompilerConfig::default()
            },
            ..RuntimeConfig::default()
        })
        .unwrap()
    }

    /// Holds a compile permit: the tier-up worker waits for an idle gate,
    /// so nothing tiers up until it is dropped.
    fn hold_tier_ups(runtime: &Runtime) -> crate::runtime::compile::CompilePermit<'_> {
        runtime.inner.gate.permit()
    }

    fn limits(timeout_ms: u64) -> Limits {
        Limits {
            timeout: Duration::from_millis(timeout_ms),
            ..Limits::default()
        }
    }

    /// `name` loaded from Winch's code (the tier-up runs behind; this
    /// handle stays on Winch's code).
    fn baseline(runtime: &Runtime, name: &str) -> Plugin {
        let plugin = runtime.load(&example(name)).unwrap();
        assert_eq!(plugin.tier(), Tier::Baseline);
        plugin
    }

    async fn run_on_winch(name: &str, input: &str, limits: &Limits) -> AttemptReport {
        let runtime = tiered(None);
        let plugin = baseline(&runtime, name);
        runtime
            .run(&plugin, &context(), input, limits, None)
            .await
            .expect("no host fault")
    }

    fn artifacts(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn infinite_loop_runs_out_of_fuel_on_winch_code() {
        let limits = Limits {
            fuel: 5_000_000,
            ..limits(30_000)
        };
        let report = run_on_winch("hostile_spin", "{}", &limits).await;
        assert_eq!(report.outcome, Outcome::FuelExhausted, "{report:?}");
        assert_eq!(report.fuel_consumed, 5_000_000);
        assert!(report.error.unwrap().contains("fuel exhausted"));
    }

    #[tokio::test]
    async fn infinite_loop_with_ample_fuel_times_out_on_winch_code() {
        let limits = Limits {
            fuel: u64::MAX / 2,
            ..limits(200)
        };
        let report = run_on_winch("hostile_spin", "{}", &limits).await;
        assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
        assert!(report.duration_ms >= 200.0);
        // Stopped at the deadline by the epoch check Winch emits, not by
        // running out of fuel (the bound is loose for slow machines).
        assert!(
            report.fuel_consumed < 40_000_000_000,
            "{}",
            report.fuel_consumed
        );
    }

    #[tokio::test]
    async fn memory_bomb_is_memory_exceeded_on_winch_code() {
        let limits = Limits {
            memory_bytes: 32 << 20,
            ..limits(10_000)
        };
        let report = run_on_winch("hostile_membomb", "{}", &limits).await;
        assert_eq!(report.outcome, Outcome::MemoryExceeded, "{report:?}");
        assert!(report.memory_peak_bytes <= 32 << 20);
        assert!(report.memory_peak_bytes > 16 << 20);
        assert!(
            report
                .error
                .unwrap()
                .contains("memory limit of 33554432 bytes")
        );
    }

    #[tokio::test]
    async fn deep_recursion_traps_with_stack_overflow_on_winch_code() {
        let report = run_on_winch("hostile_recursion", "{}", &limits(10_000)).await;
        assert_eq!(report.outcome, Outcome::Trapped, "{report:?}");
        assert!(report.error.unwrap().contains("stack overflow"));
    }

    #[tokio::test]
    async fn blocking_sleep_is_stopped_by_the_outer_timeout_on_winch_code() {
        let report = run_on_winch("hostile_sleep", "{}", &limits(300)).await;
        assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
    }

    #[tokio::test]
    async fn a_plugin_is_served_by_winch_then_swapped_to_cranelift() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tiered(Some(dir.path()));
        let bytes = example("echo");
        let digest = cache::digest(&bytes);
        let hold = hold_tier_ups(&runtime);
        let (first, source) = runtime.load_traced(&bytes).unwrap();
        assert_eq!(
            (first.tier(), source),
            (Tier::Baseline, LoadSource::Compiled)
        );
        assert_eq!(runtime.stats().tier_ups, 1);
        let report = runtime
            .run(&first, &context(), r#"{"x":1}"#, &limits(5_000), None)
            .await
            .unwrap();
        assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
        assert_eq!(artifacts(dir.path()).len(), 1, "Winch's artifact");

        drop(hold);
        assert!(runtime.wait_tier_ups(Duration::from_secs(120)));
        let now = runtime.get(&digest).expect("still loaded");
        assert_eq!(now.tier(), Tier::Optimized);
        assert_eq!(runtime.stats().tier_ups, 0);
        // Whoever held the Winch plugin still runs on it.
        assert_eq!(first.tier(), Tier::Baseline);
        for plugin in [&first, &now] {
            let report = runtime
                .run(plugin, &context(), r#"{"x":2}"#, &limits(5_000), None)
                .await
                .unwrap();
            assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
            assert_eq!(report.output.unwrap()["input"]["x"], 2);
        }
        // On disk, Cranelift's artifact replaced Winch's: a restart loads it.
        let names = artifacts(dir.path());
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(!names[0].contains("baseline"), "{names:?}");
        let restarted = tiered(Some(dir.path()));
        let plugin = restarted.load_cached(&digest).unwrap().expect("artifact");
        assert_eq!(plugin.tier(), Tier::Optimized);
    }

    #[test]
    fn a_restart_before_the_tier_up_serves_winch_from_disk_and_tiers_up_again() {
        let dir = tempfile::tempdir().unwrap();
        let before = tiered(Some(dir.path()));
        let bytes = example("echo");
        let digest = cache::digest(&bytes);
        let hold = hold_tier_ups(&before);
        baseline(&before, "echo");

        let after = tiered(Some(dir.path()));
        assert!(
            after.load_cached(&digest).unwrap().is_none(),
            "no Cranelift artifact yet; Winch's needs the bytes to tier up"
        );
        let (plugin, source) = after.load_traced(&bytes).unwrap();
        assert_eq!(
            (plugin.tier(), source),
            (Tier::Baseline, LoadSource::DiskCache)
        );
        assert!(after.wait_tier_ups(Duration::from_secs(120)));
        assert_eq!(after.get(&digest).unwrap().tier(), Tier::Optimized);
        drop(hold);
        assert!(before.wait_tier_ups(Duration::from_secs(120)));
    }

    #[test]
    fn a_deleted_plugin_is_not_tiered_up() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tiered(Some(dir.path()));
        let hold = hold_tier_ups(&runtime);
        let digest = baseline(&runtime, "echo").digest().to_string();
        assert_eq!(runtime.tier_ups_pending(), 1);
        runtime.evict(&digest);
        assert_eq!(runtime.tier_ups_pending(), 0);
        drop(hold);
        assert!(runtime.wait_tier_ups(Duration::from_secs(120)));
        assert!(runtime.get(&digest).is_none());
        assert!(artifacts(dir.path()).is_empty());
    }

    #[test]
    fn components_below_the_threshold_get_cranelift_code_at_once() {
        let runtime = Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap();
        assert!(runtime.config().compiler.tiered(), "tiered by default");
        let echo = example("echo");
        assert!(echo.len() < crate::runtime::DEFAULT_BASELINE_MIN_BYTES);
        let plugin = runtime.load(&echo).unwrap();
        assert_eq!(plugin.tier(), Tier::Optimized);
        assert_eq!(runtime.tier_ups_pending(), 0);
    }

    #[tokio::test]
    async fn attempts_waiting_for_the_winch_pool_do_not_hold_the_hosts_slots() {
        let runtime = Runtime::new(RuntimeConfig {
            max_instances: 1,
            compiler: CompilerConfig {
                tiering: Tiering::Tiered { min_bytes: 0 },
                ..CompilerConfig::default()
            },
            ..RuntimeConfig::default()
        })
        .unwrap();
        let hello = runtime.load(&example("hello")).unwrap();
        assert!(runtime.wait_tier_ups(Duration::from_secs(120)));
        let optimized = runtime.get(hello.digest()).unwrap();
        assert_eq!(optimized.tier(), Tier::Optimized);
        let winch = baseline(&runtime, "echo");

        // The Winch pool's one slot is taken: an attempt on Winch's code waits.
        let taken = runtime.inner.baseline_slots.acquire().await.unwrap();
        let waiting = {
            let runtime = runtime.clone();
            tokio::spawn(async move {
                runtime
                    .run(&winch, &context(), "{}", &limits(5_000), None)
                    .await
            })
        };
        // A current-thread runtime: the attempt runs until it waits.
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(runtime.inner.slots.available_permits(), 1);
        // The host's one slot is free for Cranelift's code meanwhile.
        let report = tokio::time::timeout(
            Duration::from_secs(60),
            runtime.run(
                &optimized,
                &context(),
                r#"{"name":"ax"}"#,
                &limits(5_000),
                None,
            ),
        )
        .await
        .expect("not stuck behind the waiting Winch attempt")
        .unwrap();
        assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
        drop(taken);
        let report = waiting.await.unwrap().unwrap();
        assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    }

    #[test]
    fn the_winch_pool_is_an_eighth_of_the_slots() {
        assert_eq!(crate::runtime::engine::baseline_slots(128), 16);
        assert_eq!(crate::runtime::engine::baseline_slots(4), 1);
    }
}
