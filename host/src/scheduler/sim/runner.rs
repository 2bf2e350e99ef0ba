//! The simulated world around the scheduler: a virtual clock that can jump,
//! and a fake runner whose attempts succeed, fail, trap, hang or are slow,
//! each drawn from the seed and the attempt's identity.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::mix;
use super::store::SimStore;
use crate::model::{AttemptReport, ErrorKind, Millis, Outcome, StepStatus};
use crate::scheduler::{AttemptRequest, Clock, HostFault, RunFuture, Runner};
use crate::store::prelude::*;

/// Wall time = `start` + tokio's (paused) elapsed time + the jumps so far.
pub(super) struct SimClock {
    start: DateTime<Utc>,
    base: tokio::time::Instant,
    /// Sum of the jumps, ms (negative: the clock was set back).
    offset: AtomicI64,
}

impl SimClock {
    pub(super) fn starting_at(start: DateTime<Utc>) -> Self {
        Self {
            start,
            base: tokio::time::Instant::now(),
            offset: AtomicI64::new(0),
        }
    }

    /// Sets the wall clock forward (or back, `ms < 0`) at once.
    pub(super) fn jump(&self, ms: i64) {
        self.offset.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed =
            chrono::Duration::from_std(tokio::time::Instant::now() - self.base).unwrap_or_default();
        self.start + elapsed + chrono::Duration::milliseconds(self.offset.load(Ordering::Relaxed))
    }
}

/// What an attempt does, drawn per attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Play {
    /// Succeeds after a short while.
    Quick,
    /// Succeeds after seconds (often past its timeout).
    Slow,
    /// A retryable error.
    Fail,
    /// A fatal error.
    Fatal,
    /// The instance traps.
    Trap,
    /// Blocks until its timeout or a cancel.
    Hang,
    /// Wants more fuel than most limits give.
    Hog,
    /// The host cannot load the plugin.
    HostFault,
}

/// The draw for one attempt: (play, duration ms, fuel wanted).
pub(super) fn draw(seed: u64, identity: &str, attempt: u32) -> (Play, u64, u64) {
    let h = mix(seed, mix(fnv(identity), u64::from(attempt)));
    let d = mix(h, 1);
    let f = mix(h, 2);
    let play = match h % 100 {
        0..45 => Play::Quick,
        45..55 => Play::Slow,
        55..70 => Play::Fail,
        70..75 => Play::Fatal,
        75..80 => Play::Trap,
        80..87 => Play::Hang,
        87..95 => Play::Hog,
        _ => Play::HostFault,
    };
    let ms = match play {
        Play::Slow => 1_000 + d % 20_000,
        _ => 1 + d % 300,
    };
    let fuel = match play {
        Play::Hog => 2_000 + f % 8_000,
        _ => 50 + f % 450,
    };
    (play, ms, fuel)
}

/// FNV-1a: a stable string hash (std's hasher is randomly keyed).
pub(super) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One attempt the runner ended (or was stopped in).
#[derive(Clone, Debug)]
pub(super) struct Finished {
    pub(super) tenant: String,
    /// Wall-clock instant it ended at (ms).
    pub(super) at: Millis,
    pub(super) fuel: u64,
}

/// What the runners saw, for the invariants.
#[derive(Default)]
pub(super) struct RunnerLog {
    /// Attempts started, all incarnations.
    pub(super) starts: u64,
    pub(super) finished: Vec<Finished>,
    /// (run id, step) → the incarnation a success was reported to.
    pub(super) succeeded: HashMap<(String, String), u64>,
    /// Runs cancelled, with the incarnation that was told.
    pub(super) cancelled: HashMap<String, u64>,
    pub(super) violations: Vec<String>,
}

/// The fake runner of one incarnation of the scheduler.
pub(super) struct SimRunner {
    pub(super) seed: u64,
    pub(super) epoch: u64,
    /// Fires when this incarnation crashes: its attempts stop at once.
    pub(super) crashed: CancellationToken,
    pub(super) store: SimStore,
    pub(super) clock: Arc<SimClock>,
    pub(super) log: Arc<Mutex<RunnerLog>>,
}

