//! Plugin operations of the facade ([`Ax`]): upload (checked against the
//! name and version rules and the tenant's plugin quotas, compiled before it
//! is stored), list, show and delete plugin versions, and set, move and
//! delete tags. Versions are immutable; a blob is shared by digest across
//! tenants and deleted with the last version naming it.
//!
//! Tags (`plugin@stable`) are records of their own, per tenant and plugin
//! name, pointing at one stored version; at most [`MAX_TAGS_PER_PLUGIN`] per
//! plugin name and [`MAX_TAGS_PER_TENANT`] per tenant. Decisions: a version
//! a tag points at cannot be deleted (move or delete the tag first), and a
//! tag a saved task names cannot be deleted (it can be moved); so neither a
//! pinned task nor a tagged one is left naming nothing by a deletion. A
//! range is not protected that way: deleting the last version it matches is
//! allowed, and the next attempt of a task naming it fails with the reason.

use std::sync::Arc;

use crate::model::{PluginRecord, PluginTag};
use crate::service::{Ax, Error, Result};
use crate::task;

/// Largest plugin accepted by default (compiling untrusted input is bounded by size).
pub const DEFAULT_MAX_PLUGIN_BYTES: usize = 32 << 20;
/// Plugin versions a tenant may keep by default (its `max_plugins` quota).
pub const DEFAULT_MAX_PLUGINS_PER_TENANT: u32 = 100;
/// Bytes of plugin versions a tenant may keep by default (its `plugin_bytes`
/// quota): sixteen of the largest uploads, or hundreds of typical ones.
pub const DEFAULT_PLUGIN_BYTES_PER_TENANT: u64 = 512 << 20;

/// Tags one plugin name may have.
pub const MAX_TAGS_PER_PLUGIN: usize = 20;
/// Tags one tenant may have, over all its plugins.
pub const MAX_TAGS_PER_TENANT: usize = 200;

/// A plugin as listed: its record plus which tasks use it.
pub type PluginList = Vec<PluginRecord>;

/// The host's default per-tenant plugin quotas (a tenant's own `max_plugins`
/// and `plugin_bytes` replace them), and the lock that makes an upload's
/// quota check and its store write one step: two uploads that only one fits
/// cannot both pass.
#[derive(Clone, Debug)]
pub struct PluginQuota {
    /// Plugin versions a tenant may keep.
    pub max_plugins: u32,
    /// Bytes of plugin versions (the sum of their sizes) a tenant may keep.
    pub plugin_bytes: u64,
    /// Held from the check of an upload (or a deletion's "is the blob still
    /// used") to its store write. Uploads compile before taking it.
    writes: Arc<tokio::sync::Mutex<()>>,
}

impl PluginQuota {
    /// These defaults, with a fresh lock.
    pub fn new(max_plugins: u32, plugin_bytes: u64) -> Self {
        Self {
            max_plugins,
            plugin_bytes,
            writes: Arc::default(),
        }
    }
}

impl Default for PluginQuota {
    fn default() -> Self {
        Self::new(
            DEFAULT_MAX_PLUGINS_PER_TENANT,
            DEFAULT_PLUGIN_BYTES_PER_TENANT,
        )
    }
}

impl Ax {
    /// Validates and stores a plugin version. Versions are immutable: the same
    /// bytes again answer with the existing record (`false`), other bytes 409.
    pub async fn upload_plugin(
        &self,
        tenant: &str,
        name: &str,
        version: &str,
        bytes: Vec<u8>,
    ) -> Result<(PluginRecord, bool)> {
        // The rules a task names a plugin by: a version no task could refer
        // to is refused here.
        if !task::is_valid_name(name) {
            return Err(Error::BadRequest(format!(
                "plugin name `{name}` must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}"
            )));
        }
        if !task::is_valid_version(version) {
            return Err(Error::BadRequest(format!(
                "plugin version `{version}` is not semver 2.0 (MAJOR.MINOR.PATCH without \
                 leading zeros, then optional -pre.release and +build)"
            )));
        }
        if bytes.len() > self.max_plugin_bytes {
            return Err(Error::TooLarge(format!(
                "plugin of {} bytes is above the limit of {} bytes",
                bytes.len(),
                self.max_plugin_bytes
            )));
        }
        // Before compiling, so a tenant at its quota costs no compilation;
        // checked again, authoritatively, with the write.
        if self.store.get_plugin(tenant, name, version)?.is_none() {
            self.check_plugin_quota(tenant, bytes.len() as u64)?;
        }
        let runtime = self.runtime.clone();
        let (plugin, bytes) =
            tokio::task::spawn_blocking(move || runtime.load(&bytes).map(|p| (p, bytes)))
                .await
                .map_err(Error::Compile)??;
        let writes = self.plugin_quota.writes.clone();
        let _writing = writes.lock().await;
        if let Some(existing) = self.store.get_plugin(tenant, name, version)? {
            if existing.digest == plugin.digest() {
                return Ok((existing, false));
            }
            return Err(Error::Conflict(format!(
                "plugin {name}@{version} already exists with another digest ({}); versions are immutable, upload a new version",
                existing.digest
            )));
        }
        self.check_plugin_quota(tenant, bytes.len() as u64)?;
        let digest = self.store.put_blob(&bytes)?;
        let record = PluginRecord {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version: version.to_string(),
            digest,
            size: bytes.len() as u64,
            created_at: self.clock.now_ms(),
        };
        self.store.put_plugin(&record)?;
        drop(_writing);
        self.sync().await?;
        Ok((record, true))
    }

