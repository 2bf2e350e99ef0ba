//! `ax bench load`: getting a plugin ready — compiling it cold, loading
//! the artifact cached on disk, and a lookup of one already loaded.

use std::fmt;
use std::time::Instant;

use serde::Serialize;

use super::{median, scratch_dir};
use crate::runtime::{CompilerConfig, LoadSource, Runtime, RuntimeConfig};

/// Cost of getting a plugin ready, by where it comes from (medians).
#[derive(Clone, Debug, Serialize)]
pub struct LoadStats {
    /// Component size in bytes.
    pub size_bytes: usize,
    /// The cheap check an upload is answered after (validation, the
    /// world's names; no compilation), ms.
    pub check_ms: f64,
    /// Validate + compile (nothing cached), ms: until the plugin can run
    /// (on Winch's code when tiered).
    pub compile_ms: f64,
    /// Tiered and served from Winch's code first: from the start of the
    /// load until Cranelift's code replaced it, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimized_ms: Option<f64>,
    /// Validate + deserialize the artifact ax cached on disk, ms.
    pub disk_cache_ms: f64,
    /// Lookup of a plugin already loaded in this process, µs.
    pub memory_hit_us: f64,
}

impl fmt::Display for LoadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "component        {} bytes", self.size_bytes)?;
        writeln!(f, "upload check     {:.2} ms", self.check_ms)?;
        writeln!(f, "compile (cold)   {:.2} ms", self.compile_ms)?;
        if let Some(optimized) = self.optimized_ms {
            writeln!(
                f,
                "optimized after  {optimized:.2} ms  (Cranelift replaced Winch)"
            )?;
        }
        writeln!(
            f,
            "disk cache       {:.3} ms  ({:.0}x faster)",
            self.disk_cache_ms,
            self.compile_ms / self.disk_cache_ms
        )?;
        write!(f, "memory hit       {:.2} µs", self.memory_hit_us)
    }
}

/// Measures compiling `bytes` cold (with `compiler`), loading the cached
/// artifact in a fresh runtime, and a repeated load in the same runtime;
/// `repeat` times each. Also the cheap check an upload is answered after.
pub fn load(bytes: &[u8], repeat: usize, compiler: CompilerConfig) -> anyhow::Result<LoadStats> {
    let (mut compile, mut disk, mut memory) = (Vec::new(), Vec::new(), Vec::new());
    let (mut check, mut optimized) = (Vec::new(), Vec::new());
    for i in 0..repeat.max(1) {
        let dir = scratch_dir(i);
        let config = RuntimeConfig {
            cache_dir: Some(dir.clone()),
            compiler,
            ..RuntimeConfig::default()
        };
        let cold = Runtime::new(config.clone())?;
        let t = Instant::now();
        cold.check(bytes)?;
        check.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        compile.push(timed_load(&cold, bytes, LoadSource::Compiled)?);
        // Tiered: the optimizing compilation runs behind; its artifact is
        // the one the warm runtime below loads.
        if cold.tier_ups_pending() > 0 {
            anyhow::ensure!(
                cold.wait_tier_ups(std::time::Duration::from_secs(3600)),
                "the tier-up did not end"
            );
            optimized.push(t.elapsed().as_secs_f64());
        }
        memory.push(timed_load(&cold, bytes, LoadSource::Memory)?);
        drop(cold);
        let warm = Runtime::new(config)?;
        disk.push(timed_load(&warm, bytes, LoadSource::DiskCache)?);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(LoadStats {
        size_bytes: bytes.len(),
        check_ms: median(&mut check) * 1e3,
        compile_ms: median(&mut compile) * 1e3,
        optimized_ms: (!optimized.is_empty()).then(|| median(&mut optimized) * 1e3),
        disk_cache_ms: median(&mut disk) * 1e3,
        memory_hit_us: median(&mut memory) * 1e6,
    })
}

fn timed_load(runtime: &Runtime, bytes: &[u8], expect: LoadSource) -> anyhow::Result<f64> {
    let t = Instant::now();
    let (_, source) = runtime.load_traced(bytes)?;
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        source == expect,
        "expected a load from {expect:?}, got {source:?}"
    );
    Ok(secs)
}
