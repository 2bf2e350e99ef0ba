//! `cargo bench`: per-attempt cost of the trivial `echo` plugin at concurrency
//! 1 and 2, and compile vs cached load. The same loops back `ax bench exec` and
//! `ax bench load`; figures go to docs/PERFORMANCE.md.

use std::path::Path;

fn main() -> anyhow::Result<()> {
    let wasm = Path::new(env!("AX_PLUGIN_DIR")).join("echo.wasm");
    let bytes = std::fs::read(&wasm)?;
    let iterations: usize = std::env::var("AX_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let runtime = ax::runtime::Runtime::new(ax::runtime::RuntimeConfig::default())?;
        let plugin = runtime.load(&bytes)?;
        println!("{}", ax::bench::ExecStats::header());
        // Five interleaved pairs: the machine is noisy, so compare medians.
        let mut rows = Vec::new();
        for _ in 0..5 {
            for c in [1, 2] {
                let row = ax::bench::exec(&runtime, &plugin, "{}", iterations, c).await?;
                println!("{row}");
                rows.push(row);
            }
        }
        if let Some((a, b, ratio)) = ax::bench::speed_up(&rows) {
            println!("speed-up c{b} vs c{a} (medians): {ratio:.2}x");
        }
        anyhow::Ok(())
    })?;
    println!("{}", ax::bench::load(&bytes, 5, Default::default())?);
    Ok(())
}
