//! A tenant's budgets: fuel and wall time reserved and charged per window
//! (cancelled attempts included), held until the window resets, kept across a restart.

use super::*;

/// Polls (on the paused clock) until `f` holds for the stored run.
async fn wait_for(h: &Harness, id: &str, f: impl Fn(&RunRecord) -> bool) -> RunRecord {
    h.poll(id, Patience::Paused, f).await
}

/// Fuel is reserved before an attempt and never exceeds the window's
/// budget; an exhausted tenant is held with a reason until the window
/// resets, then its runs go on; usage buckets add up to the fuel used.
#[tokio::test(start_paused = true)]
async fn a_tenant_out_of_fuel_waits_for_the_next_window() {
    let quota = crate::tenant::Quota {
        fuel_per_window: Some(250),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for("a", "name: job\nplugin: ok@1.0.0\n").await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        let run = h.trigger_for("a", "job", serde_json::json!({})).await;
        runs.push(h.wait_terminal(&run.id).await);
    }
    let fuel: Vec<u64> = runs
        .iter()
        .map(|r| r.steps[0].attempts[0].fuel_consumed)
        .collect();
    assert_eq!(fuel, [100, 100, 50], "the third got only what was left");
    assert_eq!(
        runs[2].steps[0].attempts[0].outcome,
        Some(Outcome::FuelExhausted)
    );
    let held = h.trigger_for("a", "job", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        h.store.get_run(&held.id).unwrap().unwrap().status,
        RunStatus::Queued
    );
    let reason = h.scheduler.stats().hold_reason("a").expect("held");
    assert!(reason.contains("250 of 250"), "{reason}");
    // The window is an hour aligned to the epoch; t0 is on the hour.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let run = h.wait_terminal(&held.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(h.scheduler.stats().hold_reason("a"), None);
    let used: u64 = h
        .store
        .usage("a", 0, i64::MAX)
        .unwrap()
        .iter()
        .map(|b| b.fuel)
        .sum();
    assert_eq!(used, 350);
    h.shutdown.cancel();
}

/// After a restart the window's use is recomputed from the usage buckets,
/// so a tenant out of fuel stays held.
#[tokio::test(start_paused = true)]
async fn the_fuel_used_in_a_window_survives_a_restart() {
    let quota = crate::tenant::Quota {
        fuel_per_window: Some(100),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store.clone(), test_config()).await;
    h.put_task_for("a", "name: job\nplugin: ok@1.0.0\n").await;
    let run = h.trigger_for("a", "job", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let h = Harness::start_at(
        store,
        Arc::new(FakeRunner::default()),
        h.clock.clone(),
        test_config(),
    )
    .await;
    let held = h.trigger_for("a", "job", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        h.store.get_run(&held.id).unwrap().unwrap().status,
        RunStatus::Queued
    );
    assert!(h.scheduler.stats().hold_reason("a").is_some());
    h.shutdown.cancel();
}

/// A cancelled attempt is recorded like any other (outcome, end, fuel),
/// counted in the metrics and usage, and its fuel reservation is released:
/// the tenant's next run gets the budget back. (Before, the run was
/// forgotten at the cancel and the attempt's report dropped: outcome and end
/// stayed empty, fuel 0, and the reservation of the whole budget leaked.)
#[tokio::test(start_paused = true)]
async fn a_cancelled_attempt_is_recorded_charged_and_releases_its_reservation() {
    let quota = crate::tenant::Quota {
        fuel_per_window: Some(1_000),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for("a", "name: hang\nplugin: block@1.0.0\n")
        .await;
    h.put_task_for("a", "name: job\nplugin: ok@1.0.0\n").await;
    let run = h.trigger_for("a", "hang", serde_json::json!({})).await;
    wait_for(&h, &run.id, |r| r.steps[0].status == StepStatus::Running).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cancelled = h.scheduler.cancel(&run_id(&run), "test").await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert!(matches!(
        h.scheduler.cancel(&run_id(&run), "test").await,
        Err(Error::Conflict(_))
    ));
    let run = wait_for(&h, &run.id, |r| r.steps[0].attempts[0].outcome.is_some()).await;
    let attempt = &run.steps[0].attempts[0];
    assert_eq!(attempt.outcome, Some(Outcome::Cancelled));
    assert!(attempt.finished_at.is_some());
    assert_eq!(attempt.fuel_consumed, 100);
    assert!(attempt.duration_ms >= 2_000.0, "{attempt:?}");
    assert_eq!(run.status, RunStatus::Cancelled);
    let cancelled_at = Outcome::ALL
        .iter()
        .position(|o| *o == Outcome::Cancelled)
        .unwrap();
    assert_eq!(
        h.scheduler.stats().attempts[cancelled_at].load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let next = h.trigger_for("a", "job", serde_json::json!({})).await;
    let next = h.wait_terminal(&next.id).await;
    assert_eq!(
        next.status,
        RunStatus::Succeeded,
        "the reservation came back"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let usage = h.store.usage("a", 0, i64::MAX).unwrap();
    let hang = usage.iter().find(|b| b.task == "hang").expect("charged");
    assert_eq!((hang.attempts, hang.fuel), (1, 100));
    assert_eq!(hang.outcomes["cancelled"], 1);
    assert!(hang.wall_ms >= 2_000.0);
    h.shutdown.cancel();
}

/// Attempts blocked in host calls burn no fuel but hold slots: the
/// wall-time budget charges their duration, cuts the last one's deadline to
/// what is left, then holds the tenant until the window resets.
#[tokio::test(start_paused = true)]
async fn a_tenant_out_of_wall_time_is_held_and_its_last_deadline_cut() {
    let quota = crate::tenant::Quota {
        wall_ms_per_window: Some(20_000),
        window: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        "a",
        "name: hang\nplugin: slow@1.0.0\ninput: { ms: 3600000 }\nlimits: { timeout: 15s }\n",
    )
    .await;
    let runs = [
        h.trigger_for("a", "hang", serde_json::json!({})).await,
        h.trigger_for("a", "hang", serde_json::json!({})).await,
        h.trigger_for("a", "hang", serde_json::json!({})).await,
    ];
    let first = h.wait_terminal(&runs[0].id).await;
    let a = &first.steps[0].attempts[0];
    assert_eq!(a.outcome, Some(Outcome::TimedOut));
    let second = h.wait_terminal(&runs[1].id).await;
    let b = &second.steps[0].attempts[0];
    assert!(
        b.started_at >= a.finished_at.unwrap(),
        "waited for the first to settle"
    );
    assert_eq!(b.outcome, Some(Outcome::TimedOut));
    assert!(
        (4_999.0..6_000.0).contains(&b.duration_ms),
        "cut to the 5 s left: {b:?}"
    );
    assert!(
        b.error.as_deref().unwrap().contains("wall-time budget"),
        "{b:?}"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let third = h.store.get_run(&runs[2].id).unwrap().unwrap();
    assert_eq!(third.status, RunStatus::Queued);
    let reason = h.scheduler.stats().hold_reason("a").expect("held");
    assert!(reason.contains("wall-time budget"), "{reason}");
    // The next window (t0 is on the hour) lets it go.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let third = h.wait_terminal(&runs[2].id).await;
    assert_eq!(third.steps[0].attempts[0].outcome, Some(Outcome::TimedOut));
    h.shutdown.cancel();
}
