//! Hostile: recurses without end until the wasm call stack is exhausted.
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde_json::{Value, json};

#[inline(never)]
fn depth(n: u64) -> u64 {
    if std::hint::black_box(n) == u64::MAX {
        return 0;
    }
    1 + depth(std::hint::black_box(n + 1))
}

fn run(_ctx: Context, _input: Value) -> Result<Value> {
    Ok(json!({ "depth": depth(0) }))
}

export_plugin!(run);
