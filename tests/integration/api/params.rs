//! `params:` over the API with the real `echo` plugin: the saved definition
//! shows them, a manual trigger's `params` override the defaults (over its
//! `input`), a wrong one is a `400` that creates nothing — singly and in a
//! batch — and definitions that could never fire right are refused on save.
//! Also through the service (`Ax::trigger`) directly, without HTTP.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::host;

const REPORT: &str = "name: report
params:
  - { name: day, type: string, default: '2026-01-01', description: the day to process }
  - { name: limit, type: integer, default: 10 }
  - { name: mode, type: enum, values: [full, incremental], default: full }
  - { name: dry_run, type: boolean, default: false }
plugin: echo@1.0.0
input: { day: '${input.day}', limit: '${input.limit}', all: '${input}' }
";

const DEFAULTS: &str = r#"{"day": "2026-01-01", "limit": 10, "mode": "full", "dry_run": false}"#;

#[tokio::test]
async fn a_manual_trigger_overrides_the_defaults_and_the_plugin_gets_them() {
    let h = host().await;
    assert_eq!(h.upload("echo", "echo").await.status, StatusCode::CREATED);
    let saved = h.apply("report", REPORT).await;
    assert_eq!(saved.status, StatusCode::CREATED, "{}", saved.body);
    assert_eq!(
        saved.body["spec"]["params"][2],
        json!({"name": "mode", "type": "enum", "values": ["full", "incremental"], "default": "full"})
    );

    // No params: the defaults.
    let run = h.trigger("report", json!({})).await;
    assert_eq!(run.status, StatusCode::CREATED, "{}", run.body);
    let done = h.wait_run(run.body["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    let defaults: Value = serde_json::from_str(DEFAULTS).unwrap();
    assert_eq!(done["input"], defaults);
    assert_eq!(done["steps"][0]["output"]["input"]["all"], defaults);

    // `params` over `input` over the defaults.
    let run = h
        .trigger(
            "report",
            json!({"input": {"day": "2026-12-01", "limit": 1}, "params": {"limit": 500, "dry_run": true}}),
        )
        .await;
    assert_eq!(run.status, StatusCode::CREATED, "{}", run.body);
    let done = h.wait_run(run.body["id"].as_str().unwrap()).await;
    let want = json!({"day": "2026-12-01", "limit": 500, "mode": "full", "dry_run": true});
    assert_eq!(done["input"], want);
    let output = &done["steps"][0]["output"]["input"];
    assert_eq!(output["day"], "2026-12-01");
    assert_eq!(
        output["limit"], 500,
        "a single `${{input.limit}}` keeps its type"
    );
    assert_eq!(output["all"], want);
}

#[tokio::test]
async fn a_wrong_param_is_a_400_and_creates_nothing() {
    let h = host().await;
    h.upload("echo", "echo").await;
    assert_eq!(h.apply("report", REPORT).await.status, StatusCode::CREATED);
    let before = h.snapshot().await;
    for (body, message) in [
        (
            json!({"params": {"limit": "ten"}}),
            "params.limit: param `limit` is an integer: expected a whole number, found the text `ten`",
        ),
        (
            json!({"params": {"mode": "partial"}}),
            "params.mode: param `mode` is an enum of `full`, `incremental`: expected one of `full`, `incremental`, found the text `partial`",
        ),
        (
            json!({"params": {"limti": 3}}),
            "params.limti: task `report` has no param `limti`; did you mean `limit`?",
        ),
        (
            json!({"input": {"extra": 1}}),
            "input.extra: task `report` has no param `extra`; its params are: day, limit, mode, dry_run",
        ),
        (
            json!({"input": [1]}),
            "task `report` declares params, so `input` is a mapping of param names to values; found a list",
        ),
    ] {
        let answer = h.trigger("report", body.clone()).await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{body}: {}",
            answer.body
        );
        assert_eq!(answer.message(), message, "for {body}");
    }
    // `params` must be a mapping.
    let answer = h.trigger("report", json!({"params": [1]})).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert_eq!(h.snapshot().await, before, "nothing was created");
}

#[tokio::test]
async fn a_batch_with_one_wrong_param_creates_nothing() {
    let h = host().await;
    h.upload("echo", "echo").await;
    assert_eq!(h.apply("report", REPORT).await.status, StatusCode::CREATED);
    let before = h.snapshot().await;
    let answer = h
        .post_json(
            "/v1/tasks/report/runs:batch",
            json!({"runs": [{"params": {"limit": 1}}, {"params": {"limit": 1.5}}, {"params": {"nope": 1}}]}),
        )
        .await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        "{}",
        answer.body
    );
    let items = answer.body["error"]["details"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{}", answer.body);
    assert_eq!(items[0]["index"], 1);
    assert_eq!(items[0]["error"]["code"], "bad_request");
    assert!(
        items[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has no param `nope`"),
        "{}",
        answer.body
    );
    assert_eq!(h.snapshot().await, before, "nothing was created");

    let answer = h
        .post_json(
            "/v1/tasks/report/runs:batch",
            json!({"runs": [{"params": {"limit": 1}}, {"params": {"mode": "incremental"}}]}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["created"], 2);
    let second = answer.body["runs"][1]["id"].as_str().unwrap();
    let done = h.wait_run(second).await;
    assert_eq!(done["input"]["mode"], "incremental");
    assert_eq!(done["input"]["limit"], 10);

    // `params` for a task that declares none refuses its batch too.
    let plain = "name: plain\nplugin: echo@1.0.0\n";
    assert_eq!(h.apply("plain", plain).await.status, StatusCode::CREATED);
    let answer = h
        .post_json(
            "/v1/tasks/plain/runs:batch",
            json!({"runs": [{"input": {"any": 1}}, {"params": {"day": "x"}}]}),
        )
        .await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    let items = &answer.body["error"]["details"]["items"];
    assert_eq!(items[0]["index"], 1);
    assert!(
        items[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("task `plain` declares no params"),
        "{}",
        answer.body
    );
    // Without params, a batch runs as before.
    let answer = h
        .post_json(
            "/v1/tasks/plain/runs:batch",
            json!({"runs": [{"input": [1, 2]}]}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let done = h
        .wait_run(answer.body["runs"][0]["id"].as_str().unwrap())
        .await;
    assert_eq!(done["input"], json!([1, 2]));
}

#[tokio::test]
async fn definitions_that_could_not_fire_right_are_refused_on_save() {
    let h = host().await;
    h.upload("echo", "echo").await;
    let cases = [
        (
            "name: t\ntrigger: { cron: '0 0 1 * * ?' }\nparams: [{ name: day, type: string }]\nplugin: echo@1.0.0\n",
            "params[0].default",
            "param `day` has no default, but the task's trigger fires it",
        ),
        (
            "name: t\nparams: [{ name: day, type: string, default: x }]\nplugin: echo@1.0.0\ninput: { d: '${input.dya}' }\n",
            // The service validates the parsed spec, so the shorthand's step is named.
            "steps[0].input.d",
            "`${input.dya}`: task `t` declares no param `dya` (its params: day)",
        ),
        (
            "name: t\nparams: [{ name: n, type: integer, default: ten }]\nplugin: echo@1.0.0\n",
            "params[0].default",
            "the default of an integer param: expected a whole number, found the text `ten`",
        ),
        (
            "name: t\nparams: [{ name: n, type: date }]\nplugin: echo@1.0.0\n",
            "params[0].type",
            "unknown type `date`",
        ),
    ];
    for (yaml, path, message) in cases {
        let answer = h.apply("t", yaml).await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
            "{yaml}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["error"]["details"]["path"], path,
            "{}",
            answer.body
        );
        assert!(
            answer.message().contains(message),
            "{yaml}: {}",
            answer.body
        );
    }
    assert_eq!(h.get("/v1/tasks/t").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_service_resolves_params_without_http() {
    let h = host().await;
    h.upload("echo", "echo").await;
    assert_eq!(h.apply("report", REPORT).await.status, StatusCode::CREATED);
    let ax = &h.state.ax;
    let request = |params: Value| ax::scheduler::TriggerRequest {
        tenant: "default".into(),
        task: "report".into(),
        params: params.as_object().cloned(),
        actor: "test".into(),
        ..Default::default()
    };
    let (run, created) = ax
        .trigger(request(json!({"day": "2027-01-01"})))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(run.input["day"], "2027-01-01");
    assert_eq!(run.input["limit"], 10);
    let e = ax
        .trigger(request(json!({"dry_run": "no"})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ax::service::Error::BadRequest(m) if m == "params.dry_run: param `dry_run` is a boolean: expected true or false, found the text `no`"),
        "{e:?}"
    );
}
