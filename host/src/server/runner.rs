//! The production [`Runner`]: plugins from the store, run in the wasm
//! sandbox ([`crate::runtime`]). It adapts the runtime to the scheduler's
//! trait here, in the wiring, so the scheduler does not name the sandbox.
//!
//! It also resolves what a step declares ([`StepGrants`]) into what the
//! attempt gets ([`Grants`]): secret values read from the tenant's secrets,
//! the key-value store attached with the tenant's quota, the HTTP allow-list
//! narrowed to the tenant's current ceiling. A step with `record:` runs
//! recorded, and the record is stored with the attempt when its mode keeps it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::capability::{Grants, KvGrant, KvLimits, KvNamespace, StepGrants, http};
use crate::model::AttemptContext;
use crate::model::record::{AttemptRecord, RecordMode};
use crate::runtime::Runtime;
use crate::scheduler::{AttemptRequest, HostFault, RunFuture, Runner};
use crate::store::Store;
use crate::tenant::{Registry, TenantRecord};

/// How long an attempt waits for its plugin's background compilation at
/// most (or its step's timeout, when longer) before it fails: an upload is
/// bounded to `max_plugin_mb`, whose compilation takes about a minute on a
/// loaded 2-core host (docs/PERFORMANCE.md, "Compile (issue 16)"); ten
/// minutes is `ax plugin push --wait`'s default too.
const COMPILE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

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
) -> Result<Grants, HostFault> {
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
            .map_err(|source| HostFault::Secret {
                name: name.clone(),
                source,
            })?;
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

/// Stores an attempt's record. A record that cannot be stored is lost, not
/// the attempt: its outcome stands, and the operator's log says why.
fn keep_record(store: &dyn Store, record: &AttemptRecord) {
    if let Err(e) = store.put_record(record) {
        tracing::warn!(error = %e, "the attempt's record could not be stored");
    }
}

/// A runtime error as the scheduler sees it: a fault of the sandbox.
fn sandbox(e: crate::runtime::Error) -> HostFault {
    HostFault::Sandbox(Box::new(e))
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
            let loaded = runtime.get(&request.digest);
            let compiling = loaded
                .is_none()
                .then(|| runtime.compilation(&request.digest))
                .flatten();
            let plugin = match (loaded, compiling) {
                (Some(plugin), _) => plugin,
                // Uploaded and compiling in the background: wait for it
                // (not counted in the attempt's own time), then run with
                // full limits.
                (None, Some(compilation)) => {
                    let wait = request.limits.timeout.max(COMPILE_WAIT);
                    tokio::time::timeout(wait, compilation.finished())
                        .await
                        .map_err(|_| HostFault::StillCompiling {
                            digest: request.digest.clone(),
                            waited_ms: wait.as_millis() as u64,
                        })?
                        .map_err(sandbox)?
                }
                (None, None) => {
                    let digest = request.digest.clone();
                    let rt = runtime.clone();
                    let store = store.clone();
                    // Loading the cached artifact (or compiling) blocks. The
                    // artifact needs no blob read: a plugin evicted from
                    // memory comes back in about a millisecond.
                    tokio::task::spawn_blocking(move || {
                        if let Some(plugin) = rt.load_cached(&digest).map_err(sandbox)? {
                            return Ok(plugin);
                        }
                        let bytes =
                            store
                                .get_blob(&digest)?
                                .ok_or_else(|| HostFault::MissingBlob {
                                    digest: digest.clone(),
                                })?;
                        rt.load(&bytes).map_err(sandbox)
                    })
                    .await
                    .map_err(HostFault::Loader)??
                }
            };
            let mode = request.grants.record;
            let report = if mode == RecordMode::Off {
                runtime
                    .run_with(
                        &plugin,
                        &request.ctx,
                        &request.input,
                        &request.limits,
                        &grants,
                        Some(&request.cancel),
                    )
                    .await
                    .map_err(sandbox)?
            } else {
                let (report, record) = runtime
                    .run_recorded(
                        &plugin,
                        &request.digest,
                        &request.ctx,
                        &request.input,
                        &request.limits,
                        &grants,
                        Some(&request.cancel),
                    )
                    .await
                    .map_err(sandbox)?;
                if mode.keeps(report.outcome) {
                    keep_record(&*store, &record);
                }
                report
            };
            // KV writes are durable before the attempt is reported: a step
            // recorded as done never loses the state it wrote (a crash before
            // this point makes the attempt `lost`, and it runs again).
            if grants.kv.is_some() {
                store
                    .sync_ticket()
                    .wait()
                    .await
                    .map_err(HostFault::Durability)?;
            }
            Ok(report)
        })
    }
}
