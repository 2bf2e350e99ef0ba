//! `/v1/tenants`: admin only (a tenant token gets 403). Create, list, show,
//! change, quota, disable/enable, tokens (shown once at creation, revocable)
//! and usage reports. The rules live in `service::tenants` and `tenant`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorBody, parse_json};
use super::extract::{ApiBody, ApiPath, ApiQuery};
use crate::model::time::rfc3339;
use crate::service::TenantSpec;
use crate::tenant::{Quota, TenantRecord, TokenRecord};

/// A tenant as answered.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantView {
    /// Name.
    pub name: String,
    /// A note for people.
    pub description: Option<String>,
    /// What it may use.
    pub quota: Quota,
    /// Outbound HTTP ceiling.
    pub allow_http: Vec<String>,
    /// Whether it is disabled.
    pub disabled: bool,
    /// Webhook alerts for every task of the tenant.
    pub alerts: Option<crate::task::alerts::AlertSpec>,
    /// The fairness limits in force, defaults filled in (quota fields left
    /// out get the host's defaults: docs/TENANTS.md).
    pub effective: EffectiveLimits,
    /// Why its runs are held now, if they are.
    pub held: Option<String>,
    /// What it keeps now against its storage quotas (`GET
    /// /v1/tenants/{t}` only; a list leaves it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<crate::service::StorageUsage>,
    /// When created.
    pub created_at: String,
    /// When last changed.
    pub updated_at: String,
}

/// Limits of a tenant that have a default when its quota sets none.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EffectiveLimits {
    /// Highest priority its runs may have.
    pub max_priority: u8,
    /// Attempts it may have running at once (`None`: only the host's limits).
    pub max_concurrent_attempts: Option<usize>,
}

impl TenantView {
    fn new(t: TenantRecord, held: Option<String>, slots: usize) -> Self {
        let effective = EffectiveLimits {
            max_priority: t.max_priority(),
            max_concurrent_attempts: t.max_running(slots),
        };
        Self {
            effective,
            name: t.name,
            description: t.description,
            quota: t.quota,
            allow_http: t.allow_http,
            disabled: t.disabled,
            alerts: t.alerts,
            held,
            storage: None,
            created_at: rfc3339(t.created_at),
            updated_at: rfc3339(t.updated_at),
        }
    }
}

/// A token as listed: never the secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenView {
    /// Public id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// Label.
    pub label: Option<String>,
    /// When created.
    pub created_at: String,
    /// When revoked.
    pub revoked_at: Option<String>,
}

impl From<TokenRecord> for TokenView {
    fn from(t: TokenRecord) -> Self {
        Self {
            id: t.id,
            tenant: t.tenant,
            label: t.label,
            created_at: rfc3339(t.created_at),
            revoked_at: t.revoked_at.map(rfc3339),
        }
    }
}

/// `GET /v1/tenants`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantList {
    /// Every tenant, by name.
    pub tenants: Vec<TenantView>,
}

/// `GET /v1/tenants/{t}/tokens`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenList {
    /// The tenant's tokens (revoked ones too), never their secrets.
    pub tokens: Vec<TokenView>,
}

/// A token just created: its record and, this once, the secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NewToken {
    /// The record.
    #[serde(flatten)]
    pub record: TokenView,
    /// The bearer token; shown once, stored hashed.
    pub token: String,
}

fn view(state: &ApiState, t: TenantRecord) -> TenantView {
    let held = state.ax.scheduler.stats().hold_reason(&t.name);
    TenantView::new(t, held, state.ax.concurrency)
}

