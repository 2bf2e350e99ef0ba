//! Measurement loops behind `ax bench` and `cargo bench`. They drive the real
//! runtime the way the scheduler does; numbers are recorded in
//! `docs/PERFORMANCE.md`.

mod tenants;

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::model::{AttemptContext, Limits, Outcome, TriggerKind};
use crate::runtime::{LoadSource, Plugin, Runtime, RuntimeConfig};

pub use self::tenants::{TenantOverhead, tenant_overhead};

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

/// Fire lateness: scheduled instant → first attempt start.
#[derive(Clone, Debug, Serialize)]
pub struct LatenessStats {
    /// Whether all tasks fired at the same instant.
    pub aligned: bool,
    /// Tasks firing.
    pub tasks: usize,
    /// Seconds measured.
    pub seconds: u64,
    /// Runs that started.
    pub samples: usize,
    /// Median lateness, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Worst, ms.
    pub max_ms: f64,
}

impl fmt::Display for LatenessStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tasks every second ({}) for {} s: {} runs started, lateness p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.tasks,
            if self.aligned {
                "all at the same instant"
            } else {
                "spread over the second"
            },
            self.seconds,
            self.samples,
            self.p50_ms,
            self.p99_ms,
            self.max_ms
        )
    }
}

/// Throughput of manual triggers: accepted durably → succeeded.
#[derive(Clone, Debug, Serialize)]
pub struct ThroughputStats {
    /// Runs triggered.
    pub runs: usize,
    /// Triggering clients at once.
    pub concurrency: usize,
    /// Runs accepted (durably) per second.
    pub accepted_per_sec: f64,
    /// Runs triggered and finished per second, end to end.
    pub runs_per_sec: f64,
    /// Median latency of an accepted trigger (durable), ms.
    pub trigger_p50_ms: f64,
    /// 99th percentile trigger latency, ms.
    pub trigger_p99_ms: f64,
}

impl fmt::Display for ThroughputStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs, {} clients: accepted {:.0}/s, end to end {:.0} runs/s, trigger p50 {:.2} ms, p99 {:.2} ms",
            self.runs,
            self.concurrency,
            self.accepted_per_sec,
            self.runs_per_sec,
            self.trigger_p50_ms,
            self.trigger_p99_ms
        )
    }
}

