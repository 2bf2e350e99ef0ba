//! `/v1/tasks`: create or replace (YAML or JSON text), list, show, delete,
//! pause, resume, the next fire instants and the DAG drawn as text, DOT,
//! Mermaid or JSON. Parsing and validating a definition is the service's (and
//! `task`'s) job; drawing the DAG is `graph`'s.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ApiState;
use super::auth::Caller;
use super::error::ErrorBody;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiBody, ApiPath, ApiQuery};
use super::views::{NextFires, TaskList, TaskView};
use crate::graph::Format;
use crate::scheduler::clock::rfc3339;

/// Fire instants a preview shows when the client does not say.
const DEFAULT_PREVIEW: usize = 5;

/// `PUT /v1/tasks/{name}`: 201 created, 200 replaced.
#[utoipa::path(put, path = "/v1/tasks/{name}", tag = "tasks", params(("name" = String, Path)),
    request_body(description = "The task definition as YAML or JSON text (docs/TASKS.md); its `name` must be the one in the path. At most 1 MiB.",
        content((String = "application/yaml"), (Object = "application/json"))),
    responses(
        (status = 201, description = "Created", body = TaskView),
        (status = 200, description = "Replaced", body = TaskView),
        (status = 400, description = "`bad_request`, `invalid_json`, `invalid_yaml`", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 422, description = "`invalid` (with `details.path`), `invalid_plugin`", body = ErrorBody)))]
pub(super) async fn put(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    let text = std::str::from_utf8(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "a task definition is UTF-8 text (YAML or JSON): {e}"
        ))
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty: send the task definition (YAML or JSON)",
        ));
    }
    let (record, created) = state.ax.put_task(&caller.tenant, &name, text).await?;
    tracing::info!(tenant = %caller.tenant, task = %name, version = record.version, created, "task stored");
    let (task, schedule) = state.ax.get_task(&caller.tenant, &record.name)?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(TaskView::new(task, schedule.as_ref(), false))).into_response())
}

/// `GET /v1/tasks`.
#[utoipa::path(get, path = "/v1/tasks", tag = "tasks",
    responses((status = 200, body = TaskList), (status = 401, body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> ApiResult<Json<TaskList>> {
    let tasks: Vec<TaskView> = state
        .ax
        .list_tasks(&caller.tenant)?
        .into_iter()
        .map(|(task, schedule)| TaskView::new(task, schedule.as_ref(), false))
        .collect();
    Ok(Json(TaskList { tasks }))
}

/// `GET /v1/tasks/{name}`: with the definition as it was sent (`source`).
#[utoipa::path(get, path = "/v1/tasks/{name}", tag = "tasks", params(("name" = String, Path)),
    responses((status = 200, body = TaskView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TaskView>> {
    let (task, schedule) = state.ax.get_task(&caller.tenant, &name)?;
    Ok(Json(TaskView::new(task, schedule.as_ref(), true)))
}

/// `DELETE /v1/tasks/{name}`: 204.
#[utoipa::path(delete, path = "/v1/tasks/{name}", tag = "tasks", params(("name" = String, Path)),
    responses((status = 204, description = "Deleted (its runs stay until retention removes them)"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    state.ax.delete_task(&caller.tenant, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    state: &ApiState,
    caller: &Caller,
    name: &str,
    paused: bool,
) -> ApiResult<Json<TaskView>> {
    state.ax.set_paused(&caller.tenant, name, paused).await?;
    let (task, schedule) = state.ax.get_task(&caller.tenant, name)?;
    Ok(Json(TaskView::new(task, schedule.as_ref(), false)))
}

/// `POST /v1/tasks/{name}/pause`.
#[utoipa::path(post, path = "/v1/tasks/{name}/pause", tag = "tasks", params(("name" = String, Path)),
    responses((status = 200, body = TaskView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn pause(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TaskView>> {
    set_paused(&state, &caller, &name, true).await
}

/// `POST /v1/tasks/{name}/resume`.
#[utoipa::path(post, path = "/v1/tasks/{name}/resume", tag = "tasks", params(("name" = String, Path)),
    responses((status = 200, body = TaskView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn resume(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TaskView>> {
    set_paused(&state, &caller, &name, false).await
}

/// `?count=N` of a preview.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct CountQuery {
    /// Instants to show (default 5, at most 100).
    count: Option<usize>,
}

/// `GET /v1/tasks/{name}/next?count=N`.
#[utoipa::path(get, path = "/v1/tasks/{name}/next", tag = "tasks", params(("name" = String, Path), CountQuery),
    responses((status = 200, body = NextFires), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn next(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<CountQuery>,
) -> ApiResult<Json<NextFires>> {
    let count = query.count.unwrap_or(DEFAULT_PREVIEW);
    let next: Vec<String> = state
        .ax
        .next_fires(&caller.tenant, &name, count)?
        .into_iter()
        .map(|at| rfc3339(at.timestamp_millis()))
        .collect();
    Ok(Json(NextFires { next }))
}

/// `?format=text|dot|mermaid|json&run=ID` of a graph.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct GraphQuery {
    /// `text` (default), `dot`, `mermaid` or `json`.
    format: Option<String>,
    /// A run id: draw that run's definition with its step states.
    run: Option<String>,
}

/// `GET /v1/tasks/{name}/graph?format=&run=`: the DAG as `text/plain` (text,
/// DOT, Mermaid) or as a JSON object; with `run`, that run's step states.
#[utoipa::path(get, path = "/v1/tasks/{name}/graph", tag = "tasks", params(("name" = String, Path), GraphQuery),
    responses((status = 200, description = "The drawing: text/plain for text, dot, mermaid; a JSON object for json",
            content((String = "text/plain"), (Object = "application/json"))),
        (status = 400, description = "An unknown format", body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn graph(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<GraphQuery>,
) -> ApiResult<Response> {
    let format = match query.format.as_deref().filter(|f| !f.is_empty()) {
        Some(f) => f
            .parse::<Format>()
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Format::default(),
    };
    let run = query.run.as_deref().filter(|r| !r.is_empty());
    let body = state.ax.task_graph(&caller.tenant, &name, run, format)?;
    let content_type = match format {
        Format::Json => "application/json",
        Format::Text | Format::Dot | Format::Mermaid => "text/plain; charset=utf-8",
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}
