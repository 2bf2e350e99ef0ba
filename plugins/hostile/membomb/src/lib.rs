//! Hostile: allocates 1 MiB blocks (touching each) until memory runs out.
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde_json::Value;

fn run(_ctx: Context, _input: Value) -> Result<Value> {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; 1 << 20];
        let last = block.len() - 1;
        block[last] = 1;
        hoard.push(std::hint::black_box(block));
    }
}

export_plugin!(run);
