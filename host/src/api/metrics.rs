//! `GET /metrics`: the Prometheus text exposition of ax (SPEC §9).
//!
//! Counters and histograms are read from their atomics; queue depth and
//! oldest queued age are asked from the scheduler actor at scrape time (one
//! command, O(active runs)); the store size is read on a blocking thread.
//! Every metric is described in docs/OPERATIONS.md.
//!
//! # Who may read it
//!
//! The numbers cover every tenant — names, volumes, alert delivery results
//! (whose sent/retried counts, read against a webhook a tenant chose, would
//! tell it whether a port answers) — so the route needs a bearer token:
//! the admin token, or the dedicated `metrics_token` of the server config
//! (`AX_METRICS_TOKEN`), which opens nothing else and is what a Prometheus
//! scrape config should carry (`authorization: {credentials_file: …}`). No
//! token or a wrong one is `401`; a tenant token is `403`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Extension, FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::auth::{bearer, constant_time_eq, hash_token};
use super::error::{ApiError, ApiResult};
use crate::metrics::{Encoder, FINISHED, HttpMetrics};
use crate::model::Outcome;

/// The content type of the text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A caller allowed to read the metrics: the admin or the metrics token.
pub(super) struct MetricsReader;

impl FromRequestParts<ApiState> for MetricsReader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let Some(token) = bearer(&parts.headers) else {
            return Err(ApiError::Unauthorized(
                "GET /metrics needs `Authorization: Bearer TOKEN`: the admin token or the metrics token (`metrics_token`)".into(),
            ));
        };
        let digest = hash_token(token);
        let admin = constant_time_eq(&digest, &state.admin_token_sha256);
        let metrics = state
            .metrics_token_sha256
            .as_ref()
            .is_some_and(|m| constant_time_eq(&digest, m));
        if admin || metrics {
            return Ok(MetricsReader);
        }
        if let Some((id, secret)) = crate::tenant::parse_token(token)
            && !matches!(
                state.ax.tenants.check_token(id, secret),
                crate::tenant::TokenCheck::Invalid
            )
        {
            return Err(ApiError::Forbidden(
                "the metrics cover every tenant: read them with the admin token or the metrics token".into(),
            ));
        }
        Err(ApiError::Unauthorized("the token is not valid".into()))
    }
}

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", tag = "operations", security(("bearer" = [])),
    responses((status = 200, description = "Prometheus text format 0.0.4 (docs/OPERATIONS.md)", content_type = "text/plain; version=0.0.4", body = String),
        (status = 401, description = "No token, or not the admin or metrics token", body = super::error::ErrorBody),
        (status = 403, description = "A tenant token", body = super::error::ErrorBody),
        (status = 503, description = "The scheduler does not answer", body = super::error::ErrorBody)))]
