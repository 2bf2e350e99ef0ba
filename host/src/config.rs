//! `ax serve` settings: one serde struct, defaults as named constants, read
//! from a YAML/JSON file, then environment variables, then flags (each later
//! source wins). Unknown keys in the file are errors, so a typo never goes
//! unnoticed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::schedule::spec::opt_duration;

/// Where `ax serve` listens by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8641";
/// Where `ax serve` keeps its data by default.
pub const DEFAULT_DATA_DIR: &str = "./ax-data";

/// Longest timeout a step may ask for by default (`caps.max_timeout`): long
/// enough for real batch work, short enough that an attempt blocked in a
/// host call on a shared host gives its slot back within minutes (it was 1 h).
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A named pool in the config file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    /// Steps of this pool running at once.
    pub slots: usize,
    /// Starts per second at most.
    #[serde(default)]
    pub rate_per_sec: Option<f64>,
}

/// Per-attempt caps every task is checked against.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapsFile {
    /// Most fuel a step may ask for.
    pub max_fuel: u64,
    /// Most memory a step may ask for, MiB.
    pub max_memory_mb: u64,
    /// Longest timeout a step may ask for.
    #[serde(with = "opt_duration")]
    pub max_timeout: Option<Duration>,
}

impl Default for CapsFile {
    fn default() -> Self {
        Self {
            max_fuel: 100_000_000_000,
            max_memory_mb: 1024,
            max_timeout: Some(DEFAULT_MAX_TIMEOUT),
        }
    }
}

/// Connections open at once by default. Each costs a file descriptor and
/// some tens of KiB; keep the cap below the open-file limit (`ulimit -n`)
/// with room for the store and plugins.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// A request head must be complete this long after its first byte (slowloris).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body must be complete this long after its head (a slow body);
/// a 32 MiB plugin upload needs ~280 KB/s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(120);
/// A connection with no request under way and nothing sent or received for
/// this long is closed (idle keep-alive, a client not reading its answer).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections one address may hold before any request on them carried a
/// valid token: an eighth of the default cap, so no one address can take it
/// (past this, that address's longest-idle anonymous connection is closed
/// to make room; docs/SECURITY.md, *One client holds the API*). Browsers
/// open about six per host; a proxy in front of ax is one address for all
/// its clients, so raise this behind one.
pub const DEFAULT_MAX_ANONYMOUS_PER_ADDRESS: usize = 64;
/// Connections one token may hold at once: half the default cap, so one
/// token (a leaked one, a runaway client) cannot take every place either.
pub const DEFAULT_MAX_PER_TOKEN: usize = 256;

/// What HTTP clients may hold open (`connections:` in the config file).
/// Past a limit the longest-idle connection without a token is closed to
/// make room; when none can be, a new connection is answered `503` and
/// closed (`api/connections.rs`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// Connections served at once.
    pub max_connections: usize,
    /// From a request's first byte to the end of its head.
    #[serde(with = "crate::scheduler::alerts::humantime_text")]
    pub header_read_timeout: Duration,
    /// From a request's head to the end of its body.
    #[serde(with = "crate::scheduler::alerts::humantime_text")]
    pub body_timeout: Duration,
    /// Without a request under way, the longest silence in both directions.
    #[serde(with = "crate::scheduler::alerts::humantime_text")]
    pub idle_timeout: Duration,
    /// Connections one client address (an IPv6 /64) may hold before a
    /// request on them carries a valid token, so one address cannot take
    /// `max_connections`.
    pub max_anonymous_per_address: usize,
    /// Connections one token may hold at once; a request past it is
    /// answered `429 too_many_token_connections`.
    pub max_per_token: usize,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_anonymous_per_address: DEFAULT_MAX_ANONYMOUS_PER_ADDRESS,
            max_per_token: DEFAULT_MAX_PER_TOKEN,
        }
    }
}

impl ConnectionsConfig {
    /// At least one connection, of each kind too; every timeout above zero. The error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections > u32::MAX as usize {
            return Err("max_connections: must be 1 or more".into());
        }
        for (name, n) in [
            ("max_anonymous_per_address", self.max_anonymous_per_address),
            ("max_per_token", self.max_per_token),
        ] {
            // Above `max_connections` is allowed (the cap binds first), so
            // a small cap alone needs no other change.
            if n == 0 {
                return Err(format!("{name}: must be 1 or more"));
            }
        }
        for (name, d) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_timeout", self.body_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{name}: must be longer than 0s"));
            }
        }
        Ok(())
    }
}

