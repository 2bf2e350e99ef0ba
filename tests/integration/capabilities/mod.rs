//! Plugin capabilities end to end, with real parts: the `probe` test plugin
//! run by the real runtime against an HTTP server on a loopback port started
//! here; KV over the sled store; and a real `ax serve` process for tenant
//! isolation, persistence across a restart, the KV quota and secrets that
//! never leak.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ax::capability::kv::KvStore;
use ax::capability::{Grants, HttpLimits, KvGrant, KvLimits, KvNamespace};
use ax::model::{AttemptReport, Limits, Outcome};
use ax::store::kv::SledKv;
use axum::Router;
use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::common::{RUNTIME, context, load, plugin_bytes};

// --- a real upstream on a loopback port --------------------------------------

/// An HTTP server on 127.0.0.1:0 counting the requests it receives.
struct Upstream {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Upstream {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn pattern(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A body sent in `n` chunks of 10 KiB, without a content length.
struct Chunks(usize);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.0 == 0 {
            return Poll::Ready(None);
        }
        self.0 -= 1;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(vec![
            b'y';
            10 << 10
        ])))))
    }
}

async fn upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = Router::new()
        .route("/ok", get(|| async { "hello" }))
        .route("/big", get(|| async { vec![b'x'; 200 << 10] }))
        .route(
            "/stream",
            get(|| async { axum::body::Body::new(Chunks(20)) }),
        )
        .route(
            "/redirect",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                (StatusCode::FOUND, [(header::LOCATION, q["to"].clone())])
            }),
        )
        .route(
            "/hang",
            get(|| async {
                std::future::pending::<()>().await;
                ""
            }),
        )
        .route("/echo", post(|body: String| async move { body }))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    next.run(req).await
                }
            },
        ));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream { addr, hits }
}

// --- running the probe plugin ------------------------------------------------

fn allow(patterns: &[String]) -> Grants {
    Grants {
        allow_http: patterns.iter().map(|p| p.parse().unwrap()).collect(),
        ..Grants::default()
    }
}

fn limits(timeout_ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        ..Limits::default()
    }
}

async fn probe(ops: Value, grants: &Grants, limits: &Limits) -> AttemptReport {
    let plugin = load("probe");
    RUNTIME
        .run_with(
            &plugin,
            &context("probe"),
            &json!({ "ops": ops }).to_string(),
            limits,
            grants,
            None,
        )
        .await
        .expect("no host fault")
}

/// The per-operation results of a succeeded probe run.
fn results(report: &AttemptReport) -> Vec<Value> {
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:#?}");
    report.output.as_ref().unwrap()["results"]
        .as_array()
        .unwrap()
        .clone()
}

