//! Task definitions: the types a user writes (YAML or JSON), parsing them with
//! precise, located errors, structural validation on save, and the retry policy
//! of a step (whether to retry an outcome, how long to wait).
//!
//! Everything here is pure: no store, no clock, no plugin lookup. The caller
//! (the API) checks that referenced plugins exist, compiles the trigger with
//! `schedule` (cron syntax, time zones) and stores the result. The `${...}`
//! language of step inputs is [`crate::template`]; graph checks are
//! [`crate::dag`]. The user reference is `docs/TASKS.md`.
//!
//! Reading goes text → a JSON tree (serde-saphyr for YAML, serde_json for JSON,
//! both through one visitor that refuses duplicate keys and counts nodes) → the
//! typed spec, by hand, so that every error carries the path of the offending
//! field (`steps[1].limits.fuel`) rather than a line number alone. The same
//! converter backs `Deserialize`, so stored specs are read exactly like
//! submitted ones.

pub mod alerts;
pub mod retention;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::capability::{self, HttpPattern, KvScope, StepGrants};
use crate::cond::{self, Condition};
use crate::model::{ErrorKind, Limits, Outcome, StepStatus};
use crate::schedule::{CatchUp, Overlap, TriggerSpec};
use crate::template::shorten;
use crate::{dag, template};

/// Largest task definition accepted, in bytes (YAML or JSON text).
pub const MAX_SPEC_BYTES: usize = 1 << 20;
/// Cap on the values (scalars, lists, mappings) in one definition, counted
/// after YAML aliases are expanded: a second line of defence against alias bombs.
pub const MAX_SPEC_NODES: usize = 100_000;
pub use crate::model::name::{MAX_NAME_LEN, is_valid_name, is_valid_version};
/// Most steps in one task (docs/TASKS.md states it; a test holds them equal).
pub const MAX_STEPS: usize = 256;
pub use crate::model::priority::{DEFAULT_PRIORITY, MAX_PRIORITY};
/// Longest `description`, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Most attempts a retry policy may allow.
pub const MAX_ATTEMPTS: u32 = 100;
/// Most entries in a backoff list.
pub const MAX_BACKOFF_ENTRIES: usize = 100;
/// Longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// Largest exponential backoff factor.
pub const MAX_BACKOFF_FACTOR: f64 = 10.0;
/// Longest `when` expression, in bytes (the CEL parser recurses deeply, so
/// size and nesting are bounded before it ever sees the text; the cost of
/// evaluating is bounded by [`cond::Budget`]).
pub const MAX_WHEN_BYTES: usize = cond::MAX_LEN;
/// Deepest bracket nesting in a `when` expression.
pub const MAX_WHEN_DEPTH: usize = cond::MAX_DEPTH;
/// A 32-bit WebAssembly instance cannot address more than 4 GiB.
pub const MAX_WASM_MEMORY_MB: u64 = 4096;
/// Shortest `every` interval.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// Earliest `trigger.at`, in ms since the Unix epoch: the epoch itself.
/// Instants are kept as milliseconds since it, and nothing before it is a
/// schedule anyone means (a past `at` after it is fine: `catch_up` decides).
pub const MIN_AT_MS: i64 = 0;
/// Latest `trigger.at`: 9999-12-31T23:59:59.999Z, the last instant that
/// RFC 3339's four-digit years can write in UTC (an offset can push a
/// written `9999-12-31T23:00:00-02:00` past it).
pub const MAX_AT_MS: i64 = 253_402_300_799_999;

/// A task definition (SPEC §4), after parsing. Serializes to the canonical
/// `steps` form (a shorthand one-step task comes back with one step).
///
/// `Deserialize` is implemented by hand with the same converter as [`parse`],
/// which refuses unknown fields with their path (the effect of
/// `deny_unknown_fields`, with better messages).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskSpec {
    /// Unique per tenant; `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.
    pub name: String,
    /// Free text for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When the task fires; `None` means manual/API only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerSpec>,
    /// What to do with fire instants missed while ax was down.
    pub catch_up: CatchUp,
    /// What to do when a fire comes while the previous run is active.
    pub overlap: Overlap,
    /// 0..=9, higher first in the dispatch queue.
    pub priority: u8,
    /// The DAG, in declaration order (at least one step).
    pub steps: Vec<StepSpec>,
    /// How much finished history to keep (`crate::scheduler::retention`); `None`: the
    /// server defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<retention::RetentionSpec>,
    /// Where failures, dead letters and late starts are reported
    /// (`crate::scheduler::alerts`); `None`: only the tenant's alerts, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<alerts::AlertSpec>,
    /// Config values every step can read (`config.get`); a step's own
    /// `config` overrides single keys.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

/// One node of a task's DAG.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepSpec {
    /// Unique within the task; same charset as task names.
    pub name: String,
    /// The plugin to run, `name@version`.
    pub plugin: PluginRef,
    /// The input template (see [`crate::template`]); `{}` when absent.
    pub input: Value,
    /// Per-attempt limits; unset fields take [`Limits::default`].
    #[serde(skip_serializing_if = "StepLimits::is_unset")]
    pub limits: StepLimits,
    /// A named slot pool bounding concurrency across tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Steps that must finish first (per [`StepSpec::trigger_rule`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// A CEL condition; false means the step is skipped. Stored now, evaluated at run time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// How upstream results decide whether this step runs.
    pub trigger_rule: TriggerRule,
    /// Destinations this step may send HTTP requests to (none by default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_http: Vec<HttpPattern>,
    /// Names of the tenant's secrets this step may read (none by default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The key-value store this step sees, if any (none by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvScope>,
    /// Config values for this step, over the task's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

/// A plugin version, written `name@version` (semver).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PluginRef {
    /// The plugin's name.
    pub name: String,
    /// Its semver version, `x.y.z` with optional `-pre` and `+build`.
    pub version: String,
}

/// Per-attempt limits a step asks for. Each is checked against the tenant's
/// [`Caps`] on save.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepLimits {
    /// Instruction budget (wasmtime fuel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Linear memory cap, in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Wall-clock budget, written `30s`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "duration_text::option"
    )]
    pub timeout: Option<Duration>,
    /// Outbound HTTP requests per attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_requests: Option<u32>,
    /// Per-request HTTP timeout, written `10s`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "duration_text::option"
    )]
    pub http_timeout: Option<Duration>,
    /// Largest HTTP response body, in KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_response_kb: Option<u64>,
}

/// How a step's failed attempts are retried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetryPolicy {
    /// Total attempts allowed, the first included: 1 (the default) means no retry.
    pub max_attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
    /// Outcomes retried in addition to the default set (see [`RetryPolicy::should_retry`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retry_on: Vec<RetryOn>,
}

/// The wait before each retry.
#[derive(Clone, Debug, PartialEq)]
pub enum Backoff {
    /// Fixed waits, one per retry; the last repeats (`[10s, 30s, 2m]`). No jitter.
    List(Vec<Duration>),
    /// `initial × factor^(n-1)`, capped at `max`, optionally jittered.
    Exponential(Exponential),
}

/// Parameters of an exponential backoff.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Exponential {
    /// The wait before the first retry (before jitter).
    #[serde(serialize_with = "duration_text::plain")]
    pub initial: Duration,
    /// The cap on any wait.
    #[serde(serialize_with = "duration_text::plain")]
    pub max: Duration,
    /// Growth per retry, 1.0..=10.0.
    pub factor: f64,
    /// Equal jitter: the wait is drawn uniformly from `[d/2, d]`.
    pub jitter: bool,
}

/// Outcomes that are not retried unless a policy lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// `failed` with an error the plugin marked `fatal`.
    Fatal,
    /// `fuel_exhausted`.
    FuelExhausted,
    /// `memory_exceeded`.
    MemoryExceeded,
    /// `output_too_large`.
    OutputTooLarge,
}

/// How upstream results decide whether a step runs (SPEC §4, Airflow's names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerRule {
    /// Run when every upstream succeeded; skip as soon as one did not.
    #[default]
    AllSuccess,
    /// Run as soon as one upstream succeeded; skip if all ended and none did.
    OneSuccess,
    /// Run once every upstream ended, whatever the result.
    AllDone,
    /// Run once every upstream ended succeeded or skipped; skip as soon as one failed.
    NoneFailed,
}

/// What [`TriggerRule::evaluate`] decides for a step whose upstreams are in given states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleVerdict {
    /// Not decidable yet: some upstream is still pending or running.
    Wait,
    /// The rule is met: evaluate `when`, then queue the step.
    Run,
    /// The rule can no longer be met: the step is skipped.
    Skip,
}

pub use crate::model::Caps;

/// A definition error, located by its path in the document: `steps[1].limits.fuel`,
/// `trigger.cron`, or `""` for the document as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", path_prefix(path))]
pub struct SpecError {
    /// Where: dotted fields and `[index]` for list items; empty for the whole document.
    pub path: String,
    /// What is wrong, naming the offending value.
    pub message: String,
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

impl SpecError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

type Result<T, E = SpecError> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------
// Defaults and small behaviour
// ---------------------------------------------------------------------------

impl Default for Exponential {
    /// 1s, doubling, capped at 5m, jittered.
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
            factor: 2.0,
            jitter: true,
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::Exponential(Exponential::default())
    }
}

impl Default for RetryPolicy {
    /// One attempt (no retry), default exponential backoff.
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff: Backoff::default(),
            retry_on: Vec::new(),
        }
    }
}

impl RetryPolicy {
    /// Whether to try again after attempt number `attempt` (from 1) ended with
    /// `outcome` (and, for `failed`, the error kind the plugin gave).
    ///
    /// Never once `attempt >= max_attempts`, never after `succeeded` or
    /// `cancelled`. Retried by default: `failed` with a retryable error (or no
    /// kind), `trapped`, `timed_out`, `lost`. Retried only when listed in
    /// `retry_on`: `failed` + `fatal`, `fuel_exhausted`, `memory_exceeded`,
    /// `output_too_large` — the same input will almost surely fail the same way.
    ///
    /// `lost` counts like any attempt here; a scheduler that does not charge
    /// attempts lost to host crashes passes the number of attempts not lost.
    pub fn should_retry(&self, attempt: u32, outcome: Outcome, kind: Option<ErrorKind>) -> bool {
        if attempt >= self.max_attempts {
            return false;
        }
        let opted = |r: RetryOn| self.retry_on.contains(&r);
        match outcome {
            Outcome::Succeeded | Outcome::Cancelled => false,
            Outcome::Failed => match kind {
                Some(ErrorKind::Fatal) => opted(RetryOn::Fatal),
                Some(ErrorKind::Retryable) | None => true,
            },
            Outcome::Trapped | Outcome::TimedOut | Outcome::Lost => true,
            Outcome::FuelExhausted => opted(RetryOn::FuelExhausted),
            Outcome::MemoryExceeded => opted(RetryOn::MemoryExceeded),
            Outcome::OutputTooLarge => opted(RetryOn::OutputTooLarge),
        }
    }

    /// The wait before attempt `attempt + 1`, after attempt `attempt` (from 1;
    /// 0 is read as 1) failed.
    ///
    /// A list gives its `attempt`-th entry, the last one repeating (an empty
    /// list, refused on save, waits zero). Exponential gives
    /// `d = min(initial × factor^(attempt-1), max)`; with jitter the wait is
    /// drawn uniformly from `[d/2, d]` ("equal jitter": spreads retries of many
    /// runs apart while never waiting less than half the nominal delay).
    pub fn delay(&self, attempt: u32, rng: &mut impl rand::Rng) -> Duration {
        let n = attempt.max(1);
        match &self.backoff {
            Backoff::List(waits) => {
                let i = usize::try_from(n - 1)
                    .unwrap_or(usize::MAX)
                    .min(waits.len().saturating_sub(1));
                waits.get(i).copied().unwrap_or(Duration::ZERO)
            }
            Backoff::Exponential(e) => {
                let cap = e.max.as_secs_f64();
                let exponent = i32::try_from(n - 1).unwrap_or(i32::MAX);
                let nominal = e.initial.as_secs_f64() * e.factor.powi(exponent);
                // NaN (a bad factor) or overflow both end at the cap.
                let secs = if nominal.is_finite() {
                    nominal.min(cap)
                } else {
                    cap
                };
                let secs = if e.jitter {
                    secs / 2.0 + rng.random::<f64>() * (secs / 2.0)
                } else {
                    secs
                };
                Duration::try_from_secs_f64(secs.max(0.0))
                    .unwrap_or(e.max)
                    .min(e.max)
            }
        }
    }
}

impl TriggerRule {
    /// Decides a step's fate from the states of its direct upstream steps.
    /// A step with no upstream always runs. `Succeeded` is success; `Skipped`
    /// is neither success nor failure; `Failed`, `Dead` and `Cancelled` are
    /// failures; anything else is still in progress.
    pub fn evaluate(self, upstream: &[StepStatus]) -> RuleVerdict {
        if upstream.is_empty() {
            return RuleVerdict::Run;
        }
        let succeeded = |s: &StepStatus| *s == StepStatus::Succeeded;
        let failed = |s: &StepStatus| {
            matches!(
                s,
                StepStatus::Failed | StepStatus::Dead | StepStatus::Cancelled
            )
        };
        let done = |s: &StepStatus| s.is_terminal();
        let all_done = upstream.iter().all(done);
        match self {
            TriggerRule::AllSuccess => {
                if upstream.iter().any(|s| done(s) && !succeeded(s)) {
                    RuleVerdict::Skip
                } else if upstream.iter().all(succeeded) {
                    RuleVerdict::Run
                } else {
                    RuleVerdict::Wait
                }
            }
            TriggerRule::OneSuccess => {
                if upstream.iter().any(succeeded) {
                    RuleVerdict::Run
                } else if all_done {
                    RuleVerdict::Skip
                } else {
                    RuleVerdict::Wait
                }
            }
            TriggerRule::AllDone => {
                if all_done {
                    RuleVerdict::Run
                } else {
                    RuleVerdict::Wait
                }
            }
            TriggerRule::NoneFailed => {
                if upstream.iter().any(failed) {
                    RuleVerdict::Skip
                } else if all_done {
                    RuleVerdict::Run
                } else {
                    RuleVerdict::Wait
                }
            }
        }
    }
}

impl StepLimits {
    /// Whether no limit is set (all defaults).
    pub fn is_unset(&self) -> bool {
        *self == StepLimits::default()
    }
}

/// MiB to bytes, saturating (validation keeps real values far below overflow).
fn mib(mb: u64) -> u64 {
    mb.saturating_mul(1 << 20)
}

