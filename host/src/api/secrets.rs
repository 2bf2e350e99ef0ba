//! `/v1/secrets`: the caller's tenant's secrets. Write-only: `PUT` takes the
//! value as the raw body, `GET` lists names and update instants, `DELETE`
//! removes one. No answer ever contains a value, and nothing here logs one.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiBody, ApiPath};
use crate::scheduler::clock::rfc3339;

/// `PUT /v1/secrets/{name}`: body = the value (UTF-8 text); 201 created, 200 replaced.
pub(super) async fn put(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    // The error names the problem, never the bytes.
    let value = std::str::from_utf8(&body)
        .map_err(|_| ApiError::bad_request("a secret value is UTF-8 text"))?;
    let created = state.ax.put_secret(&caller.tenant, &name, value).await?;
    tracing::info!(tenant = %caller.tenant, secret = %name, created, "secret set");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({ "name": name, "created": created }))).into_response())
}

/// `GET /v1/secrets`: `{"secrets": [{"name", "updated_at"}]}`.
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    let secrets: Vec<serde_json::Value> = state
        .ax
        .list_secrets(&caller.tenant)?
        .into_iter()
        .map(|s| json!({ "name": s.name, "updated_at": rfc3339(s.updated_at) }))
        .collect();
    Ok(Json(json!({ "secrets": secrets })))
}

/// `DELETE /v1/secrets/{name}`: 204.
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    state.ax.delete_secret(&caller.tenant, &name).await?;
    tracing::info!(tenant = %caller.tenant, secret = %name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}