    /// Refuses a new version of `size` bytes that the tenant's plugin quotas
    /// (its own, else the host's defaults) leave no room for. Every version
    /// counts its full size, even one whose bytes another version shares.
    fn check_plugin_quota(&self, tenant: &str, size: u64) -> Result<()> {
        let quota = self.tenants.tenant(tenant).map(|t| t.quota);
        let max_plugins = quota
            .as_ref()
            .and_then(|q| q.max_plugins)
            .unwrap_or(self.plugin_quota.max_plugins);
        let max_bytes = quota
            .as_ref()
            .and_then(|q| q.plugin_bytes)
            .unwrap_or(self.plugin_quota.plugin_bytes);
        let kept = self.store.list_plugins(tenant)?;
        let used: u64 = kept.iter().map(|p| p.size).sum();
        if kept.len() as u64 >= u64::from(max_plugins) {
            return Err(Error::TooManyPlugins(format!(
                "tenant `{tenant}` keeps {} plugin versions, its `max_plugins` quota is {max_plugins}; delete a version first",
                kept.len()
            )));
        }
        if used.saturating_add(size) > max_bytes {
            return Err(Error::PluginBytesQuota(format!(
                "a plugin of {size} bytes would take tenant `{tenant}`'s plugins to {} bytes, over its `plugin_bytes` quota of {max_bytes} bytes ({used} in use)",
                used.saturating_add(size)
            )));
        }
        Ok(())
    }

    /// A tenant's plugins.
    pub fn list_plugins(&self, tenant: &str) -> Result<PluginList> {
        Ok(self.store.list_plugins(tenant)?)
    }

    /// The versions of one plugin.
    pub fn plugin_versions(&self, tenant: &str, name: &str) -> Result<Vec<PluginRecord>> {
        let versions: Vec<_> = self
            .store
            .list_plugins(tenant)?
            .into_iter()
            .filter(|p| p.name == name)
            .collect();
        if versions.is_empty() {
            return Err(Error::NotFound(format!("plugin `{name}`")));
        }
        Ok(versions)
    }

    /// One plugin version.
    pub fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<PluginRecord> {
        self.store
            .get_plugin(tenant, name, version)?
            .ok_or_else(|| Error::NotFound(format!("plugin {name}@{version}")))
    }

    /// Deletes a plugin version no task pins and no tag points at (409
    /// naming the tasks or the tags otherwise).
    pub async fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<()> {
        let record = self.get_plugin(tenant, name, version)?;
        let users = self.tasks_naming(tenant, name, |v| v.exact() == Some(version))?;
        if !users.is_empty() {
            return Err(Error::Conflict(format!(
                "plugin {name}@{version} is used by task(s) {}; apply them with another version (`ax task apply`) or delete them (`ax task delete`) first",
                users.join(", ")
            )));
        }
        let writes = self.plugin_quota.writes.clone();
        // Under the lock, so a tag cannot be moved onto it in between.
        let writing = writes.lock().await;
        let tags: Vec<String> = self
            .store
            .list_plugin_tags(tenant)?
            .into_iter()
            .filter(|t| t.name == name && t.version == version)
            .map(|t| t.tag)
            .collect();
        if !tags.is_empty() {
            return Err(Error::Conflict(format!(
                "plugin {name}@{version} is the target of tag(s) {}; move them (`ax plugin tag {name}@OTHER TAG`) or delete them (`ax plugin untag {name} TAG`) first",
                tags.join(", ")
            )));
        }
        self.store.delete_plugin(tenant, name, version)?;
        self.scheduler.plugin_deleted(tenant, name, version);
        // Blobs are stored by digest for all tenants: keep one another
        // version (of any tenant) still names. Under the write lock, so an
        // upload of the same bytes cannot land in between.
        let mut still_used = false;
        for t in self.tenants.tenants() {
            if self
                .store
                .list_plugins(&t.name)?
                .iter()
                .any(|p| p.digest == record.digest)
            {
                still_used = true;
                break;
            }
        }
        if !still_used {
            self.store.delete_blob(&record.digest)?;
            self.runtime.evict(&record.digest);
        }
        drop(writing);
        self.sync().await
    }
}

