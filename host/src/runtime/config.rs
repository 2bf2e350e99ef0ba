//! How the runtime is set up ([`RuntimeConfig`]): pooling slots, the
//! memory ceiling, the epoch tick, the loaded-plugin budget, compilations at
//! once; with the defaults as named constants.

use std::path::PathBuf;
use std::time::Duration;

use super::compile::{DEFAULT_COMPILE_QUEUE, default_max_compiles};

/// How the runtime is set up; fixed for the life of the process.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Where compiled artifacts are cached across restarts; `None` keeps them in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Instances that may exist at once (pooling allocator slots). Attempts
    /// beyond this wait for a slot rather than fail. With the Winch first
    /// tier, Winch's engine has a pool of its own of an eighth of this
    /// (`engine::baseline_slots`), within this bound.
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
    /// Bytes of each pooled table kept resident between instances (reset
    /// with `memset` rather than unmapped).
    pub table_keep_resident: usize,
    /// Bytes the loaded plugins may take in memory (see `cache::resident_bytes`
    /// for how an entry is counted); past it the least recently used are
    /// dropped, and loaded again from their artifact on their next use.
    pub loaded_bytes: u64,
    /// Compilations at once.
    pub max_compiles: usize,
    /// Uploads that may wait for a compilation beyond those compiling.
    pub compile_queue: usize,
    /// How components are compiled (compiler, optimisation, threads).
    pub compiler: CompilerConfig,
}

/// How components are compiled; see docs/PERFORMANCE.md, "Compile (issue
/// 16)", for what each choice costs and gives. Part of the engine's
/// settings, so of the artifact cache's fingerprint: changing it compiles
/// every plugin again once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompilerConfig {
    /// Which compiler makes the code plugins run on for good.
    pub strategy: CompilerStrategy,
    /// Cranelift's optimisation level (Winch has none).
    pub opt_level: CompilerOptLevel,
    /// Compile a component's functions on the calling thread alone rather
    /// than on every core (rayon, the default): for measuring.
    pub serial: bool,
    /// Serve a component first from Winch code, compiled in a fraction of
    /// the time, while `strategy`'s code is compiled behind it
    /// (docs/PLUGINS.md, *Upload and compilation*). On by default in a
    /// build with the `winch` feature (a default feature); without it, or
    /// when `strategy` is Winch already, there is one tier.
    pub tiering: Tiering,
}

impl CompilerConfig {
    /// Whether components at least `min_bytes` long get Winch code first
    /// (then Cranelift's behind it with [`Tiering::Tiered`], never with
    /// [`Tiering::BaselineOnly`]): Winch asked for, built in and the final
    /// compiler not Winch.
    pub fn tiered(&self) -> bool {
        !matches!(self.tiering, Tiering::Off)
            && cfg!(feature = "winch")
            && self.strategy != CompilerStrategy::Winch
    }

    /// Whether a component served from Winch code is compiled again with
    /// the configured compiler behind it ([`Tiering::Tiered`]).
    pub fn tiers_up(&self) -> bool {
        matches!(self.tiering, Tiering::Tiered { .. }) && self.tiered()
    }

    /// The smallest component that gets Winch code first (`usize::MAX` when
    /// there is one tier).
    pub fn baseline_min_bytes(&self) -> usize {
        match self.tiering {
            Tiering::Tiered { min_bytes } | Tiering::BaselineOnly { min_bytes }
                if self.tiered() =>
            {
                min_bytes
            }
            _ => usize::MAX,
        }
    }
}

/// Whether a component is served from baseline code first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiering {
    /// One tier: every component is compiled by the configured compiler
    /// before it runs.
    Off,
    /// Components of at least `min_bytes` are compiled with Winch first
    /// (served at once), then with the configured compiler, whose code
    /// replaces Winch's for the attempts that start after it. Smaller ones
    /// are compiled by the configured compiler alone: it is fast enough
    /// for them that a second compilation would cost more than it saves.
    Tiered {
        /// The smallest component (in bytes of wasm) compiled with Winch first.
        min_bytes: usize,
    },
    /// Components of at least `min_bytes` are compiled with Winch alone and
    /// keep its code: for a process that runs one attempt and exits (`ax
    /// exec`, `ax run replay`, `ax task run --local`), which would end
    /// before a tier-up did. Their artifacts are cached as the first tier's
    /// are ([`super::cache`]: `-baseline.cwasm`), so the next run loads them.
    BaselineOnly {
        /// The smallest component (in bytes of wasm) compiled with Winch.
        min_bytes: usize,
    },
}

impl Default for Tiering {
    /// Tiered from [`DEFAULT_BASELINE_MIN_BYTES`] when Winch is built in.
    fn default() -> Self {
        if cfg!(feature = "winch") {
            Tiering::Tiered {
                min_bytes: DEFAULT_BASELINE_MIN_BYTES,
            }
        } else {
            Tiering::Off
        }
    }
}

/// Where the Winch first tier starts by default: 1 MiB of wasm. Below it
/// Cranelift (`Speed`) compiles a component in well under a second of CPU
/// (the 158 KiB echo plugin: ~0.2 s), so a Winch pass first would add work
/// for little gain in time to ready; above it, compile time grows with the
/// code, to ~26 s of CPU for the 17.6 MiB Python component against ~3.5 s
/// with Winch (docs/PERFORMANCE.md, *Compile*).
pub const DEFAULT_BASELINE_MIN_BYTES: usize = 1 << 20;

/// The code generator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompilerStrategy {
    /// Cranelift, the optimising compiler (the default).
    #[default]
    Cranelift,
    /// Winch, the baseline compiler: one pass, no optimisation. Only in a
    /// build with the `winch` cargo feature; otherwise the engine refuses it.
    Winch,
}

/// Cranelift's optimisation level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompilerOptLevel {
    /// No optimisation passes.
    None,
    /// Optimise for speed (wasmtime's default).
    #[default]
    Speed,
    /// Optimise for speed and size.
    SpeedAndSize,
}

/// Pooling slots by default: many more than cores, since attempts also wait on I/O.
pub const DEFAULT_MAX_INSTANCES: u32 = 128;
/// Ceiling for per-attempt memory caps by default.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 1 << 30;
/// Keep-resident size of each pooled linear memory (see docs/PERFORMANCE.md).
pub const DEFAULT_MEMORY_KEEP_RESIDENT: usize = 1 << 20;
/// Keep-resident size of each pooled table (see docs/RUNTIME.md).
pub const DEFAULT_TABLE_KEEP_RESIDENT: usize = 64 << 10;
/// 5 ms ticks: a timeout lands within ~5 ms and a busy guest yields ~200 times a
/// second, at the cost of one thread waking that often.
pub const DEFAULT_EPOCH_TICK: Duration = Duration::from_millis(5);
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
            table_keep_resident: DEFAULT_TABLE_KEEP_RESIDENT,
            loaded_bytes: DEFAULT_LOADED_BYTES,
            max_compiles: default_max_compiles(),
            compile_queue: DEFAULT_COMPILE_QUEUE,
            compiler: CompilerConfig::default(),
        }
    }
}
