//! Hostile: returns an output of `mib` MiB (default 8).
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Input {
    #[serde(default = "default_mib")]
    mib: usize,
}

fn default_mib() -> usize {
    8
}

fn run(_ctx: Context, input: Input) -> Result<Value> {
    Ok(json!({ "blob": "x".repeat(input.mib << 20) }))
}

export_plugin!(run);
