//! The sandbox: loads plugin components and runs attempts under limits.
//!
//! This is the only module that names wasmtime. It owns:
//! - one shared [`wasmtime::Engine`] (component model, fuel, epoch interruption,
//!   pooling allocator) and one [`Linker`] with WASI p2 and the ax host imports;
//! - validation of uploaded bytes against the ax world ([`validate`]);
//! - the compiled-artifact cache, on disk and in memory, the latter bounded
//!   by bytes ([`cache`]), and the gate that bounds compilations and the
//!   uploads waiting for one ([`compile`]);
//! - per-attempt execution: a fresh `Store` with a fuel budget, a memory limiter
//!   that records denials, an epoch deadline driven by one ticker thread, an
//!   outer timeout for time blocked in host calls, and bounded capture;
//! - the capabilities an attempt is granted ([`crate::capability::Grants`]):
//!   `config`, `secrets` and `kv` imports ([`host`]) and outbound `wasi:http`
//!   checked against the step's allow-list ([`http`]); secret values are
//!   redacted from everything the attempt reports.
//!
//! It does not decide *when* or *whether* to run (the scheduler does), nor
//! retry anything: it turns (plugin, context, input, limits) into an
//! [`AttemptReport`] and says precisely how the attempt ended.

mod cache;
mod capture;
mod compile;
mod host;
mod http;
mod validate;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
    UpdateDeadline,
};
use wasmtime_wasi::WasiCtxBuilder;

use crate::capability::{self, Grants};
use crate::model::{AttemptContext, AttemptReport, ErrorKind, Limits, Outcome, TriggerKind};

use self::capture::{CapturePipe, LogSink};
use self::host::{HostState, MemoryLimiter};
use self::http::HttpHooks;

pub use self::compile::{DEFAULT_COMPILE_QUEUE, GateStats, UploadTicket, default_max_compiles};
pub use self::validate::WORLD;

/// Bindings generated from `wit/` — the same file the guests build against.
#[allow(missing_docs, unreachable_pub)]
mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "ax:plugin/task",
        exports: { default: async },
    });
}

/// Errors of the runtime. Plugin misbehaviour is *not* an error: it is an
/// [`Outcome`] in the [`AttemptReport`]. These are bad uploads and host faults.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly binary: {0}")]
    Malformed(String),
    /// A core module was given where a component is required.
    #[error(
        "this is a core WebAssembly module, not a component: build the plugin for \
         `wasm32-wasip2` (or wrap the module with `wasm-tools component new`)"
    )]
    CoreModule,
    /// The component does not compile.
    #[error("invalid component: {0}")]
    Invalid(String),
    /// The component does not export the ax world's `run`.
    #[error("the component does not target the ax world `{WORLD}`: {0}")]
    WrongWorld(String),
    /// The component imports interfaces ax does not provide.
    #[error(
        "the component imports {0}, which ax does not provide (allowed: ax:plugin types/log/progress/config/secrets/kv, wasi:http 0.2 outgoing-handler/types, and WASI 0.2 cli, clocks, filesystem, io, random, sockets)"
    )]
    UnsupportedImport(String),
    /// Limits outside what this host allows.
    #[error("invalid limits: {0}")]
    Limits(String),
    /// The host could not do its part (capacity, cache I/O, engine set-up).
    #[error("host fault: {0}")]
    Host(String),
    /// As many uploads as may be in progress are (compiling or waiting to).
    #[error("{0} plugin uploads are being compiled or waiting to be; try again shortly")]
    CompileQueueFull(usize),
}

/// Result type of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the runtime is set up; fixed for the life of the process.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Where compiled artifacts are cached across restarts; `None` keeps them in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Instances that may exist at once (pooling allocator slots). Attempts
    /// beyond this wait for a slot rather than fail.
    pub max_instances: u32,
    /// The largest memory cap any attempt may ask for, in bytes.
    pub max_memory_bytes: u64,
    /// Period of the epoch ticker: the granularity of timeouts and of yielding.
    pub epoch_tick: Duration,
    /// Use the pooling allocator (fast instantiation; reserves virtual memory up front).
    pub pooling: bool,
    /// Bytes of each linear memory kept resident between instances (reset in
    /// place rather than unmapped). With `PAGEMAP_SCAN` (Linux 6.7+) only the
    /// pages an instance dirtied are reset.
    pub memory_keep_resident: usize,
    /// Use `PAGEMAP_SCAN` where the kernel has it (reset only dirtied pages).
    pub pagemap_scan: bool,
    /// Bytes the loaded plugins may take in memory (see `cache::resident_bytes`
    /// for how an entry is counted); past it the least recently used are
    /// dropped, and loaded again from their artifact on their next use.
    pub loaded_bytes: u64,
    /// Compilations at once.
    pub max_compiles: usize,
    /// Uploads that may wait for a compilation beyond those compiling.
    pub compile_queue: usize,
}

