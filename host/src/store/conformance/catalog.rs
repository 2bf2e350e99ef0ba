//! Metadata, blobs, plugins, tasks and schedules: records stored and read back
//! by key.

use serde_json::json;

use super::{Make, SCAN, plugin, run, schedule, task};
use crate::model::ScheduleState;
use crate::model::{Millis, RunStatus, TaskRecord};
use crate::store::prelude::*;

/// Creates or replaces one task with its schedule, as
/// [`StoreExt::put_task`] does, for stores tested on their catalog alone.
fn put_task<S: Catalog>(
    store: &S,
    task: &TaskRecord,
    schedule: &ScheduleState,
) -> crate::store::Result<()> {
    store.put_tasks(&[(task.clone(), schedule.clone())])
}

pub fn meta_values_round_trip<S: Operations>(make: Make<S>) {
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

pub fn blobs_are_content_addressed<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let bytes = b"\0asm component bytes".repeat(100);
    let digest = store.put_blob(&bytes).unwrap();
    assert_eq!(digest, crate::store::rules::digest_of(&bytes));
    assert_eq!(store.put_blob(&bytes).unwrap(), digest, "idempotent");
    assert_eq!(store.get_blob(&digest).unwrap(), Some(bytes));
    assert_eq!(store.get_blob(&"0".repeat(64)).unwrap(), None);
    assert_eq!(store.get_blob("../../etc/passwd").unwrap(), None);
    store.delete_blob(&digest).unwrap();
    store.delete_blob(&digest).unwrap();
    store.delete_blob("../x").unwrap();
    assert_eq!(store.get_blob(&digest).unwrap(), None);
}

pub fn plugins_are_listed_by_name_then_version<S: Catalog>(make: Make<S>) {
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

pub fn tasks_are_stored_with_their_schedule<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    put_task(&store, &task("t1", "b", 1), &schedule("t1", "b", Some(60))).unwrap();
    put_task(&store, &task("t1", "a", 1), &schedule("t1", "a", None)).unwrap();
    put_task(&store, &task("t0", "z", 1), &schedule("t0", "z", None)).unwrap();
    put_task(&store, &task("t1", "b", 2), &schedule("t1", "b", Some(120))).unwrap();
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

pub fn put_tasks_stores_many_with_their_schedules_in_one_write<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    put_task(&store, &task("t1", "a", 1), &schedule("t1", "a", Some(10))).unwrap();
    let batch: Vec<_> = (0..50)
        .map(|i| {
            let name = format!("n{i:02}");
            (task("t1", &name, 1), schedule("t1", &name, Some(i)))
        })
        .chain([(task("t1", "a", 2), schedule("t1", "a", None))])
        .collect();
    store.put_tasks(&batch).unwrap();
    for (task, schedule) in &batch {
        assert_eq!(
            store.get_task(&task.tenant, &task.name).unwrap().as_ref(),
            Some(task)
        );
        assert_eq!(
            store
                .get_schedule(&task.tenant, &task.name)
                .unwrap()
                .as_ref(),
            Some(schedule)
        );
    }
    assert_eq!(store.list_tasks(Some("t1")).unwrap().len(), 51);
    assert_eq!(store.list_tasks(Some("t2")).unwrap().len(), 0);
    store.put_tasks(&[]).unwrap();
    assert_eq!(store.list_tasks(None).unwrap().len(), 51);
}

pub fn schedules_round_trip<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let mut paused = schedule("t2", "a", Some(5));
    paused.paused = true;
    paused.last_fired = Some(4);
    store.put_schedule(&paused).unwrap();
    store.put_schedule(&schedule("t1", "b", None)).unwrap();
    assert_eq!(store.get_schedule("t2", "a").unwrap(), Some(paused));
    assert_eq!(
        store.get_schedule("t1", "b").unwrap(),
        Some(schedule("t1", "b", None))
    );
    assert_eq!(store.get_schedule("t1", "a").unwrap(), None);
}

/// The names of schedules `due_schedules` returns, as `tenant/task@at`.
fn due<S: Catalog>(store: &S, from: Millis, until: Millis, limit: usize) -> Vec<String> {
    store
        .due_schedules(from, until, limit)
        .unwrap()
        .into_iter()
        .map(|s| format!("{}/{}@{}", s.tenant, s.task, s.next_fire.unwrap_or(-1)))
        .collect()
}

