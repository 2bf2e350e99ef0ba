//! What the API shows of the stored records: the JSON shapes of its answers.
//! Instants become RFC 3339 UTC strings; internal fields (a run's snapshot of
//! its task definition, record format numbers, lost-attempt counters) stay
//! inside the host.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::model::time::rfc3339;
use crate::model::{
    AttemptRecord, DeadLetter, ErrorKind, Event, Millis, Outcome, PluginRecord, PluginStatus,
    PluginTag, RunRecord, RunStatus, ScheduleState, StepRunRecord, StepStatus, TaskRecord,
    TriggerKind,
};

fn instant(ms: Millis) -> String {
    rfc3339(ms)
}

fn opt_instant(ms: Option<Millis>) -> Option<String> {
    ms.map(rfc3339)
}

/// A plugin version.
#[derive(Debug, Serialize, ToSchema)]
pub struct PluginView {
    /// Plugin name.
    pub name: String,
    /// Semver version.
    pub version: String,
    /// sha256 of the component.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// When it was uploaded.
    pub created_at: String,
    /// The tags that point at this version, by name.
    pub tags: Vec<String>,
    /// `compiling` (uploaded, compiling in the background; runs wait for
    /// it), `ready`, or `failed` (see `error`).
    pub status: PluginStatus,
    /// Why it did not compile (`failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The code it runs on this host while loaded: `baseline` (Winch's,
    /// compiled in seconds and served while Cranelift compiles it behind)
    /// or `optimized` (Cranelift's). Absent when it is not loaded (its next
    /// attempt loads it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<CodeTier>,
}

/// Which compiler's code a loaded plugin runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodeTier {
    /// Winch's code: served first for large components.
    Baseline,
    /// Cranelift's code.
    Optimized,
}

impl From<crate::runtime::Tier> for CodeTier {
    fn from(tier: crate::runtime::Tier) -> Self {
        match tier {
            crate::runtime::Tier::Baseline => CodeTier::Baseline,
            crate::runtime::Tier::Optimized => CodeTier::Optimized,
        }
    }
}

impl From<PluginRecord> for PluginView {
    fn from(p: PluginRecord) -> Self {
        Self {
            name: p.name,
            version: p.version,
            digest: p.digest,
            size: p.size,
            created_at: instant(p.created_at),
            status: p.status,
            error: p.error,
            tags: Vec::new(),
            tier: None,
        }
    }
}

impl PluginView {
    /// With the tier of the code it runs, when loaded.
    pub fn with_tier(mut self, tier: Option<crate::runtime::Tier>) -> Self {
        self.tier = tier.map(CodeTier::from);
        self
    }

    /// The view of `p` with those of `tags` (of its tenant) that point at it.
    pub fn tagged(p: PluginRecord, tags: &[PluginTag]) -> Self {
        let mut view = Self::from(p);
        view.tags = tags
            .iter()
            .filter(|t| t.name == view.name && t.version == view.version)
            .map(|t| t.tag.clone())
            .collect();
        view
    }
}

/// A plugin tag: a movable name for one version (`plugin@stable`).
#[derive(Debug, Serialize, ToSchema)]
pub struct PluginTagView {
    /// Plugin name.
    pub name: String,
    /// The tag.
    pub tag: String,
    /// The version it points at.
    pub version: String,
    /// When it was last set or moved.
    pub updated_at: String,
    /// The version it pointed at before this change (`null`: it is new, or
    /// not the answer of a change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

impl From<PluginTag> for PluginTagView {
    fn from(t: PluginTag) -> Self {
        Self {
            name: t.name,
            tag: t.tag,
            version: t.version,
            updated_at: instant(t.updated_at),
            previous: None,
        }
    }
}

/// A task with its trigger state.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskView {
    /// Task name.
    pub name: String,
    /// Bumped on every replace.
    pub version: u64,
    /// When first created.
    pub created_at: String,
    /// When last replaced.
    pub updated_at: String,
    /// The validated definition (the document of docs/TASKS.md, normalised).
    #[schema(value_type = Object)]
    pub spec: Value,
    /// Whether its trigger is paused.
    pub paused: bool,
    /// The next instant its trigger fires (`null`: never, manual, or paused).
    pub next_fire: Option<String>,
    /// The definition as sent (only when showing one task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl TaskView {
    /// The view of a task; `with_source` adds the text the user sent.
    pub fn new(task: TaskRecord, schedule: Option<&ScheduleState>, with_source: bool) -> Self {
        let paused = schedule.is_some_and(|s| s.paused);
        Self {
            name: task.name,
            version: task.version,
            created_at: instant(task.created_at),
            updated_at: instant(task.updated_at),
            spec: task.spec.json().clone(),
            paused,
            next_fire: schedule
                .filter(|s| !s.paused)
                .and_then(|s| opt_instant(s.next_fire)),
            source: with_source.then_some(task.source),
        }
    }
}

