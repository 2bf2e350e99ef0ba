//! `ax bench trigger`: manual triggers, each answered once durable, measured
//! until every run is stored finished and durable. In-process clients call
//! the service; with `--http` they go through the real API over loopback, each
//! client a keep-alive connection (ureq's agent), as a producer would.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{bench_server, percentile, scratch_dir, until_finished_and_durable};
use crate::model::Outcome;

/// Throughput of manual triggers: accepted durably → succeeded.
#[derive(Clone, Debug, Serialize)]
pub struct ThroughputStats {
    /// Runs triggered.
    pub runs: usize,
    /// Triggering clients at once.
    pub concurrency: usize,
    /// Through the HTTP API over loopback (else in-process).
    pub http: bool,
    /// Runs accepted (durably) per second.
    pub accepted_per_sec: f64,
    /// Runs triggered and finished per second, end to end.
    pub runs_per_sec: f64,
    /// Median latency of an accepted trigger (durable), ms.
    pub trigger_p50_ms: f64,
    /// 99th percentile trigger latency, ms.
    pub trigger_p99_ms: f64,
    /// Statements the store ran per run, from the first trigger until every
    /// run is stored finished (a store with a pool: PostgreSQL). Its
    /// background reads in that time (the fire window, every second) are
    /// counted too, shared among the runs.
    pub statements_per_run: Option<f64>,
}

impl fmt::Display for ThroughputStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs, {} {} clients: accepted {:.0}/s, end to end {:.0} runs/s, trigger p50 {:.2} ms, p99 {:.2} ms",
            self.runs,
            self.concurrency,
            if self.http { "HTTP" } else { "in-process" },
            self.accepted_per_sec,
            self.runs_per_sec,
            self.trigger_p50_ms,
            self.trigger_p99_ms
        )?;
        if let Some(n) = self.statements_per_run {
            write!(f, ", {n:.2} store statements per run")?;
        }
        Ok(())
    }
}

/// `runs` manual triggers from `concurrency` clients through the service
/// (each answered only once durable); measures until every run succeeded.
/// On sled, or on a new database of the PostgreSQL server `store` names.
pub async fn trigger_throughput(
    runs: usize,
    concurrency: usize,
    http: bool,
    store: Option<&str>,
) -> anyhow::Result<ThroughputStats> {
    let dir = scratch_dir(9001);
    let (server, _scratch) = bench_server(&dir, None, store).await?;
    server
        .ax
        .put_task("default", "bench", "name: bench\nplugin: echo@1.0.0\n")
        .await?;
    let statements = || server.ax.store.health().pool.map(|p| p.statements);
    let statements_before = statements();
    let started = Instant::now();
    let per_client = runs.div_ceil(concurrency.max(1));
    let (mut latencies, ids) = if http {
        http_clients(&server, concurrency.max(1), per_client).await?
    } else {
        in_process_clients(&server, concurrency.max(1), per_client).await?
    };
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
    // Finished means stored finished and durable: runs are written behind.
    until_finished_and_durable(&server, started, Duration::from_secs(600)).await?;
    let finished = started.elapsed();
    let statements_per_run = statements_before
        .zip(statements())
        .map(|(before, after)| (after - before) as f64 / ids.len().max(1) as f64);
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
        http,
        accepted_per_sec: ids.len() as f64 / accepted.as_secs_f64(),
        runs_per_sec: ids.len() as f64 / finished.as_secs_f64(),
        trigger_p50_ms: percentile(&latencies, 0.5),
        trigger_p99_ms: percentile(&latencies, 0.99),
        statements_per_run,
    })
}

/// Latencies (ms) and run ids of `clients` × `per_client` triggers.
type Triggered = (Vec<f64>, Vec<String>);

async fn in_process_clients(
    server: &crate::server::Server,
    clients: usize,
    per_client: usize,
) -> anyhow::Result<Triggered> {
    let mut set = tokio::task::JoinSet::new();
    for c in 0..clients {
        let ax = server.ax.clone();
        set.spawn(async move {
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
                ids.push(run.id.into_string());
            }
            anyhow::Ok((latencies, ids))
        });
    }
    let (mut latencies, mut ids) = (Vec::new(), Vec::new());
    while let Some(res) = set.join_next().await {
        let (l, i) = res??;
        latencies.extend(l);
        ids.extend(i);
    }
    Ok((latencies, ids))
}

/// The same triggers as `POST /v1/tasks/bench/runs` over loopback, one
/// thread and one keep-alive connection per client, with the admin token.
async fn http_clients(
    server: &crate::server::Server,
    clients: usize,
    per_client: usize,
) -> anyhow::Result<Triggered> {
    let url = format!("http://{}/v1/tasks/bench/runs", server.addr);
    tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..clients)
                .map(|c| {
                    let url = url.clone();
                    scope.spawn(move || -> anyhow::Result<Triggered> {
                        let agent: ureq::Agent = ureq::Agent::config_builder()
                            .http_status_as_error(false)
                            .build()
                            .into();
                        let mut latencies = Vec::with_capacity(per_client);
                        let mut ids = Vec::with_capacity(per_client);
                        for i in 0..per_client {
                            let body = format!("{{\"idempotency_key\": \"{c}-{i}\"}}");
                            let t = Instant::now();
                            let mut r = agent
                                .post(&url)
                                .header("authorization", "Bearer bench")
                                .header("content-type", "application/json")
                                .send(body.as_str())?;
                            let status = r.status();
                            let text = r.body_mut().read_to_string()?;
                            latencies.push(t.elapsed().as_secs_f64() * 1e3);
                            anyhow::ensure!(status == 201, "trigger answered {status}: {text}");
                            let run: serde_json::Value = serde_json::from_str(&text)?;
                            let id = run["id"].as_str().unwrap_or_default().to_string();
                            ids.push(id);
                        }
                        Ok((latencies, ids))
                    })
                })
                .collect();
            let (mut latencies, mut ids) = (Vec::new(), Vec::new());
            for h in handles {
                let (l, i) = h.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
                latencies.extend(l);
                ids.extend(i);
            }
            Ok((latencies, ids))
        })
    })
    .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound, counted rather than estimated: a one-step run
    /// triggered by a lone client costs the PostgreSQL store at most six
    /// statements, from its trigger to its final state stored
    /// (docs/POSTGRES.md: one for the trigger, one per write-behind).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_one_step_run_costs_postgres_at_most_six_statements() {
        let var = crate::store::postgres::testing::SERVER_VAR;
        if crate::store::postgres::testing::TestDatabase::create().is_none() {
            return;
        }
        let server = std::env::var(var).expect("set");
        let stats = trigger_throughput(100, 1, false, Some(&server))
            .await
            .expect("measured");
        let per_run = stats
            .statements_per_run
            .expect("PostgreSQL counts statements");
        eprintln!("{stats}");
        assert!(per_run <= 6.0, "{per_run:.2} statements per run");
    }
}
