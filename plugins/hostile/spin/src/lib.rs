//! Hostile: loops forever. Ends by fuel exhaustion or by the timeout.
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde_json::Value;

fn run(_ctx: Context, _input: Value) -> Result<Value> {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

export_plugin!(run);