/// One attempt of a step.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    /// From 1.
    pub number: u32,
    /// `null` while running.
    pub outcome: Option<Outcome>,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Fuel consumed.
    pub fuel_consumed: u64,
    /// Peak linear memory.
    pub memory_peak_bytes: u64,
    /// Wall time.
    pub duration_ms: f64,
    /// Why it did not succeed.
    pub error: Option<String>,
    /// For `failed`: retryable or fatal.
    pub error_kind: Option<ErrorKind>,
    /// The plugin version this attempt ran (what the step's version, range
    /// or tag resolved to when it started); `null` for attempts recorded
    /// before versions were.
    pub plugin_version: Option<String>,
    /// The sha256 of that version's component.
    pub plugin_digest: Option<String>,
}

impl From<AttemptRecord> for AttemptView {
    fn from(a: AttemptRecord) -> Self {
        Self {
            number: a.number,
            outcome: a.outcome,
            started_at: instant(a.started_at),
            finished_at: opt_instant(a.finished_at),
            fuel_consumed: a.fuel_consumed,
            memory_peak_bytes: a.memory_peak_bytes,
            duration_ms: a.duration_ms,
            error: a.error,
            error_kind: a.error_kind,
            plugin_version: a.plugin_version,
            plugin_digest: a.plugin_digest,
        }
    }
}

/// One step of a run.
#[derive(Debug, Serialize, ToSchema)]
pub struct StepView {
    /// Step name.
    pub name: String,
    /// The plugin as the run's definition names it (`name@1.2.0`,
    /// `name@^1.2`, `name@stable`); each attempt says which version it ran.
    pub plugin: Option<String>,
    /// Current state.
    pub status: StepStatus,
    /// Resolved input.
    pub input: Option<Value>,
    /// Output once succeeded.
    pub output: Option<Value>,
    /// The last error.
    pub error: Option<String>,
    /// When a `retry_wait` step is due.
    pub next_attempt_at: Option<String>,
    /// Attempts, oldest first.
    pub attempts: Vec<AttemptView>,
}

impl From<StepRunRecord> for StepView {
    fn from(s: StepRunRecord) -> Self {
        Self {
            name: s.name,
            plugin: None,
            status: s.status,
            input: s.input,
            output: s.output,
            error: s.error,
            next_attempt_at: opt_instant(s.next_attempt_at),
            attempts: s.attempts.into_iter().map(AttemptView::from).collect(),
        }
    }
}

/// A run.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunView {
    /// Run id.
    pub id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Task name.
    pub task: String,
    /// Run state.
    pub status: RunStatus,
    /// Why it is in its state.
    pub reason: Option<String>,
    /// 0..=9.
    pub priority: u8,
    /// What started it.
    pub trigger: TriggerKind,
    /// The instant the run is for.
    pub scheduled_for: String,
    /// When it was accepted.
    pub created_at: String,
    /// When its first attempt started.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// The trigger input.
    pub input: Value,
    /// The client's idempotency key.
    pub idempotency_key: Option<String>,
    /// Its steps, in the task's order.
    pub steps: Vec<StepView>,
    /// Why its waiting steps do not start (the tenant's fuel is used up, the
    /// tenant is disabled); absent when nothing holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// How many of its attempts were told to stop (the run was cancelled)
    /// and have not reported yet: their `outcome`, `finished_at` and
    /// `fuel_consumed` are still to come, and a later read shows them.
    /// Absent when none (a cancel waits up to 2 s for them first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts_stopping: Option<u32>,
    /// In a trigger's answer only: what the request sent that the task
    /// ignores, the run being created all the same (docs/API.md,
    /// "Warnings"). Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// Something a request sent that did not stop it but is likely a mistake.
