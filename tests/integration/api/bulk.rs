//! Bulk triggers (`POST /v1/tasks/{name}/runs:batch`) and bulk apply
//! (`POST /v1/tasks:apply`) through the router: answers in request order,
//! per-item errors, all or nothing where the request itself is wrong.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{HELLO_TASK, host};

#[tokio::test]
async fn a_trigger_batch_answers_each_run_in_order_and_each_runs_to_its_end() {
    let h = host().await;
    assert_eq!(h.upload("hello", "hello").await.status, StatusCode::CREATED);
    assert_eq!(
        h.apply("hello", HELLO_TASK).await.status,
        StatusCode::CREATED
    );
    let before = h
        .trigger(
            "hello",
            json!({"input": {"name": "seen"}, "idempotency_key": "seen"}),
        )
        .await;
    assert_eq!(before.status, StatusCode::CREATED);
    let runs: Vec<Value> = (0..20)
        .map(|i| match i {
            3 | 7 => json!({"input": {"name": "dup"}, "idempotency_key": "k"}),
            5 => json!({"idempotency_key": "seen"}),
            9 => json!({"input": {"name": "p"}, "priority": 9}),
            _ => json!({"input": {"name": format!("n{i}")}}),
        })
        .collect();
    let answer = h
        .post_json("/v1/tasks/hello/runs:batch", json!({ "runs": runs }))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let items = answer.body["runs"].as_array().unwrap();
    assert_eq!(items.len(), 20);
    assert_eq!(
        (
            &answer.body["created"],
            &answer.body["existing"],
            &answer.body["failed"]
        ),
        (&json!(18), &json!(2), &json!(0))
    );
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["index"], i);
        assert!(item["error"].is_null(), "{item}");
    }
    // A key repeated inside the batch: its first item's run.
    assert_eq!(items[3]["created"], true);
    assert_eq!(items[7]["created"], false);
    assert_eq!(items[7]["id"], items[3]["id"]);
    // A key of an earlier request: that run.
    assert_eq!(items[5]["id"], before.body["id"]);
    assert_eq!(items[5]["created"], false);
    for (i, item) in items.iter().enumerate() {
        let run = h.wait_run(item["id"].as_str().unwrap()).await;
        assert_eq!(run["status"], "succeeded", "{run:#}");
        let name = match i {
            3 | 7 => "dup".to_string(),
            5 => "seen".to_string(),
            9 => "p".to_string(),
            _ => format!("n{i}"),
        };
        if i != 5 {
            assert_eq!(
                run["steps"][0]["output"]["greeting"],
                format!("hello, {name}")
            );
        }
    }
    let listed = h.get("/v1/runs?task=hello&limit=1000").await;
    assert_eq!(listed.body["runs"].as_array().unwrap().len(), 19);
    let nine = h
        .get(&format!("/v1/runs/{}", items[9]["id"].as_str().unwrap()))
        .await;
    assert_eq!(nine.body["priority"], 9);
}

