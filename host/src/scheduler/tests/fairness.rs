//! Tenants sharing the slots: one tenant's flood does not delay another's
//! run, the priority ceiling leaves the reserved share, the default running cap is half
//! the slots, and the `default` tenant keeps them all.

use super::*;

/// The fairness bound of the dispatch queue, end to end: tenant `a` floods
/// 10,000 runs; tenant `b`'s one run is among the next 2 attempts started
/// after its trigger (we assert at most 2 of `a`'s attempts start between
/// `b`'s trigger and `b`'s start), however deep `a`'s backlog.
#[tokio::test(start_paused = true)]
async fn one_tenant_flooding_does_not_delay_another_tenants_run() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(2),
        ..SchedulerConfig::default()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task_for("a", "name: flood\nplugin: slow@1.0.0\ninput: { ms: 10 }\n")
        .await;
    h.put_task_for("b", "name: one\nplugin: slow@1.0.0\ninput: { ms: 10 }\n")
        .await;
    for _ in 0..10_000 {
        h.trigger_for("a", "flood", serde_json::json!({})).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = h.runner.calls.lock().unwrap().len();
    assert!(
        before < 100,
        "a's backlog is still there ({before} started)"
    );
    let b = h.trigger_for("b", "one", serde_json::json!({})).await;
    h.wait_terminal(&b.id).await;
    let calls = h.runner.calls.lock().unwrap().clone();
    let b_at = calls
        .iter()
        .position(|(run, _, _)| *run == b.id)
        .expect("b's run started");
    let a_between = b_at - before;
    assert!(
        a_between <= 2,
        "{a_between} of a's attempts started between b's trigger and b's start"
    );
    h.shutdown.cancel();
}

/// Two tenants on 4 slots (1 reserved for priority >= 7). `a` runs 4
/// attempts that block for an hour at priority 9 (saved before its ceiling),
/// with no running cap of its own: the default ceiling queues them at 6, so
/// they take the 3 normal slots but not the reserved one, and `b` (trusted by
/// the admin with `max_priority: 9`) starts its urgent run at once.
#[tokio::test(start_paused = true)]
async fn a_tenant_at_its_priority_ceiling_leaves_the_reserved_share() {
    let store = Arc::new(MemoryStore::new());
    let uncapped = crate::tenant::Quota {
        max_concurrent_attempts: Some(4),
        ..Default::default()
    };
    store.put_tenant(&tenant_record("a", uncapped)).unwrap();
    let trusted = crate::tenant::Quota {
        max_priority: Some(9),
        ..Default::default()
    };
    store.put_tenant(&tenant_record("b", trusted)).unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        "a",
        "name: hang\nplugin: slow@1.0.0\npriority: 9\ninput: { ms: 3600000 }\nlimits: { timeout: 1h }\n",
    )
    .await;
    h.put_task_for("b", "name: urgent\nplugin: ok@1.0.0\npriority: 9\n")
        .await;
    for _ in 0..4 {
        let run = h.trigger_for("a", "hang", serde_json::json!({})).await;
        assert_eq!(run.priority, 6, "recorded at the ceiling");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.runner.calls.lock().unwrap().len(), 3, "the normal slots");
    let b = h.trigger_for("b", "urgent", serde_json::json!({})).await;
    let started = h.clock.now();
    let b = h.wait_terminal(&b.id).await;
    assert_eq!(b.status, RunStatus::Succeeded);
    assert!(h.clock.now() - started < chrono::Duration::seconds(1));
    h.shutdown.cancel();
}

/// The default running cap: `a` (no cap of its own) fills 4 slots' worth
/// with hour-long attempts at its ceiling; it holds 2 (half the slots), and
/// `b`'s ordinary run starts at once on a normal slot.
#[tokio::test(start_paused = true)]
async fn a_tenant_without_a_cap_holds_at_most_half_the_slots() {
    let store = Arc::new(MemoryStore::new());
    store
        .put_tenant(&tenant_record("a", Default::default()))
        .unwrap();
    store
        .put_tenant(&tenant_record("b", Default::default()))
        .unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        "a",
        "name: hang\nplugin: slow@1.0.0\npriority: 6\ninput: { ms: 3600000 }\nlimits: { timeout: 1h }\n",
    )
    .await;
    h.put_task_for("b", "name: job\nplugin: ok@1.0.0\npriority: 5\n")
        .await;
    for _ in 0..4 {
        h.trigger_for("a", "hang", serde_json::json!({})).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.runner.calls.lock().unwrap().len(), 2, "half of 4 slots");
    let b = h.trigger_for("b", "job", serde_json::json!({})).await;
    let started = h.clock.now();
    let b = h.wait_terminal(&b.id).await;
    assert_eq!(b.status, RunStatus::Succeeded);
    assert!(h.clock.now() - started < chrono::Duration::seconds(1));
    h.shutdown.cancel();
}

/// `default`, the host owner's tenant, keeps every normal slot and priority
/// without a quota: a one-team ax is not slowed by the fairness defaults.
#[tokio::test(start_paused = true)]
async fn the_default_tenant_keeps_every_slot() {
    let store = Arc::new(MemoryStore::new());
    store
        .put_tenant(&tenant_record(
            crate::tenant::DEFAULT_TENANT,
            Default::default(),
        ))
        .unwrap();
    store
        .put_plugin(&PluginRecord {
            tenant: crate::tenant::DEFAULT_TENANT.into(),
            name: "slow".into(),
            version: "1.0.0".into(),
            digest: "slow".into(),
            size: 1,
            created_at: 0,
            status: crate::model::PluginStatus::Ready,
            error: None,
        })
        .unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task_for(
        crate::tenant::DEFAULT_TENANT,
        "name: hang\nplugin: slow@1.0.0\npriority: 9\ninput: { ms: 3600000 }\nlimits: { timeout: 1h }\n",
    )
    .await;
    for _ in 0..4 {
        h.trigger_for(crate::tenant::DEFAULT_TENANT, "hang", serde_json::json!({}))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.runner.calls.lock().unwrap().len(), 4);
    h.shutdown.cancel();
}
