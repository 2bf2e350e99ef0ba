//! Runs over the API: upload, apply, trigger and poll until the plugin's
//! output is there; idempotency keys; a timeout and a cancel stopping a run;
//! listing newest first with cursor paging and filters.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::json;

use super::{HELLO_TASK, host};

#[tokio::test]
async fn upload_apply_trigger_and_poll_until_the_plugin_output_is_there() {
    let h = host().await;
    let up = h.upload("hello", "hello").await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    assert_eq!(up.body["name"], "hello");
    assert_eq!(up.body["version"], "1.0.0");
    assert_eq!(up.body["digest"].as_str().unwrap().len(), 64);
    assert!(up.body["created_at"].as_str().unwrap().ends_with('Z'));
    // The same bytes again: 200 with the same record.
    let again = h.upload("hello", "hello").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body, up.body);
    // Other bytes under the same version: versions are immutable.
    let other = h.upload("echo", "hello").await;
    assert_eq!(
        (other.status, other.code()),
        (StatusCode::CONFLICT, "conflict")
    );

    assert_eq!(
        h.get("/v1/plugins").await.body["plugins"][0]["name"],
        "hello"
    );
    assert_eq!(
        h.get("/v1/plugins/hello").await.body["versions"][0]["version"],
        "1.0.0"
    );
    assert_eq!(
        h.get("/v1/plugins/hello/1.0.0").await.body["digest"],
        up.body["digest"]
    );
    assert_eq!(
        h.get("/v1/plugins/nope/1.0.0").await.status,
        StatusCode::NOT_FOUND
    );

    let task = h.apply("hello", HELLO_TASK).await;
    assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);
    assert_eq!(task.body["name"], "hello");
    assert_eq!(task.body["version"], 1);
    assert_eq!(task.body["paused"], false);
    assert!(task.body["spec"]["steps"].is_array());
    let replaced = h.apply("hello", HELLO_TASK).await;
    assert_eq!(
        (replaced.status, &replaced.body["version"]),
        (StatusCode::OK, &json!(2))
    );
    let shown = h.get("/v1/tasks/hello").await;
    assert_eq!(shown.body["source"], HELLO_TASK);

    let run = h
        .trigger("hello", json!({ "input": { "name": "ax" } }))
        .await;
    assert_eq!(run.status, StatusCode::CREATED, "{}", run.body);
    assert!(
        run.body.get("spec").is_none(),
        "the task snapshot stays inside"
    );
    assert_eq!(run.body["task"], "hello");
    assert_eq!(run.body["trigger"], "manual");
    let id = run.body["id"].as_str().unwrap().to_string();
    let done = h.wait_run(&id).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    let step = &done["steps"][0];
    assert_eq!(step["output"]["greeting"], "hello, ax");
    assert_eq!(step["input"]["name"], "ax");
    let attempt = &step["attempts"][0];
    assert_eq!(attempt["number"], 1);
    assert_eq!(attempt["outcome"], "succeeded");
    assert!(attempt["fuel_consumed"].as_u64().unwrap() > 0);
    assert!(attempt["memory_peak_bytes"].as_u64().unwrap() > 0);
    assert!(attempt["duration_ms"].as_f64().is_some());
    for field in ["scheduled_for", "created_at", "started_at", "finished_at"] {
        assert!(
            done[field].as_str().unwrap().ends_with('Z'),
            "{field}: {done:#}"
        );
    }

    let logs = h.get(&format!("/v1/runs/{id}/logs")).await;
    assert_eq!(logs.status, StatusCode::OK);
    let first = &logs.body["attempts"][0];
    assert_eq!(first["step"], "hello");
    assert!(
        first["logs"][0]["message"]
            .as_str()
            .unwrap()
            .contains("greeting ax"),
        "{first}"
    );
    let events = h.get(&format!("/v1/runs/{id}/events")).await.body;
    let transitions: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"].is_null())
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert_eq!(transitions.first(), Some(&"queued"));
    assert_eq!(transitions.last(), Some(&"succeeded"));
    assert!(events["events"][0]["at"].as_str().unwrap().ends_with('Z'));

    // Retrying a succeeded run is a conflict; a plugin in use cannot go.
    assert_eq!(
        h.call("POST", &format!("/v1/runs/{id}/retry"), Body::empty())
            .await
            .status,
        StatusCode::CONFLICT
    );
    let del = h
        .call("DELETE", "/v1/plugins/hello/1.0.0", Body::empty())
        .await;
    assert_eq!((del.status, del.code()), (StatusCode::CONFLICT, "conflict"));
    assert!(del.message().contains("hello"), "{}", del.message());
    assert_eq!(
        h.call("DELETE", "/v1/tasks/hello", Body::empty())
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(h.get("/v1/tasks/hello").await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        h.call("DELETE", "/v1/plugins/hello/1.0.0", Body::empty())
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(h.get("/v1/plugins").await.body["plugins"], json!([]));

    // Once deleted, the version may be uploaded again with other bytes, and
    // runs use those (the scheduler forgets the record it had read).
    let reused = h.upload("echo", "hello").await;
    assert_eq!(reused.status, StatusCode::CREATED, "{}", reused.body);
    assert_ne!(reused.body["digest"], up.body["digest"]);
    assert_eq!(
        h.apply("hello", HELLO_TASK).await.status,
        StatusCode::CREATED
    );
    let run = h
        .trigger("hello", json!({ "input": { "name": "ax" } }))
        .await;
    let done = h.wait_run(run.body["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    assert_eq!(
        done["steps"][0]["output"]["input"]["name"], "ax",
        "echo's output, not hello's: {done:#}"
    );
}

#[tokio::test]
async fn an_idempotency_key_already_seen_returns_the_same_run() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("hello", HELLO_TASK).await;
    let body = json!({ "input": { "name": "once" }, "idempotency_key": "order-42", "priority": 7 });
    let first = h.trigger("hello", body.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(first.body["priority"], 7);
    let second = h.trigger("hello", body).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.body["id"], first.body["id"]);
    assert_eq!(second.body["idempotency_key"], "order-42");
    // An empty body is a trigger with defaults.
    let plain = h.call("POST", "/v1/tasks/hello/runs", Body::empty()).await;
    assert_eq!(plain.status, StatusCode::CREATED, "{}", plain.body);
    assert_ne!(plain.body["id"], first.body["id"]);
    // A bad priority is refused by the service.
    let bad = h.trigger("hello", json!({ "priority": 12 })).await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
}

#[tokio::test]
async fn a_plugin_sleeping_past_its_timeout_is_stopped_as_timed_out() {
    let h = host().await;
    h.upload("hostile_sleep", "sleepy").await;
    let task = h
        .apply(
            "sleepy",
            "name: sleepy\nplugin: sleepy@1.0.0\nlimits: { timeout: 300ms }\n",
        )
        .await;
    assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);
    let started = Instant::now();
    let run = h.trigger("sleepy", json!({})).await;
    let done = h.wait_run(run.body["id"].as_str().unwrap()).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(done["status"], "failed", "{done:#}");
    let attempt = &done["steps"][0]["attempts"][0];
    assert_eq!(attempt["outcome"], "timed_out", "{done:#}");
    assert!(
        attempt["duration_ms"].as_f64().unwrap() >= 250.0,
        "{attempt}"
    );
}

