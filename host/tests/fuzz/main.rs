//! Fuzz targets for ax's parsers, on the stable toolchain (docs/RELIABILITY.md,
//! *Fuzzing*). One module per target; each `fuzz` test replays the seed corpus
//! of `fuzz/corpus/<target>/` first, then runs generated cases through
//! `proptest` (structure-aware strategies built from the field names and
//! tokens ax knows, plus plain garbage), and checks for every case: no panic,
//! the case finished within its bound, and a refusal is an `Err` whose message
//! is not empty.
//!
//! Why a test target of its own rather than a module inside the crate or
//! cargo-fuzz: cargo-fuzz needs nightly; a separate target runs under plain
//! `cargo test` (so CI runs it with a bounded number of cases), builds only
//! this small crate on top of the already built `ax` library (a module inside
//! the crate would rebuild the whole crate's unit-test binary), and sees
//! exactly what the API sees: ax's public functions. It is not in the
//! `integration` binary because it starts no host and should stay quick.
//!
//! Knobs (environment; `scripts/fuzz` sets them):
//! - `AX_FUZZ_CASES`: generated cases per batch (each target has a default
//!   sized for CI);
//! - `AX_FUZZ_SECONDS`: keep running batches (new seeds) until this much time
//!   has passed;
//! - `AX_FUZZ_SEED`: the first batch's seed (default 0, so CI is
//!   deterministic; batch `i` uses seed + i);
//! - `AX_FUZZ_CASE_MS`: the per-case bound in ms (default: each target's);
//! - `AX_FUZZ_VERBOSE`: print every refusal (to see what a strategy reaches).
//!
//! A failure prints the shrunk input and the command that replays it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

mod api;
mod cond;
mod cron;
mod plugin;
mod strategies;
mod task;
mod template;

/// A case still running after this long is a hang: the watchdog prints it and
/// aborts the process, since a stuck thread cannot be stopped from outside.
const HANG: Duration = Duration::from_secs(60);

/// What one target checks and how much of it CI runs.
pub(crate) struct Target {
    /// The folder under `fuzz/corpus/` and the test's module name.
    pub(crate) name: &'static str,
    /// Generated cases per batch when `AX_FUZZ_CASES` is unset.
    pub(crate) cases: u32,
    /// Longest a single case may take before it counts as a failure.
    pub(crate) bound: Duration,
}

/// Outcomes counted by the checks (`parsed`, `refused`, …), printed at the
/// end of a run: a target whose cases are all refused at once tests little.
static TALLY: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Counts one outcome of a check.
pub(crate) fn tally(outcome: &'static str) {
    // A poisoned tally only loses counts.
    if let Ok(mut t) = TALLY.lock() {
        *t.entry(outcome).or_default() += 1;
    }
}

/// A broken invariant, as the target's check describes it.
pub(crate) type Verdict = Result<(), String>;

/// An `Err` must say why: an empty message is as bad as none.
pub(crate) fn explained(what: &str, message: String) -> Verdict {
    if std::env::var_os("AX_FUZZ_VERBOSE").is_some() {
        eprintln!("{what}: {message}");
    }
    if message.trim().is_empty() {
        Err(format!("{what} refused the input with an empty message"))
    } else {
        Ok(())
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The seed corpus of a target: every file of `fuzz/corpus/<name>/`, sorted.
pub(crate) fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no seed", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("reading a corpus file");
            (p, bytes)
        })
        .collect()
}

/// The case running now, for the watchdog: when it started and what it is.
type Current = Arc<Mutex<Option<(Instant, String)>>>;

/// Aborts the process if one case runs past [`HANG`], after printing it.
fn watchdog(target: &'static str, current: Current, done: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            // Poisoned only if a check panicked while holding it: then the
            // case is already reported as a failure.
            let Ok(guard) = current.lock() else { return };
            if let Some((started, input)) = guard.as_ref()
                && started.elapsed() > HANG
            {
                eprintln!(
                    "fuzz {target}: HANG, a case has run for {:?}: {input}",
                    started.elapsed()
                );
                std::process::abort();
            }
        }
    });
}

/// Runs one target: the corpus through `replay`, then generated cases from
/// `strategy` through `check`, in batches until the case count or
/// `AX_FUZZ_SECONDS` is reached. Panics (failing the test) on the first
/// broken invariant, with the input and the command that replays it.
pub(crate) fn run<S>(
    target: &Target,
    replay: impl Fn(&[u8]) -> Verdict,
    strategy: S,
    check: impl Fn(&S::Value) -> Verdict,
) where
    S: Strategy,
    S::Value: Debug,
{
    let bound = env_u64("AX_FUZZ_CASE_MS").map_or(target.bound, Duration::from_millis);
    let cases =
        env_u64("AX_FUZZ_CASES").map_or(target.cases, |c| c.clamp(1, u32::MAX as u64) as u32);
    let seconds = env_u64("AX_FUZZ_SECONDS");
    let first_seed = env_u64("AX_FUZZ_SEED").unwrap_or(0);
    let current: Current = Arc::new(Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    watchdog(target.name, Arc::clone(&current), Arc::clone(&done));
    let timed = |input: String, f: &dyn Fn() -> Verdict| -> Verdict {
        *current.lock().expect("not poisoned") = Some((Instant::now(), input));
        let started = Instant::now();
        let verdict = f();
        let took = started.elapsed();
        *current.lock().expect("not poisoned") = None;
        verdict?;
        if took > bound {
            return Err(format!("took {took:?}, over the bound of {bound:?}"));
        }
        Ok(())
    };

    let started = Instant::now();
    let seeds = corpus(target.name);
    for (path, bytes) in &seeds {
        if let Err(why) = timed(path.display().to_string(), &|| replay(bytes)) {
            panic!(
                "fuzz {}: the corpus file {} fails: {why}\nreplay: cargo test -p ax-host --test fuzz {}::fuzz -- --exact",
                target.name,
                path.display(),
                target.name
            );
        }
    }

    let mut total: u64 = 0;
    let mut batch: u64 = 0;
    loop {
        let seed = first_seed.wrapping_add(batch);
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed),
            // Shrinking re-runs the check; cap it so a slow failure still reports.
            max_shrink_time: 60_000,
            ..Config::default()
        });
        let outcome = runner.run(&strategy, |value| {
            timed(format!("{value:?}"), &|| check(&value)).map_err(TestCaseError::fail)
        });
        match outcome {
            Ok(()) => {}
            Err(TestError::Fail(why, value)) => panic!(
                "fuzz {}: {why}\ninput (shrunk): {value:?}\nreplay: AX_FUZZ_SEED={seed} AX_FUZZ_CASES={cases} scripts/fuzz {}",
                target.name, target.name
            ),
            Err(TestError::Abort(why)) => panic!("fuzz {}: aborted: {why}", target.name),
        }
        total += u64::from(cases);
        batch += 1;
        match seconds {
            Some(s) if started.elapsed() < Duration::from_secs(s) => continue,
            _ => break,
        }
    }
    done.store(true, Ordering::Relaxed);
    // Tests of one binary share the tally; `scripts/fuzz` runs them one at a
    // time, so what it prints is this target's.
    let outcomes = std::mem::take(&mut *TALLY.lock().unwrap_or_else(|p| p.into_inner()));
    println!(
        "fuzz {}: {} corpus files and {total} generated cases passed in {:.1?} (seeds {first_seed}..{}); outcomes {outcomes:?}",
        target.name,
        seeds.len(),
        started.elapsed(),
        first_seed.wrapping_add(batch)
    );
}
