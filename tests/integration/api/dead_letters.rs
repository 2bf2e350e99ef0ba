//! A failing step over the API: retried, dead-lettered, then requeued or
//! resolved by hand; a failed run retried.

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::json;

use super::host;

#[tokio::test]
async fn a_failing_step_is_retried_then_dead_lettered_then_requeued_or_resolved() {
    let h = host().await;
    h.upload("fail", "fail").await;
    let task = h.apply("flaky", "name: flaky\nplugin: fail@1.0.0\ninput: \"${input}\"\nretry: { max_attempts: 2, backoff: [100ms] }\n").await;
    assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);

    // Fails twice, then would succeed on attempt 3 — which only a requeue gives it.
    let run = h
        .trigger("flaky", json!({ "input": { "succeed_on_attempt": 3 } }))
        .await;
    let id = run.body["id"].as_str().unwrap().to_string();
    let failed = h.wait_run(&id).await;
    assert_eq!(failed["status"], "failed", "{failed:#}");
    let step = &failed["steps"][0];
    assert_eq!(step["status"], "dead");
    let attempts = step["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts
            .iter()
            .all(|a| a["outcome"] == "failed" && a["error_kind"] == "retryable"),
        "{attempts:?}"
    );
    assert!(
        step["error"]
            .as_str()
            .unwrap()
            .contains("failing attempt 2"),
        "{step}"
    );

    let open = h.get("/v1/dead-letters").await.body;
    let letters = open["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{open}");
    assert_eq!(letters[0]["run_id"], id.as_str());
    assert_eq!(letters[0]["attempts"], 2);
    assert!(letters[0]["resolution"].is_null());
    let dead_id = letters[0]["id"].as_str().unwrap().to_string();

    let requeued = h
        .call(
            "POST",
            &format!("/v1/dead-letters/{dead_id}/requeue"),
            Body::empty(),
        )
        .await;
    assert_eq!(requeued.status, StatusCode::OK, "{}", requeued.body);
    assert_eq!(requeued.body["id"], id.as_str());
    let succeeded = h.wait_run(&id).await;
    assert_eq!(succeeded["status"], "succeeded", "{succeeded:#}");
    assert_eq!(succeeded["steps"][0]["output"]["succeeded_on_attempt"], 3);
    assert_eq!(
        h.get("/v1/dead-letters").await.body["dead_letters"],
        json!([])
    );
    let all = h.get("/v1/dead-letters?open=false").await.body;
    assert!(
        all["dead_letters"][0]["resolution"]
            .as_str()
            .unwrap()
            .contains("requeued"),
        "{all}"
    );
    let twice = h
        .call(
            "POST",
            &format!("/v1/dead-letters/{dead_id}/requeue"),
            Body::empty(),
        )
        .await;
    assert_eq!(twice.status, StatusCode::CONFLICT);

    // A run that keeps failing: resolve its dead letter by hand.
    let run = h
        .trigger("flaky", json!({ "input": { "kind": "retryable" } }))
        .await;
    let id = run.body["id"].as_str().unwrap().to_string();
    assert_eq!(h.wait_run(&id).await["status"], "failed");
    let dead_id = h.get("/v1/dead-letters").await.body["dead_letters"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/v1/dead-letters/{dead_id}/resolve");
    let empty = h.post_json(&path, json!({ "resolution": " " })).await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    let missing = h.post_json(&path, json!({})).await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let resolved = h
        .post_json(&path, json!({ "resolution": "upstream fixed by hand" }))
        .await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.body);
    assert_eq!(resolved.body["resolution"], "upstream fixed by hand");
    assert!(
        resolved.body["resolved_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert_eq!(
        h.post_json(&path, json!({ "resolution": "again" }))
            .await
            .status,
        StatusCode::CONFLICT
    );
    assert_eq!(
        h.get("/v1/dead-letters").await.body["dead_letters"],
        json!([])
    );

    // Retrying the failed run puts it back to work (and it fails again).
    let retried = h
        .call("POST", &format!("/v1/runs/{id}/retry"), Body::empty())
        .await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.body);
    let again = h
        .wait_until(&id, |r| {
            r["steps"][0]["attempts"]
                .as_array()
                .is_some_and(|a| a.len() == 4)
                && r["status"] == "failed"
        })
        .await;
    assert_eq!(again["steps"][0]["attempts"][3]["number"], 4);
}
