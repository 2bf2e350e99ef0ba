//! One conformance suite for every [`Store`]: each behaviour is a generic
//! function, instantiated for [`MemoryStore`] and [`SledStore`] by
//! [`conformance_suite!`]. The last one applies seeded random operation
//! sequences to a store and to a deliberately naive model and compares every
//! observable result (no property-testing crate: a seeded `StdRng`).

use std::collections::{BTreeMap, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::memory::MemoryStore;
use super::sled_store::SledStore;
use super::{AttemptLogs, Insert, NewRun, RunPage, RunQuery, Store};
use crate::model::{
    AttemptRecord, DeadLetter, Event, LogLevel, LogRecord, Millis, Outcome, PluginRecord, Progress,
    RECORD_FORMAT, RunRecord, RunStatus, ScheduleState, StepRunRecord, StepStatus, TaskRecord,
    TriggerKind,
};

/// A store under test, with the temporary directory it lives in (if any).
type Fixture<S> = (S, Option<tempfile::TempDir>);
/// Makes an empty store with the given `list_runs` scan bound.
type Make<S> = fn(usize) -> Fixture<S>;

/// The production scan bound, for tests that do not probe it.
const SCAN: usize = super::memory::MAX_SCAN;

fn memory(scan_limit: usize) -> Fixture<MemoryStore> {
    (MemoryStore::new().with_scan_limit(scan_limit), None)
}

fn sled(scan_limit: usize) -> Fixture<SledStore> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SledStore::open(dir.path()).expect("open a fresh store");
    (store.with_scan_limit(scan_limit), Some(dir))
}

macro_rules! conformance_suite {
    ($module:ident, $make:path, seeds = $seeds:expr) => {
        mod $module {
            conformance_suite!(@tests $make;
                meta_values_round_trip,
                blobs_are_content_addressed,
                plugins_are_listed_by_name_then_version,
                tasks_are_stored_with_their_schedule,
                schedules_round_trip,
                inserted_run_is_readable_with_its_events,
                known_idempotency_key_returns_the_run_and_writes_nothing,
                unique_fire_allows_one_run_per_task_and_instant,
                reinserting_an_id_returns_the_stored_run,
                insert_runs_checks_each_run_against_the_store_and_the_batch,
                update_replaces_the_run_and_appends_events,
                update_of_an_unknown_run_fails,
                write_runs_writes_many_runs_and_usage_at_once,
                active_runs_are_the_non_terminal_ones,
                list_runs_filters_newest_first,
                list_runs_pages_with_a_cursor,
                status_filter_scan_is_bounded_and_resumable,
                delete_run_refuses_an_active_run,
                delete_run_removes_everything_and_frees_its_keys,
                run_summaries_list_every_run_from_the_indexes,
                logs_are_listed_by_step_then_attempt,
                dead_letters_are_newest_first_and_filter_open_ones,
                names_with_separator_bytes_do_not_collide,
                sync_ticket_resolves_after_writes,
                tenants_and_tokens_round_trip,
                usage_adds_up_per_hour_and_task,
            );

            #[test]
            fn random_operations_match_the_model() {
                super::random_operations_match_the_model($make, $seeds);
            }
        }
    };
    (@tests $make:path; $($test:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                super::$test($make);
            }
        )*
    };
}

conformance_suite!(memory_store, super::memory, seeds = 300);
conformance_suite!(sled_store, super::sled, seeds = 60);

// --- builders -------------------------------------------------------------

fn run(id: &str, tenant: &str, task: &str, status: RunStatus) -> RunRecord {
    RunRecord {
        format: RECORD_FORMAT,
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        task: task.to_owned(),
        spec: json!({"steps": [{"name": "s1", "plugin": "echo@1.0.0"}]}),
        status,
        reason: None,
        priority: 5,
        trigger: TriggerKind::Manual,
        scheduled_for: 1_000,
        created_at: 1_000,
        started_at: None,
        finished_at: None,
        input: json!({"n": 1}),
        idempotency_key: None,
        steps: vec![StepRunRecord {
            name: "s1".to_owned(),
            status: StepStatus::Pending,
            input: None,
            output: None,
            error: None,
            attempts: vec![AttemptRecord {
                number: 1,
                outcome: Some(Outcome::Succeeded),
                started_at: 1_000,
                finished_at: Some(1_002),
                fuel_consumed: 4_800,
                memory_peak_bytes: 1 << 16,
                // A dyadic fraction: serde_json's default float parser is
                // exact for these (see the report on `float_roundtrip`).
                duration_ms: 1.5,
                error: None,
                error_kind: None,
            }],
            next_attempt_at: None,
            lost_attempts: 0,
            round_start: 0,
        }],
    }
}

fn event(run_id: &str, to: &str, at: Millis) -> Event {
    Event {
        run_id: run_id.to_owned(),
        step: None,
        attempt: None,
        from: None,
        to: to.to_owned(),
        at,
        reason: "test".to_owned(),
        actor: "scheduler".to_owned(),
    }
}

fn schedule(tenant: &str, task: &str, next_fire: Option<Millis>) -> ScheduleState {
    ScheduleState {
        tenant: tenant.to_owned(),
        task: task.to_owned(),
        next_fire,
        last_fired: None,
        paused: false,
    }
}

fn task(tenant: &str, name: &str, version: u64) -> TaskRecord {
    TaskRecord {
        format: RECORD_FORMAT,
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        spec: json!({"trigger": {"cron": "0 * * * * *"}}),
        source: "name: x\n".to_owned(),
        created_at: 10,
        updated_at: 10 + version as Millis,
        version,
    }
}

fn plugin(tenant: &str, name: &str, version: &str) -> PluginRecord {
    PluginRecord {
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        version: version.to_owned(),
        digest: "ab".repeat(32),
        size: 130_000,
        created_at: 5,
    }
}

fn dead(id: &str, tenant: &str, resolution: Option<&str>) -> DeadLetter {
    DeadLetter {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        task: "a".to_owned(),
        run_id: "r1".to_owned(),
        step: "s1".to_owned(),
        input: Some(json!({"x": 1})),
        error: Some("boom".to_owned()),
        outcome: Some(Outcome::Failed),
        attempts: 3,
        created_at: 7,
        resolution: resolution.map(str::to_owned),
        resolved_at: resolution.map(|_| 9),
    }
}

