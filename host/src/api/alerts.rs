//! The alert outbox: list a tenant's webhook alerts (pending, delivered,
//! dead) and retry a dead one. Tenant-scoped like every `/v1` route: a
//! tenant token sees its own alerts; the admin names a tenant with
//! `X-Ax-Tenant`.
//!
//! A webhook the admin set (a tenant record's or the config's) may carry a
//! secret in its URL (chat hooks do): a tenant token sees its alerts with
//! `url` as [`ADMIN_WEBHOOK`], only the admin sees the URL.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiPath, ApiQuery, PAGE_LIMITS, bounded};
use crate::model::time::rfc3339;
use crate::store::{AlertQuery, AlertStatus, OutboxAlert};

const DEFAULT_PAGE: usize = 50;

/// What a tenant token sees for the URL of a webhook the admin set.
pub(super) const ADMIN_WEBHOOK: &str = "(set by the admin)";

/// `?status&limit&cursor` of an alert listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct AlertListQuery {
    /// Only alerts in this state (default: all).
    #[param(value_type = Option<AlertStatus>)]
    status: Option<String>,
    /// Page size, default 50, 1..=1000.
    limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// One webhook alert in the outbox.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AlertView {
    /// Id (also the payload's `id`, which receivers dedupe on).
    pub id: String,
    /// `pending`, `delivered` or `dead`.
    pub status: AlertStatus,
    /// The webhook (for a tenant token, [`ADMIN_WEBHOOK`] when the admin
    /// set it).
    pub url: String,
    /// Whether the admin set the webhook (else a task did).
    pub set_by_admin: bool,
    /// `run_failed`, `dead_letter` or `late`.
    pub kind: Option<String>,
    /// The run that raised it.
    pub run_id: Option<String>,
    /// Delivery attempts made.
    pub attempts: u32,
    /// When it is tried next (`pending`), or when it was delivered or
    /// given up.
    pub next_try: String,
    /// When it was raised.
    pub created_at: String,
    /// What the last failed try said.
    pub last_error: Option<String>,
    /// The JSON body POSTed, as stored.
    pub payload: Value,
}

impl AlertView {
    /// The view `caller` may see (see the module docs).
    fn for_caller(a: OutboxAlert, caller: &Caller) -> Self {
        let text = |k: &str| a.body.get(k).and_then(Value::as_str).map(str::to_string);
        let url = if a.admin && !caller.admin {
            ADMIN_WEBHOOK.to_string()
        } else {
            a.url
        };
        Self {
            kind: text("kind"),
            run_id: text("run_id"),
            id: a.id,
            status: a.status,
            url,
            set_by_admin: a.admin,
            attempts: a.attempts,
            next_try: rfc3339(a.next_try),
            created_at: rfc3339(a.created_at),
            last_error: a.last_error,
            payload: a.body,
        }
    }
}

/// `GET /v1/alerts`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AlertList {
    /// Newest first.
    pub alerts: Vec<AlertView>,
    /// Pass back as `cursor` for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// `GET /v1/alerts`: `{"alerts": [...], "next_cursor": ...}`, newest first.
#[utoipa::path(get, path = "/v1/alerts", tag = "alerts", params(AlertListQuery),
    responses((status = 200, body = AlertList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<AlertListQuery>,
) -> ApiResult<Json<AlertList>> {
    let status = match query.status.as_deref() {
        Some(s) => Some(AlertStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown alert status `{s}`; one of pending, delivered, dead"
            ))
        })?),
        None => None,
    };
    let (alerts, next) = state.ax.list_alerts(&AlertQuery {
        tenant: caller.tenant.clone(),
        status,
        limit: bounded("limit", query.limit, DEFAULT_PAGE, PAGE_LIMITS)?,
        cursor: query.cursor.filter(|c| !c.is_empty()),
    })?;
    Ok(Json(AlertList {
        alerts: alerts
            .into_iter()
            .map(|a| AlertView::for_caller(a, &caller))
            .collect(),
        next_cursor: next,
    }))
}

/// `POST /v1/alerts/{id}/retry`: a dead alert back to `pending`, due now,
/// with `max_attempts` more tries.
#[utoipa::path(post, path = "/v1/alerts/{id}/retry", tag = "alerts",
    params(("id" = String, Path, description = "Alert id")),
    responses((status = 200, body = AlertView)))]
pub(super) async fn retry(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<AlertView>> {
    let alert = state.ax.retry_alert(&caller.tenant, &id).await?;
    Ok(Json(AlertView::for_caller(alert, &caller)))
}
