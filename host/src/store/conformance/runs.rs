//! Writing runs: inserts and their claims (idempotency keys, unique fires),
//! updates, batched writes, deletes, durability tickets, and revisions (a
//! write is a compare-and-set: two writers on one store never undo each other).

use serde_json::json;

use super::{Make, SCAN, attempt_logs, block_on, created, event, ids, run, run_id, schedule};
use crate::model::record::{AttemptRecord, Call, KvOp, KvResult};
use crate::model::{Millis, RunStatus, StepStatus, TriggerKind};
use crate::store::prelude::*;
use crate::store::{Changed, Error, Insert, KeyEntry, NewRun, RunQuery, RunWrite};

pub fn inserted_run_is_readable_with_its_events<S: Store>(make: Make<S>) {
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

pub fn known_idempotency_key_returns_the_run_and_writes_nothing<S: Store>(make: Make<S>) {
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
    other_task.task = "b".to_owned().into();
    created(store.insert_run(&other_task, false, None, &[]).unwrap());
    let mut other_tenant = run(&run_id(3, 3), "t2", "a", RunStatus::Queued);
    other_tenant.idempotency_key = Some("k".to_owned());
    created(store.insert_run(&other_tenant, false, None, &[]).unwrap());
}

pub fn unique_fire_allows_one_run_per_task_and_instant<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut fired = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    fired.trigger = TriggerKind::Cron;
    fired.scheduled_for = 60_000;
    created(store.insert_run(&fired, true, None, &[]).unwrap());

    let mut again = fired.clone();
    again.id = run_id(2, 2).into();
    let outcome = store.insert_run(&again, true, None, &[]).unwrap();
    assert_eq!(outcome, Insert::Existing(Box::new(fired.clone())));

    // Without `unique_fire` (a manual trigger) the same instant is fine, and
    // it does not claim the instant either.
    let mut manual = fired.clone();
    manual.id = run_id(3, 3).into();
    manual.scheduled_for = 120_000;
    created(store.insert_run(&manual, false, None, &[]).unwrap());
    let mut cron = manual.clone();
    cron.id = run_id(4, 4).into();
    created(store.insert_run(&cron, true, None, &[]).unwrap());

    // Other task, other instant: distinct fires.
    let mut other = fired.clone();
    other.id = run_id(5, 5).into();
    other.task = "b".to_owned().into();
    created(store.insert_run(&other, true, None, &[]).unwrap());
    let mut later = fired.clone();
    later.id = run_id(6, 6).into();
    later.scheduled_for = 180_000;
    created(store.insert_run(&later, true, None, &[]).unwrap());
}

pub fn insert_runs_checks_each_run_against_the_store_and_the_batch<S: Store>(make: Make<S>) {
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
            key_expires_at: Millis::MAX,
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

pub fn reinserting_an_id_returns_the_stored_run<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let first = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    created(store.insert_run(&first, false, None, &[]).unwrap());
    let mut changed = first.clone();
    changed.priority = 9;
    let outcome = store.insert_run(&changed, false, None, &[]).unwrap();
    assert_eq!(outcome, Insert::Existing(Box::new(first.clone())));
    assert_eq!(store.get_run(&first.id).unwrap(), Some(first));
}

pub fn update_replaces_the_run_and_appends_events<S: Store>(make: Make<S>) {
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
    let events = [event(&r.id, "running", 2)];
    store.update_run(&mut r, &events).unwrap();
    r.reason = Some("still going".to_owned());
    store.update_run(&mut r, &[]).unwrap();
    r.status = RunStatus::Succeeded;
    r.finished_at = Some(3);
    let done = [
        event(&r.id, "s1:succeeded", 3),
        event(&r.id, "succeeded", 3),
    ];
    store.update_run(&mut r, &done).unwrap();
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

pub fn update_of_an_unknown_run_fails<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut r = run(&run_id(1, 1), "t1", "a", RunStatus::Running);
    let events = [event(&r.id, "running", 1)];
    assert!(store.update_run(&mut r, &events).is_err());
    assert_eq!(r.revision, 1, "a refused write leaves the record as it was");
    assert_eq!(store.get_run(&r.id).unwrap(), None);
    assert!(store.events(&r.id).unwrap().is_empty());
    assert!(store.active_runs().unwrap().is_empty());
}