#[derive(Debug, Serialize, ToSchema)]
pub struct Warning {
    /// Stable: `input_not_read` (input fields that no step's `input:` or
    /// `when:` and no param reads).
    pub code: String,
    /// For people: what was ignored and what the task reads.
    pub message: String,
    /// The fields concerned, in name order.
    pub fields: Vec<String>,
}

impl Warning {
    /// The warnings of a trigger's answer for `run`: the top-level input
    /// fields its task never reads ([`crate::task::TaskSpec::unread_input`]).
    pub fn of_trigger(run: &RunRecord) -> Vec<Self> {
        // Most triggers send no input: nothing to read the task for.
        if run.input.as_object().is_none_or(serde_json::Map::is_empty) {
            return Vec::new();
        }
        let Ok(spec) = crate::task::TaskSpec::stored(&run.spec) else {
            return Vec::new();
        };
        spec.unread_input_warning(&run.input)
            .map(|(message, fields)| Self {
                code: "input_not_read".to_owned(),
                message,
                fields,
            })
            .into_iter()
            .collect()
    }
}

impl RunView {
    /// The view of `r`, with the hold of its tenant if it is still waiting.
    pub fn with_hold(r: RunRecord, stats: &crate::scheduler::Stats) -> Self {
        let held = (!r.status.is_terminal())
            .then(|| stats.hold_reason(&r.tenant))
            .flatten();
        Self {
            held,
            ..Self::from(r)
        }
    }
}

impl From<RunRecord> for RunView {
    fn from(r: RunRecord) -> Self {
        let stopping = r.attempts_stopping();
        Self {
            attempts_stopping: (stopping > 0).then_some(stopping as u32),
            warnings: Vec::new(),
            id: r.id.into(),
            tenant: r.tenant.into(),
            task: r.task.into(),
            status: r.status,
            reason: r.reason,
            priority: r.priority,
            trigger: r.trigger,
            scheduled_for: instant(r.scheduled_for),
            created_at: instant(r.created_at),
            started_at: opt_instant(r.started_at),
            finished_at: opt_instant(r.finished_at),
            input: r.input,
            idempotency_key: r.idempotency_key,
            steps: r
                .steps
                .into_iter()
                .map(|s| StepView {
                    plugin: step_plugin(&r.spec, &s.name),
                    ..StepView::from(s)
                })
                .collect(),
            held: None,
        }
    }
}

/// The plugin step `step` of a run's definition snapshot names.
fn step_plugin(spec: &Value, step: &str) -> Option<String> {
    spec["steps"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == step)?["plugin"]
        .as_str()
        .map(str::to_owned)
}

/// One state change of a run.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    /// The run.
    pub run_id: String,
    /// The step (`null` for the run itself).
    pub step: Option<String>,
    /// The attempt, where one is concerned.
    pub attempt: Option<u32>,
    /// Previous state.
    pub from: Option<String>,
    /// New state.
    pub to: String,
    /// When.
    pub at: String,
    /// Why.
    pub reason: String,
    /// Who.
    pub actor: String,
}

impl From<Event> for EventView {
    fn from(e: Event) -> Self {
        Self {
            run_id: e.run_id,
            step: e.step,
            attempt: e.attempt,
            from: e.from,
            to: e.to,
            at: instant(e.at),
            reason: e.reason,
            actor: e.actor,
        }
    }
}

/// A dead letter.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterView {
    /// Id.
    pub id: String,
    /// Task name.
    pub task: String,
    /// The run.
    pub run_id: String,
    /// The step.
    pub step: String,
    /// The step's resolved input.
    pub input: Option<Value>,
    /// The last error.
    pub error: Option<String>,
    /// The last attempt's outcome.
    pub outcome: Option<Outcome>,
    /// Attempts made.
    pub attempts: u32,
    /// When it was recorded.
    pub created_at: String,
    /// What a person decided (`null` while open).
    pub resolution: Option<String>,
    /// When it was resolved or requeued.
    pub resolved_at: Option<String>,
}

impl From<DeadLetter> for DeadLetterView {
    fn from(d: DeadLetter) -> Self {
        Self {
            id: d.id,
            task: d.task,
            run_id: d.run_id,
            step: d.step,
            input: d.input,
            error: d.error,
            outcome: d.outcome,
            attempts: d.attempts,
            created_at: instant(d.created_at),
            resolution: d.resolution,
            resolved_at: opt_instant(d.resolved_at),
        }
    }
}

