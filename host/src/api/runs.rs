//! Runs and dead letters: trigger, list (newest first, cursor paging), show,
//! logs, events, cancel, retry; list, resolve and requeue dead letters.
//!
//! The error statuses each route can answer are declared in
//! `contract::ROUTES`, not in the annotations here.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, parse_json};
use super::extract::{ApiBody, ApiPath, ApiQuery, PAGE_LIMITS, bounded};
use super::views::{
    DeadLetterList, DeadLetterView, EventList, EventView, LogList, RunList, RunView,
};
use crate::model::RunStatus;
use crate::model::ids::RunId;
use crate::scheduler::TriggerRequest;
use crate::store::RunQuery;

/// Runs a page holds when the client does not say.
const DEFAULT_PAGE: usize = 50;

/// The optional body of a trigger.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggerBody {
    /// The trigger input (`${input.*}` in templates), any JSON value; default `{}`.
    #[schema(value_type = Option<serde_json::Value>)]
    input: Option<serde_json::Value>,
    /// A key already used for this task returns the existing run (200);
    /// 1 to 256 characters.
    #[schema(min_length = 1, max_length = 256)]
    idempotency_key: Option<String>,
    /// 0..=9, overrides the task's priority; above the tenant's ceiling
    /// (quota `max_priority`) is `422`.
    #[schema(maximum = 9)]
    priority: Option<u8>,
}

/// `POST /v1/tasks/{name}/runs`: 201 with the new run, 200 with the
/// existing one for an idempotency key already seen.
#[utoipa::path(post, path = "/v1/tasks/{name}/runs", tag = "runs", params(("name" = String, Path, description = "Task name")),
    request_body(content = Option<TriggerBody>, description = "Optional; an empty body (or `null`) is `{}`"),
    responses(
        (status = 201, description = "A new run, stored durably", body = RunView),
        (status = 200, description = "The existing run for this idempotency key", body = RunView)))]
pub(super) async fn trigger(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(task): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    let body: TriggerBody = if body.iter().all(u8::is_ascii_whitespace) {
        TriggerBody::default()
    } else {
        parse_json::<Option<TriggerBody>>(&body)?.unwrap_or_default()
    };
    let request = TriggerRequest {
        tenant: caller.tenant.as_str().into(),
        task: task.into(),
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
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// Only this task's runs.
    task: Option<String>,
    /// Only runs in this state.
    #[param(value_type = Option<RunStatus>)]
    status: Option<String>,
    /// Page size, default 50, 1..=1000.
    limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// `GET /v1/runs`: `{"runs": [...], "next_cursor": ...}`.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(ListQuery),
    responses((status = 200, body = RunList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<RunList>> {
    // An empty `status=` is refused like any other unknown state: the
    // document lists the states, and clients leave the parameter out.
    let status = match query.status.as_deref() {
        Some(s) => Some(s.parse::<RunStatus>().map_err(ApiError::bad_request)?),
        None => None,
    };
    let page = state.ax.list_runs(RunQuery {
        tenant: Some(caller.tenant),
        task: query.task.filter(|t| !t.is_empty()),
        status,
        limit: bounded("limit", query.limit, DEFAULT_PAGE, PAGE_LIMITS)?,
        cursor: query.cursor.filter(|c| !c.is_empty()),
    })?;
    let stats = state.ax.scheduler.stats();
    let runs: Vec<RunView> = page
        .runs
        .into_iter()
        .map(|r| RunView::with_hold(r, stats))
        .collect();
    Ok(Json(RunList {
        runs,
        next_cursor: page.next,
    }))
}

/// `GET /v1/runs/{id}`.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = RunView)))]
pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RunView>> {
    let run = state.ax.get_run(&caller.tenant, &id)?;
    Ok(Json(RunView::with_hold(run, state.ax.scheduler.stats())))
}

/// `GET /v1/runs/{id}/logs`: `{"attempts": [...]}`.
#[utoipa::path(get, path = "/v1/runs/{id}/logs", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = LogList)))]
pub(super) async fn logs(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<LogList>> {
    Ok(Json(LogList {
        attempts: state.ax.run_logs(&caller.tenant, &id)?,
    }))
}

/// `GET /v1/runs/{id}/events`: `{"events": [...]}`, oldest first.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = EventList)))]
pub(super) async fn events(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<EventList>> {
    let events: Vec<EventView> = state
        .ax
        .run_events(&caller.tenant, &id)?
        .into_iter()
        .map(EventView::from)
        .collect();
    Ok(Json(EventList { events }))
}

/// `POST /v1/runs/{id}/cancel`.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = RunView)))]
pub(super) async fn cancel(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        state
            .ax
            .cancel_run(&caller.tenant, &RunId::from(id), &caller.actor)
            .await?
            .into(),
    ))
}

/// `POST /v1/runs/{id}/retry`.
#[utoipa::path(post, path = "/v1/runs/{id}/retry", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = RunView)))]
pub(super) async fn retry(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        state
            .ax
            .retry_run(&caller.tenant, &RunId::from(id), &caller.actor)
            .await?
            .into(),
    ))
}

/// `POST /v1/runs/{id}/steps/{step}/rerun`: the step and everything downstream run again.
#[utoipa::path(post, path = "/v1/runs/{id}/steps/{step}/rerun", tag = "runs", params(("id" = String, Path, description = "Run id"), ("step" = String, Path)),
    responses((status = 200, body = RunView)))]
pub(super) async fn rerun_step(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((id, step)): ApiPath<(String, String)>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        state
            .ax
            .rerun_step(&caller.tenant, &RunId::from(id), &step, &caller.actor)
            .await?
            .into(),
    ))
}

/// `?open=true|false` of a dead-letter listing (default: open ones only).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct DeadLetterQuery {
    /// `true` (default): open ones only; `false`: all.
    open: Option<bool>,
}

/// `GET /v1/dead-letters`: `{"dead_letters": [...]}`, newest first.
#[utoipa::path(get, path = "/v1/dead-letters", tag = "dead letters", params(DeadLetterQuery),
    responses((status = 200, body = DeadLetterList)))]
pub(super) async fn dead_letters(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<DeadLetterQuery>,
) -> ApiResult<Json<DeadLetterList>> {
    let letters: Vec<DeadLetterView> = state
        .ax
        .list_dead_letters(&caller.tenant, query.open.unwrap_or(true))?
        .into_iter()
        .map(DeadLetterView::from)
        .collect();
    Ok(Json(DeadLetterList {
        dead_letters: letters,
    }))
}

/// The body of a resolve.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResolveBody {
    /// What a person decided; not empty.
    #[schema(min_length = 1)]
    resolution: String,
}

/// `POST /v1/dead-letters/{id}/resolve` `{resolution}`.
#[utoipa::path(post, path = "/v1/dead-letters/{id}/resolve", tag = "dead letters",
    params(("id" = String, Path, description = "Dead letter id")), request_body = ResolveBody,
    responses((status = 200, body = DeadLetterView)))]
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
#[utoipa::path(post, path = "/v1/dead-letters/{id}/requeue", tag = "dead letters",
    params(("id" = String, Path, description = "Dead letter id")),
    responses((status = 200, body = RunView)))]
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
