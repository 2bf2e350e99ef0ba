//! Webhook alerts end to end: a real server, real plugins, and a real HTTP
//! receiver on a loopback port (one route fails twice before accepting, one
//! redirects). A task's webhook needs its tenant's `allow_http` ceiling, and
//! loopback only ever through a literal address the admin granted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
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

/// Where `/moved` redirects to (set by the test).
static MOVED_TO: Mutex<String> = Mutex::new(String::new());

async fn receive(State(seen): State<Shared>, Path(route): Path<String>, body: Bytes) -> Response {
    let mut seen = seen.lock().unwrap();
    let n = {
        let n = seen.requests.entry(route.clone()).or_default();
        *n += 1;
        *n
    };
    // `/flaky` fails its first two requests.
    if route == "flaky" && n <= 2 {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    // `/moved` sends the alert elsewhere.
    if route == "moved" {
        let to = MOVED_TO.lock().unwrap().clone();
        return (StatusCode::FOUND, [("location", to)]).into_response();
    }
    let body: Value = serde_json::from_slice(&body).expect("a JSON alert");
    seen.accepted.entry(route).or_default().push(body);
    StatusCode::OK.into_response()
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

/// The admin sets `tenant`'s outbound HTTP ceiling.
async fn allow_http(live: &Live, tenant: &str, patterns: &[&str]) {
    let body = serde_json::json!({ "allow_http": patterns }).to_string();
    live.send(
        "PUT",
        &format!("/v1/tenants/{tenant}"),
        "application/json",
        &body,
    )
    .await;
}

/// One metric's value in a scrape (admin token).
async fn metric(live: &Live, name: &str) -> f64 {
    let text = live.call("GET", "/metrics", &[], None).await.text;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in\n{text}"))
        .parse()
        .unwrap()
}

/// Waits until `name` reaches `want` (the worker delivers off the request path).
async fn wait_metric(live: &Live, name: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = metric(live, name).await;
        if got >= want {
            assert_eq!(got, want, "{name}");
            return;
        }
        assert!(Instant::now() < deadline, "{name}: {got}, want {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A status and body for `GET path` with `token` (or none), no other header.
async fn get_as(live: &Live, path: &str, token: Option<String>) -> (u16, String) {
    let url = format!("{}{path}", live.base);
    tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build(),
        );
        let mut request = agent.get(&url);
        if let Some(t) = token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        let mut r = request.call().expect("an answer");
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_dead_letters_are_posted_and_retried() {
    let (url, seen) = receiver().await;
    let tenant_hook = format!("{url}/tenant");
    let live = Live::start(|c| {
        fast_retries(c);
        c.alerts.tenants.insert(
            "default".into(),
            ax::scheduler::alerts::AlertSpec {
                webhook: tenant_hook.clone(),
                on: vec![ax::scheduler::alerts::AlertOn::DeadLetter],
                late_after: None,
            },
        );
    })
    .await;
    // The task webhooks go to a loopback receiver: the admin grants its address.
    allow_http(&live, "default", &[&url]).await;
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
    allow_http(&live, "default", &[&url]).await;
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

    // A bad webhook on a tenant is refused with its field, a trailing dot
    // included (the admin's own address grants itself, but not so spelled).
    let dotted = format!(
        r#"{{"alerts": {{"webhook": "{}"}}}}"#,
        url.replacen("127.0.0.1", "127.0.0.1.", 1)
    );
    for bad in [r#"{"alerts": {"webhook": "nope"}}"#.to_string(), dotted] {
        let r = live
            .call(
                "PUT",
                "/v1/tenants/acme",
                &[],
                Some(("application/json", bad.clone().into())),
            )
            .await;
        assert_eq!(r.status, 422, "{bad}: {}", r.text);
        assert_eq!(r.json()["error"]["details"]["path"], "alerts.webhook");
    }
    live.stop().await;
}

/// PUTs a task whose alerts go to `webhook`, as the admin acting on `tenant`.
async fn put_alerting_task(live: &Live, tenant: &str, webhook: &str) -> crate::live::Reply {
    let yaml = format!(
        "name: t\nplugin: fail@1.0.0\ninput: {{ kind: fatal }}\nalerts: {{ webhook: \"{webhook}\", on: [failed] }}\n"
    );
    live.call(
        "PUT",
        "/v1/tasks/t",
        &[("x-ax-tenant", tenant)],
        Some(("application/yaml", yaml.into())),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_the_tenant_may_not_reach_is_refused_on_save() {
    let (url, seen) = receiver().await;
    let port = url.rsplit(':').next().unwrap().to_string();
    let live = Live::start(|_| {}).await;
    live.send(
        "POST",
        "/v1/tenants",
        "application/json",
        r#"{"name": "acme", "allow_http": []}"#,
    )
    .await;
    let wasm = crate::common::plugin_bytes("fail");
    let r = live
        .call(
            "POST",
            "/v1/plugins?name=fail&version=1.0.0",
            &[("x-ax-tenant", "acme")],
            Some(("application/wasm", wasm)),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);

    // No grant: loopback by any spelling is outside the ceiling.
    for host in ["127.0.0.1", "[::1]", "127.0.0.2", "localhost"] {
        let hook = format!("http://{host}:{port}/t");
        let r = put_alerting_task(&live, "acme", &hook).await;
        assert_eq!(r.status, 422, "{hook}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["details"]["path"], "alerts.webhook", "{hook}: {e}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains("outside the tenant's allow-list")
                && message.contains("allows no outbound HTTP"),
            "{hook}: {message}"
        );
    }

    // A grant of the name does not reach loopback: names never do.
    allow_http(&live, "acme", &[&format!("http://localhost:{port}")]).await;
    let r = put_alerting_task(&live, "acme", &format!("http://localhost:{port}/t")).await;
    assert_eq!(r.status, 422, "{}", r.text);
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("never reached through a name"),
        "{message}"
    );
    // Nor does a grant of one loopback address open another.
    allow_http(&live, "acme", &[&format!("http://127.0.0.1:{port}")]).await;
    // The granted address with a trailing dot is refused on save, as every
    // delivery would refuse it, and the message says how to write it.
    let r = put_alerting_task(&live, "acme", &format!("http://127.0.0.1.:{port}/t")).await;
    assert_eq!(r.status, 422, "{}", r.text);
    let e = &r.json()["error"];
    assert_eq!(e["details"]["path"], "alerts.webhook", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("trailing dot") && message.contains("write `127.0.0.1`"),
        "{message}"
    );
    let r = put_alerting_task(&live, "acme", &format!("http://127.0.0.2:{port}/t")).await;
    assert_eq!(r.status, 422, "{}", r.text);
    let r = put_alerting_task(
        &live,
        "acme",
        &format!("http://127.0.0.1:{}/t", port.parse::<u16>().unwrap() ^ 1),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.text);
    // Nothing was saved, nothing was sent.
    let r = live
        .call("GET", "/v1/tasks/t", &[("x-ax-tenant", "acme")], None)
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(seen.lock().unwrap().requests.is_empty());
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_webhook_is_posted_but_a_redirect_is_not_followed() {
    let (url, seen) = receiver().await;
    // Where the redirect points: another loopback port, not granted.
    let (elsewhere, elsewhere_seen) = {
        let hits = Arc::new(Mutex::new(0usize));
        let counted = hits.clone();
        let app = Router::new().fallback(any(move || {
            let counted = counted.clone();
            async move {
                *counted.lock().unwrap() += 1;
                StatusCode::OK
            }
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), hits)
    };
    *MOVED_TO.lock().unwrap() = format!("{elsewhere}/stolen");
    let live = Live::start(fast_retries).await;
    allow_http(&live, "default", &[&url]).await;
    live.upload("fail").await;
    for (task, route) in [("ok", "ok"), ("moved", "moved")] {
        live.apply(
            task,
            &format!(
                "name: {task}\nplugin: fail@1.0.0\ninput: {{ kind: fatal }}\n\
                 alerts: {{ webhook: \"{url}/{route}\", on: [failed] }}\n"
            ),
        )
        .await;
    }
    let ok = live.trigger("ok").await;
    let moved = live.trigger("moved").await;
    live.wait_run(&ok).await;
    live.wait_run(&moved).await;

    let got = wait_for(&seen, "ok", 1).await;
    assert_eq!(got[0]["run_id"], ok.as_str());
    // The 302 is a failed delivery, given up at once: one request, no retry,
    // nothing at the other port.
    wait_metric(&live, "ax_alerts_failed_total", 1.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen.lock().unwrap().requests.get("moved"), Some(&1));
    assert_eq!(*elsewhere_seen.lock().unwrap(), 0);
    assert_eq!(metric(&live, "ax_alerts_sent_total").await, 1.0);
    assert_eq!(metric(&live, "ax_alerts_retries_total").await, 0.0);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrowed_ceiling_stops_deliveries_of_saved_tasks() {
    let (url, seen) = receiver().await;
    let live = Live::start(fast_retries).await;
    allow_http(&live, "default", &[&url]).await;
    live.upload("fail").await;
    live.apply(
        "t",
        &format!(
            "name: t\nplugin: fail@1.0.0\ninput: {{ kind: fatal }}\n\
             alerts: {{ webhook: \"{url}/late-ceiling\", on: [failed] }}\n"
        ),
    )
    .await;
    // The admin takes the grant back; the task stays saved.
    allow_http(&live, "default", &[]).await;
    let run = live.trigger("t").await;
    live.wait_run(&run).await;
    wait_metric(&live, "ax_alerts_denied_total", 1.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(seen.lock().unwrap().requests.is_empty());
    assert_eq!(metric(&live, "ax_alerts_sent_total").await, 0.0);
    assert_eq!(metric(&live, "ax_alerts_retries_total").await, 0.0);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_admin_or_the_metrics_token() {
    let live = Live::start(|c| c.metrics_token = Some("scrape-me".into())).await;
    let (status, text) = get_as(&live, "/metrics", None).await;
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("unauthorized"), "{text}");
    assert_eq!(get_as(&live, "/metrics", Some("wrong".into())).await.0, 401);
    let (status, text) = get_as(&live, "/metrics", Some(crate::live::TOKEN.into())).await;
    assert_eq!(status, 200);
    assert!(text.contains("ax_alerts_sent_total"), "{text}");
    let (status, text) = get_as(&live, "/metrics", Some("scrape-me".into())).await;
    assert_eq!(status, 200);
    assert!(text.contains("ax_alerts_denied_total"), "{text}");
    // The metrics token opens nothing else.
    assert_eq!(
        get_as(&live, "/v1/tasks", Some("scrape-me".into())).await.0,
        401
    );
    // A tenant token may not read every tenant's numbers.
    live.send(
        "POST",
        "/v1/tenants",
        "application/json",
        r#"{"name": "acme"}"#,
    )
    .await;
    let t = live
        .send("POST", "/v1/tenants/acme/tokens", "application/json", "{}")
        .await;
    let token = t["token"].as_str().unwrap().to_string();
    assert_eq!(get_as(&live, "/v1/tasks", Some(token.clone())).await.0, 200);
    let (status, text) = get_as(&live, "/metrics", Some(token)).await;
    assert_eq!(status, 403, "{text}");
    // `/healthz` stays open.
    assert_eq!(get_as(&live, "/healthz", None).await.0, 200);
    live.stop().await;
}
