//! The HTTP API (SPEC §7): the only module that names axum. It owns routing,
//! authentication, request/response shapes and the mapping of errors to
//! statuses; every operation itself is a call on [`crate::service::Ax`].
//!
//! - [`router`] builds the whole app from an [`ApiState`]; tests drive it
//!   with `oneshot`, `ax serve` hands it to [`serve`].
//! - [`auth`]: the bearer-token check and the tenant a request acts on.
//! - [`error`]: one error enum, one status/code table.
//! - [`views`]: the JSON shapes of the answers.
//!
//! Route reference with examples: docs/API.md.

pub mod auth;
pub mod error;
mod extract;
mod ops;
mod plugins;
mod runs;
mod secrets;
mod tasks;
pub mod tenants;
pub mod views;

use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use tokio_util::sync::CancellationToken;

pub use self::error::ApiError;

/// Largest body of any route but plugin upload (task definitions, trigger inputs).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Room for the multipart framing around an uploaded plugin, over the plugin limit.
const MULTIPART_OVERHEAD: usize = 64 << 10;

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    /// The operations of ax.
    pub ax: crate::service::Ax,
    /// sha256 of the admin token (the token itself is never kept).
    pub admin_token_sha256: [u8; 32],
}

/// The whole HTTP app: `/v1` routes (bearer token), `/healthz`, `/readyz`.
pub fn router(state: ApiState) -> Router {
    let plugin_limit = state.ax.max_plugin_bytes.saturating_add(MULTIPART_OVERHEAD);
    Router::new()
        .route(
            "/v1/plugins",
            get(plugins::list)
                .post(plugins::upload)
                .layer(DefaultBodyLimit::max(plugin_limit)),
        )
        .route("/v1/plugins/{name}", get(plugins::versions))
        .route(
            "/v1/plugins/{name}/{version}",
            get(plugins::show).delete(plugins::delete),
        )
        .route("/v1/tasks", get(tasks::list))
        .route(
            "/v1/tasks/{name}",
            get(tasks::show).put(tasks::put).delete(tasks::delete),
        )
        .route("/v1/tasks/{name}/pause", post(tasks::pause))
        .route("/v1/tasks/{name}/resume", post(tasks::resume))
        .route("/v1/tasks/{name}/next", get(tasks::next))
        .route("/v1/tasks/{name}/graph", get(tasks::graph))
        .route("/v1/tasks/{name}/runs", post(runs::trigger))
        .route("/v1/runs", get(runs::list))
        .route("/v1/runs/{id}", get(runs::show))
        .route("/v1/runs/{id}/logs", get(runs::logs))
        .route("/v1/runs/{id}/events", get(runs::events))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/retry", post(runs::retry))
        .route("/v1/runs/{id}/steps/{step}/rerun", post(runs::rerun_step))
        .route("/v1/dead-letters", get(runs::dead_letters))
        .route("/v1/dead-letters/{id}/resolve", post(runs::resolve))
        .route("/v1/dead-letters/{id}/requeue", post(runs::requeue))
        .route("/v1/secrets", get(secrets::list))
        .route(
            "/v1/secrets/{name}",
            axum::routing::put(secrets::put).delete(secrets::delete),
        )
        .route("/v1/cron/next", get(ops::cron_next))
        .route("/v1/tenants", get(tenants::list).post(tenants::create))
        .route(
            "/v1/tenants/{tenant}",
            get(tenants::show).put(tenants::update),
        )
        .route("/v1/tenants/{tenant}/quota", put(tenants::quota))
        .route("/v1/tenants/{tenant}/disable", post(tenants::disable))
        .route("/v1/tenants/{tenant}/enable", post(tenants::enable))
        .route(
            "/v1/tenants/{tenant}/tokens",
            get(tenants::list_tokens).post(tenants::create_token),
        )
        .route(
            "/v1/tenants/{tenant}/tokens/{id}",
            delete(tenants::revoke_token),
        )
        .route("/v1/tenants/{tenant}/usage", get(tenants::usage))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(observe))
        .with_state(state)
}

/// Serves `router(state)` on `listener` until `shutdown` fires, then lets
/// requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Logs every request, and runs its handler as a task of its own: a panic in
/// a handler becomes a 500 in the error shape rather than a dropped
/// connection, and a client hanging up does not abort a write half-way.
async fn observe(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let started = Instant::now();
    let response = match tokio::spawn(next.run(req)).await {
        Ok(response) => response,
        Err(e) => ApiError::Internal(format!("the handler of {method} {path} failed: {e}"))
            .into_response(),
    };
    let status = response.status().as_u16();
    // Microsecond precision is plenty for a log line.
    let ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    if response.status().is_server_error() {
        tracing::warn!(%method, %path, status, ms, "request");
    } else if method == axum::http::Method::GET && response.status().is_success() {
        // Polling clients (`ax trigger --wait`) would flood the log at info.
        tracing::debug!(%method, %path, status, ms, "request");
    } else {
        tracing::info!(%method, %path, status, ms, "request");
    }
    response
}
