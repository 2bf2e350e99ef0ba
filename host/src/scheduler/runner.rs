//! How the scheduler runs an attempt: through the [`Runner`] trait, so its
//! tests can use a scripted fake and production uses the wasm runtime.
//!
//! The production runner also resolves what a step declares
//! ([`StepGrants`]) into what the attempt gets ([`Grants`]): secret values
//! read from the tenant's secrets, the key-value store attached with the
//! tenant's quota.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use std::collections::BTreeMap;

use crate::capability::{Grants, KvGrant, KvLimits, KvNamespace, StepGrants, http};
use crate::model::{AttemptContext, AttemptReport, Limits};
use crate::runtime::Runtime;
use crate::store::Store;
use crate::tenant::{Registry, TenantRecord};

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
    kv_limits: KvLimits,
    /// Live tenant records: their KV quota and HTTP ceiling apply per attempt.
    tenants: Option<Registry>,
}

impl WasmRunner {
    /// A runner loading plugin blobs from `store` into `runtime`.
    pub fn new(runtime: Runtime, store: Arc<dyn Store>) -> Self {
        Self {
            runtime,
            store,
            kv_limits: KvLimits::default(),
            tenants: None,
        }
    }

    /// Applies each tenant's current record to its attempts: its `kv_bytes`
    /// quota, and its HTTP ceiling (a step keeps only the patterns its tenant
    /// still allows, should the admin have narrowed the list since the task
    /// was saved).
    pub fn with_tenants(mut self, tenants: Registry) -> Self {
        self.tenants = Some(tenants);
        self
    }

    /// Sets the key-value caps and the default per-tenant quota.
    pub fn with_kv_limits(mut self, kv_limits: KvLimits) -> Self {
        self.kv_limits = kv_limits;
        self
    }
}

/// Resolves a step's declarations for one attempt: reads the listed secrets
/// of the tenant (a listed secret the tenant has not set reads as absent),
/// attaches the key-value store in the step's scope, and applies the tenant's
/// record when there is one (its KV quota; its HTTP ceiling).
pub fn resolve_grants(
    store: &dyn Store,
    ctx: &AttemptContext,
    declared: &StepGrants,
    mut kv_limits: KvLimits,
    tenant: Option<&TenantRecord>,
) -> Result<Grants, String> {
    let mut allow_http = declared.allow_http.clone();
    if let Some(tenant) = tenant {
        if let Some(bytes) = tenant.quota.kv_bytes {
            kv_limits.quota_bytes = bytes;
        }
        if !allow_http.is_empty() {
            let ceiling = http::parse_list(&tenant.allow_http).unwrap_or_default();
            allow_http.retain(|p| http::within_ceiling(&ceiling, std::slice::from_ref(p)).is_ok());
        }
    }
    let secrets_store = store.secrets();
    let mut secrets = BTreeMap::new();
    for name in &declared.secrets {
        let value = secrets_store
            .get_secret(&ctx.tenant, name)
            .map_err(|e| format!("reading secret `{name}`: {e}"))?;
        secrets.insert(name.clone(), value);
    }
    let kv = declared.kv.map(|scope| KvGrant {
        store: store.kv(),
        namespace: KvNamespace::new(&ctx.tenant, &ctx.task, scope),
        limits: kv_limits,
    });
    Ok(Grants {
        allow_http,
        http_limits: declared.http_limits,
        config: declared.config.clone(),
        secrets,
        kv,
    })
}

impl Runner for WasmRunner {
    fn run(&self, request: AttemptRequest) -> RunFuture {
        let (runtime, store) = (self.runtime.clone(), self.store.clone());
        let kv_limits = self.kv_limits;
        let tenant = self
            .tenants
            .as_ref()
            .and_then(|t| t.tenant(&request.ctx.tenant));
        Box::pin(async move {
            let grants = resolve_grants(
                &*store,
                &request.ctx,
                &request.grants,
                kv_limits,
                tenant.as_ref(),
            )?;
            let plugin = match runtime.get(&request.digest) {
                Some(plugin) => plugin,
                None => {
                    let digest = request.digest.clone();
                    let rt = runtime.clone();
                    let store = store.clone();
                    // Loading the cached artifact (or compiling) blocks. The
                    // artifact needs no blob read: a plugin evicted from
                    // memory comes back in about a millisecond.
                    tokio::task::spawn_blocking(move || {
                        if let Some(plugin) = rt.load_cached(&digest).map_err(|e| e.to_string())? {
                            return Ok(plugin);
                        }
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
            let report = runtime
                .run_with(
                    &plugin,
                    &request.ctx,
                    &request.input,
                    &request.limits,
                    &grants,
                    Some(&request.cancel),
                )
                .await
                .map_err(|e| e.to_string())?;
            // KV writes are durable before the attempt is reported: a step
            // recorded as done never loses the state it wrote (a crash before
            // this point makes the attempt `lost`, and it runs again).
            if grants.kv.is_some() {
                store
                    .sync_ticket()
                    .wait()
                    .await
                    .map_err(|e| format!("making key-value writes durable: {e}"))?;
            }
            Ok(report)
        })
    }
}
