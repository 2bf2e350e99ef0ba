//! Fails on purpose, to exercise retries and dead letters: returns a `kind`
//! error (retryable by default) until attempt `succeed_on_attempt`, if given.
use ax_plugin_sdk::{Context, Error, Result, export_plugin, log};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    succeed_on_attempt: Option<u32>,
}

fn run(ctx: Context, input: Input) -> Result<Value> {
    if input.succeed_on_attempt.is_some_and(|n| ctx.attempt >= n) {
        return Ok(json!({ "succeeded_on_attempt": ctx.attempt }));
    }
    let message = input
        .message
        .unwrap_or_else(|| format!("failing attempt {}", ctx.attempt));
    log::warn(&message);
    Err(match input.kind.as_deref() {
        Some("fatal") => Error::fatal(message),
        _ => Error::retryable(message),
    })
}

export_plugin!(run);
