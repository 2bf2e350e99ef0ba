//! Routes that are not about one tenant's objects: the cron preview, health
//! and readiness probes, and the answers for unknown routes and methods.

use axum::Json;
use axum::extract::State;
use axum::http::{Method, Uri};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::ApiQuery;
use super::views::{CronPreview, Health};
use crate::model::time::rfc3339;

/// Instants a cron preview shows when the client does not say.
const DEFAULT_PREVIEW: usize = 5;

/// `?expr=&tz=&from=&count=` of a cron preview.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct CronQuery {
    /// A 6- or 7-field Quartz-style cron expression (seconds first).
    expr: String,
    /// IANA zone, default UTC.
    tz: Option<String>,
    /// RFC 3339 instant to start from, default now.
    from: Option<String>,
    /// Instants to show, default 5, 1..=100.
    count: Option<usize>,
}

/// Parses an RFC 3339 instant given by a client.
pub(super) fn parse_instant(text: &str) -> ApiResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            ApiError::bad_request(format!(
                "`{text}` is not an RFC 3339 instant ({e}); e.g. 2026-12-01T01:30:00Z"
            ))
        })
}

/// `GET /v1/cron/next`: `{"next": [RFC 3339 UTC], "described": [local time with weekday]}`.
#[utoipa::path(get, path = "/v1/cron/next", tag = "operations", params(CronQuery),
    responses((status = 200, body = CronPreview), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 422, description = "A bad expression (a 5-field one names the 6-field meant) or zone", body = ErrorBody)))]
pub(super) async fn cron_next(
    State(state): State<ApiState>,
    _caller: Caller,
    ApiQuery(query): ApiQuery<CronQuery>,
) -> ApiResult<Json<CronPreview>> {
    let tz = query
        .tz
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "UTC".to_string());
    // An empty `from=` is refused like any text that is not an instant.
    let from = query.from.as_deref().map(parse_instant).transpose()?;
    let count = super::extract::bounded(
        "count",
        query.count,
        DEFAULT_PREVIEW,
        super::extract::PREVIEW_COUNTS,
    )?;
    let instants = state.ax.cron_next(&query.expr, &tz, from, count)?;
    let next: Vec<String> = instants
        .iter()
        .map(|at| rfc3339(at.timestamp_millis()))
        .collect();
    // `cron_next` accepted the zone, so it parses; UTC is only a formal fallback.
    let zone = tz
        .trim()
        .parse::<chrono_tz::Tz>()
        .unwrap_or(chrono_tz::Tz::UTC);
    let described: Vec<String> = instants
        .iter()
        .map(|at| crate::service::describe(*at, zone))
        .collect();
    Ok(Json(CronPreview { next, described }))
}

/// `GET /healthz`: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, body = Health)))]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        store: None,
    })
}

/// `GET /readyz`: 200 when the store answers and takes writes; 503
/// `unavailable` when it does not answer or the read of every entry after
/// opening found it damaged, `store_unavailable` while it
/// refuses writes (full disk, I/O error: triggers are refused, fires held).
/// `/healthz` stays 200 meanwhile: the process lives, and ax resumes by
/// itself once writes succeed (docs/RELIABILITY.md, "Store faults").
/// The 200 body names the store's kind and, on PostgreSQL, its pool's use.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses((status = 200, body = Health)))]
pub(super) async fn readyz(State(state): State<ApiState>) -> ApiResult<Json<Health>> {
    if !state.ax.store.writable() {
        // One small write tells whether writes succeed again (the store
        // guard reopens sled if it must, at most once a second).
        let store = state.ax.store.clone();
        let now = state.ax.clock.now_ms().to_string();
        let _ = tokio::task::spawn_blocking(move || store.put_meta("write_probe", &now)).await;
    }
    if let Some(damage) = state.ax.store.damage() {
        tracing::warn!(%damage, "readiness check: the store is damaged");
        return Err(ApiError::Unavailable(format!(
            "the store is damaged: {damage}"
        )));
    }
    match state.ax.store.get_meta("format") {
        Ok(_) if !state.ax.store.writable() => {
            tracing::warn!("readiness check: the store refuses writes");
            Err(ApiError::StoreUnavailable {
                message: "the store refuses writes (full disk or I/O error); ax resumes once writes succeed".into(),
                retry_after: super::error::STORE_RETRY_AFTER_SECS,
            })
        }
        Ok(_) => Ok(Json(Health {
            status: "ready".into(),
            store: Some(state.ax.store.health().into()),
        })),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: the store does not answer");
            Err(ApiError::Unavailable("the store does not answer".into()))
        }
    }
}

/// Any route that does not exist: 404 in the error shape.
pub(super) async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route {method} {}", uri.path()))
}

/// A route that exists, asked with a method it does not take: 405.
pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
