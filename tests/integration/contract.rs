//! The API's contract, end to end: the limits the OpenAPI document states
//! are the ones validation enforces (a 257-step task, `limit=0` and `1001`,
//! `count=101`, a `trigger.at` in year 0 are refused), `GET /v1/tasks` pages
//! by name and `ax task list` follows every page, and schemathesis finds
//! nothing the document and the server disagree on (`scripts/api-check`).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::plugin_path;
use crate::live::Live;

/// A `GET` with the admin token: `(status, body)`.
async fn get(live: &Live, path: &str) -> (u16, Value) {
    let r = live.call("GET", path, &[], None).await;
    (r.status, r.json())
}

/// A `PUT /v1/tasks/{name}` of `yaml`: `(status, body)`.
async fn put_task(live: &Live, name: &str, yaml: &str) -> (u16, Value) {
    let r = live
        .call(
            "PUT",
            &format!("/v1/tasks/{name}"),
            &[],
            Some(("application/yaml", yaml.as_bytes().to_vec())),
        )
        .await;
    (r.status, r.json())
}

fn assert_bad_request(path: &str, (status, body): (u16, Value), says: &str) {
    assert_eq!(status, 400, "{path}: {body}");
    assert_eq!(body["error"]["code"], "bad_request", "{path}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{path}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_outside_their_documented_range_are_refused() {
    let live = Live::start(|_| {}).await;
    live.upload("hello").await;
    live.apply(
        "greet",
        "name: greet\nplugin: hello@1.0.0\ntrigger: { every: 1h }\n",
    )
    .await;
    for path in ["/v1/runs", "/v1/tasks"] {
        for limit in [0, 1001] {
            let p = format!("{path}?limit={limit}");
            assert_bad_request(&p, get(&live, &p).await, "it must be in 1..=1000");
        }
        let (status, _) = get(&live, &format!("{path}?limit=1000")).await;
        assert_eq!(status, 200, "{path}?limit=1000");
    }
    for p in [
        "/v1/tasks/greet/next?count=0",
        "/v1/tasks/greet/next?count=101",
        "/v1/cron/next?expr=0%200%202%20*%20*%20*&count=101",
    ] {
        assert_bad_request(p, get(&live, p).await, "it must be in 1..=100");
    }
    let (status, body) = get(&live, "/v1/tasks/greet/next?count=100").await;
    assert_eq!(
        (status, body["next"].as_array().map(Vec::len)),
        (200, Some(100))
    );
    // An instant is RFC 3339 or unix milliseconds, as the document says.
    for (p, says) in [
        ("/v1/runs?since=yesterday", "`since`"),
        ("/v1/runs?until=2026-12-01", "`until`"),
        ("/v1/runs?since=-5", "`since`"),
        ("/v1/runs?since=1234567890123456", "`since`"),
    ] {
        assert_bad_request(p, get(&live, p).await, says);
    }
    // Both well formed, the range empty: 422 (documented), not 400.
    let (status, body) = get(&live, "/v1/runs?since=2&until=1").await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("after `until`")
    );
    for p in [
        "/v1/runs?since=0&until=99999999999999",
        "/v1/runs?since=1970-01-01T00:00:00Z&until=2999-01-01T00:00:00.5%2B08:00",
    ] {
        let (status, body) = get(&live, p).await;
        assert_eq!(status, 200, "{p}: {body}");
    }
    // An empty enum value is no value the document lists.
    for p in ["/v1/runs?status=", "/v1/tasks/greet/graph?format="] {
        let (status, body) = get(&live, p).await;
        assert_eq!(status, 400, "{p}: {body}");
    }
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_task_limits_are_enforced() {
    let live = Live::start(|_| {}).await;
    live.upload("hello").await;
    let steps = |n: usize| -> String {
        let mut yaml = String::from("name: wide\nsteps:\n");
        for i in 0..n {
            yaml.push_str(&format!("  - {{ name: s{i}, plugin: hello@1.0.0 }}\n"));
        }
        yaml
    };
    let (status, body) = put_task(&live, "wide", &steps(ax::task::MAX_STEPS + 1)).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"]["path"], "steps");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("257 steps; the limit is 256"),
        "{body}"
    );
    let (status, body) = put_task(&live, "wide", &steps(ax::task::MAX_STEPS)).await;
    assert_eq!(status, 201, "{body}");

    for at in ["0000-01-01T00:00:00Z", "1969-12-31T23:59:59Z"] {
        let yaml = format!("name: once\nplugin: hello@1.0.0\ntrigger: {{ at: '{at}' }}\n");
        let (status, body) = put_task(&live, "once", &yaml).await;
        assert_eq!(status, 422, "{at}: {body}");
        assert_eq!(body["error"]["details"]["path"], "trigger.at", "{body}");
    }
    let (status, body) = put_task(
        &live,
        "once",
        "name: once\nplugin: hello@1.0.0\ntrigger: { at: '1970-01-01T00:00:00Z' }\n",
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Nothing refused was stored.
    let (_, tasks) = get(&live, "/v1/tasks").await;
    let names: Vec<&str> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["once", "wide"]);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_listed_by_name_a_page_at_a_time() {
    let live = Live::start(|_| {}).await;
    live.upload("hello").await;
    for name in ["cherry", "apple", "elder", "banana", "date"] {
        live.apply(name, &format!("name: {name}\nplugin: hello@1.0.0\n"))
            .await;
    }
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    let mut path = "/v1/tasks?limit=2".to_string();
    loop {
        let (status, page) = get(&live, &path).await;
        assert_eq!(status, 200, "{page}");
        let names: Vec<String> = page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        pages.push(names.len());
        seen.extend(names);
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/tasks?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, [2, 2, 1]);
    assert_eq!(seen, ["apple", "banana", "cherry", "date", "elder"]);
    // The default page holds them all, and says there is no more.
    let (_, all) = get(&live, "/v1/tasks").await;
    assert_eq!(all["tasks"].as_array().unwrap().len(), 5);
    assert!(all["next_cursor"].is_null(), "{all}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ax_task_list_and_status_follow_every_page() {
    // One more task than the largest page.
    const TASKS: usize = 1001;
    let live = Live::start(|_| {}).await;
    live.upload("hello").await;
    let started = Instant::now();
    for i in 0..TASKS {
        let name = format!("t{i:04}");
        let (status, body) = put_task(
            &live,
            &name,
            &format!("name: {name}\nplugin: hello@1.0.0\n"),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    eprintln!("{TASKS} tasks stored in {:?}", started.elapsed());
    let (_, first) = get(&live, "/v1/tasks?limit=1000").await;
    assert_eq!(first["next_cursor"], "t0999", "one page is not all of them");

    let base = live.base.clone();
    let ax = move |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(args)
            .env("AX_URL", &base)
            .env("AX_TOKEN", crate::live::TOKEN)
            .output()
            .expect("running ax");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (json, human, status) = tokio::task::spawn_blocking(move || {
        (
            ax(&["task", "list", "--json"]),
            ax(&["task", "list"]),
            ax(&["status", "--json"]),
        )
    })
    .await
    .unwrap();
    let listed: Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), TASKS);
    assert_eq!((names[0], names[TASKS - 1]), ("t0000", "t1000"));
    // A header, then one line per task.
    assert_eq!(human.lines().count(), TASKS + 1, "{}", &human[..200]);
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["tasks"], TASKS);
    live.stop().await;
}

/// `scripts/api-check`: schemathesis (installed from PyPI on first use)
/// against a real `ax serve`, every check on. A few minutes at most.
#[test]
fn schemathesis_finds_no_disagreement_between_document_and_server() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/api-check");
    let plugins = plugin_path("echo");
    let started = Instant::now();
    let out = Command::new(script)
        .env("AX_BIN", env!("CARGO_BIN_EXE_ax"))
        .env(
            "AX_PLUGIN_DIR",
            plugins.parent().expect("the plugin folder"),
        )
        .output()
        .expect("running scripts/api-check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/api-check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed"), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(600),
        "scripts/api-check took {:?}",
        started.elapsed()
    );
}
