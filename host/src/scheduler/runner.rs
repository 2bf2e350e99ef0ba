//! How the scheduler runs an attempt: through the [`Runner`] trait, so its
//! tests can use a scripted fake and production uses the wasm runtime (the
//! adapter, `server::WasmRunner`, lives in the wiring: the scheduler does not
//! know which sandbox runs its attempts).
//!
//! A runner ends an attempt in one of two ways: an [`AttemptReport`] for
//! everything the plugin did (succeeded, failed, trapped, timed out), or a
//! [`HostFault`] when the host could not do its part (a store read, loading
//! the plugin, making its writes durable). Only the second is the host's
//! problem; the scheduler records it as a fatal failure of the attempt.

use std::future::Future;
use std::pin::Pin;

use tokio_util::sync::CancellationToken;

use crate::capability::StepGrants;
use crate::model::{AttemptContext, AttemptReport, Limits};
use crate::store;

/// Everything needed to run one attempt.
#[derive(Clone, Debug)]
pub struct AttemptRequest {
    /// sha256 of the plugin component.
    pub digest: String,
    /// The context the plugin sees.
    pub ctx: AttemptContext,
    /// Resolved input, JSON text.
    pub input: String,
    /// Limits for this attempt.
    pub limits: Limits,
    /// Capabilities the step declares.
    pub grants: StepGrants,
    /// Fires when the run is cancelled.
    pub cancel: CancellationToken,
}

/// Why the host could not run an attempt to its end (its texts are what the
/// attempt's `error` shows after `host fault: `).
#[derive(Debug, thiserror::Error)]
pub enum HostFault {
    /// A secret the step lists could not be read.
    #[error("reading secret `{name}`: {source}")]
    Secret {
        /// The secret's name.
        name: String,
        /// What the store answered.
        #[source]
        source: store::Error,
    },
    /// The plugin's component is not in the store (its version was saved,
    /// its blob is gone).
    #[error("plugin blob {digest} is missing")]
    MissingBlob {
        /// The sha256 of the component.
        digest: String,
    },
    /// A store read the attempt needs failed (the plugin's blob).
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The sandbox could not load or start the plugin (an artifact that does
    /// not load, no instance slot, limits it refuses). Boxed: the scheduler
    /// does not name the sandbox.
    #[error(transparent)]
    Sandbox(Box<dyn std::error::Error + Send + Sync>),
    /// The plugin version was still compiling when the attempt had waited
    /// for it as long as it may.
    #[error(
        "plugin {digest} was still compiling after {waited_ms} ms; the run can be retried once `ax plugin show` says ready"
    )]
    StillCompiling {
        /// The sha256 of the component.
        digest: String,
        /// How long the attempt waited, ms.
        waited_ms: u64,
    },
    /// The blocking task that loads the plugin panicked or was cancelled.
    #[error("loading the plugin: {0}")]
    Loader(#[source] tokio::task::JoinError),
    /// The key-value writes of the attempt could not be made durable, so its
    /// result cannot be recorded as done.
    #[error("making key-value writes durable: {0}")]
    Durability(#[source] store::Error),
}

/// A boxed future returned by [`Runner::run`].
pub type RunFuture = Pin<Box<dyn Future<Output = Result<AttemptReport, HostFault>> + Send>>;

/// Runs attempts. `Err` is a [`HostFault`] (the plugin could not even be
/// started, or its result not kept), which the scheduler records as a fatal
/// failure of the attempt.
pub trait Runner: Send + Sync + 'static {
    /// Runs one attempt to its end.
    fn run(&self, request: AttemptRequest) -> RunFuture;
}
