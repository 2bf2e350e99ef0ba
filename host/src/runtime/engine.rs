//! Engine set-up: the wasmtime [`Engine`]s (component model, fuel, epoch
//! interruption, the pooling allocator sized from [`RuntimeConfig`]), the
//! [`Linker`] with WASI p2, `wasi:http` and the ax host imports, and the
//! thread that ticks the epoch.
//!
//! # Two engines when tiered
//!
//! A compiled component belongs to the engine that compiled it, and a
//! `Store` that instantiates it must come from that engine too. With the
//! Winch first tier ([`super::Tiering`]) there are two [`Backend`]s: the
//! *optimized* one (the configured compiler, Cranelift) and the *baseline*
//! one (Winch). Their settings are the same but for the compiler: fuel,
//! epoch interruption, the wasm stack, the memory ceiling, the allocator
//! and its keep-resident sizes; one ticker advances both epochs.
//!
//! **The pooling allocator is split, not doubled.** Each engine has its own
//! pool, which reserves its address space when the engine is built. The
//! optimized pool keeps `max_instances` slots (every attempt of a plugin
//! past its tier-up runs there); the baseline pool gets
//! [`baseline_slots`] = `max_instances / 8` (16 of the default 128, at
//! least 1), because only plugins within their tier-up window (seconds to a
//! minute after an upload or a restart) run on it, and attempts on it past
//! that many wait for a slot (`Inner::baseline_slots`) as all attempts wait
//! for one of `max_instances`. The reservation grows by an eighth, not 2×
//! (measured in docs/PERFORMANCE.md, *Compile*: the default pool reserves
//! ~1 TiB of address space — `PROT_NONE`, no memory — and the baseline pool
//! ~1/8 of that).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig, Strategy,
};

use super::cache::ArtifactCache;
use super::host::HostState;
use super::swap;
use super::{
    CompilerConfig, CompilerOptLevel, CompilerStrategy, Error, Result, RuntimeConfig, bindings,
};

/// The linker every plugin is instantiated with: WASI p2, outgoing
/// `wasi:http` (checked per request by the attempt's hooks) and the ax imports.
fn build_linker(engine: &Engine) -> Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| Error::Host(format!("linking WASI: {e}")))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(|e| Error::Host(format!("linking wasi:http: {e}")))?;
    bindings::Task::add_to_linker::<_, wasmtime::component::HasSelf<HostState>>(
        &mut linker,
        |state| state,
    )
    .map_err(|e| Error::Host(format!("linking ax imports: {e}")))?;
    Ok(linker)
}

/// The tier of the code a [`Backend`] compiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Winch's code: compiled in one quick pass, runs slower.
    Baseline,
    /// Cranelift's code: the optimising compiler.
    Optimized,
}

impl Tier {
    /// `baseline` or `optimized`, as logs and the API name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Baseline => "baseline",
            Tier::Optimized => "optimized",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One compiler's engine and what is bound to it: the linker its plugins
/// are instantiated with and the artifacts it compiled.
pub(super) struct Backend {
    pub(super) engine: Engine,
    pub(super) linker: Linker<HostState>,
    pub(super) cache: ArtifactCache,
    pub(super) tier: Tier,
}

impl Backend {
    /// The engine for `strategy` with `slots` pooling slots, its linker and
    /// its artifact cache (file names end in `suffix` so that two engines'
    /// artifacts of one component are told apart at a glance).
    pub(super) fn new(
        config: &RuntimeConfig,
        strategy: CompilerStrategy,
        slots: u32,
        suffix: &str,
    ) -> Result<Self> {
        let engine = build_engine(config, strategy, slots)?;
        let linker = build_linker(&engine)?;
        let cache = ArtifactCache::new(config.cache_dir.clone(), &engine, suffix)?;
        let tier = match strategy {
            CompilerStrategy::Cranelift => Tier::Optimized,
            CompilerStrategy::Winch => Tier::Baseline,
        };
        Ok(Self {
            engine,
            linker,
            cache,
            tier,
        })
    }
}

/// Pooling slots of the baseline (Winch) engine for `max_instances` in all:
/// an eighth, at least one (see the module's notes).
pub(super) fn baseline_slots(max_instances: u32) -> u32 {
    (max_instances / 8).max(1)
}

/// The engine: component model, fuel, epoch interruption, a bounded wasm
/// stack and, when `config.pooling`, the pooling allocator with `slots`
/// instance slots; `strategy` overrides the configured compiler.
fn build_engine(config: &RuntimeConfig, strategy: CompilerStrategy, slots: u32) -> Result<Engine> {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        // 512 KiB of wasm stack: deep enough for real code; a runaway
        // recursion ends in a `stack overflow` trap, well inside the 2 MiB
        // async stack the guest runs on.
        .max_wasm_stack(512 << 10);
    compiler_settings(&mut cfg, config.compiler, strategy);
    if config.pooling {
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
            .table_keep_resident(config.table_keep_resident)
            .async_stack_keep_resident(64 << 10)
            // Reset only the pages an instance dirtied, where the kernel can
            // tell (PAGEMAP_SCAN); otherwise the whole resident part is memset.
            // wasmtime 48 takes at most 32 runs of dirty pages per scan and
            // hands the rest to `madvise`: Python and JavaScript components,
            // which dirty pages all over their heap image, fault those back in
            // whatever keep-resident is (docs/RUNTIME.md, issue 16). These
            // settings are global to the engine: they cannot differ per plugin.
            // Never where swap is on: wasmtime 48 would leave a swapped-out
            // page of one attempt to the next ([`swap`]).
            .pagemap_scan(if swap::pagemap_scan_allowed(config.pagemap_scan) {
                wasmtime::Enabled::Auto
            } else {
                wasmtime::Enabled::No
            });
        cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&cfg).map_err(|e| Error::Host(format!("creating the wasm engine: {e:#}")))
}

/// The compiler, its optimisation level and its threads (docs/RUNTIME.md,
/// "Compilation"). Kept apart from the pooling settings above.
fn compiler_settings(cfg: &mut Config, compiler: CompilerConfig, strategy: CompilerStrategy) {
    cfg.strategy(match strategy {
        CompilerStrategy::Cranelift => Strategy::Cranelift,
        CompilerStrategy::Winch => Strategy::Winch,
    })
    .cranelift_opt_level(match compiler.opt_level {
        CompilerOptLevel::None => OptLevel::None,
        CompilerOptLevel::Speed => OptLevel::Speed,
        CompilerOptLevel::SpeedAndSize => OptLevel::SpeedAndSize,
    })
    .parallel_compilation(!compiler.serial);
}

/// The thread that advances the engines' epochs every `tick` until `stop`:
/// what makes deadlines fire and busy guests yield.
pub(super) fn spawn_epoch_ticker(
    engines: Vec<Engine>,
    tick: Duration,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    std::thread::Builder::new()
        .name("ax-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                for engine in &engines {
                    engine.increment_epoch();
                }
            }
        })
        .map(|_| ())
        .map_err(|e| Error::Host(format!("starting the epoch ticker: {e}")))
}
