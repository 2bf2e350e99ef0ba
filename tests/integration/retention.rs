//! Retention against a real server (sled on disk, real plugins): the newest
//! `keep_runs` finished runs stay, older ones go with their events and logs;
//! an active run is never touched and finishes normally after a sweep; a run
//! with an open dead letter stays until the letter is resolved.

use std::time::Duration;

use crate::live::Live;

async fn sweep(live: &Live) -> ax::scheduler::retention::SweepReport {
    let ax = &live.server.as_ref().expect("running").ax;
    ax::scheduler::retention::sweep(
        &ax.store,
        &ax.scheduler,
        &ax.clock,
        &ax::scheduler::retention::RetentionConfig::default(),
    )
    .await
    .expect("a sweep")
}

async fn status_of(live: &Live, path: &str) -> u16 {
    live.call("GET", path, &[], None).await.status
}

/// Waits until the run has an attempt that failed (its step waits to retry).
async fn wait_retry_wait(live: &Live, id: &str) {
    for _ in 0..500 {
        let run = live.get(&format!("/v1/runs/{id}")).await;
        if run["steps"][0]["status"] == "retry_wait" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("run {id} never waited to retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_history_goes_and_running_runs_are_untouched() {
    // The background sweeper stays out of the way: the test sweeps by hand.
    let live = Live::start(|c| c.retention.sweep_every = Duration::from_secs(3600)).await;
    live.upload("fail").await;
    live.apply(
        "flaky",
        "name: flaky\nplugin: fail@1.0.0\ninput: { succeed_on_attempt: 2 }\n\
         retry: { max_attempts: 3, backoff: [1500ms] }\nretention: { keep_runs: 1 }\n",
    )
    .await;
    let r1 = live.trigger("flaky").await;
    let r2 = live.trigger("flaky").await;
    live.wait_run(&r1).await;
    live.wait_run(&r2).await;
    // r3 is active (its first attempt failed, it waits to retry) during the sweep.
    let r3 = live.trigger("flaky").await;
    wait_retry_wait(&live, &r3).await;
    let report = sweep(&live).await;
    assert_eq!(report.deleted, 1, "{report:?}");
    assert_eq!(status_of(&live, &format!("/v1/runs/{r1}")).await, 404);
    assert_eq!(
        status_of(&live, &format!("/v1/runs/{r1}/events")).await,
        404
    );
    assert_eq!(status_of(&live, &format!("/v1/runs/{r1}/logs")).await, 404);
    assert_eq!(status_of(&live, &format!("/v1/runs/{r2}")).await, 200);

    // The active run was not touched: it retries and succeeds, with its whole story.
    let run = live.wait_run(&r3).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["steps"][0]["attempts"].as_array().unwrap().len(), 2);
    let logs = live.get(&format!("/v1/runs/{r3}/logs")).await;
    assert_eq!(
        logs["attempts"].as_array().unwrap().len(),
        1,
        "attempt 1 logged a warning"
    );
    let events = live.get(&format!("/v1/runs/{r3}/events")).await;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["to"] == "retry_wait"),
        "{events}"
    );

    // Now r3 is the newest finished run: r2 goes, r3 stays.
    tokio::time::sleep(Duration::from_millis(300)).await; // r3's final write is behind
    let report = sweep(&live).await;
    assert_eq!(report.deleted, 1, "{report:?}");
    assert_eq!(status_of(&live, &format!("/v1/runs/{r2}")).await, 404);
    assert_eq!(status_of(&live, &format!("/v1/runs/{r3}")).await, 200);
    let listed = live.get("/v1/runs?task=flaky").await;
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![r3.as_str()]);
    assert_eq!(sweep(&live).await.deleted, 0, "nothing left to delete");
    let metrics = live.call("GET", "/metrics", &[], None).await.text;
    assert!(metrics.contains("\nax_runs_deleted_total 2\n"), "{metrics}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_an_open_dead_letter_is_kept_until_resolved() {
    let live = Live::start(|c| c.retention.sweep_every = Duration::from_secs(3600)).await;
    live.upload("fail").await;
    live.apply(
        "doomed",
        "name: doomed\nplugin: fail@1.0.0\nretry: { max_attempts: 2, backoff: [10ms] }\n\
         retention: { keep_runs: 1 }\n",
    )
    .await;
    let d1 = live.trigger("doomed").await;
    live.wait_run(&d1).await;
    let d2 = live.trigger("doomed").await;
    live.wait_run(&d2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = sweep(&live).await;
    assert_eq!(
        (report.deleted, report.kept_for_dead_letters),
        (0, 1),
        "{report:?}"
    );
    assert_eq!(status_of(&live, &format!("/v1/runs/{d1}")).await, 200);

    let letters = live.get("/v1/dead-letters").await;
    let letter = letters["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["run_id"] == d1.as_str())
        .expect("d1's dead letter")["id"]
        .as_str()
        .unwrap()
        .to_string();
    live.send(
        "POST",
        &format!("/v1/dead-letters/{letter}/resolve"),
        "application/json",
        r#"{"resolution": "known bad input"}"#,
    )
    .await;
    let report = sweep(&live).await;
    assert_eq!(report.deleted, 1, "{report:?}");
    assert_eq!(status_of(&live, &format!("/v1/runs/{d1}")).await, 404);
    // The resolved dead letter stays: the audit trail.
    let all = live.get("/v1/dead-letters?open=false").await;
    assert_eq!(all["dead_letters"].as_array().unwrap().len(), 2);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_retention_is_refused_with_its_field() {
    let live = Live::start(|_| {}).await;
    live.upload("echo").await;
    for (body, path) in [
        ("retention: { keep_runs: 0 }", "retention.keep_runs"),
        ("retention: { keep_for: 5ms }", "retention.keep_for"),
        ("retention: { keep: 3 }", "retention"),
        (
            "retention: { idempotency_ttl: 0s }",
            "retention.idempotency_ttl",
        ),
        (
            "retention: { idempotency_ttl: 400d }",
            "retention.idempotency_ttl",
        ),
    ] {
        let yaml = format!("name: t\nplugin: echo@1.0.0\n{body}\n");
        let r = live
            .call(
                "PUT",
                "/v1/tasks/t",
                &[],
                Some(("application/yaml", yaml.into_bytes())),
            )
            .await;
        assert_eq!(r.status, 422, "{body}: {}", r.text);
        assert_eq!(r.json()["error"]["details"]["path"], path, "{}", r.text);
    }
    assert_eq!(
        status_of(&live, "/v1/tasks/t").await,
        404,
        "nothing was stored"
    );
    live.stop().await;
}

/// An idempotency key outlives its run: after retention deleted the run, a
/// replay of the key answers 410 `run_deleted` with the run's id and creates
/// nothing; once the key's `idempotency_ttl` has passed, a sweep frees it and
/// the key starts a new run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_outlive_their_runs_until_their_ttl() {
    let live = Live::start(|c| c.retention.sweep_every = Duration::from_secs(3600)).await;
    live.upload("echo").await;
    live.apply(
        "keyed",
        "name: keyed\nplugin: echo@1.0.0\nretention: { keep_runs: 1, idempotency_ttl: 4s }\n",
    )
    .await;
    let trigger = |key: &'static str| {
        let live = &live;
        async move {
            live.call(
                "POST",
                "/v1/tasks/keyed/runs",
                &[],
                Some((
                    "application/json",
                    format!(r#"{{"idempotency_key": "{key}"}}"#).into_bytes(),
                )),
            )
            .await
        }
    };
    let first = trigger("k1").await;
    assert_eq!(first.status, 201, "{}", first.text);
    let k1_run = first.json()["id"].as_str().unwrap().to_string();
    live.wait_run(&k1_run).await;
    let second = trigger("k2").await;
    assert_eq!(second.status, 201, "{}", second.text);
    // Both keys were made by now (each expires 4 s after its run was
    // made): the later one, k2, sets when the sweep below may forget both.
    let created = std::time::Instant::now();
    let k2_run = second.json()["id"].as_str().unwrap().to_string();
    live.wait_run(&k2_run).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // the final write is behind
    let report = sweep(&live).await;
    assert_eq!((report.deleted, report.keys_expired), (1, 0), "{report:?}");
    assert_eq!(status_of(&live, &format!("/v1/runs/{k1_run}")).await, 404);

    // The key is remembered: 410 with the deleted run's id, no new run.
    let replay = trigger("k1").await;
    assert_eq!(replay.status, 410, "{}", replay.text);
    let error = &replay.json()["error"];
    assert_eq!(error["code"], "run_deleted", "{}", replay.text);
    assert_eq!(
        error["details"]["run_id"],
        k1_run.as_str(),
        "{}",
        replay.text
    );
    // A key whose run is kept answers with it, as before.
    let replay = trigger("k2").await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.json()["id"], k2_run.as_str());
    let listed = live.get("/v1/runs?task=keyed").await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");

    // Past the TTL, a sweep forgets both keys; k1 starts a new run.
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(created.elapsed())).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = sweep(&live).await;
    assert_eq!(report.keys_expired, 2, "{report:?}");
    let again = trigger("k1").await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_ne!(again.json()["id"], k1_run.as_str());
    live.stop().await;
}
