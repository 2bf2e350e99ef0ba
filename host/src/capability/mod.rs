//! Capabilities a step may be granted, deny by default (SPEC §2a): outbound
//! HTTP to listed destinations, a key-value store scoped to the tenant or the
//! task, per-task config values and per-tenant secrets.
//!
//! This module holds the ax-level view, with no wasmtime and no sled:
//! - [`http`]: the allow-list grammar, matching, the tenant ceiling, address rules;
//! - [`kv`]: key and value rules, quota arithmetic, the namespace a step sees;
//! - [`StepGrants`]: what a step *declares* (stored with the task);
//! - [`Grants`]: what one attempt *gets* (declarations resolved: secret values
//!   read, a KV handle attached), handed to the runtime;
//! - [`redact`]: secret values replaced by `[redacted]` in everything an
//!   attempt reports.
//!
//! The runtime (`runtime/`) implements the WIT imports on top of [`Grants`];
//! the store implements persistence (`store::kv`, `store::secrets`).
//! User reference: docs/CAPABILITIES.md.

pub mod http;
pub mod kv;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::model::AttemptReport;

pub use self::http::HttpPattern;
pub use self::kv::{KvBackendError, KvLimits, KvNamespace, KvScope, KvStore, SetOutcome};

/// What replaces a secret value in captured text.
pub const REDACTED: &str = "[redacted]";

/// Per-request timeout when a step sets none.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body a plugin may read when a step sets none.
pub const DEFAULT_HTTP_RESPONSE_BYTES: u64 = 10 << 20;
/// Requests per attempt when a step sets none.
pub const DEFAULT_HTTP_REQUESTS: u32 = 100;
/// Hard ceiling on requests per attempt a step may ask for.
pub const MAX_HTTP_REQUESTS: u32 = 10_000;
/// Hard ceiling on the response cap a step may ask for.
pub const MAX_HTTP_RESPONSE_BYTES: u64 = 256 << 20;
/// Most config entries per task (or step).
pub const MAX_CONFIG_ENTRIES: usize = 256;
/// Longest config value, in bytes.
pub const MAX_CONFIG_VALUE: usize = 64 << 10;
/// Longest secret value, in bytes.
pub const MAX_SECRET_BYTES: usize = 64 << 10;

/// Outbound HTTP limits of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Requests the attempt may send; the next one is denied.
    pub max_requests: u32,
    /// Each request, from connecting to the last body byte.
    pub timeout: Duration,
    /// Response bodies are cut here (an error to the guest).
    pub max_response_bytes: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_requests: DEFAULT_HTTP_REQUESTS,
            timeout: DEFAULT_HTTP_TIMEOUT,
            max_response_bytes: DEFAULT_HTTP_RESPONSE_BYTES,
        }
    }
}

/// What a step declares (read from its task definition), before anything is
/// looked up: nothing by default. The scheduler hands it to the runner, which
/// resolves it into [`Grants`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepGrants {
    /// Destinations the step may send HTTP requests to.
    pub allow_http: Vec<HttpPattern>,
    /// HTTP limits.
    pub http_limits: HttpLimits,
    /// Names of tenant secrets the step may read.
    pub secrets: Vec<String>,
    /// Whether, and how wide, the step sees the key-value store.
    pub kv: Option<KvScope>,
    /// Config values (the task's, overridden by the step's).
    pub config: BTreeMap<String, String>,
    /// Whether the attempt is recorded for replay (the step's `record`, else
    /// the task's).
    pub record: crate::model::record::RecordMode,
}

/// What one attempt is granted, resolved. `Grants::default()` grants nothing:
/// every HTTP request is denied, KV calls fail, config and secrets are empty.
#[derive(Clone, Default)]
pub struct Grants {
    /// Allowed destinations.
    pub allow_http: Vec<HttpPattern>,
    /// HTTP limits.
    pub http_limits: HttpLimits,
    /// Config values.
    pub config: BTreeMap<String, String>,
    /// Secret names the step listed, with the value where the tenant set one.
    pub secrets: BTreeMap<String, Option<String>>,
    /// The key-value store, when granted.
    pub kv: Option<KvGrant>,
}

/// Access to the key-value store for one attempt.
#[derive(Clone)]
pub struct KvGrant {
    /// The store.
    pub store: Arc<dyn KvStore>,
    /// Where this attempt's keys live.
    pub namespace: KvNamespace,
    /// Size caps and the tenant's byte quota.
    pub limits: KvLimits,
}

impl std::fmt::Debug for Grants {
    // Secret values never reach a debug print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grants")
            .field("allow_http", &self.allow_http)
            .field("http_limits", &self.http_limits)
            .field("config", &self.config.keys().collect::<Vec<_>>())
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field("kv", &self.kv.as_ref().map(|k| &k.namespace))
            .finish()
    }
}

impl Grants {
    /// The secret values to redact: every non-empty value this attempt could read.
    pub fn secret_values(&self) -> Vec<&str> {
        let mut values: Vec<&str> = self
            .secrets
            .values()
            .flatten()
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .collect();
        // Longest first, so a secret containing another is replaced whole.
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values
    }
}

