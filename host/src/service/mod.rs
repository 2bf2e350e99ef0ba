//! The operations of ax as one facade over the store, the runtime and the
//! scheduler: what the HTTP API (and, through it, the CLI) can ask for. Every
//! call is scoped to a tenant; an object of another tenant is "not found".
//!
//! Write paths that answer a client wait for the store's sync ticket, so a
//! 2xx means the change is on disk.

mod capabilities;
mod tenants;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::dag;
use crate::model::{
    DeadLetter, Event, PluginRecord, RECORD_FORMAT, RunRecord, ScheduleState, TaskRecord,
};
use crate::runtime::{self, Runtime};
use crate::schedule::{self, CronSchedule, Trigger};
use crate::scheduler::clock::from_ms;
use crate::scheduler::{self, Clock, Scheduler, TriggerRequest};
use crate::store::{self, AttemptLogs, RunPage, RunQuery, Store};
use crate::task::{self, Caps, TaskSpec};

/// Largest plugin accepted by default (compiling untrusted input is bounded by size).
pub const DEFAULT_MAX_PLUGIN_BYTES: usize = 32 << 20;
/// Plugin versions a tenant may keep by default (its `max_plugins` quota).
pub const DEFAULT_MAX_PLUGINS_PER_TENANT: u32 = 100;
/// Bytes of plugin versions a tenant may keep by default (its `plugin_bytes`
/// quota): sixteen of the largest uploads, or hundreds of typical ones.
pub const DEFAULT_PLUGIN_BYTES_PER_TENANT: u64 = 512 << 20;
/// Most fire instants a preview returns.
pub const MAX_PREVIEW: usize = 100;

