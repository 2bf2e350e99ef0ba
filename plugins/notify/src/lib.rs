//! Sends a notification (the chat robot of the seeds). It always logs and
//! prints the text; when the task's config names a `webhook_url` (and the
//! step's `allow_http` grants it) it also POSTs `{"channel", "text"}` there as
//! JSON, with `Authorization: Bearer <webhook_token>` if the step lists that
//! secret. Without a `webhook_url` it works as before, with no network at all.
use ax_plugin_sdk::{Context, Result, config, export_plugin, http, log, secrets};
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
    /// The webhook's answer, when one was called.
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook_status: Option<u16>,
}

#[derive(Serialize)]
struct Message<'a> {
    channel: &'a str,
    text: &'a str,
}

fn run(ctx: Context, input: Input) -> Result<Output> {
    let channel = input.channel.unwrap_or_else(|| format!("#{}", ctx.tenant));
    log::with_fields(log::Level::Info, &input.text, &[("channel", &channel)]);
    println!("[{channel}] {}", input.text);
    let webhook_status = match config::get("webhook_url") {
        None => None,
        Some(url) => {
            let mut request = http::Request::post(&url).json(&Message {
                channel: &channel,
                text: &input.text,
            })?;
            // An unlisted secret is an error from the host; no token is fine.
            if let Ok(Some(token)) = secrets::get("webhook_token") {
                request = request.header("authorization", &format!("Bearer {token}"));
            }
            let response = request.send()?.error_for_status()?;
            log::info(&format!("posted to the webhook: {}", response.status));
            Some(response.status)
        }
    };
    Ok(Output {
        notified: true,
        channel,
        text: input.text,
        webhook_status,
    })
}

export_plugin!(run);
