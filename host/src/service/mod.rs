//! The operations of ax as one facade over the store, the runtime and the
//! scheduler: what the HTTP API (and, through it, the CLI) can ask for. Every
//! call is scoped to a tenant; an object of another tenant is "not found".
//!
//! Write paths that answer a client wait for the store's sync ticket, so a
//! 2xx means the change is on disk.

//!
//! # Layout
//! One file per concept, each an `impl Ax` block: `plugins` (upload, list,
//! delete), `tasks` (save, show, list, delete, pause), `runs` (trigger, show,
//! list, run control), `dead_letters`, `graph` (render a task's DAG),
//! `preview` (next fires, cron preview), `tenants` (administration, usage)
//! and `capabilities` (secrets, the HTTP ceiling). This file holds the facade
//! itself and its error.

mod alerts;
mod capabilities;
mod dead_letters;
mod graph;
mod plugins;
mod preview;
mod records;
mod runs;
mod tasks;
mod tenants;

use std::sync::Arc;

use crate::runtime::{self, Runtime};
use crate::schedule;
use crate::scheduler::{self, Clock, Scheduler};
use crate::store::{self, Store};
use crate::task::{self, Caps};

pub use self::plugins::{
    DEFAULT_MAX_COMPILING_PER_TENANT, DEFAULT_MAX_PLUGIN_BYTES, DEFAULT_MAX_PLUGINS_PER_TENANT,
    DEFAULT_PLUGIN_BYTES_PER_TENANT, MAX_TAGS_PER_PLUGIN, MAX_TAGS_PER_TENANT, PluginList,
    PluginQuota,
};
pub use self::preview::{MAX_PREVIEW, describe};
pub use self::tasks::TaskPage;
pub use self::tenants::{
    StorageUsage, TenantSpec, UsageReport, UsageTotals, WindowUsage, load_registry,
};

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
    /// A trigger's idempotency key belongs to a run retention has deleted:
    /// answered 410 with the run's id.
    #[error("{message}")]
    RunDeleted {
        /// What happened.
        message: String,
        /// The deleted run's id.
        run: String,
    },
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
    /// A stored task definition does not read back as one (a damaged
    /// record, or one written by another program): a fault of the host.
    #[error("internal error: the stored definition of task `{task}`: {source}")]
    Definition {
        /// The task (of a run, for a run's definition).
        task: String,
        /// Where the definition is wrong.
        #[source]
        source: crate::task::SpecError,
    },
    /// A saved task's trigger no longer compiles (it did when it was saved).
    #[error("internal error: the trigger of task `{task}`: {source}")]
    Trigger {
        /// The task.
        task: String,
        /// Why it does not compile.
        #[source]
        source: schedule::Error,
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
    /// A run's input is larger than its tenant's `max_input_bytes`.
    #[error("{0}")]
    InputTooLarge(String),
    /// A new run would take the tenant's stored run data over its
    /// `run_bytes` quota.
    #[error("{0}")]
    RunBytesQuota(String),
    /// The tenant has as many versions compiling as it may at once.
    #[error("{0}")]
    CompileBusy(String),
    /// Items of a batch (bulk trigger, bulk apply) are invalid, each with
    /// its own error; nothing was changed.
    #[error("{}", items_message(what, *total, errors))]
    Items {
        /// What the items are (`runs`, `tasks`).
        what: &'static str,
        /// Items in the request.
        total: usize,
        /// The invalid ones, by index (never empty).
        errors: Vec<ItemError>,
    },
}

/// One invalid item of a batch.
#[derive(Debug)]
pub struct ItemError {
    /// Its place in the request, from 0.
    pub index: usize,
    /// The name the client gave it (a bulk apply's file name).
    pub file: Option<String>,
    /// What is wrong with it.
    pub error: Box<Error>,
}

impl ItemError {
    pub(crate) fn new(index: usize, file: Option<String>, error: Error) -> Self {
        Self {
            index,
            file,
            error: Box::new(error),
        }
    }
}

fn items_message(what: &str, total: usize, errors: &[ItemError]) -> String {
    let first = errors.first().map_or_else(String::new, |e| {
        let at = e
            .file
            .clone()
            .unwrap_or_else(|| format!("{what}[{}]", e.index));
        format!("; first, {at}: {}", e.error)
    });
    format!(
        "{} of the {total} {what} are invalid, so none was applied{first}",
        errors.len()
    )
}

/// Items one batch request may hold (bulk triggers, bulk apply).
pub const MAX_BATCH_RUNS: usize = 1000;
/// Task definitions one bulk apply may hold.
pub const MAX_BATCH_TASKS: usize = 1000;

/// A batch holds 1 to `max` items; outside that it is invalid (422 at the
/// list, as the API document's `minItems`/`maxItems` state), and the
/// message says how to split a larger one.
pub(crate) fn check_batch_len(len: usize, max: usize, what: &str) -> Result<()> {
    if len == 0 {
        return Err(Error::Invalid {
            path: Some(what.to_string()),
            message: format!("the batch is empty: send 1 to {max} {what}"),
        });
    }
    if len > max {
        return Err(Error::Invalid {
            path: Some(what.to_string()),
            message: format!(
                "a batch holds at most {max} {what}; this one has {len}: split it into batches of {max} or fewer"
            ),
        });
    }
    Ok(())
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
            scheduler::Error::RunBytesQuota(m) => Error::RunBytesQuota(m),
            scheduler::Error::RunDeleted { ref run, .. } => Error::RunDeleted {
                run: run.clone(),
                message: e.to_string(),
            },
            scheduler::Error::Params(e) => Error::BadRequest(e.to_string()),
            scheduler::Error::Store(e) => Error::Store(e),
            other => Error::Scheduler(other),
        }
    }
}

impl From<scheduler::admission::RequestRefusal> for Error {
    fn from(refusal: scheduler::admission::RequestRefusal) -> Self {
        use scheduler::admission::RequestRefusal as R;
        match refusal {
            R::PriorityRange(_) | R::IdempotencyKey => Error::BadRequest(refusal.to_string()),
            R::PriorityCeiling(message) => Error::Invalid {
                path: Some("priority".into()),
                message,
            },
            R::InputTooLarge { .. } => Error::InputTooLarge(refusal.to_string()),
            R::TenantDisabled { .. } => Error::Forbidden(refusal.to_string()),
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
fn record_of(task: &str, source: crate::task::SpecError) -> Error {
    Error::Definition {
        task: task.to_owned(),
        source,
    }
}

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

impl Ax {
    /// Attempts the scheduler runs at once.
    pub fn scheduler_concurrency(&self) -> usize {
        self.concurrency
    }

    async fn sync(&self) -> Result<()> {
        self.store.sync_ticket().wait().await.map_err(Error::from)
    }
}