/// Pooling slots by default: many more than cores, since attempts also wait on I/O.
pub const DEFAULT_MAX_INSTANCES: u32 = 128;
/// Ceiling for per-attempt memory caps by default.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 1 << 30;
/// Keep-resident size of each pooled linear memory (see docs/PERFORMANCE.md).
pub const DEFAULT_MEMORY_KEEP_RESIDENT: usize = 1 << 20;
/// 5 ms ticks: a timeout lands within ~5 ms and a busy guest yields ~200 times a
/// second, at the cost of one thread waking that often.
pub const DEFAULT_EPOCH_TICK: Duration = Duration::from_millis(5);
/// Fuel handed to the guest at a time (see `run_with`): the most by which the
/// fuel reported for an attempt stopped by a timeout or a cancel can fall short
/// of what it burned. About 0.5 ms of a busy guest (~2e9 units/s), so a spinning
/// guest also yields ~2,000 times a second — a fiber switch each, negligible
/// beside the work of the slice.
pub const FUEL_SLICE: u64 = 1_000_000;
/// Loaded plugins kept in memory by default, in bytes. An example plugin
/// takes ~1 MiB, an 18 MiB componentize-py one ~60 MiB (docs/RUNTIME.md): a
/// few hundred small plugins or eight Python ones stay loaded.
pub const DEFAULT_LOADED_BYTES: u64 = 512 << 20;

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            max_instances: DEFAULT_MAX_INSTANCES,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            epoch_tick: DEFAULT_EPOCH_TICK,
            pooling: true,
            memory_keep_resident: DEFAULT_MEMORY_KEEP_RESIDENT,
            pagemap_scan: true,
            loaded_bytes: DEFAULT_LOADED_BYTES,
            max_compiles: default_max_compiles(),
            compile_queue: DEFAULT_COMPILE_QUEUE,
        }
    }
}

/// A loaded, validated plugin: cheap to clone, ready to instantiate.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<LoadedPlugin>,
}

struct LoadedPlugin {
    digest: String,
    size: usize,
    /// What it is charged in the loaded-plugin cache (`cache::resident_bytes`).
    resident: u64,
    pre: bindings::TaskPre<HostState>,
}

impl Plugin {
    /// The sha256 of the component bytes, hex.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// The size of the component bytes (0 when loaded from its artifact).
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The bytes it keeps in memory while loaded, as the cache counts them.
    pub fn resident_bytes(&self) -> u64 {
        self.inner.resident
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("digest", &self.inner.digest)
            .field("size", &self.inner.size)
            .finish()
    }
}

/// Where a loaded plugin came from, for measurements and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadSource {
    /// Already loaded in this process.
    Memory,
    /// Deserialized from an artifact ax compiled earlier.
    DiskCache,
    /// Compiled now.
    Compiled,
}

/// What the runtime holds, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Plugins loaded in memory.
    pub loaded: usize,
    /// Bytes charged to them.
    pub loaded_bytes: u64,
    /// The budget of those bytes.
    pub loaded_budget: u64,
    /// Loaded plugins dropped to make room, since the start.
    pub evictions: u64,
    /// Compilations and uploads.
    pub compiles: GateStats,
}

