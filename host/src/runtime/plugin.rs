//! Loading plugins: a [`Plugin`] is a validated component with its imports
//! resolved once (`InstancePre`), kept in the loaded-plugin cache (bounded by
//! bytes) and reloaded from its on-disk artifact when evicted; compiled at
//! most once per digest, under the compile gate.
//!
//! With the Winch first tier, a component of at least
//! `CompilerConfig::baseline_min_bytes` is compiled with Winch, served, and
//! queued for its optimizing compilation ([`super::tier`]), which replaces
//! it. A component Winch cannot compile (a feature it lacks) gets the
//! configured compiler at once. A plugin records which engine compiled it:
//! its attempts' `Store`s are made from that engine.

use std::sync::{Arc, PoisonError};

use wasmtime::Engine;

use super::engine::{Backend, Tier};
use super::host::HostState;
use super::{Error, Result, Runtime, bindings, cache, validate};

/// A loaded, validated plugin: cheap to clone, ready to instantiate.
#[derive(Clone)]
pub struct Plugin {
    pub(super) inner: Arc<LoadedPlugin>,
}

pub(super) struct LoadedPlugin {
    digest: String,
    size: usize,
    /// What it is charged in the loaded-plugin cache (`cache::resident_bytes`).
    resident: u64,
    /// Which compiler's code it is.
    tier: Tier,
    /// Compiled by the first-tier engine (Winch behind tiering), whose
    /// smaller pool bounds its instances (`Inner::baseline_slots`).
    pub(super) first_tier: bool,
    /// The engine that compiled it: its `Store`s must come from it.
    pub(super) engine: Engine,
    /// Instantiated afresh for every attempt (`run`).
    pub(super) pre: bindings::TaskPre<HostState>,
}

impl Plugin {
    /// The sha256 of the component bytes, hex.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// The size of the component bytes (0 when loaded from its artifact).
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The bytes it keeps in memory while loaded, as the cache counts them.
    pub fn resident_bytes(&self) -> u64 {
        self.inner.resident
    }

    /// Which compiler's code it runs: Winch's (`Baseline`) or Cranelift's.
    pub fn tier(&self) -> Tier {
        self.inner.tier
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("digest", &self.inner.digest)
            .field("size", &self.inner.size)
            .field("tier", &self.inner.tier)
            .finish()
    }
}

/// Where a loaded plugin came from, for measurements and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadSource {
    /// Already loaded in this process.
    Memory,
    /// Deserialized from an artifact ax compiled earlier.
    DiskCache,
    /// Compiled now.
    Compiled,
}

impl Runtime {
    /// Validates `bytes` against the ax world and makes the plugin ready to run.
    ///
    /// Compiles at most once per digest: later loads come from memory or from
    /// the on-disk artifact cache. A compilation waits for one of the
    /// `max_compiles` permits. Blocking (compilation takes ~100 ms to
    /// seconds); call it from a blocking thread in async code.
    pub fn load(&self, bytes: &[u8]) -> Result<Plugin> {
        self.load_traced(bytes).map(|(plugin, _)| plugin)
    }

