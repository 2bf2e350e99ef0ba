//! Which stored plugin version a step's reference means: the one function
//! both the save-time check (`service`) and the start of an attempt
//! (`scheduler`) call, so the two cannot disagree. An exact version is read
//! directly; a range takes the highest uploaded version it matches (no
//! pre-release unless the range names one); a tag reads its record, then the
//! version it points at.

use std::fmt;

use super::{Result, Store};
use crate::model::PluginRecord;
use crate::task::{PluginRef, VersionSelector};

/// Uploaded versions named in an [`Unresolved`] message, at most.
const LISTED: usize = 10;

/// Why a reference selects no stored version (a message for people).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved(pub String);

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The version of `plugin` that `tenant` has stored now, or why there is
/// none. The outer error is the store's; the inner one the reference's. A
/// range never picks a version that failed to compile (an exact version or
/// a tag names one on purpose: the caller refuses it with its reason).
pub fn resolve_plugin<S: Store + ?Sized>(
    store: &S,
    tenant: &str,
    plugin: &PluginRef,
) -> Result<std::result::Result<PluginRecord, Unresolved>> {
    let name = &plugin.name;
    match &plugin.version {
        VersionSelector::Exact(version) => Ok(store
            .get_plugin(tenant, name, version)?
            .ok_or_else(|| Unresolved(format!("plugin {plugin} is not uploaded for this tenant")))),
        VersionSelector::Range(_) => {
            let mut versions: Vec<PluginRecord> = store
                .list_plugins(tenant)?
                .into_iter()
                .filter(|p| p.name == *name && p.status != crate::model::PluginStatus::Failed)
                .collect();
            let picked = plugin
                .version
                .pick(versions.iter().map(|p| p.version.as_str()))
                .map(str::to_owned);
            if let Some(picked) = picked {
                let i = versions
                    .iter()
                    .position(|p| p.version == picked)
                    .expect("picked from these");
                return Ok(Ok(versions.swap_remove(i)));
            }
            let listed: Vec<&str> = versions
                .iter()
                .take(LISTED)
                .map(|p| p.version.as_str())
                .collect();
            Ok(Err(Unresolved(if listed.is_empty() {
                format!("plugin {plugin}: no version of `{name}` is uploaded")
            } else {
                let more = if versions.len() > LISTED { ", …" } else { "" };
                format!(
                    "plugin {plugin}: no uploaded version of `{name}` is in the range `{}` \
                     (uploaded: {}{more}; a range takes a pre-release only when it names one)",
                    plugin.version,
                    listed.join(", ")
                )
            })))
        }
        VersionSelector::Tag(tag) => {
            let Some(record) = store.get_plugin_tag(tenant, name, tag)? else {
                let tags: Vec<String> = store
                    .list_plugin_tags(tenant)?
                    .into_iter()
                    .filter(|t| t.name == *name)
                    .take(LISTED)
                    .map(|t| t.tag)
                    .collect();
                let known = if tags.is_empty() {
                    "it has none; set one with `ax plugin tag`".to_owned()
                } else {
                    format!("its tags: {}", tags.join(", "))
                };
                return Ok(Err(Unresolved(format!(
                    "plugin {plugin}: `{name}` has no tag `{tag}` ({known})"
                ))));
            };
            Ok(store
                .get_plugin(tenant, name, &record.version)?
                .ok_or_else(|| {
                    Unresolved(format!(
                        "plugin {plugin}: tag `{tag}` points at {}, which is not uploaded",
                        record.version
                    ))
                }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PluginTag;
    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;

    fn put(store: &MemoryStore, tenant: &str, version: &str) {
        store
            .put_plugin(&PluginRecord {
                tenant: tenant.into(),
                name: "p".into(),
                version: version.into(),
                digest: format!("{version:0>64}"),
                size: 1,
                created_at: 0,
                status: Default::default(),
                error: None,
            })
            .unwrap();
    }

    fn resolve(store: &MemoryStore, tenant: &str, r: &str) -> std::result::Result<String, String> {
        resolve_plugin(store, tenant, &r.parse().unwrap())
            .unwrap()
            .map(|p| p.version)
            .map_err(|e| e.0)
    }

    #[test]
    fn a_range_skips_a_version_that_failed_to_compile() {
        let store = MemoryStore::new();
        put(&store, "t1", "1.0.0");
        put(&store, "t1", "1.1.0");
        let mut failed = store.get_plugin("t1", "p", "1.1.0").unwrap().unwrap();
        failed.status = crate::model::PluginStatus::Failed;
        failed.error = Some("does not compile".into());
        store.put_plugin(&failed).unwrap();
        assert_eq!(resolve(&store, "t1", "p@^1").unwrap(), "1.0.0");
        // Named exactly, it resolves (the caller refuses it with its reason).
        assert_eq!(resolve(&store, "t1", "p@1.1.0").unwrap(), "1.1.0");
    }

    #[test]
    fn each_kind_of_reference_resolves_to_a_stored_version_of_its_tenant() {
        let store = MemoryStore::new();
        for v in ["1.0.0", "1.1.0", "1.2.0-rc.1", "2.0.0"] {
            put(&store, "t1", v);
        }
        put(&store, "t2", "1.9.0");
        assert_eq!(resolve(&store, "t1", "p@1.0.0").unwrap(), "1.0.0");
        assert_eq!(resolve(&store, "t1", "p@^1.0").unwrap(), "1.1.0");
        assert_eq!(
            resolve(&store, "t1", "p@>=1.2.0-rc.1, <2").unwrap(),
            "1.2.0-rc.1"
        );
        assert_eq!(resolve(&store, "t1", "p@*").unwrap(), "2.0.0");
        assert_eq!(
            resolve(&store, "t2", "p@^1").unwrap(),
            "1.9.0",
            "its own tenant's"
        );
        store
            .put_plugin_tag(&PluginTag {
                tenant: "t1".into(),
                name: "p".into(),
                tag: "stable".into(),
                version: "1.0.0".into(),
                updated_at: 0,
            })
            .unwrap();
        assert_eq!(resolve(&store, "t1", "p@stable").unwrap(), "1.0.0");
        let e = resolve(&store, "t2", "p@stable").unwrap_err();
        assert!(
            e.contains("has no tag `stable`") && e.contains("it has none"),
            "{e}"
        );
        let e = resolve(&store, "t1", "p@canary").unwrap_err();
        assert!(e.contains("its tags: stable"), "{e}");
        let e = resolve(&store, "t1", "p@^3").unwrap_err();
        assert!(
            e.contains("uploaded: 1.0.0, 1.1.0, 1.2.0-rc.1, 2.0.0"),
            "{e}"
        );
        let e = resolve(&store, "t1", "q@^3").unwrap_err();
        assert!(e.contains("no version of `q` is uploaded"), "{e}");
        let e = resolve(&store, "t1", "p@3.0.0").unwrap_err();
        assert_eq!(e, "plugin p@3.0.0 is not uploaded for this tenant");
        store.delete_plugin("t1", "p", "1.0.0").unwrap();
        let e = resolve(&store, "t1", "p@stable").unwrap_err();
        assert!(e.contains("points at 1.0.0, which is not uploaded"), "{e}");
    }
}
