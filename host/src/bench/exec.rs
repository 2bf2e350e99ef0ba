//! `ax bench exec` and `cargo bench`: the cost of one attempt of a plugin
//! on the real runtime, at several concurrency levels.
//!
//! Next to time, each row has what an attempt costs in memory: the linear
//! memory one instance grew to (the runtime's own peak, the same figure an
//! attempt report carries), the process's resident set after the row, and
//! the page faults per attempt over the measured round (minor and major, from
//! `/proc/self/stat`: the whole process, which outside the attempts only has
//! the benchmark's own bookkeeping). Minor faults per attempt are how many
//! pages an instance touched that were not already mapped and resident: what
//! copy-on-write images and keep-resident settings are meant to lower.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::bench_context;
use crate::model::{Limits, Outcome};
use crate::runtime::{Plugin, Runtime};

/// Per-attempt cost at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct ExecStats {
    /// Attempts in flight at once.
    pub concurrency: usize,
    /// Attempts measured.
    pub iterations: usize,
    /// Completed attempts per second, all workers together.
    pub runs_per_sec: f64,
    /// Median latency of one attempt, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// The largest linear memory one instance had, in bytes (all its
    /// memories together, as the runtime's limiter saw them).
    pub memory_per_instance_bytes: u64,
    /// Resident set of the process after the row, in bytes (`VmRSS`): the
    /// loaded plugin, the pool's resident slots and everything else.
    pub rss_bytes: u64,
    /// Minor page faults per attempt over the measured round.
    pub minor_faults_per_attempt: f64,
    /// Major page faults (read from disk) per attempt over the measured round.
    pub major_faults_per_attempt: f64,
}

impl ExecStats {
    /// The column titles matching `Display`.
    pub fn header() -> &'static str {
        "concurrency  iterations     runs/s    p50 µs    p99 µs   mean µs  mem/inst KiB  RSS MiB  minflt/att  majflt/att"
    }
}

impl fmt::Display for ExecStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>11}  {:>10}  {:>9.0}  {:>8.1}  {:>8.1}  {:>8.1}  {:>12}  {:>7.1}  {:>10.1}  {:>10.2}",
            self.concurrency,
            self.iterations,
            self.runs_per_sec,
            self.p50_us,
            self.p99_us,
            self.mean_us,
            self.memory_per_instance_bytes >> 10,
            self.rss_bytes as f64 / (1 << 20) as f64,
            self.minor_faults_per_attempt,
            self.major_faults_per_attempt,
        )
    }
}

