//! The routes that need no token: health, readiness and the dashboard's
//! files (served from the binary with a CSP and ETags).

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::host;

#[tokio::test]
async fn health_and_readiness_need_no_token() {
    let h = host().await;
    let health = h
        .send(Request::get("/healthz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(
        (health.status, health.body),
        (StatusCode::OK, json!({ "status": "ok" }))
    );
    let ready = h
        .send(Request::get("/readyz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(ready.status, StatusCode::OK);
    if crate::common::on_postgres() {
        // The second pass (scripts/test): the pool's numbers are there too.
        assert_eq!(ready.body["store"]["kind"], "postgres", "{}", ready.body);
        assert_eq!(ready.body["store"]["pool"]["max"], 4, "{}", ready.body);
    } else {
        assert_eq!(
            ready.body,
            json!({ "status": "ready", "store": { "kind": "memory" } })
        );
    }
}

/// The dashboard's files need no token, carry a strict CSP and revalidate
/// with their ETag; an unknown `/ui/` path is a 404 in the error shape.
#[tokio::test]
async fn the_dashboard_is_served_from_the_binary_with_a_csp() {
    let host = host().await;
    let fetch = |path: &str, etag: Option<&str>| {
        let mut req = Request::builder().uri(path);
        if let Some(tag) = etag {
            req = req.header(header::IF_NONE_MATCH, tag);
        }
        host.app.clone().oneshot(req.body(Body::empty()).unwrap())
    };
    let page = fetch("/", None).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let h = page.headers().clone();
    assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
    let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    let html = page.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&html).contains(r#"<script type="module" src="/ui/app.js">"#));

    let js = fetch("/ui/app.js", None).await.unwrap();
    assert_eq!(js.status(), StatusCode::OK);
    assert_eq!(
        js.headers()[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    let etag = js.headers()[header::ETAG].to_str().unwrap().to_string();
    let again = fetch("/ui/app.js", Some(&etag)).await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert!(
        again
            .headers()
            .contains_key(header::CONTENT_SECURITY_POLICY)
    );
    let other = fetch("/ui/style.css", Some(&etag)).await.unwrap();
    assert_eq!(
        other.status(),
        StatusCode::OK,
        "another file's ETag does not match"
    );

    let missing = fetch("/ui/nope.js", None).await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let body = missing.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], "not_found");
}
