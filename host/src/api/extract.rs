//! axum's extractors with their rejections turned into [`ApiError`], so a bad
//! path, query string or body answers in the API's error shape (and a body
//! over the route's limit is a 413 `payload_too_large`).

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