impl StepSpec {
    /// The limits an attempt of this step gets: [`Limits::default`] with the
    /// step's `fuel`, `memory_mb` and `timeout` applied.
    pub fn limits_or_default(&self) -> Limits {
        let mut limits = Limits::default();
        if let Some(fuel) = self.limits.fuel {
            limits.fuel = fuel;
        }
        if let Some(mb) = self.limits.memory_mb {
            limits.memory_bytes = mib(mb);
        }
        if let Some(timeout) = self.limits.timeout {
            limits.timeout = timeout;
        }
        limits
    }

    /// [`StepSpec::limits_or_default`], each value lowered to its cap
    /// ([`Limits::capped`]): what an attempt of this step gets at its start.
    pub fn limits_capped(&self, caps: &Caps) -> Limits {
        self.limits_or_default().capped(caps)
    }
}

impl StepSpec {
    /// The HTTP limits an attempt of this step gets (defaults where unset).
    pub fn http_limits(&self) -> capability::HttpLimits {
        let mut http = capability::HttpLimits::default();
        if let Some(n) = self.limits.http_requests {
            http.max_requests = n;
        }
        if let Some(t) = self.limits.http_timeout {
            http.timeout = t;
        }
        if let Some(kb) = self.limits.http_response_kb {
            http.max_response_bytes = kb.saturating_mul(1 << 10);
        }
        http
    }
}

impl TaskSpec {
    /// What step `i` declares: its allow-list, HTTP limits, secret names, KV
    /// scope and config (the task's, overridden by the step's).
    pub fn step_grants(&self, i: usize) -> StepGrants {
        let step = &self.steps[i];
        let mut config = self.config.clone();
        config.extend(step.config.iter().map(|(k, v)| (k.clone(), v.clone())));
        StepGrants {
            allow_http: step.allow_http.clone(),
            http_limits: step.http_limits(),
            secrets: step.secrets.clone(),
            kv: step.kv,
            config,
        }
    }

    /// The steps as `(name, needs)` pairs, the shape [`crate::dag`] takes.
    pub fn graph(&self) -> Vec<(&str, &[String])> {
        self.steps
            .iter()
            .map(|s| (s.name.as_str(), s.needs.as_slice()))
            .collect()
    }

    /// The step with this name.
    pub fn step(&self, name: &str) -> Option<&StepSpec> {
        self.steps.iter().find(|s| s.name == name)
    }
}

// ---------------------------------------------------------------------------
// Names and versions
// ---------------------------------------------------------------------------

fn name_error(path: &str, what: &str, name: &str) -> SpecError {
    SpecError::new(
        path,
        format!(
            "`{}` is not a valid {what} name: use letters, digits, `_`, `.` and `-`, \
             start with a letter or digit, at most {MAX_NAME_LEN} characters",
            shorten(name)
        ),
    )
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

impl FromStr for PluginRef {
    type Err = String;

    /// Reads `name@version`, checking the name's charset and the version's semver syntax.
    fn from_str(s: &str) -> Result<Self, String> {
        let Some((name, version)) = s.split_once('@') else {
            return Err(format!(
                "`{}` has no version: write the plugin as name@1.2.3",
                shorten(s)
            ));
        };
        if !is_valid_name(name) {
            return Err(format!(
                "`{}` is not a valid plugin name: use letters, digits, `_`, `.` and `-`, \
                 start with a letter or digit, at most {MAX_NAME_LEN} characters",
                shorten(name)
            ));
        }
        if !is_valid_version(version) {
            return Err(format!(
                "`{}` is not a semver version (like 1.2.0 or 1.2.0-rc.1)",
                shorten(version)
            ));
        }
        Ok(PluginRef {
            name: name.to_owned(),
            version: version.to_owned(),
        })
    }
}

impl Serialize for PluginRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PluginRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

impl Serialize for Backoff {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Backoff::List(waits) => {
                let mut seq = s.serialize_seq(Some(waits.len()))?;
                for w in waits {
                    seq.serialize_element(&humantime::format_duration(*w).to_string())?;
                }
                seq.end()
            }
            Backoff::Exponential(e) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("exponential", e)?;
                map.end()
            }
        }
    }
}

/// Durations written as humantime text (`30s`, `2m`, `1h 30m`).
mod duration_text {
    use std::time::Duration;

    use serde::Serializer;

    pub(super) fn plain<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub(super) fn option<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => plain(d, s),
            None => s.serialize_none(),
        }
    }
}

// ---------------------------------------------------------------------------
// Text → JSON tree
// ---------------------------------------------------------------------------

/// A JSON tree read through [`TreeSeed`]: duplicate keys refused, nodes counted.
struct Tree(Value);

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let nodes = Cell::new(0);
        TreeSeed { nodes: &nodes }.deserialize(d).map(Tree)
    }
}

/// Builds a `serde_json::Value` from any self-describing format, refusing
/// duplicate keys (serde_json would keep the last silently) and more than
/// [`MAX_SPEC_NODES`] values.
#[derive(Clone, Copy)]
struct TreeSeed<'n> {
    nodes: &'n Cell<usize>,
}

impl TreeSeed<'_> {
    fn count<E: de::Error>(self) -> Result<(), E> {
        let n = self.nodes.get() + 1;
        if n > MAX_SPEC_NODES {
            return Err(E::custom(format!(
                "more than {MAX_SPEC_NODES} values in one definition"
            )));
        }
        self.nodes.set(n);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for TreeSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TreeSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-compatible value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.count()?;
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a finite number")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// Reads YAML or JSON text into a JSON tree.
fn read_tree(text: &str) -> Result<Value> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(SpecError::new(
            "",
            format!(
                "the definition is {} bytes; the limit is {MAX_SPEC_BYTES} (1 MiB)",
                text.len()
            ),
        ));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(SpecError::new("", "the definition is empty"));
    }
    if text.trim_start().starts_with('{') {
        return serde_json::from_str::<Tree>(text)
            .map(|t| t.0)
            .map_err(|e| SpecError::new("", format!("invalid JSON: {e}")));
    }
    let options = serde_saphyr::options! {
        // YAML 1.2 booleans only: `no`, `on`, `yes` stay strings (the Norway problem).
        strict_booleans: true,
        // Messages go into API responses: a location, not a multi-line snippet.
        with_snippet: false,
        // A real task has a few hundred values and no reason for many anchors;
        // these bounds sit far above that and far below what hurts the host.
        budget: serde_saphyr::budget! {
            max_events: 4 * MAX_SPEC_NODES,
            max_nodes: MAX_SPEC_NODES,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_recorded_anchor_events: MAX_SPEC_NODES,
            max_recorded_anchor_bytes: MAX_SPEC_BYTES,
            max_total_scalar_bytes: MAX_SPEC_BYTES,
            max_depth: 64,
            max_merge_keys: 100,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_SPEC_NODES,
            max_replay_stack_depth: 16,
            max_alias_expansions_per_anchor: 1_000,
        },
    };
    serde_saphyr::from_str_with_options::<Tree>(text, options)
        .map(|t| t.0)
        .map_err(|e| {
            // The user-facing wording drops hints meant for programmers
            // ("set DuplicateKeyPolicy in Options").
            let message = e.render_with_formatter(&serde_saphyr::UserMessageFormatter);
            SpecError::new("", format!("invalid YAML: {message}"))
        })
}

// ---------------------------------------------------------------------------
// JSON tree → typed spec, with paths
// ---------------------------------------------------------------------------

/// `base.key`, or `key` at the root.
fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_owned()
    } else {
        format!("{base}.{key}")
    }
}

/// How a value is described in messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the text `{}`", shorten(s)),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

fn as_string(value: &Value, path: &str) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Err(SpecError::new(
            path,
            format!(
                "expected text, found {}; quote it: \"{value}\"",
                describe(value)
            ),
        )),
        other => Err(SpecError::new(
            path,
            format!("expected text, found {}", describe(other)),
        )),
    }
}

fn as_u64(value: &Value, path: &str) -> Result<u64> {
    let bad = || {
        SpecError::new(
            path,
            format!("expected a whole number ≥ 0, found {}", describe(value)),
        )
    };
    match value {
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(v), _) => Ok(v),
            // `5e7` is read as a float; accept it when it is a whole number.
            (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 => Ok(f as u64),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

fn as_duration(value: &Value, path: &str) -> Result<Duration> {
    match value {
        Value::String(text) => humantime::parse_duration(text.trim()).map_err(|e| {
            SpecError::new(
                path,
                format!(
                    "`{}` is not a duration ({e}); write it like 30s, 5m or 1h30m",
                    shorten(text)
                ),
            )
        }),
        Value::Number(n) => Err(SpecError::new(
            path,
            format!("`{n}` has no unit; write a duration like {n}s or {n}m"),
        )),
        other => Err(SpecError::new(
            path,
            format!("expected a duration like 30s, found {}", describe(other)),
        )),
    }
}

fn as_bool(value: &Value, path: &str) -> Result<bool> {
    value.as_bool().ok_or_else(|| {
        SpecError::new(
            path,
            format!("expected true or false, found {}", describe(value)),
        )
    })
}

fn as_f64(value: &Value, path: &str) -> Result<f64> {
    value.as_f64().ok_or_else(|| {
        SpecError::new(
            path,
            format!("expected a number, found {}", describe(value)),
        )
    })
}

/// A keyword (`latest`, `one_success`, …) read through the enum's serde names.
fn as_keyword<T: serde::de::DeserializeOwned>(value: &Value, path: &str) -> Result<T> {
    let text = as_string(value, path)?;
    serde_json::from_value(Value::String(text)).map_err(|e| {
        // serde says "unknown variant `x`, expected one of `a`, `b`"; say it plainly.
        let msg = e.to_string().replace("unknown variant", "unknown value");
        SpecError::new(path, msg)
    })
}

/// A list of texts; a single text is read as a list of one.
fn as_string_list(value: &Value, path: &str) -> Result<Vec<String>> {
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| as_string(item, &format!("{path}[{i}]")))
            .collect(),
        Value::String(s) => Ok(vec![s.clone()]),
        other => Err(SpecError::new(
            path,
            format!("expected a list of names, found {}", describe(other)),
        )),
    }
}

/// Edit distance, for "did you mean" hints on short field names.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A mapping being read, with its path.
struct Obj<'v> {
    map: &'v Map<String, Value>,
    path: String,
}

impl<'v> Obj<'v> {
    /// `value` as a mapping whose keys are all in `allowed`.
    fn new(value: &'v Value, path: &str, what: &str, allowed: &[&str]) -> Result<Self> {
        let Value::Object(map) = value else {
            return Err(SpecError::new(
                path,
                format!("{what} must be a mapping, found {}", describe(value)),
            ));
        };
        let obj = Obj {
            map,
            path: path.to_owned(),
        };
        obj.deny_unknown(allowed, &[])?;
        Ok(obj)
    }

    /// Refuses keys outside `allowed`, with a hint: a special one from
    /// `hints`, else the closest allowed name, else the list.
    fn deny_unknown(&self, allowed: &[&str], hints: &[(&str, &str)]) -> Result<()> {
        let Some(key) = self.map.keys().find(|k| !allowed.contains(&k.as_str())) else {
            return Ok(());
        };
        let hint = if let Some((_, hint)) = hints.iter().find(|(k, _)| k == key) {
            (*hint).to_owned()
        } else if let Some(best) = allowed
            .iter()
            .map(|a| (distance(key, a), a))
            .filter(|(d, a)| *d <= 2.max(a.len() / 3))
            .min()
        {
            format!("did you mean `{}`?", best.1)
        } else {
            format!("expected one of: {}", allowed.join(", "))
        };
        Err(SpecError::new(
            self.path.clone(),
            format!("unknown field `{}`; {hint}", shorten(key)),
        ))
    }

    fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The value of `key`; absent and `null` are the same.
    fn get(&self, key: &str) -> Option<&'v Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn opt<T>(
        &self,
        key: &str,
        read: impl FnOnce(&'v Value, &str) -> Result<T>,
    ) -> Result<Option<T>> {
        self.get(key).map(|v| read(v, &self.at(key))).transpose()
    }

    fn required<T>(&self, key: &str, read: impl FnOnce(&'v Value, &str) -> Result<T>) -> Result<T> {
        match self.get(key) {
            Some(v) => read(v, &self.at(key)),
            None => Err(SpecError::new(
                self.path.clone(),
                format!("missing field `{key}`"),
            )),
        }
    }
}

/// Every top-level field of a definition (the API document lists the same).
pub(crate) const TASK_FIELDS: [&str; 18] = [
    "name",
    "description",
    "trigger",
    "catch_up",
    "overlap",
    "priority",
    "steps",
    "retention",
    "alerts",
    "config",
    // The one-step shorthand.
    "plugin",
    "input",
    "limits",
    "retry",
    "pool",
    "allow_http",
    "secrets",
    "kv",
];
const SHORTHAND_FIELDS: [&str; 8] = [
    "plugin",
    "input",
    "limits",
    "retry",
    "pool",
    "allow_http",
    "secrets",
    "kv",
];
const STEP_FIELDS: [&str; 13] = [
    "name",
    "plugin",
    "input",
    "limits",
    "pool",
    "retry",
    "needs",
    "when",
    "trigger_rule",
    "allow_http",
    "secrets",
    "kv",
    "config",
];
const TRIGGER_FIELDS: [&str; 7] = ["cron", "timezone", "at", "delay", "every", "after", "on"];

/// Converts a JSON tree to a spec; also says whether it used the shorthand.
fn task_from_value(value: &Value) -> Result<(TaskSpec, bool)> {
    let Value::Object(map) = value else {
        return Err(SpecError::new(
            "",
            format!(
                "a task definition is a mapping (name, trigger, steps…), found {}",
                describe(value)
            ),
        ));
    };
    let task = Obj {
        map,
        path: String::new(),
    };
    let step_only = "this is a step field: put the step under `steps:`";
    task.deny_unknown(
        &TASK_FIELDS,
        &[
            ("needs", step_only),
            ("when", step_only),
            ("trigger_rule", step_only),
            ("cron", "put it under `trigger:`"),
            ("every", "put it under `trigger:`"),
            ("at", "put it under `trigger:`"),
            ("delay", "put it under `trigger:`"),
            ("after", "put it under `trigger:`"),
            ("timezone", "put it under `trigger:`"),
        ],
    )?;
    let name = task.required("name", as_string)?;
    let description = task.opt("description", as_string)?;
    let trigger = task.opt("trigger", trigger_from_value)?;
    let catch_up = task.opt("catch_up", as_keyword)?.unwrap_or_default();
    let overlap = task.opt("overlap", as_keyword)?.unwrap_or_default();
    let priority = task
        .opt("priority", |v, p| {
            let n = as_u64(v, p)?;
            u8::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_PRIORITY)
                .ok_or_else(|| SpecError::new(p, format!("{n} is outside 0..={MAX_PRIORITY}")))
        })?
        .unwrap_or(DEFAULT_PRIORITY);
    let retention = task.opt("retention", retention::RetentionSpec::from_value)?;
    let alerts = task.opt("alerts", alerts::AlertSpec::from_value)?;

