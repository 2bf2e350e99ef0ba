//! Resumes where the last run stopped: keeps a cursor in the key-value store
//! (grant it with `kv: task` or `kv: tenant`) and processes the next batch
//! from there. The seeds' incremental jobs ("orders since the last run") in
//! miniature: a failed run does not move the cursor, so nothing is skipped.
use ax_plugin_sdk::{Context, Result, export_plugin, kv, log};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Input {
    /// Items per run.
    #[serde(default = "default_batch")]
    batch: u64,
    /// Key of the cursor (several cursors can share one store).
    #[serde(default = "default_key")]
    key: String,
}

fn default_batch() -> u64 {
    100
}

fn default_key() -> String {
    "cursor".into()
}

#[derive(Serialize, Deserialize)]
struct Cursor {
    next: u64,
    runs: u64,
}

#[derive(Serialize)]
struct Output {
    from: u64,
    to: u64,
    runs: u64,
}

fn run(ctx: Context, input: Input) -> Result<Output> {
    let cursor: Cursor = kv::get(&input.key)?.unwrap_or(Cursor { next: 0, runs: 0 });
    let (from, to) = (cursor.next, cursor.next + input.batch);
    log::info(&format!("run {}: items {from}..{to}", ctx.run_id));
    // The work itself would go here; the cursor moves only once it is done.
    let runs = cursor.runs + 1;
    kv::set(&input.key, &Cursor { next: to, runs })?;
    Ok(Output { from, to, runs })
}

export_plugin!(run);
