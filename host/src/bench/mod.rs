//! Measurement loops behind `ax bench` and `cargo bench`. They drive the real
//! runtime the way the scheduler does; numbers are recorded in
//! `docs/PERFORMANCE.md`.
//!
//! One file per benchmark (`exec`, `load`, `fire`, `trigger`, `dag`, `soak`,
//! `caps`, `tenants`, `scale`, `dump`); this file holds what they share: the attempt context,
//! scratch directories, medians and percentiles, and a loopback server with
//! the `echo` plugin uploaded.

mod caps;
mod dag;
mod dump;
mod exec;
mod fire;
mod load;
mod scale;
mod soak;
mod tenants;
mod trigger;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::model::{AttemptContext, TriggerKind};
use crate::store::prelude::*;

pub use self::caps::{HttpBenchStats, KvBenchStats, http_requests, kv_round_trips};
pub use self::dag::{DagStats, dag_overhead};
pub use self::dump::{DumpStats, Leg, dump_speed};
pub use self::exec::{ExecStats, exec, speed_up};
pub use self::fire::{LatenessStats, fire_lateness};
pub use self::load::{LoadStats, load};
pub use self::scale::{Memory, ScaleConfig, ScaleStats, scale};
pub use self::soak::{SoakConfig, SoakSample, SoakStats, soak};
pub use self::tenants::{TenantOverhead, tenant_overhead};
pub use self::trigger::{ThroughputStats, trigger_throughput};

/// The context every benchmark attempt runs with (no real run behind it).
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

/// A scratch directory of this process, numbered per benchmark (`9000`
/// and up for the server benchmarks, the repetition for `load`).
fn scratch_dir(i: usize) -> PathBuf {
    std::env::temp_dir().join(format!("ax-bench-load-{}-{i}", std::process::id()))
}

/// The median of `values` (sorts them).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `q` quantile of `sorted` (0 when empty).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// A database made for one benchmark on the PostgreSQL server `--store`
/// names, dropped with this (after the benchmark's server stopped).
type Scratch = Option<crate::store::postgres::testing::TestDatabase>;

/// A server on `127.0.0.1:0` with its data in `dir`, no quotas in the way,
/// and the demo `echo` plugin uploaded to the `default` tenant. With
/// `store` (a PostgreSQL URL whose user may create databases), its store is
/// a new database on that server instead of sled, so every measurement
/// starts from an empty store as it does on sled.
async fn bench_server(
    dir: &std::path::Path,
    concurrency: Option<usize>,
    store: Option<&str>,
) -> anyhow::Result<(crate::server::Server, Scratch)> {
    let scratch = store
        .map(crate::store::postgres::testing::TestDatabase::on)
        .transpose()?;
    let config = crate::config::Config {
        listen: "127.0.0.1:0".parse()?,
        data_dir: dir.to_path_buf(),
        admin_token: Some("bench".into()),
        concurrency,
        max_queued_per_tenant: 1_000_000,
        high_water: 1_000_000,
        store: crate::config::StoreConfig {
            url: scratch.as_ref().map(|db| db.url().to_string()),
            ..crate::config::StoreConfig::default()
        },
        ..crate::config::Config::default()
    };
    let server = crate::server::start(config, false).await?;
    upload_echo(&server).await?;
    Ok((server, scratch))
}

/// Uploads the embedded `echo` plugin as `echo@1.0.0` of `default` and
/// waits until it is compiled, so measured runs start with it ready.
async fn upload_echo(server: &crate::server::Server) -> anyhow::Result<()> {
    let echo = crate::server::demo_plugin("echo")
        .ok_or_else(|| anyhow::anyhow!("echo plugin not embedded"))?;
    server
        .ax
        .upload_plugin("default", "echo", "1.0.0", echo.to_vec())
        .await?;
    server
        .ax
        .wait_plugin(
            "default",
            "echo",
            "1.0.0",
            std::time::Duration::from_secs(120),
        )
        .await?;
    Ok(())
}

/// Waits until no run is active in the **store** (every final state the
/// scheduler writes behind is stored), then until the store's group commit
/// has made it durable: a benchmark counts a run finished only then, not when
/// its last attempt reported (its record may still be in the actor's memory).
async fn until_finished_and_durable(
    server: &crate::server::Server,
    started: Instant,
    limit: Duration,
) -> anyhow::Result<()> {
    loop {
        let store = server.ax.store.clone();
        let active = tokio::task::spawn_blocking(move || store.active_runs()).await??;
        if active.is_empty() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < limit,
            "{} runs were not stored finished within {limit:?}",
            active.len()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.ax.store.sync_ticket().wait().await?;
    Ok(())
}
