//! Alerts raised by the actor: each lands in the store's outbox with the
//! run change that raised it (the dead letter, the failed run), and the
//! worker records every try on it.

use super::*;
use crate::scheduler::alerts::{AlertSpec, Alerter, AlertsConfig, all_events};
use crate::store::{AlertQuery, AlertStatus, OutboxAlert};

fn outbox(store: &MemoryStore, tenant: &str) -> Vec<OutboxAlert> {
    let query = AlertQuery {
        tenant: tenant.into(),
        status: None,
        limit: 100,
        cursor: None,
    };
    let mut all = store.list_alerts(&query).unwrap().0;
    all.reverse();
    all
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_and_a_failed_run_are_stored_with_the_run_and_tried_from_the_store() {
    let store = Arc::new(MemoryStore::new());
    let shutdown = CancellationToken::new();
    // A port nobody listens on: every try fails to connect.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let alerter = Alerter::start(
        AlertsConfig {
            max_attempts: 2,
            initial_backoff: Duration::from_secs(1),
            ..AlertsConfig::default()
        },
        crate::tenant::Registry::default(),
        store.clone(),
        Arc::new(TokioClock::starting_at(t0())),
        shutdown.clone(),
    );
    let hook = format!("http://127.0.0.1:{port}/hook");
    alerter.set_tenant(
        "t",
        Some(AlertSpec {
            webhook: hook.clone(),
            on: all_events(),
            late_after: None,
        }),
    );
    let config = SchedulerConfig {
        alerts: alerter.clone(),
        ..test_config()
    };
    let h = Harness::start_with(store.clone(), config).await;
    h.put_task("name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 2, backoff: [1s] }\n")
        .await;
    let run = h.trigger("flaky", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    // Once the failed run is stored, both alerts are.
    let alerts = outbox(&store, "t");
    let kinds: Vec<&str> = alerts
        .iter()
        .map(|a| a.body["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["dead_letter", "run_failed"], "{alerts:?}");
    let dead = h.store.list_dead_letters("t", true).unwrap();
    for a in &alerts {
        assert_eq!(a.body["run_id"], run.id.as_str());
        assert_eq!(a.body["id"], a.id.as_str());
        assert_eq!((a.url.as_str(), a.admin), (hook.as_str(), true));
    }
    assert_eq!(alerts[0].body["dead_letter_id"], dead[0].id.as_str());
    // The worker tries each twice (connection refused), then gives up.
    for _ in 0..1_000 {
        if outbox(&store, "t")
            .iter()
            .all(|a| a.status == AlertStatus::Dead)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for a in outbox(&store, "t") {
        assert_eq!((a.status, a.attempts), (AlertStatus::Dead, 2), "{a:?}");
        assert!(a.last_error.is_some(), "{a:?}");
    }
    assert_eq!(alerter.stats().retries.load(Ordering::Relaxed), 2);
    assert_eq!(alerter.stats().failed.load(Ordering::Relaxed), 2);
    // A run that succeeds raises nothing.
    h.put_task("name: fine\nplugin: ok@1.0.0\n").await;
    let ok = h.trigger("fine", serde_json::json!({})).await;
    h.wait_terminal(&ok.id).await;
    assert_eq!(outbox(&store, "t").len(), 2);
    shutdown.cancel();
}
