//! Plain data shared by every layer: attempt limits, outcomes, the context a
//! plugin sees, captured logs. No I/O and no wasmtime types live here, so the
//! scheduler, the store and the API can use these without knowing how a plugin
//! is executed.

pub mod definition;
pub mod digest;
pub mod hint;
pub mod ids;
pub mod name;
pub mod priority;
pub mod record;
pub mod time;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::definition::Definition;
use self::ids::{RunId, TaskName, TenantId};

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

impl Limits {
    /// These limits, each lowered to its cap: the one clamp applied at every
    /// start, to defaults and explicit values alike (explicit values above a
    /// cap are refused on save, so at a start it only lowers defaults and
    /// values saved before a cap was lowered).
    pub fn capped(mut self, caps: &Caps) -> Limits {
        self.fuel = self.fuel.min(caps.max_fuel);
        self.memory_bytes = self
            .memory_bytes
            .min(caps.max_memory_mb.saturating_mul(1 << 20));
        self.timeout = self.timeout.min(caps.max_timeout);
        self
    }
}

/// Per-attempt caps: the host's (config `caps`), cut by a tenant's quota
/// ([`Caps::cut`]). A step asking for more is refused on save; defaults are
/// lowered to them at every start ([`Limits::capped`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Most fuel one attempt may get.
    pub max_fuel: u64,
    /// Most linear memory one attempt may get, in MiB.
    pub max_memory_mb: u64,
    /// Longest wall-clock budget of one attempt.
    pub max_timeout: Duration,
}

impl Caps {
    /// No cap (the WebAssembly memory bound still applies).
    pub const UNLIMITED: Caps = Caps {
        max_fuel: u64::MAX,
        max_memory_mb: u64::MAX,
        max_timeout: Duration::MAX,
    };

    /// These caps lowered by a tenant's per-attempt limits, where it has them.
    pub fn cut(
        &self,
        max_fuel: Option<u64>,
        max_memory_mb: Option<u64>,
        max_timeout: Option<Duration>,
    ) -> Caps {
        Caps {
            max_fuel: max_fuel.map_or(self.max_fuel, |f| f.min(self.max_fuel)),
            max_memory_mb: max_memory_mb.map_or(self.max_memory_mb, |m| m.min(self.max_memory_mb)),
            max_timeout: max_timeout.map_or(self.max_timeout, |t| t.min(self.max_timeout)),
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A transient failure: retry per policy.
    Retryable,
    /// Retrying will not help.
    Fatal,
}

/// What started a run (mirrors the WIT `trigger-kind`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
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
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

// ---------------------------------------------------------------------------
// Scheduler records: what the store keeps about runs. The run is the
// aggregate: it holds its step runs, which hold their attempts. A run also
// keeps a snapshot of the task definition it was started from, so editing a
// task never changes a run already accepted.
// ---------------------------------------------------------------------------

/// Bytes of `value` as compact JSON, counted without building the text: what
/// a run's input weighs against its tenant's `max_input_bytes` and
/// `run_bytes` quotas. A value that does not serialize weighs 0.
pub fn json_len(value: &impl Serialize) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

/// `bytes` for a person: `1.5 GiB`, `12.0 MiB`, `900 B`.
pub fn show_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Version of the stored record format; bumped when a record's shape changes.
pub const RECORD_FORMAT: u32 = 1;

/// Milliseconds since the Unix epoch, UTC: how instants are stored.
pub type Millis = i64;

/// State of a run (SPEC §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted, no step started yet (or held: see the run's `reason`).
    Queued,
    /// At least one step has started and the run is not finished.
    Running,
    /// Every step ended and none failed.
    Succeeded,
    /// A step failed (or was dead-lettered) and the run cannot succeed.
    Failed,
    /// Cancelled by a person, or shed under load.
    Cancelled,
}

impl RunStatus {
    /// Whether the run will not change any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

impl FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "queued" => RunStatus::Queued,
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            other => return Err(format!("unknown run status `{other}`")),
        })
    }
}

/// State of a step run (SPEC §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Waiting for its upstream steps.
    Pending,
    /// Ready, waiting for a slot.
    Queued,
    /// An attempt is running.
    Running,
    /// Waiting for the backoff before the next attempt.
    RetryWait,
    /// Its plugin succeeded.
    Succeeded,
    /// Failed, and not retried (fatal error, or no retries configured).
    Failed,
    /// Its condition or trigger rule said not to run.
    Skipped,
    /// Cancelled with its run.
    Cancelled,
    /// Failed after its last attempt; a dead letter was recorded.
    Dead,
}

impl StepStatus {
    /// Whether the step run will not change any more (without a requeue).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            StepStatus::Succeeded
                | StepStatus::Failed
                | StepStatus::Skipped
                | StepStatus::Cancelled
                | StepStatus::Dead
        )
    }
}

