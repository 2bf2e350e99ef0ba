//! Failed attempts: retries follow the backoff, fatal errors are not retried,
//! exhausted steps become dead letters, and a requeued dead letter runs again.

use super::*;

#[tokio::test(start_paused = true)]
async fn retries_follow_the_backoff_then_dead_letter() {
    let h = Harness::start().await;
    h.put_task(
        "name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 3, backoff: [10s, 30s] }\n",
    )
    .await;
    let run = h.trigger("flaky", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let step = &run.steps[0];
    assert_eq!(step.status, StepStatus::Dead);
    let starts: Vec<_> = step
        .attempts
        .iter()
        .map(|a| a.started_at - t0().timestamp_millis())
        .collect();
    assert_eq!(starts, [0, 10_000, 40_000]);
    let dead = h.store.list_dead_letters("t", true).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 3);
    assert_eq!(dead[0].error.as_deref(), Some("busy"));
}

#[tokio::test(start_paused = true)]
async fn a_fatal_error_is_not_retried() {
    let h = Harness::start().await;
    h.put_task("name: bad\nplugin: fatal@1.0.0\nretry: { max_attempts: 3, backoff: [1s] }\n")
        .await;
    let run = h.trigger("bad", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.steps[0].status, StepStatus::Failed);
    assert_eq!(run.steps[0].attempts.len(), 1);
    assert!(h.store.list_dead_letters("t", true).unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_requeued_dead_letter_runs_again() {
    let h = Harness::start().await;
    h.put_task("name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 2, backoff: [1s] }\n")
        .await;
    let run = h.trigger("flaky", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    let dead = h.store.list_dead_letters("t", true).unwrap().remove(0);
    h.scheduler.requeue(&dead.id, "test").await.unwrap();
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(
        run.steps[0].attempts.len(),
        4,
        "two more attempts after the requeue"
    );
    let resolved = h.store.get_dead_letter(&dead.id).unwrap().unwrap();
    assert!(resolved.resolution.unwrap().contains("requeued"));
}

/// Plugin `flip@1.0.0` whose digest says how it ends (`fail`, `ok`: see the
/// fake runner).
fn flip(digest: &str) -> PluginRecord {
    PluginRecord {
        tenant: "t".into(),
        name: "flip".into(),
        version: "1.0.0".into(),
        digest: digest.into(),
        size: 1,
        created_at: 0,
        status: crate::model::PluginStatus::Ready,
        error: None,
    }
}

/// A run of task `f` whose only step (`flip`, failing) died, and its dead
/// letter.
async fn dead_flip() -> (Harness, RunRecord, crate::model::DeadLetter) {
    let h = Harness::start().await;
    h.store.put_plugin(&flip("fail")).unwrap();
    h.put_task("name: f\nplugin: flip@1.0.0\nretry: { max_attempts: 2, backoff: [1s] }\n")
        .await;
    let run = h.trigger("f", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    let dead = h.store.list_dead_letters("t", true).unwrap().remove(0);
    (h, run, dead)
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_succeeds_after_a_restart_still_resolves_the_dead_letter() {
    // The retry's round is read from the stored run, not from memory: a
    // restart between the retry and its success still settles the letter.
    let (h, run, dead) = dead_flip().await;
    h.store.put_plugin(&flip("block")).unwrap();
    h.scheduler.plugin_deleted("t", "flip", "1.0.0");
    h.scheduler.retry(&run_id(&run), "test").await.unwrap();
    h.poll(&run.id, Patience::Paused, |r| {
        r.status == RunStatus::Running
    })
    .await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let store = h.store.clone();
    drop(h);
    store.put_plugin(&flip("ok")).unwrap();
    let h = restart_at(store, t0() + chrono::Duration::seconds(60)).await;
    assert_eq!(h.wait_terminal(&run.id).await.status, RunStatus::Succeeded);
    let resolved = h.store.get_dead_letter(&dead.id).unwrap().unwrap();
    assert_eq!(
        resolved.resolution.as_deref(),
        Some("retried: the run succeeded")
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_of_a_run_retried_to_success_is_not_requeued() {
    // Found by the simulator (seed 46 before the fix): the run was retried,
    // its dead step succeeded, then the stale dead letter was requeued and
    // ran the succeeded step again.
    let (h, run, dead) = dead_flip().await;
    h.store.put_plugin(&flip("ok")).unwrap();
    // The actor keeps plugin records it has read; make it read this one again.
    h.scheduler.plugin_deleted("t", "flip", "1.0.0");
    h.scheduler.retry(&run_id(&run), "test").await.unwrap();
    let done = h.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded);
    let err = h.scheduler.requeue(&dead.id, "test").await.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = h.store.get_run(&run.id).unwrap().unwrap();
    assert_eq!(after.status, RunStatus::Succeeded);
    assert_eq!(
        after.steps[0].attempts.len(),
        3,
        "no attempt after the success"
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_retried_to_success_resolves_its_dead_letter() {
    // `ax run retry` on a run whose step died: once the retry succeeds the
    // letter is settled, so `ax status` and `ax dead-letters` stop counting it.
    let (h, run, dead) = dead_flip().await;

    // A retry that fails again leaves it open.
    h.scheduler.retry(&run_id(&run), "test").await.unwrap();
    assert_eq!(h.wait_terminal(&run.id).await.status, RunStatus::Failed);
    let still = h.store.get_dead_letter(&dead.id).unwrap().unwrap();
    assert_eq!(still.resolution, None);

    h.store.put_plugin(&flip("ok")).unwrap();
    h.scheduler.plugin_deleted("t", "flip", "1.0.0");
    h.scheduler.retry(&run_id(&run), "test").await.unwrap();
    assert_eq!(h.wait_terminal(&run.id).await.status, RunStatus::Succeeded);
    let resolved = h.store.get_dead_letter(&dead.id).unwrap().unwrap();
    assert_eq!(
        resolved.resolution.as_deref(),
        Some("retried: the run succeeded")
    );
    assert!(resolved.resolved_at.is_some());
    let open: Vec<_> = h
        .store
        .list_dead_letters("t", true)
        .unwrap()
        .into_iter()
        .map(|d| d.run_id)
        .collect();
    assert!(!open.contains(&run.id.to_string()), "{open:?}");
}
