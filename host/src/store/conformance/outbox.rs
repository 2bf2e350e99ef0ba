//! The alert outbox: written with runs, read in next-try order, listed per
//! tenant and state, trimmed, counted.

use serde_json::json;

use super::{Make, SCAN, run};
use crate::model::{Event, RunStatus};
use crate::store::prelude::*;
use crate::store::{AlertQuery, AlertStatus, OutboxAlert, RunWrite};

pub(super) fn alert(id: &str, tenant: &str, next_try: i64) -> OutboxAlert {
    OutboxAlert {
        id: id.into(),
        tenant: tenant.into(),
        url: "http://127.0.0.1:9/hook".into(),
        admin: false,
        body: json!({"id": id, "kind": "run_failed", "text": "ax: run failed"}),
        status: AlertStatus::Pending,
        attempts: 0,
        next_try,
        created_at: 1_000,
        last_error: None,
    }
}

fn ids(alerts: &[OutboxAlert]) -> Vec<&str> {
    alerts.iter().map(|a| a.id.as_str()).collect()
}

fn list(store: &impl Outbox, tenant: &str, status: Option<AlertStatus>) -> Vec<String> {
    let query = AlertQuery {
        tenant: tenant.into(),
        status,
        limit: 100,
        cursor: None,
    };
    let (page, next) = store.list_alerts(&query).unwrap();
    assert_eq!(next, None);
    page.into_iter().map(|a| a.id).collect()
}

pub fn alerts_are_written_with_their_run<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut r = run("r1", "acme", "t", RunStatus::Running);
    store.insert_run(&r, false, None, &[]).unwrap();
    r.status = RunStatus::Failed;
    r.next_revision();
    let a = alert("a1", "acme", 5_000);
    store
        .write_runs_with_alerts(
            &[RunWrite::whole(r.clone(), Vec::<Event>::new())],
            &[],
            std::slice::from_ref(&a),
        )
        .unwrap();
    assert_eq!(
        store.get_run("r1").unwrap().unwrap().status,
        RunStatus::Failed
    );
    assert_eq!(store.get_alert("a1").unwrap(), Some(a.clone()));
    // Alerts alone (no run) are a write too.
    store
        .write_runs_with_alerts(&[], &[], &[alert("a2", "acme", 4_000)])
        .unwrap();
    assert_eq!(ids(&store.due_alerts(i64::MAX, 10).unwrap()), ["a2", "a1"]);
    assert_eq!(store.get_alert("nope").unwrap(), None);
}

pub fn due_alerts_come_in_next_try_order_and_follow_every_change<S: Outbox>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    store
        .put_alerts(&[
            alert("a1", "acme", 300),
            alert("a2", "acme", 100),
            alert("a3", "beta", 200),
            alert("a4", "beta", 100),
        ])
        .unwrap();
    assert_eq!(ids(&store.due_alerts(200, 10).unwrap()), ["a2", "a4", "a3"]);
    assert_eq!(ids(&store.due_alerts(200, 2).unwrap()), ["a2", "a4"]);
    assert_eq!(ids(&store.due_alerts(99, 10).unwrap()), Vec::<&str>::new());
    // A failed try moves it later; a delivered or dead one leaves the queue.
    let mut a2 = alert("a2", "acme", 1_000);
    a2.attempts = 1;
    a2.last_error = Some("answered 503".into());
    let mut a4 = alert("a4", "beta", 100);
    a4.status = AlertStatus::Delivered;
    let mut a3 = alert("a3", "beta", 200);
    a3.status = AlertStatus::Dead;
    store.put_alerts(&[a2.clone(), a3, a4]).unwrap();
    assert_eq!(ids(&store.due_alerts(i64::MAX, 10).unwrap()), ["a1", "a2"]);
    assert_eq!(store.get_alert("a2").unwrap(), Some(a2));
    assert_eq!(list(&store, "beta", Some(AlertStatus::Dead)), ["a3"]);
    assert_eq!(list(&store, "beta", Some(AlertStatus::Delivered)), ["a4"]);
    assert_eq!(
        list(&store, "beta", Some(AlertStatus::Pending)),
        Vec::<String>::new()
    );
    // A dead one requeued is due again.
    let mut a3 = store.get_alert("a3").unwrap().unwrap();
    a3.status = AlertStatus::Pending;
    a3.next_try = 50;
    store.put_alerts(&[a3]).unwrap();
    assert_eq!(ids(&store.due_alerts(60, 10).unwrap()), ["a3"]);
}

pub fn alerts_are_listed_per_tenant_newest_first_with_a_cursor<S: Outbox>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut all = Vec::new();
    for n in 0..7 {
        let mut a = alert(&format!("a{n}"), "acme", 100);
        if n % 3 == 1 {
            a.status = AlertStatus::Dead;
        }
        all.push(a);
    }
    all.push(alert("a9", "other", 100));
    store.put_alerts(&all).unwrap();
    assert_eq!(
        list(&store, "acme", None),
        ["a6", "a5", "a4", "a3", "a2", "a1", "a0"]
    );
    assert_eq!(list(&store, "acme", Some(AlertStatus::Dead)), ["a4", "a1"]);
    assert_eq!(list(&store, "other", None), ["a9"]);
    assert_eq!(list(&store, "nobody", None), Vec::<String>::new());
    let mut query = AlertQuery {
        tenant: "acme".into(),
        status: None,
        limit: 3,
        cursor: None,
    };
    let mut pages = Vec::new();
    loop {
        let (page, next) = store.list_alerts(&query).unwrap();
        pages.push(page.into_iter().map(|a| a.id).collect::<Vec<_>>());
        match next {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(
        pages,
        [vec!["a6", "a5", "a4"], vec!["a3", "a2", "a1"], vec!["a0"]]
    );
}

pub fn trimming_keeps_the_newest_of_one_state_and_counts_follow<S: Outbox>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut all = Vec::new();
    for n in 0..5 {
        all.push(alert(&format!("p{n}"), "acme", 100 + n));
        let mut d = alert(&format!("q{n}"), "acme", 100);
        d.status = AlertStatus::Dead;
        all.push(d);
    }
    all.push(alert("z0", "beta", 100));
    store.put_alerts(&all).unwrap();
    assert_eq!(
        store.alert_counts().unwrap(),
        [
            ("acme".to_string(), AlertStatus::Pending, 5),
            ("acme".to_string(), AlertStatus::Dead, 5),
            ("beta".to_string(), AlertStatus::Pending, 1),
        ]
    );
    assert_eq!(
        store.trim_alerts("acme", AlertStatus::Pending, 2).unwrap(),
        3
    );
    assert_eq!(
        store.trim_alerts("acme", AlertStatus::Pending, 2).unwrap(),
        0
    );
    assert_eq!(
        list(&store, "acme", Some(AlertStatus::Pending)),
        ["p4", "p3"]
    );
    // The trimmed ones are gone from the queue and their records too.
    assert_eq!(
        ids(&store.due_alerts(i64::MAX, 10).unwrap()),
        ["z0", "p3", "p4"]
    );
    assert_eq!(store.get_alert("p0").unwrap(), None);
    // Other states and tenants are untouched.
    assert_eq!(list(&store, "acme", Some(AlertStatus::Dead)).len(), 5);
    assert_eq!(store.trim_alerts("acme", AlertStatus::Dead, 0).unwrap(), 5);
    assert_eq!(
        store.alert_counts().unwrap(),
        [
            ("acme".to_string(), AlertStatus::Pending, 2),
            ("beta".to_string(), AlertStatus::Pending, 1),
        ]
    );
}
