//! Hostile: floods stdout, stderr and the log (`mib` MiB each, default 8), then succeeds.
use std::io::Write;

use ax_plugin_sdk::{Context, Result, export_plugin, log};
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
    let line = [b'x'; 1023];
    let lines = input.mib * 1024;
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    for i in 0..lines {
        let _ = out.write_all(&line).and_then(|_| out.write_all(b"\n"));
        let _ = err.write_all(&line).and_then(|_| err.write_all(b"\n"));
        log::info(&format!("flood record {i}"));
    }
    Ok(json!({ "lines": lines }))
}

export_plugin!(run);