impl Ax {
    /// The tasks of `tenant` with a step naming plugin `name` by a version
    /// selector `names` accepts.
    fn tasks_naming(
        &self,
        tenant: &str,
        name: &str,
        names: impl Fn(&task::VersionSelector) -> bool,
    ) -> Result<Vec<String>> {
        Ok(self
            .list_specs(tenant)?
            .into_iter()
            .filter(|(_, spec)| {
                spec.steps
                    .iter()
                    .any(|s| s.plugin.name == name && names(&s.plugin.version))
            })
            .map(|(t, _)| t.name)
            .collect())
    }

    /// A tenant's plugin tags, by plugin name then tag.
    pub fn plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>> {
        Ok(self.store.list_plugin_tags(tenant)?)
    }

    /// Points tag `tag` of plugin `name` at `version` (creating or moving
    /// it), and gives the version it pointed at before. The version must be
    /// stored; the tag must be a valid tag name and within the bounds. Runs
    /// already started keep the version they resolved; the next attempt of a
    /// task naming `name@tag` takes the new one.
    pub async fn set_plugin_tag(
        &self,
        tenant: &str,
        name: &str,
        tag: &str,
        version: &str,
    ) -> Result<(PluginTag, Option<String>)> {
        // `invalid` (422), not `bad_request`: `x` has a tag's shape but
        // reads as a range, which only this check knows.
        if !task::is_valid_tag(tag) {
            return Err(Error::Invalid {
                path: Some("tag".into()),
                message: format!(
                    "tag `{}` is not valid: a name ([A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}) that starts with a letter and does not read as a version range (`x` is one)",
                    crate::template::shorten(tag)
                ),
            });
        }
        if !task::is_valid_version(version) {
            return Err(Error::Invalid {
                path: Some("version".into()),
                message: format!(
                    "a tag points at an exact version, and `{}` is not one (like 1.2.0)",
                    crate::template::shorten(version)
                ),
            });
        }
        let writes = self.plugin_quota.writes.clone();
        // With the deletion's check: a version cannot go while a tag moves onto it.
        let _writing = writes.lock().await;
        self.get_plugin(tenant, name, version)?;
        let tags = self.store.list_plugin_tags(tenant)?;
        let previous = tags
            .iter()
            .find(|t| t.name == name && t.tag == tag)
            .map(|t| t.version.clone());
        if previous.is_none() {
            let of_plugin = tags.iter().filter(|t| t.name == name).count();
            if of_plugin >= MAX_TAGS_PER_PLUGIN {
                return Err(Error::Conflict(format!(
                    "plugin `{name}` has {of_plugin} tags, the most a plugin may have ({MAX_TAGS_PER_PLUGIN}); delete one first (`ax plugin untag {name} TAG`)"
                )));
            }
            if tags.len() >= MAX_TAGS_PER_TENANT {
                return Err(Error::Conflict(format!(
                    "tenant `{tenant}` has {} plugin tags, the most a tenant may have ({MAX_TAGS_PER_TENANT}); delete one first (`ax plugin untag NAME TAG`)",
                    tags.len()
                )));
            }
        }
        let record = PluginTag {
            tenant: tenant.to_string(),
            name: name.to_string(),
            tag: tag.to_string(),
            version: version.to_string(),
            updated_at: self.clock.now_ms(),
        };
        self.store.put_plugin_tag(&record)?;
        drop(_writing);
        self.sync().await?;
        Ok((record, previous))
    }

    /// Deletes tag `tag` of plugin `name`, unless a saved task names
    /// `name@tag` (409 naming the tasks).
    pub async fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<()> {
        let users = self.tasks_naming(tenant, name, |v| v.tag() == Some(tag))?;
        if !users.is_empty() {
            return Err(Error::Conflict(format!(
                "tag {name}@{tag} is used by task(s) {}; move it instead (`ax plugin tag {name}@VERSION {tag}`), or apply them with another version first",
                users.join(", ")
            )));
        }
        let writes = self.plugin_quota.writes.clone();
        let writing = writes.lock().await;
        if !self.store.delete_plugin_tag(tenant, name, tag)? {
            return Err(Error::NotFound(format!("tag {name}@{tag}")));
        }
        drop(writing);
        self.sync().await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_and_versions_are_checked() {
        use crate::task::{is_valid_name as valid_name, is_valid_version as valid_version};
        assert!(valid_name("extract-orders"));
        assert!(!valid_name("-x"));
        assert!(!valid_name("a/b"));
        assert!(valid_version("1.2.0"));
        assert!(valid_version("1.0.0-rc.1"));
        assert!(!valid_version("1.2"));
        assert!(!valid_version("v1.2.3"));
        // Semver has no leading zeros; a task could not name such a version.
        assert!(!valid_version("01.2.3"));
        assert!(!valid_version("1.0.0-"));
        assert!("p@1.0.0-rc.1".parse::<crate::task::PluginRef>().is_ok());
    }
}