fn attempt_logs(step: &str, attempt: u32, stdout: String) -> AttemptLogs {
    AttemptLogs {
        step: step.to_owned(),
        attempt,
        stdout,
        stderr: "warn\n".to_owned(),
        logs: vec![LogRecord {
            at_ms: 3,
            level: LogLevel::Info,
            message: "hello".to_owned(),
            fields: vec![("k".to_owned(), "v".to_owned())],
        }],
        progress: Some(Progress {
            percent: 50,
            note: "half".to_owned(),
            at_ms: 4,
        }),
    }
}

/// A run id as `new_id` makes them, with a chosen instant and suffix.
fn run_id(ms: i64, suffix: u32) -> String {
    format!("r{ms:012x}{suffix:08x}")
}

fn ids(runs: &[RunRecord]) -> Vec<&str> {
    runs.iter().map(|r| r.id.as_str()).collect()
}

fn created(outcome: Insert) {
    assert_eq!(outcome, Insert::Created);
}

/// Every run `query` selects, following cursors to the end.
fn all_pages<S: Store>(store: &S, query: &RunQuery) -> Vec<RunRecord> {
    let mut query = query.clone();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let RunPage { runs, next } = store.list_runs(&query).expect("list_runs");
        assert!(
            runs.len() <= query.limit.max(1),
            "page longer than the limit"
        );
        out.extend(runs);
        match next {
            Some(next) => query.cursor = Some(next),
            None => return out,
        }
    }
    panic!("list_runs paging did not end");
}

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

// --- behaviours -----------------------------------------------------------

fn tenants_and_tokens_round_trip<S: Store>(make: Make<S>) {
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

fn usage_adds_up_per_hour_and_task<S: Store>(make: Make<S>) {
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

fn meta_values_round_trip<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    assert_eq!(store.get_meta("admin_token_hash").unwrap(), None);
    store.put_meta("admin_token_hash", "abc").unwrap();
    store.put_meta("admin_token_hash", "def").unwrap();
    store.put_meta("other", "").unwrap();
    assert_eq!(
        store.get_meta("admin_token_hash").unwrap().as_deref(),
        Some("def")
    );
    assert_eq!(store.get_meta("other").unwrap().as_deref(), Some(""));
}

fn blobs_are_content_addressed<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let bytes = b"\0asm component bytes".repeat(100);
    let digest = store.put_blob(&bytes).unwrap();
    assert_eq!(digest, super::memory::digest_of(&bytes));
    assert_eq!(store.put_blob(&bytes).unwrap(), digest, "idempotent");
    assert_eq!(store.get_blob(&digest).unwrap(), Some(bytes));
    assert_eq!(store.get_blob(&"0".repeat(64)).unwrap(), None);
    assert_eq!(store.get_blob("../../etc/passwd").unwrap(), None);
    store.delete_blob(&digest).unwrap();
    store.delete_blob(&digest).unwrap();
    store.delete_blob("../x").unwrap();
    assert_eq!(store.get_blob(&digest).unwrap(), None);
}

fn plugins_are_listed_by_name_then_version<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    for (name, version) in [
        ("b", "1.0.0"),
        ("a.b", "1.0.0"),
        ("a", "2.0.0"),
        ("a", "1.0.0"),
    ] {
        store.put_plugin(&plugin("t1", name, version)).unwrap();
    }
    store.put_plugin(&plugin("t2", "a", "9.0.0")).unwrap();
    let listed: Vec<_> = store
        .list_plugins("t1")
        .unwrap()
        .into_iter()
        .map(|p| (p.name, p.version))
        .collect();
    let expected = [
        ("a", "1.0.0"),
        ("a", "2.0.0"),
        ("a.b", "1.0.0"),
        ("b", "1.0.0"),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(
        store.get_plugin("t2", "a", "9.0.0").unwrap(),
        Some(plugin("t2", "a", "9.0.0"))
    );
    assert_eq!(store.get_plugin("t2", "a", "1.0.0").unwrap(), None);
    assert!(store.delete_plugin("t1", "a", "1.0.0").unwrap());
    assert!(!store.delete_plugin("t1", "a", "1.0.0").unwrap());
    assert_eq!(store.list_plugins("t1").unwrap().len(), 3);
    assert!(store.list_plugins("nobody").unwrap().is_empty());
}

fn tasks_are_stored_with_their_schedule<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    store
        .put_task(&task("t1", "b", 1), &schedule("t1", "b", Some(60)))
        .unwrap();
    store
        .put_task(&task("t1", "a", 1), &schedule("t1", "a", None))
        .unwrap();
    store
        .put_task(&task("t0", "z", 1), &schedule("t0", "z", None))
        .unwrap();
    store
        .put_task(&task("t1", "b", 2), &schedule("t1", "b", Some(120)))
        .unwrap();
    assert_eq!(store.get_task("t1", "b").unwrap(), Some(task("t1", "b", 2)));
    assert_eq!(
        store.get_schedule("t1", "b").unwrap(),
        Some(schedule("t1", "b", Some(120)))
    );
    let names = |tasks: Vec<TaskRecord>| -> Vec<String> {
        tasks
            .into_iter()
            .map(|t| format!("{}/{}", t.tenant, t.name))
            .collect()
    };
    assert_eq!(
        names(store.list_tasks(Some("t1")).unwrap()),
        ["t1/a", "t1/b"]
    );
    assert_eq!(
        names(store.list_tasks(None).unwrap()),
        ["t0/z", "t1/a", "t1/b"]
    );
    assert!(store.delete_task("t1", "b").unwrap());
    assert!(!store.delete_task("t1", "b").unwrap());
    assert_eq!(store.get_task("t1", "b").unwrap(), None);
    assert_eq!(store.get_schedule("t1", "b").unwrap(), None);
}

fn schedules_round_trip<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut paused = schedule("t2", "a", Some(5));
    paused.paused = true;
    paused.last_fired = Some(4);
    store.put_schedule(&paused).unwrap();
    store.put_schedule(&schedule("t1", "b", None)).unwrap();
    assert_eq!(store.get_schedule("t2", "a").unwrap(), Some(paused.clone()));
    assert_eq!(
        store.list_schedules().unwrap(),
        [schedule("t1", "b", None), paused]
    );
}

