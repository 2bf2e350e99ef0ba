//! Runs and dead letters: trigger (one, or up to 1000 in one request), list (newest first, cursor paging), show,
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
    DeadLetterList, DeadLetterView, EventList, EventView, LogList, RunList, RunView, Warning,
};
use crate::model::ids::RunId;
use crate::model::{Millis, RunStatus};
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
    /// Values of the task's declared `params:` by name, each of its type
    /// (docs/TASKS.md, "Params"); over `input`'s and the defaults. An
    /// unknown name or a wrong type is `400`, and nothing is created.
    #[schema(value_type = Option<Object>)]
    params: Option<serde_json::Map<String, serde_json::Value>>,
    /// A key already used for this task returns the existing run (200);
    /// 1 to 256 characters.
    #[schema(min_length = 1, max_length = 256)]
    idempotency_key: Option<String>,
    /// 0..=9, overrides the task's priority; above the tenant's ceiling
    /// (quota `max_priority`) is `422`.
    #[schema(maximum = 9)]
    priority: Option<u8>,
}

impl TriggerBody {
    /// The scheduler's request for this body, on `task`, by `caller` (a
    /// single trigger's and each item of a bulk one's).
    fn into_request(
        self,
        caller: &Caller,
        task: impl Into<crate::model::ids::TaskName>,
    ) -> TriggerRequest {
        TriggerRequest {
            tenant: caller.tenant.as_str().into(),
            task: task.into(),
            input: self.input,
            params: self.params,
            idempotency_key: self.idempotency_key,
            priority: self.priority,
            actor: caller.actor.clone(),
        }
    }
}

/// `POST /v1/tasks/{name}/runs`: 201 with the new run, 200 with the
/// existing one for an idempotency key already seen, 410 `run_deleted` (with
/// `details.run_id`) for a key whose run retention has deleted.
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
    let request = body.into_request(&caller, task);
    let (run, created) = state.ax.trigger(request).await?;
    tracing::info!(tenant = %caller.tenant, task = %run.task, run = %run.id, created, "run triggered");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let warnings = Warning::of_trigger(&run);
    let view = RunView {
        warnings,
        ..RunView::from(run)
    };
    Ok((status, Json(view)).into_response())
}

/// The body of a bulk trigger.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchBody {
    /// 1 to 1000 runs, each shaped like the body of a single trigger.
    #[schema(value_type = Vec<TriggerBody>, min_items = 1, max_items = 1000)]
    runs: Vec<serde_json::Value>,
}

/// What became of one run of a bulk trigger.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(super) struct BatchItem {
    /// Its place in the request, from 0.
    index: usize,
    /// The run's id (absent when `error` is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    /// `true`: a new run; `false`: the existing run of its idempotency key
    /// (an earlier request's, or an earlier item's of this one).
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<bool>,
    /// The run's state as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<RunStatus>)]
    status: Option<String>,
    /// Why this run was not created (`queue_full`, `quota_exceeded`,
    /// `not_found`…): `{"code", "message", "details"}` as an error body's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    error: Option<serde_json::Value>,
}

/// The answer of a bulk trigger.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(super) struct BatchAnswer {
    /// One per requested run, in request order.
    runs: Vec<BatchItem>,
    /// New runs.
    created: usize,
    /// Existing runs returned for their idempotency keys.
    existing: usize,
    /// Runs refused (each with its `error`).
    failed: usize,
}

/// `POST /v1/tasks/{name}/runs:batch`: up to 1000 runs of one task, stored
/// in one write and durable before the answer.
///
/// An unknown task is `404`. Items that fail the checks of a single trigger
/// (the shape, the priority, the idempotency key, each item's size) refuse
/// the whole batch:
/// `422 invalid`, every bad item in `details.items`, nothing created. Limits
/// of the moment (the queue bound, quotas) refuse only the runs they hit:
/// `200`, each such item with its own `error`.
#[utoipa::path(post, path = "/v1/tasks/{name}/runs:batch", tag = "runs", params(("name" = String, Path, description = "Task name")),
    request_body(content = BatchBody, description = "At most 16 MiB; each run's JSON at most 1 MiB, as a single trigger's body"),
    responses((status = 200, description = "Each run, or its own error, in request order; the created ones are durable", body = BatchAnswer)))]
