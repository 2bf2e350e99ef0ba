//! Who is calling and for which tenant: the one extractor every `/v1` handler
//! takes first (SPEC §7).
//!
//! - The admin token (its sha256 is in [`ApiState`]) acts on the tenant named
//!   by `X-Ax-Tenant` (`default` when absent); that tenant must exist (404).
//! - A tenant token (`axt_<id>_<secret>`, see [`crate::tenant`]) acts on its
//!   own tenant only: an `X-Ax-Tenant` naming another is 403, as are
//!   admin-only routes ([`Caller::require_admin`]) and a disabled tenant.
//! - No token, a malformed, unknown or revoked one: 401.
//!
//! A valid token also promotes the connection it came on: from then on it
//! counts under the token, not its address, and is never evicted for a
//! newcomer; past `connections.max_per_token` the request is answered `429
//! too_many_token_connections` instead (`api/connections/admission.rs`).
//!
//! Another tenant's *objects* answer 404 — that is the handlers' business,
//! since every service call is scoped to `Caller::tenant`.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use super::ApiState;
use super::connections::{ConnSlot, TokenKey};
use super::error::ApiError;
use crate::tenant::TokenCheck;
pub use crate::tenant::constant_time_eq;

/// The header naming the tenant an admin acts on.
pub const TENANT_HEADER: &str = "x-ax-tenant";
/// The tenant acted on when no header names one.
pub const DEFAULT_TENANT: &str = crate::tenant::DEFAULT_TENANT;

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The tenant the request acts on.
    pub tenant: String,
    /// Who, as recorded in events (`api:admin`, `api:token:<id>`).
    pub actor: String,
    /// Whether this is the admin token.
    pub admin: bool,
}

impl Caller {
    /// 403 unless the caller is the admin.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.admin {
            Ok(())
        } else {
            Err(ApiError::Forbidden(
                "this route needs the admin token; a tenant token cannot use it".into(),
            ))
        }
    }
}

/// sha256 of a token: what the host keeps instead of the token itself.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The token of an `Authorization: Bearer TOKEN` header, if there is one.
pub(super) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

impl FromRequestParts<ApiState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState,
    ) -> Result<Self, Self::Rejection> {
        let Some(token) = bearer(&parts.headers) else {
            return Err(ApiError::Unauthorized(
                "missing `Authorization: Bearer TOKEN` header".into(),
            ));
        };
        let named = parts.headers.get(TENANT_HEADER);
        if let Some((id, secret)) = crate::tenant::parse_token(token) {
            return match state.ax.tenants.check_token(id, secret) {
                TokenCheck::Tenant(tenant) => {
                    if named.is_some_and(|h| h.as_bytes() != tenant.as_bytes()) {
                        return Err(ApiError::Forbidden(
                            "a tenant token acts only on its own tenant; drop the X-Ax-Tenant header"
                                .into(),
                        ));
                    }
                    promote(parts, hash_token(token))?;
                    Ok(Caller {
                        tenant,
                        actor: format!("api:token:{id}"),
                        admin: false,
                    })
                }
                TokenCheck::Disabled(tenant) => Err(ApiError::Forbidden(format!(
                    "tenant `{tenant}` is disabled"
                ))),
                TokenCheck::Invalid => Err(ApiError::Unauthorized("the token is not valid".into())),
            };
        }
        if !constant_time_eq(&hash_token(token), &state.admin_token_sha256) {
            return Err(ApiError::Unauthorized("the token is not valid".into()));
        }
        let tenant = match named {
            None => DEFAULT_TENANT.to_string(),
            Some(value) => {
                let name = value.to_str().unwrap_or_default();
                if !crate::task::is_valid_name(name) {
                    return Err(ApiError::BadRequest {
                        code: "invalid_tenant",
                        message:
                            "the X-Ax-Tenant header must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
                                .into(),
                    });
                }
                name.to_string()
            }
        };
        if !state.ax.tenant_exists(&tenant) {
            return Err(ApiError::NotFound(format!(
                "tenant `{tenant}` not found; create it with `ax tenant create {tenant}` (POST /v1/tenants)"
            )));
        }
        promote(parts, state.admin_token_sha256)?;
        Ok(Caller {
            tenant,
            actor: "api:admin".into(),
            admin: true,
        })
    }
}

/// Counts the request's connection under `token` (module docs). A request
/// not served by `api::connections` (a test's `oneshot`) has no connection
/// to count.
fn promote(parts: &Parts, token: TokenKey) -> Result<(), ApiError> {
    match parts.extensions.get::<std::sync::Arc<ConnSlot>>() {
        Some(slot) => slot
            .promote(token)
            .map_err(|e| ApiError::TooManyTokenConnections(e.to_string())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_digests_compare_equal_and_others_not() {
        let a = hash_token("secret");
        assert!(constant_time_eq(&a, &hash_token("secret")));
        assert!(!constant_time_eq(&a, &hash_token("secreT")));
        let mut b = a;
        b[31] ^= 1;
        assert!(!constant_time_eq(&a, &b));
    }
}
