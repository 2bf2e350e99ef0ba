//! Tenants, their tokens and their hourly usage.

use super::{Make, SCAN};
use crate::model::Millis;
use crate::store::prelude::*;

pub fn tenants_and_tokens_round_trip<S: Tenancy>(make: Make<S>) {
    use crate::tenant::{Quota, TenantRecord, new_token};
    let (store, _dir) = make(SCAN);
    assert!(store.list_tenants().unwrap().is_empty());
    let mut b = TenantRecord::new("b", Quota::default(), 1);
    store.put_tenant(&b).unwrap();
    store
        .put_tenant(&TenantRecord::new("a", Quota::default(), 2))
        .unwrap();
    b.quota.fuel_per_window = Some(7);
    store.put_tenant(&b).unwrap();
    let names: Vec<_> = store
        .list_tenants()
        .unwrap()
        .into_iter()
        .map(|t| (t.name, t.quota.fuel_per_window))
        .collect();
    assert_eq!(names, [("a".into(), None), ("b".into(), Some(7))]);
    let (_, mut token) = new_token("a", Some("ci".into()), 3);
    store.put_token(&token).unwrap();
    token.revoked_at = Some(4);
    store.put_token(&token).unwrap();
    assert_eq!(store.list_tokens().unwrap(), [token]);
}

pub fn usage_adds_up_per_hour_and_task<S: Store>(make: Make<S>) {
    use crate::model::Outcome;
    use crate::tenant::{HOUR_MS, UsageBucket};
    let (store, _dir) = make(SCAN);
    let u = |tenant: &str, task: &str, at: Millis, fuel: u64, outcome: Outcome| {
        UsageBucket::attempt(tenant, task, at, fuel, 1.0, outcome)
    };
    store
        .add_usage(&[
            u("t", "a", HOUR_MS + 1, 10, Outcome::Succeeded),
            u("t", "a", HOUR_MS + 2, 5, Outcome::Failed),
            u("t", "b", 2 * HOUR_MS, 1, Outcome::Succeeded),
            u("other", "a", HOUR_MS, 100, Outcome::Succeeded),
        ])
        .unwrap();
    store
        .add_usage(&[u("t", "a", HOUR_MS, 1, Outcome::Succeeded)])
        .unwrap();
    let all = store.usage("t", 0, 10 * HOUR_MS).unwrap();
    let summary: Vec<_> = all
        .iter()
        .map(|b| (b.task.as_str(), b.hour, b.fuel, b.attempts))
        .collect();
    assert_eq!(
        summary,
        [("a", HOUR_MS, 16, 3), ("b", 2 * HOUR_MS, 1, 1)],
        "by hour then task, counters added"
    );
    assert_eq!(all[0].outcomes["succeeded"], 2);
    assert_eq!(all[0].outcomes["failed"], 1);
    assert_eq!(store.usage("t", 2 * HOUR_MS, 3 * HOUR_MS).unwrap().len(), 1);
    assert!(
        store
            .usage("t", HOUR_MS + 1, 2 * HOUR_MS)
            .unwrap()
            .is_empty()
    );
    assert!(store.usage("t", 5, 5).unwrap().is_empty());
    assert_eq!(store.usage("other", 0, i64::MAX).unwrap()[0].fuel, 100);
}

/// One write holding a bucket already stored, a new one, and the same new
/// one twice: each is what one write per bucket would leave.
pub fn usage_of_known_and_new_buckets_in_one_write_adds_up<S: Store>(make: Make<S>) {
    use crate::model::Outcome;
    use crate::tenant::{HOUR_MS, UsageBucket};
    let (store, _dir) = make(SCAN);
    let u = |task: &str, at: Millis, fuel: u64| {
        UsageBucket::attempt("t", task, at, fuel, 1.0, Outcome::Succeeded)
    };
    store.add_usage(&[u("known", HOUR_MS, 10)]).unwrap();
    store
        .add_usage(&[
            u("new", HOUR_MS, 1),
            u("known", HOUR_MS + 5, 2),
            u("new", HOUR_MS + 9, 4),
        ])
        .unwrap();
    let all: Vec<_> = store
        .usage("t", 0, 2 * HOUR_MS)
        .unwrap()
        .into_iter()
        .map(|b| (b.task, b.fuel, b.attempts))
        .collect();
    assert_eq!(
        all,
        [("known".to_string(), 12, 2), ("new".to_string(), 5, 2)]
    );
}