/// What went wrong, by class; the API maps each class to a status and code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed (bad syntax, bad parameter).
    #[error("{0}")]
    BadRequest(String),
    /// The request is well-formed but invalid (validation failed); `path` names the field.
    #[error("{}{message}", path.as_deref().map(|p| format!("{p}: ")).unwrap_or_default())]
    Invalid {
        /// Where in the document (e.g. `steps[0].limits.fuel`).
        path: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// An uploaded plugin is not an ax plugin.
    #[error(transparent)]
    Plugin(#[from] runtime::Error),
    /// No such object for this tenant.
    #[error("{0} not found")]
    NotFound(String),
    /// The request conflicts with current state.
    #[error("{0}")]
    Conflict(String),
    /// The body is over the limit.
    #[error("{0}")]
    TooLarge(String),
    /// The tenant's queue is full.
    #[error("{message}")]
    QueueFull {
        /// What happened.
        message: String,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// A tenant quota refuses the request for now.
    #[error("{message}")]
    Quota {
        /// Which limit, and until when.
        message: String,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// The caller may not do this (a tenant token on an admin route, a
    /// disabled tenant).
    #[error("{0}")]
    Forbidden(String),
    /// The store failed (I/O, a corrupt record): a fault of the host.
    #[error("internal error: {0}")]
    Store(#[source] store::Error),
    /// The scheduler failed (it is stopping, or its store failed): a fault
    /// of the host.
    #[error("internal error: {0}")]
    Scheduler(#[source] scheduler::Error),
    /// A stored record does not read back (or a value does not serialize):
    /// a fault of the host.
    #[error("internal error: {what}: {source}")]
    Record {
        /// Which record (e.g. "the definition of task `nightly`").
        what: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// The blocking task that compiles an upload panicked or was cancelled.
    #[error("internal error: compiling the plugin: {0}")]
    Compile(#[source] tokio::task::JoinError),
    /// Another fault of the host (a stored setting that no longer reads).
    #[error("internal error: {0}")]
    Internal(String),
    /// The tenant keeps as many plugin versions as its `max_plugins` quota allows.
    #[error("{0}")]
    TooManyPlugins(String),
    /// The upload would take the tenant's plugins over its `plugin_bytes` quota.
    #[error("{0}")]
    PluginBytesQuota(String),
}

/// Result type of the service.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<store::Error> for Error {
    fn from(e: store::Error) -> Self {
        Error::Store(e)
    }
}

impl From<scheduler::Error> for Error {
    fn from(e: scheduler::Error) -> Self {
        match e {
            scheduler::Error::NotFound(what) => Error::NotFound(what),
            scheduler::Error::QueueFull { retry_after, .. } => Error::QueueFull {
                message: e.to_string(),
                retry_after: retry_after.as_secs().max(1),
            },
            scheduler::Error::Quota {
                message,
                retry_after,
            } => Error::Quota {
                message,
                retry_after: retry_after.as_secs_f64().ceil().max(1.0) as u64,
            },
            scheduler::Error::Conflict(m) => Error::Conflict(m),
            scheduler::Error::Store(e) => Error::Store(e),
            other => Error::Scheduler(other),
        }
    }
}

impl From<task::SpecError> for Error {
    fn from(e: task::SpecError) -> Self {
        Error::Invalid {
            path: (!e.path.is_empty()).then_some(e.path),
            message: e.message,
        }
    }
}

/// A stored task definition that does not read back.
fn record_of(task: &str, source: serde_json::Error) -> Error {
    Error::Record {
        what: format!("the definition of task `{task}`"),
        source,
    }
}

/// A plugin as listed: its record plus which tasks use it.
pub type PluginList = Vec<PluginRecord>;

/// The ax facade. Cheap to clone.
#[derive(Clone)]
pub struct Ax {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The sandbox (for validating uploads).
    pub runtime: Runtime,
    /// The scheduler actor.
    pub scheduler: Scheduler,
    /// Wall time.
    pub clock: Arc<dyn Clock>,
    /// Per-attempt caps every task is checked against.
    pub caps: Caps,
    /// Attempts the scheduler runs at once (for benchmarks and status).
    pub concurrency: usize,
    /// Largest plugin accepted.
    pub max_plugin_bytes: usize,
    /// Tenants and tokens (see [`load_registry`]).
    pub tenants: crate::tenant::Registry,
    /// Host defaults of the per-tenant plugin quotas.
    pub plugin_quota: PluginQuota,
}

/// The host's default per-tenant plugin quotas (a tenant's own `max_plugins`
/// and `plugin_bytes` replace them), and the lock that makes an upload's
/// quota check and its store write one step: two uploads that only one fits
/// cannot both pass.
#[derive(Clone, Debug)]
pub struct PluginQuota {
    /// Plugin versions a tenant may keep.
    pub max_plugins: u32,
    /// Bytes of plugin versions (the sum of their sizes) a tenant may keep.
    pub plugin_bytes: u64,
    /// Held from the check of an upload (or a deletion's "is the blob still
    /// used") to its store write. Uploads compile before taking it.
    writes: Arc<tokio::sync::Mutex<()>>,
}

impl PluginQuota {
    /// These defaults, with a fresh lock.
    pub fn new(max_plugins: u32, plugin_bytes: u64) -> Self {
        Self {
            max_plugins,
            plugin_bytes,
            writes: Arc::default(),
        }
    }
}

impl Default for PluginQuota {
    fn default() -> Self {
        Self::new(
            DEFAULT_MAX_PLUGINS_PER_TENANT,
            DEFAULT_PLUGIN_BYTES_PER_TENANT,
        )
    }
}

pub use self::tenants::{TenantSpec, UsageReport, UsageTotals, WindowUsage, load_registry};

impl Ax {
    /// Attempts the scheduler runs at once.
    pub fn scheduler_concurrency(&self) -> usize {
        self.concurrency
    }

    async fn sync(&self) -> Result<()> {
        self.store.sync_ticket().wait().await.map_err(Error::from)
    }

    // ----------------------------------------------------------------------
    // Plugins
    // ----------------------------------------------------------------------

    /// Validates and stores a plugin version. Versions are immutable: the same
    /// bytes again answer with the existing record (`false`), other bytes 409.
    pub async fn upload_plugin(
        &self,
        tenant: &str,
        name: &str,
        version: &str,
        bytes: Vec<u8>,
    ) -> Result<(PluginRecord, bool)> {
        // The rules a task names a plugin by: a version no task could refer
        // to is refused here.
        if !task::is_valid_name(name) {
            return Err(Error::BadRequest(format!(
                "plugin name `{name}` must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}"
            )));
        }
        if !task::is_valid_version(version) {
            return Err(Error::BadRequest(format!(
                "plugin version `{version}` is not semver 2.0 (MAJOR.MINOR.PATCH without \
                 leading zeros, then optional -pre.release and +build)"
            )));
        }
        if bytes.len() > self.max_plugin_bytes {
            return Err(Error::TooLarge(format!(
                "plugin of {} bytes is above the limit of {} bytes",
                bytes.len(),
                self.max_plugin_bytes
            )));
        }
        // Before compiling, so a tenant at its quota costs no compilation;
        // checked again, authoritatively, with the write.
        if self.store.get_plugin(tenant, name, version)?.is_none() {
            self.check_plugin_quota(tenant, bytes.len() as u64)?;
        }
        let runtime = self.runtime.clone();
        let (plugin, bytes) =
            tokio::task::spawn_blocking(move || runtime.load(&bytes).map(|p| (p, bytes)))
                .await
                .map_err(Error::Compile)??;
        let writes = self.plugin_quota.writes.clone();
        let _writing = writes.lock().await;
        if let Some(existing) = self.store.get_plugin(tenant, name, version)? {
            if existing.digest == plugin.digest() {
                return Ok((existing, false));
            }
            return Err(Error::Conflict(format!(
                "plugin {name}@{version} already exists with another digest ({}); versions are immutable, upload a new version",
                existing.digest
            )));
        }
        self.check_plugin_quota(tenant, bytes.len() as u64)?;
        let digest = self.store.put_blob(&bytes)?;
        let record = PluginRecord {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version: version.to_string(),
            digest,
            size: bytes.len() as u64,
            created_at: self.clock.now_ms(),
        };
        self.store.put_plugin(&record)?;
        drop(_writing);
        self.sync().await?;
        Ok((record, true))
    }

    /// Refuses a new version of `size` bytes that the tenant's plugin quotas
    /// (its own, else the host's defaults) leave no room for. Every version
    /// counts its full size, even one whose bytes another version shares.
    fn check_plugin_quota(&self, tenant: &str, size: u64) -> Result<()> {
        let quota = self.tenants.tenant(tenant).map(|t| t.quota);
        let max_plugins = quota
            .as_ref()
            .and_then(|q| q.max_plugins)
            .unwrap_or(self.plugin_quota.max_plugins);
        let max_bytes = quota
            .as_ref()
            .and_then(|q| q.plugin_bytes)
            .unwrap_or(self.plugin_quota.plugin_bytes);
        let kept = self.store.list_plugins(tenant)?;
        let used: u64 = kept.iter().map(|p| p.size).sum();
        if kept.len() as u64 >= u64::from(max_plugins) {
            return Err(Error::TooManyPlugins(format!(
                "tenant `{tenant}` keeps {} plugin versions, its `max_plugins` quota is {max_plugins}; delete a version first",
                kept.len()
            )));
        }
        if used.saturating_add(size) > max_bytes {
            return Err(Error::PluginBytesQuota(format!(
                "a plugin of {size} bytes would take tenant `{tenant}`'s plugins to {} bytes, over its `plugin_bytes` quota of {max_bytes} bytes ({used} in use)",
                used.saturating_add(size)
            )));
        }
        Ok(())
    }

    /// A tenant's plugins.
    pub fn list_plugins(&self, tenant: &str) -> Result<PluginList> {
        Ok(self.store.list_plugins(tenant)?)
    }

    /// The versions of one plugin.
    pub fn plugin_versions(&self, tenant: &str, name: &str) -> Result<Vec<PluginRecord>> {
        let versions: Vec<_> = self
            .store
            .list_plugins(tenant)?
            .into_iter()
            .filter(|p| p.name == name)
            .collect();
        if versions.is_empty() {
            return Err(Error::NotFound(format!("plugin `{name}`")));
        }
        Ok(versions)
    }

    /// One plugin version.
    pub fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<PluginRecord> {
        self.store
            .get_plugin(tenant, name, version)?
            .ok_or_else(|| Error::NotFound(format!("plugin {name}@{version}")))
    }

    /// Deletes a plugin version no task uses (409 naming the tasks otherwise).
    pub async fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<()> {
        let record = self.get_plugin(tenant, name, version)?;
        let users: Vec<String> = self
            .list_specs(tenant)?
            .into_iter()
            .filter(|(_, spec)| {
                spec.steps
                    .iter()
                    .any(|s| s.plugin.name == name && s.plugin.version == version)
            })
            .map(|(t, _)| t.name)
            .collect();
        if !users.is_empty() {
            return Err(Error::Conflict(format!(
                "plugin {name}@{version} is used by task(s) {}",
                users.join(", ")
            )));
        }
        let writes = self.plugin_quota.writes.clone();
        let writing = writes.lock().await;
        self.store.delete_plugin(tenant, name, version)?;
        self.scheduler.plugin_deleted(tenant, name, version);
        // Blobs are stored by digest for all tenants: keep one another
        // version (of any tenant) still names. Under the write lock, so an
        // upload of the same bytes cannot land in between.
        let mut still_used = false;
        for t in self.tenants.tenants() {
            if self
                .store
                .list_plugins(&t.name)?
                .iter()
                .any(|p| p.digest == record.digest)
            {
                still_used = true;
                break;
            }
        }
        if !still_used {
            self.store.delete_blob(&record.digest)?;
            self.runtime.evict(&record.digest);
        }
        drop(writing);
        self.sync().await
    }

    // ----------------------------------------------------------------------
    // Tasks
    // ----------------------------------------------------------------------

    fn list_specs(&self, tenant: &str) -> Result<Vec<(TaskRecord, TaskSpec)>> {
        self.store
            .list_tasks(Some(tenant))?
            .into_iter()
            .map(|t| {
                let spec =
                    serde_json::from_value(t.spec.clone()).map_err(|e| record_of(&t.name, e))?;
                Ok((t, spec))
            })
            .collect()
    }

    /// Parses, validates and stores a task definition (YAML or JSON), and
    /// (re)arms its trigger. Returns the record and whether it was created.
    pub async fn put_task(
        &self,
        tenant: &str,
        name: &str,
        body: &str,
    ) -> Result<(TaskRecord, bool)> {
        let spec = task::parse(body)?;
        // Well-formed, but not this resource: an invalid document (422 with
        // its path), like any other field that disagrees with its context.
        if spec.name != name {
            return Err(Error::Invalid {
                path: Some("name".into()),
                message: format!(
                    "the definition is named `{}` but was sent to `{name}`",
                    spec.name
                ),
            });
        }
        task::validate(&spec, &self.caps_for(tenant))?;
        self.check_priority(tenant, spec.priority)?;
        self.check_http_ceiling(tenant, &spec)?;
        self.check_alert_webhook(tenant, &spec).await?;
        for (i, step) in spec.steps.iter().enumerate() {
            if self
                .store
                .get_plugin(tenant, &step.plugin.name, &step.plugin.version)?
                .is_none()
            {
                return Err(Error::Invalid {
                    path: Some(format!("steps[{i}].plugin")),
                    message: format!("plugin {} is not uploaded for this tenant", step.plugin),
                });
            }
        }
        let now = self.clock.now();
        let existing = self.store.get_task(tenant, name)?;
        let created_at = existing
            .as_ref()
            .map_or(now.timestamp_millis(), |t| t.created_at);
        Trigger::compile(spec.trigger.as_ref(), from_ms(created_at)).map_err(|e| {
            Error::Invalid {
                path: Some("trigger".into()),
                message: e.to_string(),
            }
        })?;
        self.check_after_cycle(tenant, &spec)?;
        let record = TaskRecord {
            format: RECORD_FORMAT,
            tenant: tenant.to_string(),
            name: name.to_string(),
            spec: serde_json::to_value(&spec).map_err(|source| Error::Record {
                what: format!("the definition of task `{name}`"),
                source,
            })?,
            source: body.to_string(),
            created_at,
            updated_at: now.timestamp_millis(),
            version: existing.as_ref().map_or(1, |t| t.version + 1),
        };
        self.scheduler.put_task(record.clone()).await?;
        self.sync().await?;
        Ok((record, existing.is_none()))
    }

    /// Refuses an `after` trigger that would close a cycle across tasks.
    fn check_after_cycle(&self, tenant: &str, spec: &TaskSpec) -> Result<()> {
        let Some(after) = spec
            .trigger
            .as_ref()
            .map(|t| t.after.clone())
            .filter(|a| !a.is_empty())
        else {
            return Ok(());
        };
        // The new task first, so the cycle (which must pass through it: the
        // saved tasks have none) is named from it.
        let saved: Vec<(String, Vec<String>)> = self
            .list_specs(tenant)?
            .into_iter()
            .filter(|(t, _)| t.name != spec.name)
            .map(|(t, s)| (t.name, s.trigger.map(|t| t.after).unwrap_or_default()))
            .collect();
        let mut nodes: Vec<(&str, &[String])> = Vec::with_capacity(saved.len() + 1);
        nodes.push((&spec.name, &after));
        nodes.extend(saved.iter().map(|(n, a)| (n.as_str(), a.as_slice())));
        match dag::find_named_cycle(&nodes) {
            None => Ok(()),
            Some(cycle) => Err(Error::Invalid {
                path: Some("trigger.after".into()),
                message: format!(
                    "`after` triggers would form a cycle: {} (each task runs after the next)",
                    cycle.join(" -> ")
                ),
            }),
        }
    }

    /// One task.
    pub fn get_task(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<(TaskRecord, Option<ScheduleState>)> {
        let task = self
            .store
            .get_task(tenant, name)?
            .ok_or_else(|| Error::NotFound(format!("task `{name}`")))?;
        Ok((task, self.store.get_schedule(tenant, name)?))
    }

    /// A tenant's tasks with their schedule states.
    pub fn list_tasks(&self, tenant: &str) -> Result<Vec<(TaskRecord, Option<ScheduleState>)>> {
        self.store
            .list_tasks(Some(tenant))?
            .into_iter()
            .map(|t| {
                let s = self.store.get_schedule(tenant, &t.name)?;
                Ok((t, s))
            })
            .collect()
    }

    /// One page of the tenant's tasks, by name: at most `limit` named after
    /// `after` (a cursor: the last name of the previous page), and the
    /// cursor of the next page when more follow. Schedules are read for the
    /// page only; the task records are all read (the store lists a tenant's
    /// tasks whole), which bounds the answer, not the store work.
    pub fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage> {
        // A page holds at least one task, or it could never move on.
        let limit = limit.max(1);
        let mut tasks = self.store.list_tasks(Some(tenant))?;
        tasks.retain(|t| after.is_none_or(|after| t.name.as_str() > after));
        tasks.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let next = (tasks.len() > limit).then(|| tasks[limit - 1].name.clone());
        tasks.truncate(limit);
        let page = tasks
            .into_iter()
            .map(|t| {
                let s = self.store.get_schedule(tenant, &t.name)?;
                Ok((t, s))
            })
            .collect::<Result<_>>()?;
        Ok((page, next))
    }

    /// Deletes a task (its runs stay until retention removes them).
    pub async fn delete_task(&self, tenant: &str, name: &str) -> Result<()> {
        if !self.scheduler.delete_task(tenant, name).await? {
            return Err(Error::NotFound(format!("task `{name}`")));
        }
        self.sync().await
    }

    /// Pauses or resumes a task's trigger.
    pub async fn set_paused(
        &self,
        tenant: &str,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleState> {
        self.get_task(tenant, name)?;
        let schedule = self.scheduler.set_paused(tenant, name, paused).await?;
        self.sync().await?;
        Ok(schedule)
    }

    /// The next `count` fire instants of a task's trigger.
    pub fn next_fires(&self, tenant: &str, name: &str, count: usize) -> Result<Vec<DateTime<Utc>>> {
        let (task, schedule) = self.get_task(tenant, name)?;
        let spec: TaskSpec = serde_json::from_value(task.spec).map_err(|e| record_of(name, e))?;
        let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(task.created_at))
            .map_err(|e| Error::Internal(e.to_string()))?;
        let Some(first) = schedule.and_then(|s| if s.paused { None } else { s.next_fire }) else {
            return Ok(Vec::new());
        };
        let mut out = vec![from_ms(first)];
        while out.len() < count.min(MAX_PREVIEW) {
            match trigger.next_after(*out.last().expect("non-empty")) {
                Some(next) => out.push(next),
                None => break,
            }
        }
        Ok(out)
    }

    // ----------------------------------------------------------------------
    // Runs
    // ----------------------------------------------------------------------

    /// Triggers a run; answers once it is durable. `false`: an existing run
    /// was returned for a known idempotency key.
    pub async fn trigger(&self, request: TriggerRequest) -> Result<(RunRecord, bool)> {
        if let Some(p) = request.priority
            && p > 9
        {
            return Err(Error::BadRequest(format!("priority {p} is not in 0..=9")));
        }
        if let Some(p) = request.priority {
            self.check_priority(&request.tenant, p)?;
        }
        // Characters, as the API document's `maxLength` counts them.
        if let Some(key) = &request.idempotency_key
            && (key.is_empty() || key.chars().count() > 256)
        {
            return Err(Error::BadRequest(
                "idempotency_key must be 1 to 256 characters".into(),
            ));
        }
        if self
            .tenants
            .tenant(&request.tenant)
            .is_some_and(|t| t.disabled)
        {
            return Err(Error::Forbidden(format!(
                "tenant `{}` is disabled; enable it to trigger runs",
                request.tenant
            )));
        }
        let result = self.scheduler.trigger(request).await?;
        self.sync().await?;
        Ok(result)
    }

    /// One run of this tenant.
    pub fn get_run(&self, tenant: &str, id: &str) -> Result<RunRecord> {
        match self.store.get_run(id)? {
            Some(run) if run.tenant == tenant => Ok(run),
            _ => Err(Error::NotFound(format!("run `{id}`"))),
        }
    }

    /// Runs of this tenant, newest first.
    pub fn list_runs(&self, mut query: RunQuery) -> Result<RunPage> {
        query.limit = query.limit.clamp(1, 1000);
        Ok(self.store.list_runs(&query)?)
    }

    /// A run's captured output.
    pub fn run_logs(&self, tenant: &str, id: &str) -> Result<Vec<AttemptLogs>> {
        self.get_run(tenant, id)?;
        Ok(self.store.logs(id)?)
    }

    /// A run's state changes.
    pub fn run_events(&self, tenant: &str, id: &str) -> Result<Vec<Event>> {
        self.get_run(tenant, id)?;
        Ok(self.store.events(id)?)
    }

    /// Cancels a run.
    pub async fn cancel_run(&self, tenant: &str, id: &str, actor: &str) -> Result<RunRecord> {
        self.get_run(tenant, id)?;
        let run = self.scheduler.cancel(id, actor).await?;
        self.sync().await?;
        Ok(run)
    }

    /// Retries a failed run from its failed steps.
    pub async fn retry_run(&self, tenant: &str, id: &str, actor: &str) -> Result<RunRecord> {
        self.get_run(tenant, id)?;
        let run = self.scheduler.retry(id, actor).await?;
        self.sync().await?;
        Ok(run)
    }

    /// Runs one step of a finished run again, with everything downstream of it.
    pub async fn rerun_step(
        &self,
        tenant: &str,
        id: &str,
        step: &str,
        actor: &str,
    ) -> Result<RunRecord> {
        self.get_run(tenant, id)?;
        let run = self.scheduler.rerun_step(id, step, actor).await?;
        self.sync().await?;
        Ok(run)
    }

    // ----------------------------------------------------------------------
    // Dead letters
    // ----------------------------------------------------------------------

    /// A tenant's dead letters, newest first.
    pub fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>> {
        Ok(self.store.list_dead_letters(tenant, open_only)?)
    }

    fn dead_letter(&self, tenant: &str, id: &str) -> Result<DeadLetter> {
        match self.store.get_dead_letter(id)? {
            Some(d) if d.tenant == tenant => Ok(d),
            _ => Err(Error::NotFound(format!("dead letter `{id}`"))),
        }
    }

    /// Records a person's resolution of a dead letter.
    pub async fn resolve_dead_letter(
        &self,
        tenant: &str,
        id: &str,
        resolution: &str,
    ) -> Result<DeadLetter> {
        let mut dead = self.dead_letter(tenant, id)?;
        if resolution.trim().is_empty() {
            return Err(Error::BadRequest("resolution must not be empty".into()));
        }
        if dead.resolution.is_some() {
            return Err(Error::Conflict(format!(
                "dead letter `{id}` is already resolved"
            )));
        }
        dead.resolution = Some(resolution.to_string());
        dead.resolved_at = Some(self.clock.now_ms());
        self.store.put_dead_letter(&dead)?;
        self.sync().await?;
        Ok(dead)
    }

    /// Requeues a dead-lettered step.
    pub async fn requeue_dead_letter(
        &self,
        tenant: &str,
        id: &str,
        actor: &str,
    ) -> Result<RunRecord> {
        self.dead_letter(tenant, id)?;
        let run = self.scheduler.requeue(id, actor).await?;
        self.sync().await?;
        Ok(run)
    }

    // ----------------------------------------------------------------------
    // Task graph
    // ----------------------------------------------------------------------

    /// A task's DAG rendered in `format` (see [`crate::graph`]). With `run`,
    /// the graph is that run's own definition snapshot (what ran, even if the
    /// task changed or was deleted since) with its step states; the run must
    /// be this tenant's and this task's, else "not found".
    pub fn task_graph(
        &self,
        tenant: &str,
        name: &str,
        run: Option<&str>,
        format: crate::graph::Format,
    ) -> Result<String> {
        let (spec, states) = match run {
            Some(id) => {
                let run = self.get_run(tenant, id)?;
                if run.task != name {
                    return Err(Error::NotFound(format!("run `{id}` of task `{name}`")));
                }
                let mut states = std::collections::BTreeMap::new();
                for step in &run.steps {
                    // The API's names for step states: serde's snake_case.
                    let status =
                        serde_json::to_value(step.status).map_err(|source| Error::Record {
                            what: format!("the state of step `{}`", step.name),
                            source,
                        })?;
                    let status = status
                        .as_str()
                        .map_or_else(|| status.to_string(), str::to_owned);
                    states.insert(step.name.clone(), status);
                }
                (run.spec, Some(states))
            }
            None => (self.get_task(tenant, name)?.0.spec, None),
        };
        let spec: TaskSpec = serde_json::from_value(spec).map_err(|e| record_of(name, e))?;
        Ok(crate::graph::render(&spec, states.as_ref(), format))
    }

    // ----------------------------------------------------------------------
    // Cron preview
    // ----------------------------------------------------------------------

    /// The next `count` instants of a cron expression in a zone, after `from` (default now).
    pub fn cron_next(
        &self,
        expr: &str,
        tz: &str,
        from: Option<DateTime<Utc>>,
        count: usize,
    ) -> Result<Vec<DateTime<Utc>>> {
        let cron = CronSchedule::parse(expr, tz).map_err(|e| Error::Invalid {
            path: Some("expr".into()),
            message: e.to_string(),
        })?;
        Ok(cron.upcoming(
            from.unwrap_or_else(|| self.clock.now()),
            count.clamp(1, MAX_PREVIEW),
        ))
    }
}

/// A page of tasks with their schedules, and the cursor of the next page.
pub type TaskPage = (Vec<(TaskRecord, Option<ScheduleState>)>, Option<String>);

/// Re-exported for the API: formats an instant in a zone with its weekday.
pub use schedule::describe;

#[cfg(test)]
mod tests {
    #[test]
    fn names_and_versions_are_checked() {
        use crate::task::{is_valid_name as valid_name, is_valid_version as valid_version};
        assert!(valid_name("extract-orders"));
        assert!(!valid_name("-x"));
        assert!(!valid_name("a/b"));
        assert!(valid_version("1.2.0"));
        assert!(valid_version("1.0.0-rc.1"));
        assert!(!valid_version("1.2"));
        assert!(!valid_version("v1.2.3"));
        // Semver has no leading zeros; a task could not name such a version.
        assert!(!valid_version("01.2.3"));
        assert!(!valid_version("1.0.0-"));
        assert!("p@1.0.0-rc.1".parse::<crate::task::PluginRef>().is_ok());
    }
}
