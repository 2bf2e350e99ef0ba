//! `GET /v1/runs/{id}/steps/{step}/attempts/{n}/record` and `…/component`:
//! an attempt's record (`record:` on the task or step) and the component it
//! ran, for `ax run replay`. Tenant-scoped through the run, like every run
//! route.
//!
//! The error statuses each route can answer are declared in
//! `contract::ROUTES`, not in the annotations here.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::auth::Caller;
use super::error::ApiResult;
use super::extract::ApiPath;

/// `GET /v1/runs/{id}/steps/{step}/attempts/{n}/record`: the record, JSON.
#[utoipa::path(get, path = "/v1/runs/{id}/steps/{step}/attempts/{n}/record", tag = "runs",
    params(("id" = String, Path, description = "Run id"), ("step" = String, Path),
        ("n" = u32, Path, description = "Attempt number, from 1")),
    responses((status = 200, description = "The attempt's record: context, input, limits, config, secret names (never values), clock and random streams, KV calls and HTTP exchanges in order, `truncated`, and how the attempt ended (docs/PLUGINS.md, \"Replaying a failed attempt\").", body = Object)))]
pub(super) async fn record(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((id, step, n)): ApiPath<(String, String, u32)>,
) -> ApiResult<Json<crate::model::record::AttemptRecord>> {
    Ok(Json(state.ax.attempt_record(
        &caller.tenant,
        &id,
        &step,
        n,
    )?))
}

/// `GET /v1/runs/{id}/steps/{step}/attempts/{n}/component`: the bytes of the
/// component that recorded attempt ran.
#[utoipa::path(get, path = "/v1/runs/{id}/steps/{step}/attempts/{n}/component", tag = "runs",
    params(("id" = String, Path, description = "Run id"), ("step" = String, Path),
        ("n" = u32, Path, description = "Attempt number, from 1")),
    responses((status = 200, description = "The component, `application/wasm`.", content_type = "application/wasm", body = Vec<u8>)))]
pub(super) async fn component(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((id, step, n)): ApiPath<(String, String, u32)>,
) -> ApiResult<Response> {
    let bytes = state.ax.attempt_component(&caller.tenant, &id, &step, n)?;
    Ok(([(header::CONTENT_TYPE, "application/wasm")], bytes).into_response())
}