async fn bench_server(
    dir: &std::path::Path,
    concurrency: Option<usize>,
) -> anyhow::Result<crate::server::Server> {
    let config = crate::config::Config {
        listen: "127.0.0.1:0".parse()?,
        data_dir: dir.to_path_buf(),
        admin_token: Some("bench".into()),
        concurrency,
        max_queued_per_tenant: 1_000_000,
        high_water: 1_000_000,
        ..crate::config::Config::default()
    };
    let server = crate::server::start(config, false).await?;
    let echo = crate::server::demo_plugin("echo")
        .ok_or_else(|| anyhow::anyhow!("echo plugin not embedded"))?;
    server
        .ax
        .upload_plugin("default", "echo", "1.0.0", echo.to_vec())
        .await?;
    Ok(server)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// `tasks` tasks firing every second for `seconds`, through the real
/// scheduler, store and runtime; reports when each run's first attempt started.
///
/// With `aligned`, every task uses the cron `* * * * * ?`, so all fire at the
/// same instant each second; otherwise `every: 1s` anchored at each task's
/// creation, so fires spread over the second as real schedules do.
pub async fn fire_lateness(
    tasks: usize,
    seconds: u64,
    aligned: bool,
) -> anyhow::Result<LatenessStats> {
    let dir = scratch_dir(9000);
    let server = bench_server(&dir, None).await?;
    for i in 0..tasks {
        let trigger = if aligned {
            "cron: \"* * * * * ?\""
        } else {
            "every: 1s"
        };
        let body = format!("name: tick{i}\ntrigger: {{ {trigger} }}\nplugin: echo@1.0.0\n");
        server
            .ax
            .put_task("default", &format!("tick{i}"), &body)
            .await?;
    }
    // Discard the first second (tasks were being created), then measure.
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.ax.scheduler.stats().take_lateness();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let mut samples = server.ax.scheduler.stats().take_lateness();
    server.shutdown.cancel();
    server.join().await?;
    let _ = std::fs::remove_dir_all(&dir);
    samples.sort_by(f64::total_cmp);
    Ok(LatenessStats {
        aligned,
        tasks,
        seconds,
        samples: samples.len(),
        p50_ms: percentile(&samples, 0.50),
        p99_ms: percentile(&samples, 0.99),
        max_ms: samples.last().copied().unwrap_or_default(),
    })
}

/// `runs` manual triggers from `concurrency` clients through the service
/// (each answered only once durable); measures until every run succeeded.
pub async fn trigger_throughput(
    runs: usize,
    concurrency: usize,
) -> anyhow::Result<ThroughputStats> {
    let dir = scratch_dir(9001);
    let server = bench_server(&dir, None).await?;
    server
        .ax
        .put_task("default", "bench", "name: bench\nplugin: echo@1.0.0\n")
        .await?;
    let started = Instant::now();
    let per_client = runs.div_ceil(concurrency.max(1));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..concurrency.max(1) {
        let ax = server.ax.clone();
        clients.spawn(async move {
            let mut latencies = Vec::with_capacity(per_client);
            let mut ids = Vec::with_capacity(per_client);
            for i in 0..per_client {
                let t = Instant::now();
                let (run, _) = ax
                    .trigger(crate::scheduler::TriggerRequest {
                        tenant: "default".into(),
                        task: "bench".into(),
                        idempotency_key: Some(format!("{c}-{i}")),
                        actor: "bench".into(),
                        ..Default::default()
                    })
                    .await?;
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
                ids.push(run.id);
            }
            anyhow::Ok((latencies, ids))
        });
    }
    let (mut latencies, mut ids) = (Vec::new(), Vec::new());
    while let Some(res) = clients.join_next().await {
        let (l, i) = res??;
        latencies.extend(l);
        ids.extend(i);
    }
    let accepted = started.elapsed();
    // Wait until every run finished (checking the newest first: they finish last).
    let stats = server.ax.scheduler.stats().clone();
    let total = ids.len() as u64;
    let succeeded_index = Outcome::ALL
        .iter()
        .position(|o| *o == Outcome::Succeeded)
        .unwrap_or(0);
    while stats.attempts[succeeded_index].load(std::sync::atomic::Ordering::Relaxed) < total {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "runs did not finish in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let finished = started.elapsed();
    // Runs are written behind (at most 250 ms later): let the last ones land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in ids.iter().rev().take(10) {
        let run = server.ax.get_run("default", id)?;
        anyhow::ensure!(
            run.status == crate::model::RunStatus::Succeeded,
            "run {id} ended {:?}",
            run.status
        );
    }
    server.shutdown.cancel();
    server.join().await?;
    let _ = std::fs::remove_dir_all(&dir);
    latencies.sort_by(f64::total_cmp);
    Ok(ThroughputStats {
        runs: ids.len(),
        concurrency,
        accepted_per_sec: ids.len() as f64 / accepted.as_secs_f64(),
        runs_per_sec: ids.len() as f64 / finished.as_secs_f64(),
        trigger_p50_ms: percentile(&latencies, 0.5),
        trigger_p99_ms: percentile(&latencies, 0.99),
    })
}

/// Scheduling overhead of a large DAG.
#[derive(Clone, Debug, Serialize)]
pub struct DagStats {
    /// Steps in the DAG (root, fan-out, join).
    pub steps: usize,
    /// Attempts running at once.
    pub concurrency: usize,
    /// From trigger to the run's end, ms.
    pub wall_ms: f64,
    /// Sum of the attempts' own durations, ms.
    pub plugin_ms: f64,
    /// (wall − plugin time spread over the slots) per step, µs.
    pub overhead_per_step_us: f64,
}

impl fmt::Display for DagStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-step fan-out/fan-in on {} slots: wall {:.1} ms, plugin time {:.1} ms, scheduling overhead {:.1} µs per step",
            self.steps, self.concurrency, self.wall_ms, self.plugin_ms, self.overhead_per_step_us
        )
    }
}

