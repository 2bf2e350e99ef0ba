//! Tests of the alert worker: what is due, the outbox bounds, delivery from
//! the store, retries and dead letters.
use super::*;

#[test]
fn backoff_doubles_and_is_capped() {
    let c = AlertsConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(500),
        ..AlertsConfig::default()
    };
    let got: Vec<u128> = (1..=5).map(|n| backoff(&c, n).as_millis()).collect();
    assert_eq!(got, vec![100, 200, 400, 500, 500]);
}

#[test]
fn bad_alert_settings_name_their_field() {
    let bad = |v: serde_json::Value| AlertSpec::from_value(&v, "alerts").unwrap_err().path;
    assert_eq!(
        bad(serde_json::json!({"webhook": "ftp://x"})),
        "alerts.webhook"
    );
    assert_eq!(
        bad(serde_json::json!({"webhook": "http://"})),
        "alerts.webhook"
    );
    assert_eq!(
        bad(serde_json::json!({"webhook": "http://h", "on": []})),
        "alerts.on"
    );
    assert_eq!(
        bad(serde_json::json!({"webhook": "http://h", "on": ["late", "late"]})),
        "alerts.on[1]"
    );
    assert_eq!(
        bad(serde_json::json!({"webhook": "http://h", "on": ["sometimes"]})),
        "alerts"
    );
    let ok = AlertSpec::from_value(
        &serde_json::json!({"webhook": "https://chat.example.com/hook?x=1"}),
        "alerts",
    )
    .unwrap();
    assert_eq!(ok.on.len(), 3);
    assert_eq!(ok.late_after(), DEFAULT_LATE_AFTER);
}

fn hook(url: &str) -> AlertSpec {
    AlertSpec {
        webhook: url.into(),
        on: all_events(),
        late_after: None,
    }
}

fn ceiling(patterns: &[&str]) -> Vec<HttpPattern> {
    patterns.iter().map(|p| p.parse().unwrap()).collect()
}

#[tokio::test]
async fn a_task_webhook_needs_the_tenant_ceiling() {
    for url in [
        "http://127.0.0.1:9000/x",
        "http://[::1]:9000/x",
        "http://127.0.0.2:9000/x",
        "http://localhost:9000/x",
        "http://169.254.169.254/latest",
    ] {
        let err = check_webhook(&hook(url), Some(&[])).await.unwrap_err();
        assert!(err.contains("allows no outbound HTTP"), "{url}: {err}");
    }
    let granted = ceiling(&["http://127.0.0.1:9000"]);
    assert!(
        check_webhook(&hook("http://127.0.0.1:9000/x"), Some(&granted))
            .await
            .is_ok()
    );
    for url in [
        "http://127.0.0.1:9001/x",
        "http://127.0.0.2:9000/x",
        "https://127.0.0.1:9000/x",
    ] {
        let err = check_webhook(&hook(url), Some(&granted)).await.unwrap_err();
        assert!(
            err.contains("outside the tenant's allow-list"),
            "{url}: {err}"
        );
    }
}

#[tokio::test]
async fn names_never_reach_loopback_even_when_granted() {
    // `localhost` resolves from /etc/hosts: no network involved.
    let granted = ceiling(&["http://localhost:*"]);
    let err = check_webhook(&hook("http://localhost:9000/x"), Some(&granted))
        .await
        .unwrap_err();
    assert!(err.contains("never reached through a name"), "{err}");
    // The admin's own webhook grants its destination, not a name's loopback.
    let err = check_webhook(&hook("http://localhost:9000/x"), None)
        .await
        .unwrap_err();
    assert!(err.contains("never reached through a name"), "{err}");
    assert!(
        check_webhook(&hook("http://127.0.0.1:9000/x"), None)
            .await
            .is_ok()
    );
    assert!(
        check_webhook(&hook("http://0.0.0.0:9000/x"), None)
            .await
            .is_err()
    );
}

fn memory_alerter(config: AlertsConfig, registry: Registry) -> (Alerter, Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
    let alerter = Alerter::new(
        config,
        registry,
        Some(store.clone()),
        Arc::new(crate::scheduler::SystemClock),
    );
    (alerter, store)
}

fn outbox_entry(tenant: &str, url: &str, admin: bool) -> OutboxAlert {
    let id = new_id("a", 1_000);
    let body = Alert {
        id: id.clone(),
        ..alert_for(tenant)
    };
    OutboxAlert {
        id,
        tenant: tenant.into(),
        url: url.into(),
        admin,
        body: serde_json::to_value(&body).unwrap(),
        status: AlertStatus::Pending,
        attempts: 0,
        next_try: 0,
        created_at: 0,
        last_error: None,
    }
}