fn inserted_run_is_readable_with_its_events<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let r = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    let events = [event(&r.id, "queued", 1), event(&r.id, "held", 2)];
    let next = schedule("t1", "a", Some(2_000));
    created(store.insert_run(&r, true, Some(&next), &events).unwrap());
    assert_eq!(store.get_run(&r.id).unwrap(), Some(r.clone()));
    assert_eq!(store.events(&r.id).unwrap(), events);
    assert_eq!(store.get_schedule("t1", "a").unwrap(), Some(next));
    assert_eq!(store.get_run("r-unknown").unwrap(), None);
    assert!(store.events("r-unknown").unwrap().is_empty());
}

fn known_idempotency_key_returns_the_run_and_writes_nothing<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut first = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    first.idempotency_key = Some("k".to_owned());
    created(
        store
            .insert_run(&first, false, None, &[event(&first.id, "queued", 1)])
            .unwrap(),
    );

    let mut second = run(&run_id(2, 2), "t1", "a", RunStatus::Queued);
    second.idempotency_key = Some("k".to_owned());
    second.scheduled_for = 99;
    let sched = schedule("t1", "a", Some(5));
    let outcome = store
        .insert_run(
            &second,
            false,
            Some(&sched),
            &[event(&second.id, "queued", 2)],
        )
        .unwrap();
    assert_eq!(outcome, Insert::Existing(Box::new(first.clone())));
    assert_eq!(store.get_run(&second.id).unwrap(), None);
    assert!(store.events(&second.id).unwrap().is_empty());
    assert_eq!(
        store.get_schedule("t1", "a").unwrap(),
        None,
        "schedule not written"
    );

    // The key is scoped to (tenant, task).
    let mut other_task = second.clone();
    other_task.task = "b".to_owned();
    created(store.insert_run(&other_task, false, None, &[]).unwrap());
    let mut other_tenant = run(&run_id(3, 3), "t2", "a", RunStatus::Queued);
    other_tenant.idempotency_key = Some("k".to_owned());
    created(store.insert_run(&other_tenant, false, None, &[]).unwrap());
}

fn unique_fire_allows_one_run_per_task_and_instant<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut fired = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    fired.trigger = TriggerKind::Cron;
    fired.scheduled_for = 60_000;
    created(store.insert_run(&fired, true, None, &[]).unwrap());

    let mut again = fired.clone();
    again.id = run_id(2, 2);
    let outcome = store.insert_run(&again, true, None, &[]).unwrap();
    assert_eq!(outcome, Insert::Existing(Box::new(fired.clone())));

    // Without `unique_fire` (a manual trigger) the same instant is fine, and
    // it does not claim the instant either.
    let mut manual = fired.clone();
    manual.id = run_id(3, 3);
    manual.scheduled_for = 120_000;
    created(store.insert_run(&manual, false, None, &[]).unwrap());
    let mut cron = manual.clone();
    cron.id = run_id(4, 4);
    created(store.insert_run(&cron, true, None, &[]).unwrap());

    // Other task, other instant: distinct fires.
    let mut other = fired.clone();
    other.id = run_id(5, 5);
    other.task = "b".to_owned();
    created(store.insert_run(&other, true, None, &[]).unwrap());
    let mut later = fired.clone();
    later.id = run_id(6, 6);
    later.scheduled_for = 180_000;
    created(store.insert_run(&later, true, None, &[]).unwrap());
}

fn insert_runs_checks_each_run_against_the_store_and_the_batch<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut stored = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    stored.idempotency_key = Some("k0".to_owned());
    created(store.insert_run(&stored, false, None, &[]).unwrap());
    let new = |id: u32, key: Option<&str>, fire: Option<Millis>| {
        let mut r = run(&run_id(2, id), "t1", "a", RunStatus::Queued);
        r.idempotency_key = key.map(str::to_owned);
        if let Some(at) = fire {
            r.trigger = TriggerKind::Cron;
            r.scheduled_for = at;
        }
        NewRun {
            events: vec![event(&r.id, "queued", 2)],
            unique_fire: fire.is_some(),
            schedule: None,
            run: r,
        }
    };
    let mut batch = vec![
        new(1, Some("k1"), None),
        new(2, Some("k1"), None),    // same key as the first of the batch
        new(3, Some("k0"), None),    // same key as the stored run
        new(4, None, Some(60_000)),  // a fire
        new(5, None, Some(60_000)),  // the same fire
        new(6, None, Some(120_000)), // another fire, with the schedule
    ];
    batch[5].schedule = Some(schedule("t1", "a", Some(180_000)));
    let outcomes = store.insert_runs(&batch).unwrap();
    assert_eq!(
        outcomes,
        [
            Insert::Created,
            Insert::Existing(Box::new(batch[0].run.clone())),
            Insert::Existing(Box::new(stored.clone())),
            Insert::Created,
            Insert::Existing(Box::new(batch[3].run.clone())),
            Insert::Created,
        ]
    );
    for i in [0, 3, 5] {
        assert_eq!(
            store.get_run(&batch[i].run.id).unwrap().as_ref(),
            Some(&batch[i].run)
        );
        assert_eq!(store.events(&batch[i].run.id).unwrap().len(), 1);
    }
    for i in [1, 2, 4] {
        assert_eq!(store.get_run(&batch[i].run.id).unwrap(), None);
        assert!(store.events(&batch[i].run.id).unwrap().is_empty());
    }
    assert_eq!(
        store.get_schedule("t1", "a").unwrap(),
        batch[5].schedule.clone()
    );
    assert_eq!(store.active_runs().unwrap().len(), 4);
}

fn reinserting_an_id_returns_the_stored_run<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let first = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    created(store.insert_run(&first, false, None, &[]).unwrap());
    let mut changed = first.clone();
    changed.priority = 9;
    let outcome = store.insert_run(&changed, false, None, &[]).unwrap();
    assert_eq!(outcome, Insert::Existing(Box::new(first.clone())));
    assert_eq!(store.get_run(&first.id).unwrap(), Some(first));
}

