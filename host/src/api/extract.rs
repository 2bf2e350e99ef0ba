//! axum's extractors with their rejections turned into [`ApiError`], so a bad
//! path, query string or body answers in the API's error shape (and a body
//! over the route's limit is a 413 `payload_too_large`); and the bounds of
//! the whole-number query parameters (`limit`, `count`), checked in one
//! place and stated in the OpenAPI document from the same constants.

use std::ops::RangeInclusive;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Path parameters (`/{name}`), deserialized into `T`.
#[derive(Debug)]
pub(super) struct ApiPath<T>(pub(super) T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(value) = Path::<T>::from_request_parts(parts, state).await?;
        Ok(ApiPath(value))
    }
}

/// The query string, deserialized into `T`.
#[derive(Debug)]
pub(super) struct ApiQuery<T>(pub(super) T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(value) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(value))
    }
}

/// The whole body, bounded by the route's `DefaultBodyLimit`.
#[derive(Debug)]
pub(super) struct ApiBody(pub(super) Bytes);

impl<S> FromRequest<S> for ApiBody
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(ApiBody(Bytes::from_request(req, state).await?))
    }
}

/// The `limit` of a paged listing (`GET /v1/runs`, `GET /v1/tasks`).
pub(super) const PAGE_LIMITS: RangeInclusive<usize> = 1..=1000;

/// The `count` of a preview of fire instants (`GET /v1/tasks/{name}/next`,
/// `GET /v1/cron/next`).
pub(super) const PREVIEW_COUNTS: RangeInclusive<usize> = 1..=crate::service::MAX_PREVIEW;

/// A whole-number query parameter: `default` when absent, `400 bad_request`
/// outside `range`. Never silently clamped, so a client asking for 5000 runs
/// learns that a page holds at most 1000 instead of quietly getting fewer.
pub(super) fn bounded(
    name: &str,
    value: Option<usize>,
    default: usize,
    range: RangeInclusive<usize>,
) -> Result<usize, ApiError> {
    let value = value.unwrap_or(default);
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::bad_request(format!(
            "`{name}` is {value}; it must be in {}..={}",
            range.start(),
            range.end()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_parameters_take_their_default_and_refuse_what_is_outside() {
        assert_eq!(bounded("limit", None, 50, PAGE_LIMITS).unwrap(), 50);
        assert_eq!(bounded("limit", Some(1), 50, PAGE_LIMITS).unwrap(), 1);
        assert_eq!(bounded("limit", Some(1000), 50, PAGE_LIMITS).unwrap(), 1000);
        for bad in [0, 1001] {
            let e = bounded("limit", Some(bad), 50, PAGE_LIMITS).unwrap_err();
            assert_eq!(e.status_and_code().1, "bad_request");
            assert_eq!(
                e.to_string(),
                format!("bad_request: `limit` is {bad}; it must be in 1..=1000")
            );
        }
        assert!(bounded("count", Some(101), 5, PREVIEW_COUNTS).is_err());
    }
}