pub fn the_next_fire_index_follows_every_schedule_write<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    put_task(&store, &task("t1", "a", 1), &schedule("t1", "a", Some(300))).unwrap();
    put_task(&store, &task("t1", "b", 1), &schedule("t1", "b", Some(100))).unwrap();
    put_task(&store, &task("t0", "c", 1), &schedule("t0", "c", Some(100))).unwrap();
    put_task(
        &store,
        &task("t1", "never", 1),
        &schedule("t1", "never", None),
    )
    .unwrap();
    // Earliest first, ties by tenant then task; the range is inclusive.
    assert_eq!(
        due(&store, 0, 300, 10),
        ["t0/c@100", "t1/b@100", "t1/a@300"]
    );
    assert_eq!(due(&store, 100, 100, 10), ["t0/c@100", "t1/b@100"]);
    assert_eq!(due(&store, 101, 299, 10), Vec::<String>::new());
    assert_eq!(due(&store, 0, 1000, 1), ["t0/c@100"]);
    assert_eq!(due(&store, 0, 1000, 0), Vec::<String>::new());
    assert_eq!(due(&store, 500, 100, 10), Vec::<String>::new());

    // A replace moves the entry; a paused schedule has none; a schedule
    // written alone (firing progress) moves it too.
    put_task(&store, &task("t1", "a", 2), &schedule("t1", "a", Some(50))).unwrap();
    let mut paused = schedule("t1", "b", Some(100));
    paused.paused = true;
    store.put_schedule(&paused).unwrap();
    store.put_schedule(&schedule("t0", "c", Some(700))).unwrap();
    assert_eq!(due(&store, 0, 1000, 10), ["t1/a@50", "t0/c@700"]);
    paused.paused = false;
    store.put_schedule(&paused).unwrap();
    assert_eq!(
        due(&store, 0, 1000, 10),
        ["t1/a@50", "t1/b@100", "t0/c@700"]
    );

    // Progress stored with a fire's run moves the entry in the same write,
    // also when one batch carries two fires of the same task.
    let mut first = run("r1", "t1", "a", RunStatus::Queued);
    first.scheduled_for = 50;
    let mut second = run("r2", "t1", "a", RunStatus::Queued);
    second.scheduled_for = 60;
    let news = [
        crate::store::NewRun {
            run: first,
            unique_fire: true,
            schedule: Some(schedule("t1", "a", Some(60))),
            events: Vec::new(),
            key_expires_at: crate::model::Millis::MAX,
        },
        crate::store::NewRun {
            run: second,
            unique_fire: true,
            schedule: Some(schedule("t1", "a", Some(900))),
            events: Vec::new(),
            key_expires_at: crate::model::Millis::MAX,
        },
    ];
    store.insert_runs(&news).unwrap();
    assert_eq!(
        due(&store, 0, 1000, 10),
        ["t1/b@100", "t0/c@700", "t1/a@900"]
    );

    // Deleting a task takes its entry with it.
    assert!(store.delete_task("t1", "a").unwrap());
    assert_eq!(due(&store, 0, 1000, 10), ["t1/b@100", "t0/c@700"]);
}

pub fn downstream_tasks_follow_the_after_triggers<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let after = |tenant: &str, name: &str, ups: &[&str]| {
        let mut t = task(tenant, name, 1);
        t.spec = json!({"trigger": {"after": ups, "on": "success"}}).into();
        t
    };
    let none = |tenant: &str, name: &str| schedule(tenant, name, None);
    put_task(&store, &after("t1", "d1", &["up"]), &none("t1", "d1")).unwrap();
    put_task(
        &store,
        &after("t1", "d2", &["up", "other"]),
        &none("t1", "d2"),
    )
    .unwrap();
    put_task(&store, &after("t2", "d3", &["up"]), &none("t2", "d3")).unwrap();
    put_task(&store, &task("t1", "up", 1), &none("t1", "up")).unwrap();
    assert_eq!(store.downstream_tasks("t1", "up").unwrap(), ["d1", "d2"]);
    assert_eq!(store.downstream_tasks("t1", "other").unwrap(), ["d2"]);
    assert_eq!(store.downstream_tasks("t2", "up").unwrap(), ["d3"]);
    assert!(store.downstream_tasks("t1", "nobody").unwrap().is_empty());

    // A replace that drops an upstream drops the entry; a delete drops all.
    put_task(&store, &after("t1", "d2", &["other"]), &none("t1", "d2")).unwrap();
    assert_eq!(store.downstream_tasks("t1", "up").unwrap(), ["d1"]);
    assert!(store.delete_task("t1", "d1").unwrap());
    assert!(store.downstream_tasks("t1", "up").unwrap().is_empty());
    assert_eq!(store.downstream_tasks("t1", "other").unwrap(), ["d2"]);
}

pub fn task_pages_are_ranges_by_name<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    for name in ["b", "a", "a.b", "ab", "c"] {
        put_task(&store, &task("t1", name, 1), &schedule("t1", name, None)).unwrap();
    }
    put_task(&store, &task("t0", "a", 1), &schedule("t0", "a", None)).unwrap();
    put_task(&store, &task("t10", "a", 1), &schedule("t10", "a", None)).unwrap();
    let page = |after: Option<&str>, limit: usize| -> Vec<String> {
        store
            .list_tasks_page("t1", after, limit)
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    assert_eq!(page(None, 10), ["a", "a.b", "ab", "b", "c"]);
    assert_eq!(page(None, 2), ["a", "a.b"]);
    assert_eq!(page(Some("a.b"), 2), ["ab", "b"]);
    assert_eq!(page(Some("b"), 10), ["c"]);
    assert_eq!(
        page(Some("aa"), 10),
        ["ab", "b", "c"],
        "a cursor need not exist"
    );
    assert!(page(Some("c"), 10).is_empty());
    assert!(page(None, 0).is_empty());
}

/// A batch that names one task twice leaves what two writes in a row
/// would: the second definition, schedule and `after` edges.
pub fn a_batch_naming_a_task_twice_keeps_the_last<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let after = |name: &str, ups: &[&str], version: u64| {
        let mut t = task("t1", name, version);
        t.spec = json!({"trigger": {"after": ups, "on": "success"}}).into();
        t
    };
    store
        .put_tasks(&[
            (after("d", &["up", "old"], 1), schedule("t1", "d", Some(5))),
            (after("e", &["up"], 1), schedule("t1", "e", None)),
            (after("d", &["up", "new"], 2), schedule("t1", "d", Some(9))),
        ])
        .unwrap();
    assert_eq!(
        store.get_task("t1", "d").unwrap(),
        Some(after("d", &["up", "new"], 2))
    );
    assert_eq!(
        store.get_schedule("t1", "d").unwrap(),
        Some(schedule("t1", "d", Some(9)))
    );
    assert_eq!(store.downstream_tasks("t1", "up").unwrap(), ["d", "e"]);
    assert_eq!(store.downstream_tasks("t1", "new").unwrap(), ["d"]);
    assert!(store.downstream_tasks("t1", "old").unwrap().is_empty());
}
