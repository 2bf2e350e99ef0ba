//! `ax bench fire`: fire lateness — how long after its scheduled instant
//! a cron or interval run's first attempt starts, with many tasks firing.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::{bench_server, percentile, scratch_dir};

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
    let (server, _) = bench_server(&dir, None, None).await?;
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
