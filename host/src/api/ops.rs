//! Routes that are not about one tenant's objects: the cron preview, health
//! and readiness probes, and the answers for unknown routes and methods.

use axum::Json;
use axum::extract::State;
use axum::http::{Method, Uri};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiQuery;
use crate::scheduler::clock::rfc3339;

/// Instants a cron preview shows when the client does not say.
const DEFAULT_PREVIEW: usize = 5;

/// `?expr=&tz=&from=&count=` of a cron preview.
#[derive(Debug, Deserialize)]
pub(super) struct CronQuery {
    expr: String,
    tz: Option<String>,
    from: Option<String>,
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
pub(super) async fn cron_next(
    State(state): State<ApiState>,
    _caller: Caller,
    ApiQuery(query): ApiQuery<CronQuery>,
) -> ApiResult<Json<Value>> {
    let tz = query
        .tz
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "UTC".to_string());
    let from = query
        .from
        .as_deref()
        .filter(|f| !f.is_empty())
        .map(parse_instant)
        .transpose()?;
    let instants = state.ax.cron_next(
        &query.expr,
        &tz,
        from,
        query.count.unwrap_or(DEFAULT_PREVIEW),
    )?;
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
    Ok(Json(json!({ "next": next, "described": described })))
}

/// `GET /healthz`: the process answers.
pub(super) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when the store answers, 503 otherwise.
pub(super) async fn readyz(State(state): State<ApiState>) -> ApiResult<Json<Value>> {
    match state.ax.store.get_meta("format") {
        Ok(_) => Ok(Json(json!({ "status": "ready" }))),
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
