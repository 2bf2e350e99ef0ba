//! `/v1/plugins`: upload (raw `application/wasm` or multipart), list, show,
//! delete; `/v1/plugins/{name}/tags/{tag}`: set, move and delete a tag.
//! Validation (component? ax world?), the tenant's plugin quotas and the
//! background compilation are the service's and the runtime's; this module
//! gets the bytes and the names out of the request, after taking the
//! upload's place in the compile line (so a refused upload's body is never
//! read; the place is held until its compilation ends) and within
//! [`UPLOAD_BODY_TIMEOUT`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{StatusCode, header::CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::time::Duration;

use super::ApiState;
use super::auth::Caller;
use super::error::ErrorBody;
use super::error::{ApiError, ApiResult, parse_json};
use super::extract::{ApiBody, ApiPath, ApiQuery};
use super::views::{PluginList, PluginTagView, PluginVersions, PluginView};

/// How long an upload's body may take to arrive. Its place in the compile
/// line is held meanwhile, so a client sending slowly cannot keep it: 32 MiB
/// in two minutes needs ~2.3 Mbit/s.
pub(super) const UPLOAD_BODY_TIMEOUT: Duration = Duration::from_secs(120);

/// `?name=N&version=V` of an upload.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct UploadQuery {
    /// Plugin name (or the multipart field `name`).
    name: Option<String>,
    /// Semver version (or the multipart field `version`).
    version: Option<String>,
}

/// `POST /v1/plugins?name=N&version=V`: 201 when stored (`status:
/// compiling`, compiled in the background, or `ready` when these bytes are
/// loaded already), 200 when the same bytes were already uploaded under this
/// name and version. Poll `GET /v1/plugins/{name}/{version}` for `ready` or
/// `failed`.
#[utoipa::path(post, path = "/v1/plugins", tag = "plugins", params(UploadQuery),
    request_body(description = "The component: `application/wasm` or `application/octet-stream` bytes, or `multipart/form-data` with fields `name`, `version`, `file`.",
        content((Vec<u8> = "application/wasm"), (Vec<u8> = "application/octet-stream"), (Vec<u8> = "multipart/form-data"))),
    responses(
        (status = 201, description = "Stored and checked; `status` is `compiling` (compiled in the background: poll the version until `ready` or `failed`) or `ready`", body = PluginView),
        (status = 200, description = "These bytes were already uploaded as this version", body = PluginView)))]
pub(super) async fn upload(
    State(state): State<ApiState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<UploadQuery>,
    req: Request,
) -> ApiResult<Response> {
    // Held to the end of the upload's compilation; refused before the body is kept.
    let place = match state.ax.runtime.admit_upload() {
        Ok(place) => place,
        Err(refused) => {
            discard_body(&state, req).await;
            return Err(refused.into());
        }
    };
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
    let body = async { read_body(&state, req, &mime, &mut name, &mut version).await };
    let bytes = tokio::time::timeout(UPLOAD_BODY_TIMEOUT, body)
        .await
        .map_err(|_| {
            ApiError::BodyTimeout(format!(
                "the plugin body did not arrive within {}s",
                UPLOAD_BODY_TIMEOUT.as_secs()
            ))
        })??;
    let name = name.ok_or_else(|| {
        ApiError::bad_request("missing plugin `name` (query parameter or multipart field)")
    })?;
    let version = version.ok_or_else(|| {
        ApiError::bad_request("missing plugin `version` (query parameter or multipart field)")
    })?;
    let (record, created) = state
        .ax
        .upload_plugin_admitted(place, &caller.tenant, &name, &version, Vec::from(bytes))
        .await?;
    tracing::info!(tenant = %caller.tenant, plugin = %name, version = %version, digest = %record.digest, status = %record.status, created, "plugin uploaded");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let tier = state.ax.plugin_tier(&record.digest);
    Ok((status, Json(PluginView::from(record).with_tier(tier))).into_response())
}

/// Reads and drops a refused upload's body, so a client that sends its whole
/// body before reading the answer (most do, unless they ask `Expect:
/// 100-continue`) gets the refusal rather than a broken pipe. Nothing is
/// kept: memory stays bounded by the compile line. A client that asked to
/// continue is answered without its body being sent at all.
async fn discard_body(state: &ApiState, req: Request) {
    use http_body_util::BodyExt as _;
    let expects_continue = req
        .headers()
        .get(axum::http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        return;
    }
    let limit = state
        .ax
        .max_plugin_bytes
        .saturating_add(super::MULTIPART_OVERHEAD);
    let mut body = http_body_util::Limited::new(req.into_body(), limit);
    let _ = tokio::time::timeout(UPLOAD_BODY_TIMEOUT, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
}

/// The component's bytes (and, in a multipart body, the name and version).
async fn read_body(
    state: &ApiState,
    req: Request,
    mime: &str,
    name: &mut Option<String>,
    version: &mut Option<String>,
) -> ApiResult<Bytes> {
    let bytes = match mime {
        "multipart/form-data" => {
            let mut form = Multipart::from_request(req, state).await?;
            let mut file = None;
            while let Some(field) = form.next_field().await? {
                match field.name().unwrap_or_default() {
                    "name" => *name = Some(field.text().await?),
                    "version" => *version = Some(field.text().await?),
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
            Bytes::from_request(req, state).await?
        }
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "a plugin is sent as application/wasm, application/octet-stream or multipart/form-data, not `{other}`"
            )));
        }
    };
    Ok(bytes)
}