/// The sandbox host. Clone it freely: clones share the engine and caches.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    config: RuntimeConfig,
    cache: cache::ArtifactCache,
    loaded: Mutex<cache::Lru<Plugin>>,
    gate: Arc<compile::Gate>,
    /// Bounds concurrent instances to the pool's slots, so a burst waits instead of failing.
    slots: Arc<tokio::sync::Semaphore>,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    /// Builds the engine, the linker and the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self> {
        let engine = build_engine(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| Error::Host(format!("linking WASI: {e}")))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| Error::Host(format!("linking wasi:http: {e}")))?;
        bindings::Task::add_to_linker::<_, wasmtime::component::HasSelf<HostState>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| Error::Host(format!("linking ax imports: {e}")))?;

        let cache = cache::ArtifactCache::new(config.cache_dir.clone(), &engine)?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        spawn_epoch_ticker(engine.clone(), config.epoch_tick, ticker_stop.clone())?;
        Ok(Self {
            inner: Arc::new(Inner {
                slots: Arc::new(tokio::sync::Semaphore::new(config.max_instances as usize)),
                engine,
                linker,
                loaded: Mutex::new(cache::Lru::new(config.loaded_bytes)),
                gate: Arc::new(compile::Gate::new(
                    config.max_compiles,
                    config.compile_queue,
                )),
                config,
                cache,
                ticker_stop,
            }),
        })
    }

    /// The configuration this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Validates `bytes` against the ax world and makes the plugin ready to run.
    ///
    /// Compiles at most once per digest: later loads come from memory or from
    /// the on-disk artifact cache. A compilation waits for one of the
    /// `max_compiles` permits. Blocking (compilation takes ~100 ms to
    /// seconds); call it from a blocking thread in async code.
    pub fn load(&self, bytes: &[u8]) -> Result<Plugin> {
        self.load_traced(bytes).map(|(plugin, _)| plugin)
    }

    /// Like [`Runtime::load`], also saying where the plugin came from.
    pub fn load_traced(&self, bytes: &[u8]) -> Result<(Plugin, LoadSource)> {
        validate::check_header(bytes)?;
        let digest = cache::digest(bytes);
        if let Some(found) = self.load_cached_traced(&digest)? {
            return Ok(found);
        }
        let _permit = self.inner.gate.permit();
        // Another load of the same bytes may have compiled them meanwhile.
        if let Some(found) = self.load_cached_traced(&digest)? {
            return Ok(found);
        }
        let component = cache::ArtifactCache::compile(&self.inner.engine, bytes)?;
        let plugin = self.prepare(&digest, bytes.len(), &component)?;
        // Only a valid component's artifact is kept: distinct invalid uploads
        // leave nothing on disk.
        self.inner.cache.store(&digest, &component);
        self.keep(&plugin);
        Ok((plugin, LoadSource::Compiled))
    }

    /// The plugin with this digest from memory, else from the artifact ax
    /// compiled earlier (no compilation; `None` when neither has it).
    /// Blocking: a disk load reads and deserializes the artifact.
    pub fn load_cached(&self, digest: &str) -> Result<Option<Plugin>> {
        Ok(self.load_cached_traced(digest)?.map(|(plugin, _)| plugin))
    }

    fn load_cached_traced(&self, digest: &str) -> Result<Option<(Plugin, LoadSource)>> {
        if let Some(plugin) = self.get(digest) {
            return Ok(Some((plugin, LoadSource::Memory)));
        }
        let Some(component) = self.inner.cache.load(&self.inner.engine, digest) else {
            return Ok(None);
        };
        match self.prepare(digest, 0, &component) {
            Ok(plugin) => {
                self.keep(&plugin);
                Ok(Some((plugin, LoadSource::DiskCache)))
            }
            Err(e) => {
                // An artifact written before invalid components stopped being
                // cached; drop it, the caller compiles and reports the error.
                tracing::warn!(digest, error = %e, "discarding the artifact of an invalid component");
                self.inner.cache.remove(digest);
                Ok(None)
            }
        }
    }

    /// Checks the world and resolves the imports once (`InstancePre`).
    fn prepare(
        &self,
        digest: &str,
        size: usize,
        component: &wasmtime::component::Component,
    ) -> Result<Plugin> {
        validate::check_world(&self.inner.engine, component)?;
        let pre = self.inner.linker.instantiate_pre(component).map_err(|e| {
            Error::UnsupportedImport(format!("an interface of the wrong type ({e:#})"))
        })?;
        let pre = bindings::TaskPre::new(pre)
            .map_err(|e| Error::WrongWorld(format!("its `run` export does not match ({e:#})")))?;
        Ok(Plugin {
            inner: Arc::new(LoadedPlugin {
                digest: digest.to_string(),
                size,
                resident: cache::resident_bytes(component),
                pre,
            }),
        })
    }

    fn keep(&self, plugin: &Plugin) {
        let (digest, bytes) = (plugin.digest().to_string(), plugin.resident_bytes());
        if !self.lock_loaded().insert(digest, plugin.clone(), bytes) {
            tracing::warn!(
                digest = plugin.digest(),
                bytes,
                budget = self.inner.config.loaded_bytes,
                "a plugin larger than the loaded-plugin budget is not kept in memory"
            );
        }
    }

    /// A place in line for an upload (see [`compile`]): hold it for the whole
    /// upload, from before its body is read to its end. Refused with
    /// [`Error::CompileQueueFull`] when `max_compiles + compile_queue`
    /// uploads are in progress.
    pub fn admit_upload(&self) -> Result<UploadTicket> {
        self.inner
            .gate
            .admit()
            .ok_or_else(|| Error::CompileQueueFull(self.inner.gate.max_uploads()))
    }

    /// What the caches and the compile gate hold now.
    pub fn stats(&self) -> RuntimeStats {
        let loaded = self.lock_loaded();
        RuntimeStats {
            loaded: loaded.len(),
            loaded_bytes: loaded.bytes(),
            loaded_budget: loaded.budget(),
            evictions: loaded.evictions(),
            compiles: self.inner.gate.stats(),
        }
    }

    /// A plugin already loaded in this process, by digest.
    pub fn get(&self, digest: &str) -> Option<Plugin> {
        self.lock_loaded().get(digest)
    }

    /// Forgets a loaded plugin and its cached artifact (after it is deleted).
    pub fn evict(&self, digest: &str) {
        self.lock_loaded().remove(digest);
        self.inner.cache.remove(digest);
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, cache::Lru<Plugin>> {
        // Each update of the map completes before the lock is released and
        // none calls out while holding it, so a panic elsewhere cannot leave
        // it half-updated: a poisoned lock is safe to use.
        self.inner
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one attempt in a fresh sandbox, granted nothing (see [`Runtime::run_with`]).
    ///
    /// Returns `Err` only for host faults and invalid limits; everything the
    /// plugin does, however hostile, ends in an [`AttemptReport`]. When `cancel`
    /// fires the guest is stopped and the outcome is `cancelled`.
    pub async fn run(
        &self,
        plugin: &Plugin,
        ctx: &AttemptContext,
        input: &str,
        limits: &Limits,
        cancel: Option<&CancellationToken>,
    ) -> Result<AttemptReport> {
        self.run_with(plugin, ctx, input, limits, &Grants::default(), cancel)
            .await
    }

    /// Runs one attempt with the capabilities in `grants`: HTTP to its
    /// allow-list, its config, secrets and key-value store. Every secret value
    /// in `grants` is redacted from the report.
    pub async fn run_with(
        &self,
        plugin: &Plugin,
        ctx: &AttemptContext,
        input: &str,
        limits: &Limits,
        grants: &Grants,
        cancel: Option<&CancellationToken>,
    ) -> Result<AttemptReport> {
        self.check_limits(limits)?;
        let _slot = self
            .inner
            .slots
            .acquire()
            .await
            .map_err(|_| Error::Host("runtime is shutting down".into()))?;

        let started = Instant::now();
        let deadline = started + limits.timeout;
        let stdout = CapturePipe::new(limits.max_stdio_bytes);
        let stderr = CapturePipe::new(limits.max_stdio_bytes);
        // Deny by default: no preopened directories, no environment, no
        // arguments, no stdin, no network (WASI sockets exist but every use is refused).
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let logs = Arc::new(Mutex::new(LogSink::new(limits.max_log_bytes)));
        let state = HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(limits.memory_bytes),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            hooks: HttpHooks::new(
                &grants.allow_http,
                grants.http_limits,
                logs.clone(),
                started,
            ),
            logs,
            config: grants.config.clone(),
            secrets: grants.secrets.clone(),
            kv: grants.kv.clone(),
            progress: None,
            started,
            deadline,
            timed_out: false,
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|state| &mut state.limiter);
        store
            .set_fuel(limits.fuel)
            .map_err(|e| Error::Host(format!("setting fuel: {e}")))?;
        // Compiled code keeps the fuel counter in a register and writes it
        // back to the store only at calls, returns and out-of-fuel checks, not
        // at epoch checks: a guest spinning in a call-free loop and stopped by
        // the deadline (or by the outer timeout or a cancel at an epoch yield)
        // would report only what it used before the loop. Handing the fuel
        // out in slices makes the guest reach the out-of-fuel check, which
        // saves the counter, every slice: what is read below is then at most
        // one slice short of what the guest burned.
        store
            .fuel_async_yield_interval(Some(FUEL_SLICE))
            .map_err(|e| Error::Host(format!("setting the fuel slice: {e}")))?;
        // Check the clock at every tick: yield to the executor so other attempts
        // make progress, and interrupt the guest once its deadline has passed.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut cx| {
            if Instant::now() >= cx.data().deadline {
                cx.data_mut().timed_out = true;
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });

        let wit_ctx = to_wit_context(ctx);
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        let ended = {
            let call = async {
                let task = plugin.inner.pre.instantiate_async(&mut store).await?;
                task.call_run(&mut store, &wit_ctx, input).await
            };
            // The outer timeout covers time blocked in async host calls (a WASI
            // sleep, a poll), where epochs do not interrupt. Dropping `call`
            // drops the guest's fiber: nothing of it runs afterwards.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Ended::Cancelled,
                res = tokio::time::timeout_at(deadline.into(), call) => match res {
                    Ok(res) => Ended::Returned(res),
                    Err(_) => Ended::OuterTimeout,
                },
            }
        };
        let duration = started.elapsed();
        let fuel_left = store.get_fuel().unwrap_or(0);
        let state = store.into_data();
        let at_ms = duration.as_millis() as u64;

        let mut report = AttemptReport {
            outcome: Outcome::Succeeded,
            output: None,
            error: None,
            error_kind: None,
            fuel_consumed: limits.fuel.saturating_sub(fuel_left),
            memory_peak_bytes: state.limiter.peak(),
            duration_ms: duration.as_secs_f64() * 1000.0,
            stdout: stdout.contents(),
            stderr: stderr.contents(),
            logs: Vec::new(),
            progress: state.progress.clone(),
        };
        match ended {
            Ended::Cancelled => {
                report.outcome = Outcome::Cancelled;
                report.error = Some("attempt cancelled".into());
            }
            Ended::OuterTimeout => set_timed_out(&mut report, limits),
            Ended::Returned(Ok(Ok(output))) => settle_output(&mut report, output, limits),
            Ended::Returned(Ok(Err(err))) => {
                report.outcome = Outcome::Failed;
                report.error_kind = Some(match err.kind {
                    bindings::ax::plugin::types::ErrorKind::Retryable => ErrorKind::Retryable,
                    bindings::ax::plugin::types::ErrorKind::Fatal => ErrorKind::Fatal,
                });
                let mut message = err.message;
                capture::truncate_utf8(&mut message, 4 << 10);
                report.error = Some(message);
            }
            Ended::Returned(Err(err)) => {
                if err.is::<wasmtime::PoolConcurrencyLimitError>() {
                    return Err(Error::Host(format!("no instance slot free: {err}")));
                }
                if state.timed_out {
                    set_timed_out(&mut report, limits);
                } else {
                    classify_trap(&mut report, &err, &state.limiter, limits);
                }
            }
        }
        // Request futures may still hold the sink; take its contents.
        let sink = std::mem::replace(
            &mut *state.logs.lock().unwrap_or_else(PoisonError::into_inner),
            LogSink::new(0),
        );
        report.logs = sink.finish(at_ms);
        capability::redact(&mut report, &grants.secret_values());
        Ok(report)
    }

    fn check_limits(&self, limits: &Limits) -> Result<()> {
        let max = self.inner.config.max_memory_bytes;
        if limits.memory_bytes > max {
            return Err(Error::Limits(format!(
                "memory cap of {} bytes is above this host's maximum of {max} bytes",
                limits.memory_bytes
            )));
        }
        if limits.timeout.is_zero() {
            return Err(Error::Limits("timeout must be above zero".into()));
        }
        if limits.fuel == 0 {
            return Err(Error::Limits("fuel must be above zero".into()));
        }
        Ok(())
    }
}

