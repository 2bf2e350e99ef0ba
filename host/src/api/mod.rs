//! The HTTP API (SPEC §7): the only module that names axum. It owns routing,
//! authentication, request/response shapes and the mapping of errors to
//! statuses; every operation itself is a call on [`crate::service::Ax`].
//!
//! - [`router`] builds the whole app from an [`ApiState`]; tests drive it
//!   with `oneshot`, `ax serve` hands it to [`serve`].
//! - [`auth`]: the bearer-token check and the tenant a request acts on.
//! - [`error`]: one error enum, one status/code table.
//! - [`views`]: the JSON shapes of the answers.
//! - `dashboard`: the web dashboard's embedded files (`GET /`).
//! - [`openapi`]: the OpenAPI document, generated from the handlers' annotations.
//! - `connections`: the accept loop [`serve`] runs — connection cap shared
//!   out per address and per token (`connections::admission`), idle, head
//!   and body timeouts.
//! - [`contract`]: what the document adds to them — every error status of
//!   every route, the patterns and ranges validation enforces.
//!
//! Route reference with examples: docs/API.md.

mod alerts;
pub mod auth;
mod connections;
pub mod contract;
mod dashboard;
pub mod error;
mod extract;
mod metrics;
pub mod openapi;
mod ops;
mod plugins;
mod records;
pub mod request_id;
mod runs;
mod secrets;
mod tasks;
pub mod tenants;
pub mod views;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Extension, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use tokio_util::sync::CancellationToken;

pub use self::error::ApiError;

/// Largest body of any route but plugin upload (task definitions, trigger inputs).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Largest body of a batch route (bulk trigger, bulk apply): up to 1000
/// items, each at most [`MAX_BODY_BYTES`] as it is alone, and 16 MiB in all.
pub const MAX_BATCH_BODY_BYTES: usize = 16 << 20;
/// Room for the multipart framing around an uploaded plugin, over the plugin limit.
pub(super) const MULTIPART_OVERHEAD: usize = 64 << 10;

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    /// The operations of ax.
    pub ax: crate::service::Ax,
    /// sha256 of the admin token (the token itself is never kept).
    pub admin_token_sha256: [u8; 32],
    /// sha256 of the metrics token (`metrics_token`): reads `GET /metrics`
    /// and nothing else. `None`: only the admin token reads it.
    pub metrics_token_sha256: Option<[u8; 32]>,
}

/// Every route of the API: its path template and its handlers. The one
/// table [`router`] is built from, and which the OpenAPI sync test reads
/// ([`route_paths`]): add routes here, each with its `#[utoipa::path]` and
/// its entry in `openapi::ApiDoc`.
fn routes(plugin_limit: usize) -> Vec<(&'static str, MethodRouter<ApiState>)> {
    vec![
        (
            "/v1/plugins",
            get(plugins::list)
                .post(plugins::upload)
                .layer(DefaultBodyLimit::max(plugin_limit)),
        ),
        ("/v1/plugins/{name}", get(plugins::versions)),
        (
            "/v1/plugins/{name}/{version}",
            get(plugins::show).delete(plugins::delete),
        ),
        (
            "/v1/plugins/{name}/tags/{tag}",
            put(plugins::put_tag).delete(plugins::delete_tag),
        ),
        ("/v1/tasks", get(tasks::list)),
        (
            "/v1/tasks:apply",
            post(tasks::apply).layer(DefaultBodyLimit::max(MAX_BATCH_BODY_BYTES)),
        ),
        (
            "/v1/tasks/{name}",
            get(tasks::show).put(tasks::put).delete(tasks::delete),
        ),
        ("/v1/tasks/{name}/pause", post(tasks::pause)),
        ("/v1/tasks/{name}/resume", post(tasks::resume)),
        ("/v1/tasks/{name}/next", get(tasks::next)),
        ("/v1/tasks/{name}/graph", get(tasks::graph)),
        ("/v1/tasks/{name}/runs", post(runs::trigger)),
        (
            "/v1/tasks/{name}/runs:batch",
            post(runs::trigger_batch).layer(DefaultBodyLimit::max(MAX_BATCH_BODY_BYTES)),
        ),
        ("/v1/runs", get(runs::list)),
        ("/v1/runs/{id}", get(runs::show)),
        ("/v1/runs/{id}/logs", get(runs::logs)),
        ("/v1/runs/{id}/events", get(runs::events)),
        ("/v1/runs/{id}/cancel", post(runs::cancel)),
        ("/v1/runs/{id}/retry", post(runs::retry)),
        ("/v1/runs/{id}/steps/{step}/rerun", post(runs::rerun_step)),
        (
            "/v1/runs/{id}/steps/{step}/attempts/{n}/record",
            get(records::record),
        ),
        (
            "/v1/runs/{id}/steps/{step}/attempts/{n}/component",
            get(records::component),
        ),
        ("/v1/dead-letters", get(runs::dead_letters)),
        ("/v1/dead-letters/{id}/resolve", post(runs::resolve)),
        ("/v1/dead-letters/{id}/requeue", post(runs::requeue)),
        ("/v1/alerts", get(alerts::list)),
        ("/v1/alerts/{id}/retry", post(alerts::retry)),
        ("/v1/secrets", get(secrets::list)),
        (
            "/v1/secrets/{name}",
            put(secrets::put).delete(secrets::delete),
        ),
        ("/v1/cron/next", get(ops::cron_next)),
        ("/v1/tenants", get(tenants::list).post(tenants::create)),
        (
            "/v1/tenants/{tenant}",
            get(tenants::show).put(tenants::update),
        ),
        ("/v1/tenants/{tenant}/quota", put(tenants::quota)),
        ("/v1/tenants/{tenant}/disable", post(tenants::disable)),
        ("/v1/tenants/{tenant}/enable", post(tenants::enable)),
        (
            "/v1/tenants/{tenant}/tokens",
            get(tenants::list_tokens).post(tenants::create_token),
        ),
        (
            "/v1/tenants/{tenant}/tokens/{id}",
            delete(tenants::revoke_token),
        ),
        ("/v1/tenants/{tenant}/usage", get(tenants::usage)),
        (openapi::OPENAPI_PATH, get(openapi::serve_document)),
        ("/healthz", get(ops::healthz)),
        ("/readyz", get(ops::readyz)),
        ("/metrics", get(metrics::scrape)),
    ]
}