/// `POST /v1/tenants` `{name, description?, quota?, allow_http?}`: 201.
#[utoipa::path(post, path = "/v1/tenants", tag = "tenants", request_body = TenantSpec,
    responses((status = 201, body = TenantView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody),
        (status = 409, description = "The tenant exists", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(super) async fn create(
    State(state): State<ApiState>,
    caller: Caller,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    caller.require_admin()?;
    let spec: TenantSpec = parse_json(&body)?;
    let t = state.ax.create_tenant(spec).await?;
    tracing::info!(tenant = %t.name, "tenant created");
    Ok((StatusCode::CREATED, Json(view(&state, t))).into_response())
}

/// `GET /v1/tenants`.
#[utoipa::path(get, path = "/v1/tenants", tag = "tenants",
    responses((status = 200, body = TenantList), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> ApiResult<Json<TenantList>> {
    caller.require_admin()?;
    let tenants: Vec<TenantView> = state
        .ax
        .list_tenants()
        .into_iter()
        .map(|t| view(&state, t))
        .collect();
    Ok(Json(TenantList { tenants }))
}

/// `GET /v1/tenants/{t}`.
#[utoipa::path(get, path = "/v1/tenants/{tenant}", tag = "tenants", params(("tenant" = String, Path)),
    responses((status = 200, body = TenantView), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TenantView>> {
    caller.require_admin()?;
    let mut shown = view(&state, state.ax.get_tenant(&name)?);
    shown.storage = Some(state.ax.storage_usage(&name)?);
    Ok(Json(shown))
}

/// `PUT /v1/tenants/{t}` `{description?, quota?, allow_http?}`: fields left out stay.
#[utoipa::path(put, path = "/v1/tenants/{tenant}", tag = "tenants", params(("tenant" = String, Path)), request_body = TenantSpec,
    responses((status = 200, body = TenantView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(super) async fn update(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<TenantView>> {
    caller.require_admin()?;
    let spec: TenantSpec = parse_json(&body)?;
    Ok(Json(view(
        &state,
        state.ax.update_tenant(&name, spec).await?,
    )))
}

/// `PUT /v1/tenants/{t}/quota` (a whole [`Quota`]; absent fields mean no limit).
#[utoipa::path(put, path = "/v1/tenants/{tenant}/quota", tag = "tenants", params(("tenant" = String, Path)), request_body = Quota,
    responses((status = 200, body = TenantView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(super) async fn quota(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<TenantView>> {
    caller.require_admin()?;
    let quota: Quota = parse_json(&body)?;
    let t = state.ax.set_quota(&name, quota).await?;
    tracing::info!(tenant = %t.name, "tenant quota changed");
    Ok(Json(view(&state, t)))
}

/// `POST /v1/tenants/{t}/disable`.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/disable", tag = "tenants", params(("tenant" = String, Path)),
    responses((status = 200, body = TenantView), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn disable(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TenantView>> {
    set_disabled(&state, &caller, &name, true).await
}

/// `POST /v1/tenants/{t}/enable`.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/enable", tag = "tenants", params(("tenant" = String, Path)),
    responses((status = 200, body = TenantView), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn enable(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TenantView>> {
    set_disabled(&state, &caller, &name, false).await
}

/// What `disable` and `enable` share.
async fn set_disabled(
    state: &ApiState,
    caller: &Caller,
    name: &str,
    disabled: bool,
) -> ApiResult<Json<TenantView>> {
    caller.require_admin()?;
    let t = state.ax.set_disabled(name, disabled).await?;
    tracing::info!(tenant = %t.name, disabled, "tenant state changed");
    Ok(Json(view(state, t)))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenRequest {
    /// A note for people (which service holds the token).
    #[serde(default)]
    label: Option<String>,
}

/// `POST /v1/tenants/{t}/tokens` `{label?}`: 201 with the token, shown this once.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/tokens", tag = "tenants", params(("tenant" = String, Path)),
    request_body(content = Option<TokenRequest>, description = "Optional"),
    responses((status = 201, body = NewToken), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "Too many tokens", body = ErrorBody)))]
pub(super) async fn create_token(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    caller.require_admin()?;
    // No body, or `null` (what the document's optional body admits), is `{}`.
    let request: TokenRequest = if body.iter().all(u8::is_ascii_whitespace) {
        TokenRequest::default()
    } else {
        parse_json::<Option<TokenRequest>>(&body)?.unwrap_or_default()
    };
    let (token, record) = state.ax.create_token(&name, request.label).await?;
    tracing::info!(tenant = %name, token_id = %record.id, "tenant token created");
    let body = NewToken {
        record: TokenView::from(record),
        token,
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `GET /v1/tenants/{t}/tokens`: ids and labels, never secrets.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/tokens", tag = "tenants", params(("tenant" = String, Path)),
    responses((status = 200, body = TokenList), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn list_tokens(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<TokenList>> {
    caller.require_admin()?;
    let tokens: Vec<TokenView> = state
        .ax
        .list_tokens(&name)?
        .into_iter()
        .map(TokenView::from)
        .collect();
    Ok(Json(TokenList { tokens }))
}

/// `DELETE /v1/tenants/{t}/tokens/{id}`: 204; the token is refused from now on.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/tokens/{id}", tag = "tenants", params(("tenant" = String, Path), ("id" = String, Path)),
    responses((status = 204, description = "Revoked"), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn revoke_token(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath((name, id)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    caller.require_admin()?;
    state.ax.revoke_token(&name, &id).await?;
    tracing::info!(tenant = %name, token_id = %id, "tenant token revoked");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct UsageQuery {
    /// RFC 3339 instant or date (YYYY-MM-DD); default: the current fuel window's start.
    from: Option<String>,
    /// RFC 3339 instant or date; default: the window's end.
    to: Option<String>,
}

fn instant(field: &str, text: Option<String>) -> ApiResult<Option<DateTime<Utc>>> {
    // An empty `from=` is refused like any other text that is not an instant.
    text.map(|t| {
        DateTime::parse_from_rfc3339(&t)
            .map(|d| d.with_timezone(&Utc))
            .or_else(|_| {
                chrono::NaiveDate::parse_from_str(&t, "%Y-%m-%d")
                    .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight").and_utc())
            })
            .map_err(|_| {
                ApiError::bad_request(format!(
                    "`{field}` must be an RFC 3339 instant or a date (YYYY-MM-DD), not `{t}`"
                ))
            })
    })
    .transpose()
}

/// `GET /v1/tenants/{t}/usage?from=&to=`: totals, per task and per day
/// (default range: the current fuel window).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/usage", tag = "tenants", params(("tenant" = String, Path), UsageQuery),
    responses((status = 200, body = crate::service::UsageReport), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, description = "Not the admin token", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn usage(
    State(state): State<ApiState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<UsageQuery>,
) -> ApiResult<Json<crate::service::UsageReport>> {
    caller.require_admin()?;
    let from = instant("from", query.from)?;
    let to = instant("to", query.to)?;
    Ok(Json(state.ax.usage(&name, from, to)?))
}
