//! Deterministic simulation of the scheduler: from one `u64` seed, a random
//! scenario run against the real actor (and so the pure core) on the
//! in-memory store, with faults injected, and the scheduler's guarantees
//! checked after every step. Any failure names its seed; the seed replays it.
//!
//! # What is simulated
//! - **Time**: a `current_thread` tokio runtime with paused time; the
//!   scheduler's [`Clock`] is a [`runner::SimClock`] (tokio's virtual time
//!   plus jumps, forward and back). Nothing sleeps for real.
//! - **Attempts**: [`runner::SimRunner`] plays each attempt from a hash of
//!   the seed and the attempt's identity (tenant, task, scheduled instant,
//!   step, attempt number): succeed quickly or after seconds, fail
//!   (retryable or fatal), trap, hang until its timeout or a cancel, want
//!   more fuel than it gets, or a host fault.
//! - **Operations**: manual triggers with and without idempotency keys and
//!   replays of old keys, cron and interval tasks firing, task edits,
//!   pauses, deletes, cancels, run retries, dead-letter requeues, quota
//!   changes (fuel budget, weight, running cap) and tenant disable/enable, as
//!   the service would send them (it checks a disabled tenant itself).
//! - **Faults** ([`store::SimStore`]): store writes refused for a while; a
//!   crash at any point (the actor's task is dropped with all its memory,
//!   the crashed incarnation's later writes are refused, and a new actor
//!   recovers from what the store holds), with or without a lost flush (the
//!   store keeps its durable writes and a random share of the later ones);
//!   clock jumps. The actor's store calls run inline
//!   ([`SchedulerConfig::inline_store`]). The scheduler's own randomness (retry jitter) is seeded
//!   ([`SchedulerConfig::rng_seed`]).
//!
//! # Invariants (checked after every step, see `check`)
//! 1. No accepted run is lost: a trigger answered `Ok` (and its sync ticket
//!    waited, as the API does) is in the store ever after, and a replayed
//!    key answers with its run.
//! 2. At most one run per (task, scheduled instant) for time triggers, and
//!    one per (task, idempotency key).
//! 3. No succeeded step runs again (checked by the runner at each start
//!    against the store and against what it reported, and on the records).
//! 4. A step's attempts in a round are at most `max_attempts` plus the
//!    attempts lost to crashes, up to `max_lost_attempts` (docs/SCHEDULER.md).
//! 5. Fuel never exceeds a tenant's budget: the usage stored for a window is
//!    within the largest budget in force in it, and so is the fuel the runner
//!    saw burned in a window without a crash or a clock jump (a crash loses
//!    the usage of the attempts it loses, so those windows are judged on the
//!    stored usage only).
//! 6. Every run is eventually terminal: at the end faults stop, tenants are
//!    enabled, timed tasks paused, and the clock runs two hours on; then no
//!    stored run is active.
//! 7. Every stored success of the upstream task started its `after` task
//!    (a run naming it in `upstream_run` and keyed `after:<run id>`),
//!    checked at the end. The world has one
//!    such pair ([`scenario::World::after`]); operations leave the
//!    downstream task alone.
//!
//! # Determinism
//! The same seed gives the same trace, under any CPU load
//! (`same_seed_same_trace` compares the hashes of two runs, in CI). The
//! scenario and every attempt's play come from the seed, the actor's jitter
//! from its seed, and time is virtual. Everything runs on one
//! `current_thread` runtime: the actor's store calls, which a server makes on
//! `spawn_blocking` threads, run inline ([`SchedulerConfig::inline_store`]),
//! so an insert or a write lands at a point of the runtime's own (seeded,
//! single-threaded) order rather than whenever a blocking thread gets the
//! CPU. `select!`s whose branches can be ready together are `biased`. Before
//! the driver reads the store (checks, crashes) it *settles*: it yields until
//! the store has seen no write for a few rounds; paused time does not move
//! meanwhile.
//! Run ids carry a random suffix and a process-wide counter, so the trace
//! names runs by what they are (task, instant, trigger number), not by id.
//!
//! # Running it
//! - CI: `seeds` runs 10,000 short scenarios (`AX_SIM_SEEDS` to change), in
//!   2–4 minutes of a debug build on 2 cores (docs/RELIABILITY.md).
//! - One seed: `AX_SIM_SEED=1234 cargo test -p ax-host --lib sim::replay -- --nocapture`
//!   prints its trace and every violation (`AX_SIM_STEPS` for the long form).
//! - Long runs: `scripts/simulate --seeds N [--from S] [--steps K]`.
//!
//! Not simulated: `when` conditions (evaluated on real threads), alerts
//! (the store keeps an outbox, but the simulated scheduler raises none),
//! retention and `after` triggers; the fake plugins keep no KV data.

mod check;
mod runner;
mod scenario;
mod store;

use super::{Clock, SchedulerConfig};

use scenario::simulate;