fn report(outcome: Outcome, fuel: u64, ms: f64) -> AttemptReport {
    AttemptReport {
        outcome,
        output: (outcome == Outcome::Succeeded).then(|| serde_json::json!({ "ok": true })),
        error: (outcome != Outcome::Succeeded).then(|| outcome.to_string()),
        error_kind: None,
        fuel_consumed: fuel,
        memory_peak_bytes: 1 << 16,
        duration_ms: ms,
        // Something to store as logs now and then (a store write of its own).
        stdout: if fuel.is_multiple_of(3) {
            "hello\n".into()
        } else {
            String::new()
        },
        stderr: String::new(),
        logs: Vec::new(),
        progress: None,
    }
}

impl Runner for SimRunner {
    fn run(&self, req: AttemptRequest) -> RunFuture {
        let ctx = &req.ctx;
        let identity = format!(
            "{}/{}/{}/{}",
            ctx.tenant, ctx.task, ctx.scheduled_for, ctx.step
        );
        let (play, ms, want) = draw(self.seed, &identity, ctx.attempt);
        {
            let mut log = self.log.lock().expect("runner log");
            log.starts += 1;
            // No succeeded step runs again: not once its success is stored…
            if let Ok(Some(run)) = self.store.get_run(&ctx.run_id)
                && let Some(step) = run.steps.iter().find(|s| s.name == ctx.step)
                && step.status == StepStatus::Succeeded
            {
                log.violations.push(format!(
                    "succeeded step run again: {}/{} step {} attempt {} (its success is stored)",
                    ctx.task, ctx.scheduled_for, ctx.step, ctx.attempt
                ));
            }
            // …nor once it was reported to this incarnation (unless the run
            // was cancelled meanwhile, which discards a late report).
            let key = (ctx.run_id.clone(), ctx.step.clone());
            if log.succeeded.get(&key) == Some(&self.epoch)
                && log.cancelled.get(&ctx.run_id) != Some(&self.epoch)
            {
                log.violations.push(format!(
                    "succeeded step run again: {}/{} step {} attempt {} (its success was reported)",
                    ctx.task, ctx.scheduled_for, ctx.step, ctx.attempt
                ));
            }
        }
        let (crashed, clock, log, epoch) = (
            self.crashed.clone(),
            self.clock.clone(),
            self.log.clone(),
            self.epoch,
        );
        let (tenant, run_id, step) = (ctx.tenant.clone(), ctx.run_id.clone(), ctx.step.clone());
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            let limit = req.limits.fuel;
            let fuel = want.min(limit);
            let work = async {
                match play {
                    Play::Hang => std::future::pending().await,
                    _ => tokio::time::sleep(Duration::from_millis(ms)).await,
                }
            };
            // Biased: tokio draws the order of ready branches at random.
            let ended = tokio::select! {
                biased;
                () = work => None,
                _ = tokio::time::sleep(req.limits.timeout) => Some(Outcome::TimedOut),
                _ = req.cancel.cancelled() => Some(Outcome::Cancelled),
                _ = crashed.cancelled() => {
                    // The process is gone: nobody hears of this attempt.
                    return Err(HostFault::MissingBlob { digest: "crashed".into() });
                }
            };
            let elapsed = started.elapsed().as_secs_f64() * 1e3;
            let outcome = ended.unwrap_or(match play {
                _ if want > limit => Outcome::FuelExhausted,
                Play::Quick | Play::Slow | Play::Hog => Outcome::Succeeded,
                Play::Fail | Play::Fatal => Outcome::Failed,
                Play::Trap => Outcome::Trapped,
                // (A hang ends only by its timeout or a cancel.)
                Play::Hang => Outcome::TimedOut,
                Play::HostFault => {
                    return Err(HostFault::MissingBlob {
                        digest: "sim".into(),
                    });
                }
            });
            // Burned up to the end: a stopped attempt used a share of it.
            let burned = match ended {
                Some(_) => fuel.min(1 + fuel * elapsed as u64 / (ms.max(1))),
                None => fuel,
            };
            let mut r = report(outcome, burned, elapsed);
            if outcome == Outcome::Failed {
                r.error_kind = Some(if play == Play::Fatal {
                    ErrorKind::Fatal
                } else {
                    ErrorKind::Retryable
                });
            }
            let mut log = log.lock().expect("runner log");
            log.finished.push(Finished {
                tenant,
                at: clock.now_ms(),
                fuel: burned,
            });
            if outcome == Outcome::Succeeded {
                log.succeeded.insert((run_id, step), epoch);
            }
            Ok(r)
        })
    }
}