pub fn write_runs_writes_many_runs_and_usage_at_once<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut a = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    let mut b = run(&run_id(1, 2), "t1", "b", RunStatus::Queued);
    for r in [&a, &b] {
        created(store.insert_run(r, false, None, &[]).unwrap());
    }
    let ghost = run(&run_id(1, 3), "t1", "a", RunStatus::Running);
    b.status = RunStatus::Running;
    b.next_revision();
    let b_running = b.clone();
    b.status = RunStatus::Succeeded;
    b.next_revision();
    a.reason = Some("changed".to_owned());
    a.next_revision();
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
    assert!(err.contains(ghost.id.as_str()), "{err}");
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

pub fn delete_run_refuses_an_active_run<S: Store>(make: Make<S>) {
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

pub fn delete_run_removes_everything_and_frees_its_fire<S: Store>(make: Make<S>) {
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
        .put_logs(&r.tenant, &r.id, &attempt_logs("s1", 1, "out".to_owned()))
        .unwrap();
    store
        .put_logs(&r.tenant, &r.id, &attempt_logs("s1", 2, "y".repeat(40_000)))
        .unwrap();
    store
        .put_logs(
            &keep.tenant,
            &keep.id,
            &attempt_logs("s1", 1, "kept".to_owned()),
        )
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

    // The fire instant is free again; the idempotency key is not, it
    // answers with the deleted run's id until it expires.
    let mut again = r.clone();
    again.id = run_id(3, 3).into();
    assert_eq!(
        store.insert_run(&again, true, None, &[]).unwrap(),
        Insert::Forgotten(r.id.clone())
    );
    again.idempotency_key = None;
    created(store.insert_run(&again, true, None, &[]).unwrap());
}

/// A key answers with its run until `key_expires_at`, whether the run is
/// kept or not; `expire_keys` frees keys in expiry order, within its limit,
/// and leaves a key a newer run took alone.
pub fn idempotency_keys_expire_in_order<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let new = |id: &str, key: &str, expires: Millis| {
        let mut r = run(id, "t1", "a", RunStatus::Succeeded);
        r.idempotency_key = Some(key.to_owned());
        NewRun {
            run: r,
            unique_fire: false,
            schedule: None,
            events: Vec::new(),
            key_expires_at: expires,
        }
    };
    let (a, b, c) = (
        new(&run_id(1, 1), "ka", 100),
        new(&run_id(2, 2), "kb", 200),
        new(&run_id(3, 3), "kc", Millis::MAX),
    );
    let outcomes = store
        .insert_runs(&[a.clone(), b.clone(), c.clone()])
        .unwrap();
    assert_eq!(
        outcomes,
        [Insert::Created, Insert::Created, Insert::Created]
    );
    assert!(store.delete_run(&a.run.id).unwrap());

    // Before expiry: the kept run answers, the deleted one is remembered.
    let again = |key: &str| new(&run_id(9, 9), key, 1_000);
    assert_eq!(store.expire_keys(99, 10).unwrap(), 0);
    assert_eq!(
        store.insert_runs(&[again("ka")]).unwrap(),
        [Insert::Forgotten(a.run.id.clone())]
    );
    assert!(matches!(
        &store.insert_runs(&[again("kb")]).unwrap()[..],
        [Insert::Existing(r)] if r.id == b.run.id
    ));

    // Due at or before `now`, oldest first, at most `limit`.
    assert_eq!(store.expire_keys(200, 1).unwrap(), 1);
    assert_eq!(store.expire_keys(200, 10).unwrap(), 1);
    assert_eq!(
        store.expire_keys(Millis::MAX - 1, 10).unwrap(),
        0,
        "kc never expires"
    );
    // `ka` is free: a new run takes it.
    assert_eq!(
        store
            .insert_runs(&[new(&run_id(4, 4), "ka", 5_000)])
            .unwrap(),
        [Insert::Created]
    );
    // `kb`'s run is still kept, but its key is free too.
    assert_eq!(
        store
            .insert_runs(&[new(&run_id(5, 5), "kb", 5_000)])
            .unwrap(),
        [Insert::Created]
    );
    assert!(matches!(
        &store.insert_runs(&[again("kc")]).unwrap()[..],
        [Insert::Existing(r)] if r.id == c.run.id
    ));
    assert_eq!(store.expire_keys(5_000, 10).unwrap(), 2);
    assert_eq!(store.expire_keys(5_000, 10).unwrap(), 0);
}

