//! Runs and dead letters: trigger, list (newest first, cursor paging), show,
//! logs, events, cancel, retry; list, resolve and requeue dead letters.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, parse_json};
use super::extract::{ApiBody, ApiPath, ApiQuery};
use super::views::{DeadLetterView, EventView, RunView};
use crate::model::RunStatus;
use crate::scheduler::TriggerRequest;
use crate::store::RunQuery;

/// Runs a page holds when the client does not say.
const DEFAULT_PAGE: usize = 50;

/// The optional body of a trigger.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggerBody {
    input: Option<serde_json::Value>,
    idempotency_key: Option<String>,
    priority: Option<u8>,
}

/// `POST /v1/tasks/{name}/runs`: 201 with the new run, 200 with the
/// existing one for an idempotency key already seen.
pub(super) async fn trigger(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(task): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    let body: TriggerBody = if body.iter().all(u8::is_ascii_whitespace) {
        TriggerBody::default()
    } else {
        parse_json(&body)?
    };
    let request = TriggerRequest {
        tenant: caller.tenant.clone(),
        task,
        input: body.input,
        idempotency_key: body.idempotency_key,
        priority: body.priority,
        actor: caller.actor.clone(),
    };
    let (run, created) = state.ax.trigger(request).await?;
    tracing::info!(tenant = %caller.tenant, task = %run.task, run = %run.id, created, "run triggered");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(RunView::from(run))).into_response())
}

/// `?task=&status=&limit=&cursor=` of a run listing.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    task: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// `GET /v1/runs`: `{"runs": [...], "next_cursor": ...}`.
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    let status = match query.status.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<RunStatus>().map_err(ApiError::bad_request)?),
        None => None,
    };
    let page = state.ax.list_runs(RunQuery {
        tenant: Some(caller.tenant),
        task: query.task.filter(|t| !t.is_empty()),
        status,
        limit: query.limit.unwrap_or(DEFAULT_PAGE),
        cursor: query.cursor.filter(|c| !c.is_empty()),
    })?;
    let stats = state.ax.scheduler.stats();
    let runs: Vec<RunView> = page
        .runs
        .into_iter()
        .map(|r| RunView::with_hold(r, stats))
        .collect();
    Ok(Json(json!({ "runs": runs, "next_cursor": page.next })))
}

/// `GET /v1/runs/{id}`.
pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RunView>> {
    let run = state.ax.get_run(&caller.tenant, &id)?;
    Ok(Json(RunView::with_hold(run, state.ax.scheduler.stats())))
}

/// `GET /v1/runs/{id}/logs`: `{"attempts": [...]}`.
pub(super) async fn logs(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    Ok(Json(
        json!({ "attempts": state.ax.run_logs(&caller.tenant, &id)? }),
    ))
}

/// `GET /v1/runs/{id}/events`: `{"events": [...]}`, oldest first.
pub(super) async fn events(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let events: Vec<EventView> = state
        .ax
        .run_events(&caller.tenant, &id)?
        .into_iter()
        .map(EventView::from)
        .collect();
    Ok(Json(json!({ "events": events })))
}

/// `POST /v1/runs/{id}/cancel`.
pub(super) async fn cancel(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        state
            .ax
            .cancel_run(&caller.tenant, &id, &caller.actor)
            .await?
            .into(),
    ))
}

/// `POST /v1/runs/{id}/retry`.
pub(super) async fn retry(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        state
            .ax
            .retry_run(&caller.tenant, &id, &caller.actor)
            .await?
            .into(),
    ))
}

/// `POST /v1/runs/{id}/steps/{step}/rerun`: the step and everything downstream run again.
pub(super) async fn rerun_step(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((id, step)): ApiPath<(String, String)>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        state
            .ax
            .rerun_step(&caller.tenant, &id, &step, &caller.actor)
            .await?
            .into(),
    ))
}

/// `?open=true|false` of a dead-letter listing (default: open ones only).
#[derive(Debug, Deserialize)]
pub(super) struct DeadLetterQuery {
    open: Option<bool>,
}

/// `GET /v1/dead-letters`: `{"dead_letters": [...]}`, newest first.
pub(super) async fn dead_letters(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<DeadLetterQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    let letters: Vec<DeadLetterView> = state
        .ax
        .list_dead_letters(&caller.tenant, query.open.unwrap_or(true))?
        .into_iter()
        .map(DeadLetterView::from)
        .collect();
    Ok(Json(json!({ "dead_letters": letters })))
}

/// The body of a resolve.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResolveBody {
    resolution: String,
}

/// `POST /v1/dead-letters/{id}/resolve` `{resolution}`.
pub(super) async fn resolve(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<DeadLetterView>> {
    let body: ResolveBody = parse_json(&body)?;
    Ok(Json(
        state
            .ax
            .resolve_dead_letter(&caller.tenant, &id, &body.resolution)
            .await?
            .into(),
    ))
}

/// `POST /v1/dead-letters/{id}/requeue`: the run, with the step queued again.
pub(super) async fn requeue(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        state
            .ax
            .requeue_dead_letter(&caller.tenant, &id, &caller.actor)
            .await?
            .into(),
    ))
}