/// Replaces every secret value in the attempt's stdout, stderr, logs, output
/// and error with [`REDACTED`]. Only exact occurrences are found: a plugin
/// that prints a secret split up or encoded is not caught (it has been given
/// the secret; redaction protects against accidents, not against a plugin
/// bent on leaking it — see docs/CAPABILITIES.md).
pub fn redact(report: &mut AttemptReport, secrets: &[&str]) {
    if secrets.is_empty() {
        return;
    }
    redact_str(&mut report.stdout, secrets);
    redact_str(&mut report.stderr, secrets);
    if let Some(error) = &mut report.error {
        redact_str(error, secrets);
    }
    for record in &mut report.logs {
        redact_str(&mut record.message, secrets);
        for (k, v) in &mut record.fields {
            redact_str(k, secrets);
            redact_str(v, secrets);
        }
    }
    if let Some(progress) = &mut report.progress {
        redact_str(&mut progress.note, secrets);
    }
    if let Some(output) = &mut report.output {
        redact_json(output, secrets);
    }
}

fn redact_str(text: &mut String, secrets: &[&str]) {
    for secret in secrets {
        if text.contains(secret) {
            *text = text.replace(secret, REDACTED);
        }
    }
}

fn redact_json(value: &mut serde_json::Value, secrets: &[&str]) {
    use serde_json::Value;
    match value {
        Value::String(s) => redact_str(s, secrets),
        Value::Array(items) => items.iter_mut().for_each(|v| redact_json(v, secrets)),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let mut new_key = key.clone();
                redact_str(&mut new_key, secrets);
                if let Some(mut v) = map.remove(&key) {
                    redact_json(&mut v, secrets);
                    map.insert(new_key, v);
                }
            }
        }
        // Numbers and booleans cannot hold a secret's text... unless the secret
        // is itself a number: print it as a string to catch that.
        Value::Number(n) => {
            let text = n.to_string();
            if secrets.iter().any(|s| text.contains(s)) {
                *value = Value::String(REDACTED.to_owned());
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// Whether `name` is a valid config key or secret name:
/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`, like task names.
pub fn valid_name(name: &str) -> bool {
    crate::model::name::is_valid_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LogLevel, LogRecord, Outcome, Progress};

    fn report() -> AttemptReport {
        AttemptReport {
            outcome: Outcome::Failed,
            output: Some(serde_json::json!({
                "token": "s3cr3t-value",
                "nested": ["x s3cr3t-value y", 1],
                "s3cr3t-value": true,
            })),
            error: Some("bad token s3cr3t-value".into()),
            error_kind: None,
            fuel_consumed: 0,
            memory_peak_bytes: 0,
            duration_ms: 0.0,
            stdout: "the token is s3cr3t-value\n".into(),
            stderr: "s3cr3t-values3cr3t-value".into(),
            logs: vec![LogRecord {
                at_ms: 0,
                level: LogLevel::Info,
                message: "token=s3cr3t-value".into(),
                fields: vec![("k".into(), "s3cr3t-value".into())],
            }],
            progress: Some(Progress {
                percent: 5,
                note: "using s3cr3t-value".into(),
                at_ms: 0,
            }),
        }
    }

    #[test]
    fn every_captured_text_is_redacted() {
        let mut r = report();
        redact(&mut r, &["s3cr3t-value"]);
        let all = serde_json::to_string(&r).unwrap();
        assert!(!all.contains("s3cr3t"), "{all}");
        assert_eq!(r.stdout, "the token is [redacted]\n");
        assert_eq!(r.stderr, "[redacted][redacted]");
        assert_eq!(r.logs[0].fields[0].1, REDACTED);
    }

    #[test]
    fn numeric_secrets_in_json_numbers_are_redacted() {
        let mut r = report();
        r.output = Some(serde_json::json!({"pin": 48151623}));
        redact(&mut r, &["48151623"]);
        assert_eq!(r.output.unwrap()["pin"], REDACTED);
    }

    #[test]
    fn longer_secrets_are_replaced_first() {
        let grants = Grants {
            secrets: BTreeMap::from([
                ("a".into(), Some("abc".into())),
                ("b".into(), Some("abcdef".into())),
                ("c".into(), None),
                ("d".into(), Some(String::new())),
            ]),
            ..Grants::default()
        };
        assert_eq!(grants.secret_values(), vec!["abcdef", "abc"]);
        let mut text = "xabcdefx".to_string();
        redact_str(&mut text, &grants.secret_values());
        assert_eq!(text, "x[redacted]x");
    }

    #[test]
    fn debug_never_prints_secret_values() {
        let grants = Grants {
            secrets: BTreeMap::from([("api".into(), Some("hunter2".into()))]),
            ..Grants::default()
        };
        let shown = format!("{grants:?}");
        assert!(
            shown.contains("api") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