/// The path templates of every route, in table order (for tests and tools
/// that must list what the router serves).
pub fn route_paths() -> Vec<&'static str> {
    routes(0).into_iter().map(|(path, _)| path).collect()
}

/// The whole HTTP app: `/v1` routes (bearer token), `/healthz`, `/readyz`,
/// `/metrics`, `/v1/openapi.json`, and the dashboard (`/`, `/ui/*`; HTML
/// and assets, outside the API document).
pub fn router(state: ApiState) -> Router {
    let http_metrics = Arc::new(crate::metrics::HttpMetrics::default());
    let plugin_limit = state.ax.max_plugin_bytes.saturating_add(MULTIPART_OVERHEAD);
    routes(plugin_limit)
        .into_iter()
        .fold(Router::new(), |router, (path, handlers)| {
            router.route(path, handlers)
        })
        .merge(dashboard::routes())
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            http_metrics.clone(),
            observe,
        ))
        .layer(Extension(http_metrics))
        .with_state(state)
}

/// Serves `router(state)` on `listener`, each connection bounded by
/// `limits` (cap, idle, head and body timeouts: the `connections` module),
/// until `shutdown` fires; then lets requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    limits: crate::config::ConnectionsConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    connections::serve(listener, router(state), limits, shutdown).await
}

/// Logs every request, and runs its handler as a task of its own: a panic in
/// a handler becomes a 500 in the error shape rather than a dropped
/// connection, and a client hanging up does not abort a write half-way.
async fn observe(
    State(http): State<Arc<crate::metrics::HttpMetrics>>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // The template (`/v1/runs/{id}`), so metric labels stay bounded.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let id = request_id::of(req.headers());
    // Every line logged while answering carries the request id.
    let span = tracing::info_span!("request", request_id = %id, %method, %route);
    let started = Instant::now();
    let handler = request_id::scope(
        id.clone(),
        tracing::Instrument::instrument(next.run(req), span),
    );
    let mut response = match tokio::spawn(handler).await {
        Ok(response) => response,
        Err(e) => request_id::sync_scope(id.clone(), || {
            ApiError::Internal(format!("the handler of {method} {path} failed: {e}"))
                .into_response()
        }),
    };
    if let Ok(value) = axum::http::HeaderValue::from_str(&id) {
        response.headers_mut().insert(request_id::HEADER, value);
    }
    let status = response.status().as_u16();
    http.count(method.as_str(), &route, status);
    // Microsecond precision is plenty for a log line.
    let ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    if response.status().is_server_error() {
        tracing::warn!(request_id = %id, %method, %path, status, ms, "request");
    } else if method == axum::http::Method::GET && response.status().is_success() {
        // Polling clients (`ax trigger --wait`) would flood the log at info.
        tracing::debug!(request_id = %id, %method, %path, status, ms, "request");
    } else {
        tracing::info!(request_id = %id, %method, %path, status, ms, "request");
    }
    response
}