/// `forgotten_keys` lists the keys whose run was deleted, by expiry, then
/// tenant, task and key, a page at a time; `restore_keys` stores keys as
/// given into another store, leaving a key that is held alone, and a
/// restored key answers `Forgotten` there as here until it expires.
pub fn forgotten_keys_page_and_restore<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let new = |n: u32, task: &str, key: &str, expires: Millis| {
        let mut r = run(&run_id(i64::from(n), n), "t1", task, RunStatus::Succeeded);
        r.idempotency_key = Some(key.to_owned());
        NewRun {
            run: r,
            unique_fire: false,
            schedule: None,
            events: Vec::new(),
            key_expires_at: expires,
        }
    };
    let runs = [
        new(1, "b", "k1", 300),
        new(2, "a", "k2", 300),
        new(3, "a", "k1", 100),
        new(4, "a", "k\0x", Millis::MAX),
        new(5, "a", "kept", 200),
    ];
    store.insert_runs(&runs).unwrap();
    for gone in &runs[..4] {
        assert!(store.delete_run(&gone.run.id).unwrap());
    }
    let entry = |new: &NewRun| KeyEntry {
        tenant: new.run.tenant.clone(),
        task: new.run.task.clone(),
        key: new.run.idempotency_key.clone().unwrap(),
        run_id: new.run.id.clone(),
        expires_at: new.key_expires_at,
    };
    let forgotten = [
        entry(&runs[2]),
        entry(&runs[1]),
        entry(&runs[0]),
        entry(&runs[3]),
    ];
    let mut paged = Vec::new();
    let mut after: Option<KeyEntry> = None;
    loop {
        let page = store.forgotten_keys(after.as_ref(), 3).unwrap();
        assert!(page.len() <= 3);
        paged.extend(page.iter().cloned());
        if page.len() < 3 {
            break;
        }
        after = page.last().cloned();
    }
    assert_eq!(
        paged, forgotten,
        "by expiry, then tenant, task and key; the kept run's key is not one"
    );
    assert_eq!(store.forgotten_keys(Some(&forgotten[3]), 10).unwrap(), []);

    // Another store, where the key `a/k2` is held by a run of its own: the
    // others are restored, that one is left as it was.
    let (other, _other_dir) = make(SCAN);
    let mut holder = new(8, "a", "k2", 999);
    holder.run.status = RunStatus::Queued;
    other.insert_runs(std::slice::from_ref(&holder)).unwrap();
    other.restore_keys(&forgotten).unwrap();
    let restored: Vec<KeyEntry> = forgotten
        .iter()
        .filter(|k| k.key != "k2")
        .cloned()
        .collect();
    assert_eq!(other.forgotten_keys(None, 10).unwrap(), restored);
    let again = |task: &str, key: &str| new(9, task, key, 1_000);
    assert_eq!(
        other.insert_runs(&[again("a", "k1")]).unwrap(),
        [Insert::Forgotten(runs[2].run.id.clone())]
    );
    assert!(matches!(
        &other.insert_runs(&[again("a", "k2")]).unwrap()[..],
        [Insert::Existing(r)] if r.id == holder.run.id
    ));
    assert_eq!(
        other.expire_keys(100, 10).unwrap(),
        1,
        "restored with its expiry"
    );
    assert_eq!(
        other.insert_runs(&[again("a", "k1")]).unwrap(),
        [Insert::Created]
    );
}

pub(crate) fn attempt_record(run_id: &str, step: &str, attempt: u32, note: &str) -> AttemptRecord {
    AttemptRecord {
        context: crate::model::AttemptContext {
            run_id: run_id.to_owned(),
            tenant: "t1".into(),
            task: "a".into(),
            step: step.to_owned(),
            attempt,
            scheduled_for: "2026-12-01T00:00:00Z".into(),
            trigger: TriggerKind::Manual,
        },
        digest: "d".repeat(64),
        input: "{}".into(),
        limits: crate::model::Limits::default(),
        config: [("k".to_owned(), note.to_owned())].into(),
        secrets: [("api".to_owned(), true)].into(),
        insecure_seed: u128::MAX,
        wall_clock: vec![1, 2],
        monotonic_clock: vec![3],
        secure_random: "ab".into(),
        insecure_random: String::new(),
        calls: vec![Call::Kv {
            op: KvOp::Get,
            key: "k".into(),
            result: KvResult::Value(None),
        }],
        truncated: false,
        bytes: 90,
        outcome: crate::model::Outcome::Failed,
        output: None,
        error: Some("no".into()),
    }
}