#[tokio::test]
async fn cancelling_a_running_run_stops_it() {
    let h = host().await;
    h.upload("hostile_sleep", "sleepy").await;
    h.apply(
        "sleepy",
        "name: sleepy\nplugin: sleepy@1.0.0\nlimits: { timeout: 60s }\n",
    )
    .await;
    let run = h.trigger("sleepy", json!({})).await;
    let id = run.body["id"].as_str().unwrap().to_string();
    h.wait_until(&id, |r| r["steps"][0]["status"] == "running")
        .await;
    let started = Instant::now();
    let cancelled = h
        .call("POST", &format!("/v1/runs/{id}/cancel"), Body::empty())
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);
    assert_eq!(cancelled.body["status"], "cancelled");
    assert!(
        cancelled.body["reason"]
            .as_str()
            .unwrap()
            .contains("api:admin"),
        "{}",
        cancelled.body
    );
    // The answer is the settled run: the stopped attempt has reported
    // (outcome, end, fuel) before the cancel answers, not fuel 0 and no
    // outcome presented as final.
    let attempt = &cancelled.body["steps"][0]["attempts"][0];
    assert_eq!(attempt["outcome"], "cancelled", "{}", cancelled.body);
    assert!(attempt["finished_at"].is_string(), "{}", cancelled.body);
    assert!(attempt["fuel_consumed"].is_u64(), "{}", cancelled.body);
    assert!(
        cancelled.body.get("attempts_stopping").is_none(),
        "{}",
        cancelled.body
    );
    let done = h.wait_run(&id).await;
    assert_eq!(done["status"], "cancelled");
    assert_eq!(
        done["steps"][0]["attempts"][0]["fuel_consumed"], attempt["fuel_consumed"],
        "the answer's fuel is the stored record's"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let again = h
        .call("POST", &format!("/v1/runs/{id}/cancel"), Body::empty())
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    let events = h.get(&format!("/v1/runs/{id}/events")).await.body;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"] == "api:admin" && e["to"] == "cancelled"),
        "{events}"
    );
}

