//! `ax bench dag`: the scheduling overhead per step of one large fan-out /
//! fan-in DAG of the trivial `echo` plugin.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{bench_server, scratch_dir, until_finished_and_durable};
use crate::model::Outcome;

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
/// it, a join needing them all) of the trivial `echo` plugin, on sled or on
/// a new database of the PostgreSQL server `store` names.
pub async fn dag_overhead(steps: usize, store: Option<&str>) -> anyhow::Result<DagStats> {
    let steps = steps.max(3);
    let dir = scratch_dir(9002);
    let (server, _scratch) = bench_server(&dir, None, store).await?;
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
    // Finished means stored finished and durable, not just the last attempt
    // reported: the run's record is written behind.
    until_finished_and_durable(&server, started, Duration::from_secs(300)).await?;
    let wall = started.elapsed().as_secs_f64() * 1e3;
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
