//! `/v1/tasks`: create or replace (YAML or JSON text; many at once, all or
//! nothing, with `POST /v1/tasks:apply`), list (by name, cursor
//! paging), show, delete, pause, resume, the next fire instants and the DAG
//! drawn as text, DOT, Mermaid or JSON. Parsing and validating a definition
//! is the service's (and `task`'s) job; drawing the DAG is `graph`'s.
//!
//! The error statuses each route can answer are declared in
//! `contract::ROUTES`, not in the annotations here.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiBody, ApiPath, ApiQuery, PAGE_LIMITS, PREVIEW_COUNTS, bounded};
use super::views::{NextFires, TaskList, TaskView};
use crate::graph::Format;
use crate::model::time::rfc3339;

/// Fire instants a preview shows when the client does not say.
const DEFAULT_PREVIEW: usize = 5;
/// Tasks a page holds when the client does not say.
const DEFAULT_PAGE: usize = 100;

/// `PUT /v1/tasks/{name}`: 201 created, 200 replaced.
#[utoipa::path(put, path = "/v1/tasks/{name}", tag = "tasks", params(("name" = String, Path)),
    request_body(description = "The task definition as YAML or JSON text (docs/TASKS.md); its `name` must be the one in the path. At most 1 MiB.",
        content((Object = "application/yaml"), (Object = "application/json"))),
    responses(
        (status = 201, description = "Created", body = TaskView),
        (status = 200, description = "Replaced", body = TaskView)))]
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

/// The body of a bulk apply.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ApplyBody {
    /// 1 to 1000 definitions, each named by its own `name`.
    #[schema(min_items = 1, max_items = 1000)]
    tasks: Vec<ApplyItem>,
}

/// One definition of a bulk apply.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ApplyItem {
    /// What the client calls it (`ax task apply -f DIR/` sends the file
    /// name), repeated in its errors; optional.
    file: Option<String>,
    /// The definition as YAML or JSON text (docs/TASKS.md), at most 1 MiB.
    source: String,
}

/// A task stored by a bulk apply.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(super) struct AppliedTask {
    /// Its place in the request, from 0.
    index: usize,
    /// The `file` it was sent with.
    file: Option<String>,
    /// Whether it is new (`false`: it replaced a saved definition).
    created: bool,
    /// The task as stored.
    task: TaskView,
}

/// The answer of a bulk apply.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(super) struct ApplyAnswer {
    /// Every definition of the request, in order.
    tasks: Vec<AppliedTask>,
    /// New tasks.
    created: usize,
    /// Replaced tasks.
    replaced: usize,
}

/// `POST /v1/tasks:apply`: many definitions, all or nothing. Each is checked
/// as `PUT /v1/tasks/{name}` checks one, and the `after` triggers of the set
/// together; if any fails, nothing is stored and the answer is `422 invalid`
/// with every bad definition in `details.items` (`index`, `file`, `error`).
#[utoipa::path(post, path = "/v1/tasks:apply", tag = "tasks",
    request_body(content = ApplyBody, description = "At most 16 MiB"),
    responses((status = 200, description = "All stored, durably, in one write", body = ApplyAnswer)))]
pub(super) async fn apply(
    State(state): State<ApiState>,
    caller: Caller,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<ApplyAnswer>> {
    let body: ApplyBody = super::error::parse_json(&body)?;
    let total = body.tasks.len();
    crate::service::check_batch_len(total, crate::service::MAX_BATCH_TASKS, "tasks")?;
    // The bounds of a single apply's body, item by item.
    let bad: Vec<(usize, Option<String>, ApiError)> = body
        .tasks
        .iter()
        .enumerate()
        .filter_map(|(index, item)| {
            let bad = if item.source.len() > super::MAX_BODY_BYTES {
                ApiError::TooLarge(format!(
                    "the definition is {} bytes; one is at most {} bytes, as a single apply's body",
                    item.source.len(),
                    super::MAX_BODY_BYTES
                ))
            } else if item.source.trim().is_empty() {
                ApiError::bad_request("the definition is empty")
            } else {
                return None;
            };
            Some((index, item.file.clone(), bad))
        })
        .collect();
    if !bad.is_empty() {
        return Err(ApiError::items("tasks", total, bad));
    }
    let items: Vec<(Option<String>, String)> =
        body.tasks.into_iter().map(|t| (t.file, t.source)).collect();
    let stored = state.ax.put_tasks(&caller.tenant, &items).await?;
    let mut out = ApplyAnswer {
        tasks: Vec::with_capacity(total),
        created: 0,
        replaced: 0,
    };
    for (index, ((record, schedule, created), (file, _))) in
        stored.into_iter().zip(items).enumerate()
    {
        if created {
            out.created += 1;
        } else {
            out.replaced += 1;
        }
        out.tasks.push(AppliedTask {
            index,
            file,
            created,
            task: TaskView::new(record, Some(&schedule), false),
        });
    }
    tracing::info!(tenant = %caller.tenant, created = out.created, replaced = out.replaced, "tasks applied in bulk");
    Ok(Json(out))
}

/// `?limit=&cursor=` of a task listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct TaskListQuery {
    /// Page size, default 100, 1..=1000.
    limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// `GET /v1/tasks?limit=&cursor=`: `{"tasks": [...], "next_cursor": ...}`, by name.
#[utoipa::path(get, path = "/v1/tasks", tag = "tasks", params(TaskListQuery),
    responses((status = 200, body = TaskList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<TaskListQuery>,
) -> ApiResult<Json<TaskList>> {
    let limit = bounded("limit", query.limit, DEFAULT_PAGE, PAGE_LIMITS)?;
    let after = query.cursor.as_deref().filter(|c| !c.is_empty());
    let (page, next_cursor) = state.ax.list_tasks_page(&caller.tenant, after, limit)?;
    let tasks: Vec<TaskView> = page
        .into_iter()
        .map(|(task, schedule)| TaskView::new(task, schedule.as_ref(), false))
        .collect();
    Ok(Json(TaskList { tasks, next_cursor }))
}

/// `GET /v1/tasks/{name}`: with the definition as it was sent (`source`).
#[utoipa::path(get, path = "/v1/tasks/{name}", tag = "tasks", params(("name" = String, Path)),
    responses((status = 200, body = TaskView)))]
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
    responses((status = 204, description = "Deleted (its runs stay until retention removes them)")))]
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
    responses((status = 200, body = TaskView)))]
pub(super) async fn pause(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TaskView>> {
    set_paused(&state, &caller, &name, true).await
}

/// `POST /v1/tasks/{name}/resume`.
#[utoipa::path(post, path = "/v1/tasks/{name}/resume", tag = "tasks", params(("name" = String, Path)),
    responses((status = 200, body = TaskView)))]
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
    /// Instants to show, default 5, 1..=100.
    count: Option<usize>,
}

/// `GET /v1/tasks/{name}/next?count=N`.
#[utoipa::path(get, path = "/v1/tasks/{name}/next", tag = "tasks", params(("name" = String, Path), CountQuery),
    responses((status = 200, body = NextFires)))]
pub(super) async fn next(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<CountQuery>,
) -> ApiResult<Json<NextFires>> {
    let count = bounded("count", query.count, DEFAULT_PREVIEW, PREVIEW_COUNTS)?;
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
            content((String = "text/plain"), (Object = "application/json")))))]
pub(super) async fn graph(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<GraphQuery>,
) -> ApiResult<Response> {
    // An empty `format=` is refused like any unknown one.
    let format = match query.format.as_deref() {
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
