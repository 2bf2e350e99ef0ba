//! Wiring for `ax serve`: open the store, build the runtime and the
//! scheduler, settle the admin token, optionally load the demo, serve HTTP
//! until SIGINT/SIGTERM, then stop the scheduler. The scheduler and the
//! facade over the store and the runtime are started by [`start_core`],
//! which `ax task run --local` calls too, without HTTP. The adapter that runs the
//! scheduler's attempts in the wasm runtime is wiring too ([`runner`]), and
//! so is returning freed heap to the system ([`trim`]).

mod runner;
mod trim;

use std::sync::Arc;

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::config::Config;
use crate::runtime::{Runtime, RuntimeConfig};
use crate::scheduler::{PoolConfig, QueueConfig, Scheduler, SchedulerConfig, SystemClock};
use crate::service::Ax;
use crate::store::SledStore;
use crate::store::Store;
use crate::task::Caps;

pub use self::runner::{WasmRunner, resolve_grants};

/// Meta key of the admin token's sha256.
const ADMIN_TOKEN_META: &str = "admin_token_sha256";

/// Example plugins embedded for `ax serve --demo` (built by host/build.rs).
const DEMO_PLUGINS: &[(&str, &[u8])] = &[
    (
        "hello",
        include_bytes!(concat!(env!("AX_PLUGIN_DIR"), "/hello.wasm")),
    ),
    (
        "echo",
        include_bytes!(concat!(env!("AX_PLUGIN_DIR"), "/echo.wasm")),
    ),
    (
        "extract-orders",
        include_bytes!(concat!(env!("AX_PLUGIN_DIR"), "/extract_orders.wasm")),
    ),
    (
        "pack",
        include_bytes!(concat!(env!("AX_PLUGIN_DIR"), "/pack.wasm")),
    ),
    (
        "notify",
        include_bytes!(concat!(env!("AX_PLUGIN_DIR"), "/notify.wasm")),
    ),
    (
        "fail",
        include_bytes!(concat!(env!("AX_PLUGIN_DIR"), "/fail.wasm")),
    ),
];

/// The bytes of an embedded example plugin (`hello`, `echo`, `extract-orders`, …).
pub fn demo_plugin(name: &str) -> Option<&'static [u8]> {
    DEMO_PLUGINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
}

/// Example tasks for `ax serve --demo`.
const DEMO_TASKS: &[(&str, &str)] = &[
    (
        "hello",
        "name: hello\ntrigger:\n  every: 10s\nplugin: hello@1.0.0\ninput: { name: \"ax (run ${runId})\" }\n",
    ),
    (
        "order_report",
        r#"name: order_report
description: the seed articles' nightly report - extract, pack full or incremental by size, notify
trigger:
  cron: "0 30 1 * * ?"
  timezone: Asia/Shanghai
steps:
  - name: extract
    plugin: extract-orders@1.0.0
    input: { date: "${bizDate}" }
    limits: { fuel: 50000000, memory_mb: 64, timeout: 30s }
    retry: { max_attempts: 3, backoff: [10s, 30s, 2m] }
  - name: full
    needs: [extract]
    when: "steps.extract.output.rows > 800000"
    plugin: pack@1.0.0
    input: { rows: "${steps.extract.output.rows}", mode: full }
  - name: incremental
    needs: [extract]
    when: "steps.extract.output.rows <= 800000"
    plugin: pack@1.0.0
    input: { rows: "${steps.extract.output.rows}", mode: incremental }
  - name: notify
    needs: [full, incremental]
    trigger_rule: one_success
    plugin: notify@1.0.0
    input: { text: "report ready: ${steps.extract.output.rows} rows" }
"#,
    ),
];

/// Everything a running server holds.
pub struct Server {
    /// The facade (also used by tests and benchmarks in-process).
    pub ax: Ax,
    /// The bound address.
    pub addr: std::net::SocketAddr,
    /// Fires to stop serving and scheduling.
    pub shutdown: CancellationToken,
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    scheduler: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Waits until the server stopped (after `shutdown` fired).
    pub async fn join(self) -> anyhow::Result<()> {
        self.http.await??;
        let _ = self.scheduler.await;
        Ok(())
    }
}