/// One run of a `steps`-step DAG (a root, `steps - 2` parallel steps needing
/// it, a join needing them all) of the trivial `echo` plugin.
pub async fn dag_overhead(steps: usize) -> anyhow::Result<DagStats> {
    let steps = steps.max(3);
    let dir = scratch_dir(9002);
    let server = bench_server(&dir, None).await?;
    let mut yaml = String::from("name: fan\nsteps:\n  - name: root\n    plugin: echo@1.0.0\n");
    for i in 0..steps - 2 {
        yaml.push_str(&format!(
            "  - name: s{i}\n    needs: [root]\n    plugin: echo@1.0.0\n"
        ));
    }
    let mids: Vec<String> = (0..steps - 2).map(|i| format!("s{i}")).collect();
    yaml.push_str(&format!(
        "  - name: join\n    needs: [{}]\n    plugin: echo@1.0.0\n",
        mids.join(", ")
    ));
    server.ax.put_task("default", "fan", &yaml).await?;
    let concurrency = server.ax.scheduler_concurrency();
    let started = Instant::now();
    let (run, _) = server
        .ax
        .trigger(crate::scheduler::TriggerRequest {
            tenant: "default".into(),
            task: "fan".into(),
            actor: "bench".into(),
            ..Default::default()
        })
        .await?;
    let stats = server.ax.scheduler.stats().clone();
    let succeeded = Outcome::ALL
        .iter()
        .position(|o| *o == Outcome::Succeeded)
        .unwrap_or(0);
    while stats.attempts[succeeded].load(std::sync::atomic::Ordering::Relaxed) < steps as u64 {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "the DAG did not finish"
        );
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let wall = started.elapsed().as_secs_f64() * 1e3;
    // Let the actor store the final state, then read the attempts back.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let run = server.ax.get_run("default", &run.id)?;
    anyhow::ensure!(
        run.status == crate::model::RunStatus::Succeeded,
        "the DAG ended {:?}",
        run.status
    );
    let plugin_ms: f64 = run
        .steps
        .iter()
        .flat_map(|s| &s.attempts)
        .map(|a| a.duration_ms)
        .sum();
    server.shutdown.cancel();
    server.join().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(DagStats {
        steps,
        concurrency,
        wall_ms: wall,
        plugin_ms,
        overhead_per_step_us: (wall - plugin_ms / concurrency as f64).max(0.0) * 1e3 / steps as f64,
    })
}

/// Settings of `ax bench soak`.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// Tasks, each firing every second.
    pub tasks: usize,
    /// How long to run.
    pub duration: Duration,
    /// Each task's `retention.keep_runs`.
    pub keep_runs: u64,
    /// How often the retention sweeper runs.
    pub sweep_every: Duration,
    /// How often the store size is sampled.
    pub sample_every: Duration,
}

/// One sample of a soak.
#[derive(Clone, Debug, Serialize)]
pub struct SoakSample {
    /// Seconds since the tasks were created.
    pub at_s: f64,
    /// Runs created so far.
    pub runs_created: u64,
    /// Runs deleted by retention so far.
    pub runs_deleted: u64,
    /// Runs in the store now.
    pub runs_stored: usize,
    /// Bytes of the store on disk (database and blobs).
    pub store_bytes: u64,
}

/// What a soak showed.
#[derive(Clone, Debug, Serialize)]
pub struct SoakStats {
    /// Tasks firing every second.
    pub tasks: usize,
    /// Seconds run.
    pub seconds: f64,
    /// Each task's `keep_runs`.
    pub keep_runs: u64,
    /// Samples over time.
    pub samples: Vec<SoakSample>,
    /// Runs created per second, on average.
    pub runs_per_sec: f64,
    /// Largest store size in the first half of the soak.
    pub max_bytes_first_half: u64,
    /// Largest store size in the second half.
    pub max_bytes_second_half: u64,
    /// Most runs stored at any sample; retention bounds it near `tasks × keep_runs`.
    pub max_runs_stored: usize,
    /// Fire lateness over the soak, p99, ms.
    pub lateness_p99_ms: f64,
}