fn update_replaces_the_run_and_appends_events<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut r = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    created(
        store
            .insert_run(&r, false, None, &[event(&r.id, "queued", 1)])
            .unwrap(),
    );
    r.status = RunStatus::Running;
    r.started_at = Some(2);
    r.steps[0].status = StepStatus::Running;
    r.steps[0].output = Some(json!({"big": "x".repeat(1_000)}));
    store.update_run(&r, &[event(&r.id, "running", 2)]).unwrap();
    r.reason = Some("still going".to_owned());
    store.update_run(&r, &[]).unwrap();
    r.status = RunStatus::Succeeded;
    r.finished_at = Some(3);
    let done = [
        event(&r.id, "s1:succeeded", 3),
        event(&r.id, "succeeded", 3),
    ];
    store.update_run(&r, &done).unwrap();
    assert_eq!(store.get_run(&r.id).unwrap(), Some(r.clone()));
    let tos: Vec<_> = store
        .events(&r.id)
        .unwrap()
        .into_iter()
        .map(|e| e.to)
        .collect();
    assert_eq!(tos, ["queued", "running", "s1:succeeded", "succeeded"]);
    let query = RunQuery {
        status: Some(RunStatus::Succeeded),
        limit: 10,
        ..RunQuery::default()
    };
    assert_eq!(ids(&store.list_runs(&query).unwrap().runs), [r.id.as_str()]);
}

fn update_of_an_unknown_run_fails<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let r = run(&run_id(1, 1), "t1", "a", RunStatus::Running);
    assert!(store.update_run(&r, &[event(&r.id, "running", 1)]).is_err());
    assert_eq!(store.get_run(&r.id).unwrap(), None);
    assert!(store.events(&r.id).unwrap().is_empty());
    assert!(store.active_runs().unwrap().is_empty());
}

fn write_runs_writes_many_runs_and_usage_at_once<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut a = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    let mut b = run(&run_id(1, 2), "t1", "b", RunStatus::Queued);
    for r in [&a, &b] {
        created(store.insert_run(r, false, None, &[]).unwrap());
    }
    let ghost = run(&run_id(1, 3), "t1", "a", RunStatus::Running);
    b.status = RunStatus::Running;
    let b_running = b.clone();
    b.status = RunStatus::Succeeded;
    a.reason = Some("changed".to_owned());
    let usage = [crate::tenant::UsageBucket::attempt(
        "t1",
        "a",
        crate::tenant::HOUR_MS,
        5,
        1.0,
        crate::model::Outcome::Succeeded,
    )];
    let written = store.write_runs(
        &[
            (b_running, vec![event(&b.id, "running", 2)]),
            (ghost.clone(), vec![event(&ghost.id, "running", 2)]),
            (a.clone(), vec![event(&a.id, "note", 2)]),
            (b.clone(), vec![event(&b.id, "succeeded", 3)]),
        ],
        &usage,
    );
    // The unknown run is reported, and only it is left out.
    let err = written.expect_err("an unknown run is an error").to_string();
    assert!(err.contains(&ghost.id), "{err}");
    assert_eq!(store.get_run(&ghost.id).unwrap(), None);
    assert!(store.events(&ghost.id).unwrap().is_empty());
    assert_eq!(store.get_run(&a.id).unwrap(), Some(a.clone()));
    // A run given twice ends as its last record, with both events.
    assert_eq!(store.get_run(&b.id).unwrap(), Some(b.clone()));
    let tos: Vec<_> = store
        .events(&b.id)
        .unwrap()
        .into_iter()
        .map(|e| e.to)
        .collect();
    assert_eq!(tos, ["running", "succeeded"]);
    assert_eq!(ids(&store.active_runs().unwrap()), [a.id.as_str()]);
    let query = RunQuery {
        status: Some(RunStatus::Succeeded),
        limit: 10,
        ..RunQuery::default()
    };
    assert_eq!(ids(&store.list_runs(&query).unwrap().runs), [b.id.as_str()]);
    assert_eq!(store.usage("t1", 0, i64::MAX).unwrap()[0].fuel, 5);
}

fn active_runs_are_the_non_terminal_ones<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let statuses = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];
    for (n, status) in statuses.into_iter().enumerate() {
        let r = run(&run_id(n as i64, 0), "t1", "a", status);
        created(store.insert_run(&r, false, None, &[]).unwrap());
    }
    let active = store.active_runs().unwrap();
    assert_eq!(ids(&active), [run_id(0, 0), run_id(1, 0)]);
    let mut finished = active[1].clone();
    finished.status = RunStatus::Failed;
    store.update_run(&finished, &[]).unwrap();
    let mut requeued = store.get_run(&run_id(2, 0)).unwrap().unwrap();
    requeued.status = RunStatus::Queued;
    store.update_run(&requeued, &[]).unwrap();
    assert_eq!(
        ids(&store.active_runs().unwrap()),
        [run_id(0, 0), run_id(2, 0)]
    );
}

/// Twelve runs over two tenants and two tasks; ids in creation order.
fn fill_runs<S: Store>(store: &S) -> Vec<RunRecord> {
    let mut runs = Vec::new();
    for n in 0..12u32 {
        let tenant = if n % 3 == 0 { "t2" } else { "t1" };
        let task = if n % 2 == 0 { "a" } else { "a.b" };
        let status = if n % 4 == 1 {
            RunStatus::Failed
        } else {
            RunStatus::Queued
        };
        let r = run(&run_id(100 + i64::from(n), n), tenant, task, status);
        created(store.insert_run(&r, false, None, &[]).unwrap());
        runs.push(r);
    }
    runs
}

fn list_runs_filters_newest_first<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let runs = fill_runs(&store);
    let expect = |pred: &dyn Fn(&RunRecord) -> bool| -> Vec<&str> {
        runs.iter()
            .rev()
            .filter(|r| pred(r))
            .map(|r| r.id.as_str())
            .collect()
    };
    let list = |tenant: Option<&str>, task: Option<&str>, status: Option<RunStatus>| {
        let query = RunQuery {
            tenant: tenant.map(str::to_owned),
            task: task.map(str::to_owned),
            status,
            limit: 100,
            cursor: None,
        };
        let page = store.list_runs(&query).unwrap();
        assert_eq!(page.next, None);
        page.runs
    };
    assert_eq!(ids(&list(None, None, None)), expect(&|_| true));
    assert_eq!(
        ids(&list(Some("t1"), None, None)),
        expect(&|r| r.tenant == "t1")
    );
    assert_eq!(
        ids(&list(Some("t1"), Some("a"), None)),
        expect(&|r| r.tenant == "t1" && r.task == "a")
    );
    assert_eq!(
        ids(&list(None, Some("a.b"), None)),
        expect(&|r| r.task == "a.b")
    );
    assert_eq!(
        ids(&list(Some("t1"), None, Some(RunStatus::Failed))),
        expect(&|r| r.tenant == "t1" && r.status == RunStatus::Failed)
    );
    assert!(list(Some("t3"), None, None).is_empty());
    assert!(list(Some("t1"), Some("zzz"), None).is_empty());
    assert!(list(None, None, Some(RunStatus::Running)).is_empty());
}

