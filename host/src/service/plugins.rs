//! Plugin operations of the facade ([`Ax`]): upload, list, show and delete
//! plugin versions, and set, move and delete tags. Versions are immutable; a blob is shared by digest across
//! tenants and deleted with the last version naming it.
//!
//! **Upload and compilation.** An upload is checked at once — name, version,
//! size, the tenant's quotas, then what needs no compiler
//! (`Runtime::check`: a full validation and the world's names) — stored
//! (blob and record, durably) and answered `compiling`; it compiles in the
//! background on a blocking thread, under the host's compile gate, and its
//! record moves to `ready` or to `failed` with the reason. Decisions:
//!
//! - **Bounds.** Host-wide, an upload holds its place in the upload line
//!   (`max_compiles + compile_queue`) from before its body is read until it
//!   is stored; `max_compiles` compilations run at once, the others wait
//!   their turn in order of arrival, holding no thread and no bytes (read
//!   back from the store when their turn comes). Per tenant, at most
//!   `max_compiling` versions are compiling or waiting to; one more is
//!   refused (429 `compile_queue_full`, `Retry-After`), counted from the
//!   stored records so it holds across restarts.
//! - **A failed compilation** keeps its record (status `failed`, the reason
//!   in `error`) and deletes its bytes (unless a version that is not failed
//!   shares them): nothing can run it, and the reason stays for `ax plugin
//!   show`. It counts against `max_plugins` (a tenant cannot pile up failed
//!   records) but not against `plugin_bytes`. Tasks may not name it; an
//!   upload of the same name and version replaces it.
//! - **A restart** compiles again every version still `compiling`
//!   ([`Ax::resume_compiles`]).
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

use crate::model::{PluginRecord, PluginStatus, PluginTag};
use crate::runtime::{self, UploadTicket};
use crate::service::{Ax, Error, Result};
use crate::task;

/// Largest plugin accepted by default (compiling untrusted input is bounded by size).
pub const DEFAULT_MAX_PLUGIN_BYTES: usize = 32 << 20;
/// Plugin versions a tenant may keep by default (its `max_plugins` quota).
pub const DEFAULT_MAX_PLUGINS_PER_TENANT: u32 = 100;
/// Bytes of plugin versions a tenant may keep by default (its `plugin_bytes`
/// quota): sixteen of the largest uploads, or hundreds of typical ones.
pub const DEFAULT_PLUGIN_BYTES_PER_TENANT: u64 = 512 << 20;
/// Versions one tenant may have compiling (or waiting to) at once by
/// default; one more is refused (429 `compile_queue_full`) until one is
/// ready or failed. A waiting compilation holds no thread and no bytes (they
/// are read from the store when its turn comes), only CPU time ahead of
/// other tenants' uploads: eight small plugins are a second or two, eight
/// componentize-py ones about a minute on two cores.
pub const DEFAULT_MAX_COMPILING_PER_TENANT: u32 = 8;

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
    /// Versions a tenant may have compiling at once.
    pub max_compiling: u32,
    /// Held from the check of an upload (or a deletion's "is the blob still
    /// used", or the record of a compilation's end) to its store write.
    writes: Arc<tokio::sync::Mutex<()>>,
}

/// A tenant's plugin versions against its plugin quotas.
pub(super) struct PluginUsage {
    pub(super) versions: u64,
    pub(super) bytes: u64,
    pub(super) max_plugins: u32,
    pub(super) max_bytes: u64,
}

impl PluginQuota {
    /// These defaults, with a fresh lock.
    pub fn new(max_plugins: u32, plugin_bytes: u64) -> Self {
        Self {
            max_plugins,
            plugin_bytes,
            max_compiling: DEFAULT_MAX_COMPILING_PER_TENANT,
            writes: Arc::default(),
        }
    }
}