impl fmt::Display for SoakStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} tasks every second, keep_runs {}, for {:.0} s: {:.0} runs/s created",
            self.tasks, self.keep_runs, self.seconds, self.runs_per_sec
        )?;
        writeln!(
            f,
            "{:>8}  {:>12}  {:>12}  {:>11}  {:>12}",
            "t (s)", "runs created", "runs deleted", "runs stored", "store MiB"
        )?;
        for s in &self.samples {
            writeln!(
                f,
                "{:>8.0}  {:>12}  {:>12}  {:>11}  {:>12.1}",
                s.at_s,
                s.runs_created,
                s.runs_deleted,
                s.runs_stored,
                s.store_bytes as f64 / (1 << 20) as f64
            )?;
        }
        write!(
            f,
            "store max: first half {:.1} MiB, second half {:.1} MiB; runs stored at most {} (retention keeps {}, plus runs finished since the last sweep and active ones); fire lateness p99 {:.1} ms",
            self.max_bytes_first_half as f64 / (1 << 20) as f64,
            self.max_bytes_second_half as f64 / (1 << 20) as f64,
            self.max_runs_stored,
            self.tasks as u64 * self.keep_runs,
            self.lateness_p99_ms
        )
    }
}

/// "One hour compressed": `tasks` tasks firing every second through the
/// real scheduler, store and runtime, each keeping `keep_runs` finished runs,
/// with the retention sweeper running every `sweep_every`; samples the store
/// size on disk and the number of stored runs every `sample_every`.
pub async fn soak(config: SoakConfig) -> anyhow::Result<SoakStats> {
    let dir = scratch_dir(9003);
    let _ = std::fs::remove_dir_all(&dir);
    let server_config = crate::config::Config {
        listen: "127.0.0.1:0".parse()?,
        data_dir: dir.clone(),
        admin_token: Some("bench".into()),
        max_queued_per_tenant: 1_000_000,
        high_water: 1_000_000,
        retention: crate::retention::RetentionConfig {
            sweep_every: config.sweep_every,
            ..crate::retention::RetentionConfig::default()
        },
        ..crate::config::Config::default()
    };
    let server = crate::server::start(server_config, false).await?;
    let echo = crate::server::demo_plugin("echo")
        .ok_or_else(|| anyhow::anyhow!("echo plugin not embedded"))?;
    server
        .ax
        .upload_plugin("default", "echo", "1.0.0", echo.to_vec())
        .await?;
    for i in 0..config.tasks {
        let body = format!(
            "name: soak{i}\ntrigger: {{ every: 1s }}\nplugin: echo@1.0.0\ninput: {{ n: {i}, run: \"${{runId}}\" }}\nretention: {{ keep_runs: {} }}\n",
            config.keep_runs
        );
        server
            .ax
            .put_task("default", &format!("soak{i}"), &body)
            .await?;
    }
    let stats = server.ax.scheduler.stats().clone();
    stats.take_lateness();
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut lateness = Vec::new();
    loop {
        let store = server.ax.store.clone();
        let (bytes, stored) =
            tokio::task::spawn_blocking(move || -> anyhow::Result<(u64, usize)> {
                Ok((store.size_on_disk(), store.run_summaries()?.len()))
            })
            .await??;
        samples.push(SoakSample {
            at_s: started.elapsed().as_secs_f64(),
            runs_created: stats
                .runs_created
                .load(std::sync::atomic::Ordering::Relaxed),
            runs_deleted: stats
                .runs_deleted
                .load(std::sync::atomic::Ordering::Relaxed),
            runs_stored: stored,
            store_bytes: bytes,
        });
        lateness.extend(stats.take_lateness());
        if started.elapsed() >= config.duration {
            break;
        }
        tokio::time::sleep(
            config
                .sample_every
                .min(config.duration.saturating_sub(started.elapsed())),
        )
        .await;
    }
    let seconds = started.elapsed().as_secs_f64();
    server.shutdown.cancel();
    server.join().await?;
    let _ = std::fs::remove_dir_all(&dir);
    lateness.sort_by(f64::total_cmp);
    let half = seconds / 2.0;
    let max_in = |first: bool| {
        samples
            .iter()
            .filter(|s| (s.at_s <= half) == first)
            .map(|s| s.store_bytes)
            .max()
            .unwrap_or(0)
    };
    Ok(SoakStats {
        tasks: config.tasks,
        seconds,
        keep_runs: config.keep_runs,
        runs_per_sec: samples.last().map_or(0, |s| s.runs_created) as f64 / seconds,
        max_bytes_first_half: max_in(true),
        max_bytes_second_half: max_in(false),
        max_runs_stored: samples.iter().map(|s| s.runs_stored).max().unwrap_or(0),
        lateness_p99_ms: percentile(&lateness, 0.99),
        samples,
    })
}

