//! Recording and replaying attempts (`record:`, `ax run replay`), with the
//! `dice` test plugin, which reads the clocks, random and KV (and fetches a
//! URL when told) and fails with all of it in its error:
//! - through the runtime: an attempt with HTTP to a loopback upstream is
//!   recorded and replayed to the same output without a request leaving;
//! - on a real `ax serve`: a failed attempt of a task with `record:
//!   on_failure` keeps its record (a succeeded one does not), tenant-scoped;
//!   `ax run replay` reproduces the same failure and error from it, and
//!   against another build (`dice2`) reports where it diverges.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ax::capability::{Grants, KvGrant, KvLimits, KvNamespace, KvScope};
use ax::model::Outcome;
use ax::model::record::{Call, HttpResult, KvOp};
use ax::store::kv::SledKv;
use serde_json::{Value, json};

use crate::common::{RUNTIME, context, limits, load, plugin_bytes, plugin_path};

/// A loopback upstream answering `GET /n` with a body that changes every
/// time (its hit count), so a replay that went out would be seen.
async fn counting_upstream() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new()
        .route(
            "/n",
            axum::routing::get(move || {
                let counter = counter.clone();
                async move { format!("hit {}", counter.fetch_add(1, Ordering::SeqCst) + 1) }
            }),
        )
        // 700 KiB: within the output cap, over the record's (hex doubles it).
        .route(
            "/big",
            axum::routing::get(|| async { "z".repeat(700 << 10) }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), hits)
}