impl PluginQuota {
    /// With `max` versions compiling per tenant at once (at least one).
    pub fn with_max_compiling(mut self, max: u32) -> Self {
        self.max_compiling = max.max(1);
        self
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
    /// Checks and stores a plugin version, then compiles it in the
    /// background: the record answers `compiling` (or `ready`, when these
    /// bytes are loaded already) and moves to `ready` or `failed`. Versions
    /// are immutable: the same bytes again answer with the existing record
    /// (`false`), other bytes 409 — except over a `failed` version, which an
    /// upload replaces. Takes a place in the host's compile line
    /// ([`crate::runtime::Runtime::admit_upload`]); the API takes it before
    /// reading the body and calls [`Ax::upload_plugin_admitted`].
    pub async fn upload_plugin(
        &self,
        tenant: &str,
        name: &str,
        version: &str,
        bytes: Vec<u8>,
    ) -> Result<(PluginRecord, bool)> {
        let place = self.runtime.admit_upload()?;
        self.upload_plugin_admitted(place, tenant, name, version, bytes)
            .await
    }

    /// [`Ax::upload_plugin`] with its place in the upload line taken (held
    /// until the upload is stored: at most `max_compiles + compile_queue`
    /// uploads hold their bytes host-wide).
    pub async fn upload_plugin_admitted(
        &self,
        place: UploadTicket,
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
        // Before checking the bytes, so a tenant at its quota costs nothing;
        // checked again, authoritatively, with the write.
        let existing = self.store.get_plugin(tenant, name, version)?;
        if existing.is_none() {
            self.check_plugin_quota(tenant, bytes.len() as u64, None)?;
            self.check_compiling(tenant)?;
        }
        // The cheap check (validation, the world's names) and the digest:
        // tens of milliseconds for 18 MiB, off the async threads.
        let runtime = self.runtime.clone();
        let (bytes, digest) = tokio::task::spawn_blocking(move || {
            runtime.check(&bytes)?;
            let digest = crate::runtime::digest(&bytes);
            Ok::<_, crate::runtime::Error>((bytes, digest))
        })
        .await
        .map_err(Error::Compile)??;
        let writes = self.plugin_quota.writes.clone();
        let writing = writes.lock().await;
        let replaced = match self.store.get_plugin(tenant, name, version)? {
            Some(existing) if existing.status != PluginStatus::Failed => {
                if existing.digest == digest {
                    return Ok((existing, false));
                }
                return Err(Error::Conflict(format!(
                    "plugin {name}@{version} already exists with another digest ({}); versions are immutable, upload a new version",
                    existing.digest
                )));
            }
            failed => failed,
        };
        self.check_plugin_quota(tenant, bytes.len() as u64, replaced.as_ref())?;
        self.check_compiling(tenant)?;
        // The same bytes loaded already (another version, another tenant):
        // nothing to compile.
        let loaded = self.runtime.get(&digest).is_some();
        let stored = self.store.put_blob(&bytes)?;
        if stored != digest {
            return Err(Error::Internal(format!(
                "the store filed plugin {name}@{version} as {stored}, its digest is {digest}"
            )));
        }
        let record = PluginRecord {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version: version.to_string(),
            digest,
            size: bytes.len() as u64,
            created_at: self.clock.now_ms(),
            status: if loaded {
                PluginStatus::Ready
            } else {
                PluginStatus::Compiling
            },
            error: None,
        };
        self.store.put_plugin(&record)?;
        drop(writing);
        // Durable before the answer: an accepted upload survives a crash,
        // and a `compiling` one is compiled again on the next start.
        self.sync().await?;
        drop((place, bytes));
        if !loaded {
            self.spawn_compile(record.clone(), None);
        }
        Ok((record, true))
    }

    /// Compiles `record`'s component in the background (joining a
    /// compilation of the same bytes already in progress; `slot` when it was
    /// reserved already), reading its bytes from the store when its turn
    /// comes, and records the result.
    fn spawn_compile(&self, record: PluginRecord, slot: Option<runtime::CompileSlot>) {
        let ax = self.clone();
        let store = self.store.clone();
        let digest = record.digest.clone();
        let read = move || match store.get_blob(&digest) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(runtime::Error::Host(format!(
                "its bytes ({digest}) are missing from the store"
            ))),
            Err(e) => Err(runtime::Error::Host(format!("reading its bytes: {e}"))),
        };
        tokio::spawn(async move {
            let result = match slot {
                Some(slot) => ax.runtime.compile_reserved(slot, read).await,
                None => ax.runtime.compile_shared(&record.digest, read).await,
            };
            ax.record_compiled(&record, result.map(|_| ())).await;
        });
    }

    /// Moves a `compiling` record to `ready`, or to `failed` with the reason
    /// (deleting its bytes unless another version that is not failed uses
    /// them). A record deleted or replaced meanwhile is left alone.
    async fn record_compiled(&self, record: &PluginRecord, result: Result<(), runtime::Error>) {
        let (tenant, name, version) = (&record.tenant, &record.name, &record.version);
        let outcome = async {
            let writes = self.plugin_quota.writes.clone();
            let writing = writes.lock().await;
            let Some(mut current) = self.store.get_plugin(tenant, name, version)? else {
                return Ok(());
            };
            if current.digest != record.digest || current.status != PluginStatus::Compiling {
                return Ok(());
            }
            match &result {
                Ok(()) => current.status = PluginStatus::Ready,
                Err(e) => {
                    current.status = PluginStatus::Failed;
                    current.error = Some(e.to_string());
                }
            }
            self.store.put_plugin(&current)?;
            if current.status == PluginStatus::Failed && !self.blob_used(&current.digest, true)? {
                self.store.delete_blob(&current.digest)?;
            }
            drop(writing);
            self.sync().await
        };
        match (outcome.await, &result) {
            (Err(e), _) => {
                tracing::error!(tenant = %tenant, plugin = %name, version = %version, error = %e, "recording a compilation failed")
            }
            (Ok(()), Ok(())) => {
                tracing::info!(tenant = %tenant, plugin = %name, version = %version, "plugin compiled: ready")
            }
            (Ok(()), Err(e)) => {
                tracing::warn!(tenant = %tenant, plugin = %name, version = %version, error = %e, "plugin did not compile: failed")
            }
        }
    }