// --- capabilities ---------------------------------------------------------

/// Cost of key-value calls from a plugin (`ax bench kv`).
#[derive(Clone, Debug, Serialize)]
pub struct KvBenchStats {
    /// `sled` (on disk, like a server) or `memory`.
    pub store: String,
    /// Calls per measured attempt.
    pub ops: usize,
    /// Bytes per value.
    pub value_bytes: usize,
    /// One `set` from the guest, µs (median attempt, minus an empty attempt).
    pub set_us: f64,
    /// One `get`, µs.
    pub get_us: f64,
    /// An attempt making no call, µs (what was subtracted).
    pub empty_attempt_us: f64,
}

impl fmt::Display for KvBenchStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "store {}, {} calls per attempt, {}-byte values",
            self.store, self.ops, self.value_bytes
        )?;
        writeln!(
            f,
            "set   {:>8.2} µs/call  ({:.0} calls/s)",
            self.set_us,
            1e6 / self.set_us
        )?;
        writeln!(
            f,
            "get   {:>8.2} µs/call  ({:.0} calls/s)",
            self.get_us,
            1e6 / self.get_us
        )?;
        write!(f, "empty attempt {:.1} µs", self.empty_attempt_us)
    }
}

/// Cost of an allowed HTTP request from a plugin to a loopback server (`ax bench http`).
#[derive(Clone, Debug, Serialize)]
pub struct HttpBenchStats {
    /// Requests per measured attempt.
    pub requests: usize,
    /// One request (check, connect, send, read 2 bytes), µs.
    pub request_us: f64,
    /// An attempt making no request, µs (what was subtracted).
    pub empty_attempt_us: f64,
}

impl fmt::Display for HttpBenchStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} GETs per attempt to 127.0.0.1 (a new connection each)",
            self.requests
        )?;
        writeln!(
            f,
            "request {:>8.1} µs  ({:.0} requests/s from one attempt)",
            self.request_us,
            1e6 / self.request_us
        )?;
        write!(f, "empty attempt {:.1} µs", self.empty_attempt_us)
    }
}

/// The median wall time of `repeat` attempts of `plugin` with `input`.
async fn median_attempt(
    runtime: &Runtime,
    plugin: &Plugin,
    input: &serde_json::Value,
    grants: &crate::capability::Grants,
    repeat: usize,
) -> anyhow::Result<Duration> {
    let ctx = bench_context();
    let limits = Limits {
        timeout: Duration::from_secs(600),
        fuel: u64::MAX / 2,
        ..Limits::default()
    };
    let input = input.to_string();
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        let report = runtime
            .run_with(plugin, &ctx, &input, &limits, grants, None)
            .await?;
        times.push(t.elapsed());
        anyhow::ensure!(
            report.outcome == Outcome::Succeeded,
            "benchmark attempt ended {}: {:?}",
            report.outcome,
            report.error
        );
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}