pub fn records_are_kept_per_attempt_and_go_with_their_run<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let r = run(&run_id(1, 1), "t1", "a", RunStatus::Failed);
    let keep = run(&run_id(2, 2), "t1", "a", RunStatus::Failed);
    for x in [&r, &keep] {
        created(store.insert_run(x, false, None, &[]).unwrap());
    }
    let first = attempt_record(&r.id, "s1", 1, "first");
    store.put_record(&first).unwrap();
    store
        .put_record(&attempt_record(&r.id, "s1", 2, "second"))
        .unwrap();
    store
        .put_record(&attempt_record(&keep.id, "s1", 1, "kept"))
        .unwrap();
    assert_eq!(store.get_record(&r.id, "s1", 1).unwrap(), Some(first));
    assert_eq!(
        store.get_record(&r.id, "s1", 2).unwrap().unwrap().config["k"],
        "second"
    );
    assert_eq!(store.get_record(&r.id, "s1", 3).unwrap(), None);
    assert_eq!(store.get_record(&r.id, "s2", 1).unwrap(), None);
    // Put again: replaced.
    store
        .put_record(&attempt_record(&r.id, "s1", 2, "again"))
        .unwrap();
    assert_eq!(
        store.get_record(&r.id, "s1", 2).unwrap().unwrap().config["k"],
        "again"
    );

    assert!(store.delete_run(&r.id).unwrap());
    assert_eq!(store.get_record(&r.id, "s1", 1).unwrap(), None);
    assert_eq!(store.get_record(&r.id, "s1", 2).unwrap(), None);
    assert!(store.get_record(&keep.id, "s1", 1).unwrap().is_some());
}

pub fn sync_ticket_resolves_after_writes<S: Store>(make: Make<S>) {
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

/// What a tenant keeps in runs grows with each thing a run stores (its
/// record, events, outputs, logs, attempt records), is its own (another
/// tenant's writes do not move it), and is settled to nothing when
/// retention deletes the runs.
pub fn run_bytes_follow_what_runs_keep_and_go_with_them<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    assert_eq!(store.run_bytes("t1").unwrap(), 0);
    let mut r = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    let other = run(&run_id(2, 2), "t2", "a", RunStatus::Queued);
    created(
        store
            .insert_run(&r, false, None, &[event(&r.id, "queued", 1)])
            .unwrap(),
    );
    created(store.insert_run(&other, false, None, &[]).unwrap());
    let inserted = store.run_bytes("t1").unwrap();
    let theirs = store.run_bytes("t2").unwrap();
    assert!(inserted > 0 && theirs > 0);

    r.status = RunStatus::Succeeded;
    r.steps[0].output = Some(json!({"rows": "x".repeat(10_000)}));
    let events = [event(&r.id, "succeeded", 2)];
    store.update_run(&mut r, &events).unwrap();
    let written = store.run_bytes("t1").unwrap();
    assert!(written >= inserted + 10_000, "{written} after {inserted}");
    store
        .put_logs(&r.tenant, &r.id, &attempt_logs("s1", 1, "y".repeat(40_000)))
        .unwrap();
    store
        .put_record(&attempt_record(&r.id, "s1", 1, "recorded"))
        .unwrap();
    let logged = store.run_bytes("t1").unwrap();
    assert!(logged >= written + 40_000, "{logged} after {written}");
    assert_eq!(store.run_bytes("t2").unwrap(), theirs);

    assert!(store.delete_run(&r.id).unwrap());
    assert_eq!(store.run_bytes("t1").unwrap(), 0);
    assert_eq!(store.run_bytes("t2").unwrap(), theirs);
}