/// Resolves the admin token's hash: the configured token (stored hashed),
/// else the stored hash, else a new token printed once.
fn admin_token(store: &dyn Store, configured: Option<&str>) -> anyhow::Result<[u8; 32]> {
    let hash = |t: &str| -> [u8; 32] { Sha256::digest(t.as_bytes()).into() };
    if let Some(token) = configured {
        let h = hash(token);
        store.put_meta(ADMIN_TOKEN_META, &hex::encode(h))?;
        return Ok(h);
    }
    if let Some(stored) = store.get_meta(ADMIN_TOKEN_META)? {
        let bytes = hex::decode(&stored).context("stored admin token hash is not hex")?;
        return bytes
            .try_into()
            .map_err(|_| anyhow::anyhow!("stored admin token hash has the wrong length"));
    }
    let token = hex::encode(rand::random::<[u8; 32]>());
    let h = hash(&token);
    store.put_meta(ADMIN_TOKEN_META, &hex::encode(h))?;
    println!("ax: generated the admin token (shown once, stored hashed): {token}");
    println!("ax: export AX_TOKEN={token}");
    Ok(h)
}

/// A sled store to check in the background once recovery is done.
type CheckLater = std::sync::Weak<SledStore>;

/// The store `config` names, behind the fault guard: PostgreSQL when
/// `store.url` is set, else sled in the data directory (with, weakly, the
/// sled store whose whole-database check starts once recovery is done).
fn open_store(config: &Config) -> anyhow::Result<(Arc<dyn Store>, Option<CheckLater>)> {
    if let Some(url) = &config.store.url {
        let pg = crate::store::postgres::PgStore::open(url, config.store.connections)?;
        tracing::info!(store = %pg.database().pool().shown(), "store: PostgreSQL");
        // A refused write (the database away) is answered 503 until one
        // succeeds again; the pool reconnects by itself, so nothing reopens.
        let store = crate::store::guard::Guarded::guard(Arc::new(pg) as Arc<dyn Store>, None);
        return Ok((Arc::new(store), None));
    }
    let engine = config.store.engine();
    let sled = Arc::new(SledStore::open_unchecked_as(
        &config.data_dir,
        config.store.cache_bytes(),
        engine,
    )?);
    tracing::info!(engine = sled.engine().name(), "store: embedded");
    if let Some(configured) = config.store.engine.filter(|e| *e != sled.engine()) {
        tracing::warn!(
            engine = sled.engine().name(),
            configured = configured.name(),
            "store.engine applies to a new store only: this one keeps its engine; move it with `ax store export` and `ax store import`"
        );
    }
    // Held weakly: a store the guard replaces must be dropped for the
    // directory to open again.
    let check_later = Arc::downgrade(&sled);
    // A write refused (full disk, I/O error) is answered 503 and held by the
    // scheduler; sled keeps such an error until its database is reopened,
    // which the guard does once the directory takes writes again
    // (docs/RELIABILITY.md, "Store faults").
    let reopen = {
        let (dir, cache) = (config.data_dir.clone(), config.store.cache_bytes());
        crate::store::guard::Reopen {
            dir: config.data_dir.clone(),
            open: Box::new(move || {
                let store = SledStore::open_unchecked_as(&dir, cache, engine)?;
                store.check_in_background();
                Ok(Arc::new(store) as Arc<dyn Store>)
            }),
        }
    };
    let store: Arc<dyn Store> = Arc::new(crate::store::guard::Guarded::guard(
        sled as Arc<dyn Store>,
        Some(reopen),
    ));
    Ok((store, Some(check_later)))
}

