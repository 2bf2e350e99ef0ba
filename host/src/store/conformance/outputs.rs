//! What attempts leave behind: captured logs and dead letters.

use super::runs::attempt_record;
use super::{Make, SCAN, attempt_logs, created, dead, event, run, run_id};
use crate::model::RunStatus;
use crate::store::prelude::*;
use crate::store::{RunLogs, Store, WholeRun};

pub fn logs_are_listed_by_step_then_attempt<S: Store>(make: Make<S>) {
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
        store.put_logs("t1", &id, logs).unwrap();
    }
    // Replace one attempt's logs (large → small and small → large).
    store
        .put_logs("t1", &id, &attempt_logs("s1", 10, "short".to_owned()))
        .unwrap();
    store
        .put_logs("t1", &id, &attempt_logs("s2", 1, big.clone()))
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

pub fn dead_letters_are_newest_first_and_filter_open_ones<S: Store>(make: Make<S>) {
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

/// Logs and records written in batches are what one call each would have
/// stored and charged: the stored run's tenant is charged (else the one
/// given), the last of two for one attempt wins, a replaced one's bytes are
/// settled.
pub fn batches_of_logs_and_records_store_what_one_call_each_would<S: Store>(make: Make<S>) {
    let (one_by_one, _dir1) = make(SCAN);
    let (batched, _dir2) = make(SCAN);
    let stored = run(&run_id(1, 1), "t1", "a", RunStatus::Succeeded);
    let unstored = run_id(2, 2);
    let logs = [
        (
            "t1",
            stored.id.as_str(),
            attempt_logs("s1", 1, "one".to_owned()),
        ),
        (
            "t2",
            stored.id.as_str(),
            attempt_logs("s1", 2, "y".repeat(4_000)),
        ),
        (
            "t2",
            unstored.as_str(),
            attempt_logs("s1", 1, "early".to_owned()),
        ),
        (
            "t1",
            stored.id.as_str(),
            attempt_logs("s1", 1, "z".repeat(9_000)),
        ),
    ];
    let records = [
        attempt_record(&stored.id, "s1", 1, "first"),
        attempt_record(&unstored, "s1", 1, "early"),
        attempt_record(&stored.id, "s1", 1, "replaced"),
    ];
    for store in [&one_by_one, &batched] {
        created(store.insert_run(&stored, false, None, &[]).unwrap());
        // Replaced by both: its bytes are settled.
        store
            .put_logs("t1", &stored.id, &attempt_logs("s1", 2, "old".repeat(500)))
            .unwrap();
    }
    for (tenant, id, l) in &logs {
        one_by_one.put_logs(tenant, id, l).unwrap();
    }
    for record in &records {
        one_by_one.put_record(record).unwrap();
    }
    let batch: Vec<RunLogs> = logs
        .iter()
        .map(|(tenant, id, l)| RunLogs {
            tenant: tenant.to_string(),
            run_id: id.to_string(),
            logs: l.clone(),
        })
        .collect();
    batched.put_logs_batch(&batch).unwrap();
    batched.put_records(&records).unwrap();
    batched.put_logs_batch(&[]).unwrap();
    batched.put_records(&[]).unwrap();
    for id in [stored.id.as_str(), unstored.as_str()] {
        assert_eq!(
            batched.logs(id).unwrap(),
            one_by_one.logs(id).unwrap(),
            "{id}"
        );
        assert_eq!(
            batched.get_record(id, "s1", 1).unwrap(),
            one_by_one.get_record(id, "s1", 1).unwrap(),
            "{id}"
        );
    }
    assert_eq!(batched.logs(&stored.id).unwrap()[0].stdout.len(), 9_000);
    for tenant in ["t1", "t2"] {
        assert_eq!(
            batched.run_bytes(tenant).unwrap(),
            one_by_one.run_bytes(tenant).unwrap(),
            "{tenant}"
        );
    }
    assert!(
        batched.run_bytes("t2").unwrap() > 0,
        "the unstored run's logs are charged to t2"
    );
}

/// A page of whole runs is each run with its events, logs and the records
/// of its attempts (only those), in the order asked, runs not stored left
/// out: what one read of each part per run gives.
pub fn whole_runs_are_each_run_with_what_it_keeps<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let a = run(&run_id(1, 1), "t1", "a", RunStatus::Succeeded);
    let b = run(&run_id(2, 2), "t2", "b", RunStatus::Failed);
    let gone = run_id(3, 3);
    created(
        store
            .insert_run(&a, false, None, &[event(&a.id, "queued", 1)])
            .unwrap(),
    );
    created(
        store
            .insert_run(
                &b,
                false,
                None,
                &[event(&b.id, "queued", 1), event(&b.id, "running", 2)],
            )
            .unwrap(),
    );
    store
        .put_logs("t1", &a.id, &attempt_logs("s1", 1, "a".to_owned()))
        .unwrap();
    store
        .put_logs("t2", &b.id, &attempt_logs("s1", 2, "b2".to_owned()))
        .unwrap();
    store
        .put_logs("t2", &b.id, &attempt_logs("s1", 1, "b1".to_owned()))
        .unwrap();
    store
        .put_record(&attempt_record(&a.id, "s1", 1, "kept"))
        .unwrap();
    // An attempt the run does not hold: not part of it.
    store
        .put_record(&attempt_record(&a.id, "s1", 9, "stray"))
        .unwrap();
    let whole = store
        .whole_runs(&[b.id.as_str(), gone.as_str(), a.id.as_str()])
        .unwrap();
    let expected: Vec<WholeRun> = [&b, &a]
        .iter()
        .map(|r| WholeRun {
            run: store.get_run(&r.id).unwrap().unwrap(),
            events: store.events(&r.id).unwrap(),
            logs: store.logs(&r.id).unwrap(),
            records: store
                .get_record(&r.id, "s1", 1)
                .unwrap()
                .into_iter()
                .collect(),
            json: Default::default(),
        })
        .collect();
    assert_eq!(whole, expected);
    assert_eq!(whole[0].events.len(), 2);
    assert_eq!(whole[0].logs.len(), 2);
    assert!(whole[0].records.is_empty());
    assert_eq!(whole[1].records.len(), 1);
    assert!(store.whole_runs(&[]).unwrap().is_empty());
}