    /// Whether a version of any tenant names `digest` (ignoring `failed`
    /// ones when `usable_only`): its blob must stay.
    fn blob_used(&self, digest: &str, usable_only: bool) -> Result<bool> {
        for t in self.tenants.tenants() {
            if self
                .store
                .list_plugins(&t.name)?
                .iter()
                .any(|p| p.digest == digest && !(usable_only && p.status == PluginStatus::Failed))
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Compiles again every version still `compiling` (the host stopped
    /// before it finished): nothing accepted is lost. Each is reserved at
    /// once (an attempt that needs it waits for it rather than compiling it
    /// itself), then compiled in the background in turn. Returns how many.
    pub fn resume_compiles(&self) -> Result<usize> {
        let mut count = 0;
        for t in self.tenants.tenants() {
            for record in self.store.list_plugins(&t.name)? {
                if record.status == PluginStatus::Compiling {
                    let slot = self.runtime.reserve_compile(&record.digest);
                    self.spawn_compile(record, slot);
                    count += 1;
                }
            }
        }
        if count > 0 {
            tracing::info!(
                count,
                "compiling plugin versions left compiling at the last stop"
            );
        }
        Ok(count)
    }

    /// Waits until a version is no longer `compiling` (at most `timeout`),
    /// and returns its record: what `ax plugin push --wait` polls for, for
    /// callers inside the host.
    pub async fn wait_plugin(
        &self,
        tenant: &str,
        name: &str,
        version: &str,
        timeout: std::time::Duration,
    ) -> Result<PluginRecord> {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let record = self.get_plugin(tenant, name, version)?;
            if record.status != PluginStatus::Compiling || tokio::time::Instant::now() >= until {
                return Ok(record);
            }
            if let Some(compilation) = self.runtime.compilation(&record.digest) {
                let _ = tokio::time::timeout_at(until, compilation.finished()).await;
            }
            // The result is recorded just after the compilation publishes it.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Refuses an upload while the tenant has `max_compiling` versions
    /// compiling: a tenant cannot queue compilations without bound.
    fn check_compiling(&self, tenant: &str) -> Result<()> {
        let compiling = self
            .store
            .list_plugins(tenant)?
            .iter()
            .filter(|p| p.status == PluginStatus::Compiling)
            .count();
        let max = self.plugin_quota.max_compiling;
        if compiling >= max as usize {
            return Err(Error::CompileBusy(format!(
                "tenant `{tenant}` has {compiling} plugin versions compiling, the most it may have at once ({max}); wait for one to be ready (`ax plugin push --wait`, `ax plugin show`) and upload again"
            )));
        }
        Ok(())
    }

    /// Refuses a new version of `size` bytes that the tenant's plugin quotas
    /// (its own, else the host's defaults) leave no room for. Every version
    /// counts its full size, even one whose bytes another version shares; a
    /// `failed` version (its bytes deleted) counts against `max_plugins`
    /// only. `replacing` is a failed version this upload replaces.
    fn check_plugin_quota(
        &self,
        tenant: &str,
        size: u64,
        replacing: Option<&PluginRecord>,
    ) -> Result<()> {
        let PluginUsage {
            versions,
            bytes: used,
            max_plugins,
            max_bytes,
        } = self.plugin_usage(tenant, replacing)?;
        if versions >= u64::from(max_plugins) {
            return Err(Error::TooManyPlugins(format!(
                "tenant `{tenant}` keeps {versions} plugin versions, its `max_plugins` quota is {max_plugins}; delete a version first"
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

    /// What a tenant's plugin versions take against its plugin quotas,
    /// leaving out `replacing` (an upload that replaces it). A failed
    /// version counts as a version, not for its bytes.
    pub(super) fn plugin_usage(
        &self,
        tenant: &str,
        replacing: Option<&PluginRecord>,
    ) -> Result<PluginUsage> {
        let quota = self.tenants.tenant(tenant).map(|t| t.quota);
        let kept: Vec<PluginRecord> = self
            .store
            .list_plugins(tenant)?
            .into_iter()
            .filter(|p| replacing.is_none_or(|r| (&r.name, &r.version) != (&p.name, &p.version)))
            .collect();
        Ok(PluginUsage {
            versions: kept.len() as u64,
            bytes: kept
                .iter()
                .filter(|p| p.status != PluginStatus::Failed)
                .map(|p| p.size)
                .sum(),
            max_plugins: quota
                .as_ref()
                .and_then(|q| q.max_plugins)
                .unwrap_or(self.plugin_quota.max_plugins),
            max_bytes: quota
                .as_ref()
                .and_then(|q| q.plugin_bytes)
                .unwrap_or(self.plugin_quota.plugin_bytes),
        })
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

    /// Which compiler's code the component `digest` runs in this host:
    /// Winch's while Cranelift compiles it behind (`Baseline`), then
    /// Cranelift's; `None` when it is not loaded.
    pub fn plugin_tier(&self, digest: &str) -> Option<runtime::Tier> {
        self.runtime.loaded_tier(digest)
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
        let still_used = self.blob_used(&record.digest, false)?;
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