#[test]
fn delivery_reads_the_ceiling_of_the_moment() {
    let registry = Registry::default();
    let mut record = crate::tenant::TenantRecord::new("acme", Default::default(), 0);
    record.allow_http = vec!["http://127.0.0.1:9000".into()];
    registry.put_tenant(record.clone());
    let (alerter, _store) = memory_alerter(AlertsConfig::default(), registry.clone());
    let inner = &alerter.inner;
    let url = "http://127.0.0.1:9000/x";
    assert!(inner.grant(&outbox_entry("acme", url, false)).is_ok());
    record.allow_http.clear();
    registry.put_tenant(record);
    let err = inner.grant(&outbox_entry("acme", url, false)).unwrap_err();
    assert!(err.contains("allows no outbound HTTP"), "{err}");
    // The admin's webhook does not depend on the tenant's list.
    assert!(inner.grant(&outbox_entry("acme", url, true)).is_ok());
    // An unknown tenant allows nothing.
    assert!(inner.grant(&outbox_entry("ghost", url, false)).is_err());
}

#[test]
fn delivery_refuses_a_trailing_dot_as_the_save_does() {
    // A webhook stored before the save refused it: the delivery's check is
    // the same one and refuses it with the reason (the alert goes `dead`).
    let registry = Registry::default();
    let mut record = crate::tenant::TenantRecord::new("acme", Default::default(), 0);
    record.allow_http = vec!["http://127.0.0.1:9000".into()];
    registry.put_tenant(record);
    let (alerter, _store) = memory_alerter(AlertsConfig::default(), registry);
    let url = "http://127.0.0.1.:9000/x";
    for admin in [false, true] {
        let err = alerter
            .inner
            .grant(&outbox_entry("acme", url, admin))
            .unwrap_err();
        assert!(
            err.contains("trailing dot") && err.contains("write `127.0.0.1`"),
            "admin {admin}: {err}"
        );
    }
}

#[tokio::test]
async fn a_trailing_dot_webhook_is_refused_on_save() {
    let granted = ceiling(&["http://127.0.0.1:9000"]);
    for (url, ceiling) in [
        ("http://127.0.0.1.:9000/x", Some(&granted[..])),
        ("http://127.0.0.1.:9000/x", None),
        ("https://chat.example.com./hook", None),
    ] {
        let err = check_webhook(&hook(url), ceiling).await.unwrap_err();
        assert!(err.contains("a trailing dot is refused"), "{url}: {err}");
    }
    assert!(
        check_webhook(&hook("http://127.0.0.1:9000/x"), Some(&granted))
            .await
            .is_ok()
    );
}

#[test]
fn delivery_connects_only_to_a_checked_address() {
    // A listener on loopback, reached through a name the tenant was
    // granted: the resolver refuses before any connection is made.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = format!("http://localhost:{port}/x");
    let granted = ceiling(&[&format!("http://localhost:{port}")]);
    let (dest, pattern) = grant(&url, Some(&granted)).unwrap();
    let a = outbox_entry("acme", &url, false);
    match deliver(Duration::from_secs(5), dest, pattern, &a) {
        Delivery::Denied(why) => assert!(why.contains("never reached through a name"), "{why}"),
        _ => panic!("delivered through a name to loopback"),
    }
    let accepted = listener.accept();
    assert!(
        accepted
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "{accepted:?}"
    );
}

fn alert_for(tenant: &str) -> Alert {
    Alert {
        id: String::new(),
        kind: "late".into(),
        tenant: tenant.into(),
        task: "x".into(),
        run_id: "r".into(),
        step: None,
        status: "running".into(),
        reason: None,
        scheduled_for: String::new(),
        late_by_ms: None,
        dead_letter_id: None,
        at: String::new(),
        text: String::new(),
    }
}

