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
