//! What attempts leave behind: captured logs and dead letters.

use super::{Make, SCAN, attempt_logs, dead, run_id};
use crate::store::Store;

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
