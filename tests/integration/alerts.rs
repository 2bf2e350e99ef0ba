//! Webhook alerts end to end: a real server, real plugins, and a real HTTP
//! receiver on a loopback port (one route fails twice before accepting).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::Value;

use crate::live::Live;

/// What the receiver saw: per route, the bodies it accepted and how many
/// requests it got in all.
#[derive(Default)]
struct Seen {
    accepted: BTreeMap<String, Vec<Value>>,
    requests: BTreeMap<String, usize>,
}

type Shared = Arc<Mutex<Seen>>;

async fn receive(State(seen): State<Shared>, Path(route): Path<String>, body: Bytes) -> StatusCode {
    let mut seen = seen.lock().unwrap();
    let n = {
        let n = seen.requests.entry(route.clone()).or_default();
        *n += 1;
        *n
    };
    // `/flaky` fails its first two requests.
    if route == "flaky" && n <= 2 {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let body: Value = serde_json::from_slice(&body).expect("a JSON alert");
    seen.accepted.entry(route).or_default().push(body);
    StatusCode::OK
}

async fn receiver() -> (String, Shared) {
    let seen = Shared::default();
    let app = Router::new()
        .route("/{route}", post(receive))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

async fn wait_for(seen: &Shared, route: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = seen
            .lock()
            .unwrap()
            .accepted
            .get(route)
            .cloned()
            .unwrap_or_default();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{route}: {} of {n} alerts",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn fast_retries(c: &mut ax::config::Config) {
    c.alerts.initial_backoff = Duration::from_millis(50);
    c.alerts.max_backoff = Duration::from_millis(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_dead_letters_are_posted_and_retried() {
    let (url, seen) = receiver().await;
    let tenant_hook = format!("{url}/tenant");
    let live = Live::start(|c| {
        fast_retries(c);
        c.alerts.tenants.insert(
            "default".into(),
            ax::alerts::AlertSpec {
                webhook: tenant_hook.clone(),
                on: vec![ax::alerts::AlertOn::DeadLetter],
                late_after: None,
            },
        );
    })
    .await;
    live.upload("fail").await;
    live.apply(
        "broken",
        &format!(
            "name: broken\nplugin: fail@1.0.0\ninput: {{ kind: fatal, message: boom }}\n\
             alerts: {{ webhook: \"{url}/flaky\", on: [failed] }}\n"
        ),
    )
    .await;
    live.apply(
        "doomed",
        &format!(
            "name: doomed\nplugin: fail@1.0.0\nretry: {{ max_attempts: 2, backoff: [10ms] }}\n\
             alerts: {{ webhook: \"{url}/task\", on: [dead_letter] }}\n"
        ),
    )
    .await;
    let broken = live.trigger("broken").await;
    let doomed = live.trigger("doomed").await;
    live.wait_run(&broken).await;
    live.wait_run(&doomed).await;

    // The failing receiver got it on the third try.
    let flaky = wait_for(&seen, "flaky", 1).await;
    let a = &flaky[0];
    assert_eq!(a["kind"], "run_failed", "{a}");
    assert_eq!(a["run_id"], broken.as_str());
    assert_eq!(
        (a["tenant"].as_str(), a["task"].as_str()),
        (Some("default"), Some("broken"))
    );
    assert_eq!(a["status"], "failed");
    assert!(a["text"].as_str().unwrap().contains("failed"), "{a}");
    assert_eq!(seen.lock().unwrap().requests["flaky"], 3);

    // The dead letter went to the task's webhook and the tenant's.
    for route in ["task", "tenant"] {
        let got = wait_for(&seen, route, 1).await;
        assert_eq!(got.len(), 1, "{route}: {got:?}");
        let a = &got[0];
        assert_eq!(a["kind"], "dead_letter", "{a}");
        assert_eq!(a["run_id"], doomed.as_str());
        assert_eq!(a["step"], "doomed");
        assert!(
            a["dead_letter_id"].as_str().unwrap().starts_with('d'),
            "{a}"
        );
    }
    // Nothing else: `broken` has no dead letter, `doomed` alerts no failures.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests = seen.lock().unwrap().requests.clone();
    assert_eq!(requests.values().sum::<usize>(), 5, "{requests:?}");
    let metrics = live.call("GET", "/metrics", &[], None).await.text;
    for line in [
        "ax_alerts_sent_total 3",
        "ax_alerts_retries_total 2",
        "ax_alerts_failed_total 0",
        "ax_alerts_dropped_total 0",
        "ax_alerts_queued 0",
    ] {
        assert!(
            metrics.contains(&format!("\n{line}\n")),
            "{line} in\n{metrics}"
        );
    }
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_start_is_posted() {
    let (url, seen) = receiver().await;
    // One slot, taken by a slow run: the timed run starts about a second late.
    let live = Live::start(|c| {
        fast_retries(c);
        c.concurrency = Some(1);
        c.reserved_high = Some(0);
    })
    .await;
    live.upload_as("hostile_sleep", "sleepy").await;
    live.upload("echo").await;
    live.apply(
        "slow",
        "name: slow\nplugin: sleepy@1.0.0\nlimits: { timeout: 2s }\n",
    )
    .await;
    let slow = live.trigger("slow").await;
    live.apply(
        "tick",
        &format!(
            "name: tick\ntrigger: {{ delay: 500ms }}\nplugin: echo@1.0.0\n\
             alerts: {{ webhook: \"{url}/late\", on: [late], late_after: 300ms }}\n"
        ),
    )
    .await;
    live.wait_run(&slow).await;
    let got = wait_for(&seen, "late", 1).await;
    let a = &got[0];
    assert_eq!(a["kind"], "late", "{a}");
    assert_eq!(a["task"], "tick");
    assert!(a["late_by_ms"].as_i64().unwrap() > 300, "{a}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_alert_settings_are_refused() {
    let live = Live::start(|_| {}).await;
    live.upload("echo").await;
    let yaml = "name: t\nplugin: echo@1.0.0\nalerts: { webhook: \"ftp://x\" }\n";
    let r = live
        .call(
            "PUT",
            "/v1/tasks/t",
            &[],
            Some(("application/yaml", yaml.into())),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.json()["error"]["details"]["path"], "alerts.webhook");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_record_s_alerts_cover_its_tasks() {
    let (url, seen) = receiver().await;
    let live = Live::start(fast_retries).await;
    let tenant =
        format!(r#"{{"name": "acme", "alerts": {{"webhook": "{url}/acme", "on": ["failed"]}}}}"#);
    let r = live
        .call(
            "POST",
            "/v1/tenants",
            &[],
            Some(("application/json", tenant.into())),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["alerts"]["webhook"], format!("{url}/acme"));
    let as_acme = [("x-ax-tenant", "acme")];
    let wasm = crate::common::plugin_bytes("fail");
    let r = live
        .call(
            "POST",
            "/v1/plugins?name=fail&version=1.0.0",
            &as_acme,
            Some(("application/wasm", wasm)),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let yaml = "name: nightly\nplugin: fail@1.0.0\ninput: { kind: fatal }\n";
    let r = live
        .call(
            "PUT",
            "/v1/tasks/nightly",
            &as_acme,
            Some(("application/yaml", yaml.into())),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = live
        .call(
            "POST",
            "/v1/tasks/nightly/runs",
            &as_acme,
            Some(("application/json", b"{}".to_vec())),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let got = wait_for(&seen, "acme", 1).await;
    assert_eq!(got[0]["kind"], "run_failed");
    assert_eq!(got[0]["tenant"], "acme");
    assert_eq!(got[0]["task"], "nightly");

    // A bad webhook on a tenant is refused with its field.
    let bad = r#"{"alerts": {"webhook": "nope"}}"#;
    let r = live
        .call(
            "PUT",
            "/v1/tenants/acme",
            &[],
            Some(("application/json", bad.into())),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.json()["error"]["details"]["path"], "alerts.webhook");
    live.stop().await;
}