/// Largest `store.cache_mb` accepted: 64 GiB. More is a typo (a value in
/// KiB or bytes) rather than a plan; sled's cache is only a cache.
pub const MAX_STORE_CACHE_MB: u64 = 64 << 10;

/// Most connections `store.connections` may open to PostgreSQL.
pub const MAX_STORE_CONNECTIONS: usize = 256;

/// The store (`store:` in the config file): the embedded sled store in the
/// data directory, or PostgreSQL when `url` is set.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// sled's page cache, MiB (`cache_capacity`; 64 by default, sled's own
    /// default is 1024). Why this size: docs/OPERATIONS.md, *The store's cache*.
    pub cache_mb: u64,
    /// A PostgreSQL database (`postgres://USER:PASSWORD@HOST:PORT/DB`; also
    /// `--store` and `AX_STORE`) instead of sled.
    pub url: Option<String>,
    /// Connections to PostgreSQL at most.
    pub connections: usize,
    /// The engine of a new embedded store: `sled` (the default; also
    /// `AX_STORE_ENGINE`) or `fjall`. An existing store keeps its own
    /// (docs/OPERATIONS.md, *The embedded store's engine*).
    pub engine: Option<crate::store::EngineKind>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            cache_mb: crate::store::SledStore::DEFAULT_CACHE_BYTES >> 20,
            url: None,
            connections: crate::store::postgres::pool::DEFAULT_SIZE,
            engine: None,
        }
    }
}

impl StoreConfig {
    /// `cache_mb` from 1 to [`MAX_STORE_CACHE_MB`], `connections` from 1 to
    /// [`MAX_STORE_CONNECTIONS`]. The error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.cache_mb == 0 || self.cache_mb > MAX_STORE_CACHE_MB {
            return Err(format!(
                "cache_mb: {} is not in 1..={MAX_STORE_CACHE_MB} (MiB)",
                self.cache_mb
            ));
        }
        if self.connections == 0 || self.connections > MAX_STORE_CONNECTIONS {
            return Err(format!(
                "connections: {} is not in 1..={MAX_STORE_CONNECTIONS}",
                self.connections
            ));
        }
        Ok(())
    }

    /// The engine of a new embedded store: `engine`, else
    /// `AX_STORE_ENGINE`, else sled.
    pub fn engine(&self) -> crate::store::EngineKind {
        self.engine
            .unwrap_or_else(crate::store::EngineKind::from_env)
    }

    /// The cache in bytes, as sled takes it (saturating: unchecked values
    /// never wrap).
    pub fn cache_bytes(&self) -> u64 {
        self.cache_mb.saturating_mul(1 << 20)
    }
}

/// What the scheduler holds in memory (`memory:` in the config file;
/// docs/SCHEDULER.md, "Memory").
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Fires held in memory: those due within this many seconds.
    pub fire_window_s: u64,
    /// Most tasks armed at once (the window ends earlier past it).
    pub max_armed_tasks: usize,
    /// Parsed task definitions cached.
    pub task_cache: usize,
    /// Queued runs of one tenant held in memory; the rest wait in the store.
    pub queue_head: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        let scheduler = crate::scheduler::SchedulerConfig::default();
        Self {
            fire_window_s: (scheduler.window.ahead_ms / 1000) as u64,
            max_armed_tasks: scheduler.window.max_armed,
            task_cache: scheduler.task_cache,
            queue_head: scheduler.queue_head,
        }
    }
}