pub(super) async fn scrape(
    _reader: MetricsReader,
    State(state): State<ApiState>,
    Extension(http): Extension<Arc<HttpMetrics>>,
) -> ApiResult<Response> {
    let snapshot = state
        .ax
        .scheduler
        .snapshot()
        .await
        .map_err(|e| ApiError::Unavailable(format!("the scheduler does not answer: {e}")))?;
    let store = state.ax.store.clone();
    let store_bytes = tokio::task::spawn_blocking(move || store.size_on_disk())
        .await
        .map_err(|e| ApiError::Internal(format!("measuring the store: {e}")))?;
    let text = render(&state, &snapshot, store_bytes, &http);
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

fn render(
    state: &ApiState,
    snapshot: &crate::scheduler::Snapshot,
    store_bytes: u64,
    http: &HttpMetrics,
) -> String {
    let stats = state.ax.scheduler.stats();
    let tenants = stats.tenants.all();
    let mut e = Encoder::default();

    e.family(
        "ax_fire_lateness_seconds",
        "histogram",
        "Timed runs: scheduled instant to the start of their first attempt.",
    );
    for (tenant, m) in &tenants {
        e.histogram(
            "ax_fire_lateness_seconds",
            &[("tenant", tenant)],
            &m.lateness,
        );
    }
    e.family(
        "ax_attempt_duration_seconds",
        "histogram",
        "Wall time of finished attempts.",
    );
    for (tenant, m) in &tenants {
        e.histogram(
            "ax_attempt_duration_seconds",
            &[("tenant", tenant)],
            &m.duration,
        );
    }
    e.family(
        "ax_attempts_total",
        "counter",
        "Attempts finished, by outcome.",
    );
    for (tenant, m) in &tenants {
        for outcome in Outcome::ALL {
            e.sample(
                "ax_attempts_total",
                &[("tenant", tenant), ("outcome", outcome.as_str())],
                m.attempts_with(outcome) as f64,
            );
        }
    }
    e.family(
        "ax_runs_finished_total",
        "counter",
        "Runs that reached a terminal state, by status.",
    );
    for (tenant, m) in &tenants {
        for (i, status) in FINISHED.iter().enumerate() {
            e.sample(
                "ax_runs_finished_total",
                &[("tenant", tenant), ("status", status.as_str())],
                m.runs_finished[i].load(Ordering::Relaxed) as f64,
            );
        }
    }
    e.family(
        "ax_fuel_consumed_total",
        "counter",
        "Fuel consumed by finished attempts.",
    );
    for (tenant, m) in &tenants {
        e.sample(
            "ax_fuel_consumed_total",
            &[("tenant", tenant)],
            m.fuel.load(Ordering::Relaxed) as f64,
        );
    }

    let queued: Vec<_> = snapshot.tenants.iter().collect();
    e.family(
        "ax_queued_runs",
        "gauge",
        "Runs in state queued (the backlog bounded by max_queued_per_tenant).",
    );
    for t in &queued {
        e.sample(
            "ax_queued_runs",
            &[("tenant", &t.tenant)],
            t.queued_runs as f64,
        );
    }
    e.family(
        "ax_queued_steps",
        "gauge",
        "Steps waiting in the dispatch queue for a slot.",
    );
    for t in &queued {
        e.sample(
            "ax_queued_steps",
            &[("tenant", &t.tenant)],
            t.queued_steps as f64,
        );
    }
    e.family(
        "ax_oldest_queued_run_age_seconds",
        "gauge",
        "Age of the oldest run in state queued.",
    );
    for t in &queued {
        e.sample(
            "ax_oldest_queued_run_age_seconds",
            &[("tenant", &t.tenant)],
            t.oldest_queued_ms as f64 / 1e3,
        );
    }

    let gauge = |e: &mut Encoder, name: &str, help: &str, v: f64| {
        e.family(name, "gauge", help).sample(name, &[], v);
    };
    let counter = |e: &mut Encoder, name: &str, help: &str, v: u64| {
        e.family(name, "counter", help).sample(name, &[], v as f64);
    };
    gauge(
        &mut e,
        "ax_attempts_running",
        "Attempts running now.",
        stats.running.load(Ordering::Relaxed) as f64,
    );
    gauge(
        &mut e,
        "ax_attempt_slots",
        "Attempts the scheduler may run at once (the global concurrency limit).",
        state.ax.concurrency as f64,
    );
    gauge(
        &mut e,
        "ax_active_runs",
        "Runs queued or running, held by the scheduler.",
        snapshot.active_runs as f64,
    );
    gauge(
        &mut e,
        "ax_armed_tasks",
        "Tasks whose next fire is within the scheduler's fire window (held in memory).",
        snapshot.armed_tasks as f64,
    );
    gauge(
        &mut e,
        "ax_cached_tasks",
        "Parsed task definitions in the scheduler's bounded cache.",
        snapshot.cached_tasks as f64,
    );
    gauge(
        &mut e,
        "ax_parked_runs",
        "Queued runs kept in the store's queue index, beyond the heads held in memory.",
        snapshot.parked_runs as f64,
    );
    gauge(
        &mut e,
        "ax_spilled_runs",
        "Queued runs in memory whose large input is left in the store until they start.",
        snapshot.spilled_runs as f64,
    );
    counter(
        &mut e,
        "ax_runs_created_total",
        "Runs created (fired, triggered, after-triggered, shed).",
        stats.runs_created.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_retries_total",
        "Retries scheduled after a failed attempt.",
        stats.retries.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_dead_letters_total",
        "Steps that exhausted their retries (dead letters recorded).",
        stats.dead_letters.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_runs_deleted_total",
        "Finished runs deleted by retention.",
        stats.runs_deleted.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_runs_shed_total",
        "Runs shed past the high-water mark.",
        stats.shed.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_overlap_skips_total",
        "Fires skipped because a previous run was still active (overlap).",
        stats.overlap_skips.load(Ordering::Relaxed),
    );
    let alerts = stats.alerts.stats();
    counter(
        &mut e,
        "ax_alerts_sent_total",
        "Webhook alerts delivered.",
        alerts.sent.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_alerts_failed_total",
        "Webhook alerts given up (refused, or retries exhausted).",
        alerts.failed.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_alerts_retries_total",
        "Webhook deliveries retried.",
        alerts.retries.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_alerts_denied_total",
        "Webhook alerts refused: outside the tenant's allow_http, or resolving to a refused address.",
        alerts.denied.load(Ordering::Relaxed),
    );
    counter(
        &mut e,
        "ax_alerts_dropped_total",
        "Pending webhook alerts dropped because the tenant's outbox was full (oldest first).",
        alerts.dropped.load(Ordering::Relaxed),
    );
    let outbox = stats.alerts.counts();
    let in_outbox = |s| outbox.get(&s).copied().unwrap_or(0) as f64;
    gauge(
        &mut e,
        "ax_alerts_queued",
        "Webhook alerts pending in the outbox (fresh and retrying).",
        in_outbox(crate::store::AlertStatus::Pending),
    );
    gauge(
        &mut e,
        "ax_alerts_dead",
        "Webhook alerts dead-lettered in the outbox (kept until retried or aged out).",
        in_outbox(crate::store::AlertStatus::Dead),
    );
    gauge(
        &mut e,
        "ax_store_size_bytes",
        "Bytes the store occupies on disk (database and blobs).",
        store_bytes as f64,
    );
    gauge(
        &mut e,
        "ax_store_writable",
        "1 while the store takes writes, 0 while it refuses them (full disk, I/O error).",
        if state.ax.store.writable() { 1.0 } else { 0.0 },
    );
    gauge(
        &mut e,
        "ax_store_damaged",
        "1 once the read of every store entry after opening found damage (restore from a backup).",
        if state.ax.store.damage().is_some() {
            1.0
        } else {
            0.0
        },
    );
    store_metrics(&mut e, &state.ax.store.health());
    plugin_metrics(&mut e, &state.ax.runtime.stats());

    e.family(
        "ax_http_requests_total",
        "counter",
        "HTTP requests answered, by method, route template and status.",
    );
    for ((method, route, status), n) in http.snapshot() {
        e.sample(
            "ax_http_requests_total",
            &[
                ("method", &method),
                ("route", &route),
                ("status", &status.to_string()),
            ],
            n as f64,
        );
    }
    e.finish()
}

/// Which store, and its connection pool when it has one (PostgreSQL).
fn store_metrics(e: &mut Encoder, health: &crate::store::StoreHealth) {
    e.family(
        "ax_store_info",
        "gauge",
        "1, labelled with the store ax runs on: its kind (sled or fjall: the embedded store's engine; postgres; memory) and location (data directory, or database URL without its password).",
    )
    .sample(
        "ax_store_info",
        &[
            ("kind", health.kind.as_str()),
            ("location", &health.location),
        ],
        1.0,
    );
    let Some(pool) = &health.pool else { return };
    e.family(
        "ax_store_pool_connections",
        "gauge",
        "Connections of the store's pool, by state: in_use (taken by a call) or idle.",
    );
    for (state, n) in [
        ("in_use", pool.in_use),
        ("idle", pool.open.saturating_sub(pool.in_use)),
    ] {
        e.sample("ax_store_pool_connections", &[("state", state)], n as f64);
    }
    e.family(
        "ax_store_pool_max_connections",
        "gauge",
        "Connections the store's pool opens at most (store.connections).",
    )
    .sample("ax_store_pool_max_connections", &[], pool.max as f64);
    e.family(
        "ax_store_connection_errors_total",
        "counter",
        "Store connections that could not be opened or were found broken.",
    )
    .sample(
        "ax_store_connection_errors_total",
        &[],
        pool.connection_errors as f64,
    );
    e.family(
        "ax_store_statements_total",
        "counter",
        "Statements the store's calls ran, BEGIN and COMMIT included.",
    )
    .sample("ax_store_statements_total", &[], pool.statements as f64);
    e.family(
        "ax_store_query_seconds",
        "histogram",
        "Store calls (one or a few statements on one connection), from asking for a connection to giving it back.",
    )
    .histogram("ax_store_query_seconds", &[], &pool.calls);
}

/// The loaded-plugin cache and the compile gate (docs/RUNTIME.md).
fn plugin_metrics(e: &mut Encoder, rt: &crate::runtime::RuntimeStats) {
    let rows: [(&str, &str, &str, f64); 9] = [
        (
            "ax_plugins_loaded",
            "gauge",
            "Plugins loaded in memory (compiled, imports resolved).",
            rt.loaded as f64,
        ),
        (
            "ax_plugins_loaded_bytes",
            "gauge",
            "Bytes the loaded plugins are charged (image + memory images + overhead).",
            rt.loaded_bytes as f64,
        ),
        (
            "ax_plugins_loaded_budget_bytes",
            "gauge",
            "The bound on ax_plugins_loaded_bytes (loaded_plugins_mb).",
            rt.loaded_budget as f64,
        ),
        (
            "ax_plugin_evictions_total",
            "counter",
            "Loaded plugins dropped to stay within the budget.",
            rt.evictions as f64,
        ),
        (
            "ax_plugin_compiles_running",
            "gauge",
            "Plugin compilations running.",
            rt.compiles.running as f64,
        ),
        (
            "ax_plugin_compiles_waiting",
            "gauge",
            "Plugin loads waiting for a compilation permit.",
            rt.compiles.waiting as f64,
        ),
        (
            "ax_plugin_tier_ups_pending",
            "gauge",
            "Plugins running on Winch's code whose Cranelift compilation is waiting or running.",
            rt.tier_ups as f64,
        ),
        (
            "ax_plugin_uploads_in_progress",
            "gauge",
            "Plugin uploads admitted and not finished (reading, waiting, compiling).",
            rt.compiles.uploads as f64,
        ),
        (
            "ax_plugin_uploads_refused_total",
            "counter",
            "Plugin uploads refused with compile_queue_full.",
            rt.compiles.refused as f64,
        ),
    ];
    for (name, kind, help, value) in rows {
        e.family(name, kind, help).sample(name, &[], value);
    }
}