enum Ended {
    Cancelled,
    OuterTimeout,
    Returned(wasmtime::Result<std::result::Result<String, bindings::ax::plugin::types::TaskError>>),
}

fn set_timed_out(report: &mut AttemptReport, limits: &Limits) {
    report.outcome = Outcome::TimedOut;
    report.error = Some(format!(
        "timed out after {}; the plugin was stopped",
        humantime::format_duration(limits.timeout)
    ));
}

fn settle_output(report: &mut AttemptReport, output: String, limits: &Limits) {
    if output.len() > limits.max_output_bytes {
        report.outcome = Outcome::OutputTooLarge;
        report.error = Some(format!(
            "output of {} bytes is above the limit of {} bytes",
            output.len(),
            limits.max_output_bytes
        ));
        return;
    }
    match serde_json::from_str(&output) {
        Ok(value) => report.output = Some(value),
        Err(e) => {
            report.outcome = Outcome::Failed;
            report.error_kind = Some(ErrorKind::Fatal);
            report.error = Some(format!("the plugin returned output that is not JSON: {e}"));
        }
    }
}

/// Tells apart the ways an instance can die. The order matters: a memory
/// denial shows up as a plain `unreachable` trap (the guest aborts on a failed
/// allocation), so the limiter's record is checked before the trap code.
fn classify_trap(
    report: &mut AttemptReport,
    err: &wasmtime::Error,
    limiter: &MemoryLimiter,
    limits: &Limits,
) {
    let trap = err.downcast_ref::<Trap>().copied();
    let (outcome, message) = match trap {
        Some(Trap::OutOfFuel) => (
            Outcome::FuelExhausted,
            format!("fuel exhausted: all {} units consumed", limits.fuel),
        ),
        _ if limiter.denied().is_some() => {
            let wanted = limiter.denied().unwrap_or_default();
            (
                Outcome::MemoryExceeded,
                format!(
                    "memory limit of {} bytes exceeded: growing to {wanted} bytes was refused",
                    limits.memory_bytes
                ),
            )
        }
        Some(Trap::Interrupt) => (Outcome::TimedOut, "interrupted".to_string()),
        Some(Trap::StackOverflow) => (
            Outcome::Trapped,
            "stack overflow: call stack exhausted".to_string(),
        ),
        Some(trap) => (Outcome::Trapped, format!("wasm trap: {trap}")),
        None => (Outcome::Trapped, format!("{err:#}")),
    };
    report.outcome = outcome;
    let mut message = message;
    if outcome == Outcome::Trapped
        && let Some(panic) = panic_message(&report.stderr)
    {
        message = format!("{message}; {panic}");
    }
    report.error = Some(message);
}