#[tokio::test]
async fn runs_are_listed_newest_first_with_cursor_paging_and_filters() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("hello", HELLO_TASK).await;
    h.upload("fail", "fail").await;
    h.apply(
        "fails",
        "name: fails\nplugin: fail@1.0.0\ninput: { kind: fatal }\n",
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let run = h
            .trigger("hello", json!({ "input": { "name": format!("n{i}") } }))
            .await;
        ids.push(run.body["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        h.wait_run(id).await;
    }
    // Triggered after the others finished, so surely in a later millisecond.
    let failing = h.trigger("fails", json!({})).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    h.wait_run(&failing).await;

    let mut seen = Vec::new();
    let mut path = "/v1/runs?task=hello&limit=2".to_string();
    loop {
        let page = h.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let runs = page.body["runs"].as_array().unwrap();
        assert!(runs.len() <= 2);
        seen.extend(runs.iter().map(|r| r["id"].as_str().unwrap().to_string()));
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/runs?task=hello&limit=2&cursor={cursor}"),
            None => break,
        }
        assert!(seen.len() <= 5, "paging does not end: {seen:?}");
    }
    // Newest first: ids sort by creation millisecond (runs created in the same
    // millisecond are in id order), every run once, across pages.
    let mut sorted = seen.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted);
    let mut expected = ids.clone();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(seen, expected);

    let all = h.get("/v1/runs").await.body;
    assert_eq!(all["runs"].as_array().unwrap().len(), 6);
    assert_eq!(all["runs"][0]["id"], failing.as_str());
    let failed = h.get("/v1/runs?status=failed").await.body;
    assert_eq!(failed["runs"].as_array().unwrap().len(), 1);
    assert_eq!(
        failed["runs"][0]["steps"][0]["attempts"][0]["error_kind"],
        "fatal"
    );
    let bad = h.get("/v1/runs?status=bogus").await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    let bad = h.get("/v1/runs?limit=many").await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
}

#[tokio::test]
async fn runs_are_listed_by_creation_time_exactly_across_pages() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("hello", HELLO_TASK).await;
    // (id, created_at as RFC 3339, as unix ms), oldest first.
    let mut runs: Vec<(String, String, i64)> = Vec::new();
    for i in 0..5 {
        let run = h
            .trigger("hello", json!({ "input": { "name": format!("t{i}") } }))
            .await;
        let created = run.body["created_at"].as_str().unwrap().to_string();
        let ms = chrono::DateTime::parse_from_rfc3339(&created)
            .unwrap()
            .timestamp_millis();
        runs.push((run.body["id"].as_str().unwrap().to_string(), created, ms));
        // Each run in its own millisecond, so a range can split them.
        while chrono::Utc::now().timestamp_millis() <= ms {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let listed = |query: String| {
        let h = &h;
        async move {
            let mut seen = Vec::new();
            let mut path = format!("/v1/runs?{query}&limit=1");
            loop {
                let page = h.get(&path).await;
                assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
                for r in page.body["runs"].as_array().unwrap() {
                    seen.push(r["id"].as_str().unwrap().to_string());
                }
                match page.body["next_cursor"].as_str() {
                    Some(c) => path = format!("/v1/runs?{query}&limit=1&cursor={c}"),
                    None => return seen,
                }
                assert!(seen.len() <= 5, "paging does not end: {seen:?}");
            }
        }
    };
    let ids = |range: std::ops::Range<usize>| -> Vec<String> {
        runs[range].iter().rev().map(|r| r.0.clone()).collect()
    };
    // `since` inclusive, `until` exclusive, to the millisecond, one a page.
    assert_eq!(
        listed(format!("since={}&until={}", runs[1].1, runs[4].1)).await,
        ids(1..4)
    );
    // Unix milliseconds say the same.
    assert_eq!(
        listed(format!("since={}&until={}", runs[1].2, runs[4].2)).await,
        ids(1..4)
    );
    assert_eq!(listed(format!("since={}", runs[3].2)).await, ids(3..5));
    assert_eq!(listed(format!("until={}", runs[2].2)).await, ids(0..2));
    // An offset is an instant like any other: the same as UTC.
    let shifted = chrono::DateTime::parse_from_rfc3339(&runs[2].1)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(8 * 3600).unwrap())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
        .replace('+', "%2B");
    assert_eq!(listed(format!("since={shifted}")).await, ids(2..5));
    assert!(listed(format!("since={}", runs[4].2 + 1)).await.is_empty());

    for bad in [
        "since=yesterday",
        "since=",
        "until=2026-13-01T00:00:00Z",
        "since=99999999999999999999999",
        "since=1234567890123456",
    ] {
        let answer = h.get(&format!("/v1/runs?{bad}")).await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{bad}: {}",
            answer.body
        );
        let field = if bad.starts_with("until") {
            "until"
        } else {
            "since"
        };
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{field}`")), "{bad}: {message}");
    }
    // Both well formed, the range empty: 422, the parameter named.
    let answer = h.get("/v1/runs?since=1000&until=999").await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("`since`"), "{message}");
}
