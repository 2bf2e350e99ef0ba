//! Hostile: panics (the guest aborts with an `unreachable` trap).
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde_json::Value;

fn run(_ctx: Context, _input: Value) -> Result<Value> {
    panic!("deliberate panic from the panic plugin");
}

export_plugin!(run);
