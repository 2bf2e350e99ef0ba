//! Compiled-artifact cache. Compiling a component takes ~100 ms; loading an
//! artifact ax compiled earlier takes about a millisecond. Artifacts are
//! keyed by the component's sha256 *and* a fingerprint of the engine's
//! settings, because an artifact compiled with other settings is refused.
//!
//! Only files this module wrote are ever deserialized (deserializing is
//! `unsafe`: the bytes become machine code). Bytes a user sent are always
//! compiled, never deserialized.

use std::fs;
use std::hash::Hasher;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{Error, LoadSource, Result};

/// The sha256 of `bytes`, hex: a plugin's identity.
pub(crate) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Feeds `std::hash::Hash` output into sha256 so the fingerprint is stable
/// (unlike `DefaultHasher`, whose algorithm may change between Rust releases).
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        let bytes = self.0.clone().finalize();
        u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default())
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
    fingerprint: String,
}

impl ArtifactCache {
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine) -> Result<Self> {
        if let Some(dir) = &dir {
            fs::create_dir_all(dir).map_err(|e| {
                Error::Host(format!(
                    "creating the artifact cache {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let mut hasher = ShaHasher(Sha256::new());
        std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
        let fingerprint = hex::encode(&hasher.0.finalize()[..8]);
        Ok(Self { dir, fingerprint })
    }

    fn path(&self, digest: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{digest}-{}.cwasm", self.fingerprint)))
    }

    /// The compiled component for `bytes`, from disk when ax compiled it before.
    pub(crate) fn component(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(Component, LoadSource)> {
        if let Some(path) = self.path(digest)
            && path.exists()
        {
            match load_artifact(engine, &path) {
                Ok(component) => return Ok((component, LoadSource::DiskCache)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "discarding unusable cached artifact");
                    let _ = fs::remove_file(&path);
                }
            }
        }
        let component =
            Component::new(engine, bytes).map_err(|e| Error::Invalid(format!("{e:#}")))?;
        if let Some(path) = self.path(digest)
            && let Err(e) = store_artifact(&component, &path)
        {
            // The cache is an optimisation: a failed write costs a recompile later.
            tracing::warn!(path = %path.display(), error = %e, "could not cache compiled artifact");
        }
        Ok((component, LoadSource::Compiled))
    }

    pub(crate) fn remove(&self, digest: &str) {
        if let Some(path) = self.path(digest) {
            let _ = fs::remove_file(path);
        }
    }
}

#[allow(unsafe_code)]
fn load_artifact(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // Read into memory rather than `deserialize_file`'s mmap: a mapped file
    // truncated underneath us (someone clearing the cache) would SIGBUS the host.
    let bytes = fs::read(path)?;
    // SAFETY: the file sits in ax's own cache directory under a name derived
    // from the digest of bytes ax compiled, and was written by `store_artifact`
    // below (atomically, via rename). wasmtime additionally checks its header
    // against this engine's settings and refuses a mismatch.
    unsafe { Component::deserialize(engine, &bytes) }
}

fn store_artifact(component: &Component, path: &Path) -> anyhow::Result<()> {
    let bytes = component.serialize()?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    Ok(())
}