/// A write is a compare-and-set on the run's revision: a writer that missed
/// another's write is refused, whole, and nothing of its write is stored.
pub fn a_write_over_a_stale_revision_is_refused_and_changes_nothing<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let r = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    let other = run(&run_id(1, 2), "t1", "a", RunStatus::Queued);
    for run in [&r, &other] {
        created(store.insert_run(run, false, None, &[]).unwrap());
    }
    assert_eq!(store.get_run(&r.id).unwrap().unwrap().revision, 1);

    // Two writers read revision 1; the first to write makes revision 2.
    let mut first = store.get_run(&r.id).unwrap().unwrap();
    let mut second = first.clone();
    first.status = RunStatus::Running;
    let events = [event(&r.id, "running", 2)];
    store.update_run(&mut first, &events).unwrap();
    assert_eq!(first.revision, 2);
    assert_eq!(store.get_run(&r.id).unwrap(), Some(first.clone()));

    // The second is refused, and its record is left as it was.
    second.status = RunStatus::Cancelled;
    let events = [event(&r.id, "cancelled", 3)];
    let refused = store.update_run(&mut second, &events).unwrap_err();
    assert!(
        matches!(&refused, Error::Conflict { id, stored: 2, given: 2 } if *id == r.id),
        "{refused}"
    );
    assert_eq!(second.revision, 1);
    assert_eq!(store.get_run(&r.id).unwrap(), Some(first.clone()));
    let tos: Vec<_> = store
        .events(&r.id)
        .unwrap()
        .into_iter()
        .map(|e| e.to)
        .collect();
    assert_eq!(tos, ["running"]);

    // In a write of many runs one stale run refuses them all.
    let mut fresh = other.clone();
    fresh.reason = Some("fresh".to_owned());
    fresh.next_revision();
    second.next_revision();
    // (with the alerts it raised: none is stored either).
    let raised = super::outbox::alert("al-stale", "t1", 1);
    let refused = store.write_runs_with_alerts(
        &[
            RunWrite::whole(fresh, vec![]),
            RunWrite::whole(second.clone(), vec![]),
        ],
        &[],
        std::slice::from_ref(&raised),
    );
    assert!(
        matches!(refused, Err(Error::Conflict { .. })),
        "{refused:?}"
    );
    assert_eq!(store.get_run(&other.id).unwrap(), Some(other.clone()));
    assert_eq!(store.get_alert("al-stale").unwrap(), None);

    // A revision skipped is refused too; so is a run given twice whose
    // revisions do not follow each other.
    let mut skipped = first.clone();
    skipped.revision += 2;
    let refused = store.write_runs(&[(skipped.clone(), vec![])], &[]);
    assert!(
        matches!(refused, Err(Error::Conflict { .. })),
        "{refused:?}"
    );
    let mut twice = first.clone();
    twice.next_revision();
    let refused = store.write_runs(&[(twice.clone(), vec![]), (twice, vec![])], &[]);
    assert!(
        matches!(refused, Err(Error::Conflict { .. })),
        "{refused:?}"
    );
    assert_eq!(store.get_run(&r.id).unwrap(), Some(first.clone()));

    // Read again, the late writer's change goes in over the new revision.
    let mut again = store.get_run(&r.id).unwrap().unwrap();
    again.status = RunStatus::Cancelled;
    store.update_run(&mut again, &[]).unwrap();
    assert_eq!(store.get_run(&r.id).unwrap().unwrap().revision, 3);
}

/// Two writers on one store, each adding to the same run as fast as it
/// can and reading it again whenever it is refused: no write undoes
/// another's (every addition is in the final record), and the revision
/// counts the writes that went in.
pub fn two_writers_on_one_store_never_undo_each_other<S: Store>(make: Make<S>) {
    const EACH: u64 = 150;
    let (store, _dir) = make(SCAN);
    let r = run(&run_id(1, 1), "t1", "a", RunStatus::Running);
    created(store.insert_run(&r, false, None, &[]).unwrap());
    let start = r.steps[0].attempts[0].fuel_consumed;
    let refusals = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..2)
            .map(|writer| {
                let store = &store;
                let id = r.id.clone();
                scope.spawn(move || {
                    let mut refused = 0;
                    for n in 0..EACH {
                        loop {
                            let mut rec = store.get_run(&id).unwrap().unwrap();
                            rec.steps[0].attempts[0].fuel_consumed += 1;
                            let events = [event(&id, &format!("w{writer}:{n}"), 2)];
                            match store.update_run(&mut rec, &events) {
                                Ok(()) => break,
                                Err(Error::Conflict { .. }) => refused += 1,
                                Err(e) => panic!("writer {writer}: {e}"),
                            }
                        }
                    }
                    refused
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|w| w.join().expect("a writer"))
            .sum::<u64>()
    });
    let stored = store.get_run(&r.id).unwrap().unwrap();
    assert_eq!(stored.steps[0].attempts[0].fuel_consumed, start + 2 * EACH);
    assert_eq!(stored.revision, 1 + 2 * EACH);
    // Every write that went in appended its event, and only those.
    assert_eq!(store.events(&r.id).unwrap().len() as u64, 2 * EACH);
    eprintln!("{refusals} stale writes refused and retried");
}

