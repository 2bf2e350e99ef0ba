//! Sends a notification; here, it logs the text (the chat robot of the seeds).
use ax_plugin_sdk::{Context, Result, export_plugin, log};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Input {
    text: String,
    #[serde(default)]
    channel: Option<String>,
}

#[derive(Serialize)]
struct Output {
    notified: bool,
    channel: String,
    text: String,
}

fn run(ctx: Context, input: Input) -> Result<Output> {
    let channel = input.channel.unwrap_or_else(|| format!("#{}", ctx.tenant));
    log::with_fields(log::Level::Info, &input.text, &[("channel", &channel)]);
    println!("[{channel}] {}", input.text);
    Ok(Output {
        notified: true,
        channel,
        text: input.text,
    })
}

export_plugin!(run);
