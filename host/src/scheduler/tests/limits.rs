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