/// Starts ax: store, runtime, scheduler, HTTP. Returns once listening.
pub async fn start(config: Config, demo: bool) -> anyhow::Result<Server> {
    config
        .connections
        .validate()
        .map_err(|e| anyhow::anyhow!("config: connections.{e}"))?;
    config
        .store
        .validate()
        .map_err(|e| anyhow::anyhow!("config: store.{e}"))?;
    config
        .memory
        .validate()
        .map_err(|e| anyhow::anyhow!("config: memory.{e}"))?;
    crate::task::retention::check_idempotency_ttl(config.retention.idempotency_ttl)
        .map_err(|e| anyhow::anyhow!("config: retention.idempotency_ttl: {e}"))?;
    // The port first: a taken one stops ax before it writes the data
    // directory, uploads the demo or prints a new admin token.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| {
            format!(
                "listening on {} (is another ax running? pick a free address with --listen)",
                config.listen
            )
        })?;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating the data directory {}", config.data_dir.display()))?;
    let (store, check_later) = open_store(&config)?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(config.data_dir.join("artifacts")),
        max_instances: config.max_instances,
        max_memory_bytes: (config.caps.max_memory_mb << 20)
            .max(crate::runtime::DEFAULT_MAX_MEMORY_BYTES),
        loaded_bytes: config.loaded_plugins_mb.saturating_mul(1 << 20),
        max_compiles: config
            .max_compiles
            .unwrap_or_else(crate::runtime::default_max_compiles),
        compile_queue: config.compile_queue,
        compiler: crate::runtime::CompilerConfig {
            tiering: config.tiering(),
            ..Default::default()
        },
        ..RuntimeConfig::default()
    })?;
    let shutdown = CancellationToken::new();
    let Core {
        ax,
        scheduler: scheduler_task,
    } = start_core(&config, store.clone(), runtime, shutdown.clone()).await?;
    // Recovered: the read of every entry no longer competes with it.
    if let Some(sled) = check_later.and_then(|weak| weak.upgrade()) {
        sled.check_in_background();
    }
    // Versions accepted but not compiled when the host last stopped.
    ax.resume_compiles()?;
    let token_hash = admin_token(store.as_ref(), config.admin_token.as_deref())?;
    if demo {
        load_demo(&ax).await?;
    }
    let addr = listener.local_addr()?;
    let state = ApiState {
        ax: ax.clone(),
        admin_token_sha256: token_hash,
        metrics_token_sha256: config
            .metrics_token
            .as_deref()
            .map(crate::api::auth::hash_token),
    };
    let http = tokio::spawn(api::serve(
        listener,
        state,
        config.connections.clone(),
        shutdown.clone(),
    ));
    // Retention: stops with everything else; its deletions go through the scheduler.
    crate::scheduler::retention::spawn_sweeper(
        ax.store.clone(),
        ax.scheduler.clone(),
        ax.clock.clone(),
        config.retention.clone(),
        shutdown.clone(),
    );
    trim::spawn(shutdown.clone());
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "ax is serving");
    Ok(Server {
        ax,
        addr,
        shutdown,
        http,
        scheduler: scheduler_task,
    })
}

/// The core of a host, without its HTTP side: the facade over `store`,
/// `runtime` and a running scheduler, and the scheduler's task (it ends
/// once `shutdown` fires). `ax serve` starts it on its data directory;
/// `ax task run --local` on a memory store, to run one task in-process.
pub struct Core {
    /// The facade.
    pub ax: Ax,
    /// The scheduler's task.
    pub scheduler: tokio::task::JoinHandle<()>,
}

