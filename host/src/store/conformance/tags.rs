//! Plugin tags: stored apart from plugin versions, keyed by tenant, plugin
//! name and tag; moved by a second put; listed by name then tag.

use super::{Make, SCAN, plugin};
use crate::model::PluginTag;
use crate::store::Catalog;

fn tag(tenant: &str, name: &str, tag: &str, version: &str, at: i64) -> PluginTag {
    PluginTag {
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        tag: tag.to_owned(),
        version: version.to_owned(),
        updated_at: at,
    }
}

pub fn plugin_tags_are_keyed_by_tenant_name_and_tag<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    assert_eq!(store.get_plugin_tag("t1", "a", "stable").unwrap(), None);
    for (name, t, v) in [
        ("b", "stable", "1.0.0"),
        ("a", "stable", "1.0.0"),
        ("a", "canary", "2.0.0"),
        ("a.b", "stable", "3.0.0"),
    ] {
        store.put_plugin_tag(&tag("t1", name, t, v, 1)).unwrap();
    }
    store
        .put_plugin_tag(&tag("t2", "a", "stable", "9.0.0", 1))
        .unwrap();
    let listed: Vec<_> = store
        .list_plugin_tags("t1")
        .unwrap()
        .into_iter()
        .map(|t| format!("{}@{}={}", t.name, t.tag, t.version))
        .collect();
    assert_eq!(
        listed,
        [
            "a@canary=2.0.0",
            "a@stable=1.0.0",
            "a.b@stable=3.0.0",
            "b@stable=1.0.0"
        ]
    );
    assert_eq!(
        store.get_plugin_tag("t2", "a", "stable").unwrap(),
        Some(tag("t2", "a", "stable", "9.0.0", 1)),
        "another tenant's tag of the same name is its own"
    );
    assert!(store.list_plugin_tags("nobody").unwrap().is_empty());
}

pub fn moving_a_tag_replaces_it_and_deleting_it_removes_only_it<S: Catalog>(make: Make<S>) {
    let (store, _dir) = make(SCAN);
    store.put_plugin(&plugin("t1", "a", "1.0.0")).unwrap();
    store
        .put_plugin_tag(&tag("t1", "a", "stable", "1.0.0", 1))
        .unwrap();
    store
        .put_plugin_tag(&tag("t1", "a", "stable", "1.1.0", 7))
        .unwrap();
    assert_eq!(
        store.get_plugin_tag("t1", "a", "stable").unwrap(),
        Some(tag("t1", "a", "stable", "1.1.0", 7))
    );
    assert_eq!(
        store.list_plugin_tags("t1").unwrap().len(),
        1,
        "moved, not added"
    );
    store
        .put_plugin_tag(&tag("t1", "a", "canary", "1.1.0", 8))
        .unwrap();
    assert!(store.delete_plugin_tag("t1", "a", "stable").unwrap());
    assert!(!store.delete_plugin_tag("t1", "a", "stable").unwrap());
    assert!(!store.delete_plugin_tag("t2", "a", "canary").unwrap());
    assert_eq!(store.get_plugin_tag("t1", "a", "stable").unwrap(), None);
    assert_eq!(
        store
            .get_plugin_tag("t1", "a", "canary")
            .unwrap()
            .map(|t| t.version),
        Some("1.1.0".to_owned())
    );
    // Tags and versions are separate records: neither touches the other.
    assert_eq!(store.list_plugins("t1").unwrap().len(), 1);
    assert!(store.delete_plugin("t1", "a", "1.0.0").unwrap());
    assert_eq!(store.list_plugin_tags("t1").unwrap().len(), 1);
}
