//! The host's bounds: a tenant's queue bound, shedding past the high-water
//! mark, and the host caps applied at every start.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_full_tenant_queue_answers_queue_full() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        max_queued_per_tenant: 2,
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: q\nplugin: block@1.0.0\n").await;
    h.trigger("q", serde_json::json!({})).await; // runs
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.trigger("q", serde_json::json!({})).await; // waits
    h.trigger("q", serde_json::json!({})).await; // waits
    let err = h
        .scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::QueueFull { queued: 2, .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn low_priority_runs_are_shed_past_the_high_water_mark() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        high_water: 2,
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: q\nplugin: block@1.0.0\n").await;
    h.trigger("q", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.trigger("q", serde_json::json!({})).await;
    h.trigger("q", serde_json::json!({})).await;
    let (shed, _) = h
        .scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            priority: Some(1),
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(shed.status, RunStatus::Cancelled);
    assert!(shed.reason.unwrap().contains("high-water"));
    let (kept, _) = h
        .scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: "q".into(),
            priority: Some(8),
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(kept.status, RunStatus::Queued);
}

/// The host's caps (config `caps`) bound every start, defaults included: a
/// step that sets no fuel gets the host's `max_fuel`, not the 1e9 default.
#[tokio::test(start_paused = true)]
async fn host_caps_lower_the_defaults_at_every_start() {
    let config = SchedulerConfig {
        caps: crate::model::Caps {
            max_fuel: 50,
            ..crate::model::Caps::UNLIMITED
        },
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: capped\nplugin: ok@1.0.0\nretry: { max_attempts: 1 }\n")
        .await;
    let run = h.trigger("capped", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    let attempt = &run.steps[0].attempts[0];
    assert_eq!(attempt.outcome, Some(Outcome::FuelExhausted), "{attempt:?}");
    assert_eq!(attempt.fuel_consumed, 50);
}

/// `run_bytes`: triggers far from the limit are admitted on the actor's
/// estimate, the refusal is decided on the store's exact count, and room
/// that retention frees is seen by the very next trigger.
#[tokio::test(start_paused = true)]
async fn run_bytes_refuses_on_the_exact_count_and_sees_freed_room_at_once() {
    const LIMIT: u64 = 64 << 10;
    const INPUT: usize = 4_000;
    let quota = crate::tenant::Quota {
        run_bytes: Some(LIMIT),
        ..Default::default()
    };
    let store = Arc::new(MemoryStore::new());
    store.put_tenant(&tenant_record("a", quota)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for("a", "name: job\nplugin: ok@1.0.0\n").await;
    let input = serde_json::json!({ "x": "y".repeat(INPUT) });
    let trigger = || {
        h.scheduler.trigger(TriggerRequest {
            tenant: "a".into(),
            task: "job".into(),
            input: Some(input.clone()),
            actor: "test".into(),
            ..Default::default()
        })
    };
    let mut created = Vec::new();
    let refusal = loop {
        match trigger().await {
            Ok((run, _)) => created.push(h.wait_terminal(&run.id).await),
            Err(e) => break e,
        }
        assert!(created.len() < 64, "never refused");
    };
    assert!(matches!(refusal, Error::RunBytesQuota(_)), "{refusal}");
    assert!(created.len() >= 4, "{} runs created", created.len());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stored = h.store.run_bytes("a").unwrap();
    assert!(
        stored + INPUT as u64 > LIMIT - (2 << 10),
        "refused with {stored} bytes stored against {LIMIT}"
    );
    for run in &created {
        h.store.delete_run(&run.id).unwrap();
    }
    assert!(h.store.run_bytes("a").unwrap() < LIMIT / 2);
    trigger()
        .await
        .expect("room freed by deletes is seen at once");
}