impl MemoryConfig {
    /// Every field at least 1, the window at most a day. The error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=86_400).contains(&self.fire_window_s) {
            return Err(format!(
                "fire_window_s: {} is not in 1..=86400 (seconds)",
                self.fire_window_s
            ));
        }
        for (name, value) in [
            ("max_armed_tasks", self.max_armed_tasks),
            ("task_cache", self.task_cache),
            ("queue_head", self.queue_head),
        ] {
            if value == 0 {
                return Err(format!("{name}: must be at least 1"));
            }
        }
        Ok(())
    }

    /// The scheduler's settings with these bounds.
    pub fn apply(&self, config: &mut crate::scheduler::SchedulerConfig) {
        config.window.ahead_ms = (self.fire_window_s as i64).saturating_mul(1000);
        config.window.max_armed = self.max_armed_tasks;
        config.task_cache = self.task_cache;
        config.queue_head = self.queue_head;
    }
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the HTTP API (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// Data directory: the sled store, plugin blobs, compiled artifacts.
    pub data_dir: PathBuf,
    /// The admin token (else `AX_ADMIN_TOKEN`, else the stored hash, else generated and printed once).
    pub admin_token: Option<String>,
    /// Attempts running at once (default: the number of cores).
    pub concurrency: Option<usize>,
    /// Of those, slots reserved for priority >= 7 (default: a quarter).
    pub reserved_high: Option<usize>,
    /// Runs a tenant may have waiting before triggers get 429.
    pub max_queued_per_tenant: usize,
    /// Runs waiting (all tenants) past which low-priority runs are shed.
    pub high_water: usize,
    /// Named pools.
    pub pools: BTreeMap<String, PoolFile>,
    /// Per-attempt caps.
    pub caps: CapsFile,
    /// Largest plugin upload, MiB.
    pub max_plugin_mb: usize,
    /// Wasm instances that may exist at once (pooling allocator slots).
    pub max_instances: u32,
    /// History kept by default and how often the sweeper runs (docs/TASKS.md).
    pub retention: crate::scheduler::retention::RetentionConfig,
    /// Webhook alert delivery and per-tenant alerts (`crate::scheduler::alerts`).
    pub alerts: crate::scheduler::alerts::AlertsConfig,
    /// Key-value bytes (keys + values) each tenant may keep, KiB (16 MiB by default).
    pub kv_quota_kb: u64,
    /// What HTTP clients may hold open: connection cap and timeouts (docs/OPERATIONS.md).
    pub connections: ConnectionsConfig,
    /// The embedded store: sled's cache size (docs/OPERATIONS.md).
    pub store: StoreConfig,
    /// What the scheduler holds in memory (docs/SCHEDULER.md, "Memory").
    pub memory: MemoryConfig,
    /// A token that reads `GET /metrics` and nothing else (else `AX_METRICS_TOKEN`);
    /// without one only the admin token reads the metrics.
    pub metrics_token: Option<String>,

    // Plugin memory, compilation and storage (docs/RUNTIME.md, docs/TENANTS.md).
    /// Memory the loaded plugins may take, MiB; past it the least recently
    /// used are dropped (and reloaded from their artifact when next used).
    pub loaded_plugins_mb: u64,
    /// Plugin compilations at once (default: half the cores, at least one).
    pub max_compiles: Option<usize>,
    /// Plugin uploads that may wait for a compilation; past them an upload
    /// gets `429 compile_queue_full`.
    pub compile_queue: usize,
    /// Serve large components from Winch's code first while Cranelift's is
    /// compiled behind it (docs/PLUGINS.md, *Upload and compilation*); on by
    /// default in a build with the `winch` feature, ignored without it.
    pub tiered_compile: bool,
    /// The smallest component (KiB of wasm) that gets Winch's code first;
    /// smaller ones are compiled by Cranelift alone (default 1024).
    pub tiered_compile_min_kb: u64,
    /// Plugin versions each tenant may keep, unless its quota says otherwise.
    pub plugin_quota_count: u32,
    /// Plugin versions each tenant may have compiling (or waiting to) at
    /// once; one more upload gets `429 compile_queue_full`.
    pub plugin_compiling_per_tenant: u32,
    /// Bytes of plugin versions each tenant may keep, MiB, unless its quota
    /// says otherwise.
    pub plugin_quota_mb: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("valid constant"),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            admin_token: None,
            concurrency: None,
            reserved_high: None,
            max_queued_per_tenant: 10_000,
            high_water: 50_000,
            pools: BTreeMap::new(),
            caps: CapsFile::default(),
            max_plugin_mb: 32,
            max_instances: crate::runtime::DEFAULT_MAX_INSTANCES,
            retention: crate::scheduler::retention::RetentionConfig::default(),
            alerts: crate::scheduler::alerts::AlertsConfig::default(),
            kv_quota_kb: crate::capability::kv::DEFAULT_QUOTA_BYTES >> 10,
            connections: ConnectionsConfig::default(),
            store: StoreConfig::default(),
            memory: MemoryConfig::default(),
            metrics_token: None,
            loaded_plugins_mb: crate::runtime::DEFAULT_LOADED_BYTES >> 20,
            max_compiles: None,
            compile_queue: crate::runtime::DEFAULT_COMPILE_QUEUE,
            tiered_compile: true,
            tiered_compile_min_kb: (crate::runtime::DEFAULT_BASELINE_MIN_BYTES >> 10) as u64,
            plugin_quota_count: crate::service::DEFAULT_MAX_PLUGINS_PER_TENANT,
            plugin_compiling_per_tenant: crate::service::DEFAULT_MAX_COMPILING_PER_TENANT,
            plugin_quota_mb: crate::service::DEFAULT_PLUGIN_BYTES_PER_TENANT >> 20,
        }
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading config {}: {source}", path.display())]
    Read {
        /// The config file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid configuration (YAML or JSON of [`Config`]).
    #[error("config {}: {source}", path.display())]
    Parse {
        /// The config file.
        path: PathBuf,
        /// What the parser said (boxed: it carries the offending snippet).
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// `AX_LISTEN` is not a socket address.
    #[error("AX_LISTEN `{value}`: {source}")]
    Listen {
        /// The variable's value.
        value: String,
        /// Why it does not parse.
        #[source]
        source: std::net::AddrParseError,
    },
}

impl Config {
    /// How plugins are compiled: `tiered_compile` from
    /// `tiered_compile_min_kb` up (the runtime ignores it without Winch).
    pub fn tiering(&self) -> crate::runtime::Tiering {
        if self.tiered_compile {
            crate::runtime::Tiering::Tiered {
                min_bytes: usize::try_from(self.tiered_compile_min_kb.saturating_mul(1 << 10))
                    .unwrap_or(usize::MAX),
            }
        } else {
            crate::runtime::Tiering::Off
        }
    }

    /// Reads `path` (YAML or JSON), or the defaults without a file; then
    /// applies `AX_LISTEN`, `AX_STORE`, `AX_DATA_DIR`, `AX_ADMIN_TOKEN`,
    /// `AX_METRICS_TOKEN`.
    pub fn load(path: Option<&Path>) -> Result<Self, Error> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                serde_saphyr::from_str::<Config>(&text).map_err(|source| Error::Parse {
                    path: path.to_path_buf(),
                    source: Box::new(source),
                })?
            }
            None => Config::default(),
        };
        if let Ok(listen) = std::env::var("AX_LISTEN") {
            config.listen = listen.parse().map_err(|source| Error::Listen {
                value: listen.clone(),
                source,
            })?;
        }
        if let Ok(url) = std::env::var("AX_STORE")
            && !url.is_empty()
        {
            config.store.url = Some(url);
        }
        if let Some(dir) = std::env::var_os("AX_DATA_DIR") {
            config.data_dir = PathBuf::from(dir);
        }
        if let Ok(token) = std::env::var("AX_ADMIN_TOKEN")
            && !token.is_empty()
        {
            config.admin_token = Some(token);
        }
        if let Ok(token) = std::env::var("AX_METRICS_TOKEN")
            && !token.is_empty()
        {
            config.metrics_token = Some(token);
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_keys_override_defaults_and_unknown_keys_fail() {
        let text = "listen: 127.0.0.1:9000\npools:\n  warehouse: { slots: 2, rate_per_sec: 200 }\ncaps:\n  max_timeout: 10m\n";
        let config: Config = serde_saphyr::from_str(text).unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.pools["warehouse"].slots, 2);
        assert_eq!(config.caps.max_timeout, Some(Duration::from_secs(600)));
        assert_eq!(config.max_queued_per_tenant, 10_000);
        assert_eq!(
            Config::default().caps.max_timeout,
            Some(Duration::from_secs(900))
        );
        assert!(serde_saphyr::from_str::<Config>("listn: x\n").is_err());
    }

    #[test]
    fn tiered_compile_is_on_from_a_mib_and_can_be_turned_off_or_moved() {
        use crate::runtime::Tiering;
        assert_eq!(
            Config::default().tiering(),
            Tiering::Tiered { min_bytes: 1 << 20 }
        );
        let off: Config = serde_saphyr::from_str("tiered_compile: false\n").unwrap();
        assert_eq!(off.tiering(), Tiering::Off);
        let moved: Config = serde_saphyr::from_str("tiered_compile_min_kb: 0\n").unwrap();
        assert_eq!(moved.tiering(), Tiering::Tiered { min_bytes: 0 });
    }

    #[test]
    fn connection_limits_are_read_and_checked() {
        let text =
            "connections: { max_connections: 3, header_read_timeout: 500ms, idle_timeout: 2s }\n";
        let config: Config = serde_saphyr::from_str(text).unwrap();
        let c = &config.connections;
        assert_eq!(c.max_connections, 3);
        assert_eq!(c.header_read_timeout, Duration::from_millis(500));
        assert_eq!(c.idle_timeout, Duration::from_secs(2));
        assert_eq!(c.body_timeout, DEFAULT_BODY_TIMEOUT);
        assert!(c.validate().is_ok());
        let zero: Config = serde_saphyr::from_str("connections: { body_timeout: 0s }\n").unwrap();
        assert!(
            zero.connections
                .validate()
                .unwrap_err()
                .starts_with("body_timeout")
        );
        assert!(serde_saphyr::from_str::<Config>("connections: { max: 3 }\n").is_err());

        assert_eq!(
            c.max_anonymous_per_address,
            DEFAULT_MAX_ANONYMOUS_PER_ADDRESS
        );
        assert_eq!(c.max_per_token, DEFAULT_MAX_PER_TOKEN);
        assert!(c.validate().is_ok(), "per-client limits above a small cap");
        let per: Config = serde_saphyr::from_str(
            "connections: { max_anonymous_per_address: 4, max_per_token: 8 }\n",
        )
        .unwrap();
        assert_eq!(per.connections.max_anonymous_per_address, 4);
        assert_eq!(per.connections.max_per_token, 8);
        for (text, field) in [
            ("max_anonymous_per_address: 0", "max_anonymous_per_address"),
            ("max_per_token: 0", "max_per_token"),
        ] {
            let bad: Config =
                serde_saphyr::from_str(&format!("connections: {{ {text} }}\n")).unwrap();
            let e = bad.connections.validate().unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
    }

    #[test]
    fn store_cache_is_read_and_checked() {
        assert_eq!(Config::default().store.cache_mb, 64);
        let memory: Config =
            serde_saphyr::from_str("memory: { fire_window_s: 30, queue_head: 50 }\n").unwrap();
        assert!(memory.memory.validate().is_ok());
        let mut scheduler = crate::scheduler::SchedulerConfig::default();
        memory.memory.apply(&mut scheduler);
        assert_eq!(scheduler.window.ahead_ms, 30_000);
        assert_eq!(scheduler.queue_head, 50);
        assert_eq!(scheduler.task_cache, 10_000, "defaults kept");
        for (bad, field) in [
            ("fire_window_s: 0", "fire_window_s"),
            ("fire_window_s: 86401", "fire_window_s"),
            ("queue_head: 0", "queue_head"),
            ("task_cache: 0", "task_cache"),
            ("max_armed_tasks: 0", "max_armed_tasks"),
        ] {
            let config: Config = serde_saphyr::from_str(&format!("memory: {{ {bad} }}\n")).unwrap();
            let message = config.memory.validate().unwrap_err();
            assert!(message.starts_with(field), "{message}");
        }
        assert_eq!(Config::default().store.cache_bytes(), 64 << 20);
        let config: Config = serde_saphyr::from_str("store: { cache_mb: 256 }\n").unwrap();
        assert_eq!(config.store.cache_mb, 256);
        assert_eq!(config.store.cache_bytes(), 256 << 20);
        assert!(config.store.validate().is_ok());
        for bad in [0, MAX_STORE_CACHE_MB + 1, u64::MAX] {
            let config: Config =
                serde_saphyr::from_str(&format!("store: {{ cache_mb: {bad} }}\n")).unwrap();
            let message = config.store.validate().unwrap_err();
            assert!(message.starts_with("cache_mb:"), "{message}");
            assert!(message.contains("1..=65536"), "{message}");
        }
        assert!(serde_saphyr::from_str::<Config>("store: { cache: 3 }\n").is_err());
        // The engine of a new embedded store, by name; any other is refused.
        let fjall: Config = serde_saphyr::from_str("store: { engine: fjall }\n").unwrap();
        assert_eq!(fjall.store.engine(), crate::store::EngineKind::Fjall);
        let sled: Config = serde_saphyr::from_str("store: { engine: sled }\n").unwrap();
        assert_eq!(sled.store.engine(), crate::store::EngineKind::Sled);
        let bogus = serde_saphyr::from_str::<Config>("store: { engine: rocks }\n").unwrap_err();
        assert!(bogus.to_string().contains("rocks"), "{bogus}");
        let pg: Config =
            serde_saphyr::from_str("store: { url: \"postgres://ax@db/ax\", connections: 4 }\n")
                .unwrap();
        assert_eq!(pg.store.url.as_deref(), Some("postgres://ax@db/ax"));
        assert_eq!(pg.store.connections, 4);
        assert_eq!(Config::default().store.url, None);
        for bad in [0, MAX_STORE_CONNECTIONS + 1] {
            let config: Config =
                serde_saphyr::from_str(&format!("store: {{ connections: {bad} }}\n")).unwrap();
            let message = config.store.validate().unwrap_err();
            assert!(message.starts_with("connections: "), "{message}");
        }
        assert!(serde_saphyr::from_str::<Config>("store: { cache_mb: -1 }\n").is_err());
    }
}