    let shorthand_keys: Vec<&str> = SHORTHAND_FIELDS
        .into_iter()
        .filter(|k| map.contains_key(*k))
        .collect();
    let (steps, shorthand) = match (task.get("steps"), shorthand_keys.first()) {
        (Some(_), Some(key)) => {
            let message = if *key == "plugin" {
                "use either `steps` or a top-level `plugin` (the one-step shorthand), not both"
                    .to_owned()
            } else {
                format!("`{key}` belongs to a step when `steps` is used")
            };
            return Err(SpecError::new(task.at(key), message));
        }
        (Some(steps), None) => {
            let Value::Array(items) = steps else {
                return Err(SpecError::new(
                    "steps",
                    format!("expected a list of steps, found {}", describe(steps)),
                ));
            };
            let steps = items
                .iter()
                .enumerate()
                .map(|(i, item)| step_from_value(item, &format!("steps[{i}]"), None))
                .collect::<Result<Vec<_>>>()?;
            (steps, false)
        }
        (None, _) if task.get("plugin").is_some() => {
            (vec![step_from_value(value, "", Some(&name))?], true)
        }
        (None, Some(key)) => {
            return Err(SpecError::new(
                task.at(key),
                format!(
                    "`{key}` needs a top-level `plugin` (the one-step shorthand) or belongs in `steps`"
                ),
            ));
        }
        (None, None) => {
            return Err(SpecError::new(
                "",
                "a task needs `steps` (a list) or a top-level `plugin` (the one-step shorthand)",
            ));
        }
    };
    let spec = TaskSpec {
        name,
        description,
        trigger,
        catch_up,
        overlap,
        priority,
        steps,
        retention,
        alerts,
        config: task.opt("config", config_from_value)?.unwrap_or_default(),
    };
    Ok((spec, shorthand))
}

fn trigger_from_value(value: &Value, path: &str) -> Result<TriggerSpec> {
    let obj = Obj::new(value, path, "`trigger`", &TRIGGER_FIELDS)?;
    // Read field by field so an error names its field, then as a whole.
    for (key, field) in obj.map {
        let one = Value::Object(Map::from_iter([(key.clone(), field.clone())]));
        if let Err(e) = serde_json::from_value::<TriggerSpec>(one) {
            let msg = e.to_string().replace("unknown variant", "unknown value");
            return Err(SpecError::new(obj.at(key), msg));
        }
    }
    serde_json::from_value(value.clone()).map_err(|e| SpecError::new(path, e.to_string()))
}

/// Reads a step. `shorthand_name` is set when the step's fields sit at the top
/// level of the task (the one-step shorthand); the step is then named after the task.
fn step_from_value(value: &Value, path: &str, shorthand_name: Option<&str>) -> Result<StepSpec> {
    let obj = match shorthand_name {
        // The task reader has already refused unknown top-level fields.
        Some(_) => Obj::new(value, path, "a task", &TASK_FIELDS)?,
        None => Obj::new(value, path, "a step", &STEP_FIELDS)?,
    };
    let name = match shorthand_name {
        Some(name) => name.to_owned(),
        None => obj.required("name", as_string)?,
    };
    let plugin = obj.required("plugin", |v, p| {
        as_string(v, p)?.parse().map_err(|e| SpecError::new(p, e))
    })?;
    let input = obj
        .get("input")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let limits = obj.opt("limits", limits_from_value)?.unwrap_or_default();
    let pool = obj.opt("pool", as_string)?;
    let retry = obj.opt("retry", retry_from_value)?.unwrap_or_default();
    let needs = obj.opt("needs", as_string_list)?.unwrap_or_default();
    let when = obj.opt("when", as_string)?;
    let trigger_rule = obj.opt("trigger_rule", as_keyword)?.unwrap_or_default();
    let allow_http = obj
        .opt("allow_http", |v, p| {
            let items = as_string_list(v, p)?;
            capability::http::parse_list(&items)
                .map_err(|(i, e)| SpecError::new(format!("{p}[{i}]"), e))
        })?
        .unwrap_or_default();
    let secrets = obj.opt("secrets", as_string_list)?.unwrap_or_default();
    let kv = obj.opt("kv", kv_from_value)?.flatten();
    // In the shorthand, a top-level `config` is the task's, not the step's.
    let config = match shorthand_name {
        Some(_) => BTreeMap::new(),
        None => obj.opt("config", config_from_value)?.unwrap_or_default(),
    };
    Ok(StepSpec {
        name,
        plugin,
        input,
        limits,
        pool,
        retry,
        needs,
        when,
        trigger_rule,
        allow_http,
        secrets,
        kv,
        config,
    })
}

/// `kv: tenant | task | true | false` (`true` is `tenant`, `false` none).
fn kv_from_value(value: &Value, path: &str) -> Result<Option<KvScope>> {
    match value {
        Value::Bool(true) => Ok(Some(KvScope::Tenant)),
        Value::Bool(false) => Ok(None),
        Value::String(s) if s == "tenant" => Ok(Some(KvScope::Tenant)),
        Value::String(s) if s == "task" => Ok(Some(KvScope::Task)),
        other => Err(SpecError::new(
            path,
            format!(
                "expected `tenant` or `task` (or `true` for tenant), found {}",
                describe(other)
            ),
        )),
    }
}

/// `config: {key: value}`; scalar values are kept as their text.
fn config_from_value(value: &Value, path: &str) -> Result<BTreeMap<String, String>> {
    let Value::Object(map) = value else {
        return Err(SpecError::new(
            path,
            format!(
                "expected a mapping of keys to values, found {}",
                describe(value)
            ),
        ));
    };
    map.iter()
        .map(|(k, v)| {
            let at = join(path, k);
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => {
                    return Err(SpecError::new(
                        at,
                        format!(
                            "a config value is text, a number or a boolean, found {}",
                            describe(other)
                        ),
                    ));
                }
            };
            Ok((k.clone(), text))
        })
        .collect()
}

fn limits_from_value(value: &Value, path: &str) -> Result<StepLimits> {
    let obj = Obj::new(
        value,
        path,
        "`limits`",
        &[
            "fuel",
            "memory_mb",
            "timeout",
            "http_requests",
            "http_timeout",
            "http_response_kb",
        ],
    )?;
    Ok(StepLimits {
        fuel: obj.opt("fuel", as_u64)?,
        memory_mb: obj.opt("memory_mb", as_u64)?,
        timeout: obj.opt("timeout", as_duration)?,
        http_requests: obj.opt("http_requests", |v, p| {
            let n = as_u64(v, p)?;
            u32::try_from(n).map_err(|_| SpecError::new(p, format!("{n} is too large")))
        })?,
        http_timeout: obj.opt("http_timeout", as_duration)?,
        http_response_kb: obj.opt("http_response_kb", as_u64)?,
    })
}

fn retry_from_value(value: &Value, path: &str) -> Result<RetryPolicy> {
    let obj = Obj::new(
        value,
        path,
        "`retry`",
        &["max_attempts", "backoff", "retry_on"],
    )?;
    let max_attempts = obj
        .opt("max_attempts", |v, p| {
            let n = as_u64(v, p)?;
            u32::try_from(n)
                .map_err(|_| SpecError::new(p, format!("{n} is above the limit of {MAX_ATTEMPTS}")))
        })?
        .unwrap_or(1);
    let backoff = obj.opt("backoff", backoff_from_value)?.unwrap_or_default();
    let retry_on = obj
        .opt("retry_on", |v, p| {
            let Value::Array(items) = v else {
                return Err(SpecError::new(
                    p,
                    format!("expected a list, found {}", describe(v)),
                ));
            };
            items
                .iter()
                .enumerate()
                .map(|(i, item)| as_keyword(item, &format!("{p}[{i}]")))
                .collect()
        })?
        .unwrap_or_default();
    Ok(RetryPolicy {
        max_attempts,
        backoff,
        retry_on,
    })
}

fn backoff_from_value(value: &Value, path: &str) -> Result<Backoff> {
    match value {
        // A single duration: a fixed wait.
        Value::String(_) => Ok(Backoff::List(vec![as_duration(value, path)?])),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| as_duration(item, &format!("{path}[{i}]")))
            .collect::<Result<_>>()
            .map(Backoff::List),
        Value::Object(_) => {
            let obj = Obj::new(value, path, "`backoff`", &["exponential"])?;
            let inner_path = obj.at("exponential");
            let Some(inner) = obj.map.get("exponential") else {
                return Err(SpecError::new(path, "missing field `exponential`"));
            };
            let empty = Value::Object(Map::new());
            let inner = if inner.is_null() { &empty } else { inner };
            let e = Obj::new(
                inner,
                &inner_path,
                "`exponential`",
                &["initial", "max", "factor", "jitter"],
            )?;
            let d = Exponential::default();
            Ok(Backoff::Exponential(Exponential {
                initial: e.opt("initial", as_duration)?.unwrap_or(d.initial),
                max: e.opt("max", as_duration)?.unwrap_or(d.max),
                factor: e.opt("factor", as_f64)?.unwrap_or(d.factor),
                jitter: e.opt("jitter", as_bool)?.unwrap_or(d.jitter),
            }))
        }
        other => Err(SpecError::new(
            path,
            format!(
                "expected a list of durations ([10s, 30s, 2m]) or {{ exponential: {{ initial: 1s, max: 5m }} }}, found {}",
                describe(other)
            ),
        )),
    }
}

/// Implements `Deserialize` through a path-tracking converter, so stored and
/// submitted definitions are read by the same code.
macro_rules! deserialize_via {
    ($ty:ty, $convert:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let value = Tree::deserialize(d)?.0;
                $convert(&value).map_err(de::Error::custom)
            }
        }
    };
}

deserialize_via!(TaskSpec, |v| task_from_value(v).map(|(spec, _)| spec));
deserialize_via!(StepSpec, |v| step_from_value(v, "", None));
deserialize_via!(StepLimits, |v| limits_from_value(v, ""));
deserialize_via!(RetryPolicy, |v| retry_from_value(v, ""));
deserialize_via!(Backoff, |v| backoff_from_value(v, ""));

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

/// Parses a task definition: JSON if the first non-space character is `{`,
/// YAML otherwise. Accepts the one-step shorthand (top-level `plugin`,
/// `input`, `limits`, `retry`, `pool`: one step named after the task).
/// Refuses: more than [`MAX_SPEC_BYTES`], alias bombs and over-deep nesting,
/// duplicate keys, unknown fields (naming the field and where), bad types,
/// bad durations (quoting the text), `steps` together with `plugin`.
///
/// This reads the document; [`validate`] checks what it means.
pub fn parse(text: &str) -> Result<TaskSpec, SpecError> {
    task_from_value(&read_tree(text)?).map(|(spec, _)| spec)
}

/// [`parse`] then [`validate`]. For a shorthand task, validation errors are
/// reported at the fields as written (`limits.fuel`, not `steps[0].limits.fuel`).
pub fn load(text: &str, caps: &Caps) -> Result<TaskSpec, SpecError> {
    let (spec, shorthand) = task_from_value(&read_tree(text)?)?;
    validate(&spec, caps).map_err(|mut e| {
        if shorthand && let Some(rest) = e.path.strip_prefix("steps[0]") {
            e.path = rest.strip_prefix('.').unwrap_or(rest).to_owned();
        }
        e
    })?;
    Ok(spec)
}

