//! Reading runs back: the active set, filtered and paged listings, the bounded
//! status scan, summaries, and names that contain separator bytes.

use super::{Make, SCAN, all_pages, created, ids, run, run_id, schedule, task};
use crate::model::{RunRecord, RunStatus};
use crate::store::prelude::*;
use crate::store::{RunQuery, RunSummary, rules};

pub fn active_runs_are_the_non_terminal_ones<S: Store>(make: Make<S>) {
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
    store.update_run(&mut finished, &[]).unwrap();
    let mut requeued = store.get_run(&run_id(2, 0)).unwrap().unwrap();
    requeued.status = RunStatus::Queued;
    store.update_run(&mut requeued, &[]).unwrap();
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

pub fn list_runs_filters_newest_first<S: Store>(make: Make<S>) {
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
            ..RunQuery::default()
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
    let failed = expect(&|r| r.status == RunStatus::Failed);
    assert!(!failed.is_empty());
    assert_eq!(ids(&list(None, None, Some(RunStatus::Failed))), failed);
    assert!(list(Some("t3"), None, None).is_empty());
    assert!(list(Some("t1"), Some("zzz"), None).is_empty());
    assert!(list(None, None, Some(RunStatus::Running)).is_empty());
}

pub fn list_runs_pages_with_a_cursor<S: Store>(make: Make<S>) {
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

pub fn list_runs_bounds_by_creation_time<S: Store>(make: Make<S>) {
    // Runs made at 100..=111 ms (fill_runs), so ids carry those instants.
    let (store, _dir) = make(SCAN);
    let runs = fill_runs(&store);
    let made = |range: std::ops::Range<i64>, tenant: Option<&str>| -> Vec<&str> {
        runs.iter()
            .rev()
            .filter(|r| range.contains(&rules::id_millis(&r.id).unwrap()))
            .filter(|r| tenant.is_none_or(|t| r.tenant == t))
            .map(|r| r.id.as_str())
            .collect()
    };
    let query = |since: Option<i64>, until: Option<i64>, limit: usize| RunQuery {
        since,
        until,
        limit,
        ..RunQuery::default()
    };
    // `since` is inclusive, `until` exclusive, both to the millisecond.
    let page = store.list_runs(&query(Some(103), Some(107), 100)).unwrap();
    assert_eq!(ids(&page.runs), made(103..107, None));
    assert_eq!(page.next, None, "the scan ends at the range's floor");
    assert_eq!(
        ids(&all_pages(&store, &query(Some(103), Some(107), 1))),
        made(103..107, None),
        "paged one at a time, the range holds across pages"
    );
    assert_eq!(
        ids(&all_pages(&store, &query(Some(105), None, 2))),
        made(105..200, None)
    );
    assert_eq!(
        ids(&all_pages(&store, &query(None, Some(102), 3))),
        made(0..102, None)
    );
    // With a tenant (its own index) and a status filter.
    let failed = RunQuery {
        tenant: Some("t1".to_owned()),
        status: Some(RunStatus::Failed),
        ..query(Some(101), Some(110), 100)
    };
    let want: Vec<&str> = made(101..110, Some("t1"))
        .into_iter()
        .filter(|id| {
            runs.iter()
                .any(|r| r.id == *id && r.status == RunStatus::Failed)
        })
        .collect();
    assert_eq!(ids(&store.list_runs(&failed).unwrap().runs), want);
    // A cursor and `until` together: the lower of the two.
    let first = store.list_runs(&query(None, Some(110), 2)).unwrap();
    assert_eq!(ids(&first.runs), made(108..110, None));
    let second = RunQuery {
        cursor: first.next.clone(),
        ..query(None, Some(111), 2)
    };
    assert_eq!(
        ids(&store.list_runs(&second).unwrap().runs),
        made(106..108, None)
    );
    // An empty or inverted range lists nothing and says so.
    for (since, until) in [(107, 107), (108, 103), (200, 300), (0, 100)] {
        let page = store
            .list_runs(&query(Some(since), Some(until), 10))
            .unwrap();
        assert!(page.runs.is_empty(), "{since}..{until}");
        assert_eq!(page.next, None, "{since}..{until}");
    }
}

pub fn status_filter_scan_is_bounded_and_resumable<S: Store>(make: Make<S>) {
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

pub fn run_summaries_list_every_run_from_the_indexes<S: Store>(make: Make<S>) {
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
    store.update_run(&mut running, &[]).unwrap();
    assert!(store.delete_run(&runs[0].id).unwrap());
    let mut got = store.run_summaries().unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let want: Vec<RunSummary> = [&running, &runs[2]]
        .iter()
        .map(|r| RunSummary {
            tenant: r.tenant.clone(),
            task: r.task.clone(),
            id: r.id.clone(),
            status: r.status,
        })
        .collect();
    assert_eq!(got, want);
}

pub fn run_summaries_come_in_pages_newest_first_per_task<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut stored = Vec::new();
    for (n, (tenant, task)) in [("t1", "a"), ("t1", "a\u{0}"), ("t1", "b"), ("t\u{1}", "a")]
        .into_iter()
        .cycle()
        .take(11)
        .enumerate()
    {
        let r = run(
            &run_id(n as i64 + 1, n as u32 + 1),
            tenant,
            task,
            RunStatus::Succeeded,
        );
        created(store.insert_run(&r, false, None, &[]).unwrap());
        stored.push((r.tenant, r.task, r.id));
    }
    stored.sort();
    stored.reverse();
    for size in [1, 2, 3, 11, 50] {
        let mut walked: Vec<RunSummary> = Vec::new();
        loop {
            let page = store.run_summaries_page(walked.last(), size).unwrap();
            assert!(page.len() <= size);
            let done = page.len() < size;
            walked.extend(page);
            if done {
                break;
            }
        }
        let got: Vec<_> = walked
            .into_iter()
            .map(|r| (r.tenant, r.task, r.id))
            .collect();
        assert_eq!(got, stored, "pages of {size}");
    }
}

pub fn names_with_separator_bytes_do_not_collide<S: Store>(make: Make<S>) {
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

pub fn queued_runs_come_in_dispatch_order_per_tenant<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    // (id instant in ms, priority): priority counts as 10 s of queueing.
    let queued = [
        (100_000, 5, "t1", "a"),
        (100_001, 5, "t1", "b"),
        (119_000, 7, "t1", "a"), // 119 s − 70 s = 49 s: first
        (95_000, 0, "t1", "a"),  // 95 s: after both priority-5 ones (50 s)
        (100_000, 5, "t2", "a"),
    ];
    for (n, (ms, priority, tenant, task)) in queued.into_iter().enumerate() {
        let mut r = run(&run_id(ms, n as u32), tenant, task, RunStatus::Queued);
        r.priority = priority;
        created(store.insert_run(&r, false, None, &[]).unwrap());
    }
    let mut running = run(&run_id(1, 9), "t1", "a", RunStatus::Running);
    running.priority = 9;
    created(store.insert_run(&running, false, None, &[]).unwrap());
    let t1 = store.queued_runs("t1", 10).unwrap();
    assert_eq!(
        ids(&t1),
        [
            run_id(119_000, 2),
            run_id(100_000, 0),
            run_id(100_001, 1),
            run_id(95_000, 3)
        ]
    );
    assert_eq!(ids(&store.queued_runs("t1", 2).unwrap()), ids(&t1[..2]));
    assert_eq!(
        ids(&store.queued_runs("t2", 10).unwrap()),
        [run_id(100_000, 4)]
    );
    assert!(store.queued_runs("nobody", 10).unwrap().is_empty());
    assert_eq!(ids(&store.running_runs().unwrap()), [run_id(1, 9)]);
    let counts = store.queued_counts().unwrap();
    assert_eq!(
        counts,
        [
            ("t1".into(), "a".into(), 3),
            ("t1".into(), "b".into(), 1),
            ("t2".into(), "a".into(), 1),
        ]
    );

    // A run that starts leaves the queue; one that ends leaves both.
    let mut first = t1[0].clone();
    first.status = RunStatus::Running;
    store.update_run(&mut first, &[]).unwrap();
    assert_eq!(store.queued_runs("t1", 10).unwrap().len(), 3);
    assert_eq!(store.running_runs().unwrap().len(), 2);
    first.status = RunStatus::Succeeded;
    first.next_revision();
    running.status = RunStatus::Cancelled;
    running.next_revision();
    store
        .write_runs(&[(first, vec![]), (running, vec![])], &[])
        .unwrap();
    assert!(store.running_runs().unwrap().is_empty());
    assert_eq!(store.queued_counts().unwrap()[0].2, 2);
    // A finished run queued again (retry) is back in the queue.
    let mut again = store.get_run(&run_id(119_000, 2)).unwrap().unwrap();
    again.status = RunStatus::Queued;
    store.update_run(&mut again, &[]).unwrap();
    assert_eq!(
        store.queued_runs("t1", 1).unwrap()[0].id,
        run_id(119_000, 2)
    );
}
