//! The HTTP side of the client: one [`Client`] per command (ureq, blocking),
//! request bodies, percent-encoding, and following paged listings.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;

use super::output::items;
use super::{Conn, Failure};

/// A connection to one server.
pub(super) struct Client {
    agent: ureq::Agent,
    /// The server's base URL, without a trailing `/`.
    pub(super) base: String,
    token: Option<String>,
    /// The tenant acted on, if one was named.
    pub(super) tenant: Option<String>,
}

/// A request body.
pub(super) enum Body {
    None,
    Json(Value),
    Raw {
        content_type: &'static str,
        bytes: Vec<u8>,
    },
    /// Raw bytes sent through a reader that moves an upload progress bar.
    Upload {
        content_type: &'static str,
        bytes: Vec<u8>,
        progress: crate::cli::term::UploadProgress,
    },
}

/// Compiling an uploaded plugin can take a while on a busy host.
const HTTP_TIMEOUT: Duration = Duration::from_secs(300);

/// Largest answer read (logs of many attempts can be large).
const MAX_RESPONSE_BYTES: u64 = 256 << 20;

impl Client {
    pub(super) fn new(conn: &Conn) -> Self {
        let config = ureq::Agent::config_builder()
            // 4xx/5xx answers carry the API's error body: read them, do not turn them into Err.
            .http_status_as_error(false)
            .timeout_global(Some(HTTP_TIMEOUT))
            .build();
        Self {
            agent: ureq::Agent::new_with_config(config),
            base: conn.url().trim_end_matches('/').to_string(),
            token: conn.token(),
            tenant: conn.tenant(),
        }
    }

    /// Sends a request; 2xx answers give `(status, JSON or null)`, others a [`Failure`].
    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        body: Body,
    ) -> Result<(u16, Value), Failure> {
        let url = format!("{}{path}", self.base);
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("accept", "application/json");
        if let Some(token) = &self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        if let Some(tenant) = &self.tenant {
            builder = builder.header("x-ax-tenant", tenant);
        }
        let unreachable = |e: ureq::Error| unreachable(&self.base, &e);
        let bad_url = |e: ureq::http::Error| Failure::new("bad_url", format!("`{url}`: {e}"));
        let (content_type, bytes) = match body {
            Body::None => (None, Vec::new()),
            Body::Json(v) => (Some("application/json"), v.to_string().into_bytes()),
            Body::Raw {
                content_type,
                bytes,
            } => (Some(content_type), bytes),
            Body::Upload {
                content_type,
                bytes,
                progress,
            } => {
                // An explicit length keeps the upload a plain (not chunked) body.
                let request = builder
                    .header("content-type", content_type)
                    .header("content-length", bytes.len())
                    .body(ureq::SendBody::from_owned_reader(progress.reader(bytes)))
                    .map_err(bad_url)?;
                let response = self.agent.run(request);
                progress.finish();
                return self.answer(method, path, response.map_err(unreachable)?);
            }
        };
        if let Some(ct) = content_type {
            builder = builder.header("content-type", ct);
        }
        let request = builder.body(bytes).map_err(bad_url)?;
        let response = self.agent.run(request).map_err(unreachable)?;
        self.answer(method, path, response)
    }

    /// Reads an answer: 2xx gives `(status, JSON or null)`, others a [`Failure`].
    fn answer(
        &self,
        method: &str,
        path: &str,
        mut response: ureq::http::Response<ureq::Body>,
    ) -> Result<(u16, Value), Failure> {
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| {
                Failure::new(
                    "connection",
                    format!("reading the answer of {method} {path}: {e}"),
                )
            })?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if (200..300).contains(&status) {
            return Ok((status, value));
        }
        let error = &value["error"];
        let code = error["code"].as_str().unwrap_or("http_error").to_string();
        let mut message = match error["message"].as_str() {
            Some(m) => m.to_string(),
            None => format!(
                "the server answered `{}` with {status} ({method} {path}): {value}",
                invoked_command()
            ),
        };
        if status == 401 && self.token.is_none() {
            message.push_str(" (set AX_TOKEN or pass --token)");
        }
        Err(Failure {
            code,
            message,
            details: error["details"].clone(),
        })
    }

    /// GETs raw bytes (a component); an error answer is a [`Failure`] as for JSON.
    pub(super) fn get_bytes(&self, path: &str) -> Result<Vec<u8>, Failure> {
        let url = format!("{}{path}", self.base);
        let mut builder = ureq::http::Request::builder().method("GET").uri(&url);
        if let Some(token) = &self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        if let Some(tenant) = &self.tenant {
            builder = builder.header("x-ax-tenant", tenant);
        }
        let request = builder
            .body(Vec::new())
            .map_err(|e| Failure::new("bad_url", format!("`{url}`: {e}")))?;
        let mut response = self
            .agent
            .run(request)
            .map_err(|e| unreachable(&self.base, &e))?;
        if !response.status().is_success() {
            return self.answer("GET", path, response).map(|_| Vec::new());
        }
        response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| {
                Failure::new(
                    "connection",
                    format!("reading the answer of GET {path}: {e}"),
                )
            })
    }

    pub(super) fn get(&self, path: &str) -> Result<Value, Failure> {
        self.call("GET", path, Body::None).map(|(_, v)| v)
    }

    pub(super) fn post(&self, path: &str, body: Body) -> Result<(u16, Value), Failure> {
        self.call("POST", path, body)
    }
}

/// The failure of a request that never reached the server: names the URL
/// tried and, when nothing listens there, how to start a server.
fn unreachable(base: &str, e: &ureq::Error) -> Failure {
    let refused = match e {
        ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        other => other.to_string().to_ascii_lowercase().contains("refused"),
    };
    let hint = if refused {
        "; nothing listens there: start a server with `ax serve` (or point --url / AX_URL \
         at a running one)"
    } else {
        ""
    };
    Failure::new(
        "connection",
        format!("cannot reach the ax server at {base}: {e}{hint}"),
    )
}

/// The command being run, for messages: `ax` and its subcommand words
/// (arguments up to the first flag, at most three).
fn invoked_command() -> String {
    let words: Vec<String> = std::env::args()
        .skip(1)
        .take_while(|a| !a.starts_with('-'))
        .take(3)
        .collect();
    std::iter::once("ax".to_string())
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Percent-encodes a path segment or query value.
pub(super) fn enc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

pub(super) fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", enc(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Items a page of a listing holds when the client follows every page (the
/// API's largest page).
const FULL_PAGE: usize = 1000;

/// Every item of a paged listing (`{KEY: [...], "next_cursor": ...}` at
/// `path`, which has no query string): follows the cursor to the end.
pub(super) fn all_pages(client: &Client, path: &str, key: &str) -> Result<Vec<Value>, Failure> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client.get(&format!(
            "{path}{}",
            query(&[
                ("limit", Some(FULL_PAGE.to_string())),
                ("cursor", cursor.clone())
            ])
        ))?;
        all.extend(items(&page[key]).cloned());
        match page["next_cursor"].as_str() {
            // A cursor that does not move would loop for ever.
            Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_string()),
            _ => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            query(&[("a", Some("x y/z".into())), ("b", None)]),
            "?a=x%20y%2Fz"
        );
        assert_eq!(query(&[("b", None)]), "");
        assert_eq!(enc("hello-1.0_x~"), "hello-1.0_x~");
    }
}
