//! {{name}}: an ax plugin. Greets whoever the input names.
//!
//! `run` gets the attempt's context and its input (any type that implements
//! `Deserialize`; input that does not fit is a fatal error) and returns its
//! output (any `Serialize` type) or an `Error`: `Error::fatal` fails the step
//! at once, `Error::retryable` is retried per the step's `retry` policy. A
//! panic traps the instance (outcome `trapped`).
use ax_plugin_sdk::{Context, Error, Result, config, export_plugin, log, progress};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Input {
    name: String,
}

#[derive(Serialize)]
struct Output {
    greeting: String,
}

fn run(ctx: Context, input: Input) -> Result<Output> {
    if input.name.is_empty() {
        return Err(Error::fatal("`name` is empty"));
    }
    // `config:` in the task definition, or `ax exec --config greeting=hi`.
    let greeting = config::get("greeting").unwrap_or_else(|| "hello".into());
    log::with_fields(
        log::Level::Info,
        &format!("greeting {}", input.name),
        &[("attempt", &ctx.attempt.to_string())],
    );
    progress(100, "done");
    Ok(Output {
        greeting: format!("{greeting}, {}", input.name),
    })
}

export_plugin!(run);
