//! The record of one attempt: what crossed the sandbox boundary, kept so the
//! attempt can be re-executed exactly as it ran (`ax run replay`).
//!
//! Plain data shared by the runtime (which writes and replays it), the store
//! (which keeps it with the attempt) and the API and CLI (which move it).
//! What is kept, and what is not:
//! - the input, the context, the limits and the config values;
//! - the names of the secrets the step lists and whether each was set, but
//!   never a value (replay serves a marker or a value given on the command
//!   line; see docs/SECURITY.md);
//! - every value the WASI clocks and random sources handed the guest, as
//!   streams in the order they were read (random as the bytes the host's
//!   generator produced, hex);
//! - every KV call and HTTP exchange, in one ordered list of [`Call`]s, with
//!   its result (HTTP: status, headers, the body bytes the guest was given);
//! - how the attempt ended (outcome, output, error), to compare a replay with.
//!
//! A record is bounded ([`MAX_RECORD_BYTES`], counted as the runtime adds to
//! it): past the cap, nothing more is kept and the record is marked
//! `truncated`; the attempt itself is unaffected.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{AttemptContext, Limits, Outcome};

/// Most bytes one record may hold of what came in (its streams and calls, as
/// counted by the recorder; the JSON is a little larger). The input, config
/// and output it also holds are bounded by their own caps. A record past it
/// is truncated.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// Whether a step's attempts are recorded (`record:` on a task or a step).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RecordMode {
    /// Nothing is recorded (the default).
    #[default]
    Off,
    /// Every attempt is recorded; the record is kept when the attempt did
    /// not succeed.
    OnFailure,
    /// Every attempt is recorded and kept.
    Always,
}

impl RecordMode {
    /// Parses the keyword written in a task (`off`, `on_failure`, `always`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "off" => Some(Self::Off),
            "on_failure" => Some(Self::OnFailure),
            "always" => Some(Self::Always),
            _ => None,
        }
    }

    /// Whether an attempt that ended with `outcome` keeps its record.
    pub fn keeps(self, outcome: Outcome) -> bool {
        match self {
            Self::Off => false,
            Self::OnFailure => outcome != Outcome::Succeeded,
            Self::Always => true,
        }
    }
}

/// One recorded attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The context the plugin saw (run, tenant, task, step, attempt number).
    pub context: AttemptContext,
    /// sha256 of the component that ran.
    pub digest: String,
    /// The resolved input, JSON text.
    pub input: String,
    /// The limits of the attempt.
    pub limits: Limits,
    /// The config values the attempt could read.
    pub config: BTreeMap<String, String>,
    /// The secrets the step lists, each with whether the tenant had set it
    /// (values are never recorded).
    pub secrets: BTreeMap<String, bool>,
    /// The seed `wasi:random/insecure-seed` returned (as a decimal string:
    /// JSON numbers do not hold 128 bits).
    #[serde(with = "decimal")]
    pub insecure_seed: u128,
    /// Wall-clock reads, nanoseconds since the Unix epoch, in order.
    pub wall_clock: Vec<u64>,
    /// Monotonic-clock reads, nanoseconds, in order.
    pub monotonic_clock: Vec<u64>,
    /// Bytes of `wasi:random/random`, in order, hex.
    pub secure_random: String,
    /// Bytes of `wasi:random/insecure`, in order, hex.
    pub insecure_random: String,
    /// KV calls and HTTP exchanges, in the order the plugin made them.
    pub calls: Vec<Call>,
    /// The recorder stopped at [`MAX_RECORD_BYTES`]: what came after is missing.
    pub truncated: bool,
    /// Bytes the recorder counted.
    pub bytes: u64,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// Its output, when it returned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// Its error, when it did not succeed (secret values redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A `u128` as a decimal string.
mod decimal {
    use serde::{Deserialize, Deserializer, Serializer, de};

    pub(super) fn serialize<S: Serializer>(n: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// One call across the boundary that has a result to replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Call {
    /// A key-value call.
    Kv {
        /// `get`, `set`, `delete` or `list_keys`.
        op: KvOp,
        /// The key (the prefix for `list_keys`).
        key: String,
        /// What the host answered.
        result: KvResult,
    },
    /// An outbound HTTP request.
    Http {
        /// The method.
        method: String,
        /// The URL as the guest gave it.
        url: String,
        /// What came back.
        result: HttpResult,
    },
}

impl Call {
    /// How the call is named in a replay report (`kv get `k``, `http GET url`).
    pub fn describe(&self) -> String {
        match self {
            Call::Kv { op, key, .. } => format!("kv {} `{key}`", op.as_str()),
            Call::Http { method, url, .. } => format!("http {method} {url}"),
        }
    }
}

/// The key-value operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvOp {
    /// `kv.get`.
    Get,
    /// `kv.set`.
    Set,
    /// `kv.delete`.
    Delete,
    /// `kv.list-keys`.
    ListKeys,
}

impl KvOp {
    /// The name shown in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            KvOp::Get => "get",
            KvOp::Set => "set",
            KvOp::Delete => "delete",
            KvOp::ListKeys => "list_keys",
        }
    }
}

/// What a key-value call answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvResult {
    /// `get`: the value, hex, or none.
    Value(Option<String>),
    /// `set`: stored.
    Stored,
    /// `delete`: whether the key existed.
    Deleted(bool),
    /// `list_keys`: the keys.
    Keys(Vec<String>),
    /// The WIT error: its case (`denied`, `invalid`, `quota_exceeded`,
    /// `unavailable`) and message.
    Error {
        /// The error case.
        case: String,
        /// Its message.
        message: String,
    },
}

/// What an outbound HTTP request got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpResult {
    /// A response.
    Response {
        /// The status code.
        status: u16,
        /// Header names and values, in order.
        headers: Vec<(String, String)>,
        /// The body bytes the guest was given, hex.
        body: String,
        /// The body ended in an error after these bytes (the cap, a
        /// timeout, the record's own cap): its kind, as for [`HttpResult::Error`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut: Option<String>,
    },
    /// No response: the request was refused or failed (`denied`,
    /// `timeout`, `body_size`, `connection`).
    Error(String),
}
