//! Packs extracted rows into report files: `mode` is `full` or `incremental`.
use ax_plugin_sdk::{Context, Error, Result, export_plugin, log};
use serde::{Deserialize, Serialize};

/// Rows per output file.
const ROWS_PER_FILE: u64 = 100_000;

#[derive(Deserialize)]
struct Input {
    rows: u64,
    #[serde(default = "default_mode")]
    mode: String,
}

fn default_mode() -> String {
    "full".into()
}

#[derive(Serialize)]
struct Output {
    mode: String,
    rows: u64,
    files: u64,
}

fn run(_ctx: Context, input: Input) -> Result<Output> {
    if input.mode != "full" && input.mode != "incremental" {
        return Err(Error::fatal(format!(
            "mode `{}` is not full or incremental",
            input.mode
        )));
    }
    let files = input.rows.div_ceil(ROWS_PER_FILE).max(1);
    log::info(&format!(
        "{} pack of {} rows into {files} files",
        input.mode, input.rows
    ));
    Ok(Output {
        mode: input.mode,
        rows: input.rows,
        files,
    })
}

export_plugin!(run);
