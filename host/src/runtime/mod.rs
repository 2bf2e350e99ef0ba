//! The sandbox: loads plugin components and runs attempts under limits.
//!
//! This is the only module that names wasmtime. It owns:
//! - a shared [`wasmtime::Engine`] (component model, fuel, epoch interruption,
//!   pooling allocator) and its `Linker` with WASI p2 and the ax host imports,
//!   and with the Winch first tier a second one for Winch's code ([`engine`],
//!   [`tier`]);
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
//! [`AttemptReport`](crate::model::AttemptReport) and says precisely how the attempt ended.
//!
//! # Layout
//! `config` (set-up and defaults), `engine` (engine, pooling, linker, epoch
//! ticker), `plugin` (loading and the loaded-plugin cache), `run`
//! (instantiate and call one attempt), `outcome` (how an attempt ended),
//! `cache`, `compile`, `flight` (compilations in progress, shared), `tier`
//! (the optimizing compilation behind a Winch first tier),
//! `validate`, `capture`, `host`, `http`, `record` (recording what crosses
//! the boundary, and replaying it). This file holds
//! the [`Runtime`] handle and the error.

mod cache;
mod capture;
mod compile;
mod config;
mod engine;
#[cfg(test)]
mod fixtures;
mod flight;
mod host;
mod http;
mod outcome;
mod plugin;
mod record;
mod run;
mod swap;
mod tier;
mod validate;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub use self::compile::{DEFAULT_COMPILE_QUEUE, GateStats, UploadTicket, default_max_compiles};
pub use self::config::{
    CompilerConfig, CompilerOptLevel, CompilerStrategy, DEFAULT_BASELINE_MIN_BYTES,
    DEFAULT_EPOCH_TICK, DEFAULT_LOADED_BYTES, DEFAULT_MAX_INSTANCES, DEFAULT_MAX_MEMORY_BYTES,
    DEFAULT_MEMORY_KEEP_RESIDENT, DEFAULT_TABLE_KEEP_RESIDENT, RuntimeConfig, Tiering,
};
pub use self::engine::Tier;
pub use self::flight::{Compilation, CompileSlot};
pub use self::plugin::{LoadSource, Plugin};
pub use self::record::ReplayReport;
pub use self::run::FUEL_SLICE;
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
/// [`Outcome`](crate::model::Outcome) in the [`AttemptReport`](crate::model::AttemptReport). These are bad uploads and host faults.
/// `Clone`: a compilation's result goes to everyone waiting for it.
#[derive(Clone, Debug, thiserror::Error)]
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

/// The sha256 of a component's bytes, hex: its digest, as the store and
/// the caches name it.
pub fn digest(bytes: &[u8]) -> String {
    cache::digest(bytes)
}

/// Result type of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// Optimizing compilations behind a Winch first tier, waiting or running.
    pub tier_ups: usize,
}

/// The sandbox host. Clone it freely: clones share the engine and caches.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    /// The configured compiler's engine: what plugins run on for good.
    backend: engine::Backend,
    /// Winch's engine, for the first tier; `None` with one tier.
    baseline: Option<engine::Backend>,
    config: RuntimeConfig,
    loaded: Mutex<cache::Lru<Plugin>>,
    gate: Arc<compile::Gate>,
    /// Compilations in progress, by digest (one per component at a time).
    flights: flight::Flights,
    /// Turns of background compilations: `max_compiles` at once, in order
    /// of arrival; those waiting hold no thread and no bytes.
    turns: tokio::sync::Semaphore,
    /// Bounds concurrent instances to the pool's slots, so a burst waits instead of failing.
    slots: Arc<tokio::sync::Semaphore>,
    /// Bounds concurrent instances of Winch's code to its smaller pool
    /// (`engine::baseline_slots`); taken before one of `slots`, so attempts
    /// waiting for it hold none of those.
    baseline_slots: tokio::sync::Semaphore,
    /// The optimizing compilations behind the Winch first tier.
    tier_ups: tier::TierUps,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    /// Builds the engines (two with the Winch first tier), their linkers
    /// and the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self> {
        let backend =
            engine::Backend::new(&config, config.compiler.strategy, config.max_instances, "")?;
        let baseline_slots = engine::baseline_slots(config.max_instances);
        let baseline = if config.compiler.tiered() {
            Some(engine::Backend::new(
                &config,
                CompilerStrategy::Winch,
                baseline_slots,
                "-baseline",
            )?)
        } else {
            None
        };
        let engines = std::iter::once(&backend)
            .chain(&baseline)
            .map(|b| b.engine.clone())
            .collect();
        let ticker_stop = Arc::new(AtomicBool::new(false));
        engine::spawn_epoch_ticker(engines, config.epoch_tick, ticker_stop.clone())?;
        Ok(Self {
            inner: Arc::new(Inner {
                slots: Arc::new(tokio::sync::Semaphore::new(config.max_instances as usize)),
                baseline_slots: tokio::sync::Semaphore::new(baseline_slots as usize),
                tier_ups: tier::TierUps::default(),
                backend,
                baseline,
                loaded: Mutex::new(cache::Lru::new(config.loaded_bytes)),
                gate: Arc::new(compile::Gate::new(
                    config.max_compiles,
                    config.compile_queue,
                )),
                flights: flight::Flights::default(),
                turns: tokio::sync::Semaphore::new(config.max_compiles.max(1)),
                config,
                ticker_stop,
            }),
        })
    }

    /// The configuration this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
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

    /// What can be checked of an upload without compiling it (see
    /// `validate::check_cheap`): tens of milliseconds for an 18 MiB
    /// component, against seconds of compilation. Blocking for that long.
    pub fn check(&self, bytes: &[u8]) -> Result<()> {
        validate::check_cheap(bytes)
    }

    /// What the caches and the compile gate hold now.
    pub fn stats(&self) -> RuntimeStats {
        // Before the loaded-plugin lock: a tier-up takes its own lock, then
        // that one (`tier::tier_up`), never the other way round.
        let tier_ups = self.inner.tier_ups.pending();
        let loaded = self.lock_loaded();
        RuntimeStats {
            loaded: loaded.len(),
            loaded_bytes: loaded.bytes(),
            loaded_budget: loaded.budget(),
            evictions: loaded.evictions(),
            compiles: self.inner.gate.stats(),
            tier_ups,
        }
    }
}
