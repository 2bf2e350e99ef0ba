//! The store conformance suite (`store/conformance`) on PostgreSQL, the
//! same behaviours and random operation sequences as for memory and sled,
//! each test on a scratch database of the test server (`AX_TEST_POSTGRES`:
//! `scripts/test` starts one); and the KV and secret stores over
//! [`PgMap`](super::PgMap).

use super::testing::fixture;

crate::store_conformance_suite!(suite, super::fixture, seeds = 20);

/// What the suite checks only through `Runs` or outside the store traits:
/// usage merged inside a write, the next-fire index, the KV and secret
/// stores over `ax_maps`.
mod beyond_the_suite {
    use super::super::PgStore;
    use super::super::testing::fixture;
    use crate::model::{Millis, Outcome, ScheduleState};
    use crate::store::conformance::Fixture;
    use crate::store::kv::conformance as kv;
    use crate::store::prelude::*;
    use crate::store::rules::MAX_SCAN;
    use crate::tenant::{HOUR_MS, UsageBucket};

    fn store() -> Fixture<PgStore> {
        fixture(MAX_SCAN)
    }

    #[test]
    fn usage_adds_up_per_hour_and_task() {
        let (store, _db) = store();
        let u = |tenant: &str, task: &str, at: Millis, fuel: u64| {
            UsageBucket::attempt(tenant, task, at, fuel, 1.0, Outcome::Succeeded)
        };
        let add = |buckets: &[UsageBucket]| {
            store.write_runs_with_alerts(&[], buckets, &[]).unwrap();
        };
        add(&[
            u("t", "a", HOUR_MS + 1, 10),
            u("t", "a", HOUR_MS + 2, 5),
            u("t", "b", 2 * HOUR_MS, 1),
            u("other", "a", HOUR_MS, 100),
        ]);
        add(&[u("t", "a", HOUR_MS, 1)]);
        let summary: Vec<_> = store
            .usage("t", 0, 10 * HOUR_MS)
            .unwrap()
            .into_iter()
            .map(|b| (b.task, b.hour, b.fuel, b.attempts))
            .collect();
        assert_eq!(
            summary,
            [
                ("a".to_string(), HOUR_MS, 16, 3),
                ("b".to_string(), 2 * HOUR_MS, 1, 1)
            ]
        );
        assert_eq!(
            store.usage("t", 2 * HOUR_MS, 10 * HOUR_MS).unwrap().len(),
            1
        );
        assert!(store.usage("t", HOUR_MS, HOUR_MS).unwrap().is_empty());
    }

    #[test]
    fn the_next_fire_index_holds_unpaused_schedules_only() {
        let (store, _db) = store();
        let schedule = |task: &str, at: Option<Millis>, paused: bool| ScheduleState {
            tenant: "t".into(),
            task: task.into(),
            next_fire: at,
            last_fired: None,
            paused,
        };
        let due = || -> Vec<String> {
            store
                .due_schedules(0, 1_000, 10)
                .unwrap()
                .into_iter()
                .map(|s| s.task)
                .collect()
        };
        store.put_schedule(&schedule("a", Some(20), false)).unwrap();
        store.put_schedule(&schedule("b", Some(10), true)).unwrap();
        store.put_schedule(&schedule("c", None, false)).unwrap();
        assert_eq!(due(), ["a"]);
        store.put_schedule(&schedule("b", Some(10), false)).unwrap();
        assert_eq!(due(), ["b", "a"]);
        assert!(!store.delete_task("t", "b").unwrap(), "no task, a schedule");
        assert_eq!(due(), ["a"]);
    }

    #[test]
    fn kv_set_get_delete() {
        let (store, _db) = store();
        kv::set_get_delete(&*store.kv());
    }

    #[test]
    fn kv_tenants_and_scopes_are_isolated() {
        let (store, _db) = store();
        kv::tenants_and_scopes_are_isolated(&*store.kv());
    }

    #[test]
    fn kv_list_filters_by_prefix_in_order_with_limit() {
        let (store, _db) = store();
        kv::list_filters_by_prefix_in_order_with_limit(&*store.kv());
    }

    #[test]
    fn kv_ttl_expires_reads_and_frees_quota() {
        let (store, _db) = store();
        kv::ttl_expires_reads_and_frees_quota(&*store.kv());
    }

    #[test]
    fn kv_quota_refuses_and_changes_nothing() {
        let (store, _db) = store();
        kv::quota_refuses_and_changes_nothing(&*store.kv());
    }

    #[test]
    fn secrets_conform() {
        let (store, _db) = store();
        crate::store::secrets::tests::conformance(&*store.secrets());
    }

    #[test]
    fn the_size_on_disk_is_the_database_size() {
        let (store, _db) = store();
        assert!(store.size_on_disk() > 0);
    }
}