#[test]
fn a_full_outbox_drops_the_oldest_pending_per_tenant() {
    let config = AlertsConfig {
        queue: 2,
        ..AlertsConfig::default()
    };
    let (alerter, store) = memory_alerter(config, Registry::default());
    let target = || vec![(hook("http://127.0.0.1:9/"), SetBy::Admin)];
    let mut raised = Vec::new();
    for (n, tenant) in [(1, "t"), (2, "t"), (3, "t"), (4, "u")] {
        let mut a = alert_for(tenant);
        a.run_id = format!("r{n}");
        raised.extend(alerter.send(target(), a, 1_000 + n));
    }
    // Each record carries its own id in the body it will POST.
    for a in &raised {
        assert_eq!(a.body["id"], a.id.as_str());
        assert_eq!(a.status, AlertStatus::Pending);
    }
    store.put_alerts(&raised).unwrap();
    alerter.inner.cap_pending(store.as_ref()).unwrap();
    let pending = |tenant: &str| {
        let query = AlertQuery {
            tenant: tenant.into(),
            status: Some(AlertStatus::Pending),
            limit: 10,
            cursor: None,
        };
        let (page, _) = store.list_alerts(&query).unwrap();
        page.iter()
            .map(|a| a.body["run_id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(pending("t"), ["r3", "r2"]);
    assert_eq!(pending("u"), ["r4"]);
    assert_eq!(alerter.stats().dropped.load(Ordering::Relaxed), 1);
}

#[test]
fn an_inert_alerter_raises_nothing() {
    let alerter = Alerter::default();
    let got = alerter.send(
        vec![(hook("http://127.0.0.1:9/"), SetBy::Admin)],
        alert_for("t"),
        1,
    );
    assert!(got.is_empty());
    assert_eq!(alerter.queued(), 0);
}

/// A loopback webhook receiver answering each POST with the next status of
/// `answers` (the last one from then on); the bodies it got come on the
/// channel.
fn receiver(answers: Vec<u16>) -> (String, std::sync::mpsc::Receiver<serde_json::Value>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let status = answers[n.min(answers.len() - 1)];
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            if tx.send(serde_json::from_slice(&body).unwrap()).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

fn quick() -> AlertsConfig {
    AlertsConfig {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        timeout: Duration::from_secs(5),
        ..AlertsConfig::default()
    }
}

/// Waits (real time: the receiver is a real socket) until alert `id` is in
/// `status`.
async fn settled(store: &Arc<dyn Store>, id: &str, status: AlertStatus) -> OutboxAlert {
    for _ in 0..1_000 {
        match store.get_alert(id).unwrap() {
            Some(a) if a.status == status => return a,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    panic!(
        "alert {id} never became {status:?}: {:?}",
        store.get_alert(id)
    );
}

#[tokio::test]
async fn the_worker_delivers_what_the_store_holds_after_retries() {
    let (url, bodies) = receiver(vec![503, 503, 200]);
    let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
    // Stored before any worker exists, as a host killed before delivering
    // leaves it: the worker starting later finds it.
    let a = outbox_entry("acme", &url, true);
    store.put_alerts(std::slice::from_ref(&a)).unwrap();
    let shutdown = CancellationToken::new();
    let alerter = Alerter::start(
        quick(),
        Registry::default(),
        store.clone(),
        Arc::new(crate::scheduler::SystemClock),
        shutdown.clone(),
    );
    let done = settled(&store, &a.id, AlertStatus::Delivered).await;
    assert_eq!(done.attempts, 3);
    assert_eq!(done.last_error, None);
    // Every try POSTed the body exactly as stored.
    for _ in 0..3 {
        assert_eq!(bodies.recv_timeout(Duration::from_secs(5)).unwrap(), a.body);
    }
    assert_eq!(alerter.stats().sent.load(Ordering::Relaxed), 1);
    assert_eq!(alerter.stats().retries.load(Ordering::Relaxed), 2);
    assert_eq!(alerter.queued(), 0);
    shutdown.cancel();
}

#[tokio::test]
async fn attempts_exhausted_make_a_dead_alert_that_a_retry_requeues() {
    let (url, bodies) = receiver(vec![500, 500, 500, 204]);
    let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
    let shutdown = CancellationToken::new();
    let alerter = Alerter::start(
        quick(),
        Registry::default(),
        store.clone(),
        Arc::new(crate::scheduler::SystemClock),
        shutdown.clone(),
    );
    let a = outbox_entry("acme", &url, true);
    store.put_alerts(std::slice::from_ref(&a)).unwrap();
    alerter.wake();
    let dead = settled(&store, &a.id, AlertStatus::Dead).await;
    assert_eq!(dead.attempts, 3);
    assert_eq!(dead.last_error.as_deref(), Some("answered 500"));
    assert_eq!(alerter.stats().failed.load(Ordering::Relaxed), 1);
    assert_eq!(alerter.counts().get(&AlertStatus::Dead), Some(&1));
    // Only the tenant's own dead alert is retried, and only a dead one.
    assert!(matches!(
        alerter.retry("other", &a.id),
        Err(RetryError::NotFound(_))
    ));
    let again = alerter.retry("acme", &a.id).unwrap();
    assert_eq!((again.status, again.attempts), (AlertStatus::Pending, 0));
    let done = settled(&store, &a.id, AlertStatus::Delivered).await;
    assert_eq!(done.attempts, 1);
    assert!(matches!(
        alerter.retry("acme", &a.id),
        Err(RetryError::NotDead(_, "delivered"))
    ));
    assert_eq!(bodies.iter().take(4).count(), 4);
    shutdown.cancel();
}

#[tokio::test]
async fn a_refused_answer_is_dead_at_once_and_a_refused_webhook_too() {
    let (url, _bodies) = receiver(vec![404]);
    let registry = Registry::default();
    let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
    let shutdown = CancellationToken::new();
    let alerter = Alerter::start(
        quick(),
        registry,
        store.clone(),
        Arc::new(crate::scheduler::SystemClock),
        shutdown.clone(),
    );
    let refused = outbox_entry("acme", &url, true);
    // A task's webhook of a tenant without a ceiling: refused at delivery.
    let denied = outbox_entry("acme", &url, false);
    store
        .put_alerts(&[refused.clone(), denied.clone()])
        .unwrap();
    alerter.wake();
    let r = settled(&store, &refused.id, AlertStatus::Dead).await;
    assert_eq!(
        (r.attempts, r.last_error.as_deref()),
        (1, Some("answered 404"))
    );
    let d = settled(&store, &denied.id, AlertStatus::Dead).await;
    assert!(
        d.last_error.as_deref().unwrap().starts_with("refused: "),
        "{d:?}"
    );
    assert_eq!(alerter.stats().denied.load(Ordering::Relaxed), 1);
    shutdown.cancel();
}