fn list_runs_pages_with_a_cursor<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let runs = fill_runs(&store);
    let newest_first: Vec<&str> = runs.iter().rev().map(|r| r.id.as_str()).collect();
    let first = store
        .list_runs(&RunQuery {
            limit: 5,
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&first.runs), newest_first[..5]);
    let second = store
        .list_runs(&RunQuery {
            limit: 5,
            cursor: first.next.clone(),
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&second.runs), newest_first[5..10]);
    let third = store
        .list_runs(&RunQuery {
            limit: 5,
            cursor: second.next.clone(),
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&third.runs), newest_first[10..]);
    assert_eq!(third.next, None);
    // An exact fit still says whether more may follow, then ends empty.
    for limit in [1, 3, 4, 6, 12, 13] {
        let query = RunQuery {
            limit,
            ..RunQuery::default()
        };
        assert_eq!(ids(&all_pages(&store, &query)), newest_first);
    }
    // limit 0 is read as 1.
    let zero = store.list_runs(&RunQuery::default()).unwrap();
    assert_eq!(zero.runs.len(), 1);
    // An empty cursor is no cursor; a cursor past every id gives all.
    let empty = RunQuery {
        limit: 100,
        cursor: Some(String::new()),
        ..RunQuery::default()
    };
    assert_eq!(store.list_runs(&empty).unwrap().runs.len(), 12);
    let past = RunQuery {
        limit: 100,
        cursor: Some("zzzz".to_owned()),
        ..RunQuery::default()
    };
    assert_eq!(store.list_runs(&past).unwrap().runs.len(), 12);
    let before = RunQuery {
        limit: 100,
        cursor: Some("a\0/\u{1}%".to_owned()),
        ..RunQuery::default()
    };
    assert!(store.list_runs(&before).unwrap().runs.is_empty());
}

fn status_filter_scan_is_bounded_and_resumable<S: Store>(make: Make<S>) {
    let (store, _dir) = make(4);
    let mut runs = Vec::new();
    for n in 0..20 {
        let status = if n == 3 || n == 17 {
            RunStatus::Failed
        } else {
            RunStatus::Succeeded
        };
        let r = run(&run_id(n, 0), "t1", "a", status);
        created(store.insert_run(&r, false, None, &[]).unwrap());
        runs.push(r);
    }
    let query = RunQuery {
        tenant: Some("t1".to_owned()),
        status: Some(RunStatus::Failed),
        limit: 10,
        ..RunQuery::default()
    };
    // Newest first: ids 19, 18, 17, 16 are scanned, 17 matches.
    let page = store.list_runs(&query).unwrap();
    assert_eq!(ids(&page.runs), [run_id(17, 0)]);
    assert_eq!(page.next, Some(run_id(16, 0)));
    // The next call returns an empty page but moves on.
    let page = store
        .list_runs(&RunQuery {
            cursor: page.next,
            ..query.clone()
        })
        .unwrap();
    assert!(page.runs.is_empty());
    assert_eq!(page.next, Some(run_id(12, 0)));
    assert_eq!(
        ids(&all_pages(&store, &query)),
        [run_id(17, 0), run_id(3, 0)]
    );
}

fn delete_run_refuses_an_active_run<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let r = run(&run_id(1, 1), "t1", "a", RunStatus::Running);
    created(
        store
            .insert_run(&r, false, None, &[event(&r.id, "queued", 1)])
            .unwrap(),
    );
    assert!(!store.delete_run(&r.id).unwrap());
    assert_eq!(store.get_run(&r.id).unwrap(), Some(r.clone()));
    assert_eq!(store.events(&r.id).unwrap().len(), 1);
    assert!(!store.delete_run("r-unknown").unwrap());
}

fn run_summaries_list_every_run_from_the_indexes<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let runs = [
        run(&run_id(1, 1), "t1", "a", RunStatus::Succeeded),
        run(&run_id(2, 2), "t1", "b\u{0}x", RunStatus::Queued),
        run(&run_id(3, 3), "t\u{1}2", "a", RunStatus::Failed),
    ];
    for r in &runs {
        created(store.insert_run(r, false, None, &[]).unwrap());
    }
    // A status change reaches the summary; a deleted run leaves it.
    let mut running = runs[1].clone();
    running.status = RunStatus::Running;
    store.update_run(&running, &[]).unwrap();
    assert!(store.delete_run(&runs[0].id).unwrap());
    let mut got = store.run_summaries().unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let want: Vec<super::RunSummary> = [&running, &runs[2]]
        .iter()
        .map(|r| super::RunSummary {
            tenant: r.tenant.clone(),
            task: r.task.clone(),
            id: r.id.clone(),
            status: r.status,
        })
        .collect();
    assert_eq!(got, want);
}

fn delete_run_removes_everything_and_frees_its_keys<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut r = run(&run_id(1, 1), "t1", "a", RunStatus::Succeeded);
    r.idempotency_key = Some("k".to_owned());
    let keep = run(&run_id(2, 2), "t1", "a", RunStatus::Succeeded);
    created(
        store
            .insert_run(&r, true, None, &[event(&r.id, "queued", 1)])
            .unwrap(),
    );
    created(
        store
            .insert_run(&keep, false, None, &[event(&keep.id, "queued", 1)])
            .unwrap(),
    );
    store
        .put_logs(&r.id, &attempt_logs("s1", 1, "out".to_owned()))
        .unwrap();
    store
        .put_logs(&r.id, &attempt_logs("s1", 2, "y".repeat(40_000)))
        .unwrap();
    store
        .put_logs(&keep.id, &attempt_logs("s1", 1, "kept".to_owned()))
        .unwrap();

    assert!(store.delete_run(&r.id).unwrap());
    assert!(!store.delete_run(&r.id).unwrap());
    assert_eq!(store.get_run(&r.id).unwrap(), None);
    assert!(store.events(&r.id).unwrap().is_empty());
    assert!(store.logs(&r.id).unwrap().is_empty());
    let all = RunQuery {
        limit: 10,
        ..RunQuery::default()
    };
    assert_eq!(
        ids(&store.list_runs(&all).unwrap().runs),
        [keep.id.as_str()]
    );
    assert_eq!(store.logs(&keep.id).unwrap().len(), 1);
    assert_eq!(store.events(&keep.id).unwrap().len(), 1);

    // The idempotency key and the fire instant are free again.
    let mut again = r.clone();
    again.id = run_id(3, 3);
    created(store.insert_run(&again, true, None, &[]).unwrap());
}

