//! Who is calling and for which tenant: the one extractor every `/v1` handler
//! takes first. Today there is one admin token (its sha256 is in
//! [`ApiState`]); the admin acts on the tenant named by `X-Ax-Tenant`
//! (`default` when absent). Per-tenant tokens will grow here, behind the same
//! [`Caller`] type, without touching the handlers.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use super::ApiState;
use super::error::ApiError;

/// The header naming the tenant an admin acts on.
pub const TENANT_HEADER: &str = "x-ax-tenant";
/// The tenant acted on when no header names one.
pub const DEFAULT_TENANT: &str = "default";

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The tenant the request acts on.
    pub tenant: String,
    /// Who, as recorded in events (`api:admin`).
    pub actor: String,
}

/// sha256 of a token: what the host keeps instead of the token itself.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares two digests in time independent of where they differ, so the
/// answer time says nothing about how close a guess was.
pub fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // `black_box` keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// Whether a tenant name is acceptable: `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.
pub fn valid_tenant(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
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
        let Some(token) = bearer(parts) else {
            return Err(ApiError::Unauthorized(
                "missing `Authorization: Bearer TOKEN` header".into(),
            ));
        };
        if !constant_time_eq(&hash_token(token), &state.admin_token_sha256) {
            return Err(ApiError::Unauthorized("the token is not valid".into()));
        }
        let tenant = match parts.headers.get(TENANT_HEADER) {
            None => DEFAULT_TENANT.to_string(),
            Some(value) => {
                let name = value.to_str().unwrap_or_default();
                if !valid_tenant(name) {
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
        Ok(Caller {
            tenant,
            actor: "api:admin".into(),
        })
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

    #[test]
    fn tenant_names_are_checked() {
        assert!(valid_tenant("acme"));
        assert!(valid_tenant("team-a.b_c"));
        assert!(!valid_tenant(""));
        assert!(!valid_tenant("-x"));
        assert!(!valid_tenant("a/b"));
        assert!(!valid_tenant(&"a".repeat(65)));
    }
}
