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
use crate::scheduler::clock::rfc3339;

/// What a `PUT` answers: the name, never the value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct SecretSet {
    /// The secret's name.
    pub(super) name: String,
    /// Whether it was new.
    pub(super) created: bool,
}

/// One secret as listed: no value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct SecretView {
    /// The secret's name.
    pub(super) name: String,
    /// When it was last set (RFC 3339, UTC).
    pub(super) updated_at: String,
}

/// The tenant's secrets, by name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct SecretList {
    /// Names and update instants.
    pub(super) secrets: Vec<SecretView>,
}

/// `PUT /v1/secrets/{name}`: body = the value (UTF-8 text); 201 created, 200 replaced.
#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path)),
    request_body(description = "The value, as UTF-8 text (at most 64 KiB). Never returned.",
        content((String = "text/plain"))),
    responses(
        (status = 201, description = "Created", body = SecretSet),
        (status = 200, description = "Replaced", body = SecretSet),
        (status = 400, description = "`bad_request`: empty or not UTF-8", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`invalid`: a bad name", body = ErrorBody)))]
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

/// `GET /v1/secrets`: names and update instants, never values.
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
        .map(|s| SecretView {
            name: s.name,
            updated_at: rfc3339(s.updated_at),
        })
        .collect();
    Ok(Json(SecretList { secrets }))
}

/// `DELETE /v1/secrets/{name}`: 204.
#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    state.ax.delete_secret(&caller.tenant, &name).await?;
    tracing::info!(tenant = %caller.tenant, secret = %name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}
