//! `ax bench exec` and `cargo bench`: the cost of one attempt of a plugin
//! on the real runtime, at several concurrency levels.

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
}

impl ExecStats {
    /// The column titles matching `Display`.
    pub fn header() -> &'static str {
        "concurrency  iterations     runs/s    p50 µs    p99 µs   mean µs"
    }
}

impl fmt::Display for ExecStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>11}  {:>10}  {:>9.0}  {:>8.1}  {:>8.1}  {:>8.1}",
            self.concurrency,
            self.iterations,
            self.runs_per_sec,
            self.p50_us,
            self.p99_us,
            self.mean_us
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
    let started = Instant::now();
    let mut latencies = worker_round(runtime, plugin, input, per_worker, concurrency).await?;
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let n = latencies.len();
    let quantile = |q: f64| latencies[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1e6;
    Ok(ExecStats {
        concurrency,
        iterations: n,
        runs_per_sec: n as f64 / elapsed.as_secs_f64(),
        p50_us: quantile(0.50),
        p99_us: quantile(0.99),
        mean_us: latencies.iter().sum::<Duration>().as_secs_f64() * 1e6 / n as f64,
    })
}

async fn worker_round(
    runtime: &Runtime,
    plugin: &Plugin,
    input: &str,
    per_worker: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (runtime, plugin, input) = (runtime.clone(), plugin.clone(), input.to_string());
        workers.spawn(async move {
            let ctx = bench_context();
            let limits = Limits::default();
            let mut latencies = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let t = Instant::now();
                let report = runtime.run(&plugin, &ctx, &input, &limits, None).await?;
                latencies.push(t.elapsed());
                anyhow::ensure!(
                    report.outcome == Outcome::Succeeded,
                    "benchmark attempt ended {}: {:?}",
                    report.outcome,
                    report.error
                );
            }
            anyhow::Ok(latencies)
        });
    }
    let mut all = Vec::with_capacity(per_worker * concurrency);
    while let Some(res) = workers.join_next().await {
        all.extend(res??);
    }
    Ok(all)
}
