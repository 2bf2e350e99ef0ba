//! Engine set-up: the one wasmtime [`Engine`] (component model, fuel,
//! epoch interruption, the pooling allocator sized from [`RuntimeConfig`]),
//! the [`Linker`] with WASI p2, `wasi:http` and the ax host imports, and the
//! thread that ticks the epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig, Strategy,
};

use super::host::HostState;
use super::{
    CompilerConfig, CompilerOptLevel, CompilerStrategy, Error, Result, RuntimeConfig, bindings,
};

/// The linker every plugin is instantiated with: WASI p2, outgoing
/// `wasi:http` (checked per request by the attempt's hooks) and the ax imports.
pub(super) fn build_linker(engine: &Engine) -> Result<Linker<HostState>> {
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

/// The engine: component model, fuel, epoch interruption, a bounded wasm
/// stack and, when `config.pooling`, the pooling allocator with one slot per
/// allowed instance.
pub(super) fn build_engine(config: &RuntimeConfig) -> Result<Engine> {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        // 512 KiB of wasm stack: deep enough for real code; a runaway
        // recursion ends in a `stack overflow` trap, well inside the 2 MiB
        // async stack the guest runs on.
        .max_wasm_stack(512 << 10);
    compiler_settings(&mut cfg, config.compiler);
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
            .table_keep_resident(config.table_keep_resident)
            .async_stack_keep_resident(64 << 10)
            // Reset only the pages an instance dirtied, where the kernel can
            // tell (PAGEMAP_SCAN); otherwise the whole resident part is memset.
            // wasmtime 48 takes at most 32 runs of dirty pages per scan and
            // hands the rest to `madvise`: Python and JavaScript components,
            // which dirty pages all over their heap image, fault those back in
            // whatever keep-resident is (docs/RUNTIME.md, issue 16). These
            // settings are global to the engine: they cannot differ per plugin.
            .pagemap_scan(if config.pagemap_scan {
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
fn compiler_settings(cfg: &mut Config, compiler: CompilerConfig) {
    cfg.strategy(match compiler.strategy {
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

/// The thread that advances the engine's epoch every `tick` until `stop`:
/// what makes deadlines fire and busy guests yield.
pub(super) fn spawn_epoch_ticker(
    engine: Engine,
    tick: Duration,
    stop: Arc<AtomicBool>,
) -> Result<()> {
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
