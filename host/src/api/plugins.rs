//! `/v1/plugins`: upload (raw `application/wasm` or multipart), list, show,
//! delete. Validation (component? ax world? compiles?) is the service's and
//! the runtime's; this module only gets the bytes and the names out of the
//! request.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{StatusCode, header::CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiPath, ApiQuery};
use super::views::PluginView;

/// `?name=N&version=V` of an upload.
#[derive(Debug, Deserialize)]
pub(super) struct UploadQuery {
    name: Option<String>,
    version: Option<String>,
}

/// `POST /v1/plugins?name=N&version=V`: 201 when stored, 200 when the same
/// bytes were already uploaded under this name and version.
pub(super) async fn upload(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<UploadQuery>,
    req: Request,
) -> ApiResult<Response> {
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let (mut name, mut version) = (query.name, query.version);
    let bytes = match mime.as_str() {
        "multipart/form-data" => {
            let mut form = Multipart::from_request(req, &state).await?;
            let mut file = None;
            while let Some(field) = form.next_field().await? {
                match field.name().unwrap_or_default() {
                    "name" => name = Some(field.text().await?),
                    "version" => version = Some(field.text().await?),
                    "file" => file = Some(field.bytes().await?),
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "unknown multipart field `{other}` (expected name, version, file)"
                        )));
                    }
                }
            }
            file.ok_or_else(|| ApiError::bad_request("the multipart body has no `file` field"))?
        }
        "" | "application/wasm" | "application/octet-stream" => {
            Bytes::from_request(req, &state).await?
        }
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "a plugin is sent as application/wasm, application/octet-stream or multipart/form-data, not `{other}`"
            )));
        }
    };
    let name = name.ok_or_else(|| {
        ApiError::bad_request("missing plugin `name` (query parameter or multipart field)")
    })?;
    let version = version.ok_or_else(|| {
        ApiError::bad_request("missing plugin `version` (query parameter or multipart field)")
    })?;
    let (record, created) = state
        .ax
        .upload_plugin(&caller.tenant, &name, &version, bytes.to_vec())
        .await?;
    tracing::info!(tenant = %caller.tenant, plugin = %name, version = %version, digest = %record.digest, created, "plugin uploaded");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(PluginView::from(record))).into_response())
}

/// `GET /v1/plugins`.
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    let plugins: Vec<PluginView> = state
        .ax
        .list_plugins(&caller.tenant)?
        .into_iter()
        .map(PluginView::from)
        .collect();
    Ok(Json(json!({ "plugins": plugins })))
}

/// `GET /v1/plugins/{name}`: its versions.
pub(super) async fn versions(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let versions: Vec<PluginView> = state
        .ax
        .plugin_versions(&caller.tenant, &name)?
        .into_iter()
        .map(PluginView::from)
        .collect();
    Ok(Json(json!({ "name": name, "versions": versions })))
}

/// `GET /v1/plugins/{name}/{version}`.
pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((name, version)): ApiPath<(String, String)>,
) -> ApiResult<Json<PluginView>> {
    Ok(Json(
        state.ax.get_plugin(&caller.tenant, &name, &version)?.into(),
    ))
}

/// `DELETE /v1/plugins/{name}/{version}`: 204, or 409 while a task uses it.
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((name, version)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    state
        .ax
        .delete_plugin(&caller.tenant, &name, &version)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