fn logs_are_listed_by_step_then_attempt<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let id = run_id(1, 1);
    let big = "log line with some text\n".repeat(1_000);
    let written = [
        attempt_logs("s2", 1, "b".to_owned()),
        attempt_logs("s1", 10, big.clone()),
        attempt_logs("s1", 2, "a2".to_owned()),
        attempt_logs("s1.x", 1, "c".to_owned()),
        attempt_logs("s1", 1, big.clone()),
    ];
    for logs in &written {
        store.put_logs(&id, logs).unwrap();
    }
    // Replace one attempt's logs (large → small and small → large).
    store
        .put_logs(&id, &attempt_logs("s1", 10, "short".to_owned()))
        .unwrap();
    store
        .put_logs(&id, &attempt_logs("s2", 1, big.clone()))
        .unwrap();
    let got: Vec<_> = store
        .logs(&id)
        .unwrap()
        .into_iter()
        .map(|l| (l.step, l.attempt, l.stdout.len()))
        .collect();
    let expected = [
        ("s1", 1, big.len()),
        ("s1", 2, 2),
        ("s1", 10, 5),
        ("s1.x", 1, 1),
        ("s2", 1, big.len()),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(s, a, n)| (s.to_string(), *a, *n))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(store.logs(&id).unwrap()[0], attempt_logs("s1", 1, big));
    assert!(store.logs("r-other").unwrap().is_empty());
}

fn dead_letters_are_newest_first_and_filter_open_ones<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    store.put_dead_letter(&dead("d01", "t1", None)).unwrap();
    store
        .put_dead_letter(&dead("d03", "t1", Some("fixed")))
        .unwrap();
    store.put_dead_letter(&dead("d02", "t1", None)).unwrap();
    store.put_dead_letter(&dead("d04", "t2", None)).unwrap();
    let listed = |tenant, open| -> Vec<String> {
        let found = store.list_dead_letters(tenant, open).unwrap();
        found.into_iter().map(|d| d.id).collect()
    };
    assert_eq!(listed("t1", false), ["d03", "d02", "d01"]);
    assert_eq!(listed("t1", true), ["d02", "d01"]);
    store
        .put_dead_letter(&dead("d01", "t1", Some("requeued")))
        .unwrap();
    assert_eq!(listed("t1", true), ["d02"]);
    assert_eq!(
        store.get_dead_letter("d01").unwrap(),
        Some(dead("d01", "t1", Some("requeued")))
    );
    // Moving a dead letter to another tenant moves it out of the first list.
    store.put_dead_letter(&dead("d04", "t1", None)).unwrap();
    assert!(listed("t2", false).is_empty());
    assert_eq!(listed("t1", true), ["d04", "d02"]);
    assert_eq!(store.get_dead_letter("d99").unwrap(), None);
}

fn names_with_separator_bytes_do_not_collide<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let names = ["a", "a/b", "a\0b", "a\u{1}", "a%2F", "a/", ""];
    for (n, tenant) in names.iter().enumerate() {
        for (m, task_name) in names.iter().enumerate() {
            store
                .put_task(
                    &task(tenant, task_name, 1),
                    &schedule(tenant, task_name, None),
                )
                .unwrap();
            let r = run(
                &run_id((n * 10 + m) as i64, 0),
                tenant,
                task_name,
                RunStatus::Queued,
            );
            created(store.insert_run(&r, false, None, &[]).unwrap());
        }
    }
    for tenant in names {
        let tasks = store.list_tasks(Some(tenant)).unwrap();
        assert_eq!(tasks.len(), names.len(), "tenant {tenant:?}");
        assert!(tasks.iter().all(|t| t.tenant == tenant));
        let query = RunQuery {
            tenant: Some(tenant.to_owned()),
            limit: 100,
            ..RunQuery::default()
        };
        let runs = store.list_runs(&query).unwrap().runs;
        assert_eq!(runs.len(), names.len());
        for task_name in names {
            let query = RunQuery {
                task: Some(task_name.to_owned()),
                ..query.clone()
            };
            let runs = store.list_runs(&query).unwrap().runs;
            assert_eq!(runs.len(), 1, "{tenant:?}/{task_name:?}");
            assert_eq!(
                (runs[0].tenant.as_str(), runs[0].task.as_str()),
                (tenant, task_name)
            );
        }
    }
    assert_eq!(
        store.list_schedules().unwrap().len(),
        names.len() * names.len()
    );
}

fn sync_ticket_resolves_after_writes<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    block_on(async {
        store.sync_ticket().wait().await.unwrap();
        let r = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
        created(store.insert_run(&r, false, None, &[]).unwrap());
        let (a, b) = (store.sync_ticket(), store.sync_ticket());
        a.wait().await.unwrap();
        b.wait().await.unwrap();
        store.sync_ticket().wait().await.unwrap();
    });
}

// --- model-based random operations ----------------------------------------

/// The reference: what a store must show, kept the simplest way possible.
#[derive(Default)]
struct Model {
    runs: Vec<RunRecord>,
    idempotency: HashMap<(String, String, String), String>,
    fires: HashMap<(String, String, Millis), String>,
    events: HashMap<String, Vec<Event>>,
    schedules: BTreeMap<(String, String), ScheduleState>,
    tasks: BTreeMap<(String, String), TaskRecord>,
    dead: BTreeMap<String, DeadLetter>,
    logs: HashMap<String, BTreeMap<(String, u32), AttemptLogs>>,
    /// Ids of deleted runs, to probe that nothing of them is left.
    deleted: Vec<String>,
}