/// One attempt of a step run, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// From 1.
    pub number: u32,
    /// `None` while running.
    pub outcome: Option<Outcome>,
    /// When the attempt was started (ms).
    pub started_at: Millis,
    /// When it ended (ms).
    pub finished_at: Option<Millis>,
    /// Fuel consumed.
    pub fuel_consumed: u64,
    /// Peak linear memory.
    pub memory_peak_bytes: u64,
    /// Wall time of the attempt.
    pub duration_ms: f64,
    /// Why it did not succeed.
    pub error: Option<String>,
    /// For `failed`: retryable or fatal.
    pub error_kind: Option<ErrorKind>,
    /// The plugin version this attempt ran, resolved from the step's
    /// `name@version`, `name@RANGE` or `name@TAG` when it started (`None`
    /// in records written before versions were recorded).
    #[serde(default)]
    pub plugin_version: Option<String>,
    /// The sha256 of that version's component.
    #[serde(default)]
    pub plugin_digest: Option<String>,
}

/// One step of a run, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRunRecord {
    /// The step's name (unique in its task).
    pub name: String,
    /// Current state.
    pub status: StepStatus,
    /// The input after template resolution (set when the step is queued).
    pub input: Option<serde_json::Value>,
    /// The plugin's output once succeeded.
    pub output: Option<serde_json::Value>,
    /// The last error, for failed/dead/skipped steps.
    pub error: Option<String>,
    /// Attempts so far, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// When a `retry_wait` step becomes due again (ms).
    pub next_attempt_at: Option<Millis>,
    /// Attempts lost to host crashes in this round (they do not count against retries, up to a bound).
    #[serde(default)]
    pub lost_attempts: u32,
    /// Attempts before this index belong to earlier rounds (before a retry or
    /// a requeue); retries count from here.
    #[serde(default)]
    pub round_start: u32,
}

impl StepRunRecord {
    /// A step of a new run: pending, nothing tried yet.
    pub fn pending(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            status: StepStatus::Pending,
            input: None,
            output: None,
            error: None,
            attempts: Vec::new(),
            next_attempt_at: None,
            lost_attempts: 0,
            round_start: 0,
        }
    }
}

/// A run: one execution of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Record format version.
    pub format: u32,
    /// How many times the record has been stored: 1 once inserted, one more
    /// at every write. A write carries the revision it makes, and a store
    /// takes it only over the one before ([`Runs::write_runs_with_alerts`],
    /// compare-and-set), so a writer that missed another's write is refused
    /// instead of undoing it. 0 in records stored before revisions existed.
    /// Kept right after `format`: stores read it from the record's first
    /// bytes (`store/sled/runs.rs`).
    ///
    /// [`Runs::write_runs_with_alerts`]: crate::store::Runs::write_runs_with_alerts
    #[serde(default)]
    pub revision: u64,
    /// Unique id, sortable by creation time.
    pub id: RunId,
    /// Owning tenant.
    pub tenant: TenantId,
    /// Task name.
    pub task: TaskName,
    /// Snapshot of the task definition the run was started from, shared
    /// with the task record it was made from (and every run made from it):
    /// a run is cloned at every write, and its definition is its largest
    /// part. Fixed when the run is inserted. Absent (null) where a store
    /// keeps it apart and joins it back when reading (sled's
    /// `definitions.rs`).
    #[serde(default)]
    pub spec: Definition,
    /// Run state.
    pub status: RunStatus,
    /// Why the run is in its state (held, shed, cancelled by whom…).
    pub reason: Option<String>,
    /// 0..=9, higher first.
    pub priority: u8,
    /// What started it.
    pub trigger: TriggerKind,
    /// The instant the run is for (a fire instant, or the trigger time).
    pub scheduled_for: Millis,
    /// When ax accepted it.
    pub created_at: Millis,
    /// When its first attempt started.
    pub started_at: Option<Millis>,
    /// When it reached a terminal state.
    pub finished_at: Option<Millis>,
    /// The trigger input (`${input.*}`). Absent where a store keeps it
    /// apart and joins it back when reading (sled's large inputs,
    /// `store/sled/inputs.rs`).
    #[serde(default)]
    pub input: serde_json::Value,
    /// A client's idempotency key, if given.
    pub idempotency_key: Option<String>,
    /// The run whose end started this one (`trigger: after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_run: Option<RunId>,
    /// Step runs, in the task's step order. Absent where a store keeps
    /// them apart and joins them back when reading (sled's large runs,
    /// `store/sled/steps.rs`).
    #[serde(default)]
    pub steps: Vec<StepRunRecord>,
}

impl RunRecord {
    /// Makes the record the next revision of itself, the one its next write
    /// stores ([`RunRecord::revision`]).
    pub fn next_revision(&mut self) {
        self.revision += 1;
    }

    /// Attempts told to stop that have not reported yet: a run is
    /// `cancelled` (and its steps with it) at once, while a running attempt
    /// stops a moment later and is only then recorded (outcome, end, fuel
    /// charged). Such an attempt has no outcome in a run that has ended.
    /// Zero for a run that is still active (its open attempts are running,
    /// not stopping) or settled.
    pub fn attempts_stopping(&self) -> usize {
        if !self.status.is_terminal() {
            return 0;
        }
        self.steps
            .iter()
            .flat_map(|s| &s.attempts)
            .filter(|a| a.outcome.is_none())
            .count()
    }
}

