//! Cron over the API: the preview of next fires (UTC and local, with
//! weekdays), and a task paused, resumed and previewing its next fires.

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::json;

use super::host;

#[tokio::test]
async fn cron_preview_lists_utc_instants_and_local_times_with_weekdays() {
    let h = host().await;
    let preview = h.get("/v1/cron/next?expr=0%2030%201%20*%20*%20%3F&tz=Asia/Shanghai&from=2026-11-29T00:00:00Z&count=3").await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
    assert_eq!(
        preview.body["next"],
        json!([
            "2026-11-29T17:30:00.000Z",
            "2026-11-30T17:30:00.000Z",
            "2026-12-01T17:30:00.000Z"
        ])
    );
    assert_eq!(
        preview.body["described"][0],
        "2026-11-30 01:30:00 Mon +08:00"
    );
    assert_eq!(
        preview.body["described"][1],
        "2026-12-01 01:30:00 Tue +08:00"
    );
    let utc = h
        .get("/v1/cron/next?expr=0%200%202%20*%20*%20*&from=2026-01-01T00:00:00Z&count=1")
        .await;
    assert_eq!(utc.body["next"], json!(["2026-01-01T02:00:00.000Z"]));

    let five = h.get("/v1/cron/next?expr=0%202%20*%20*%20*").await;
    assert_eq!(
        (five.status, five.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    assert!(five.message().contains("0 0 2 * * *"), "{}", five.message());
    assert_eq!(five.body["error"]["details"]["path"], "expr");
    let zone = h
        .get("/v1/cron/next?expr=0%200%202%20*%20*%20*&tz=Mars/Olympus")
        .await;
    assert_eq!(zone.status, StatusCode::UNPROCESSABLE_ENTITY);
    let from = h
        .get("/v1/cron/next?expr=0%200%202%20*%20*%20*&from=yesterday")
        .await;
    assert_eq!(
        (from.status, from.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    let missing = h.get("/v1/cron/next").await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn tasks_pause_resume_and_preview_their_next_fires() {
    let h = host().await;
    h.upload("hello", "hello").await;
    let def = "name: nightly\ntrigger: { cron: \"0 30 1 * * ?\", timezone: Asia/Shanghai }\nplugin: hello@1.0.0\ninput: { name: night }\n";
    let task = h.apply("nightly", def).await;
    assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);
    assert!(
        task.body["next_fire"]
            .as_str()
            .unwrap()
            .ends_with("T17:30:00.000Z"),
        "{}",
        task.body
    );
    let next = h.get("/v1/tasks/nightly/next?count=3").await.body;
    let next = next["next"].as_array().unwrap();
    assert_eq!(next.len(), 3);
    assert!(
        next.iter()
            .all(|t| t.as_str().unwrap().ends_with("T17:30:00.000Z"))
    );
    let paused = h
        .call("POST", "/v1/tasks/nightly/pause", Body::empty())
        .await;
    assert_eq!(paused.status, StatusCode::OK);
    assert_eq!(paused.body["paused"], true);
    assert!(paused.body["next_fire"].is_null());
    assert_eq!(
        h.get("/v1/tasks/nightly/next").await.body["next"],
        json!([])
    );
    assert_eq!(h.get("/v1/tasks").await.body["tasks"][0]["paused"], true);
    let resumed = h
        .call("POST", "/v1/tasks/nightly/resume", Body::empty())
        .await;
    assert_eq!(resumed.body["paused"], false);
    assert!(resumed.body["next_fire"].is_string());
    assert_eq!(
        h.call("POST", "/v1/tasks/nope/pause", Body::empty())
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // The body names another task than the URL: an invalid document.
    let mismatch = h.apply("other", def).await;
    assert_eq!(
        (mismatch.status, mismatch.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    assert_eq!(mismatch.body["error"]["details"]["path"], "name");
}