/// Structural validation on save (plugins are not looked up; the trigger's
/// cron syntax and time zone are compiled by `schedule`). Checks, in order:
/// the task name, description, priority and trigger; each step's name,
/// plugin, limits (non-zero, within `caps` and what wasm can address), pool,
/// retry bounds, `needs`; each `when`, parsed as a [`Condition`] (bounds,
/// syntax); the graph (duplicates, unknown needs, cycles); then template
/// references and the steps each `when` reads, which must be upstream
/// (transitively needed) of the step using them.
pub fn validate(spec: &TaskSpec, caps: &Caps) -> Result<(), SpecError> {
    if !is_valid_name(&spec.name) {
        return Err(name_error("name", "task", &spec.name));
    }
    if let Some(d) = &spec.description
        && d.len() > MAX_DESCRIPTION_BYTES
    {
        return Err(SpecError::new(
            "description",
            format!("is {} bytes; the limit is {MAX_DESCRIPTION_BYTES}", d.len()),
        ));
    }
    if spec.priority > MAX_PRIORITY {
        return Err(SpecError::new(
            "priority",
            format!("{} is outside 0..={MAX_PRIORITY}", spec.priority),
        ));
    }
    if let Some(trigger) = &spec.trigger {
        validate_trigger(trigger, &spec.name)?;
    }
    if spec.steps.is_empty() {
        return Err(SpecError::new("steps", "a task needs at least one step"));
    }
    if spec.steps.len() > MAX_STEPS {
        return Err(SpecError::new(
            "steps",
            format!("{} steps; the limit is {MAX_STEPS}", spec.steps.len()),
        ));
    }
    validate_config(&spec.config, "config")?;
    let mut conditions = Vec::with_capacity(spec.steps.len());
    for (i, step) in spec.steps.iter().enumerate() {
        validate_step(step, &format!("steps[{i}]"), caps)?;
        let when = step
            .when
            .as_deref()
            .map(Condition::parse_cached)
            .transpose();
        conditions
            .push(when.map_err(|e| SpecError::new(format!("steps[{i}].when"), e.to_string()))?);
    }
    let graph = spec.graph();
    dag::check(&graph).map_err(|e| dag_error(spec, e))?;
    let names: Vec<&str> = graph.iter().map(|(n, _)| *n).collect();
    for (i, step) in spec.steps.iter().enumerate() {
        let upstream = dag::upstream(&graph, i);
        let path = format!("steps[{i}]");
        let reach = |other: &str| -> Option<String> {
            if upstream.contains(other) {
                None
            } else if names.contains(&other) {
                Some(format!(
                    "step `{other}` is not upstream of `{}`; add it to `needs` (directly or through another step)",
                    step.name
                ))
            } else {
                Some(format!("there is no step `{other}` in this task"))
            }
        };
        template::for_each_string(&step.input, &mut |at, text| {
            let here = match at {
                "" => format!("{path}.input"),
                at if at.starts_with('[') => format!("{path}.input{at}"),
                at => format!("{path}.input.{at}"),
            };
            for var in template::references_in_str(text)
                .map_err(|e| SpecError::new(&here, e.to_string()))?
            {
                if let template::VarRef::StepOutput { step: other, .. } = &var
                    && let Some(why) = reach(other)
                {
                    return Err(SpecError::new(&here, format!("`${{{var}}}`: {why}")));
                }
            }
            Ok(())
        })?;
        if let Some(when) = &conditions[i] {
            for other in when.referenced_steps() {
                if let Some(why) = reach(&other) {
                    let hint = if names.iter().any(|n| n.starts_with(&format!("{other}-"))) {
                        " (a name with `-` or `.` is written steps[\"my-step\"])"
                    } else {
                        ""
                    };
                    return Err(SpecError::new(
                        format!("{path}.when"),
                        format!("{why}{hint}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Maps a graph error to the field it is about.
fn dag_error(spec: &TaskSpec, e: dag::DagError) -> SpecError {
    let index_of = |name: &str, nth: usize| {
        spec.steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name == name)
            .nth(nth)
            .map_or(0, |(i, _)| i)
    };
    match e {
        dag::DagError::Duplicate(name) => SpecError::new(
            format!("steps[{}].name", index_of(&name, 1)),
            format!(
                "duplicate step name `{name}` (also steps[{}])",
                index_of(&name, 0)
            ),
        ),
        dag::DagError::UnknownNeed { step, need } => SpecError::new(
            format!("steps[{}].needs", index_of(&step, 0)),
            format!("there is no step `{need}` in this task"),
        ),
        cycle @ dag::DagError::Cycle(_) => {
            SpecError::new("steps", format!("{cycle} (each step needs the next)"))
        }
    }
}

fn validate_trigger(t: &TriggerSpec, task: &str) -> Result<()> {
    let kinds: Vec<&str> = [
        ("cron", t.cron.is_some()),
        ("at", t.at.is_some()),
        ("delay", t.delay.is_some()),
        ("every", t.every.is_some()),
        ("after", !t.after.is_empty()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if kinds.len() > 1 {
        return Err(SpecError::new(
            "trigger",
            format!(
                "set only one of cron, at, delay, every, after (found {})",
                kinds.join(" and ")
            ),
        ));
    }
    // As `schedule::Trigger::compile` rules: the zone is read by `cron` only.
    if t.timezone.is_some() && t.cron.is_none() {
        return Err(SpecError::new(
            "trigger.timezone",
            "`timezone` applies only to `cron`; remove it or add a `cron` expression",
        ));
    }
    if let Some(cron) = &t.cron {
        let fields: Vec<&str> = cron.split_whitespace().collect();
        match fields.len() {
            6 | 7 => {}
            0 => return Err(SpecError::new("trigger.cron", "is empty")),
            5 => {
                return Err(SpecError::new(
                    "trigger.cron",
                    format!(
                        "`{cron}` has 5 fields; ax cron is Quartz style with seconds first: \
                         write `0 {}` to fire at second 0",
                        fields.join(" ")
                    ),
                ));
            }
            n => {
                return Err(SpecError::new(
                    "trigger.cron",
                    format!(
                        "`{}` has {n} fields; write 6 or 7, seconds first (like `0 30 1 * * ?`)",
                        shorten(cron)
                    ),
                ));
            }
        }
    }
    if let Some(zone) = &t.timezone {
        let ok = !zone.is_empty()
            && zone.len() <= MAX_NAME_LEN
            && zone
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'));
        if !ok {
            return Err(SpecError::new(
                "trigger.timezone",
                format!(
                    "`{}` is not an IANA time zone name (like Asia/Shanghai or UTC)",
                    shorten(zone)
                ),
            ));
        }
    }
    if let Some(at) = &t.at {
        let Ok(instant) = chrono::DateTime::parse_from_rfc3339(at.trim()) else {
            return Err(SpecError::new(
                "trigger.at",
                format!(
                    "`{}` is not an RFC 3339 instant with an offset (like 2026-12-01T23:00:00+08:00)",
                    shorten(at)
                ),
            ));
        };
        if !(MIN_AT_MS..=MAX_AT_MS).contains(&instant.timestamp_millis()) {
            return Err(SpecError::new(
                "trigger.at",
                format!(
                    "`{}` is outside {}..={} (UTC)",
                    shorten(at),
                    utc(MIN_AT_MS),
                    utc(MAX_AT_MS)
                ),
            ));
        }
    }
    if t.delay == Some(Duration::ZERO) {
        return Err(SpecError::new("trigger.delay", "must be longer than 0s"));
    }
    if let Some(every) = t.every
        && every < MIN_EVERY
    {
        return Err(SpecError::new(
            "trigger.every",
            format!(
                "{} is shorter than the minimum of 1s",
                humantime::format_duration(every)
            ),
        ));
    }
    for (i, other) in t.after.iter().enumerate() {
        let path = format!("trigger.after[{i}]");
        if !is_valid_name(other) {
            return Err(name_error(&path, "task", other));
        }
        if other == task {
            return Err(SpecError::new(path, "a task cannot fire after itself"));
        }
        if t.after[..i].contains(other) {
            return Err(SpecError::new(path, format!("`{other}` is listed twice")));
        }
    }
    if t.on.is_some() && t.after.is_empty() {
        return Err(SpecError::new(
            "trigger.on",
            "`on` only applies to an `after` trigger",
        ));
    }
    Ok(())
}

/// An instant in ms as RFC 3339 UTC with milliseconds (the bounds above).
fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

fn validate_step(step: &StepSpec, path: &str, caps: &Caps) -> Result<()> {
    let at = |field: &str| join(path, field);
    if !is_valid_name(&step.name) {
        return Err(name_error(&at("name"), "step", &step.name));
    }
    if !is_valid_name(&step.plugin.name) || !is_valid_version(&step.plugin.version) {
        let e = step
            .plugin
            .to_string()
            .parse::<PluginRef>()
            .err()
            .unwrap_or_default();
        return Err(SpecError::new(at("plugin"), e));
    }
    validate_limits(&step.limits, &at("limits"), caps)?;
    if let Some(pool) = &step.pool
        && !is_valid_name(pool)
    {
        return Err(name_error(&at("pool"), "pool", pool));
    }
    validate_retry(&step.retry, &at("retry"))?;
    for (i, need) in step.needs.iter().enumerate() {
        if step.needs[..i].contains(need) {
            return Err(SpecError::new(
                format!("{}[{i}]", at("needs")),
                format!("`{need}` is listed twice"),
            ));
        }
    }
    validate_capabilities(step, path)
}

/// The capability fields of a step: patterns (already parsed), secret names,
/// config entries, HTTP limits.
fn validate_capabilities(step: &StepSpec, path: &str) -> Result<()> {
    let at = |field: &str| join(path, field);
    if step.allow_http.len() > capability::http::MAX_PATTERNS {
        return Err(SpecError::new(
            at("allow_http"),
            format!(
                "at most {} patterns may be listed",
                capability::http::MAX_PATTERNS
            ),
        ));
    }
    for (i, name) in step.secrets.iter().enumerate() {
        let here = format!("{}[{i}]", at("secrets"));
        if !capability::valid_name(name) {
            return Err(name_error(&here, "secret", name));
        }
        if step.secrets[..i].contains(name) {
            return Err(SpecError::new(here, format!("`{name}` is listed twice")));
        }
    }
    validate_config(&step.config, &at("config"))?;
    let limits = &step.limits;
    let lat = |field: &str| join(&at("limits"), field);
    if let Some(n) = limits.http_requests
        && n > capability::MAX_HTTP_REQUESTS
    {
        return Err(SpecError::new(
            lat("http_requests"),
            format!(
                "{n} is above the limit of {}",
                capability::MAX_HTTP_REQUESTS
            ),
        ));
    }
    if let Some(t) = limits.http_timeout
        && t.is_zero()
    {
        return Err(SpecError::new(
            lat("http_timeout"),
            "http_timeout must be longer than 0s",
        ));
    }
    if let Some(kb) = limits.http_response_kb
        && (kb == 0 || kb.saturating_mul(1 << 10) > capability::MAX_HTTP_RESPONSE_BYTES)
    {
        return Err(SpecError::new(
            lat("http_response_kb"),
            format!(
                "{kb} is outside 1..={} KiB",
                capability::MAX_HTTP_RESPONSE_BYTES >> 10
            ),
        ));
    }
    Ok(())
}

/// Config keys are names (`[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`), values bounded.
fn validate_config(config: &BTreeMap<String, String>, path: &str) -> Result<()> {
    if config.len() > capability::MAX_CONFIG_ENTRIES {
        return Err(SpecError::new(
            path,
            format!(
                "{} entries; the limit is {}",
                config.len(),
                capability::MAX_CONFIG_ENTRIES
            ),
        ));
    }
    for (key, value) in config {
        if !capability::valid_name(key) {
            return Err(name_error(&join(path, key), "config key", key));
        }
        if value.len() > capability::MAX_CONFIG_VALUE {
            return Err(SpecError::new(
                join(path, key),
                format!(
                    "is {} bytes; the limit is {}",
                    value.len(),
                    capability::MAX_CONFIG_VALUE
                ),
            ));
        }
    }
    Ok(())
}

fn validate_limits(limits: &StepLimits, path: &str, caps: &Caps) -> Result<()> {
    let at = |field: &str| join(path, field);
    let above = |field: &str, value: String, cap: String| {
        SpecError::new(
            at(field),
            format!("{field} {value} is above the tenant's cap of {cap}"),
        )
    };
    if let Some(fuel) = limits.fuel {
        if fuel == 0 {
            return Err(SpecError::new(at("fuel"), "fuel must be greater than 0"));
        }
        if fuel > caps.max_fuel {
            return Err(above("fuel", fuel.to_string(), caps.max_fuel.to_string()));
        }
    }
    if let Some(mb) = limits.memory_mb {
        if mb == 0 {
            return Err(SpecError::new(
                at("memory_mb"),
                "memory_mb must be greater than 0",
            ));
        }
        if mb > caps.max_memory_mb {
            return Err(above(
                "memory_mb",
                mb.to_string(),
                caps.max_memory_mb.to_string(),
            ));
        }
        if mb > MAX_WASM_MEMORY_MB {
            return Err(SpecError::new(
                at("memory_mb"),
                format!(
                    "memory_mb {mb} is above the {MAX_WASM_MEMORY_MB} MiB a 32-bit WebAssembly instance can address"
                ),
            ));
        }
    }
    if let Some(timeout) = limits.timeout {
        if timeout.is_zero() {
            return Err(SpecError::new(
                at("timeout"),
                "timeout must be longer than 0s",
            ));
        }
        if timeout > caps.max_timeout {
            return Err(above(
                "timeout",
                humantime::format_duration(timeout).to_string(),
                humantime::format_duration(caps.max_timeout).to_string(),
            ));
        }
    }
    Ok(())
}

fn validate_retry(retry: &RetryPolicy, path: &str) -> Result<()> {
    let at = |field: &str| join(path, field);
    if retry.max_attempts == 0 {
        return Err(SpecError::new(
            at("max_attempts"),
            "must be at least 1 (1 means no retry)",
        ));
    }
    if retry.max_attempts > MAX_ATTEMPTS {
        return Err(SpecError::new(
            at("max_attempts"),
            format!(
                "{} is above the limit of {MAX_ATTEMPTS}",
                retry.max_attempts
            ),
        ));
    }
    let too_long = |p: String, d: Duration| {
        SpecError::new(
            p,
            format!(
                "{} is above the longest backoff of {}",
                humantime::format_duration(d),
                humantime::format_duration(MAX_BACKOFF)
            ),
        )
    };
    let backoff = at("backoff");
    match &retry.backoff {
        Backoff::List(waits) => {
            if waits.is_empty() {
                return Err(SpecError::new(
                    backoff,
                    "the list is empty; give at least one duration",
                ));
            }
            if waits.len() > MAX_BACKOFF_ENTRIES {
                return Err(SpecError::new(
                    backoff,
                    format!(
                        "{} entries; the limit is {MAX_BACKOFF_ENTRIES}",
                        waits.len()
                    ),
                ));
            }
            if let Some((i, d)) = waits.iter().enumerate().find(|(_, d)| **d > MAX_BACKOFF) {
                return Err(too_long(format!("{backoff}[{i}]"), *d));
            }
        }
        Backoff::Exponential(e) => {
            let at = |field: &str| format!("{backoff}.exponential.{field}");
            if e.initial.is_zero() {
                return Err(SpecError::new(at("initial"), "must be longer than 0s"));
            }
            if e.initial > MAX_BACKOFF {
                return Err(too_long(at("initial"), e.initial));
            }
            if e.max < e.initial {
                return Err(SpecError::new(
                    at("max"),
                    format!(
                        "{} is below initial ({})",
                        humantime::format_duration(e.max),
                        humantime::format_duration(e.initial)
                    ),
                ));
            }
            if e.max > MAX_BACKOFF {
                return Err(too_long(at("max"), e.max));
            }
            if !(1.0..=MAX_BACKOFF_FACTOR).contains(&e.factor) {
                return Err(SpecError::new(
                    at("factor"),
                    format!("{} is outside 1.0..={MAX_BACKOFF_FACTOR:.1}", e.factor),
                ));
            }
        }
    }
    for (i, r) in retry.retry_on.iter().enumerate() {
        if retry.retry_on[..i].contains(r) {
            let name = serde_json::to_value(r)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(SpecError::new(
                format!("{}[{i}]", at("retry_on")),
                format!("`{name}` is listed twice"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use serde_json::json;

    use super::*;
    use crate::schedule::AfterOn;

    /// The example task of SPEC §4, verbatim.
    const SPEC_EXAMPLE: &str = r#"name: order_report            # unique per tenant
trigger:
  cron: "0 30 1 * * ?"        # 6 or 7 fields, seconds first (Quartz style); or
  timezone: Asia/Shanghai     # IANA zone; default UTC
  # at: 2026-12-01T23:00:00+08:00   one-shot
  # delay: 30m                      relative to the task's creation, not to when it was noticed
  # every: 5m                       fixed interval
  # after: [other_task]             when another task's run finishes (on: success | failure | done)
  # (no trigger: manual/API only)
catch_up: latest              # after downtime: latest (default) | none | all
overlap: skip                 # previous run still active: skip (default) | queue_one | allow
priority: 5                   # 0..9, higher first
steps:
  - name: extract
    plugin: extract-orders@1.2.0
    input: { date: "${bizDate}" }
    limits: { fuel: 50000000, memory_mb: 64, timeout: 30s }
    pool: warehouse             # named slot pool (concurrency, optional start rate)
    retry: { max_attempts: 3, backoff: [10s, 30s, 2m] }
  - name: full
    needs: [extract]
    when: "steps.extract.output.rows > 800000"
    plugin: pack-full@1.0.0
  - name: incremental
    needs: [extract]
    when: "steps.extract.output.rows <= 800000"
    plugin: pack-incremental@1.0.0
  - name: push
    needs: [full, incremental]
    trigger_rule: one_success   # all_success (default) | one_success | all_done | none_failed
    plugin: notify@1.0.0
    input: { text: "report ready: ${steps.extract.output.rows} rows" }
"#;

    const CAPS: Caps = Caps {
        max_fuel: 10_000_000_000,
        max_memory_mb: 256,
        max_timeout: Duration::from_secs(1800),
    };

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn parse_err(text: &str) -> SpecError {
        parse(text).expect_err("should not parse")
    }

    fn load_err(text: &str) -> SpecError {
        load(text, &CAPS).expect_err("should not load")
    }

    /// Error (path, message) of loading `yaml`.
    fn err_of(yaml: &str) -> (String, String) {
        let e = load_err(yaml);
        (e.path, e.message)
    }

    fn plugin(s: &str) -> PluginRef {
        s.parse().unwrap()
    }

    // --- the SPEC example --------------------------------------------------

    #[test]
    fn spec_example_parses_and_validates() {
        let spec = load(SPEC_EXAMPLE, &CAPS).unwrap();
        assert_eq!(spec.name, "order_report");
        let trigger = spec.trigger.clone().unwrap();
        assert_eq!(trigger.cron.as_deref(), Some("0 30 1 * * ?"));
        assert_eq!(trigger.timezone.as_deref(), Some("Asia/Shanghai"));
        assert_eq!(spec.catch_up, CatchUp::Latest);
        assert_eq!(spec.overlap, Overlap::Skip);
        assert_eq!(spec.priority, 5);
        let names: Vec<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["extract", "full", "incremental", "push"]);

        let extract = &spec.steps[0];
        assert_eq!(extract.plugin, plugin("extract-orders@1.2.0"));
        assert_eq!(extract.input, json!({"date": "${bizDate}"}));
        assert_eq!(
            extract.limits,
            StepLimits {
                fuel: Some(50_000_000),
                memory_mb: Some(64),
                timeout: Some(secs(30)),
                ..StepLimits::default()
            }
        );
        assert_eq!(extract.pool.as_deref(), Some("warehouse"));
        assert_eq!(extract.retry.max_attempts, 3);
        assert_eq!(
            extract.retry.backoff,
            Backoff::List(vec![secs(10), secs(30), secs(120)])
        );

        let full = &spec.steps[1];
        assert_eq!(full.needs, ["extract"]);
        assert_eq!(
            full.when.as_deref(),
            Some("steps.extract.output.rows > 800000")
        );
        assert_eq!(full.input, json!({}));
        assert_eq!(full.retry, RetryPolicy::default());
        assert_eq!(full.trigger_rule, TriggerRule::AllSuccess);

        let push = &spec.steps[3];
        assert_eq!(push.needs, ["full", "incremental"]);
        assert_eq!(push.trigger_rule, TriggerRule::OneSuccess);
        assert_eq!(push.plugin.to_string(), "notify@1.0.0");
        assert_eq!(
            template::references(&push.input).unwrap(),
            [template::VarRef::StepOutput {
                step: "extract".into(),
                path: vec!["rows".into()]
            }]
        );
        assert_eq!(dag::check(&spec.graph()).unwrap(), [0, 1, 2, 3]);
    }

    #[test]
    fn serialized_spec_reads_back_equal() {
        let spec = parse(SPEC_EXAMPLE).unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(parse(&json).unwrap(), spec);
        assert_eq!(serde_json::from_str::<TaskSpec>(&json).unwrap(), spec);
        let value = serde_json::to_value(&spec).unwrap();
        assert_eq!(value["steps"][0]["plugin"], json!("extract-orders@1.2.0"));
        assert_eq!(
            value["steps"][0]["limits"],
            json!({"fuel": 50000000, "memory_mb": 64, "timeout": "30s"})
        );
        assert_eq!(
            value["steps"][0]["retry"]["backoff"],
            json!(["10s", "30s", "2m"])
        );
        assert_eq!(
            value["steps"][1]["retry"],
            json!({"max_attempts": 1, "backoff": {"exponential": {"initial": "1s", "max": "5m", "factor": 2.0, "jitter": true}}})
        );
        assert_eq!(value["steps"][3]["trigger_rule"], json!("one_success"));
        assert!(value["steps"][1].get("limits").is_none());
        // And through YAML text too.
        let yaml = serde_saphyr::to_string(&spec).unwrap();
        assert_eq!(parse(&yaml).unwrap(), spec);
    }

    // --- forms: YAML, JSON, shorthand ----------------------------------------

    #[test]
    fn yaml_json_and_shorthand_forms_give_equal_specs() {
        let yaml_steps = "
name: hourly
trigger: { every: 1h }
steps:
  - name: hourly
    plugin: echo@0.1.0
    input: { n: 1, list: [a, b], flag: true }
    limits: { fuel: 1000, timeout: 5s }
    retry: { max_attempts: 2 }
    pool: small
";
        let yaml_short = "
name: hourly
trigger:
  every: 1h
plugin: echo@0.1.0
input:
  n: 1
  list: [a, b]
  flag: true
limits: { fuel: 1000, timeout: 5s }
retry: { max_attempts: 2 }
pool: small
";
        let json_short = r#"  {"name": "hourly", "trigger": {"every": "1h"}, "plugin": "echo@0.1.0",
            "input": {"n": 1, "list": ["a", "b"], "flag": true},
            "limits": {"fuel": 1000, "timeout": "5s"}, "retry": {"max_attempts": 2}, "pool": "small"}"#;
        let json_steps = r#"{"name": "hourly", "trigger": {"every": "1h"}, "steps": [{"name": "hourly",
            "plugin": "echo@0.1.0", "input": {"n": 1, "list": ["a", "b"], "flag": true},
            "limits": {"fuel": 1000, "timeout": "5s"}, "retry": {"max_attempts": 2}, "pool": "small"}]}"#;
        let a = load(yaml_steps, &CAPS).unwrap();
        assert_eq!(load(yaml_short, &CAPS).unwrap(), a);
        assert_eq!(load(json_short, &CAPS).unwrap(), a);
        assert_eq!(load(json_steps, &CAPS).unwrap(), a);
        assert_eq!(a.trigger.unwrap().every, Some(secs(3600)));
        assert_eq!(a.steps.len(), 1);
        assert_eq!(a.steps[0].name, "hourly");
    }

    // --- capabilities ------------------------------------------------------------

    const CAPS_TASK: &str = "name: t\nconfig: { endpoint: \"http://x\", retries: 3, verbose: true }\nsteps:\n  - name: a\n    plugin: p@1.0.0\n    allow_http: [\"https://*.example.com\", \"http://127.0.0.1:*\"]\n    secrets: [token]\n    kv: task\n    config: { retries: 5 }\n    limits: { http_requests: 7, http_timeout: 2s, http_response_kb: 64 }\n  - name: b\n    plugin: p@1.0.0\n    kv: true\n";

    #[test]
    fn capability_fields_are_read_and_merged_into_step_grants() {
        let spec = load(CAPS_TASK, &CAPS).unwrap();
        let a = spec.step_grants(0);
        assert_eq!(
            a.allow_http
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["https://*.example.com", "http://127.0.0.1:*"]
        );
        assert_eq!(a.secrets, ["token"]);
        assert_eq!(a.kv, Some(KvScope::Task));
        assert_eq!(a.config["retries"], "5", "the step overrides the task");
        assert_eq!(a.config["endpoint"], "http://x");
        assert_eq!(a.config["verbose"], "true");
        assert_eq!(a.http_limits.max_requests, 7);
        assert_eq!(a.http_limits.timeout, secs(2));
        assert_eq!(a.http_limits.max_response_bytes, 64 << 10);
        let b = spec.step_grants(1);
        assert_eq!(b.kv, Some(KvScope::Tenant));
        assert!(b.allow_http.is_empty() && b.secrets.is_empty());
        assert_eq!(b.config["retries"], "3");
        assert_eq!(b.http_limits, capability::HttpLimits::default());
    }

    #[test]
    fn capability_fields_survive_storing() {
        let spec = load(CAPS_TASK, &CAPS).unwrap();
        let stored = serde_json::to_value(&spec).unwrap();
        let back: TaskSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn a_step_declaring_nothing_is_granted_nothing() {
        let spec = load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap();
        let g = spec.step_grants(0);
        assert!(g.allow_http.is_empty() && g.secrets.is_empty() && g.config.is_empty());
        assert_eq!(g.kv, None);
        let spec = load("name: t\nplugin: p@1.0.0\nkv: false\n", &CAPS).unwrap();
        assert_eq!(spec.step_grants(0).kv, None);
    }

    #[test]
    fn shorthand_takes_capability_fields_at_the_top() {
        let spec = load(
            "name: t\nplugin: p@1.0.0\nallow_http: [\"https://a.example.com\"]\nsecrets: [s]\nkv: tenant\nconfig: { k: v }\n",
            &CAPS,
        )
        .unwrap();
        let g = spec.step_grants(0);
        assert_eq!(g.allow_http.len(), 1);
        assert_eq!((g.secrets.len(), g.kv), (1, Some(KvScope::Tenant)));
        assert_eq!(spec.config["k"], "v", "a top-level config is the task's");
    }

    #[test]
    fn bad_capability_fields_are_refused_where_they_are() {
        for (yaml, path, message) in [
            (
                "name: t\nplugin: p@1.0.0\nallow_http: [\"https://ok.example.com\", \"nope\"]\n",
                "allow_http[1]",
                "scheme://host",
            ),
            (
                "name: t\nplugin: p@1.0.0\nkv: 1\n",
                "kv",
                "expected `tenant` or `task`",
            ),
            (
                "name: t\nplugin: p@1.0.0\nsecrets: [a, a]\n",
                "secrets[1]",
                "listed twice",
            ),
            (
                "name: t\nplugin: p@1.0.0\nsecrets: [\"-x\"]\n",
                "secrets[0]",
                "not a valid secret name",
            ),
            (
                "name: t\nplugin: p@1.0.0\nconfig: { \"a b\": 1 }\n",
                "config.a b",
                "not a valid config key name",
            ),
            (
                "name: t\nplugin: p@1.0.0\nconfig: [1]\n",
                "config",
                "mapping of keys to values",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: { http_requests: 20000 }\n",
                "limits.http_requests",
                "above the limit",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: { http_timeout: 0s }\n",
                "limits.http_timeout",
                "longer than 0s",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: { http_response_kb: 0 }\n",
                "limits.http_response_kb",
                "outside 1..=",
            ),
        ] {
            let e = load(yaml, &CAPS).unwrap_err();
            assert_eq!(e.path, path, "{yaml}: {e:?}");
            assert!(e.message.contains(message), "{yaml}: {}", e.message);
        }
    }

    #[test]
    fn minimal_shorthand_takes_every_default() {
        let spec = load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap();
        assert_eq!(
            spec,
            TaskSpec {
                name: "t".into(),
                description: None,
                trigger: None,
                catch_up: CatchUp::Latest,
                overlap: Overlap::Skip,
                priority: DEFAULT_PRIORITY,
                retention: None,
                alerts: None,
                steps: vec![StepSpec {
                    name: "t".into(),
                    plugin: plugin("p@1.0.0"),
                    input: json!({}),
                    limits: StepLimits::default(),
                    pool: None,
                    retry: RetryPolicy::default(),
                    needs: vec![],
                    when: None,
                    trigger_rule: TriggerRule::AllSuccess,
                    allow_http: vec![],
                    secrets: vec![],
                    kv: None,
                    config: BTreeMap::new(),
                }],
                config: BTreeMap::new(),
            }
        );
    }

    #[test]
    fn null_fields_read_as_absent() {
        let spec = load(
            "name: t\ndescription:\ntrigger: ~\nplugin: p@1.0.0\ninput: null\nretry:\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec, load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap());
    }

    #[test]
    fn steps_with_top_level_plugin_is_refused() {
        let e = parse_err("name: t\nplugin: p@1.0.0\nsteps: [{name: a, plugin: p@1.0.0}]\n");
        assert_eq!(e.path, "plugin");
        assert!(e.message.contains("not both"), "{e}");
    }

    #[test]
    fn shorthand_field_beside_steps_is_refused() {
        let e = parse_err("name: t\nlimits: {fuel: 5}\nsteps: [{name: a, plugin: p@1.0.0}]\n");
        assert_eq!(
            (e.path.as_str(), e.message.as_str()),
            ("limits", "`limits` belongs to a step when `steps` is used")
        );
    }

    #[test]
    fn shorthand_field_without_plugin_is_refused() {
        let e = parse_err("name: t\ninput: {a: 1}\n");
        assert_eq!(e.path, "input");
        assert!(e.message.contains("top-level `plugin`"), "{e}");
    }

    #[test]
    fn task_without_steps_or_plugin_is_refused() {
        let e = parse_err("name: t\n");
        assert_eq!(
            e.to_string(),
            "a task needs `steps` (a list) or a top-level `plugin` (the one-step shorthand)"
        );
    }

    #[test]
    fn json_is_detected_by_its_leading_brace() {
        let e = parse_err("  \n {\"name\": \"t\", \"plugin\": \"p@1.0.0\",}");
        assert!(e.message.starts_with("invalid JSON:"), "{e}");
        assert!(e.message.contains("line 2"), "{e}");
    }

    #[test]
    fn a_byte_order_mark_is_ignored() {
        assert!(parse("\u{feff}name: t\nplugin: p@1.0.0\n").is_ok());
    }

    #[test]
    fn yaml_1_1_booleans_stay_text() {
        // `no` is a name, not `false`; `on` is a key, not `true`.
        let spec = load("name: no\nplugin: p@1.0.0\ninput: {on: yes}\n", &CAPS).unwrap();
        assert_eq!(spec.name, "no");
        assert_eq!(spec.steps[0].input, json!({"on": "yes"}));
    }

    #[test]
    fn numbers_written_with_exponent_or_underscores_are_accepted() {
        let spec = load(
            "name: t\nplugin: p@1.0.0\nlimits: {fuel: 5e7, memory_mb: 1_28}\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec.steps[0].limits.fuel, Some(50_000_000));
        assert_eq!(spec.steps[0].limits.memory_mb, Some(128));
    }

    // --- document-level refusals ----------------------------------------------

    #[test]
    fn oversized_definition_is_refused_before_parsing() {
        let text = format!(
            "name: t\nplugin: p@1.0.0\ndescription: \"{}\"\n",
            "x".repeat(MAX_SPEC_BYTES)
        );
        let e = parse_err(&text);
        assert_eq!(e.path, "");
        assert!(e.message.contains("the limit is 1048576 (1 MiB)"), "{e}");
    }

    #[test]
    fn yaml_alias_bomb_is_refused() {
        let bomb = "
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
name: t
plugin: p@1.0.0
";
        let e = parse_err(bomb);
        assert_eq!(e.path, "");
        assert!(e.message.starts_with("invalid YAML:"), "{e}");
    }

    #[test]
    fn too_many_json_values_are_refused() {
        let list = vec!["0"; MAX_SPEC_NODES + 1].join(",");
        let e = parse_err(&format!(
            r#"{{"name": "t", "plugin": "p@1.0.0", "input": [{list}]}}"#
        ));
        assert!(e.message.contains("more than 100000 values"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!(
            "name: t\nplugin: p@1.0.0\ninput: {}1{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(parse_err(&deep).message.starts_with("invalid YAML"));
        let deep = format!(
            r#"{{"name": "t", "plugin": "p@1.0.0", "input": {}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(parse_err(&deep).message.starts_with("invalid JSON"));
    }

    #[test]
    fn duplicate_keys_are_refused_in_yaml_and_json() {
        let e = parse_err("name: a\nname: b\nplugin: p@1.0.0\n");
        assert!(e.message.contains("duplicate"), "{e}");
        assert!(e.message.contains("line 2"), "{e}");
        let e = parse_err(r#"{"name": "a", "plugin": "p@1.0.0", "input": {"k": 1, "k": 2}}"#);
        assert!(e.message.contains("duplicate key `k`"), "{e}");
    }

    #[test]
    fn empty_and_non_mapping_documents_are_refused() {
        assert_eq!(parse_err("").message, "the definition is empty");
        let e = parse_err("- a\n- b\n");
        assert_eq!(
            e.message,
            "a task definition is a mapping (name, trigger, steps…), found a list"
        );
        assert!(
            parse_err("---\nname: a\n---\nname: b\n")
                .message
                .starts_with("invalid YAML")
        );
        assert!(parse_err("name: [unclosed\n").message.contains("line 1"));
    }

    #[test]
    fn comment_only_document_is_refused() {
        let e = parse_err("# just a comment\n");
        assert_eq!(e.path, "");
        assert!(e.message.contains("found nothing"), "{e}");
    }

    // --- unknown fields and types -----------------------------------------------

    #[test]
    fn unknown_fields_are_named_with_where_they_are() {
        let cases = [
            (
                "name: t\nplugin: p@1.0.0\nlimits: {fule: 5}\n",
                "limits",
                "unknown field `fule`; did you mean `fuel`?",
            ),
            (
                "name: t\nsteps:\n- {name: a, plugin: p@1.0.0}\n- {name: b, plugin: p@1.0.0, limits: {fuel: 1, cpu: 2}}\n",
                "steps[1].limits",
                "unknown field `cpu`; expected one of: fuel, memory_mb, timeout, http_requests, http_timeout, http_response_kb",
            ),
            (
                "name: t\nstpes: []\n",
                "",
                "unknown field `stpes`; did you mean `steps`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nneeds: [x]\n",
                "",
                "unknown field `needs`; this is a step field: put the step under `steps:`",
            ),
            (
                "name: t\ncron: 0 0 1 * * ?\nplugin: p@1.0.0\n",
                "",
                "unknown field `cron`; put it under `trigger:`",
            ),
            (
                "name: t\nplugin: p@1.0.0\ntrigger: {crn: x}\n",
                "trigger",
                "unknown field `crn`; did you mean `cron`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {attempts: 3}\n",
                "retry",
                "unknown field `attempts`; did you mean `max_attempts`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {initial: 1s, cap: 5m}}}\n",
                "retry.backoff.exponential",
                "unknown field `cap`; did you mean `max`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {linear: 1s}}\n",
                "retry.backoff",
                "unknown field `linear`; expected one of: exponential",
            ),
            (
                "name: t\nsteps: [{name: a, plugin: p@1.0.0, need: [b]}]\n",
                "steps[0]",
                "unknown field `need`; did you mean `needs`?",
            ),
        ];
        for (yaml, path, message) in cases {
            let e = parse_err(yaml);
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                (path, message),
                "for {yaml}"
            );
        }
    }

    #[test]
    fn wrong_types_are_reported_at_their_field() {
        let cases = [
            (
                "name: 12\nplugin: p@1.0.0\n",
                "name",
                "expected text, found the number 12; quote it: \"12\"",
            ),
            (
                "name: t\nplugin: p@1.0.0\npriority: high\n",
                "priority",
                "expected a whole number ≥ 0, found the text `high`",
            ),
            (
                "name: t\nplugin: p@1.0.0\npriority: 12\n",
                "priority",
                "12 is outside 0..=9",
            ),
            (
                "name: t\nplugin: p@1.0.0\npriority: -1\n",
                "priority",
                "expected a whole number ≥ 0, found the number -1",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {fuel: 1.5}\n",
                "limits.fuel",
                "expected a whole number ≥ 0, found the number 1.5",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: 5\n",
                "limits",
                "`limits` must be a mapping, found the number 5",
            ),
            (
                "name: t\nsteps: {a: 1}\n",
                "steps",
                "expected a list of steps, found a mapping",
            ),
            (
                "name: t\nsteps: [x]\n",
                "steps[0]",
                "a step must be a mapping, found the text `x`",
            ),
            (
                "name: t\nsteps: [{plugin: p@1.0.0}]\n",
                "steps[0]",
                "missing field `name`",
            ),
            (
                "name: t\nsteps: [{name: a}]\n",
                "steps[0]",
                "missing field `plugin`",
            ),
            ("plugin: p@1.0.0\n", "", "missing field `name`"),
            (
                "name: t\nplugin: p@1.0.0\ncatch_up: sometimes\n",
                "catch_up",
                "unknown value `sometimes`, expected one of `latest`, `none`, `all`",
            ),
            (
                "name: t\nplugin: p@1.0.0\noverlap: queue\n",
                "overlap",
                "unknown value `queue`, expected one of `skip`, `queue_one`, `allow`",
            ),
            (
                "name: t\nsteps: [{name: a, plugin: p@1.0.0, trigger_rule: any}]\n",
                "steps[0].trigger_rule",
                "unknown value `any`, expected one of `all_success`, `one_success`, `all_done`, `none_failed`",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {retry_on: [fatal, panic]}\n",
                "retry.retry_on[1]",
                "unknown value `panic`, expected one of `fatal`, `fuel_exhausted`, `memory_exceeded`, `output_too_large`",
            ),
            (
                "name: t\nsteps: [{name: a, plugin: p@1.0.0, needs: [b, 3]}]\n",
                "steps[0].needs[1]",
                "expected text, found the number 3; quote it: \"3\"",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {jitter: yes}}}\n",
                "retry.backoff.exponential.jitter",
                "expected true or false, found the text `yes`",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: 5}\n",
                "retry.backoff",
                "expected a list of durations ([10s, 30s, 2m]) or { exponential: { initial: 1s, max: 5m } }, found the number 5",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {factor: fast}}}\n",
                "retry.backoff.exponential.factor",
                "expected a number, found the text `fast`",
            ),
            (
                "name: t\nplugin: p@1.0.0\ntrigger: [x]\n",
                "trigger",
                "`trigger` must be a mapping, found a list",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {max_attempts: 5000000000}\n",
                "retry.max_attempts",
                "5000000000 is above the limit of 100",
            ),
        ];
        for (yaml, path, message) in cases {
            let e = parse_err(yaml);
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                (path, message),
                "for {yaml}"
            );
        }
    }

    #[test]
    fn bad_durations_quote_the_offending_text() {
        let e = parse_err("name: t\nplugin: p@1.0.0\nlimits: {timeout: 30 parsecs}\n");
        assert_eq!(e.path, "limits.timeout");
        assert!(
            e.message.starts_with("`30 parsecs` is not a duration ("),
            "{e}"
        );
        assert!(e.message.ends_with("write it like 30s, 5m or 1h30m"), "{e}");
        let e = parse_err("name: t\nplugin: p@1.0.0\nlimits: {timeout: 30}\n");
        assert_eq!(
            e.message,
            "`30` has no unit; write a duration like 30s or 30m"
        );
        let e = parse_err("name: t\nplugin: p@1.0.0\nretry: {backoff: [10s, 3 fortnights]}\n");
        assert_eq!(e.path, "retry.backoff[1]");
        assert!(e.message.contains("`3 fortnights`"), "{e}");
        let e = parse_err("name: t\nplugin: p@1.0.0\ntrigger: {every: soon}\n");
        assert_eq!(e.path, "trigger.every");
        assert!(e.message.contains("`soon` is not a duration"), "{e}");
    }

    #[test]
    fn bad_plugin_references_are_explained() {
        let cases = [
            ("p", "`p` has no version: write the plugin as name@1.2.3"),
            (
                "p@1.2",
                "`1.2` is not a semver version (like 1.2.0 or 1.2.0-rc.1)",
            ),
            (
                "p@01.2.3",
                "`01.2.3` is not a semver version (like 1.2.0 or 1.2.0-rc.1)",
            ),
            (
                "p@latest",
                "`latest` is not a semver version (like 1.2.0 or 1.2.0-rc.1)",
            ),
            (
                "my plugin@1.0.0",
                "`my plugin` is not a valid plugin name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters",
            ),
            (
                "@1.0.0",
                "`` is not a valid plugin name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters",
            ),
        ];
        for (text, message) in cases {
            let e = parse_err(&format!("name: t\nplugin: \"{text}\"\n"));
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                ("plugin", message),
                "for {text}"
            );
        }
    }

    #[test]
    fn echoed_user_text_is_clipped() {
        let long = "x".repeat(5000);
        let e = parse_err(&format!(
            "name: t\nplugin: p@1.0.0\nlimits: {{timeout: '{long}'}}\n"
        ));
        assert!(e.message.len() < 300, "{}", e.message.len());
        let e = load_err(&format!("name: '{long} y'\nplugin: p@1.0.0\n"));
        assert!(e.message.len() < 300, "{}", e.message.len());
        let e = parse_err(&format!("name: t\nplugin: p@1.0.0\n{long}: 1\n"));
        assert!(e.message.len() < 300, "{}", e.message.len());
        let e = parse_err(&format!("name: t\nplugin: '{long}'\n"));
        assert!(e.message.len() < 300, "{}", e.message.len());
    }

    #[test]
    fn semver_versions_are_recognised() {
        for ok in [
            "0.0.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-rc.1",
            "1.0.0-alpha-1.0",
            "1.0.0+build.5",
            "1.0.0-0.3.7+exp.sha.5114f85",
        ] {
            assert!(is_valid_version(ok), "{ok}");
        }
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "v1.2.3",
            "1.02.3",
            "1.2.3-",
            "1.2.3-01",
            "1.2.3+",
            "1.2.3-a..b",
            "1.2.x",
        ] {
            assert!(!is_valid_version(bad), "{bad}");
        }
    }

    #[test]
    fn plugin_ref_round_trips_as_text() {
        let p = plugin("extract-orders@1.2.0-rc.1");
        assert_eq!(p.name, "extract-orders");
        assert_eq!(p.version, "1.2.0-rc.1");
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!("extract-orders@1.2.0-rc.1")
        );
        assert_eq!(
            serde_json::from_value::<PluginRef>(json!("extract-orders@1.2.0-rc.1")).unwrap(),
            p
        );
        assert!(serde_json::from_value::<PluginRef>(json!("nope")).is_err());
    }

    #[test]
    fn names_follow_the_charset() {
        for ok in ["a", "order_report", "A.b-c_9", "9lives", &"x".repeat(64)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "_a",
            "-a",
            ".a",
            "a b",
            "a/b",
            "é",
            &"x".repeat(65),
            "a@b",
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    // --- validation ---------------------------------------------------------------

    #[test]
    fn validation_errors_name_their_field() {
        let long_desc = format!(
            "name: t\nplugin: p@1.0.0\ndescription: {}\n",
            "d".repeat(MAX_DESCRIPTION_BYTES + 1)
        );
        let cases: Vec<(String, &str, String)> = vec![
            ("name: bad name\nplugin: p@1.0.0\n".into(), "name", name_error("", "task", "bad name").message),
            (long_desc, "description", "is 4097 bytes; the limit is 4096".into()),
            ("name: t\nsteps: []\n".into(), "steps", "a task needs at least one step".into()),
            (
                "name: t\nsteps: [{name: ok, plugin: p@1.0.0}, {name: 'b/c', plugin: p@1.0.0}]\n".into(),
                "steps[1].name",
                name_error("", "step", "b/c").message,
            ),
            ("name: t\nplugin: p@1.0.0\npool: 'my pool'\n".into(), "pool", name_error("", "pool", "my pool").message),
            ("name: t\nplugin: p@1.0.0\nlimits: {fuel: 0}\n".into(), "limits.fuel", "fuel must be greater than 0".into()),
            ("name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 0}\n".into(), "limits.memory_mb", "memory_mb must be greater than 0".into()),
            ("name: t\nplugin: p@1.0.0\nlimits: {timeout: 0s}\n".into(), "limits.timeout", "timeout must be longer than 0s".into()),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {fuel: 90000000000}\n".into(),
                "limits.fuel",
                "fuel 90000000000 is above the tenant's cap of 10000000000".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 512}\n".into(),
                "limits.memory_mb",
                "memory_mb 512 is above the tenant's cap of 256".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {timeout: 2h}\n".into(),
                "limits.timeout",
                "timeout 2h is above the tenant's cap of 30m".into(),
            ),
            ("name: t\nplugin: p@1.0.0\nretry: {max_attempts: 0}\n".into(), "retry.max_attempts", "must be at least 1 (1 means no retry)".into()),
            ("name: t\nplugin: p@1.0.0\nretry: {max_attempts: 101}\n".into(), "retry.max_attempts", "101 is above the limit of 100".into()),
            ("name: t\nplugin: p@1.0.0\nretry: {backoff: []}\n".into(), "retry.backoff", "the list is empty; give at least one duration".into()),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: [1s, 2days]}\n".into(),
                "retry.backoff[1]",
                "2days is above the longest backoff of 1day".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {initial: 0s}}}\n".into(),
                "retry.backoff.exponential.initial",
                "must be longer than 0s".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {initial: 10s, max: 5s}}}\n".into(),
                "retry.backoff.exponential.max",
                "5s is below initial (10s)".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {max: 48h}}}\n".into(),
                "retry.backoff.exponential.max",
                "2days is above the longest backoff of 1day".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {factor: 0.5}}}\n".into(),
                "retry.backoff.exponential.factor",
                "0.5 is outside 1.0..=10.0".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {retry_on: [fatal, fatal]}\n".into(),
                "retry.retry_on[1]",
                "`fatal` is listed twice".into(),
            ),
        ];
        for (yaml, path, message) in cases {
            let (p, m) = err_of(&yaml);
            assert_eq!(
                (p.as_str(), m.as_str()),
                (path, message.as_str()),
                "for {yaml}"
            );
        }
    }

    #[test]
    fn memory_beyond_what_wasm_addresses_is_refused() {
        let e = load(
            "name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 8192}\n",
            &Caps::UNLIMITED,
        )
        .unwrap_err();
        assert_eq!(e.path, "limits.memory_mb");
        assert_eq!(
            e.message,
            "memory_mb 8192 is above the 4096 MiB a 32-bit WebAssembly instance can address"
        );
    }

    #[test]
    fn limits_at_the_caps_are_accepted() {
        let yaml =
            "name: t\nplugin: p@1.0.0\nlimits: {fuel: 10000000000, memory_mb: 256, timeout: 30m}\n";
        assert!(load(yaml, &CAPS).is_ok());
    }

    #[test]
    fn validate_reports_step_paths_and_load_maps_them_for_shorthand() {
        let yaml = "name: t\nplugin: p@1.0.0\nlimits: {fuel: 90000000000}\n";
        let spec = parse(yaml).unwrap();
        assert_eq!(
            validate(&spec, &CAPS).unwrap_err().path,
            "steps[0].limits.fuel"
        );
        assert_eq!(load(yaml, &CAPS).unwrap_err().path, "limits.fuel");
        assert_eq!(
            load(yaml, &CAPS).unwrap_err().to_string(),
            "limits.fuel: fuel 90000000000 is above the tenant's cap of 10000000000"
        );
    }

    #[test]
    fn spec_error_without_path_displays_its_message_only() {
        assert_eq!(SpecError::new("", "bad").to_string(), "bad");
        assert_eq!(SpecError::new("a.b", "bad").to_string(), "a.b: bad");
    }

    #[test]
    fn graph_errors_point_at_the_step() {
        let (p, m) = err_of(
            "name: t\nsteps: [{name: a, plugin: p@1.0.0}, {name: b, plugin: p@1.0.0}, {name: a, plugin: p@1.0.0}]\n",
        );
        assert_eq!(
            (p.as_str(), m.as_str()),
            ("steps[2].name", "duplicate step name `a` (also steps[0])")
        );
        let (p, m) = err_of(
            "name: t\nsteps: [{name: a, plugin: p@1.0.0}, {name: b, plugin: p@1.0.0, needs: [a, c]}]\n",
        );
        assert_eq!(
            (p.as_str(), m.as_str()),
            ("steps[1].needs", "there is no step `c` in this task")
        );
        let (p, m) = err_of("name: t\nsteps: [{name: a, plugin: p@1.0.0, needs: [a, a]}]\n");
        assert_eq!(
            (p.as_str(), m.as_str()),
            ("steps[0].needs[1]", "`a` is listed twice")
        );
    }

    #[test]
    fn cycle_is_rejected_with_its_path() {
        let yaml = "
name: t
steps:
  - {name: start, plugin: p@1.0.0}
  - {name: a, plugin: p@1.0.0, needs: [start, c]}
  - {name: b, plugin: p@1.0.0, needs: [a]}
  - {name: c, plugin: p@1.0.0, needs: [b]}
";
        let (p, m) = err_of(yaml);
        assert_eq!(
            (p.as_str(), m.as_str()),
            (
                "steps",
                "cycle: a -> c -> b -> a (each step needs the next)"
            )
        );
    }

    #[test]
    fn needs_may_be_a_single_name() {
        let spec = load(
            "name: t\nsteps: [{name: a, plugin: p@1.0.0}, {name: b, plugin: p@1.0.0, needs: a}]\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec.steps[1].needs, ["a"]);
    }

    #[test]
    fn template_references_must_be_known_and_upstream() {
        let base = |input: &str, needs: &str| {
            format!(
                "name: t\nsteps:\n  - {{name: a, plugin: p@1.0.0}}\n  - {{name: b, plugin: p@1.0.0, needs: [a]}}\n  - {{name: c, plugin: p@1.0.0}}\n  - {{name: d, plugin: p@1.0.0, needs: {needs}, input: {input}}}\n"
            )
        };
        // Transitive upstream (a through b) is fine.
        assert!(
            load(
                &base(
                    "{x: '${steps.a.output.rows}', y: '${steps.b.output}'}",
                    "[b]"
                ),
                &CAPS
            )
            .is_ok()
        );
        let (p, m) = err_of(&base("{x: {y: ['ok', 'n=${steps.c.output.n}']}}", "[b]"));
        assert_eq!(p, "steps[3].input.x.y[1]");
        assert_eq!(
            m,
            "`${steps.c.output.n}`: step `c` is not upstream of `d`; add it to `needs` (directly or through another step)"
        );
        let (p, m) = err_of(&base("{x: '${steps.zz.output}'}", "[b]"));
        assert_eq!(
            (p.as_str(), m.as_str()),
            (
                "steps[3].input.x",
                "`${steps.zz.output}`: there is no step `zz` in this task"
            )
        );
        let (p, m) = err_of(&base("'${steps.d.output}'", "[b]"));
        assert_eq!(p, "steps[3].input");
        assert!(m.contains("step `d` is not upstream of `d`"), "{m}");
        let (p, m) = err_of(&base("['${today}']", "[]"));
        assert_eq!(p, "steps[3].input[0]");
        assert!(m.starts_with("unknown variable `${today}`"), "{m}");
        let (p, m) = err_of(&base("{x: '${input.a'}", "[]"));
        assert_eq!(p, "steps[3].input.x");
        assert!(m.starts_with("unterminated"), "{m}");
    }

    #[test]
    fn when_bounds_are_checked() {
        let with_when = |when: &str| {
            format!(
                "name: t\nsteps: [{{name: a, plugin: p@1.0.0, when: {}}}]\n",
                serde_json::to_string(when).unwrap()
            )
        };
        let cases = [
            (
                "   ".to_owned(),
                "is empty; remove `when` or write a condition".to_owned(),
            ),
            (
                "x".repeat(MAX_WHEN_BYTES + 1),
                "is 1025 bytes; the limit is 1024".to_owned(),
            ),
            (
                format!("{}1{}", "(".repeat(33), ")".repeat(33)),
                "nests brackets more than 32 deep".to_owned(),
            ),
            ("(a > 1".to_owned(), "has an unclosed `(`".to_owned()),
            (
                "a[0)".to_owned(),
                "has a `)` that closes nothing".to_owned(),
            ),
            (
                "a > 1)".to_owned(),
                "has a `)` that closes nothing".to_owned(),
            ),
            (
                // Seven nested `map`s over ten items: 10⁷ values at run time.
                format!(
                    "{}a{}.size() > 0",
                    ["a", "b", "c", "d", "e", "f", "g"]
                        .map(|v| format!("[0,1,2,3,4,5,6,7,8,9].map({v},"))
                        .concat(),
                    ")".repeat(7)
                ),
                "would take about 83333331 steps evaluated over its literal lists (nested \
                 macros multiply); a condition may take at most 1000000; nest fewer macros or \
                 use shorter lists"
                    .to_owned(),
            ),
            (
                "input.x.matches('(a')".to_owned(),
                "the pattern of matches() '(a' not a valid regex:\nregex parse error:\n    (a\n    ^\nerror: unclosed group".to_owned(),
            ),
        ];
        for (when, message) in cases {
            let (p, m) = err_of(&with_when(&when));
            assert_eq!(
                (p.as_str(), m.as_str()),
                ("steps[0].when", message.as_str()),
                "for {when}"
            );
        }
        let ok = [
            format!("{}1{}", "(".repeat(32), ")".repeat(32)),
            "input.name == ')(' && input.x[0] > 1".to_owned(),
            r#"input.s == "a\"(" || {'k': [1]}.size() > 0"#.to_owned(),
        ];
        for when in ok {
            assert!(load(&with_when(&when), &CAPS).is_ok(), "{when}");
        }
    }

    #[test]
    fn when_may_only_name_upstream_steps() {
        let yaml = |when: &str| {
            format!(
                "name: t\nsteps:\n  - {{name: a, plugin: p@1.0.0}}\n  - {{name: my-step, plugin: p@1.0.0}}\n  - {{name: c, plugin: p@1.0.0, needs: [a], when: {}}}\n",
                serde_json::to_string(when).unwrap()
            )
        };
        assert!(load(&yaml("steps.a.output.rows > 5"), &CAPS).is_ok());
        assert!(load(&yaml("steps[\"a\"].output.ok"), &CAPS).is_ok());
        assert!(
            load(&yaml("input.note == 'steps.zz'"), &CAPS).is_ok(),
            "text inside a literal is not a reference"
        );
        assert!(
            load(&yaml("mysteps.zz == 1 || x.steps.zz"), &CAPS).is_ok(),
            "only the `steps` variable counts"
        );
        let (p, m) = err_of(&yaml("steps.a.output.ok && steps['my-step'].output.ok"));
        assert_eq!(
            (p.as_str(), m.as_str()),
            (
                "steps[2].when",
                "step `my-step` is not upstream of `c`; add it to `needs` (directly or through another step)"
            )
        );
        let (_, m) = err_of(&yaml("steps.my-step.output.ok"));
        assert_eq!(
            m,
            "there is no step `my` in this task (a name with `-` or `.` is written steps[\"my-step\"])"
        );
        let (_, m) = err_of(&yaml("size(steps . ghost.output) > 0"));
        assert_eq!(m, "there is no step `ghost` in this task");
    }

    #[test]
    fn when_step_names_are_found_in_order() {
        let names = |when: &str| Condition::parse(when).unwrap().referenced_steps();
        assert_eq!(
            names(r#"steps.a.x > 1 && steps [ "b-c" ].y || 'steps.d' == steps.e"#),
            ["a", "b-c", "e"]
        );
        assert!(names("mysteps.a == x.steps.b // steps.c").is_empty());
    }

    #[test]
    fn when_is_parsed_as_cel_on_save() {
        let with_when = |when: &str| {
            format!(
                "name: t\nsteps:\n  - {{name: a, plugin: p@1.0.0}}\n  - {{name: b, plugin: p@1.0.0, needs: [a], when: {}}}\n",
                serde_json::to_string(when).unwrap()
            )
        };
        let cases = [
            (
                "steps.a.output.rows >",
                "syntax error at column 22: mismatched input '<EOF>' expecting a value",
            ),
            (
                "steps.a.output.rows > 'x",
                "has a string starting at column 23 that is not closed on its line",
            ),
            (
                "size(steps) > 0",
                "uses `steps` without naming a step; write steps.NAME or steps[\"NAME\"] (only named steps can be checked to be upstream)",
            ),
        ];
        for (when, message) in cases {
            let (p, m) = err_of(&with_when(when));
            assert_eq!(
                (p.as_str(), m.as_str()),
                ("steps[1].when", message),
                "for {when}"
            );
        }
        let chain = format!("steps.a.output.n{} > 0", " + 1".repeat(70));
        let (p, m) = err_of(&with_when(&chain));
        assert_eq!(p, "steps[1].when");
        assert!(m.starts_with("nests expressions more than 64 deep"), "{m}");
        // Transitive upstreams may be read.
        let yaml = "name: t\nsteps:\n  - {name: a, plugin: p@1.0.0}\n  - {name: b, plugin: p@1.0.0, needs: [a]}\n  - {name: c, plugin: p@1.0.0, needs: [b], when: 'steps.a.status == \"succeeded\" && has(steps.b.output.x)'}\n";
        assert!(load(yaml, &CAPS).is_ok());
    }

    #[test]
    fn trigger_kinds_are_checked() {
        let with = |trigger: &str| format!("name: t\nplugin: p@1.0.0\ntrigger: {trigger}\n");
        let cases = [
            (
                "{cron: '0 0 1 * * ?', every: 5m}",
                "trigger",
                "set only one of cron, at, delay, every, after (found cron and every)",
            ),
            (
                "{cron: '0 2 * * *'}",
                "trigger.cron",
                "`0 2 * * *` has 5 fields; ax cron is Quartz style with seconds first: write `0 0 2 * * *` to fire at second 0",
            ),
            (
                "{cron: '* *'}",
                "trigger.cron",
                "`* *` has 2 fields; write 6 or 7, seconds first (like `0 30 1 * * ?`)",
            ),
            ("{cron: ' '}", "trigger.cron", "is empty"),
            (
                "{cron: '0 0 1 * * ?', timezone: 'Mars Base'}",
                "trigger.timezone",
                "`Mars Base` is not an IANA time zone name (like Asia/Shanghai or UTC)",
            ),
            (
                "{at: '2026-12-01 23:00'}",
                "trigger.at",
                "`2026-12-01 23:00` is not an RFC 3339 instant with an offset (like 2026-12-01T23:00:00+08:00)",
            ),
            (
                "{at: '0000-01-01T00:00:00Z'}",
                "trigger.at",
                "`0000-01-01T00:00:00Z` is outside 1970-01-01T00:00:00.000Z..=9999-12-31T23:59:59.999Z (UTC)",
            ),
            (
                "{at: '1969-12-31T23:59:59.999Z'}",
                "trigger.at",
                "`1969-12-31T23:59:59.999Z` is outside 1970-01-01T00:00:00.000Z..=9999-12-31T23:59:59.999Z (UTC)",
            ),
            (
                "{at: '9999-12-31T23:00:00-02:00'}",
                "trigger.at",
                "`9999-12-31T23:00:00-02:00` is outside 1970-01-01T00:00:00.000Z..=9999-12-31T23:59:59.999Z (UTC)",
            ),
            ("{delay: 0s}", "trigger.delay", "must be longer than 0s"),
            (
                "{timezone: UTC}",
                "trigger.timezone",
                "`timezone` applies only to `cron`; remove it or add a `cron` expression",
            ),
            (
                "{every: 5m, timezone: UTC}",
                "trigger.timezone",
                "`timezone` applies only to `cron`; remove it or add a `cron` expression",
            ),
            (
                "{every: 500ms}",
                "trigger.every",
                "500ms is shorter than the minimum of 1s",
            ),
            (
                "{after: [t]}",
                "trigger.after[0]",
                "a task cannot fire after itself",
            ),
            (
                "{after: [x, 'bad name']}",
                "trigger.after[1]",
                "`bad name` is not a valid task name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters",
            ),
            ("{after: [x, x]}", "trigger.after[1]", "`x` is listed twice"),
            (
                "{every: 5m, on: success}",
                "trigger.on",
                "`on` only applies to an `after` trigger",
            ),
            (
                "{after: [x], on: maybe}",
                "trigger.on",
                "unknown value `maybe`, expected one of `success`, `failure`, `done`",
            ),
            (
                "{cron: 5}",
                "trigger.cron",
                "invalid type: integer `5`, expected a string",
            ),
        ];
        for (trigger, path, message) in cases {
            let (p, m) = err_of(&with(trigger));
            assert_eq!((p.as_str(), m.as_str()), (path, message), "for {trigger}");
        }
    }

    #[test]
    fn every_trigger_kind_is_accepted() {
        let with = |trigger: &str| {
            load(
                &format!("name: t\nplugin: p@1.0.0\ntrigger: {trigger}\n"),
                &CAPS,
            )
            .unwrap()
        };
        let t = with("{cron: '0 0 2 * * ? 2027', timezone: America/New_York}")
            .trigger
            .unwrap();
        assert_eq!(t.timezone.as_deref(), Some("America/New_York"));
        let t = with("{at: '2026-12-01T23:00:00+08:00'}").trigger.unwrap();
        assert_eq!(t.at.as_deref(), Some("2026-12-01T23:00:00+08:00"));
        assert_eq!(
            with("{delay: 30m}").trigger.unwrap().delay,
            Some(secs(1800))
        );
        assert_eq!(with("{every: 5m}").trigger.unwrap().every, Some(secs(300)));
        let t = with("{after: [other_task, b], on: failure}")
            .trigger
            .unwrap();
        assert_eq!(t.after, ["other_task", "b"]);
        assert_eq!(t.on, Some(AfterOn::Failure));
    }

    #[test]
    fn hand_built_spec_is_validated_too() {
        let mut spec = parse("name: t\nplugin: p@1.0.0\n").unwrap();
        spec.priority = 10;
        assert_eq!(
            validate(&spec, &CAPS).unwrap_err().to_string(),
            "priority: 10 is outside 0..=9"
        );
        spec.priority = 9;
        spec.steps[0].plugin.version = "1".into();
        let e = validate(&spec, &CAPS).unwrap_err();
        assert_eq!(e.path, "steps[0].plugin");
        assert!(e.message.contains("`1` is not a semver version"), "{e}");
        spec.steps.clear();
        assert_eq!(validate(&spec, &CAPS).unwrap_err().path, "steps");
        let one = parse("name: t\nplugin: p@1.0.0\n").unwrap().steps.remove(0);
        spec.steps = (0..=MAX_STEPS)
            .map(|i| StepSpec {
                name: format!("s{i}"),
                ..one.clone()
            })
            .collect();
        assert_eq!(
            validate(&spec, &CAPS).unwrap_err().message,
            format!("{} steps; the limit is {MAX_STEPS}", MAX_STEPS + 1)
        );
    }

    #[test]
    fn the_documented_limits_are_the_enforced_ones() {
        let docs = include_str!("../../../docs/TASKS.md");
        let steps = format!("| 1 to {MAX_STEPS} steps |");
        assert!(docs.contains(&steps), "docs/TASKS.md must say `{steps}`");
        // The *Limits* table: the row naming each constant gives its value.
        let row = |constant: &str| {
            docs.lines()
                .find(|l| l.starts_with('|') && l.contains(&format!("`{constant}`")))
                .unwrap_or_else(|| panic!("docs/TASKS.md *Limits* has no row for {constant}"))
        };
        for (constant, value) in [
            ("MAX_STEPS", format!("1 to {MAX_STEPS}")),
            ("MAX_SPEC_NODES", "100,000".to_string()),
            ("MAX_NAME_LEN", format!("{MAX_NAME_LEN} characters")),
            ("MAX_PRIORITY", format!("0..={MAX_PRIORITY}")),
            (
                "MAX_DESCRIPTION_BYTES",
                format!("{MAX_DESCRIPTION_BYTES} bytes"),
            ),
            ("MAX_ATTEMPTS", format!("| {MAX_ATTEMPTS} |")),
            (
                "MAX_BACKOFF_ENTRIES",
                format!("{MAX_BACKOFF_ENTRIES} entries"),
            ),
            ("MAX_WHEN_BYTES", format!("{MAX_WHEN_BYTES} bytes")),
            ("MAX_WHEN_DEPTH", format!("{MAX_WHEN_DEPTH} deep")),
            ("MAX_WASM_MEMORY_MB", format!("{MAX_WASM_MEMORY_MB} (")),
            (
                "MIN_AT_MS",
                format!("{}..={}", utc(MIN_AT_MS), utc(MAX_AT_MS)),
            ),
        ] {
            assert!(
                row(constant).contains(&value),
                "{constant}: `{}` lacks `{value}`",
                row(constant)
            );
        }
        assert_eq!(MAX_SPEC_NODES, 100_000, "update the *Limits* table");
    }

    // --- limits ------------------------------------------------------------------

    #[test]
    fn limits_or_default_overrides_only_what_is_set() {
        let spec = load(SPEC_EXAMPLE, &CAPS).unwrap();
        let extract = spec.steps[0].limits_or_default();
        assert_eq!(extract.fuel, 50_000_000);
        assert_eq!(extract.memory_bytes, 64 << 20);
        assert_eq!(extract.timeout, secs(30));
        assert_eq!(extract.max_output_bytes, Limits::default().max_output_bytes);
        assert_eq!(spec.steps[1].limits_or_default(), Limits::default());
        let partial = load("name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 16}\n", &CAPS).unwrap();
        let limits = partial.steps[0].limits_or_default();
        assert_eq!(
            (limits.fuel, limits.memory_bytes, limits.timeout),
            (Limits::default().fuel, 16 << 20, Limits::default().timeout)
        );
    }

    #[test]
    fn limits_capped_lowers_defaults_to_the_caps() {
        let spec = load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap();
        let small = Caps {
            max_fuel: 1000,
            max_memory_mb: 8,
            max_timeout: secs(5),
        };
        let limits = spec.steps[0].limits_capped(&small);
        assert_eq!(
            (limits.fuel, limits.memory_bytes, limits.timeout),
            (1000, 8 << 20, secs(5))
        );
        assert_eq!(
            spec.steps[0].limits_capped(&Caps::UNLIMITED),
            Limits::default()
        );
    }

    // --- retry decisions -------------------------------------------------------------

    fn policy(max_attempts: u32, retry_on: &[RetryOn]) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            retry_on: retry_on.to_vec(),
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn default_retry_decision_for_every_outcome() {
        let p = policy(3, &[]);
        let expected = |o: Outcome| match o {
            Outcome::Succeeded | Outcome::Cancelled => false,
            Outcome::Failed | Outcome::Trapped | Outcome::TimedOut | Outcome::Lost => true,
            Outcome::FuelExhausted | Outcome::MemoryExceeded | Outcome::OutputTooLarge => false,
        };
        for outcome in Outcome::ALL {
            assert_eq!(
                p.should_retry(1, outcome, None),
                expected(outcome),
                "{outcome}"
            );
        }
        assert!(p.should_retry(1, Outcome::Failed, Some(ErrorKind::Retryable)));
        assert!(!p.should_retry(1, Outcome::Failed, Some(ErrorKind::Fatal)));
    }

    #[test]
    fn retry_on_opts_in_each_listed_outcome_only() {
        let p = policy(
            3,
            &[
                RetryOn::Fatal,
                RetryOn::FuelExhausted,
                RetryOn::MemoryExceeded,
                RetryOn::OutputTooLarge,
            ],
        );
        for outcome in Outcome::ALL {
            let want = !matches!(outcome, Outcome::Succeeded | Outcome::Cancelled);
            assert_eq!(
                p.should_retry(2, outcome, Some(ErrorKind::Fatal)),
                want,
                "{outcome}"
            );
        }
        let fuel_only = policy(3, &[RetryOn::FuelExhausted]);
        assert!(fuel_only.should_retry(1, Outcome::FuelExhausted, None));
        assert!(!fuel_only.should_retry(1, Outcome::MemoryExceeded, None));
        assert!(!fuel_only.should_retry(1, Outcome::OutputTooLarge, None));
        assert!(!fuel_only.should_retry(1, Outcome::Failed, Some(ErrorKind::Fatal)));
    }

    #[test]
    fn no_retry_once_attempts_are_used_up() {
        let p = policy(3, &[RetryOn::Fatal]);
        for outcome in Outcome::ALL {
            assert!(
                !p.should_retry(3, outcome, Some(ErrorKind::Retryable)),
                "{outcome}"
            );
            assert!(!p.should_retry(4, outcome, None), "{outcome}");
        }
        assert!(p.should_retry(2, Outcome::Trapped, None));
        let once = RetryPolicy::default();
        for outcome in Outcome::ALL {
            assert!(
                !once.should_retry(1, outcome, Some(ErrorKind::Retryable)),
                "default policy never retries {outcome}"
            );
        }
    }

    // --- backoff ---------------------------------------------------------------------

    #[test]
    fn backoff_list_repeats_its_last_entry() {
        let p = RetryPolicy {
            max_attempts: 10,
            backoff: Backoff::List(vec![secs(10), secs(30), secs(120)]),
            retry_on: vec![],
        };
        let mut rng = StdRng::seed_from_u64(1);
        let waits: Vec<u64> = (0..=6).map(|a| p.delay(a, &mut rng).as_secs()).collect();
        assert_eq!(waits, [10, 10, 30, 120, 120, 120, 120]);
        assert_eq!(p.delay(u32::MAX, &mut rng), secs(120));
        let empty = RetryPolicy {
            backoff: Backoff::List(vec![]),
            ..p
        };
        assert_eq!(empty.delay(1, &mut rng), Duration::ZERO);
    }

    #[test]
    fn exponential_backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_attempts: 100,
            backoff: Backoff::Exponential(Exponential {
                jitter: false,
                ..Exponential::default()
            }),
            retry_on: vec![],
        };
        let mut rng = StdRng::seed_from_u64(2);
        let waits: Vec<u64> = (1..=11).map(|a| p.delay(a, &mut rng).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(
            p.delay(u32::MAX, &mut rng),
            secs(300),
            "no overflow far out"
        );
        let fractional = RetryPolicy {
            backoff: Backoff::Exponential(Exponential {
                initial: Duration::from_millis(100),
                max: secs(10),
                factor: 1.5,
                jitter: false,
            }),
            ..p
        };
        assert_eq!(fractional.delay(3, &mut rng), Duration::from_millis(225));
    }

    #[test]
    fn exponential_jitter_stays_within_half_to_full_delay() {
        let p = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(3);
        for attempt in 1..=12u32 {
            let nominal = (2f64.powi(attempt as i32 - 1)).min(300.0);
            let samples: Vec<f64> = (0..200)
                .map(|_| p.delay(attempt, &mut rng).as_secs_f64())
                .collect();
            for s in &samples {
                assert!(
                    *s >= nominal / 2.0 - 1e-9 && *s <= nominal + 1e-9,
                    "attempt {attempt}: {s} outside [{}, {nominal}]",
                    nominal / 2.0
                );
            }
            let spread = samples.iter().cloned().fold(f64::MIN, f64::max)
                - samples.iter().cloned().fold(f64::MAX, f64::min);
            assert!(
                spread > nominal / 4.0,
                "attempt {attempt}: jitter should spread waits, spread {spread}"
            );
        }
    }

    #[test]
    fn jitter_is_reproducible_with_a_seeded_rng() {
        let p = RetryPolicy::default();
        let a: Vec<Duration> = (1..6)
            .map(|n| p.delay(n, &mut StdRng::seed_from_u64(9)))
            .collect();
        let b: Vec<Duration> = (1..6)
            .map(|n| p.delay(n, &mut StdRng::seed_from_u64(9)))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn backoff_forms_parse() {
        let retry = |r: &str| {
            load(&format!("name: t\nplugin: p@1.0.0\nretry: {r}\n"), &CAPS)
                .unwrap()
                .steps[0]
                .retry
                .clone()
        };
        assert_eq!(
            retry("{backoff: 45s}").backoff,
            Backoff::List(vec![secs(45)])
        );
        assert_eq!(
            retry(
                "{max_attempts: 4, backoff: {exponential: {initial: 2s, max: 1m, factor: 3, jitter: false}}, retry_on: [fuel_exhausted]}"
            ),
            RetryPolicy {
                max_attempts: 4,
                backoff: Backoff::Exponential(Exponential {
                    initial: secs(2),
                    max: secs(60),
                    factor: 3.0,
                    jitter: false
                }),
                retry_on: vec![RetryOn::FuelExhausted],
            }
        );
        assert_eq!(
            retry("{backoff: {exponential: {}}}").backoff,
            Backoff::default()
        );
        assert_eq!(
            retry("{backoff: {exponential: }}").backoff,
            Backoff::default()
        );
        let e = parse_err("name: t\nplugin: p@1.0.0\nretry: {backoff: {}}\n");
        assert_eq!(
            (e.path.as_str(), e.message.as_str()),
            ("retry.backoff", "missing field `exponential`")
        );
    }

    // --- trigger rules ------------------------------------------------------------------

    #[test]
    fn trigger_rules_decide_from_upstream_states() {
        use RuleVerdict::{Run, Skip, Wait};
        use StepStatus::{Cancelled, Dead, Failed, Pending, Running, Skipped, Succeeded};
        let cases: [(TriggerRule, &[StepStatus], RuleVerdict); 22] = [
            (TriggerRule::AllSuccess, &[], Run),
            (TriggerRule::AllSuccess, &[Succeeded, Succeeded], Run),
            (TriggerRule::AllSuccess, &[Succeeded, Running], Wait),
            (TriggerRule::AllSuccess, &[Running, Failed], Skip),
            (TriggerRule::AllSuccess, &[Succeeded, Skipped], Skip),
            (TriggerRule::AllSuccess, &[Dead], Skip),
            (TriggerRule::OneSuccess, &[Skipped, Succeeded], Run),
            (TriggerRule::OneSuccess, &[Running, Succeeded], Run),
            (TriggerRule::OneSuccess, &[Skipped, Running], Wait),
            (TriggerRule::OneSuccess, &[Skipped, Failed], Skip),
            (TriggerRule::OneSuccess, &[Cancelled], Skip),
            (
                TriggerRule::AllDone,
                &[Failed, Skipped, Succeeded, Dead, Cancelled],
                Run,
            ),
            (TriggerRule::AllDone, &[Failed, Pending], Wait),
            (TriggerRule::AllDone, &[StepStatus::RetryWait], Wait),
            (TriggerRule::AllDone, &[StepStatus::Queued], Wait),
            (TriggerRule::NoneFailed, &[Succeeded, Skipped], Run),
            (TriggerRule::NoneFailed, &[Skipped, Skipped], Run),
            (TriggerRule::NoneFailed, &[Succeeded, Running], Wait),
            (TriggerRule::NoneFailed, &[Running, Failed], Skip),
            (TriggerRule::NoneFailed, &[Dead], Skip),
            (TriggerRule::NoneFailed, &[Cancelled, Succeeded], Skip),
            (TriggerRule::NoneFailed, &[], Run),
        ];
        for (rule, upstream, verdict) in cases {
            assert_eq!(rule.evaluate(upstream), verdict, "{rule:?} on {upstream:?}");
        }
    }
}