/// One state change, appended to a run's event log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The run.
    pub run_id: String,
    /// The step, for step-level changes; `None` for the run itself.
    pub step: Option<String>,
    /// The attempt number, where one is concerned.
    pub attempt: Option<u32>,
    /// Previous state (`None` at creation).
    pub from: Option<String>,
    /// New state.
    pub to: String,
    /// When (ms).
    pub at: Millis,
    /// Why.
    pub reason: String,
    /// Who: `scheduler`, `api:<tenant>`, `recovery`, …
    pub actor: String,
}

/// A step run that exhausted its retries, waiting for a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Unique id.
    pub id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Task name.
    pub task: String,
    /// The run.
    pub run_id: String,
    /// The step.
    pub step: String,
    /// The step's resolved input.
    pub input: Option<serde_json::Value>,
    /// The last error.
    pub error: Option<String>,
    /// The last attempt's outcome.
    pub outcome: Option<Outcome>,
    /// Attempts made.
    pub attempts: u32,
    /// When it was recorded (ms).
    pub created_at: Millis,
    /// What a person decided (`None` while open).
    pub resolution: Option<String>,
    /// When it was resolved or requeued (ms).
    pub resolved_at: Option<Millis>,
}

/// The firing state of a task's trigger, persisted so restarts neither miss nor repeat fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// Owning tenant.
    pub tenant: String,
    /// Task name.
    pub task: String,
    /// The next instant the trigger fires (`None`: never again, or manual).
    pub next_fire: Option<Millis>,
    /// The last instant a run was created for.
    pub last_fired: Option<Millis>,
    /// Paused triggers do not fire (runs can still be triggered by hand).
    pub paused: bool,
}

/// A stored plugin version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRecord {
    /// Owning tenant.
    pub tenant: String,
    /// Plugin name.
    pub name: String,
    /// Semver version.
    pub version: String,
    /// sha256 of the component (names its blob file).
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// When it was uploaded (ms).
    pub created_at: Millis,
    /// Whether it can run yet: uploads answer `compiling` and compile in the
    /// background. Records stored before there was a status were compiled
    /// before they were stored: `ready`.
    #[serde(default)]
    pub status: PluginStatus,
    /// Why it did not compile (`failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a plugin version is on its way to being runnable
/// (docs/PLUGINS.md, "Upload and compilation").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PluginStatus {
    /// Stored and checked; compiling in the background. Runs that need it
    /// wait for it (within their step's timeout).
    Compiling,
    /// Compiled: runs start at once.
    #[default]
    Ready,
    /// Did not compile: `error` says why. Its bytes are deleted; tasks may
    /// not name it; delete it or upload the version again.
    Failed,
}

impl PluginStatus {
    /// Its name as shown (`compiling`, `ready`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            PluginStatus::Compiling => "compiling",
            PluginStatus::Ready => "ready",
            PluginStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for PluginStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tag: a movable name for one version of one plugin (`plugin@stable`),
/// per tenant and plugin name. Kept apart from [`PluginRecord`] (a version
/// stays immutable; its tags move).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginTag {
    /// Owning tenant.
    pub tenant: String,
    /// Plugin name.
    pub name: String,
    /// The tag (a name by [`name::is_valid_name`], not readable as a version or range).
    pub tag: String,
    /// The version it points at.
    pub version: String,
    /// When it was last set or moved (ms).
    pub updated_at: Millis,
}

/// A stored task definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Record format version.
    pub format: u32,
    /// Owning tenant.
    pub tenant: String,
    /// Task name.
    pub name: String,
    /// The validated definition (the `TaskSpec`, as JSON), shared with the
    /// runs made from it.
    pub spec: Definition,
    /// The definition as the user sent it (YAML or JSON text).
    pub source: String,
    /// When first created (ms); `delay` triggers count from here.
    pub created_at: Millis,
    /// When last replaced (ms).
    pub updated_at: Millis,
    /// Bumped on every replace.
    pub version: u64,
}

impl TaskRecord {
    /// The tasks whose runs start this one (`trigger.after` of its spec),
    /// read from the stored JSON so that a store can index them without
    /// knowing the task model. A definition without them gives none.
    pub fn upstreams(&self) -> Vec<String> {
        self.spec
            .get("trigger")
            .and_then(|t| t.get("after"))
            .and_then(|a| a.as_array())
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_lowered_to_caps_cut_by_a_tenant() {
        let host = Caps {
            max_fuel: 1_000_000,
            max_memory_mb: 64,
            max_timeout: Duration::from_secs(1),
        };
        let tenant = host.cut(Some(10), None, Some(Duration::from_secs(3600)));
        assert_eq!(
            tenant,
            Caps {
                max_fuel: 10,
                max_memory_mb: 64,
                max_timeout: Duration::from_secs(1)
            }
        );
        let l = Limits::default().capped(&host);
        assert_eq!(
            (l.fuel, l.memory_bytes, l.timeout),
            (1_000_000, 64 << 20, Duration::from_secs(1))
        );
        assert_eq!(
            Limits::default().capped(&Caps::UNLIMITED),
            Limits::default()
        );
    }
}