/// Ratio of the median runs/s of the second concurrency level to the first,
/// over rows that may repeat levels (`--concurrency 1,2,1,2,…`): interleaved
/// repetitions in one run are how to compare on a noisy machine.
pub fn speed_up(rows: &[ExecStats]) -> Option<(usize, usize, f64)> {
    let first = rows.first()?.concurrency;
    let second = rows.iter().map(|r| r.concurrency).find(|c| *c != first)?;
    let median_of = |c: usize| {
        let mut v: Vec<f64> = rows
            .iter()
            .filter(|r| r.concurrency == c)
            .map(|r| r.runs_per_sec)
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Some((first, second, median_of(second) / median_of(first)))
}

/// Runs `iterations` attempts of `plugin`, `concurrency` at a time, after a
/// warm-up of a tenth as many; every attempt must succeed.
pub async fn exec(
    runtime: &Runtime,
    plugin: &Plugin,
    input: &str,
    iterations: usize,
    concurrency: usize,
) -> anyhow::Result<ExecStats> {
    let concurrency = concurrency.max(1);
    let per_worker = iterations.div_ceil(concurrency).max(1);
    worker_round(
        runtime,
        plugin,
        input,
        (per_worker / 10).max(1),
        concurrency,
    )
    .await?;
    let faults_before = page_faults()?;
    let started = Instant::now();
    let round = worker_round(runtime, plugin, input, per_worker, concurrency).await?;
    let elapsed = started.elapsed();
    let faults_after = page_faults()?;
    let mut latencies = round.latencies;
    latencies.sort_unstable();
    let n = latencies.len();
    let per_attempt = |after: u64, before: u64| after.saturating_sub(before) as f64 / n as f64;
    let quantile = |q: f64| latencies[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1e6;
    Ok(ExecStats {
        concurrency,
        iterations: n,
        runs_per_sec: n as f64 / elapsed.as_secs_f64(),
        p50_us: quantile(0.50),
        p99_us: quantile(0.99),
        mean_us: latencies.iter().sum::<Duration>().as_secs_f64() * 1e6 / n as f64,
        memory_per_instance_bytes: round.memory_peak,
        rss_bytes: resident_bytes()?,
        minor_faults_per_attempt: per_attempt(faults_after.minor, faults_before.minor),
        major_faults_per_attempt: per_attempt(faults_after.major, faults_before.major),
    })
}

/// What one round of workers measured.
struct Round {
    latencies: Vec<Duration>,
    /// The largest `memory_peak_bytes` of its attempts.
    memory_peak: u64,
}

/// Page faults of this process so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Faults {
    minor: u64,
    major: u64,
}

/// This process's page faults (`/proc/self/stat`, fields 10 and 12: what
/// `getrusage(RUSAGE_SELF)` reports as `ru_minflt` and `ru_majflt`, read
/// without `unsafe`).
fn page_faults() -> anyhow::Result<Faults> {
    let text = std::fs::read_to_string("/proc/self/stat")?;
    parse_faults(&text)
        .ok_or_else(|| anyhow::anyhow!("/proc/self/stat has no page-fault counts: {text}"))
}

/// The fault counts of a `/proc/PID/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces, so fields are counted from the
/// last `)`: field 3 (the state) is the first after it.
fn parse_faults(stat: &str) -> Option<Faults> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After `)`: state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8)
    // flags(9) minflt(10) cminflt(11) majflt(12).
    let minor = fields.nth(7)?.parse().ok()?;
    let major = fields.nth(1)?.parse().ok()?;
    Some(Faults { minor, major })
}

/// This process's resident set (`VmRSS` of `/proc/self/status`), in bytes.
fn resident_bytes() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/status")?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib << 10)
        .ok_or_else(|| anyhow::anyhow!("/proc/self/status has no VmRSS"))
}

async fn worker_round(
    runtime: &Runtime,
    plugin: &Plugin,
    input: &str,
    per_worker: usize,
    concurrency: usize,
) -> anyhow::Result<Round> {
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (runtime, plugin, input) = (runtime.clone(), plugin.clone(), input.to_string());
        workers.spawn(async move {
            let ctx = bench_context();
            let limits = Limits::default();
            let mut latencies = Vec::with_capacity(per_worker);
            let mut memory_peak = 0;
            for _ in 0..per_worker {
                let t = Instant::now();
                let report = runtime.run(&plugin, &ctx, &input, &limits, None).await?;
                latencies.push(t.elapsed());
                memory_peak = memory_peak.max(report.memory_peak_bytes);
                anyhow::ensure!(
                    report.outcome == Outcome::Succeeded,
                    "benchmark attempt ended {}: {:?}",
                    report.outcome,
                    report.error
                );
            }
            anyhow::Ok(Round {
                latencies,
                memory_peak,
            })
        });
    }
    let mut all = Round {
        latencies: Vec::with_capacity(per_worker * concurrency),
        memory_peak: 0,
    };
    while let Some(res) = workers.join_next().await {
        let round = res??;
        all.latencies.extend(round.latencies);
        all.memory_peak = all.memory_peak.max(round.memory_peak);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_counts_are_read_after_the_command_name() {
        // A command name with spaces and a `)` of its own.
        let stat = "4242 (ax (bench) x) S 1 4242 4242 0 -1 4194560 1234 99 7 0 5 3";
        assert_eq!(
            parse_faults(stat),
            Some(Faults {
                minor: 1234,
                major: 7
            })
        );
        assert_eq!(parse_faults("4242 (ax) S 1"), None);
    }

    #[test]
    fn this_process_has_faults_and_a_resident_set() {
        let faults = page_faults().unwrap();
        assert!(faults.minor > 0, "{faults:?}");
        assert!(resident_bytes().unwrap() > 0);
    }
}
