//! Hostile: a component carrying 4 MiB of data, to measure and bound what the
//! host keeps per loaded plugin. Returns `{"sum": N}`, a checksum over every
//! 4096th byte (so the data is live and cannot be dropped by the optimiser).
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde_json::{Value, json};

static DATA: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/bulky.bin"));

fn run(_ctx: Context, _input: Value) -> Result<Value> {
    let data = std::hint::black_box(DATA);
    let sum: u64 = data.iter().step_by(4096).map(|&b| u64::from(b)).sum();
    Ok(json!({ "sum": sum, "bytes": data.len() }))
}

export_plugin!(run);
