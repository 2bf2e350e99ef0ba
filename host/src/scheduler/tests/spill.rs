//! Spilled inputs (`actor/spill.rs`): a queued run's large input is left in
//! the store while it waits; it is read back whole when the run starts or
//! is cancelled, and the stored input is never lost.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_spilled_run_starts_with_its_whole_input_and_a_cancelled_one_keeps_it() {
    // One attempt's fuel per window: after the first run the tenant is
    // held, and its next runs wait queued for the next window.
    let quota = crate::tenant::Quota {
        fuel_per_window: Some(100),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        "a",
        "name: job\nplugin: ok@1.0.0\ninput: { x: \"${input.x}\" }\n",
    )
    .await;
    let first = h
        .trigger_for("a", "job", serde_json::json!({ "x": 1 }))
        .await;
    assert_eq!(
        h.wait_terminal(&first.id).await.status,
        RunStatus::Succeeded
    );

    let big = "b".repeat(64 << 10);
    let input = serde_json::json!({ "x": big });
    let kept = h.trigger_for("a", "job", input.clone()).await;
    let cancelled = h.trigger_for("a", "job", input.clone()).await;
    let small = h
        .trigger_for("a", "job", serde_json::json!({ "x": 2 }))
        .await;
    // The write-behind stores them; then only the large inputs are spilled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        h.store.get_run(&kept.id).unwrap().unwrap().status,
        RunStatus::Queued
    );
    assert_eq!(h.scheduler.snapshot().await.unwrap().spilled_runs, 2);

    // Cancelled while spilled: the answer and the store have the input.
    let answer = h
        .scheduler
        .cancel(&run_id(&cancelled), "test")
        .await
        .unwrap();
    assert_eq!(answer.status, RunStatus::Cancelled);
    assert_eq!(answer.input, input);
    let stored = h.wait_terminal(&cancelled.id).await;
    assert_eq!(stored.status, RunStatus::Cancelled);
    assert_eq!(stored.input, input);
    assert_eq!(h.scheduler.snapshot().await.unwrap().spilled_runs, 1);

    // The next window: the spilled run starts with its whole input.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let run = h.wait_terminal(&kept.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.input, input);
    assert_eq!(
        run.steps[0].output,
        Some(serde_json::json!({ "echo": { "x": big } }))
    );
    // The small one was never spilled (it waits for the window after).
    assert_eq!(
        h.store.get_run(&small.id).unwrap().unwrap().status,
        RunStatus::Queued
    );
    assert_eq!(h.scheduler.snapshot().await.unwrap().spilled_runs, 0);
    h.shutdown.cancel();
}
