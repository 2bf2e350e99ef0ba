//! Benchmark plugin for capabilities (`ax bench kv`, `ax bench http`): a
//! tight loop of host calls, so the attempt's time is the calls' time.
use ax_plugin_sdk::{Context, Error, Result, export_plugin, http, kv};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Input {
    /// `n` KV sets of `bytes`-byte values under keys `k0..k{n-1}`.
    KvSet { n: usize, bytes: usize },
    /// `n` KV gets of those keys (each must be there).
    KvGet { n: usize },
    /// `n` GETs of `url` (each must answer 200).
    Http { n: usize, url: String },
}

fn run(_ctx: Context, input: Input) -> Result<Value> {
    match input {
        Input::KvSet { n, bytes } => {
            let value = vec![b'v'; bytes];
            for i in 0..n {
                kv::set_bytes(&format!("k{i}"), &value, None)?;
            }
            Ok(json!({ "set": n }))
        }
        Input::KvGet { n } => {
            let mut total = 0;
            for i in 0..n {
                let v = kv::get_bytes(&format!("k{i}"))?
                    .ok_or_else(|| Error::fatal(format!("k{i} is missing")))?;
                total += v.len();
            }
            Ok(json!({ "got": n, "bytes": total }))
        }
        Input::Http { n, url } => {
            for _ in 0..n {
                http::get(&url)?.error_for_status()?;
            }
            Ok(json!({ "requests": n }))
        }
    }
}

export_plugin!(run);
