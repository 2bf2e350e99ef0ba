//! `/v1/secrets`: the caller's tenant's secrets. Write-only: `PUT` takes the
//! value as the raw body, `GET` lists names and update instants, `DELETE`
//! removes one. No answer ever contains a value, and nothing here logs one.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiBody, ApiPath};
use crate::model::time::rfc3339;

/// The answer to setting a secret: never its value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct SecretSet {
    /// Secret name.
    name: String,
    /// Whether it was new.
    created: bool,
}

/// A secret as listed: its name and when it was set.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct SecretEntry {
    /// Secret name.
    name: String,
    /// When last set (RFC 3339).
    updated_at: String,
}

/// The caller's tenant's secrets, by name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct SecretList {
    /// Names and update instants; never values.
    secrets: Vec<SecretEntry>,
}

/// `PUT /v1/secrets/{name}`: body = the value (UTF-8 text); 201 created, 200 replaced.
#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path)),
    request_body(description = "The secret's value as UTF-8 text (write-only: never returned).", content_type = "text/plain", content = String),
    responses((status = 201, description = "Created", body = SecretSet), (status = 200, description = "Replaced", body = SecretSet),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
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
    Ok((status, Json(SecretSet { name, created })).into_response())
}

/// `GET /v1/secrets`: `{"secrets": [{"name", "updated_at"}]}`.
#[utoipa::path(get, path = "/v1/secrets", tag = "secrets",
    responses((status = 200, body = SecretList), (status = 401, body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> ApiResult<Json<SecretList>> {
    let secrets = state
        .ax
        .list_secrets(&caller.tenant)?
        .into_iter()
        .map(|s| SecretEntry {
            name: s.name,
            updated_at: rfc3339(s.updated_at),
        })
        .collect();
    Ok(Json(SecretList { secrets }))
}

/// `DELETE /v1/secrets/{name}`: 204.
#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    state.ax.delete_secret(&caller.tenant, &name).await?;
    tracing::info!(tenant = %caller.tenant, secret = %name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}