/// A run of many steps written a few steps at a time (each write naming
/// the steps it changed, [`Changed::Steps`]) reads back as written, and a
/// reader beside the writer never sees a torn run: every step's `output`
/// holds the revision that last wrote it, so the newest is the run's.
pub fn a_run_of_many_steps_written_by_its_changed_steps_reads_back_whole<S: Store>(make: Make<S>) {
    const STEPS: usize = 40;
    const WRITES: u64 = 120;
    let (store, _dir) = make(SCAN);
    let mut r = run(&run_id(1, 1), "t1", "a", RunStatus::Running);
    let template = r.steps[0].clone();
    r.steps = (0..STEPS)
        .map(|i| {
            let mut step = template.clone();
            step.name = format!("s{i}");
            step.output = Some(json!(1));
            step
        })
        .collect();
    created(store.insert_run(&r, false, None, &[]).unwrap());
    let newest = |rec: &crate::model::RunRecord| {
        rec.steps
            .iter()
            .map(|s| s.output.as_ref().and_then(|o| o.as_u64()).unwrap_or(0))
            .max()
            .unwrap_or(0)
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let last = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let (mut reads, mut busy) = (0, 0);
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                // A store may answer "changed under every read, try again"
                // (sled's reads retry a few times), never a torn run.
                let rec = match store.get_run(&r.id) {
                    Err(crate::store::Error::Unavailable(_)) => {
                        busy += 1;
                        continue;
                    }
                    read => read.unwrap().unwrap(),
                };
                assert_eq!(rec.steps.len(), STEPS);
                assert_eq!(newest(&rec), rec.revision, "a torn read");
                reads += 1;
            }
            (reads, busy)
        });
        let mut rec = r.clone();
        for n in 0..WRITES {
            rec.next_revision();
            let changed: Vec<usize> = (0..STEPS)
                .filter(|i| (*i as u64 + n).is_multiple_of(7))
                .collect();
            for &i in &changed {
                rec.steps[i].output = Some(json!(rec.revision));
                rec.steps[i].attempts[0].fuel_consumed += 1;
            }
            let write = RunWrite {
                run: rec.clone(),
                events: vec![event(&rec.id, &format!("w{n}"), 2)],
                changed: Changed::Steps(changed),
            };
            store.write_runs_with_alerts(&[write], &[], &[]).unwrap();
            // Room for whole reads between writes, as a scheduler's
            // writes of one run (at most every 10 ms) leave.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        let (reads, busy) = reader.join().unwrap();
        eprintln!("{reads} reads beside the writes, {busy} answered busy");
        assert!(reads > 0, "no read got through {WRITES} writes");
        rec
    });
    assert_eq!(store.get_run(&r.id).unwrap(), Some(last.clone()));
    assert_eq!(store.events(&r.id).unwrap().len() as u64, WRITES);
    // Written whole again (`Changed::All`), then deleted with its steps.
    let mut whole = last;
    whole.status = RunStatus::Succeeded;
    store.update_run(&mut whole, &[]).unwrap();
    assert_eq!(store.get_run(&r.id).unwrap(), Some(whole));
    assert!(store.delete_run(&r.id).unwrap());
    assert_eq!(store.get_run(&r.id).unwrap(), None);
    assert_eq!(store.run_bytes("t1").unwrap(), 0);
}

/// A run with a large input (sled keeps it apart, in chunks) reads back
/// whole through every read, keeps it through its writes, and leaves
/// nothing counted once deleted.
pub fn a_run_with_a_large_input_keeps_it_through_writes_and_reads<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut r = run(&run_id(1, 1), "t1", "a", RunStatus::Queued);
    r.input = json!({"rows": (0..4_000).map(|i| format!("row {i}")).collect::<Vec<_>>()});
    created(store.insert_run(&r, false, None, &[]).unwrap());
    assert_eq!(store.get_run(&r.id).unwrap(), Some(r.clone()));
    assert_eq!(store.queued_runs("t1", 10).unwrap(), vec![r.clone()]);
    r.status = RunStatus::Running;
    store.update_run(&mut r, &[]).unwrap();
    assert_eq!(store.running_runs().unwrap(), vec![r.clone()]);
    r.status = RunStatus::Succeeded;
    store.update_run(&mut r, &[]).unwrap();
    let page = store
        .list_runs(&RunQuery {
            tenant: Some("t1".into()),
            limit: 10,
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(page.runs, vec![r.clone()]);
    assert!(store.run_bytes("t1").unwrap() > 30_000);
    assert!(store.delete_run(&r.id).unwrap());
    assert_eq!(store.get_run(&r.id).unwrap(), None);
    assert_eq!(store.run_bytes("t1").unwrap(), 0);
}
