//! Tenant isolation over the API: another tenant sees, changes and uses
//! none of the first tenant's runs, tasks and plugins.

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::json;

use super::{HELLO_TASK, host, request};

#[tokio::test]
async fn another_tenant_sees_none_of_the_first_tenants_objects() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("hello", HELLO_TASK).await;
    let run = h
        .trigger("hello", json!({ "input": { "name": "mine" } }))
        .await;
    let id = run.body["id"].as_str().unwrap().to_string();
    h.wait_run(&id).await;
    // An admin header naming a tenant nobody created is refused.
    let unknown = request("GET", "/v1/tasks", Some("other-team"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(h.send(unknown).await.status, StatusCode::NOT_FOUND);
    let create = request("POST", "/v1/tenants", None)
        .body(Body::from(r#"{"name": "other-team"}"#))
        .unwrap();
    assert_eq!(h.send(create).await.status, StatusCode::CREATED);

    let as_other = |method: &str, path: &str| {
        request(method, path, Some("other-team"))
            .body(Body::empty())
            .unwrap()
    };
    for path in [
        format!("/v1/runs/{id}"),
        format!("/v1/runs/{id}/logs"),
        format!("/v1/runs/{id}/events"),
        "/v1/tasks/hello".into(),
    ] {
        let answer = h.send(as_other("GET", &path)).await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    assert_eq!(
        h.send(as_other("POST", &format!("/v1/runs/{id}/cancel")))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.send(as_other("POST", &format!("/v1/runs/{id}/retry")))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.send(as_other("GET", "/v1/runs")).await.body["runs"],
        json!([])
    );
    assert_eq!(
        h.send(as_other("GET", "/v1/tasks")).await.body["tasks"],
        json!([])
    );
    assert_eq!(
        h.send(as_other("GET", "/v1/plugins")).await.body["plugins"],
        json!([])
    );
    // The other tenant cannot use the first tenant's plugin either.
    let req = request("PUT", "/v1/tasks/hello", Some("other-team"))
        .body(Body::from(HELLO_TASK))
        .unwrap();
    assert_eq!(h.send(req).await.code(), "invalid_plugin");
    // Naming the default tenant explicitly is the same as not naming one.
    let mine = h
        .send(
            request("GET", &format!("/v1/runs/{id}"), Some("default"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(mine.status, StatusCode::OK);
    assert_eq!(mine.body["tenant"], "default");
}