/// Starts the scheduler on `store` and `runtime` with `config`'s queue,
/// caps, memory and alert settings, and builds the facade over them.
pub async fn start_core(
    config: &Config,
    store: Arc<dyn Store>,
    runtime: Runtime,
    shutdown: CancellationToken,
) -> anyhow::Result<Core> {
    let mut queue =
        QueueConfig::for_cores(std::thread::available_parallelism().map_or(2, |n| n.get()));
    if let Some(c) = config.concurrency {
        queue = QueueConfig::for_cores(c);
    }
    if let Some(r) = config.reserved_high {
        queue.reserved_high = r.min(queue.global_limit.saturating_sub(1));
    }
    queue.pools = config
        .pools
        .iter()
        .map(|(name, p)| {
            (
                name.clone(),
                PoolConfig {
                    slots: p.slots,
                    rate_per_sec: p.rate_per_sec,
                },
            )
        })
        .collect();
    let concurrency = queue.global_limit;
    // One set of host caps, for saving (Ax::caps_for) and for every start.
    let caps = Caps {
        max_fuel: config.caps.max_fuel,
        max_memory_mb: config.caps.max_memory_mb,
        max_timeout: config
            .caps
            .max_timeout
            .unwrap_or(crate::config::DEFAULT_MAX_TIMEOUT),
    };
    let mut scheduler_config = SchedulerConfig {
        queue,
        max_queued_per_tenant: config.max_queued_per_tenant,
        high_water: config.high_water,
        caps: caps.clone(),
        idempotency_ttl: config.retention.idempotency_ttl,
        ..SchedulerConfig::default()
    };
    config.memory.apply(&mut scheduler_config);
    crate::scheduler::alerts::validate_config(&config.alerts)
        .await
        .map_err(|e| anyhow::anyhow!("config: {e}"))?;
    let clock = Arc::new(SystemClock);
    let kv_limits = crate::capability::KvLimits {
        quota_bytes: config.kv_quota_kb.saturating_mul(1 << 10),
        ..Default::default()
    };
    let tenants = crate::service::load_registry(
        store.as_ref(),
        crate::scheduler::Clock::now_ms(clock.as_ref()),
    )?;
    let scheduler_config = SchedulerConfig {
        // Task webhooks are checked against the live tenant ceilings.
        alerts: crate::scheduler::alerts::Alerter::start(
            config.alerts.clone(),
            tenants.clone(),
            store.clone(),
            clock.clone(),
            shutdown.clone(),
        ),
        ..scheduler_config
    };
    let runner = Arc::new(
        WasmRunner::new(runtime.clone(), store.clone())
            .with_kv_limits(kv_limits)
            .with_tenants(tenants.clone()),
    );
    let (scheduler, scheduler_task) = Scheduler::start(
        store.clone(),
        runner,
        clock.clone(),
        scheduler_config,
        shutdown.clone(),
    )
    .await?;
    for t in tenants.tenants() {
        scheduler
            .stats()
            .alerts
            .set_tenant(&t.name, t.alerts.clone());
    }
    let ax = Ax {
        tenants,
        store: store.clone(),
        runtime,
        scheduler,
        clock,
        caps,
        max_plugin_bytes: config.max_plugin_mb << 20,
        concurrency,
        plugin_quota: crate::service::PluginQuota::new(
            config.plugin_quota_count,
            config.plugin_quota_mb.saturating_mul(1 << 20),
        )
        .with_max_compiling(config.plugin_compiling_per_tenant),
    };
    Ok(Core {
        ax,
        scheduler: scheduler_task,
    })
}

/// Uploads the example plugins (as version 1.0.0, tenant `default`) and
/// applies the example tasks, unless they are already there.
async fn load_demo(ax: &Ax) -> anyhow::Result<()> {
    for (name, bytes) in DEMO_PLUGINS {
        ax.upload_plugin("default", name, "1.0.0", bytes.to_vec())
            .await
            .with_context(|| format!("loading demo plugin {name}"))?;
    }
    for (name, body) in DEMO_TASKS {
        if ax.store.get_task("default", name)?.is_none() {
            ax.put_task("default", name, body)
                .await
                .with_context(|| format!("applying demo task {name}"))?;
        }
    }
    println!(
        "ax: demo loaded: tasks `hello` (every 10s) and `order_report` (cron, trigger it by hand)"
    );
    Ok(())
}

/// `ax serve`: runs until SIGINT or SIGTERM.
pub async fn serve(config: Config, demo: bool) -> anyhow::Result<()> {
    let server = start(config, demo).await?;
    // Tests and scripts read the address from this line.
    println!("ax listening on http://{}", server.addr);
    let stop = server.shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        tracing::info!("shutting down");
        stop.cancel();
    });
    server.join().await
}