/// The panic line (and message) Rust guests print to stderr before aborting.
fn panic_message(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines();
    let at = lines.position(|l| l.contains("panicked at"))?;
    let mut all = stderr.lines().skip(at);
    let head = all.next()?.trim().to_string();
    match all.next() {
        Some(msg) if !msg.trim().is_empty() && !msg.starts_with("note:") => {
            Some(format!("{head} {}", msg.trim()))
        }
        _ => Some(head),
    }
}

fn to_wit_context(ctx: &AttemptContext) -> bindings::ax::plugin::types::Context {
    use bindings::ax::plugin::types::TriggerKind as W;
    bindings::ax::plugin::types::Context {
        run_id: ctx.run_id.clone(),
        tenant: ctx.tenant.clone(),
        task: ctx.task.clone(),
        step: ctx.step.clone(),
        attempt: ctx.attempt,
        scheduled_for: ctx.scheduled_for.clone(),
        trigger: match ctx.trigger {
            TriggerKind::Manual => W::Manual,
            TriggerKind::Cron => W::Cron,
            TriggerKind::At => W::At,
            TriggerKind::Delay => W::Delay,
            TriggerKind::Every => W::Every,
            TriggerKind::After => W::After,
        },
    }
}

fn build_engine(config: &RuntimeConfig) -> Result<Engine> {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        // 512 KiB of wasm stack: deep enough for real code; a runaway
        // recursion ends in a `stack overflow` trap, well inside the 2 MiB
        // async stack the guest runs on.
        .max_wasm_stack(512 << 10);
    if config.pooling {
        let slots = config.max_instances;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            // A Rust component has ~4 core instances; other toolchains more.
            .total_core_instances(slots * 16)
            .max_core_instances_per_component(32)
            .total_memories(slots * 2)
            .max_memories_per_component(4)
            .total_tables(slots * 8)
            .max_tables_per_component(16)
            .total_stacks(slots)
            .max_memory_size(config.max_memory_bytes as usize)
            // Keep a little of each slot resident: resetting it with memset is
            // cheaper than unmapping and faulting pages back in, and avoids
            // contention in the kernel's memory map when attempts run in parallel.
            .linear_memory_keep_resident(config.memory_keep_resident)
            .table_keep_resident(64 << 10)
            .async_stack_keep_resident(64 << 10)
            // Reset only the pages an instance dirtied, where the kernel can
            // tell (PAGEMAP_SCAN); otherwise the whole resident part is memset.
            .pagemap_scan(if config.pagemap_scan {
                wasmtime::Enabled::Auto
            } else {
                wasmtime::Enabled::No
            });
        cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&cfg).map_err(|e| Error::Host(format!("creating the wasm engine: {e:#}")))
}