    /// Like [`Runtime::load`], also saying where the plugin came from.
    pub fn load_traced(&self, bytes: &[u8]) -> Result<(Plugin, LoadSource)> {
        validate::check_header(bytes)?;
        let digest = cache::digest(bytes);
        if let Some(found) = self.load_cached_traced(&digest)? {
            return Ok(found);
        }
        let baseline = self
            .inner
            .baseline
            .as_ref()
            .filter(|_| bytes.len() >= self.inner.config.compiler.baseline_min_bytes());
        // Winch's artifact from before a restart (or an earlier `ax exec`):
        // served again, and tiered up unless Winch's code is kept.
        if let Some(baseline) = baseline
            && let Some(found) = self.load_artifact(baseline, &digest)?
        {
            self.queue_tier_up(&digest, bytes);
            return Ok((found, LoadSource::DiskCache));
        }
        let _permit = self.inner.gate.permit();
        // Another load of the same bytes may have compiled them meanwhile.
        if let Some(found) = self.load_cached_traced(&digest)? {
            return Ok(found);
        }
        if let Some(baseline) = baseline {
            match cache::ArtifactCache::compile(&baseline.engine, bytes) {
                Ok(component) => {
                    let plugin = self.prepare(baseline, &digest, bytes.len(), &component)?;
                    baseline.cache.store(&digest, &component);
                    self.keep(&plugin);
                    self.queue_tier_up(&digest, bytes);
                    return Ok((plugin, LoadSource::Compiled));
                }
                // The check before found the bytes valid: most likely a
                // feature Winch lacks. The configured compiler has the last word.
                Err(e) => {
                    tracing::info!(digest, error = %e, "Winch did not compile the component: compiling it with the optimizing compiler at once");
                }
            }
        }
        let backend = &self.inner.backend;
        let component = cache::ArtifactCache::compile(&backend.engine, bytes)?;
        let plugin = self.prepare(backend, &digest, bytes.len(), &component)?;
        // Only a valid component's artifact is kept: distinct invalid uploads
        // leave nothing on disk.
        backend.cache.store(&digest, &component);
        self.keep(&plugin);
        Ok((plugin, LoadSource::Compiled))
    }

    /// The plugin with this digest from memory, else from the artifact ax
    /// compiled earlier (no compilation; `None` when neither has it).
    /// Blocking: a disk load reads and deserializes the artifact.
    pub fn load_cached(&self, digest: &str) -> Result<Option<Plugin>> {
        Ok(self.load_cached_traced(digest)?.map(|(plugin, _)| plugin))
    }

    /// From memory (either tier), else the configured compiler's artifact:
    /// Winch's artifact needs the bytes to tier up, so only
    /// [`Runtime::load`] takes it.
    fn load_cached_traced(&self, digest: &str) -> Result<Option<(Plugin, LoadSource)>> {
        if let Some(plugin) = self.get(digest) {
            return Ok(Some((plugin, LoadSource::Memory)));
        }
        Ok(self
            .load_artifact(&self.inner.backend, digest)?
            .map(|plugin| (plugin, LoadSource::DiskCache)))
    }

    /// `backend`'s artifact of `digest`, loaded and kept, if it has one.
    fn load_artifact(&self, backend: &Backend, digest: &str) -> Result<Option<Plugin>> {
        let Some(component) = backend.cache.load(&backend.engine, digest) else {
            return Ok(None);
        };
        match self.prepare(backend, digest, 0, &component) {
            Ok(plugin) => {
                self.keep(&plugin);
                Ok(Some(plugin))
            }
            Err(e) => {
                // An artifact written before invalid components stopped being
                // cached; drop it, the caller compiles and reports the error.
                tracing::warn!(digest, error = %e, "discarding the artifact of an invalid component");
                backend.cache.remove(digest);
                Ok(None)
            }
        }
    }

    /// Checks the world and resolves the imports once (`InstancePre`), with
    /// `backend`'s linker (the one of the engine that compiled `component`).
    pub(super) fn prepare(
        &self,
        backend: &Backend,
        digest: &str,
        size: usize,
        component: &wasmtime::component::Component,
    ) -> Result<Plugin> {
        validate::check_world(&backend.engine, component)?;
        let pre = backend.linker.instantiate_pre(component).map_err(|e| {
            Error::UnsupportedImport(format!("an interface of the wrong type ({e:#})"))
        })?;
        let pre = bindings::TaskPre::new(pre)
            .map_err(|e| Error::WrongWorld(format!("its `run` export does not match ({e:#})")))?;
        let first_tier = self
            .inner
            .baseline
            .as_ref()
            .is_some_and(|b| std::ptr::eq(b, backend));
        Ok(Plugin {
            inner: Arc::new(LoadedPlugin {
                digest: digest.to_string(),
                size,
                resident: cache::resident_bytes(component),
                tier: backend.tier,
                first_tier,
                engine: backend.engine.clone(),
                pre,
            }),
        })
    }

    pub(super) fn keep(&self, plugin: &Plugin) {
        let (digest, bytes) = (plugin.digest().to_string(), plugin.resident_bytes());
        if !self.lock_loaded().insert(digest, plugin.clone(), bytes) {
            tracing::warn!(
                digest = plugin.digest(),
                bytes,
                budget = self.inner.config.loaded_bytes,
                "a plugin larger than the loaded-plugin budget is not kept in memory"
            );
        }
    }

