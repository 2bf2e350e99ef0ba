//! `ax bench kv` and `ax bench http`: what a plugin's capability calls cost
//! (a key-value round trip, an allowed HTTP request), as the median attempt
//! making the calls minus the median attempt making none.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::bench_context;
use crate::model::{Limits, Outcome};
use crate::runtime::{Plugin, Runtime, RuntimeConfig};

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
    use crate::capability::kv::KvStore;
    use crate::capability::{Grants, KvGrant, KvLimits, KvNamespace, KvScope};
    use crate::store::kv::{MemoryKv, SledKv};
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
