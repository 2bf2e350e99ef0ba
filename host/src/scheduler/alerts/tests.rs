//! Tests of the alert worker: what is due, the queue bound, delivery and retries.
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

#[test]
fn delivery_reads_the_ceiling_of_the_moment() {
    let registry = Registry::default();
    let mut record = crate::tenant::TenantRecord::new("acme", Default::default(), 0);
    record.allow_http = vec!["http://127.0.0.1:9000".into()];
    registry.put_tenant(record.clone());
    let inner = Inner {
        config: AlertsConfig::default(),
        registry: registry.clone(),
        tenants: RwLock::default(),
        any_tenant: AtomicBool::new(false),
        queue: Mutex::new(Queue::default()),
        wake: tokio::sync::Notify::new(),
        stats: AlertStats::default(),
    };
    let mut body = alert_for("acme");
    let pending = |set_by, body: &Alert| Pending {
        url: "http://127.0.0.1:9000/x".into(),
        set_by,
        body: Arc::new(body.clone()),
        attempts: 0,
    };
    assert!(inner.grant(&pending(SetBy::Task, &body)).is_ok());
    record.allow_http.clear();
    registry.put_tenant(record);
    let err = inner.grant(&pending(SetBy::Task, &body)).unwrap_err();
    assert!(err.contains("allows no outbound HTTP"), "{err}");
    // The admin's webhook does not depend on the tenant's list.
    assert!(inner.grant(&pending(SetBy::Admin, &body)).is_ok());
    // An unknown tenant allows nothing.
    body.tenant = "ghost".into();
    assert!(inner.grant(&pending(SetBy::Task, &body)).is_err());
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
    let p = Pending {
        url,
        set_by: SetBy::Task,
        body: Arc::new(alert_for("acme")),
        attempts: 0,
    };
    match deliver(Duration::from_secs(5), dest, pattern, &p) {
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
fn a_full_queue_drops_the_oldest() {
    let alerter = Alerter {
        inner: Arc::new(Inner {
            config: AlertsConfig {
                queue: 2,
                ..AlertsConfig::default()
            },
            registry: Registry::default(),
            tenants: RwLock::default(),
            any_tenant: AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            wake: tokio::sync::Notify::new(),
            stats: AlertStats::default(),
        }),
    };
    let target = AlertSpec {
        webhook: "http://127.0.0.1:9/".into(),
        on: all_events(),
        late_after: None,
    };
    let mk = |n: &str| Alert {
        kind: "late".into(),
        tenant: "t".into(),
        task: "x".into(),
        run_id: n.into(),
        step: None,
        status: "running".into(),
        reason: None,
        scheduled_for: String::new(),
        late_by_ms: None,
        dead_letter_id: None,
        at: String::new(),
        text: String::new(),
    };
    for n in ["a", "b", "c"] {
        alerter.send(vec![(target.clone(), SetBy::Task)], mk(n));
    }
    let q = alerter.lock();
    let ids: Vec<&str> = q.fresh.iter().map(|p| p.body.run_id.as_str()).collect();
    assert_eq!(ids, vec!["b", "c"]);
    assert_eq!(alerter.stats().dropped.load(Ordering::Relaxed), 1);
}
