//! Outbound HTTP from the `probe` plugin to a loopback upstream: allowed
//! and denied hosts, ports and schemes, no network without a grant,
//! loopback names, redirects checked hop by hop, timeouts, the response
//! and request caps, the notify webhook; plugins without wasi:http.

use std::time::{Duration, Instant};

use ax::capability::{Grants, HttpLimits};
use ax::model::Outcome;
use serde_json::json;

use super::{allow, err, limits, log_text, probe, results, upstream};
use crate::common::{RUNTIME, context, load};

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
