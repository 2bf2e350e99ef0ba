//! Hostile: blocks in a WASI sleep for an hour (time spent in a host call,
//! where epoch interruption cannot reach it).
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde_json::{Value, json};

fn run(_ctx: Context, _input: Value) -> Result<Value> {
    std::thread::sleep(std::time::Duration::from_secs(3600));
    Ok(json!({ "slept": true }))
}

export_plugin!(run);