fn spawn_epoch_ticker(engine: Engine, tick: Duration, stop: Arc<AtomicBool>) -> Result<()> {
    std::thread::Builder::new()
        .name("ax-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                engine.increment_epoch();
            }
        })
        .map(|_| ())
        .map_err(|e| Error::Host(format!("starting the epoch ticker: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_takes_the_line_and_its_message() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:5:5:\nboom\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("thread '<unnamed>' panicked at src/lib.rs:5:5: boom")
        );
        assert_eq!(panic_message("nothing here"), None);
    }

    #[test]
    fn limits_above_the_host_maximum_are_refused() {
        let runtime = Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let limits = Limits {
            memory_bytes: DEFAULT_MAX_MEMORY_BYTES + 1,
            ..Limits::default()
        };
        let err = runtime.check_limits(&limits).unwrap_err();
        assert!(
            err.to_string().contains("above this host's maximum"),
            "{err}"
        );
    }

    fn example(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("AX_PLUGIN_DIR")).join(format!("{name}.wasm"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    fn context() -> AttemptContext {
        AttemptContext {
            run_id: "run-1".into(),
            tenant: "t".into(),
            task: "t".into(),
            step: "s".into(),
            attempt: 1,
            scheduled_for: "2026-12-01T00:00:00Z".into(),
            trigger: TriggerKind::Manual,
        }
    }

    /// Room for the larger of echo and hello, not both.
    fn one_plugin_runtime(cache_dir: Option<PathBuf>) -> Runtime {
        let probe = Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let echo = probe.load(&example("echo")).unwrap().resident_bytes();
        let hello = probe.load(&example("hello")).unwrap().resident_bytes();
        Runtime::new(RuntimeConfig {
            pooling: false,
            cache_dir,
            loaded_bytes: echo + hello - 1,
            ..RuntimeConfig::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn an_evicted_plugin_still_runs_for_whoever_holds_it() {
        let runtime = one_plugin_runtime(None);
        let echo = runtime.load(&example("echo")).unwrap();
        let hello = runtime.load(&example("hello")).unwrap();
        assert!(
            runtime.get(echo.digest()).is_none(),
            "echo made room for hello"
        );
        assert!(runtime.get(hello.digest()).is_some());
        let stats = runtime.stats();
        assert_eq!((stats.loaded, stats.evictions), (1, 1));
        assert_eq!(stats.loaded_bytes, hello.resident_bytes());
        assert!(stats.loaded_bytes <= stats.loaded_budget);
        let report = runtime
            .run(&echo, &context(), r#"{"x":1}"#, &Limits::default(), None)
            .await
            .unwrap();
        assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
        assert_eq!(report.output.unwrap()["input"]["x"], 1);
    }

    #[test]
    fn an_evicted_plugin_comes_back_from_its_artifact_without_compiling() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = one_plugin_runtime(Some(dir.path().to_path_buf()));
        let echo = runtime.load(&example("echo")).unwrap();
        runtime.load(&example("hello")).unwrap();
        assert!(runtime.get(echo.digest()).is_none());
        let (_, source) = runtime.load_traced(&example("echo")).unwrap();
        assert_eq!(source, LoadSource::DiskCache);
        // By digest alone, as the scheduler reloads it: hello is evicted now.
        let hello = cache::digest(&example("hello"));
        assert!(runtime.get(&hello).is_none());
        assert!(runtime.load_cached(&hello).unwrap().is_some());
        assert!(runtime.load_cached(&"0".repeat(64)).unwrap().is_none());
    }

    #[test]
    fn an_invalid_component_leaves_no_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(RuntimeConfig {
            pooling: false,
            cache_dir: Some(dir.path().to_path_buf()),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let err = runtime.load(&example("invalid-not-ax")).unwrap_err();
        assert!(matches!(err, Error::WrongWorld(_)), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(runtime.stats().loaded, 0);
    }
}
