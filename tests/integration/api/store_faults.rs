//! A store that refuses writes (the `Faulty` wrapper over the memory store,
//! guarded as `ax serve` guards sled): every route that writes answers 503
//! `store_unavailable` with `Retry-After` and stores nothing; `/readyz` is
//! 503 while `/healthz` stays 200; all of it works again once writes do.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::json;

use ax::store::faults::Faulty;
use ax::store::guard::Guarded;
use ax::store::memory::MemoryStore;
use ax::store::prelude::*;

use super::{HELLO_TASK, host_on};
use crate::common::plugin_bytes;

#[tokio::test]
async fn writes_refused_by_the_store_answer_503_store_unavailable_and_store_nothing() {
    let memory = Arc::new(MemoryStore::new());
    let faulty = Arc::new(Faulty::wrap(memory.clone()));
    let h = host_on(Arc::new(Guarded::guard(faulty.clone(), None))).await;
    assert_eq!(h.upload("hello", "hello").await.status, StatusCode::CREATED);
    assert_eq!(
        h.apply("hello", HELLO_TASK).await.status,
        StatusCode::CREATED
    );
    let ready = || async {
        h.send(Request::get("/readyz").body(Body::empty()).unwrap())
            .await
    };
    assert_eq!(ready().await.status, StatusCode::OK);

    faulty.layer().fail(true);
    let tenant = h.post_json("/v1/tenants", json!({"name": "team-b"})).await;
    let answers = [
        (
            "trigger",
            h.trigger(
                "hello",
                json!({"input": {"name": "x"}, "idempotency_key": "k1"}),
            )
            .await,
        ),
        (
            "bulk trigger",
            h.post_json(
                "/v1/tasks/hello/runs:batch",
                json!({"runs": [{"input": {"name": "a"}}, {"input": {"name": "b"}}]}),
            )
            .await,
        ),
        (
            "task save",
            h.apply("other", "name: other\nplugin: hello@1.0.0\n").await,
        ),
        (
            "plugin upload",
            h.upload_bytes("echo", "1.0.0", plugin_bytes("echo")).await,
        ),
        ("tenant", tenant),
    ];
    for (what, answer) in &answers {
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            "{what}: {}",
            answer.body
        );
        assert_eq!(answer.headers[header::RETRY_AFTER], "2", "{what}");
        assert_eq!(answer.body["error"]["details"]["retry_after"], 2, "{what}");
    }
    // Nothing of it was stored.
    assert!(memory.active_runs().unwrap().is_empty());
    assert!(memory.run_summaries().unwrap().is_empty());
    assert!(memory.get_task("default", "other").unwrap().is_none());
    assert!(memory.list_plugins("default").unwrap().len() == 1);
    assert!(
        memory
            .list_tenants()
            .unwrap()
            .iter()
            .all(|t| t.name != "team-b")
    );
    // Not ready; alive.
    let not_ready = ready().await;
    assert_eq!(
        (not_ready.status, not_ready.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
    );
    let health = h
        .send(Request::get("/healthz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(health.status, StatusCode::OK);

    // Writes succeed again: the same trigger (same key) is stored and runs,
    // and readiness comes back without anyone asking (the scheduler probes).
    faulty.layer().fail(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ready().await.status != StatusCode::OK {
        assert!(std::time::Instant::now() < deadline, "readyz stayed 503");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let again = h
        .trigger(
            "hello",
            json!({"input": {"name": "x"}, "idempotency_key": "k1"}),
        )
        .await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    let id = again.body["id"].as_str().unwrap().to_string();
    let done = h.wait_until(&id, |r| r["status"] == "succeeded").await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(memory.run_summaries().unwrap().len(), 1);
}

/// Damage found by the read of every entry after opening (sled reads it on
/// a thread of its own, so a large store does not slow the restart):
/// `/readyz` 503 naming it, `ax_store_damaged 1`; the process stays alive.
#[tokio::test]
async fn a_store_found_damaged_after_opening_is_not_ready_and_says_so() {
    let memory = Arc::new(MemoryStore::new());
    let faulty = Arc::new(Faulty::wrap(memory.clone()));
    let h = host_on(Arc::new(Guarded::guard(faulty.clone(), None))).await;
    let h = &h;
    let get = |path: &'static str| async move {
        h.send(Request::get(path).body(Body::empty()).unwrap())
            .await
    };
    let gauge = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("ax_store_damaged "))
            .map(str::to_owned)
    };
    assert_eq!(get("/readyz").await.status, StatusCode::OK);
    let metrics = metrics_text(h).await;
    assert_eq!(gauge(&metrics).as_deref(), Some("0"), "{metrics}");

    faulty
        .layer()
        .damaged("reading the database failed: corrupted page");
    let ready = get("/readyz").await;
    assert_eq!(
        (ready.status, ready.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{}",
        ready.body
    );
    let message = ready.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("damaged") && message.contains("corrupted page"),
        "{message}"
    );
    assert_eq!(get("/healthz").await.status, StatusCode::OK);
    let metrics = metrics_text(h).await;
    assert_eq!(gauge(&metrics).as_deref(), Some("1"), "{metrics}");
}

async fn metrics_text(h: &super::Host) -> String {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let response = h
        .app
        .clone()
        .oneshot(
            super::request("GET", "/metrics", None)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .expect("the router never fails");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}
