//! Request ids: every HTTP request gets one and every answer carries it in
//! `x-request-id`, in the request's log span and in error bodies
//! (`error.request_id`), so a client's report can be matched to the host log.
//!
//! An incoming `x-request-id` is kept when it is sane (1–128 characters of
//! `[A-Za-z0-9._:/+=-]`, what proxies and tracing systems send); anything
//! else is replaced by a fresh one rather than echoed, so a client cannot
//! inject text into logs or headers. The id is carried to the error body
//! through a tokio task-local set around the handler, which costs nothing
//! on the success path.

use std::future::Future;

use axum::http::HeaderMap;

/// The header carrying the id, both ways.
pub const HEADER: &str = "x-request-id";

/// Longest incoming id kept.
const MAX_LEN: usize = 128;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being answered, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// The request's id: the client's when sane, else a new one.
pub(super) fn of(headers: &HeaderMap) -> String {
    headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|id| sane(id))
        .map_or_else(generate, str::to_owned)
}

/// Runs `fut` with `id` as the current request id.
pub(super) fn scope<F: Future>(id: String, fut: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, fut)
}

/// Runs `f` with `id` as the current request id.
pub(super) fn sync_scope<R>(id: String, f: impl FnOnce() -> R) -> R {
    REQUEST_ID.sync_scope(id, f)
}

fn sane(id: &str) -> bool {
    (1..=MAX_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/+=-".contains(&b))
}

/// 96 random bits as 24 hex digits.
fn generate() -> String {
    hex::encode(rand::random::<[u8; 12]>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(id: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_str(id).unwrap());
        h
    }

    #[test]
    fn a_sane_incoming_id_is_kept_and_others_are_replaced() {
        assert_eq!(of(&with("req-42.a:b/c+d=e_f")), "req-42.a:b/c+d=e_f");
        for bad in ["has space", "quote\"", "x".repeat(129).as_str(), "ünïcode"] {
            let got = of(&with(bad));
            assert_ne!(got, bad);
            assert_eq!(got.len(), 24);
        }
        let fresh = of(&HeaderMap::new());
        assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(fresh, of(&HeaderMap::new()));
    }
}