    /// A plugin already loaded in this process, by digest.
    pub fn get(&self, digest: &str) -> Option<Plugin> {
        self.lock_loaded().get(digest)
    }

    /// The tier of the code a loaded plugin runs (`None` when it is not
    /// loaded), without counting as a use of it.
    pub fn loaded_tier(&self, digest: &str) -> Option<Tier> {
        self.lock_loaded().peek(digest).map(Plugin::tier)
    }

    /// Forgets a loaded plugin, its tier-up and its cached artifacts
    /// (after it is deleted).
    pub fn evict(&self, digest: &str) {
        // First, so a tier-up compiling it does not put it back.
        self.inner.tier_ups.cancel(digest);
        self.lock_loaded().remove(digest);
        self.inner.backend.cache.remove(digest);
        if let Some(baseline) = &self.inner.baseline {
            baseline.cache.remove(digest);
        }
    }

    pub(super) fn lock_loaded(&self) -> std::sync::MutexGuard<'_, cache::Lru<Plugin>> {
        // Each update of the map completes before the lock is released and
        // none calls out while holding it, so a panic elsewhere cannot leave
        // it half-updated: a poisoned lock is safe to use.
        self.inner
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use crate::runtime::fixtures::{context, example};
    use std::path::PathBuf;

    use super::*;
    use crate::model::{Limits, Outcome};
    use crate::runtime::RuntimeConfig;

    /// Room for the larger of echo and hello, not both.
    fn one_plugin_runtime(cache_dir: Option<PathBuf>) -> Runtime {
        let probe = Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let echo = probe.load(&example("echo")).unwrap().resident_bytes();
        let hello = probe.load(&example("hello")).unwrap().resident_bytes();
        Runtime::new(RuntimeConfig {
            pooling: false,
            cache_dir,
            loaded_bytes: echo + hello - 1,
            ..RuntimeConfig::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn an_evicted_plugin_still_runs_for_whoever_holds_it() {
        let runtime = one_plugin_runtime(None);
        let echo = runtime.load(&example("echo")).unwrap();
        let hello = runtime.load(&example("hello")).unwrap();
        assert!(
            runtime.get(echo.digest()).is_none(),
            "echo made room for hello"
        );
        assert!(runtime.get(hello.digest()).is_some());
        let stats = runtime.stats();
        assert_eq!((stats.loaded, stats.evictions), (1, 1));
        assert_eq!(stats.loaded_bytes, hello.resident_bytes());
        assert!(stats.loaded_bytes <= stats.loaded_budget);
        let report = runtime
            .run(&echo, &context(), r#"{"x":1}"#, &Limits::default(), None)
            .await
            .unwrap();
        assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
        assert_eq!(report.output.unwrap()["input"]["x"], 1);
    }

    #[test]
    fn an_evicted_plugin_comes_back_from_its_artifact_without_compiling() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = one_plugin_runtime(Some(dir.path().to_path_buf()));
        let echo = runtime.load(&example("echo")).unwrap();
        runtime.load(&example("hello")).unwrap();
        assert!(runtime.get(echo.digest()).is_none());
        let (_, source) = runtime.load_traced(&example("echo")).unwrap();
        assert_eq!(source, LoadSource::DiskCache);
        // By digest alone, as the scheduler reloads it: hello is evicted now.
        let hello = cache::digest(&example("hello"));
        assert!(runtime.get(&hello).is_none());
        assert!(runtime.load_cached(&hello).unwrap().is_some());
        assert!(runtime.load_cached(&"0".repeat(64)).unwrap().is_none());
    }

    #[test]
    fn an_invalid_component_leaves_no_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(RuntimeConfig {
            pooling: false,
            cache_dir: Some(dir.path().to_path_buf()),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let err = runtime.load(&example("invalid-not-ax")).unwrap_err();
        assert!(matches!(err, Error::WrongWorld(_)), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(runtime.stats().loaded, 0);
    }
}
