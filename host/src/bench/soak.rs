//! `ax bench soak`: "one hour compressed" — many tasks firing every second
//! with retention on, sampling the store's size and stored runs over time.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{percentile, scratch_dir};
use crate::store::prelude::*;

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
        retention: crate::scheduler::retention::RetentionConfig {
            sweep_every: config.sweep_every,
            ..crate::scheduler::retention::RetentionConfig::default()
        },
        ..crate::config::Config::default()
    };
    let server = crate::server::start(server_config, false).await?;
    super::upload_echo(&server).await?;
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