/// `GET /v1/plugins`.
#[utoipa::path(get, path = "/v1/plugins", tag = "plugins",
    responses((status = 200, body = PluginList), (status = 401, body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> ApiResult<Json<PluginList>> {
    let tags = state.ax.plugin_tags(&caller.tenant)?;
    let plugins: Vec<PluginView> = state
        .ax
        .list_plugins(&caller.tenant)?
        .into_iter()
        .map(|p| {
            let tier = state.ax.plugin_tier(&p.digest);
            PluginView::tagged(p, &tags).with_tier(tier)
        })
        .collect();
    Ok(Json(PluginList { plugins }))
}

/// `GET /v1/plugins/{name}`: its versions.
#[utoipa::path(get, path = "/v1/plugins/{name}", tag = "plugins", params(("name" = String, Path)),
    responses((status = 200, body = PluginVersions), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn versions(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<PluginVersions>> {
    let tags: Vec<_> = state
        .ax
        .plugin_tags(&caller.tenant)?
        .into_iter()
        .filter(|t| t.name == name)
        .collect();
    let versions: Vec<PluginView> = state
        .ax
        .plugin_versions(&caller.tenant, &name)?
        .into_iter()
        .map(|p| {
            let tier = state.ax.plugin_tier(&p.digest);
            PluginView::tagged(p, &tags).with_tier(tier)
        })
        .collect();
    let tags = tags.into_iter().map(PluginTagView::from).collect();
    Ok(Json(PluginVersions {
        name,
        versions,
        tags,
    }))
}

/// `GET /v1/plugins/{name}/{version}`.
#[utoipa::path(get, path = "/v1/plugins/{name}/{version}", tag = "plugins",
    params(("name" = String, Path), ("version" = String, Path)),
    responses((status = 200, body = PluginView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((name, version)): ApiPath<(String, String)>,
) -> ApiResult<Json<PluginView>> {
    let record = state.ax.get_plugin(&caller.tenant, &name, &version)?;
    let tags = state.ax.plugin_tags(&caller.tenant)?;
    let tier = state.ax.plugin_tier(&record.digest);
    Ok(Json(PluginView::tagged(record, &tags).with_tier(tier)))
}

/// `DELETE /v1/plugins/{name}/{version}`: 204, or 409 while a task uses it.
#[utoipa::path(delete, path = "/v1/plugins/{name}/{version}", tag = "plugins",
    params(("name" = String, Path), ("version" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "Tasks still use it (named)", body = ErrorBody)))]
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

/// The body of `PUT /v1/plugins/{name}/tags/{tag}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TagTarget {
    /// The exact version the tag is to point at (stored).
    version: String,
}

/// `PUT /v1/plugins/{name}/tags/{tag}` with `{"version": "1.1.0"}`: sets or
/// moves the tag; the answer names the version it pointed at before.
#[utoipa::path(put, path = "/v1/plugins/{name}/tags/{tag}", tag = "plugins",
    params(("name" = String, Path), ("tag" = String, Path, description = "A name starting with a letter that does not read as a version range (`x` does)")),
    request_body(content = TagTarget, content_type = "application/json"),
    responses((status = 200, description = "Set or moved", body = PluginTagView)))]
pub(super) async fn put_tag(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((name, tag)): ApiPath<(String, String)>,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<PluginTagView>> {
    let target: TagTarget = parse_json(&body)?;
    let (record, previous) = state
        .ax
        .set_plugin_tag(&caller.tenant, &name, &tag, &target.version)
        .await?;
    tracing::info!(tenant = %caller.tenant, plugin = %name, tag = %tag, version = %record.version,
        previous = previous.as_deref().unwrap_or("-"), "plugin tag set");
    let mut view = PluginTagView::from(record);
    view.previous = previous;
    Ok(Json(view))
}

/// `DELETE /v1/plugins/{name}/tags/{tag}`: 204, or 409 while a task names it.
#[utoipa::path(delete, path = "/v1/plugins/{name}/tags/{tag}", tag = "plugins",
    params(("name" = String, Path), ("tag" = String, Path)),
    responses((status = 204, description = "Deleted")))]
pub(super) async fn delete_tag(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((name, tag)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    state
        .ax
        .delete_plugin_tag(&caller.tenant, &name, &tag)
        .await?;
    tracing::info!(tenant = %caller.tenant, plugin = %name, tag = %tag, "plugin tag deleted");
    Ok(StatusCode::NO_CONTENT)
}