// ---------------------------------------------------------------------------
// Listings: the envelopes of the list answers.
// ---------------------------------------------------------------------------

/// `GET /v1/plugins`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PluginList {
    /// The tenant's plugin versions, by name then version.
    pub plugins: Vec<PluginView>,
}

/// `GET /v1/plugins/{name}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PluginVersions {
    /// The plugin name.
    pub name: String,
    /// Its versions.
    pub versions: Vec<PluginView>,
    /// Its tags, by name.
    pub tags: Vec<PluginTagView>,
}

/// `GET /v1/tasks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    /// A page of the tenant's tasks, by name.
    pub tasks: Vec<TaskView>,
    /// Pass back as `cursor` for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// `GET /v1/tasks/{name}/next`.
#[derive(Debug, Serialize, ToSchema)]
pub struct NextFires {
    /// The next fire instants (RFC 3339 UTC); empty while paused.
    pub next: Vec<String>,
}

/// `GET /v1/runs`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    /// Newest first.
    pub runs: Vec<RunView>,
    /// Pass back as `cursor` for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// `GET /v1/runs/{id}/logs`.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogList {
    /// Captured output per attempt, by step then attempt.
    pub attempts: Vec<crate::store::AttemptLogs>,
}

/// `GET /v1/runs/{id}/events`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventList {
    /// Oldest first.
    pub events: Vec<EventView>,
}

/// `GET /v1/dead-letters`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterList {
    /// Newest first.
    pub dead_letters: Vec<DeadLetterView>,
}

/// `GET /v1/cron/next`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CronPreview {
    /// The next instants, RFC 3339 UTC.
    pub next: Vec<String>,
    /// The same instants in the expression's zone, with the weekday.
    pub described: Vec<String>,
}

/// `GET /healthz`, `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` (healthz) or `ready` (readyz).
    pub status: String,
    /// Readyz only: which store ax runs on and how its connections fare.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreView>,
}

/// The store in `/readyz`. Its location (data directory, database URL) is
/// left out: `/readyz` needs no token; `/metrics` names it
/// (`ax_store_info`).
#[derive(Debug, Serialize, ToSchema)]
pub struct StoreView {
    /// `sled`, `fjall` (the embedded store on either engine), `postgres`
    /// or `memory`.
    pub kind: String,
    /// PostgreSQL only: the connection pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolView>,
}

/// A store's connection pool in `/readyz`, since the server started.
#[derive(Debug, Serialize, ToSchema)]
pub struct PoolView {
    /// Connections open now (in use or idle).
    pub open: usize,
    /// Connections taken by a call now.
    pub in_use: usize,
    /// Connections the pool opens at most (`store.connections`).
    pub max: usize,
    /// Connections that could not be opened or were found broken.
    pub connection_errors: u64,
    /// Store calls made (each holding one connection).
    pub calls: u64,
    /// Their mean duration, ms, the wait for a free connection included;
    /// absent before the first call.
    pub mean_call_ms: Option<f64>,
}

impl From<crate::store::StoreHealth> for StoreView {
    fn from(h: crate::store::StoreHealth) -> Self {
        StoreView {
            kind: h.kind.as_str().into(),
            pool: h.pool.map(|p| {
                let calls = p.calls.count();
                PoolView {
                    open: p.open,
                    in_use: p.in_use,
                    max: p.max,
                    connection_errors: p.connection_errors,
                    calls,
                    mean_call_ms: (calls > 0).then(|| p.calls.sum() * 1e3 / calls as f64),
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> PluginRecord {
        PluginRecord {
            tenant: "t".into(),
            name: "pyx".into(),
            version: "0.1.0".into(),
            digest: "ab".into(),
            size: 18_420_586,
            created_at: 0,
            status: PluginStatus::Ready,
            error: None,
        }
    }

    #[test]
    fn a_plugin_view_names_the_tier_of_the_code_only_while_loaded() {
        let view = |tier| serde_json::to_value(PluginView::from(record()).with_tier(tier)).unwrap();
        assert_eq!(
            view(Some(crate::runtime::Tier::Baseline))["tier"],
            "baseline"
        );
        assert_eq!(
            view(Some(crate::runtime::Tier::Optimized))["tier"],
            "optimized"
        );
        assert!(view(None).get("tier").is_none());
    }
}