#[tokio::test]
async fn a_recorded_attempt_replays_to_the_same_output_without_leaving_the_process() {
    let (base, hits) = counting_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let grants = Grants {
        allow_http: ax::capability::http::parse_list(std::slice::from_ref(&base)).unwrap(),
        kv: Some(KvGrant {
            store: Arc::new(SledKv::open_dir(dir.path()).unwrap()),
            namespace: KvNamespace::new("acme", "nightly", KvScope::Task),
            limits: KvLimits::default(),
        }),
        ..Grants::default()
    };
    let plugin = load("dice");
    let input = json!({ "url": format!("{base}/n") }).to_string();
    let (report, record) = RUNTIME
        .run_recorded(
            &plugin,
            "digest",
            &context("dice"),
            &input,
            &limits(10_000),
            &grants,
            None,
        )
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    let output = report.output.clone().unwrap();
    assert_eq!(output["fetched"], json!({ "status": 200, "body": "hit 1" }));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // What crossed the boundary, in order.
    assert!(!record.wall_clock.is_empty() && !record.monotonic_clock.is_empty());
    assert_eq!(record.secure_random.len(), 16, "one u64, hex");
    assert_eq!(record.insecure_random.len(), 16, "one u64, hex");
    let kinds: Vec<String> = record.calls.iter().map(Call::describe).collect();
    assert_eq!(
        kinds,
        [
            "kv get `dice:count`".to_string(),
            "kv set `dice:count`".to_string(),
            format!("http GET {base}/n"),
        ]
    );
    let Call::Http {
        result: HttpResult::Response { status, body, .. },
        ..
    } = &record.calls[2]
    else {
        panic!("{:?}", record.calls[2]);
    };
    assert_eq!(
        (*status, hex::decode(body).unwrap()),
        (200, b"hit 1".to_vec())
    );
    assert!(!record.truncated);
    assert_eq!(record.output.as_ref(), Some(&output));

    // Replayed twice: the same output each time, and the upstream is never
    // asked again (its next answer would be "hit 2").
    for _ in 0..2 {
        let replayed = RUNTIME
            .replay(&plugin, &record, &BTreeMap::new())
            .await
            .unwrap();
        assert_eq!(replayed.divergence, None);
        assert!(replayed.matches, "{replayed:?}");
        assert_eq!(replayed.report.output.as_ref(), Some(&output));
        assert_eq!(replayed.calls_left, 0);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // The second build reads a key the record does not have.
    let replayed = RUNTIME
        .replay(&load("dice2"), &record, &BTreeMap::new())
        .await
        .unwrap();
    assert!(!replayed.matches);
    assert_eq!(
        replayed.divergence.as_deref(),
        Some(
            "call 1: kv get `dice:second` was not recorded (the record has kv get `dice:count` there)"
        )
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_record_past_its_cap_is_truncated_and_the_attempt_is_not() {
    let (base, _) = counting_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let grants = Grants {
        allow_http: ax::capability::http::parse_list(std::slice::from_ref(&base)).unwrap(),
        kv: Some(KvGrant {
            store: Arc::new(SledKv::open_dir(dir.path()).unwrap()),
            namespace: KvNamespace::new("acme", "nightly", KvScope::Task),
            limits: KvLimits::default(),
        }),
        ..Grants::default()
    };
    let plugin = load("dice");
    let input = json!({ "url": format!("{base}/big") }).to_string();
    let (report, record) = RUNTIME
        .run_recorded(
            &plugin,
            "digest",
            &context("dice"),
            &input,
            &limits(10_000),
            &grants,
            None,
        )
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Succeeded, "{:?}", report.error);
    let body = &report.output.as_ref().unwrap()["fetched"]["body"];
    assert_eq!(body.as_str().map(str::len), Some(700 << 10));
    assert!(record.truncated);
    assert!(record.bytes <= ax::model::record::MAX_RECORD_BYTES as u64);
    // The cap counts what came in; the output has its own cap (max_output_bytes).
    let serialized = serde_json::to_vec(&record).unwrap().len();
    let output = serde_json::to_vec(&record.output).unwrap().len();
    assert!(
        serialized < ax::model::record::MAX_RECORD_BYTES + output + (64 << 10),
        "{serialized}"
    );
    // A replay gets as far as the record goes and says where it was cut.
    let replayed = RUNTIME
        .replay(&plugin, &record, &BTreeMap::new())
        .await
        .unwrap();
    assert!(!replayed.matches && replayed.truncated);
    let why = replayed.divergence.unwrap();
    assert_eq!(
        why,
        format!("call 3: the answer to http GET {base}/big was truncated at the record's size cap")
    );
}

#[tokio::test]
async fn a_replay_that_asks_for_more_than_was_recorded_stops_at_the_first_miss() {
    let dir = tempfile::tempdir().unwrap();
    let grants = Grants {
        kv: Some(KvGrant {
            store: Arc::new(SledKv::open_dir(dir.path()).unwrap()),
            namespace: KvNamespace::new("acme", "nightly", KvScope::Task),
            limits: KvLimits::default(),
        }),
        ..Grants::default()
    };
    let plugin = load("dice");
    let (_, mut record) = RUNTIME
        .run_recorded(
            &plugin,
            "digest",
            &context("dice"),
            r#"{"fail": true}"#,
            &limits(10_000),
            &grants,
            None,
        )
        .await
        .unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
    // Drop the recorded `set`: the replay's second call has no answer.
    assert!(matches!(
        record.calls.pop(),
        Some(Call::Kv { op: KvOp::Set, .. })
    ));
    let replayed = RUNTIME
        .replay(&plugin, &record, &BTreeMap::new())
        .await
        .unwrap();
    assert!(!replayed.matches);
    assert_eq!(
        replayed.divergence.as_deref(),
        Some("call 2: kv set `dice:count` was not recorded (the record has no more calls)")
    );
    let error = replayed.report.error.unwrap();
    assert!(
        error.starts_with("stopped by the replay: call 2"),
        "{error}"
    );
}

// --- on a real server, through the CLI ------------------------------------------

const TOKEN: &str = "replay-test-token";

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(data_dir: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("AX_ADMIN_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting ax serve");
        let url =
            crate::crash::listening_url(&mut child).expect("ax serve exited before listening");
        Self { child, url }
    }

    /// One API call as the admin acting on `tenant`: (status, body).
    fn call(
        &self,
        method: &str,
        path: &str,
        tenant: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> (u16, Vec<u8>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(120)))
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url))
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("x-ax-tenant", tenant);
        let bytes = match body {
            Some((content_type, bytes)) => {
                request = request.header("content-type", content_type);
                bytes
            }
            None => Vec::new(),
        };
        let mut response = agent
            .run(request.body(bytes).unwrap())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        (
            status,
            response.body_mut().read_to_vec().unwrap_or_default(),
        )
    }

    fn json(&self, method: &str, path: &str, tenant: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        let (status, bytes) = self.call(method, path, tenant, body);
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Triggers `task` and waits for its run to end.
    fn run(&self, task: &str) -> Value {
        let (status, run) = self.json(
            "POST",
            &format!("/v1/tasks/{task}/runs"),
            "default",
            Some(json!({})),
        );
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap().to_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, run) = self.json("GET", &format!("/v1/runs/{id}"), "default", None);
            if ["succeeded", "failed", "cancelled"].contains(&run["status"].as_str().unwrap_or(""))
            {
                return run;
            }
            assert!(Instant::now() < deadline, "run {id} did not finish: {run}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `ax ARGS` against this server: (exit code, stdout, stderr).
    fn ax(&self, args: &[&str], cache: &Path) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(args)
            .env("AX_URL", &self.url)
            .env("AX_TOKEN", TOKEN)
            .env("AX_CACHE_DIR", cache)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

#[test]
fn ax_run_replay_reproduces_a_recorded_failure_and_finds_where_a_new_build_diverges() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let server = Server::start(&dir.path().join("data"));
    let (status, body) = server.call(
        "POST",
        "/v1/plugins?name=dice&version=1.0.0",
        "default",
        Some(("application/wasm", plugin_bytes("dice"))),
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    for (name, fail) in [("roll", true), ("roll-ok", false)] {
        let yaml = format!(
            "name: {name}\nrecord: on_failure\nsteps:\n  - name: roll\n    plugin: dice@1.0.0\n    kv: task\n    input: {{fail: {fail}}}\n"
        );
        let (status, body) = server.call(
            "PUT",
            &format!("/v1/tasks/{name}"),
            "default",
            Some(("application/yaml", yaml.into_bytes())),
        );
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    }
    // A second run, so the record's KV read is not the first value.
    server.run("roll");
    let run = server.run("roll");
    assert_eq!(run["status"], "failed", "{run}");
    let id = run["id"].as_str().unwrap();
    let error = run["steps"][0]["attempts"][0]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.contains("\"count\":2"), "{error}");

    // The failed attempt kept its record; another tenant cannot see it.
    let record_path = format!("/v1/runs/{id}/steps/roll/attempts/1/record");
    let (status, record) = server.json("GET", &record_path, "default", None);
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["outcome"], "failed");
    assert_eq!(record["error"], error);
    assert_eq!(record["truncated"], false);
    assert!(!record["wall_clock"].as_array().unwrap().is_empty());
    let (status, _) = server.json(
        "POST",
        "/v1/tenants",
        "default",
        Some(json!({"name": "other"})),
    );
    assert_eq!(status, 201);
    let (status, refused) = server.json("GET", &record_path, "other", None);
    assert_eq!(
        (status, &refused["error"]["code"]),
        (404, &json!("not_found")),
        "{refused}"
    );
    let (status, _) = server.call(
        "GET",
        &format!("/v1/runs/{id}/steps/roll/attempts/1/component"),
        "default",
        None,
    );
    assert_eq!(status, 200);
    let (status, _) = server.json(
        "GET",
        &format!("/v1/runs/{id}/steps/roll/attempts/x/record"),
        "default",
        None,
    );
    assert_eq!(status, 400);

    // A succeeded attempt under `on_failure` keeps none.
    let ok = server.run("roll-ok");
    assert_eq!(ok["status"], "succeeded", "{ok}");
    let ok_id = ok["id"].as_str().unwrap();
    let (status, missing) = server.json(
        "GET",
        &format!("/v1/runs/{ok_id}/steps/roll/attempts/1/record"),
        "default",
        None,
    );
    assert_eq!(status, 404, "{missing}");
    let (code, _, stderr) = server.ax(&["run", "replay", ok_id, "--step", "roll"], &cache);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("record: on_failure"), "{stderr}");

    // The recorded component, locally: the same failure, the same error.
    let (code, stdout, stderr) = server.ax(&["run", "replay", id, "--step", "roll"], &cache);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("outcome   failed (recorded: failed)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("result    the same as the recorded attempt"),
        "{stdout}"
    );
    assert!(stdout.contains("\"count\":2"), "{stdout}");
    let (code, stdout, stderr) = server.ax(
        &[
            "run",
            "replay",
            id,
            "--step",
            "roll",
            "--attempt",
            "1",
            "--json",
        ],
        &cache,
    );
    assert_eq!(code, 0, "{stderr}");
    let replayed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(replayed["report"]["error"], error);
    assert_eq!(replayed["matches"], true);

    // A secret the step does not list is refused, before anything runs.
    let (code, _, stderr) = server.ax(
        &["run", "replay", id, "--step", "roll", "--secret", "nope=1"],
        &cache,
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--secret `nope`: the recorded step lists no such secret (it lists: none)"),
        "{stderr}"
    );

    // A new build: where it diverges.
    let dice2 = plugin_path("dice2");
    let (code, stdout, stderr) = server.ax(
        &[
            "run",
            "replay",
            id,
            "--step",
            "roll",
            "--plugin",
            dice2.to_str().unwrap(),
        ],
        &cache,
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("result    different from the recorded attempt"),
        "{stdout}"
    );
    assert!(
        stdout.contains("diverged  call 1: kv get `dice:second` was not recorded (the record has kv get `dice:count` there)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_record_holds_no_secret_value_and_its_replay_reads_a_marker() {
    let secret = "hunter2-s3cr3t";
    let grants = Grants {
        secrets: BTreeMap::from([
            ("api".to_owned(), Some(secret.to_owned())),
            ("unset".to_owned(), None),
        ]),
        ..Grants::default()
    };
    let plugin = load("probe");
    let input = json!({ "ops": [
        { "secret": "api" },
        { "secret": "unset" },
        { "leak": { "name": "api", "fail": true } },
    ]})
    .to_string();
    let (report, record) = RUNTIME
        .run_recorded(
            &plugin,
            "digest",
            &context("probe"),
            &input,
            &limits(10_000),
            &grants,
            None,
        )
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.error.as_deref(), Some("failing with [redacted]"));
    let stored = serde_json::to_string(&record).unwrap();
    assert!(!stored.contains(secret), "{stored}");
    assert_eq!(
        record.secrets,
        BTreeMap::from([("api".to_owned(), true), ("unset".to_owned(), false)])
    );
    // Read as the marker, or as a value given for the replay: the same
    // (redacted) ending either way.
    for given in [
        BTreeMap::new(),
        BTreeMap::from([("api".to_owned(), secret.to_owned())]),
    ] {
        let replayed = RUNTIME.replay(&plugin, &record, &given).await.unwrap();
        assert!(replayed.matches, "{replayed:?}");
        assert!(!replayed.report.stdout.contains(secret));
    }
}