fn err(result: &Value) -> &str {
    result["err"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error, got {result}"))
}

fn log_text(report: &AttemptReport) -> String {
    report
        .logs
        .iter()
        .map(|l| format!("{} {:?}\n", l.message, l.fields))
        .collect()
}

// --- outbound HTTP -----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_request_succeeds() {
    let up = upstream().await;
    let grants = allow(&[up.pattern()]);
    let report = probe(
        json!([{ "get": up.url("/ok") }, { "post": { "url": up.url("/echo"), "body": {"a": 1} } }]),
        &grants,
        &limits(10_000),
    )
    .await;
    let r = results(&report);
    assert_eq!(r[0]["ok"]["status"], 200, "{r:?}");
    assert_eq!(r[0]["ok"]["body"], "hello");
    assert_eq!(r[1]["ok"]["body"], r#"{"a":1}"#);
    assert_eq!(up.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_host_port_and_scheme_are_each_denied_before_connecting() {
    let up = upstream().await;
    let other = upstream().await;
    let grants = allow(&[up.pattern()]);
    let port = up.addr.port();
    let report = probe(
        json!([
            { "get": format!("http://localhost:{port}/ok") },
            { "get": other.url("/ok") },
            { "get": format!("https://127.0.0.1:{port}/ok") },
        ]),
        &grants,
        &limits(10_000),
    )
    .await;
    let r = results(&report);
    for result in &r {
        assert!(
            err(result).contains("the host denied the request"),
            "{result}"
        );
    }
    let log = log_text(&report);
    assert!(
        log.contains(&format!(
            "http://localhost:{port} is not in the step's allow_http"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("http://127.0.0.1:{} is not in", other.addr.port())),
        "{log}"
    );
    assert!(
        log.contains(&format!("https://127.0.0.1:{port} is not in")),
        "{log}"
    );
    assert_eq!(up.hits() + other.hits(), 0, "no connection was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_without_allow_http_gets_no_network() {
    let up = upstream().await;
    let report = probe(
        json!([{ "get": up.url("/ok") }]),
        &Grants::default(),
        &limits(10_000),
    )
    .await;
    assert!(err(&results(&report)[0]).contains("denied"));
    assert!(log_text(&report).contains("this step allows no outbound HTTP"));
    assert_eq!(up.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_loopback_is_denied_even_when_listed() {
    let up = upstream().await;
    let port = up.addr.port();
    let grants = allow(&[format!("http://localhost:{port}")]);
    let report = probe(
        json!([{ "get": format!("http://localhost:{port}/ok") }]),
        &grants,
        &limits(10_000),
    )
    .await;
    assert!(err(&results(&report)[0]).contains("denied"));
    assert!(
        log_text(&report).contains("never reached through a name"),
        "{}",
        log_text(&report)
    );
    assert_eq!(up.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_and_each_hop_is_checked() {
    let up = upstream().await;
    let port = up.addr.port();
    let grants = allow(&[up.pattern()]);
    let to_allowed = up.url(&format!("/redirect?to=http://127.0.0.1:{port}/ok"));
    let to_denied = up.url(&format!("/redirect?to=http://localhost:{port}/ok"));
    let report = probe(
        json!([
            { "get": to_allowed },
            { "get_no_redirect": to_allowed },
            { "get": to_denied },
        ]),
        &grants,
        &limits(10_000),
    )
    .await;
    let r = results(&report);
    assert_eq!(r[0]["ok"]["status"], 200, "{r:?}");
    assert_eq!(r[0]["ok"]["body"], "hello");
    assert_eq!(r[1]["ok"]["status"], 302);
    assert!(err(&r[2]).contains("denied"), "{r:?}");
    assert!(log_text(&report).contains(&format!("http://localhost:{port} is not in")));
    // 2 hops + 1 + the first hop of the denied chain.
    assert_eq!(up.hits(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_ends_the_attempt_timed_out() {
    let up = upstream().await;
    let grants = allow(&[up.pattern()]);
    let started = Instant::now();
    let report = probe(json!([{ "get": up.url("/hang") }]), &grants, &limits(1_000)).await;
    let took = started.elapsed();
    assert_eq!(report.outcome, Outcome::TimedOut, "{report:#?}");
    assert!(took < Duration::from_millis(2_500), "took {took:?}");
    assert_eq!(up.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_request_timeout_is_an_error_to_the_guest() {
    let up = upstream().await;
    let mut grants = allow(&[up.pattern()]);
    grants.http_limits.timeout = Duration::from_millis(300);
    let report = probe(
        json!([{ "get": up.url("/hang") }, { "get": up.url("/ok") }]),
        &grants,
        &limits(10_000),
    )
    .await;
    let r = results(&report);
    assert!(err(&r[0]).contains("timed out"), "{r:?}");
    assert_eq!(r[1]["ok"]["status"], 200);
    assert!(log_text(&report).contains("timed out after 300ms"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_responses_are_cut_at_the_cap() {
    let up = upstream().await;
    let mut grants = allow(&[up.pattern()]);
    grants.http_limits.max_response_bytes = 64 << 10;
    let report = probe(
        json!([{ "get": up.url("/big") }, { "get": up.url("/stream") }, { "get": up.url("/ok") }]),
        &grants,
        &limits(10_000),
    )
    .await;
    let r = results(&report);
    // With a content length: refused at the head. Streamed: cut at the cap.
    assert!(err(&r[0]).contains("larger than the step allows"), "{r:?}");
    assert!(err(&r[1]).contains("larger than the step allows"), "{r:?}");
    assert_eq!(r[2]["ok"]["status"], 200);
    let log = log_text(&report);
    assert!(
        log.contains("of 204800 bytes refused: the cap is 65536"),
        "{log}"
    );
    assert!(log.contains("cut at the cap of 65536 bytes"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_cap_is_enforced() {
    let up = upstream().await;
    let grants = Grants {
        http_limits: HttpLimits {
            max_requests: 2,
            ..HttpLimits::default()
        },
        ..allow(&[up.pattern()])
    };
    let report = probe(
        json!([{ "get": up.url("/ok") }, { "get": up.url("/ok") }, { "get": up.url("/ok") }]),
        &grants,
        &limits(10_000),
    )
    .await;
    let r = results(&report);
    assert_eq!(r[1]["ok"]["status"], 200);
    assert!(err(&r[2]).contains("denied"), "{r:?}");
    assert!(log_text(&report).contains("the attempt has used its 2 requests"));
    assert_eq!(up.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_posts_to_its_configured_webhook_only_when_granted() {
    let up = upstream().await;
    let plugin = load("notify");
    let input = r##"{"text": "report ready", "channel": "#ops"}"##;
    let run = |grants: Grants| {
        let plugin = plugin.clone();
        async move {
            RUNTIME
                .run_with(
                    &plugin,
                    &context("notify"),
                    input,
                    &limits(10_000),
                    &grants,
                    None,
                )
                .await
                .unwrap()
        }
    };
    // The demo: no webhook configured, no network, same output as before.
    let report = run(Grants::default()).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!(report.output.as_ref().unwrap().get("webhook_status"), None);
    // Configured and allowed: posted.
    let mut grants = allow(&[up.pattern()]);
    grants.config = [("webhook_url".to_string(), up.url("/echo"))].into();
    let report = run(grants.clone()).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!(report.output.as_ref().unwrap()["webhook_status"], 200);
    assert_eq!(up.hits(), 1);
    // Configured but not allowed: a fatal error saying the host denied it.
    grants.allow_http.clear();
    let report = run(grants).await;
    assert_eq!(report.outcome, Outcome::Failed, "{report:?}");
    assert!(
        report.error.as_deref().unwrap().contains("denied"),
        "{report:?}"
    );
    assert_eq!(up.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_without_wasi_http_are_unaffected() {
    let report = crate::common::run("echo", r#"{"n": 1}"#, &limits(5_000)).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
}

// --- key-value, config and secrets through the runtime -----------------------

fn kv_grant(store: &Arc<SledKv>, tenant: &str, quota: u64) -> Grants {
    Grants {
        kv: Some(KvGrant {
            store: store.clone(),
            namespace: KvNamespace {
                tenant: tenant.into(),
                task: None,
            },
            limits: KvLimits {
                quota_bytes: quota,
                ..KvLimits::default()
            },
        }),
        ..Grants::default()
    }
}

#[tokio::test]
async fn kv_round_trips_and_is_denied_without_a_grant() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledKv::open_dir(dir.path()).unwrap());
    let ops = json!([
        { "kv_set": { "key": "a/1", "value": {"n": 1} } },
        { "kv_set": { "key": "a/2", "value": [1, 2] } },
        { "kv_get": "a/1" },
        { "kv_list": "a/" },
        { "kv_delete": "a/2" },
        { "kv_get": "a/2" },
        { "kv_set": { "key": "", "value": 1 } },
        { "kv_set_bytes": { "key": "big", "bytes": 2_000_000 } },
    ]);
    let r = results(&probe(ops.clone(), &kv_grant(&store, "a", 1 << 20), &limits(5_000)).await);
    assert_eq!(r[2]["ok"], json!({"n": 1}));
    assert_eq!(r[3]["ok"], json!(["a/1", "a/2"]));
    assert_eq!(r[4]["ok"], true);
    assert_eq!(r[5]["ok"], Value::Null);
    assert!(err(&r[6]).contains("the key is empty"));
    assert!(err(&r[7]).contains("the limit is 1048576"), "{r:?}");
    // Another tenant sees nothing.
    let r = results(
        &probe(
            json!([{ "kv_get": "a/1" }]),
            &kv_grant(&store, "b", 1 << 20),
            &limits(5_000),
        )
        .await,
    );
    assert_eq!(r[0]["ok"], Value::Null);
    // No grant: every call says how to get one.
    let r = results(
        &probe(
            json!([{ "kv_get": "a/1" }]),
            &Grants::default(),
            &limits(5_000),
        )
        .await,
    );
    assert!(err(&r[0]).contains("declare `kv: tenant` or `kv: task`"));
}

#[tokio::test]
async fn kv_quota_refuses_a_write_and_keeps_the_store_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledKv::open_dir(dir.path()).unwrap());
    let grants = kv_grant(&store, "a", 10_000);
    let r = results(
        &probe(
            json!([
                { "kv_set_bytes": { "key": "one", "bytes": 6_000 } },
                { "kv_set_bytes": { "key": "two", "bytes": 6_000 } },
                { "kv_list": "" },
            ]),
            &grants,
            &limits(5_000),
        )
        .await,
    );
    assert_eq!(r[0]["ok"], Value::Null);
    assert!(
        err(&r[1]).contains("quota of 10000 bytes would be exceeded"),
        "{r:?}"
    );
    assert_eq!(r[2]["ok"], json!(["one"]));
    assert_eq!(store.usage("a").unwrap(), 6_003);
}

#[tokio::test]
async fn config_and_listed_secrets_are_readable_others_not() {
    let grants = Grants {
        config: [("endpoint".to_string(), "http://x".to_string())].into(),
        secrets: [
            ("set".to_string(), Some("v".to_string())),
            ("unset".to_string(), None),
        ]
        .into(),
        ..Grants::default()
    };
    let r = results(
        &probe(
            json!([
                { "config": "endpoint" }, { "config": "missing" },
                { "secret": "set" }, { "secret": "unset" }, { "secret": "other" },
            ]),
            &grants,
            &limits(5_000),
        )
        .await,
    );
    assert_eq!(r[0]["ok"], "http://x");
    assert_eq!(r[1]["ok"], Value::Null);
    assert_eq!(r[2]["ok"], true);
    assert_eq!(r[3]["ok"], false);
    assert!(err(&r[4]).contains("secret `other` is not granted to this step"));
}

// --- a real `ax serve` -------------------------------------------------------

const TOKEN: &str = "caps-test-token";

/// A child `ax serve` with its stderr (the server's log) kept in a file.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(data_dir: &Path, config: Option<&Path>, log: &Path) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("AX_ADMIN_TOKEN", TOKEN)
            // Everything ax logs, to check no secret is among it.
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap());
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        let mut child = cmd.spawn().expect("starting ax serve");
        let url =
            crate::crash::listening_url(&mut child).expect("ax serve exited before listening");
        Self { child, url }
    }

    /// `kill -9`: whatever was acknowledged must be on disk already.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait: the graceful shutdown path.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// One API call as the admin acting on `tenant`; (status, body text).
    fn call(&self, method: &str, path: &str, tenant: &str, body: Option<&[u8]>) -> (u16, String) {
        self.call_as(method, path, tenant, body, "application/json")
    }

    fn call_as(
        &self,
        method: &str,
        path: &str,
        tenant: &str,
        body: Option<&[u8]>,
        content_type: &str,
    ) -> (u16, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(120)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {TOKEN}");
        let response = match (method, body) {
            ("GET", _) => agent
                .get(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .call(),
            ("DELETE", _) => agent
                .delete(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .call(),
            ("PUT", Some(b)) => agent
                .put(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .send(b),
            (_, Some(b)) => agent
                .post(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .header("Content-Type", content_type)
                .send(b),
            (_, None) => agent
                .post(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .send_empty(),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        (
            status,
            response.body_mut().read_to_string().unwrap_or_default(),
        )
    }

    /// Creates `tenant` (as the admin) with an HTTP ceiling.
    fn tenant(&self, tenant: &str, allow_http: &[&str]) {
        let body = json!({ "name": tenant, "allow_http": allow_http }).to_string();
        let (status, body) = self.call("POST", "/v1/tenants", "default", Some(body.as_bytes()));
        assert_eq!(status, 201, "{body}");
    }

    fn upload(&self, tenant: &str, plugin: &str) {
        let (status, body) = self.call_as(
            "POST",
            &format!("/v1/plugins?name={plugin}&version=1.0.0"),
            tenant,
            Some(&plugin_bytes(plugin)),
            "application/wasm",
        );
        assert!(status == 201 || status == 200, "{status} {body}");
    }

    fn put_task(&self, tenant: &str, name: &str, yaml: &str) -> (u16, String) {
        self.call(
            "PUT",
            &format!("/v1/tasks/{name}"),
            tenant,
            Some(yaml.as_bytes()),
        )
    }

    /// Triggers `task` and waits for its run to end; returns the run.
    fn run(&self, tenant: &str, task: &str, input: Value) -> Value {
        let (status, body) = self.call(
            "POST",
            &format!("/v1/tasks/{task}/runs"),
            tenant,
            Some(json!({ "input": input }).to_string().as_bytes()),
        );
        assert_eq!(status, 201, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, body) = self.call("GET", &format!("/v1/runs/{id}"), tenant, None);
            let run: Value = serde_json::from_str(&body).unwrap();
            if ["succeeded", "failed", "cancelled"].contains(&run["status"].as_str().unwrap_or(""))
            {
                return run;
            }
            assert!(Instant::now() < deadline, "run {id} did not finish: {run}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn output(run: &Value) -> &Value {
    &run["steps"][0]["output"]
}

#[test]
fn kv_is_isolated_across_tenants_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ax.log");
    let data = dir.path().join("data");
    let task = "name: cursor\nplugin: cursor@1.0.0\nkv: tenant\ninput: { batch: 10 }\n";
    let server = Server::start(&data, None, &log);
    for tenant in ["a", "b"] {
        server.tenant(tenant, &[]);
        server.upload(tenant, "cursor");
        let (status, body) = server.put_task(tenant, "cursor", task);
        assert_eq!(status, 201, "{body}");
    }
    // Tenant a runs twice, b once: each sees only its own cursor.
    assert_eq!(
        output(&server.run("a", "cursor", json!({}))),
        &json!({"from": 0, "to": 10, "runs": 1})
    );
    assert_eq!(
        output(&server.run("a", "cursor", json!({}))),
        &json!({"from": 10, "to": 20, "runs": 2})
    );
    assert_eq!(
        output(&server.run("b", "cursor", json!({}))),
        &json!({"from": 0, "to": 10, "runs": 1})
    );
    // A graceful restart. (After `kill -9` a run whose end was not yet on
    // disk runs again — at-least-once — and moves its cursor twice.)
    server.stop();

    let server = Server::start(&data, None, &log);
    assert_eq!(
        output(&server.run("a", "cursor", json!({}))),
        &json!({"from": 20, "to": 30, "runs": 3})
    );
    let run = server.run("b", "cursor", json!({}));
    assert_eq!(
        output(&run),
        &json!({"from": 10, "to": 20, "runs": 2}),
        "{run}"
    );
    // Task scope: a second task of tenant a with `kv: task` starts afresh.
    server.upload("a", "cursor");
    let (status, body) = server.put_task(
        "a",
        "cursor2",
        "name: cursor2\nplugin: cursor@1.0.0\nkv: task\ninput: { batch: 5 }\n",
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        output(&server.run("a", "cursor2", json!({}))),
        &json!({"from": 0, "to": 5, "runs": 1})
    );
    server.kill();
}

#[test]
fn the_kv_quota_of_the_server_config_or_the_tenant_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ax.yaml");
    std::fs::write(&config, "kv_quota_kb: 8\n").unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        Some(&config),
        &dir.path().join("ax.log"),
    );
    server.tenant("a", &[]);
    server.upload("a", "probe");
    let task = json!({
        "name": "fill", "plugin": "probe@1.0.0", "kv": "tenant",
        "input": { "ops": [
            { "kv_set_bytes": { "key": "one", "bytes": 5000 } },
            { "kv_set_bytes": { "key": "two", "bytes": 5000 } },
        ]},
    });
    let (status, body) = server.put_task("a", "fill", &task.to_string());
    assert_eq!(status, 201, "{body}");
    let run = server.run("a", "fill", json!({}));
    let r = &output(&run)["results"];
    assert_eq!(r[0]["ok"], Value::Null, "{run}");
    assert!(
        r[1]["err"]
            .as_str()
            .unwrap()
            .contains("quota of 8192 bytes would be exceeded"),
        "{run}"
    );
    // A tenant's own `kv_bytes` quota overrides the server's default.
    let body = json!({ "name": "big", "quota": { "kv_bytes": 20_000 } }).to_string();
    let (status, body) = server.call("POST", "/v1/tenants", "default", Some(body.as_bytes()));
    assert_eq!(status, 201, "{body}");
    server.upload("big", "probe");
    let (status, body) = server.put_task("big", "fill", &task.to_string());
    assert_eq!(status, 201, "{body}");
    let run = server.run("big", "fill", json!({}));
    let r = &output(&run)["results"];
    assert_eq!(
        (&r[0]["ok"], &r[1]["ok"]),
        (&Value::Null, &Value::Null),
        "{run}"
    );
    server.kill();
}

#[test]
fn steps_must_declare_capabilities_valid_on_save() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None, &dir.path().join("ax.log"));
    server.tenant("a", &["https://*.example.com", "http://127.0.0.1:*"]);
    server.upload("a", "probe");
    for (yaml, path, message) in [
        (
            "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://api.example.com/path\"]\n",
            "allow_http[0]",
            "remove `/path`",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nkv: forever\n",
            "kv",
            "expected `tenant` or `task`",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://api.example.com\", \"https://example.com\"]\n",
            "steps[0].allow_http",
            "`https://example.com` is outside the tenant's allow-list: the tenant allows only `https://*.example.com`, `http://127.0.0.1:*`",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://127.0.0.1:8080\"]\n",
            "steps[0].allow_http",
            "`https://127.0.0.1:8080` is outside",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nsecrets: [\"a b\"]\n",
            "secrets[0]",
            "not a valid secret name",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nconfig: { a: [1] }\n",
            "config.a",
            "text, a number or a boolean",
        ),
    ] {
        let (status, body) = server.put_task("a", "t", yaml);
        assert_eq!(status, 422, "{yaml}: {body}");
        assert!(
            body.contains(path) && body.contains(message),
            "{yaml}: {body}"
        );
    }
    // Narrower than the ceiling: accepted.
    let (status, body) = server.put_task(
        "a",
        "t",
        "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://api.eu.example.com\", \"http://127.0.0.1:8080\"]\n",
    );
    assert_eq!(status, 201, "{body}");
    // The admin's patterns follow the same grammar.
    let bad =
        json!({ "name": "c", "allow_http": ["https://ok.example.com", "ftp://x"] }).to_string();
    let (status, body) = server.call("POST", "/v1/tenants", "default", Some(bad.as_bytes()));
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("allow_http[1]") && body.contains("`http` or `https`"),
        "{body}"
    );
    server.kill();
}

#[test]
fn a_secret_never_appears_in_an_answer_a_log_line_or_an_event() {
    const SECRET: &str = "s3cr3t-ZX81-c0ffee";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ax.log");
    let server = Server::start(&dir.path().join("data"), None, &log);
    server.tenant("a", &[]);
    server.tenant("b", &[]);
    server.upload("a", "probe");

    let (status, body) = server.call("PUT", "/v1/secrets/api_token", "a", Some(SECRET.as_bytes()));
    assert_eq!(status, 201, "{body}");
    let (status, body) = server.call("PUT", "/v1/secrets/api_token", "a", Some(SECRET.as_bytes()));
    assert_eq!(status, 200, "{body}");
    let (_, listed) = server.call("GET", "/v1/secrets", "a", None);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["secrets"][0]["name"], "api_token", "{listed}");
    for (path, body, status) in [
        ("/v1/secrets/bad%20name", "x", 422),
        ("/v1/secrets/empty", "", 400),
    ] {
        let (got, answer) = server.call("PUT", path, "a", Some(body.as_bytes()));
        assert_eq!(got, status, "{path}: {answer}");
    }
    let (_, other) = server.call("GET", "/v1/secrets", "b", None);
    assert_eq!(other, r#"{"secrets":[]}"#, "tenant b sees no secret of a");

    let leak = |fail: bool| {
        format!(
            "name: leak-{fail}\nplugin: probe@1.0.0\nsecrets: [api_token]\nretry: {{ max_attempts: 1 }}\ninput: {{ ops: [{{ leak: {{ name: api_token, fail: {fail} }} }}] }}\n"
        )
    };
    let mut seen = Vec::new();
    for fail in [false, true] {
        let (status, body) = server.put_task("a", &format!("leak-{fail}"), &leak(fail));
        assert_eq!(status, 201, "{body}");
        let run = server.run("a", &format!("leak-{fail}"), json!({}));
        let id = run["id"].as_str().unwrap().to_string();
        assert_eq!(
            run["status"],
            if fail { "failed" } else { "succeeded" },
            "{run}"
        );
        for path in [
            format!("/v1/runs/{id}"),
            format!("/v1/runs/{id}/logs"),
            format!("/v1/runs/{id}/events"),
        ] {
            seen.push(server.call("GET", &path, "a", None).1);
        }
    }
    for path in ["/v1/runs", "/v1/tasks", "/v1/secrets", "/v1/dead-letters"] {
        seen.push(server.call("GET", path, "a", None).1);
    }
    let all = seen.join("\n");
    assert!(!all.contains(SECRET), "the secret leaked into an answer");
    // The plugin did print it: every place shows the redaction instead.
    for place in [
        "stdout: the secret is [redacted]",
        "stderr: the secret is [redacted]",
        "log: [redacted]",
        "progress [redacted]",
        "failing with [redacted]",
    ] {
        assert!(all.contains(place), "`{place}` missing from the answers");
    }
    assert!(all.contains(r#""value":"[redacted]""#), "output redacted");

    // Deleting it: gone from the list, and a step listing it reads nothing.
    let (status, _) = server.call("DELETE", "/v1/secrets/api_token", "a", None);
    assert_eq!(status, 204);
    let (status, _) = server.call("DELETE", "/v1/secrets/api_token", "a", None);
    assert_eq!(status, 404);
    server.kill();
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        log_text.contains("secret set"),
        "the server log was captured"
    );
    assert!(
        !log_text.contains(SECRET),
        "the secret leaked into the server log"
    );
}

// --- `ax exec` with grants ---------------------------------------------------

fn ax_exec(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("exec")
        .args(args)
        .output()
        .expect("running ax exec");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn ax_exec_takes_the_same_grants_as_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let kv = dir.path().join("kv");
    let kv = kv.to_str().unwrap();
    let cursor = crate::common::plugin_path("cursor");
    let cursor = cursor.to_str().unwrap();
    // A local KV directory persists between invocations.
    for expected in [r#""from":0"#, r#""from":5"#] {
        let (ok, out) = ax_exec(&[cursor, "--kv-dir", kv, "--input", r#"{"batch": 5}"#]);
        assert!(ok && out.contains(expected), "{out}");
    }
    // Without --kv-dir: no KV, and the error says how to get one.
    let (ok, out) = ax_exec(&[cursor, "--input", "{}"]);
    assert!(!ok && out.contains("declare `kv: tenant`"), "{out}");
    // Secrets and config; the secret is redacted from everything printed.
    let probe = crate::common::plugin_path("probe");
    let input =
        json!({ "ops": [{ "leak": { "name": "tok", "fail": false } }, { "config": "mode" }] });
    let (ok, out) = ax_exec(&[
        probe.to_str().unwrap(),
        "--secret",
        "tok=hunter2-zz",
        "--config",
        "mode=fast",
        "--input",
        &input.to_string(),
    ]);
    assert!(ok, "{out}");
    assert!(
        !out.contains("hunter2-zz") && out.contains("[redacted]"),
        "{out}"
    );
    assert!(out.contains(r#"{"ok":"fast"}"#), "{out}");
    // A bad pattern is refused before anything runs.
    let (ok, out) = ax_exec(&[probe.to_str().unwrap(), "--allow-http", "ftp://x"]);
    assert!(
        !ok && out.contains("the scheme must be `http` or `https`"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ax_exec_allows_http_to_what_it_is_told() {
    let up = upstream().await;
    let probe = crate::common::plugin_path("probe");
    let input = json!({ "ops": [{ "get": up.url("/ok") }] }).to_string();
    let pattern = up.pattern();
    let run = |allow: Option<String>| {
        let (probe, input) = (probe.clone(), input.clone());
        tokio::task::spawn_blocking(move || {
            let mut args = vec![probe.to_str().unwrap().to_string(), "--input".into(), input];
            if let Some(p) = allow {
                args.extend(["--allow-http".into(), p]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ax_exec(&args)
        })
    };
    let (ok, out) = run(Some(pattern)).await.unwrap();
    assert!(ok && out.contains(r#""status":200"#), "{out}");
    let (ok, out) = run(None).await.unwrap();
    assert!(ok && out.contains("denied"), "{out}");
    assert_eq!(up.hits(), 1);
}
