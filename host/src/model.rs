//! Plain data shared by every layer: attempt limits, outcomes, the context a
//! plugin sees, captured logs. No I/O and no wasmtime types live here, so the
//! scheduler, the store and the API can use these without knowing how a plugin
//! is executed.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default fuel per attempt: about half a second of busy compute on this class
/// of machine (~2e9 fuel/s measured), plenty for a report step, small enough
/// that a runaway loop is stopped quickly.
pub const DEFAULT_FUEL: u64 = 1_000_000_000;
/// Default linear-memory cap per attempt.
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
/// Default wall-clock timeout per attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on the JSON output a plugin returns.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;
/// Default cap on captured stdout and on captured stderr, each.
pub const DEFAULT_MAX_STDIO_BYTES: usize = 64 << 10;
/// Default cap on the bytes of structured log records kept per attempt.
pub const DEFAULT_MAX_LOG_BYTES: usize = 64 << 10;

/// The resources one attempt may use. Every attempt gets a fresh sandbox with
/// exactly these limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Instruction budget (wasmtime fuel); exhaustion ends the attempt as `fuel_exhausted`.
    pub fuel: u64,
    /// Cap on the total linear memory of the instance, in bytes.
    pub memory_bytes: u64,
    /// Wall-clock budget, including time blocked in host calls.
    #[serde(with = "humantime_serde_compat")]
    pub timeout: Duration,
    /// Cap on the returned output (JSON text), in bytes.
    pub max_output_bytes: usize,
    /// Cap on captured stdout and on captured stderr, each, in bytes.
    pub max_stdio_bytes: usize,
    /// Cap on captured structured log records, in bytes.
    pub max_log_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: DEFAULT_FUEL,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            timeout: DEFAULT_TIMEOUT,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            max_stdio_bytes: DEFAULT_MAX_STDIO_BYTES,
            max_log_bytes: DEFAULT_MAX_LOG_BYTES,
        }
    }
}

/// Durations are written the way people write them in task files (`30s`, `2m`).
mod humantime_serde_compat {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// How an attempt ended. Distinct and machine-readable (SPEC §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The plugin returned output within every limit.
    Succeeded,
    /// The plugin returned an error (see [`ErrorKind`] for whether a retry can help).
    Failed,
    /// The instance trapped: a panic, `unreachable`, a stack overflow, a bad access.
    Trapped,
    /// The fuel budget ran out.
    FuelExhausted,
    /// The plugin died after a memory grow beyond its cap was refused.
    MemoryExceeded,
    /// The wall-clock budget ran out; the guest was stopped.
    TimedOut,
    /// The plugin returned more output than allowed.
    OutputTooLarge,
    /// The attempt was cancelled from outside (a run cancel, a shutdown).
    Cancelled,
    /// The host died while the attempt was running (set by recovery, never by the runtime).
    Lost,
}

impl Outcome {
    /// Every outcome, in a stable order (for metrics and docs).
    pub const ALL: [Outcome; 9] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Trapped,
        Outcome::FuelExhausted,
        Outcome::MemoryExceeded,
        Outcome::TimedOut,
        Outcome::OutputTooLarge,
        Outcome::Cancelled,
        Outcome::Lost,
    ];

    /// The snake_case name used in JSON, metrics and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Trapped => "trapped",
            Outcome::FuelExhausted => "fuel_exhausted",
            Outcome::MemoryExceeded => "memory_exceeded",
            Outcome::TimedOut => "timed_out",
            Outcome::OutputTooLarge => "output_too_large",
            Outcome::Cancelled => "cancelled",
            Outcome::Lost => "lost",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether another attempt can help, as the plugin said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A transient failure: retry per policy.
    Retryable,
    /// Retrying will not help.
    Fatal,
}

/// What started a run (mirrors the WIT `trigger-kind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    /// The API, the CLI or `ax exec`.
    #[default]
    Manual,
    /// A cron expression.
    Cron,
    /// A one-shot instant.
    At,
    /// A delay after creation.
    Delay,
    /// A fixed interval.
    Every,
    /// Another task's run finished.
    After,
}

/// The context handed to the plugin's `run` (the WIT `context` record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptContext {
    /// The run's id.
    pub run_id: String,
    /// The owning tenant.
    pub tenant: String,
    /// The task's name.
    pub task: String,
    /// The step's name.
    pub step: String,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// RFC 3339 instant (UTC) the run was scheduled for.
    pub scheduled_for: String,
    /// What started the run.
    pub trigger: TriggerKind,
}

/// Severity of a plugin log record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something odd that did not stop the work.
    Warn,
    /// Something failed.
    Error,
}

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "trace" => Ok(LogLevel::Trace),
            "debug" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" => Ok(LogLevel::Warn),
            "error" => Ok(LogLevel::Error),
            other => Err(format!("unknown log level `{other}`")),
        }
    }
}

/// One structured log record from a plugin (or a truncation marker from ax).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Milliseconds since the attempt started.
    pub at_ms: u64,
    /// Severity.
    pub level: LogLevel,
    /// The message text.
    pub message: String,
    /// Key/value fields, in the order the plugin gave them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<(String, String)>,
}

/// The last progress a plugin reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Percent, 0 to 100.
    pub percent: u8,
    /// A short note.
    pub note: String,
    /// Milliseconds since the attempt started.
    pub at_ms: u64,
}

/// Everything recorded about one finished attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptReport {
    /// How the attempt ended.
    pub outcome: Outcome,
    /// The plugin's output, when it succeeded.
    pub output: Option<serde_json::Value>,
    /// A human-readable reason for any outcome but `succeeded`.
    pub error: Option<String>,
    /// For `failed`: whether the plugin said a retry can help.
    pub error_kind: Option<ErrorKind>,
    /// Fuel the attempt consumed.
    pub fuel_consumed: u64,
    /// The largest total linear memory the instance reached, in bytes.
    pub memory_peak_bytes: u64,
    /// Wall time from instantiation to the end, in milliseconds (fractional).
    pub duration_ms: f64,
    /// Captured stdout (bounded; a marker line says when it was cut).
    pub stdout: String,
    /// Captured stderr (bounded; a marker line says when it was cut).
    pub stderr: String,
    /// Structured log records (bounded; a final marker record says when some were dropped).
    pub logs: Vec<LogRecord>,
    /// The last progress reported, if any.
    pub progress: Option<Progress>,
}
