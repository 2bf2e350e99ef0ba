//! The smallest useful plugin: greets whoever the input names.
use ax_plugin_sdk::{Context, Result, export_plugin, log};
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
    log::info(&format!(
        "greeting {} (attempt {})",
        input.name, ctx.attempt
    ));
    Ok(Output {
        greeting: format!("hello, {}", input.name),
    })
}

export_plugin!(run);