/// SplitMix64 of `a` and `b`: the stable hash every draw is made from.
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Operations in a CI scenario (short, so 10,000 seeds fit in minutes).
pub(super) const SHORT: usize = 30;
/// Operations in a long scenario (`scripts/simulate`).
pub(super) const LONG: usize = 300;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The command that replays `seed`.
pub(super) fn replay_command(seed: u64, steps: usize) -> String {
    let steps = if steps == SHORT {
        String::new()
    } else {
        format!("AX_SIM_STEPS={steps} ")
    };
    format!(
        "AX_SIM_SEED={seed} {steps}cargo test -p ax-host --lib scheduler::sim::replay -- --nocapture"
    )
}

/// Runs seeds `from..from + count` on `threads` threads; returns the
/// failures (seed, violations) and the seeds run per second.
fn run_many(from: u64, count: u64, steps: usize, threads: u64) -> (Vec<(u64, Vec<String>)>, f64) {
    let started = std::time::Instant::now();
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for t in 0..threads {
            let failures = &failures;
            scope.spawn(move || {
                let mut seed = from + t;
                while seed < from + count {
                    let report = simulate(seed, steps, false);
                    if !report.violations.is_empty() {
                        let mut f = failures.lock().unwrap_or_else(|e| e.into_inner());
                        f.push((seed, report.violations));
                    }
                    seed += threads;
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    failures.sort_by_key(|(s, _)| *s);
    let rate = count as f64 / started.elapsed().as_secs_f64();
    (failures, rate)
}

fn assert_no_failures(failures: &[(u64, Vec<String>)], steps: usize) {
    if failures.is_empty() {
        return;
    }
    let mut text = format!("{} seeds failed\n", failures.len());
    for (seed, violations) in failures.iter().take(10) {
        text += &format!(
            "seed {seed}: {}\n  replay: {}\n",
            violations.first().map_or("", String::as_str),
            replay_command(*seed, steps)
        );
    }
    panic!("{text}");
}

fn threads() -> u64 {
    std::thread::available_parallelism().map_or(2, |n| n.get() as u64)
}

/// Seeds the test suite (and so CI) simulates: 10,000 short scenarios take
/// 2–4 minutes in a debug build on 2 cores; `scripts/simulate` runs more.
const CI_SEEDS: u64 = 10_000;

/// CI: [`CI_SEEDS`] short scenarios (`AX_SIM_SEEDS`, `AX_SIM_FROM` to move the range).
#[test]
fn seeds() {
    let count = env_u64("AX_SIM_SEEDS").unwrap_or(CI_SEEDS);
    let from = env_u64("AX_SIM_FROM").unwrap_or(0);
    let (failures, rate) = run_many(from, count, SHORT, threads());
    eprintln!("simulated {count} seeds from {from} ({SHORT} steps each): {rate:.0} seeds/s");
    assert_no_failures(&failures, SHORT);
}

/// `scripts/simulate`: long scenarios over a range of seeds.
#[test]
#[ignore = "long; run by scripts/simulate"]
fn long() {
    let count = env_u64("AX_SIM_SEEDS").unwrap_or(1_000);
    let from = env_u64("AX_SIM_FROM").unwrap_or(0);
    let steps = env_u64("AX_SIM_STEPS").map_or(LONG, |s| s as usize);
    let (failures, rate) = run_many(from, count, steps, threads());
    eprintln!("simulated {count} seeds from {from} ({steps} steps each): {rate:.1} seeds/s");
    assert_no_failures(&failures, steps);
}

/// Replays one seed (`AX_SIM_SEED`, default 1) and prints its trace.
#[test]
fn replay() {
    let seed = env_u64("AX_SIM_SEED").unwrap_or(1);
    let steps = env_u64("AX_SIM_STEPS").map_or(SHORT, |s| s as usize);
    let report = simulate(seed, steps, true);
    for line in &report.trace {
        println!("{line}");
    }
    println!(
        "seed {seed}: trace hash {:016x}, {} violations",
        report.hash,
        report.violations.len()
    );
    for v in &report.violations {
        println!("VIOLATION: {v}");
    }
    assert!(
        report.violations.is_empty(),
        "seed {seed} failed: {:?}",
        report.violations
    );
}

/// The same seed gives the same trace, for short and long scenarios, also
/// while other tests load the machine (see "Determinism" in the module doc).
#[test]
fn same_seed_same_trace() {
    for (seed, steps) in [(7, SHORT), (8, SHORT), (9, 120)] {
        let a = simulate(seed, steps, false);
        let b = simulate(seed, steps, false);
        assert_eq!(a.hash, b.hash, "seed {seed} ran two ways");
        assert!(a.steps_run > 0);
    }
    let a = simulate(7, SHORT, false);
    let b = simulate(8, SHORT, false);
    assert_ne!(a.hash, b.hash, "different seeds, different traces");
}