pub(super) async fn trigger_batch(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(task): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<BatchAnswer>> {
    let body: BatchBody = parse_json(&body)?;
    let total = body.runs.len();
    crate::service::check_batch_len(total, crate::service::MAX_BATCH_RUNS, "runs")?;
    let mut requests = Vec::with_capacity(total);
    let mut bad = Vec::new();
    for (index, item) in body.runs.into_iter().enumerate() {
        match trigger_item(&state, &caller, &task, &item) {
            Ok(request) => requests.push(request),
            Err(e) => bad.push((index, None, e)),
        }
    }
    if !bad.is_empty() {
        return Err(ApiError::items("runs", total, bad));
    }
    let answers = state.ax.trigger_batch(requests).await?;
    let mut out = BatchAnswer {
        runs: Vec::with_capacity(total),
        created: 0,
        existing: 0,
        failed: 0,
    };
    for (index, answer) in answers.into_iter().enumerate() {
        out.runs.push(match answer {
            Ok((run, created)) => {
                if created {
                    out.created += 1;
                } else {
                    out.existing += 1;
                }
                BatchItem {
                    index,
                    id: Some(run.id.to_string()),
                    created: Some(created),
                    status: Some(run.status.as_str().to_string()),
                    error: None,
                }
            }
            Err(e) => {
                out.failed += 1;
                BatchItem {
                    index,
                    id: None,
                    created: None,
                    status: None,
                    error: Some(ApiError::from(e).item_detail()),
                }
            }
        });
    }
    tracing::info!(tenant = %caller.tenant, %task, created = out.created, existing = out.existing, failed = out.failed, "runs triggered in bulk");
    Ok(Json(out))
}

/// One item of a bulk trigger, read and checked as a single trigger's body:
/// at most [`MAX_BODY_BYTES`](super::MAX_BODY_BYTES) as JSON, the same
/// shape, the same checks.
fn trigger_item(
    state: &ApiState,
    caller: &Caller,
    task: &str,
    item: &serde_json::Value,
) -> ApiResult<TriggerRequest> {
    let bytes = serde_json::to_vec(item).map_err(|e| ApiError::Internal(e.to_string()))?;
    if bytes.len() > super::MAX_BODY_BYTES {
        return Err(ApiError::TooLarge(format!(
            "this run is {} bytes of JSON; a run's body is at most {} bytes, as a single trigger's",
            bytes.len(),
            super::MAX_BODY_BYTES
        )));
    }
    let body: TriggerBody = parse_json(&bytes)?;
    let request = body.into_request(caller, task);
    state.ax.check_trigger(&request)?;
    Ok(request)
}

/// `?task=&status=&since=&until=&limit=&cursor=` of a run listing.
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
    /// Only runs created at or after this instant: RFC 3339
    /// (`2026-12-01T08:00:00Z`) or unix milliseconds (`1764576000000`).
    since: Option<String>,
    /// Only runs created before this instant (exclusive), as `since`.
    until: Option<String>,
}

/// Most digits of a unix-milliseconds instant (year 33658): what the
/// document says (`api/contract.rs`), so that the server takes exactly what
/// it calls valid.
pub(super) const MAX_MS_DIGITS: usize = 15;

/// A `since=`/`until=` instant: RFC 3339, or unix milliseconds (what a
/// script or the dashboard has at hand: `Date.now() - 3600000`).
fn run_instant(name: &str, text: Option<&str>) -> ApiResult<Option<Millis>> {
    let Some(text) = text else { return Ok(None) };
    // An empty `since=` is refused like any text that is not an instant.
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        if text.len() > MAX_MS_DIGITS {
            return Err(ApiError::bad_request(format!(
                "`{name}` is `{text}`: too large for unix milliseconds (at most {MAX_MS_DIGITS} digits)"
            )));
        }
        return text.parse::<Millis>().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "`{name}` is `{text}`: too large for unix milliseconds"
            ))
        });
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| Some(t.timestamp_millis()))
        .map_err(|_| {
            ApiError::bad_request(format!(
                "`{name}` is `{text}`: not an RFC 3339 instant (2026-12-01T08:00:00Z) nor unix milliseconds"
            ))
        })
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
    let since = run_instant("since", query.since.as_deref())?;
    let until = run_instant("until", query.until.as_deref())?;
    if let (Some(s), Some(u)) = (since, until)
        && s > u
    {
        // Well formed, empty in context: 422 with the parameter named.
        return Err(crate::service::Error::Invalid {
            path: Some("since".into()),
            message: format!("`since` ({s}) is after `until` ({u}): the range is empty"),
        }
        .into());
    }
    let page = state.ax.list_runs(RunQuery {
        tenant: Some(caller.tenant),
        task: query.task.filter(|t| !t.is_empty()),
        status,
        limit: bounded("limit", query.limit, DEFAULT_PAGE, PAGE_LIMITS)?,
        cursor: query.cursor.filter(|c| !c.is_empty()),
        since,
        until,
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