#[tokio::test]
async fn a_bad_item_refuses_the_whole_batch_with_every_bad_item_named() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("hello", HELLO_TASK).await;
    let before = h.snapshot().await;
    let runs = json!([
        {"input": {"name": "ok"}},
        {"priority": 12},
        {"idempotency_key": ""},
        {"inputs": {}},
        "not an object",
        {"input": {"name": "ok too"}},
    ]);
    let answer = h
        .post_json("/v1/tasks/hello/runs:batch", json!({ "runs": runs }))
        .await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        "{}",
        answer.body
    );
    assert!(
        answer.message().starts_with(
            "4 of the 6 runs are invalid, so none was applied; first, runs[1]: priority 12"
        ),
        "{}",
        answer.message()
    );
    let items = answer.body["error"]["details"]["items"].as_array().unwrap();
    let indexes: Vec<_> = items.iter().map(|i| i["index"].as_u64().unwrap()).collect();
    assert_eq!(indexes, [1, 2, 3, 4]);
    let codes: Vec<_> = items
        .iter()
        .map(|i| i["error"]["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["bad_request", "bad_request", "invalid_json", "invalid_json"]
    );
    assert!(
        items[2]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("inputs")
    );
    assert_eq!(h.snapshot().await, before, "nothing was created");

    // The number of runs: 1 to 1000.
    let empty = h
        .post_json("/v1/tasks/hello/runs:batch", json!({ "runs": [] }))
        .await;
    assert_eq!(
        (empty.status, empty.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    let many: Vec<Value> = (0..1001).map(|_| json!({})).collect();
    let over = h
        .post_json("/v1/tasks/hello/runs:batch", json!({ "runs": many }))
        .await;
    assert_eq!(
        (over.status, over.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    assert!(
        over.message()
            .contains("at most 1000 runs; this one has 1001"),
        "{}",
        over.message()
    );
    // An item larger than a single trigger's body.
    let big = "x".repeat(ax::api::MAX_BODY_BYTES);
    let answer = h
        .post_json(
            "/v1/tasks/hello/runs:batch",
            json!({ "runs": [{"input": {"name": big}}] }),
        )
        .await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    assert_eq!(
        answer.body["error"]["details"]["items"][0]["error"]["code"],
        "payload_too_large"
    );
    // An unknown task refuses the request, as it does a single trigger.
    let answer = h
        .post_json("/v1/tasks/nope/runs:batch", json!({ "runs": [{}, {}] }))
        .await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    assert_eq!(h.snapshot().await, before);
}

fn def(name: &str, extra: &str) -> String {
    format!("name: {name}\nplugin: hello@1.0.0\ninput: {{ name: bulk }}\n{extra}")
}

#[tokio::test]
async fn a_bulk_apply_stores_all_or_nothing_and_names_each_bad_file() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("up", &def("up", "")).await;
    let before = h.snapshot().await;
    let item = |file: &str, source: String| json!({"file": file, "source": source});
    let bad = json!({"tasks": [
        item("a.yaml", def("a", "trigger: { cron: \"0 * * * * ?\" }\n")),
        item("b.yaml", "name: b\nplugin: missing@1.0.0\n".into()),
        item("c.yaml", def("c", "trigger: { cron: \"not cron\" }\n")),
        item("d.yaml", ": : not yaml".into()),
        item("e.yaml", def("a", "")),
    ]});
    let answer = h.post_json("/v1/tasks:apply", bad).await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        "{}",
        answer.body
    );
    let items = answer.body["error"]["details"]["items"].as_array().unwrap();
    let files: Vec<_> = items.iter().map(|i| i["file"].as_str().unwrap()).collect();
    assert_eq!(files, ["b.yaml", "c.yaml", "d.yaml", "e.yaml"]);
    let codes: Vec<_> = items
        .iter()
        .map(|i| i["error"]["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["invalid_plugin", "invalid", "invalid_yaml", "invalid"]
    );
    assert!(
        items[3]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("defined twice in this batch (also in a.yaml)")
    );
    assert!(
        answer
            .message()
            .starts_with("4 of the 5 tasks are invalid, so none was applied; first, b.yaml:"),
        "{}",
        answer.message()
    );
    assert_eq!(h.snapshot().await, before, "nothing was stored");

    // `after` cycles are checked over the set and the saved tasks together.
    let cycle = json!({"tasks": [
        item("x.yaml", def("x", "trigger: { after: [y] }\n")),
        item("y.yaml", def("y", "trigger: { after: [x] }\n")),
    ]});
    let answer = h.post_json("/v1/tasks:apply", cycle).await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    let item0 = &answer.body["error"]["details"]["items"][0];
    assert_eq!(item0["file"], "x.yaml");
    assert!(
        item0["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x -> y -> x"),
        "{item0}"
    );
    let through_saved = json!({"tasks": [item("up.yaml", def("up", "trigger: { after: [z] }\n")), item("z.yaml", def("z", "trigger: { after: [up] }\n"))]});
    assert_eq!(
        h.post_json("/v1/tasks:apply", through_saved).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(h.snapshot().await, before);

    let good = json!({"tasks": [
        item("a.yaml", def("a", "trigger: { cron: \"0 * * * * ?\" }\n")),
        {"source": def("b", "trigger: { after: [a] }\n")},
        item("up.yaml", def("up", "priority: 7\n")),
    ]});
    let answer = h.post_json("/v1/tasks:apply", good).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        (&answer.body["created"], &answer.body["replaced"]),
        (&json!(2), &json!(1))
    );
    let tasks = answer.body["tasks"].as_array().unwrap();
    assert_eq!(tasks[0]["task"]["name"], "a");
    assert!(tasks[0]["task"]["next_fire"].is_string());
    assert_eq!(tasks[1]["file"], Value::Null);
    assert_eq!(
        (&tasks[2]["created"], &tasks[2]["task"]["version"]),
        (&json!(false), &json!(2))
    );
    assert_eq!(h.get("/v1/tasks/up").await.body["spec"]["priority"], 7);
    assert_eq!(
        h.get("/v1/tasks").await.body["tasks"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // `b` runs after `a`: the after index knows the bulk-applied edge.
    let run = h.trigger("a", json!({})).await;
    h.wait_run(run.body["id"].as_str().unwrap()).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while h.get("/v1/runs?task=b").await.body["runs"]
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(std::time::Instant::now() < deadline, "b never ran after a");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let many: Vec<Value> = (0..1001)
        .map(|i| item("f", def(&format!("t{i}"), "")))
        .collect();
    let over = h
        .post_json("/v1/tasks:apply", json!({ "tasks": many }))
        .await;
    assert_eq!(
        (over.status, over.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    let empty = h.post_json("/v1/tasks:apply", json!({ "tasks": [] })).await;
    assert_eq!(
        (empty.status, empty.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
}