fn per_call(total: Duration, empty: Duration, calls: usize) -> f64 {
    total.saturating_sub(empty).as_secs_f64() * 1e6 / calls.max(1) as f64
}

/// KV `set` and `get` round trips from the `bench-caps` plugin, against a
/// sled store in a scratch directory (as on a server) or in memory.
pub async fn kv_round_trips(
    plugin_bytes: &[u8],
    ops: usize,
    value_bytes: usize,
    repeat: usize,
    in_memory: bool,
) -> anyhow::Result<KvBenchStats> {
    use crate::capability::{Grants, KvGrant, KvLimits, KvNamespace, KvScope};
    use crate::store::kv::{KvStore, MemoryKv, SledKv};
    use serde_json::json;

    let runtime = Runtime::new(RuntimeConfig::default())?;
    let plugin = runtime.load(plugin_bytes)?;
    let scratch = std::env::temp_dir().join(format!("ax-bench-kv-{}", std::process::id()));
    let store: std::sync::Arc<dyn KvStore> = if in_memory {
        std::sync::Arc::new(MemoryKv::default())
    } else {
        std::sync::Arc::new(SledKv::open_dir(&scratch)?)
    };
    let grants = Grants {
        kv: Some(KvGrant {
            store,
            namespace: KvNamespace::new("bench", "bench", KvScope::Tenant),
            limits: KvLimits {
                quota_bytes: u64::MAX,
                ..KvLimits::default()
            },
        }),
        ..Grants::default()
    };
    let empty = json!({ "kv_get": { "n": 0 } });
    let set = json!({ "kv_set": { "n": ops, "bytes": value_bytes } });
    let get = json!({ "kv_get": { "n": ops } });
    // Warm up: compile, fill the keys, fault the pages in.
    median_attempt(&runtime, &plugin, &set, &grants, 1).await?;
    let empty_t = median_attempt(&runtime, &plugin, &empty, &grants, repeat).await?;
    let set_t = median_attempt(&runtime, &plugin, &set, &grants, repeat).await?;
    let get_t = median_attempt(&runtime, &plugin, &get, &grants, repeat).await?;
    drop(grants);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(KvBenchStats {
        store: if in_memory { "memory" } else { "sled" }.into(),
        ops,
        value_bytes,
        set_us: per_call(set_t, empty_t, ops),
        get_us: per_call(get_t, empty_t, ops),
        empty_attempt_us: empty_t.as_secs_f64() * 1e6,
    })
}

/// Allowed HTTP GETs from the `bench-caps` plugin to a server on 127.0.0.1
/// started here: the whole path (allow-list check, connect, request, body).
pub async fn http_requests(
    plugin_bytes: &[u8],
    requests: usize,
    repeat: usize,
) -> anyhow::Result<HttpBenchStats> {
    use crate::capability::Grants;
    use serde_json::json;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().route("/ok", axum::routing::get(|| async { "ok" }));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let plugin = runtime.load(plugin_bytes)?;
    let grants = Grants {
        allow_http: vec![
            format!("http://{addr}")
                .parse()
                .map_err(anyhow::Error::msg)?,
        ],
        http_limits: crate::capability::HttpLimits {
            max_requests: u32::MAX,
            ..Default::default()
        },
        ..Grants::default()
    };
    let url = format!("http://{addr}/ok");
    let empty = json!({ "http": { "n": 0, "url": url } });
    let full = json!({ "http": { "n": requests, "url": url } });
    median_attempt(&runtime, &plugin, &full, &grants, 1).await?;
    let empty_t = median_attempt(&runtime, &plugin, &empty, &grants, repeat).await?;
    let full_t = median_attempt(&runtime, &plugin, &full, &grants, repeat).await?;
    server.abort();
    Ok(HttpBenchStats {
        requests,
        request_us: per_call(full_t, empty_t, requests),
        empty_attempt_us: empty_t.as_secs_f64() * 1e6,
    })
}
