//! How the scheduler runs an attempt: through the [`Runner`] trait, so its
//! tests can use a scripted fake and production uses the wasm runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::model::{AttemptContext, AttemptReport, Limits};
use crate::runtime::Runtime;
use crate::store::Store;

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
    /// Fires when the run is cancelled.
    pub cancel: CancellationToken,
}

/// A boxed future returned by [`Runner::run`].
pub type RunFuture = Pin<Box<dyn Future<Output = Result<AttemptReport, String>> + Send>>;

/// Runs attempts. `Err` is a host fault (the plugin could not even be
/// started), which the scheduler records as a fatal failure of the attempt.
pub trait Runner: Send + Sync + 'static {
    /// Runs one attempt to its end.
    fn run(&self, request: AttemptRequest) -> RunFuture;
}

/// The production runner: plugins from the store, run in the wasm sandbox.
#[derive(Clone)]
pub struct WasmRunner {
    runtime: Runtime,
    store: Arc<dyn Store>,
}

impl WasmRunner {
    /// A runner loading plugin blobs from `store` into `runtime`.
    pub fn new(runtime: Runtime, store: Arc<dyn Store>) -> Self {
        Self { runtime, store }
    }
}

impl Runner for WasmRunner {
    fn run(&self, request: AttemptRequest) -> RunFuture {
        let (runtime, store) = (self.runtime.clone(), self.store.clone());
        Box::pin(async move {
            let plugin = match runtime.get(&request.digest) {
                Some(plugin) => plugin,
                None => {
                    let digest = request.digest.clone();
                    let rt = runtime.clone();
                    // Compiling (or loading the cached artifact) blocks.
                    tokio::task::spawn_blocking(move || {
                        let bytes = store
                            .get_blob(&digest)
                            .map_err(|e| e.to_string())?
                            .ok_or_else(|| format!("plugin blob {digest} is missing"))?;
                        rt.load(&bytes).map_err(|e| e.to_string())
                    })
                    .await
                    .map_err(|e| format!("loading the plugin: {e}"))??
                }
            };
            runtime
                .run(
                    &plugin,
                    &request.ctx,
                    &request.input,
                    &request.limits,
                    Some(&request.cancel),
                )
                .await
                .map_err(|e| e.to_string())
        })
    }
}
