//! `GET /metrics` after known work: a real server (sled on disk, wasmtime,
//! plugins from plugins/), scraped over a real socket; counters are asserted
//! to their exact values.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::live::Live;

/// Parses the text exposition into `name{labels}` → value (comments skipped).
fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').expect("`name value`");
            (key.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

fn value(metrics: &BTreeMap<String, f64>, key: &str) -> f64 {
    *metrics
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key} in\n{metrics:#?}"))
}

async fn scrape(live: &Live) -> (BTreeMap<String, f64>, String) {
    let r = live.call("GET", "/metrics", &[], None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ct = r.headers["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    (parse(&r.text), r.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_match_the_work_done() {
    let live = Live::start(|_| {}).await;
    live.upload("echo").await;
    live.upload("fail").await;
    live.apply("ok", "name: ok\nplugin: echo@1.0.0\n").await;
    live.apply(
        "bad",
        "name: bad\nplugin: fail@1.0.0\nretry: { max_attempts: 2, backoff: [10ms] }\n",
    )
    .await;
    // A timed run: the only one whose fire lateness is measured.
    live.apply(
        "soon",
        "name: soon\ntrigger: { delay: 1s }\nplugin: echo@1.0.0\n",
    )
    .await;

    let mut fuel = 0u64;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(live.trigger("ok").await);
    }
    ids.push(live.trigger("bad").await);
    for id in &ids {
        let run = live.wait_run(id).await;
        for step in run["steps"].as_array().unwrap() {
            for a in step["attempts"].as_array().unwrap() {
                fuel += a["fuel_consumed"].as_u64().unwrap();
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let soon = loop {
        let runs = live.get("/v1/runs?task=soon").await;
        if let Some(id) = runs["runs"][0]["id"].as_str() {
            break live.wait_run(id).await;
        }
        assert!(Instant::now() < deadline, "the delayed task never fired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    fuel += soon["steps"][0]["attempts"][0]["fuel_consumed"]
        .as_u64()
        .unwrap();

    let (m, text) = scrape(&live).await;
    let t = "tenant=\"default\"";
    assert_eq!(
        value(
            &m,
            &format!("ax_attempts_total{{{t},outcome=\"succeeded\"}}")
        ),
        4.0,
        "{text}"
    );
    assert_eq!(
        value(&m, &format!("ax_attempts_total{{{t},outcome=\"failed\"}}")),
        2.0
    );
    assert_eq!(
        value(&m, &format!("ax_attempts_total{{{t},outcome=\"trapped\"}}")),
        0.0
    );
    assert_eq!(
        value(
            &m,
            &format!("ax_runs_finished_total{{{t},status=\"succeeded\"}}")
        ),
        4.0
    );
    assert_eq!(
        value(
            &m,
            &format!("ax_runs_finished_total{{{t},status=\"failed\"}}")
        ),
        1.0
    );
    assert_eq!(
        value(&m, &format!("ax_attempt_duration_seconds_count{{{t}}}")),
        6.0
    );
    assert_eq!(
        value(
            &m,
            &format!("ax_attempt_duration_seconds_bucket{{{t},le=\"+Inf\"}}")
        ),
        6.0
    );
    assert_eq!(
        value(&m, &format!("ax_fuel_consumed_total{{{t}}}")),
        fuel as f64
    );
    assert!(fuel > 0);
    assert_eq!(
        value(&m, &format!("ax_fire_lateness_seconds_count{{{t}}}")),
        1.0
    );
    // The delayed run started well within 5 s of its instant.
    assert_eq!(
        value(
            &m,
            &format!("ax_fire_lateness_seconds_bucket{{{t},le=\"5\"}}")
        ),
        1.0
    );
    assert_eq!(value(&m, "ax_retries_total"), 1.0);
    assert_eq!(value(&m, "ax_dead_letters_total"), 1.0);
    assert_eq!(value(&m, "ax_runs_created_total"), 5.0);
    assert_eq!(value(&m, "ax_attempts_running"), 0.0);
    assert_eq!(value(&m, "ax_active_runs"), 0.0);
    assert!(value(&m, "ax_store_size_bytes") > 0.0);
    // sled in the data directory, and no pool.
    let info: Vec<_> = m
        .keys()
        .filter(|k| k.starts_with("ax_store_info"))
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(
        info[0].starts_with("ax_store_info{kind=\"sled\",location=\""),
        "{info:?}"
    );
    assert!(!m.keys().any(|k| k.starts_with("ax_store_pool")), "{m:#?}");
    let ready = live.call("GET", "/readyz", &[], None).await.json();
    assert_eq!(
        ready["store"],
        serde_json::json!({ "kind": "sled" }),
        "{ready}"
    );
    assert_eq!(
        value(
            &m,
            "ax_http_requests_total{method=\"POST\",route=\"/v1/tasks/{name}/runs\",status=\"201\"}"
        ),
        4.0
    );
    assert_eq!(
        value(
            &m,
            "ax_http_requests_total{method=\"PUT\",route=\"/v1/tasks/{name}\",status=\"201\"}"
        ),
        3.0
    );
    assert!(
        !m.keys().any(|k| k.starts_with("ax_queued_runs{")),
        "no backlog: {text}"
    );

    // A scrape is itself counted (under its route), and a wrong route under `unmatched`.
    let r = live.call("GET", "/v1/nope", &[], None).await;
    assert_eq!(r.status, 404);
    let (m, _) = scrape(&live).await;
    assert_eq!(
        value(
            &m,
            "ax_http_requests_total{method=\"GET\",route=\"/metrics\",status=\"200\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &m,
            "ax_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"}"
        ),
        1.0
    );
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_token_and_show_the_backlog() {
    // No attempt may start (concurrency 1, the slot taken by a slow run), so
    // the runs triggered after it wait in the queue.
    let live = Live::start(|c| {
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
    live.apply("ok", "name: ok\nplugin: echo@1.0.0\n").await;
    let slow = live.trigger("slow").await;
    for _ in 0..3 {
        live.trigger("ok").await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = live.call("GET", "/metrics", &[], None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let text = r.text;
    let m = parse(&text);
    assert_eq!(
        value(&m, "ax_queued_runs{tenant=\"default\"}"),
        3.0,
        "{text}"
    );
    assert_eq!(value(&m, "ax_queued_steps{tenant=\"default\"}"), 3.0);
    assert!(value(&m, "ax_oldest_queued_run_age_seconds{tenant=\"default\"}") >= 0.2);
    assert_eq!(value(&m, "ax_attempts_running"), 1.0);
    live.wait_run(&slow).await;
    live.stop().await;
}
