//! The HTTP API end to end: the router driven in-process with `oneshot`
//! (a real scheduler, the real wasm runtime and real plugins behind it), and
//! once over a real socket with the `ax` client commands.

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax::api::{ApiState, auth::hash_token, router};
use ax::scheduler::{Scheduler, SchedulerConfig, SystemClock};
use ax::server::WasmRunner;
use ax::service::{Ax, DEFAULT_MAX_PLUGIN_BYTES};
use ax::store::Store;
use ax::store::memory::MemoryStore;
use ax::task::Caps;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::common::{RUNTIME, plugin_bytes};

pub(crate) const TOKEN: &str = "api-test-token";

/// An in-process host: store, scheduler, runtime and the router over them.
pub(crate) struct Host {
    app: Router,
    state: ApiState,
    shutdown: CancellationToken,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// What a call answered.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: axum::http::HeaderMap,
    pub(crate) body: Value,
}

impl Answer {
    pub(crate) fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

pub(crate) async fn host() -> Host {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // One runtime (engine, pool, compiled plugins) for the whole test binary.
    let runtime = RUNTIME.clone();
    let clock = Arc::new(SystemClock);
    let shutdown = CancellationToken::new();
    let runner = Arc::new(WasmRunner::new(runtime.clone(), store.clone()));
    let (scheduler, _task) = Scheduler::start(
        store.clone(),
        runner,
        clock.clone(),
        SchedulerConfig::default(),
        shutdown.clone(),
    )
    .await
    .expect("scheduler starts");
    let tenants = ax::service::load_registry(store.as_ref(), 0).expect("tenants load");
    let ax = Ax {
        tenants,
        store,
        runtime,
        scheduler,
        clock,
        caps: Caps {
            max_fuel: 10_000_000_000,
            max_memory_mb: 512,
            max_timeout: Duration::from_secs(300),
        },
        max_plugin_bytes: DEFAULT_MAX_PLUGIN_BYTES,
        concurrency: 2,
        plugin_quota: Default::default(),
    };
    let state = ApiState {
        ax,
        admin_token_sha256: hash_token(TOKEN),
        metrics_token_sha256: None,
    };
    Host {
        app: router(state.clone()),
        state,
        shutdown,
    }
}

/// A request with the admin token and, if given, a tenant header.
fn request(method: &str, path: &str, tenant: Option<&str>) -> axum::http::request::Builder {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    if let Some(t) = tenant {
        builder = builder.header("x-ax-tenant", t);
    }
    builder
}

impl Host {
    pub(crate) async fn send(&self, req: Request<Body>) -> Answer {
        let response = self
            .app
            .clone()
            .oneshot(req)
            .await
            .expect("the router never fails");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{status}: not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn call(&self, method: &str, path: &str, body: impl Into<Body>) -> Answer {
        self.send(request(method, path, None).body(body.into()).unwrap())
            .await
    }

    async fn get(&self, path: &str) -> Answer {
        self.call("GET", path, Body::empty()).await
    }

    async fn post_json(&self, path: &str, body: Value) -> Answer {
        let req = request("POST", path, None)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        self.send(req).await
    }

    pub(crate) async fn upload_bytes(&self, name: &str, version: &str, bytes: Vec<u8>) -> Answer {
        let req = request(
            "POST",
            &format!("/v1/plugins?name={name}&version={version}"),
            None,
        )
        .header(header::CONTENT_TYPE, "application/wasm")
        .body(Body::from(bytes))
        .unwrap();
        self.send(req).await
    }

    async fn upload(&self, plugin: &str, name: &str) -> Answer {
        self.upload_bytes(name, "1.0.0", plugin_bytes(plugin)).await
    }

    async fn apply(&self, name: &str, definition: &str) -> Answer {
        let req = request("PUT", &format!("/v1/tasks/{name}"), None)
            .header(header::CONTENT_TYPE, "application/yaml")
            .body(Body::from(definition.to_string()))
            .unwrap();
        self.send(req).await
    }

    async fn trigger(&self, task: &str, body: Value) -> Answer {
        self.post_json(&format!("/v1/tasks/{task}/runs"), body)
            .await
    }

    /// Polls a run until `done` says so (20 s at most).
    pub(crate) async fn wait_until(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answer = self.get(&format!("/v1/runs/{id}")).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
            if done(&answer.body) {
                return answer.body;
            }
            assert!(
                Instant::now() < deadline,
                "run never got there: {:#}",
                answer.body
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_run(&self, id: &str) -> Value {
        self.wait_until(id, |r| {
            matches!(
                r["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            )
        })
        .await
    }

    /// What the list endpoints show (to prove a refused request changed nothing).
    async fn snapshot(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for path in [
            "/v1/plugins",
            "/v1/tasks",
            "/v1/runs",
            "/v1/dead-letters?open=false",
        ] {
            let answer = self.get(path).await;
            assert_eq!(answer.status, StatusCode::OK);
            out.push(answer.body);
        }
        out
    }
}

const HELLO_TASK: &str = "name: hello\nplugin: hello@1.0.0\ninput: { name: \"${input.name}\" }\n";

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
    let done = h.wait_run(&id).await;
    assert_eq!(done["status"], "cancelled");
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

#[tokio::test]
async fn bad_requests_get_a_clear_4xx_and_change_nothing() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("hello", HELLO_TASK).await;
    let before = h.snapshot().await;

    let garbage = h
        .upload_bytes("junk", "1.0.0", b"#!/bin/sh\necho hi\n".to_vec())
        .await;
    assert_eq!(
        (garbage.status, garbage.code()),
        (StatusCode::BAD_REQUEST, "invalid_wasm"),
        "{}",
        garbage.body
    );
    let core = h
        .upload_bytes("core", "1.0.0", b"\0asm\x01\0\0\0".to_vec())
        .await;
    assert_eq!(
        (core.status, core.code()),
        (StatusCode::BAD_REQUEST, "invalid_wasm")
    );
    assert!(
        core.message().contains("not a component"),
        "{}",
        core.message()
    );
    let world = h.upload("invalid-not-ax", "notax").await;
    assert_eq!(
        (world.status, world.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "wrong_world"),
        "{}",
        world.body
    );
    let import = h.upload("invalid_extra_import", "evil").await;
    assert_eq!(
        (import.status, import.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "unsupported_import")
    );
    let echo = plugin_bytes("echo");
    let cut = h
        .upload_bytes("cut", "1.0.0", echo[..echo.len() / 2].to_vec())
        .await;
    assert_eq!(
        (cut.status, cut.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_component")
    );
    // Versions no task could reference (`plugin: name@version` takes strict
    // semver 2.0) are refused at upload too: one rule for both.
    for bad in ["v1", "01.2.3", "1.0.0-", "1.2.3-01", "1.2"] {
        let version = h.upload_bytes("hello2", bad, plugin_bytes("hello")).await;
        assert_eq!(
            (version.status, version.code()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "version {bad}: {}",
            version.body
        );
    }
    let unnamed = h
        .send(
            request("POST", "/v1/plugins", None)
                .body(Body::from(plugin_bytes("hello")))
                .unwrap(),
        )
        .await;
    assert_eq!(unnamed.status, StatusCode::BAD_REQUEST);
    let huge = h
        .upload_bytes(
            "huge",
            "1.0.0",
            vec![0u8; DEFAULT_MAX_PLUGIN_BYTES + (1 << 20)],
        )
        .await;
    assert_eq!(
        (huge.status, huge.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let text = h
        .send(
            request("POST", "/v1/plugins?name=x&version=1.0.0", None)
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from("x"))
                .unwrap(),
        )
        .await;
    assert_eq!(text.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let yaml = h.apply("hello", "name: hello\nplugin: [unclosed\n").await;
    assert_eq!(
        (yaml.status, yaml.code()),
        (StatusCode::BAD_REQUEST, "invalid_yaml"),
        "{}",
        yaml.body
    );
    let json_text = h.apply("hello", "{\"name\": \"hello\",").await;
    assert_eq!(
        (json_text.status, json_text.code()),
        (StatusCode::BAD_REQUEST, "invalid_json"),
        "{}",
        json_text.body
    );
    let unknown = h
        .apply(
            "hello",
            "name: hello\nplugin: hello@1.0.0\nbogus_field: 1\n",
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        "{}",
        unknown.body
    );
    assert!(
        unknown.message().contains("bogus_field"),
        "{}",
        unknown.body
    );
    let five = h
        .apply(
            "hello",
            "name: hello\ntrigger: { cron: \"0 2 * * *\" }\nplugin: hello@1.0.0\n",
        )
        .await;
    assert_eq!(
        (five.status, five.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    assert!(five.message().contains("0 0 2 * * *"), "{}", five.message());
    let zone = h.apply("hello", "name: hello\ntrigger: { cron: \"0 0 2 * * *\", timezone: Mars/Olympus }\nplugin: hello@1.0.0\n").await;
    assert_eq!(
        (zone.status, zone.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    assert!(
        zone.message().contains("Mars/Olympus"),
        "{}",
        zone.message()
    );
    let missing = h.apply("hello", "name: hello\nplugin: ghost@1.0.0\n").await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_plugin")
    );
    let fuel = h
        .apply(
            "hello",
            "name: hello\nplugin: hello@1.0.0\nlimits: { fuel: 90000000000 }\n",
        )
        .await;
    assert_eq!(fuel.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(fuel.message().contains("10000000000"), "{}", fuel.message());
    let big = h
        .apply(
            "hello",
            &format!(
                "name: hello\nplugin: hello@1.0.0\ndescription: \"{}\"\n",
                "x".repeat(2 << 20)
            ),
        )
        .await;
    assert_eq!(
        (big.status, big.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let binary = h
        .call("PUT", "/v1/tasks/hello", vec![0xffu8, 0xfe, 0x00])
        .await;
    assert_eq!(binary.status, StatusCode::BAD_REQUEST);

    let bad_json = h.call("POST", "/v1/tasks/hello/runs", "{not json").await;
    assert_eq!(
        (bad_json.status, bad_json.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let extra = h.trigger("hello", json!({ "inputs": {} })).await;
    assert_eq!(
        (extra.status, extra.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let ghost = h.trigger("ghost", json!({})).await;
    assert_eq!(
        (ghost.status, ghost.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );

    let no_token = h
        .send(Request::get("/v1/tasks").body(Body::empty()).unwrap())
        .await;
    assert_eq!(
        (no_token.status, no_token.code()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    assert_eq!(no_token.headers[header::WWW_AUTHENTICATE], "Bearer");
    let bad_token = h
        .send(
            Request::get("/v1/tasks")
                .header(header::AUTHORIZATION, "Bearer nope")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(
        (bad_token.status, bad_token.code()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let basic = h
        .send(
            Request::get("/v1/tasks")
                .header(header::AUTHORIZATION, format!("Basic {TOKEN}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
    let unauth_upload = h
        .send(
            Request::post("/v1/plugins?name=x&version=1.0.0")
                .body(Body::from(plugin_bytes("hello")))
                .unwrap(),
        )
        .await;
    assert_eq!(unauth_upload.status, StatusCode::UNAUTHORIZED);
    let tenant = h
        .send(
            request("GET", "/v1/tasks", Some("bad/tenant"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(
        (tenant.status, tenant.code()),
        (StatusCode::BAD_REQUEST, "invalid_tenant")
    );

    let route = h.get("/v1/nothing-here").await;
    assert_eq!(
        (route.status, route.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let method = h.call("PATCH", "/v1/tasks/hello", Body::empty()).await;
    assert_eq!(
        (method.status, method.code()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );

    assert_eq!(
        h.snapshot().await,
        before,
        "a refused request changed the store"
    );
    assert_eq!(h.get("/v1/tasks/hello").await.body["version"], 1);
}

#[tokio::test]
async fn multipart_uploads_work_like_raw_ones() {
    let h = host().await;
    let boundary = "ax-test-boundary";
    let mut body = Vec::new();
    for (field, value) in [("name", "hello"), ("version", "2.0.0")] {
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"\r\n\r\n{value}\r\n").as_bytes());
    }
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"hello.wasm\"\r\nContent-Type: application/wasm\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(&plugin_bytes("hello"));
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let req = request("POST", "/v1/plugins", None)
        .header(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Body::from(body))
        .unwrap();
    let answer = h.send(req).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(
        (
            answer.body["name"].as_str(),
            answer.body["version"].as_str()
        ),
        (Some("hello"), Some("2.0.0"))
    );
    assert_eq!(answer.body["size"], plugin_bytes("hello").len());
}

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
}

fn ax_cli(url: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ax"));
    command
        .args(args)
        .env("AX_URL", url)
        .env_remove("AX_TENANT")
        .env_remove("AX_TOKEN");
    if let Some(token) = token {
        command.env("AX_TOKEN", token);
    }
    command.output().expect("running ax")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_client_drives_a_real_server() {
    let h = host().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ax::api::serve(
        listener,
        h.state.clone(),
        ax::config::ConnectionsConfig::default(),
        h.shutdown.clone(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let task_file = dir.path().join("hello.yaml");
    std::fs::write(&task_file, HELLO_TASK).unwrap();
    let plugin = crate::common::plugin_path("hello").display().to_string();
    let task_file = task_file.display().to_string();

    let out = tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| ax_cli(&url, Some(TOKEN), args);
        let text = |o: &Output| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };

        let push = run(&["plugin", "push", &plugin, "--version", "1.0.0"]);
        assert!(push.status.success(), "{}", text(&push));
        assert!(
            text(&push).contains("uploaded: hello@1.0.0"),
            "{}",
            text(&push)
        );
        let list = run(&["plugin", "list"]);
        assert!(
            String::from_utf8_lossy(&list.stdout).starts_with("NAME   VERSION"),
            "{}",
            text(&list)
        );

        let apply = run(&["task", "apply", "-f", &task_file]);
        assert!(apply.status.success(), "{}", text(&apply));
        assert!(
            text(&apply).contains("task hello created"),
            "{}",
            text(&apply)
        );

        let trigger = run(&[
            "trigger",
            "hello",
            "--input",
            r#"{"name":"cli"}"#,
            "--wait",
            "--timeout",
            "20s",
            "--json",
        ]);
        assert!(trigger.status.success(), "{}", text(&trigger));
        let finished: Value = serde_json::from_slice(&trigger.stdout).unwrap();
        assert_eq!(finished["status"], "succeeded");
        assert_eq!(finished["steps"][0]["output"]["greeting"], "hello, cli");
        let id = finished["id"].as_str().unwrap().to_string();

        let show = run(&["run", "show", &id]);
        assert!(
            text(&show).contains("succeeded") && text(&show).contains("hello, cli"),
            "{}",
            text(&show)
        );
        let runs = run(&["runs", "--task", "hello"]);
        assert!(text(&runs).contains(&id), "{}", text(&runs));
        let logs = run(&["logs", &id]);
        assert!(text(&logs).contains("greeting cli"), "{}", text(&logs));
        let events = run(&["events", &id, "--json"]);
        let events: Value = serde_json::from_slice(&events.stdout).unwrap();
        assert!(!events["events"].as_array().unwrap().is_empty());

        let unknown = run(&["run", "show", "r-nope"]);
        assert_eq!(unknown.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&unknown.stderr).starts_with("error: not_found: "),
            "{}",
            text(&unknown)
        );
        let anonymous = ax_cli(&url, None, &["runs"]);
        assert_eq!(anonymous.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&anonymous.stderr).starts_with("error: unauthorized: "),
            "{}",
            text(&anonymous)
        );
        "ok"
    })
    .await
    .unwrap();
    assert_eq!(out, "ok");
}

/// The SPEC §4 shape on the example plugins: extract → full | incremental → push.
const REPORT_TASK: &str = r#"name: report
steps:
  - name: extract
    plugin: extract-orders@1.0.0
    input: { date: "2026-11-30", rows: 900000 }
  - name: full
    needs: [extract]
    when: "steps.extract.output.rows > 800000"
    plugin: pack@1.0.0
    input: { rows: "${steps.extract.output.rows}", mode: full }
  - name: incremental
    needs: [extract]
    when: "steps.extract.output.rows <= 800000"
    plugin: pack@1.0.0
    input: { rows: "${steps.extract.output.rows}", mode: incremental }
  - name: push
    needs: [full, incremental]
    trigger_rule: one_success
    plugin: notify@1.0.0
    input: { text: "report ready: ${steps.extract.output.rows} rows" }
"#;

impl Host {
    /// A GET whose answer may not be JSON: `(status, content type, body text)`.
    async fn get_text(&self, path: &str) -> (StatusCode, String, String) {
        let response = self
            .app
            .clone()
            .oneshot(request("GET", path, None).body(Body::empty()).unwrap())
            .await
            .expect("the router never fails");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            content_type,
            String::from_utf8(bytes.to_vec()).expect("UTF-8"),
        )
    }

    /// Uploads the three plugins of [`REPORT_TASK`] and applies it. While the
    /// host refuses `when` (conditions not supported yet), applies the same
    /// DAG without its conditions instead; answers whether `when` was kept.
    async fn apply_report(&self) -> bool {
        for (file, name) in [
            ("extract_orders", "extract-orders"),
            ("pack", "pack"),
            ("notify", "notify"),
        ] {
            let up = self.upload(file, name).await;
            assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
        }
        let task = self.apply("report", REPORT_TASK).await;
        if task.status == StatusCode::UNPROCESSABLE_ENTITY
            && task.body["error"]["details"]["path"] == "steps[1].when"
        {
            let plain: String = REPORT_TASK
                .lines()
                .filter(|l| !l.trim_start().starts_with("when:"))
                .map(|l| format!("{l}\n"))
                .collect();
            let task = self.apply("report", &plain).await;
            assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);
            return false;
        }
        assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);
        true
    }
}

#[tokio::test]
async fn a_task_graph_is_drawn_in_four_formats_and_with_a_runs_states() {
    let h = host().await;
    let conditional = h.apply_report().await;
    const TEXT: &str = "text/plain; charset=utf-8";

    let (status, content_type, text) = h.get_text("/v1/tasks/report/graph").await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::OK, TEXT),
        "{text}"
    );
    assert!(text.starts_with("report: 4 steps in 3 layers\n"), "{text}");
    assert!(
        text.contains("extract      ──▶ full, incremental"),
        "{text}"
    );
    assert_eq!(
        text.contains("[when: steps.extract.output.rows > 800000]"),
        conditional,
        "{text}"
    );
    assert!(text.contains("notify@1.0.0 (one_success)"), "{text}");
    assert!(!text.contains(" · "), "no run, no states: {text}");
    let (_, _, explicit) = h.get_text("/v1/tasks/report/graph?format=text").await;
    assert_eq!(explicit, text);

    let (status, content_type, dot) = h.get_text("/v1/tasks/report/graph?format=dot").await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, TEXT));
    assert!(
        dot.starts_with("digraph \"report\" {\n  rankdir=LR;"),
        "{dot}"
    );
    let edge = if conditional {
        "\"extract\" -> \"full\" [style=dashed, label=\"when\"];"
    } else {
        "\"extract\" -> \"full\";"
    };
    assert!(dot.contains(edge), "{dot}");
    assert!(dot.contains("\"full\" -> \"push\";"), "{dot}");
    assert!(dot.trim_end().ends_with('}'), "{dot}");

    let (status, content_type, mermaid) = h.get_text("/v1/tasks/report/graph?format=mermaid").await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, TEXT));
    assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
    let edge = if conditional {
        "s0_extract -.-> s1_full"
    } else {
        "s0_extract --> s1_full"
    };
    assert!(mermaid.contains(edge), "{mermaid}");
    assert!(mermaid.contains("s2_incremental --> s3_push"), "{mermaid}");
    assert!(!mermaid.contains("classDef"), "{mermaid}");

    let json = h.get("/v1/tasks/report/graph?format=json").await;
    assert_eq!(json.status, StatusCode::OK);
    assert_eq!(
        json.headers[header::CONTENT_TYPE],
        "application/json",
        "an object, not a string"
    );
    assert_eq!(
        json.body["order"],
        json!(["extract", "full", "incremental", "push"])
    );
    assert_eq!(json.body["edges"].as_array().unwrap().len(), 4);
    assert_eq!(json.body["nodes"][0]["plugin"], "extract-orders@1.0.0");
    assert_eq!(json.body["nodes"][3]["trigger_rule"], "one_success");
    assert!(json.body["nodes"][0].get("state").is_none());

    // A run: the graph of what ran, each step with its state.
    let run = h.trigger("report", json!({})).await;
    assert_eq!(run.status, StatusCode::CREATED, "{}", run.body);
    let id = run.body["id"].as_str().unwrap().to_string();
    let done = h.wait_run(&id).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    let status_of = |step: &str| {
        done["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == step)
            .map(|s| s["status"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(status_of("extract"), "succeeded");
    assert_eq!(status_of("push"), "succeeded");

    let with_run = h
        .get(&format!("/v1/tasks/report/graph?format=json&run={id}"))
        .await;
    assert_eq!(with_run.status, StatusCode::OK, "{}", with_run.body);
    for node in with_run.body["nodes"].as_array().unwrap() {
        let name = node["name"].as_str().unwrap();
        assert_eq!(node["state"], status_of(name).as_str(), "{name}");
    }
    let (_, _, text) = h
        .get_text(&format!("/v1/tasks/report/graph?run={id}"))
        .await;
    assert!(
        text.lines()
            .any(|l| l.contains("extract-orders@1.0.0") && l.ends_with(" · succeeded")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("(one_success)") && l.ends_with(" · succeeded")),
        "{text}"
    );
    let (_, _, dot) = h
        .get_text(&format!("/v1/tasks/report/graph?format=dot&run={id}"))
        .await;
    assert!(dot.contains("fillcolor=\"#bbf7d0\""), "{dot}");
    let (_, _, mermaid) = h
        .get_text(&format!("/v1/tasks/report/graph?format=mermaid&run={id}"))
        .await;
    assert!(
        mermaid.contains("classDef state_succeeded fill:#bbf7d0"),
        "{mermaid}"
    );

    // Refusals, in the standard error shape.
    let bad = h.get("/v1/tasks/report/graph?format=svg").await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    assert!(
        bad.message().contains("text, dot, mermaid or json"),
        "{}",
        bad.message()
    );
    let missing = h.get("/v1/tasks/nope/graph").await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let unknown_run = h.get("/v1/tasks/report/graph?run=r-nope").await;
    assert_eq!(unknown_run.status, StatusCode::NOT_FOUND);
    // A one-step task reads as two lines; a run of another task, or of
    // another tenant, is not found.
    let solo = h
        .apply(
            "solo",
            "name: solo\nplugin: notify@1.0.0\ninput: { text: hi }\n",
        )
        .await;
    assert_eq!(solo.status, StatusCode::CREATED, "{}", solo.body);
    let (_, _, text) = h.get_text("/v1/tasks/solo/graph").await;
    assert_eq!(text, "solo: 1 step\n  solo  notify@1.0.0\n");
    let other_task = h.get(&format!("/v1/tasks/solo/graph?run={id}")).await;
    assert_eq!(
        (other_task.status, other_task.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let other_tenant = h
        .send(
            request(
                "GET",
                &format!("/v1/tasks/report/graph?run={id}"),
                Some("other"),
            )
            .body(Body::empty())
            .unwrap(),
        )
        .await;
    assert_eq!(other_tenant.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ax_graph_prints_the_servers_drawing() {
    let h = host().await;
    h.apply_report().await;
    let (_, _, expected) = h.get_text("/v1/tasks/report/graph").await;
    let (_, _, mermaid) = h.get_text("/v1/tasks/report/graph?format=mermaid").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ax::api::serve(
        listener,
        h.state.clone(),
        ax::config::ConnectionsConfig::default(),
        h.shutdown.clone(),
    ));
    tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| ax_cli(&url, Some(TOKEN), args);
        let out = run(&["graph", "report"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
        let out = run(&["graph", "report", "--format", "mermaid"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), mermaid);
        let out = run(&["graph", "report", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["order"][0], "extract");
        let out = run(&["graph", "nope"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("error: not_found: "),
            "{out:?}"
        );
    })
    .await
    .unwrap();
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
