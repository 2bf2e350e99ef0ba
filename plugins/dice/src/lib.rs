//! Test plugin for recording and replay: everything it returns comes from
//! across the sandbox boundary. It reads the wall clock and the monotonic
//! clock, draws random numbers, counts its calls in KV (`dice:count`),
//! optionally GETs `url` (its status and body go into the result), then
//! fails (fatal) with all of it in the message when `fail` is set, or
//! returns it. Built a second time as `dice2` (feature `second`), which also
//! reads `dice:second` first: a changed build whose replay diverges.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ax_plugin_sdk::{Context, Error, Result, export_plugin, http, kv};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    fail: bool,
    #[serde(default)]
    url: Option<String>,
}

/// A u64 from std's hash seeds (WASI's insecure seed).
fn roll() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u8(6);
    h.finish()
}

fn run(_ctx: Context, input: Input) -> Result<Value> {
    let started = Instant::now();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    let roll = roll();
    let secure = wasip2::random::random::get_random_u64();
    let insecure = wasip2::random::insecure::get_insecure_random_u64();
    if cfg!(feature = "second") {
        let _: Option<u64> = kv::get("dice:second")?;
    }
    let count: u64 = kv::get("dice:count")?.unwrap_or(0) + 1;
    kv::set("dice:count", &count)?;
    let fetched = match &input.url {
        Some(url) => {
            let r = http::get(url).map_err(|e| Error::retryable(e.to_string()))?;
            Some(json!({ "status": r.status, "body": r.text() }))
        }
        None => None,
    };
    let elapsed_ns = started.elapsed().as_nanos() as u64;
    let result = json!({
        "now_ms": now_ms,
        "roll": roll,
        "secure": secure,
        "insecure": insecure,
        "count": count,
        "elapsed_ns": elapsed_ns,
        "fetched": fetched,
    });
    if input.fail {
        return Err(Error::fatal(format!("dice failed: {result}")));
    }
    Ok(result)
}

export_plugin!(run);