impl Model {
    fn run(&self, id: &str) -> Option<&RunRecord> {
        self.runs.iter().find(|r| r.id == id)
    }

    fn insert(
        &mut self,
        run: &RunRecord,
        unique_fire: bool,
        sched: Option<&ScheduleState>,
        events: &[Event],
    ) -> Insert {
        let idem = run
            .idempotency_key
            .as_ref()
            .map(|k| (run.tenant.clone(), run.task.clone(), k.clone()));
        let fire = (run.tenant.clone(), run.task.clone(), run.scheduled_for);
        let holder = self
            .run(&run.id)
            .or_else(|| self.run(self.idempotency.get(idem.as_ref()?)?))
            .or_else(|| self.run(self.fires.get(&fire).filter(|_| unique_fire)?));
        if let Some(holder) = holder {
            return Insert::Existing(Box::new(holder.clone()));
        }
        self.runs.push(run.clone());
        if let Some(idem) = idem {
            self.idempotency.insert(idem, run.id.clone());
        }
        if unique_fire {
            self.fires.insert(fire, run.id.clone());
        }
        if let Some(s) = sched {
            self.schedules
                .insert((s.tenant.clone(), s.task.clone()), s.clone());
        }
        self.events
            .entry(run.id.clone())
            .or_default()
            .extend_from_slice(events);
        Insert::Created
    }

    fn update(&mut self, run: &RunRecord, events: &[Event]) -> bool {
        let Some(slot) = self.runs.iter_mut().find(|r| r.id == run.id) else {
            return false;
        };
        *slot = run.clone();
        self.events
            .entry(run.id.clone())
            .or_default()
            .extend_from_slice(events);
        true
    }

    fn delete(&mut self, id: &str) -> bool {
        let Some(pos) = self.runs.iter().position(|r| r.id == id) else {
            return false;
        };
        if !self.runs[pos].status.is_terminal() {
            return false;
        }
        self.runs.remove(pos);
        self.idempotency.retain(|_, owner| owner != id);
        self.fires.retain(|_, owner| owner != id);
        self.events.remove(id);
        self.logs.remove(id);
        self.deleted.push(id.to_owned());
        true
    }

    fn list(&self, query: &RunQuery) -> Vec<RunRecord> {
        let mut runs: Vec<RunRecord> = self
            .runs
            .iter()
            .filter(|r| query.tenant.as_ref().is_none_or(|t| *t == r.tenant))
            .filter(|r| query.task.as_ref().is_none_or(|t| *t == r.task))
            .filter(|r| query.status.is_none_or(|s| s == r.status))
            .cloned()
            .collect();
        runs.sort_by(|a, b| b.id.cmp(&a.id));
        runs
    }

    fn active(&self) -> Vec<RunRecord> {
        let mut runs: Vec<RunRecord> = self
            .runs
            .iter()
            .filter(|r| !r.status.is_terminal())
            .cloned()
            .collect();
        runs.sort_by(|a, b| a.id.cmp(&b.id));
        runs
    }
}

const TENANTS: [&str; 3] = ["t1", "t2", "t/x"];
const TASKS: [&str; 4] = ["a", "a.b", "b", "a\0"];
const STATUSES: [RunStatus; 5] = [
    RunStatus::Queued,
    RunStatus::Running,
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::Cancelled,
];

fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())].clone()
}

/// An existing run id most of the time, a deleted or unknown one sometimes.
fn some_run_id(rng: &mut StdRng, model: &Model) -> String {
    if !model.deleted.is_empty() && rng.random_bool(0.15) {
        return pick(rng, &model.deleted);
    }
    if model.runs.is_empty() || rng.random_bool(0.1) {
        return run_id(rng.random_range(0..1_000), rng.random());
    }
    pick(rng, &model.runs).id
}

fn random_events(rng: &mut StdRng, run_id: &str, clock: i64) -> Vec<Event> {
    let n = rng.random_range(0..3);
    (0..n)
        .map(|i| {
            let mut e = event(run_id, pick(rng, &["queued", "running", "done"]), clock + i);
            e.step = rng.random_bool(0.5).then(|| "s1".to_owned());
            e.attempt = e.step.as_ref().map(|_| rng.random_range(1..4));
            e
        })
        .collect()
}

fn random_query(rng: &mut StdRng) -> RunQuery {
    RunQuery {
        tenant: rng
            .random_bool(0.6)
            .then(|| pick(rng, &TENANTS).to_string()),
        task: rng.random_bool(0.4).then(|| pick(rng, &TASKS).to_string()),
        status: rng.random_bool(0.5).then(|| pick(rng, &STATUSES)),
        limit: rng.random_range(0..6),
        cursor: None,
    }
}

