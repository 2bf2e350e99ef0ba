//! Metadata, blobs, plugins, tasks and schedules: records stored and read back
//! by key.

use super::{Make, SCAN, plugin, schedule, task};
use crate::model::TaskRecord;
use crate::store::Store;

pub(super) fn meta_values_round_trip<S: Store>(make: Make<S>) {
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

pub(super) fn blobs_are_content_addressed<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    let bytes = b"\0asm component bytes".repeat(100);
    let digest = store.put_blob(&bytes).unwrap();
    assert_eq!(digest, crate::store::memory::digest_of(&bytes));
    assert_eq!(store.put_blob(&bytes).unwrap(), digest, "idempotent");
    assert_eq!(store.get_blob(&digest).unwrap(), Some(bytes));
    assert_eq!(store.get_blob(&"0".repeat(64)).unwrap(), None);
    assert_eq!(store.get_blob("../../etc/passwd").unwrap(), None);
    store.delete_blob(&digest).unwrap();
    store.delete_blob(&digest).unwrap();
    store.delete_blob("../x").unwrap();
    assert_eq!(store.get_blob(&digest).unwrap(), None);
}

pub(super) fn plugins_are_listed_by_name_then_version<S: Store>(make: Make<S>) {
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

pub(super) fn tasks_are_stored_with_their_schedule<S: Store>(make: Make<S>) {
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

pub(super) fn put_tasks_stores_many_with_their_schedules_in_one_write<S: Store>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    store
        .put_task(&task("t1", "a", 1), &schedule("t1", "a", Some(10)))
        .unwrap();
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

pub(super) fn schedules_round_trip<S: Store>(make: Make<S>) {
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
