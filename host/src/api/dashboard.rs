//! The web dashboard (`GET /` and `GET /ui/*`): static files embedded in the
//! binary with `include_str!`, served with a strict Content-Security-Policy.
//!
//! The dashboard is plain HTML, CSS and JavaScript ES modules (no build step,
//! no node, no CDN; docs/DASHBOARD.md says why). It is a client of the `/v1`
//! JSON API like any other: these routes need no token and serve nothing but
//! the files; every datum the pages show comes from `/v1` with the bearer
//! token the person signed in with.
//!
//! Each file carries an `ETag` (a digest of its bytes, computed once), so a
//! browser revalidates with `If-None-Match` and gets `304` until the binary
//! changes.

use std::sync::LazyLock;

use axum::Router;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest as _, Sha256};

use super::ApiState;
use super::error::ApiError;

/// Only this origin's scripts, styles and API; no inline script or style, no
/// frames, no plugins. Plugin output and logs are untrusted text: the pages
/// never parse them as HTML, and this policy is the second line of defence.
pub(super) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($path:literal, $file:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/dashboard/", $file)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the dashboard, by URL path.
const ASSETS: &[Asset] = &[
    asset!("/", "index.html", "text/html; charset=utf-8"),
    asset!("/ui/style.css", "style.css", "text/css; charset=utf-8"),
    asset!("/ui/favicon.svg", "favicon.svg", "image/svg+xml"),
    asset!("/ui/app.js", "app.js", JS),
    asset!("/ui/api.js", "api.js", JS),
    asset!("/ui/dom.js", "dom.js", JS),
    asset!("/ui/charts.js", "charts.js", JS),
    asset!("/ui/pages.js", "pages.js", JS),
    asset!("/ui/params.js", "params.js", JS),
    asset!("/ui/run.js", "run.js", JS),
    asset!("/ui/tenants.js", "tenants.js", JS),
    asset!("/ui/alerts.js", "alerts.js", JS),
];

/// `"<16 hex digits>"` per asset, in [`ASSETS`] order.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            format!(
                "\"{}\"",
                &hex::encode(Sha256::digest(a.body.as_bytes()))[..16]
            )
        })
        .collect()
});

/// `GET` routes for every embedded file, merged into the app by [`super::router`].
pub(super) fn routes() -> Router<ApiState> {
    ASSETS
        .iter()
        .fold(Router::new(), |r, a| r.route(a.path, get(serve)))
}

/// `GET /` and `GET /ui/…`: the embedded file, or 404 in the API's error shape.
pub(super) async fn serve(uri: Uri, headers: HeaderMap) -> Response {
    let Some(index) = ASSETS.iter().position(|a| a.path == uri.path()) else {
        return ApiError::NotFound(format!("no route GET {}", uri.path())).into_response();
    };
    let asset = &ASSETS[index];
    let etag = &ETAGS[index];
    let fresh = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = response.headers_mut();
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Revalidate every time (cheap: 304), so a new binary's files show at once.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(etag) {
        h.insert(ETAG, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_non_empty_and_has_a_distinct_path() {
        let mut seen = std::collections::HashSet::new();
        for a in ASSETS {
            assert!(!a.body.is_empty(), "{} is empty", a.path);
            assert!(seen.insert(a.path), "{} twice", a.path);
        }
    }

    #[test]
    fn the_page_loads_only_embedded_modules() {
        let index = ASSETS[0].body;
        assert!(!index.contains("http://") && !index.contains("https://"));
        for a in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            // Every import names another embedded module, never a remote one.
            for (at, _) in a.body.match_indices("} from \"") {
                let rest = &a.body[at + 8..];
                let from = &rest[..rest.find('"').unwrap_or(0)];
                let path = format!("/ui/{}", from.trim_start_matches("./"));
                assert!(
                    from.starts_with("./") && ASSETS.iter().any(|b| b.path == path),
                    "{}: imports `{from}`, not an embedded module",
                    a.path
                );
            }
            assert!(
                !a.body.contains("innerHTML") && !a.body.contains("insertAdjacentHTML"),
                "{} must build DOM nodes, never parse HTML",
                a.path
            );
        }
    }
}
