//! `ax bench tenants`: what authentication and tenant quotas cost per
//! trigger. The same server takes rounds of HTTP triggers alternately as
//! the admin on the `default` tenant (no quota: the path without tenants)
//! and with a tenant token on a tenant whose every quota is set (fuel budget
//! reserved and settled per attempt, trigger-rate bucket, queue and
//! concurrency caps) but never reached. Rounds interleave so drift of this
//! noisy machine hits both modes alike; the medians are compared.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::model::Outcome;
use crate::service::TenantSpec;
use crate::tenant::Quota;

/// Results of `ax bench tenants`.
#[derive(Clone, Debug, Serialize)]
pub struct TenantOverhead {
    /// Runs per round.
    pub runs: usize,
    /// HTTP clients at once.
    pub clients: usize,
    /// Rounds per mode.
    pub rounds: usize,
    /// Runs/s (triggered over HTTP → succeeded) per round, admin on `default`.
    pub plain_runs_per_sec: Vec<f64>,
    /// The same with a tenant token on a tenant with every quota set.
    pub tenant_runs_per_sec: Vec<f64>,
    /// Median of the plain rounds.
    pub plain_median: f64,
    /// Median of the tenant rounds.
    pub tenant_median: f64,
    /// 1 − tenant/plain, in percent (positive: tenants cost that much).
    pub overhead_percent: f64,
}

impl fmt::Display for TenantOverhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rounds of {} runs over HTTP, {} clients: without tenants median {:.0} runs/s {:?}, \
             tenant token + quotas median {:.0} runs/s {:?}: overhead {:.1}%",
            self.rounds,
            self.runs,
            self.clients,
            self.plain_median,
            round(&self.plain_runs_per_sec),
            self.tenant_median,
            round(&self.tenant_runs_per_sec),
            self.overhead_percent
        )
    }
}

fn round(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.round() as u64).collect()
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return 0.0;
    }
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// `runs` triggers from `clients` threads as `token` (+ tenant header),
/// until the scheduler counted that many more successes.
async fn one_round(
    server: &crate::server::Server,
    token: &str,
    runs: usize,
    clients: usize,
) -> anyhow::Result<f64> {
    let stats = server.ax.scheduler.stats().clone();
    let ok = Outcome::ALL
        .iter()
        .position(|o| *o == Outcome::Succeeded)
        .unwrap_or(0);
    let before = stats.attempts[ok].load(std::sync::atomic::Ordering::Relaxed);
    let url = format!("http://{}/v1/tasks/bench/runs", server.addr);
    let token = token.to_string();
    let started = Instant::now();
    let per_client = runs.div_ceil(clients.max(1));
    tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..clients.max(1))
                .map(|_| {
                    let (url, token) = (url.clone(), token.clone());
                    scope.spawn(move || -> anyhow::Result<()> {
                        let agent: ureq::Agent = ureq::Agent::config_builder()
                            .http_status_as_error(false)
                            .build()
                            .into();
                        for _ in 0..per_client {
                            let r = agent
                                .post(&url)
                                .header("authorization", &format!("Bearer {token}"))
                                .header("content-type", "application/json")
                                .send("{}")?;
                            anyhow::ensure!(r.status() == 201, "trigger answered {}", r.status());
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("client panicked"))?)
        })
    })
    .await??;
    let total = (per_client * clients.max(1)) as u64;
    while stats.attempts[ok].load(std::sync::atomic::Ordering::Relaxed) < before + total {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "runs did not finish in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Alternates `rounds` plain and `rounds` tenant rounds of `runs` triggers.
pub async fn tenant_overhead(
    runs: usize,
    clients: usize,
    rounds: usize,
) -> anyhow::Result<TenantOverhead> {
    let dir = super::scratch_dir(9002);
    let (server, _) = super::bench_server(&dir, None, None).await?;
    let ax = &server.ax;
    let quota = Quota {
        fuel_per_window: Some(u64::MAX / 2),
        max_fuel_per_attempt: Some(crate::model::DEFAULT_FUEL),
        max_memory_mb: Some(256),
        max_timeout: Some(Duration::from_secs(60)),
        max_concurrent_attempts: Some(64),
        max_queued_runs: Some(1_000_000),
        trigger_rate_per_sec: Some(1e9),
        ..Quota::default()
    };
    ax.create_tenant(TenantSpec {
        name: Some("bench-tenant".into()),
        quota: Some(quota),
        ..TenantSpec::default()
    })
    .await?;
    let (token, _) = ax.create_token("bench-tenant", None).await?;
    let echo = crate::server::demo_plugin("echo")
        .ok_or_else(|| anyhow::anyhow!("echo plugin not embedded"))?;
    ax.upload_plugin("bench-tenant", "echo", "1.0.0", echo.to_vec())
        .await?;
    // Compiled in the background: measured runs start with it ready.
    ax.wait_plugin(
        "bench-tenant",
        "echo",
        "1.0.0",
        std::time::Duration::from_secs(120),
    )
    .await?;
    for tenant in ["default", "bench-tenant"] {
        ax.put_task(tenant, "bench", "name: bench\nplugin: echo@1.0.0\n")
            .await?;
    }
    // Warm up both paths once.
    one_round(&server, "bench", runs / 4 + 1, clients).await?;
    one_round(&server, &token, runs / 4 + 1, clients).await?;
    let (mut plain, mut tenant) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(one_round(&server, "bench", runs, clients).await?);
        tenant.push(one_round(&server, &token, runs, clients).await?);
    }
    let usage = ax.usage("bench-tenant", None, None)?;
    anyhow::ensure!(
        usage.total.attempts > 0 || usage.window.fuel_used == 0,
        "tenant usage was not counted: {}",
        json!(usage.total)
    );
    server.shutdown.cancel();
    server.join().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let (pm, tm) = (median(&plain), median(&tenant));
    Ok(TenantOverhead {
        runs,
        clients,
        rounds,
        plain_runs_per_sec: plain,
        tenant_runs_per_sec: tenant,
        plain_median: pm,
        tenant_median: tm,
        overhead_percent: (1.0 - tm / pm) * 100.0,
    })
}
