//! Measurement loops behind `ax bench` and `cargo bench`. They drive the real
//! runtime the way the scheduler does; numbers are recorded in
//! `docs/PERFORMANCE.md`.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::model::{AttemptContext, Limits, Outcome, TriggerKind};
use crate::runtime::{LoadSource, Plugin, Runtime, RuntimeConfig};

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

fn bench_context() -> AttemptContext {
    AttemptContext {
        run_id: "bench".into(),
        tenant: "bench".into(),
        task: "bench".into(),
        step: "bench".into(),
        attempt: 1,
        scheduled_for: "2026-01-01T00:00:00Z".into(),
        trigger: TriggerKind::Manual,
    }
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

/// Cost of getting a plugin ready, by where it comes from (medians).
#[derive(Clone, Debug, Serialize)]
pub struct LoadStats {
    /// Component size in bytes.
    pub size_bytes: usize,
    /// Validate + compile (nothing cached), ms.
    pub compile_ms: f64,
    /// Validate + deserialize the artifact ax cached on disk, ms.
    pub disk_cache_ms: f64,
    /// Lookup of a plugin already loaded in this process, µs.
    pub memory_hit_us: f64,
}

impl fmt::Display for LoadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "component        {} bytes", self.size_bytes)?;
        writeln!(f, "compile (cold)   {:.2} ms", self.compile_ms)?;
        writeln!(
            f,
            "disk cache       {:.3} ms  ({:.0}x faster)",
            self.disk_cache_ms,
            self.compile_ms / self.disk_cache_ms
        )?;
        write!(f, "memory hit       {:.2} µs", self.memory_hit_us)
    }
}

/// Measures compiling `bytes` cold, loading the cached artifact in a fresh
/// runtime, and a repeated load in the same runtime; `repeat` times each.
pub fn load(bytes: &[u8], repeat: usize) -> anyhow::Result<LoadStats> {
    let (mut compile, mut disk, mut memory) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..repeat.max(1) {
        let dir = scratch_dir(i);
        let config = RuntimeConfig {
            cache_dir: Some(dir.clone()),
            ..RuntimeConfig::default()
        };
        let cold = Runtime::new(config.clone())?;
        compile.push(timed_load(&cold, bytes, LoadSource::Compiled)?);
        memory.push(timed_load(&cold, bytes, LoadSource::Memory)?);
        drop(cold);
        let warm = Runtime::new(config)?;
        disk.push(timed_load(&warm, bytes, LoadSource::DiskCache)?);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(LoadStats {
        size_bytes: bytes.len(),
        compile_ms: median(&mut compile) * 1e3,
        disk_cache_ms: median(&mut disk) * 1e3,
        memory_hit_us: median(&mut memory) * 1e6,
    })
}

fn timed_load(runtime: &Runtime, bytes: &[u8], expect: LoadSource) -> anyhow::Result<f64> {
    let t = Instant::now();
    let (_, source) = runtime.load_traced(bytes)?;
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        source == expect,
        "expected a load from {expect:?}, got {source:?}"
    );
    Ok(secs)
}

fn scratch_dir(i: usize) -> PathBuf {
    std::env::temp_dir().join(format!("ax-bench-load-{}-{i}", std::process::id()))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