fn random_operations_match_the_model<S: Store>(make: Make<S>, seeds: u64) {
    for seed in 0..seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let scan_limit = pick(&mut rng, &[1, 2, 3, 7, SCAN]);
        let (store, _dir) = make(scan_limit);
        let mut model = Model::default();
        let mut clock: i64 = 1_000;
        let ops = if seeds > 100 { 250 } else { 150 };
        for step in 0..ops {
            let context = format!("seed {seed}, op {step}");
            clock += rng.random_range(0..3);
            match rng.random_range(0..100) {
                0..30 => {
                    let mut r = if model.runs.is_empty() || rng.random_bool(0.95) {
                        run(
                            &run_id(clock, rng.random()),
                            pick(&mut rng, &TENANTS),
                            pick(&mut rng, &TASKS),
                            pick(
                                &mut rng,
                                &[RunStatus::Queued, RunStatus::Queued, RunStatus::Succeeded],
                            ),
                        )
                    } else {
                        let mut r = pick(&mut rng, &model.runs);
                        r.priority = 1;
                        r
                    };
                    r.idempotency_key = rng
                        .random_bool(0.4)
                        .then(|| pick(&mut rng, &["k1", "k2", "k3"]).to_string());
                    r.scheduled_for = pick(&mut rng, &[1_000, 2_000, 3_000]);
                    let unique_fire = rng.random_bool(0.5);
                    let sched = rng
                        .random_bool(0.3)
                        .then(|| schedule(&r.tenant, &r.task, Some(clock)));
                    let events = random_events(&mut rng, &r.id, clock);
                    let got = store
                        .insert_run(&r, unique_fire, sched.as_ref(), &events)
                        .unwrap();
                    let want = model.insert(&r, unique_fire, sched.as_ref(), &events);
                    assert_eq!(got, want, "{context}: insert_run");
                }
                30..55 => {
                    let id = some_run_id(&mut rng, &model);
                    let mut r = model
                        .run(&id)
                        .cloned()
                        .unwrap_or_else(|| run(&id, "t1", "a", RunStatus::Queued));
                    r.status = pick(&mut rng, &STATUSES);
                    r.reason = Some(format!("op {step}"));
                    r.steps[0].attempts[0].fuel_consumed = rng.random();
                    let events = random_events(&mut rng, &r.id, clock);
                    let got = store.update_run(&r, &events).is_ok();
                    assert_eq!(got, model.update(&r, &events), "{context}: update_run");
                }
                55..63 => {
                    let id = some_run_id(&mut rng, &model);
                    let got = store.delete_run(&id).unwrap();
                    assert_eq!(got, model.delete(&id), "{context}: delete_run {id}");
                }
                63..75 => {
                    let query = random_query(&mut rng);
                    let got = all_pages(&store, &query);
                    assert_eq!(ids(&got), ids(&model.list(&query)), "{context}: {query:?}");
                    assert_eq!(got, model.list(&query), "{context}: {query:?}");
                }
                75..80 => {
                    let id = some_run_id(&mut rng, &model);
                    assert_eq!(
                        store.get_run(&id).unwrap().as_ref(),
                        model.run(&id),
                        "{context}"
                    );
                    let want = model.events.get(&id).cloned().unwrap_or_default();
                    assert_eq!(store.events(&id).unwrap(), want, "{context}: events");
                    assert_eq!(
                        store.active_runs().unwrap(),
                        model.active(),
                        "{context}: active"
                    );
                }
                80..86 => {
                    let (tenant, name) = (pick(&mut rng, &TENANTS), pick(&mut rng, &TASKS));
                    if rng.random_bool(0.7) {
                        let t = task(tenant, name, rng.random_range(1..100));
                        let s = schedule(tenant, name, Some(clock));
                        store.put_task(&t, &s).unwrap();
                        model.tasks.insert((t.tenant.clone(), t.name.clone()), t);
                        model
                            .schedules
                            .insert((s.tenant.clone(), s.task.clone()), s);
                    } else {
                        let key = (tenant.to_string(), name.to_string());
                        model.schedules.remove(&key);
                        let want = model.tasks.remove(&key).is_some();
                        assert_eq!(store.delete_task(tenant, name).unwrap(), want, "{context}");
                    }
                    let tenant = rng.random_bool(0.5).then(|| pick(&mut rng, &TENANTS));
                    let want: Vec<_> = model
                        .tasks
                        .values()
                        .filter(|t| tenant.is_none_or(|tenant| t.tenant == tenant))
                        .cloned()
                        .collect();
                    assert_eq!(store.list_tasks(tenant).unwrap(), want, "{context}: tasks");
                }
                86..91 => {
                    let id = format!("d{:04}", rng.random_range(0..40));
                    let tenant = pick(&mut rng, &TENANTS);
                    let resolution = rng.random_bool(0.3).then_some("resolved");
                    let d = dead(&id, tenant, resolution);
                    store.put_dead_letter(&d).unwrap();
                    model.dead.insert(id, d);
                    let open_only = rng.random_bool(0.5);
                    let tenant = pick(&mut rng, &TENANTS);
                    let want: Vec<_> = model
                        .dead
                        .values()
                        .rev()
                        .filter(|d| d.tenant == *tenant && (!open_only || d.resolution.is_none()))
                        .cloned()
                        .collect();
                    let got = store.list_dead_letters(tenant, open_only).unwrap();
                    assert_eq!(got, want, "{context}: dead letters");
                }
                91..96 => {
                    let id = some_run_id(&mut rng, &model);
                    let step_name = pick(&mut rng, &["s1", "s2", "s1.x"]);
                    let attempt = rng.random_range(1..4);
                    // Large logs repeat one of a few texts, so blobs are shared.
                    let stdout = if rng.random_bool(0.3) {
                        format!("{}", rng.random_range(0..3)).repeat(20_000)
                    } else {
                        format!("out {step}")
                    };
                    let logs = attempt_logs(step_name, attempt, stdout);
                    store.put_logs(&id, &logs).unwrap();
                    let by_attempt = model.logs.entry(id.clone()).or_default();
                    by_attempt.insert((step_name.to_string(), attempt), logs);
                    let want: Vec<_> = by_attempt.values().cloned().collect();
                    assert_eq!(store.logs(&id).unwrap(), want, "{context}: logs");
                }
                _ => {
                    let s = schedule(
                        pick(&mut rng, &TENANTS),
                        pick(&mut rng, &TASKS),
                        Some(clock),
                    );
                    store.put_schedule(&s).unwrap();
                    model
                        .schedules
                        .insert((s.tenant.clone(), s.task.clone()), s);
                    let want: Vec<_> = model.schedules.values().cloned().collect();
                    assert_eq!(
                        store.list_schedules().unwrap(),
                        want,
                        "{context}: schedules"
                    );
                }
            }
        }
        // Everything, at the end.
        let context = format!("seed {seed}, final");
        let everything = RunQuery {
            limit: 7,
            ..RunQuery::default()
        };
        assert_eq!(
            all_pages(&store, &everything),
            model.list(&everything),
            "{context}"
        );
        assert_eq!(store.active_runs().unwrap(), model.active(), "{context}");
        for r in &model.runs {
            assert_eq!(store.get_run(&r.id).unwrap().as_ref(), Some(r), "{context}");
            let want = model.events.get(&r.id).cloned().unwrap_or_default();
            assert_eq!(store.events(&r.id).unwrap(), want, "{context}: events");
        }
        for (id, by_attempt) in &model.logs {
            let want: Vec<_> = by_attempt.values().cloned().collect();
            assert_eq!(store.logs(id).unwrap(), want, "{context}: logs of {id}");
        }
        assert_eq!(
            store.list_tasks(None).unwrap(),
            model.tasks.values().cloned().collect::<Vec<_>>()
        );
    }
}
