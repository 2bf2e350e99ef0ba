//! Compilations in progress, by digest: one compilation per component at a
//! time, however many want it (the upload that started it, an upload of the
//! same bytes under another name, attempts of a task that names a version
//! still compiling). Whoever starts one holds a [`CompileSlot`]; everyone
//! else waits on a [`Compilation`] for its result, without a thread.
//!
//! A compilation's result is published before its entry is removed, so a
//! waiter either sees the entry (and gets the result) or finds the plugin
//! loaded (or, if it failed, nothing: the caller's record says why).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use super::{Error, Plugin, Result, Runtime};

/// What waiters see: `None` until the compilation ends.
type Published = Option<Result<Plugin, Error>>;

/// The compilations in progress.
#[derive(Default)]
pub(super) struct Flights {
    by_digest: Mutex<HashMap<String, watch::Receiver<Published>>>,
}

impl Flights {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, watch::Receiver<Published>>> {
        // Each change is one insert or remove: a panic elsewhere cannot leave
        // the map half-updated, so a poisoned lock is safe to use.
        self.by_digest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Digests being compiled now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The right (and the duty) to compile one digest: created by
/// [`Runtime::reserve_compile`], ended by [`CompileSlot::compile`] or
/// [`CompileSlot::fail`]. Dropped without either, its waiters are told it was
/// abandoned.
#[must_use = "waiters wait until the slot compiles, fails or is dropped"]
pub struct CompileSlot {
    runtime: Runtime,
    digest: String,
    tx: Option<watch::Sender<Published>>,
}

impl CompileSlot {
    /// The digest this slot compiles.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Compiles `bytes` (blocking: call it on a blocking thread), keeps the
    /// plugin loaded and tells every waiter the result.
    pub fn compile(mut self, bytes: &[u8]) -> Result<Plugin> {
        let result = self.runtime.load(bytes).and_then(|plugin| {
            if plugin.digest() == self.digest {
                Ok(plugin)
            } else {
                Err(Error::Host(format!(
                    "the bytes given to compile {} have the digest {}",
                    self.digest,
                    plugin.digest()
                )))
            }
        });
        self.publish(result.clone());
        result
    }

    /// Ends the compilation without compiling (its bytes could not be read).
    pub fn fail(mut self, error: Error) {
        self.publish(Err(error));
    }

    fn publish(&mut self, result: Result<Plugin, Error>) {
        if let Some(tx) = self.tx.take() {
            // `send_replace`: there may be no waiter; the value is kept anyway.
            tx.send_replace(Some(result));
        }
        self.runtime.inner.flights.lock().remove(&self.digest);
    }
}

impl Drop for CompileSlot {
    fn drop(&mut self) {
        if self.tx.is_some() {
            self.publish(Err(Error::Host(format!(
                "the compilation of {} was abandoned",
                self.digest
            ))));
        }
    }
}

impl std::fmt::Debug for CompileSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileSlot")
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// A compilation someone else is running; await its result.
#[derive(Debug)]
pub struct Compilation {
    rx: watch::Receiver<Published>,
}

impl Compilation {
    /// The compiled plugin, or why it did not compile.
    pub async fn finished(mut self) -> Result<Plugin> {
        match self.rx.wait_for(Option::is_some).await {
            Ok(published) => published
                .clone()
                .unwrap_or_else(|| Err(Error::Host("a compilation published nothing".into()))),
            Err(_) => Err(Error::Host("the compilation ended without a result".into())),
        }
    }
}

impl Runtime {
    /// Reserves the compilation of `digest`, or `None` when one is in
    /// progress already ([`Runtime::compilation`] waits for it).
    pub fn reserve_compile(&self, digest: &str) -> Option<CompileSlot> {
        let mut flights = self.inner.flights.lock();
        if flights.contains_key(digest) {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        flights.insert(digest.to_string(), rx);
        Some(CompileSlot {
            runtime: self.clone(),
            digest: digest.to_string(),
            tx: Some(tx),
        })
    }

    /// The compilation of `digest` in progress, if there is one.
    pub fn compilation(&self, digest: &str) -> Option<Compilation> {
        let rx = self.inner.flights.lock().get(digest)?.clone();
        Some(Compilation { rx })
    }

    /// Compiles the component `digest` whose bytes `read` returns, or waits
    /// for its compilation already in progress. Reserves it at once (so
    /// whoever needs it meanwhile waits for this one), then waits for a turn
    /// (`max_compiles` at once, first come first served) holding neither a
    /// thread nor the bytes, then reads and compiles on a blocking thread.
    pub async fn compile_shared<F>(&self, digest: &str, read: F) -> Result<Plugin>
    where
        F: FnOnce() -> Result<Vec<u8>> + Send + 'static,
    {
        loop {
            if let Some(compilation) = self.compilation(digest) {
                return compilation.finished().await;
            }
            if let Some(slot) = self.reserve_compile(digest) {
                return self.compile_reserved(slot, read).await;
            }
            // Reserved by someone else between the two looks: wait for theirs.
        }
    }

    /// [`Runtime::compile_shared`] for a slot reserved earlier.
    pub async fn compile_reserved<F>(&self, slot: CompileSlot, read: F) -> Result<Plugin>
    where
        F: FnOnce() -> Result<Vec<u8>> + Send + 'static,
    {
        // The semaphore is never closed; a failure here would be a bug.
        let _turn = self
            .inner
            .turns
            .acquire()
            .await
            .map_err(|e| Error::Host(format!("the compile turns: {e}")))?;
        tokio::task::spawn_blocking(move || match read() {
            Ok(bytes) => slot.compile(&bytes),
            Err(e) => {
                slot.fail(e.clone());
                Err(e)
            }
        })
        .await
        .map_err(|e| Error::Host(format!("the compile thread: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimeConfig;
    use crate::runtime::fixtures::example;

    fn runtime() -> Runtime {
        Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_waiter_gets_the_result_of_the_compilation_in_progress() {
        let runtime = runtime();
        let echo = example("echo");
        let digest = super::super::cache::digest(&echo);
        let slot = runtime.reserve_compile(&digest).expect("nothing in flight");
        assert!(runtime.reserve_compile(&digest).is_none(), "one at a time");
        let waiter = runtime.compilation(&digest).expect("in flight");
        let compiled = tokio::task::spawn_blocking(move || slot.compile(&echo))
            .await
            .unwrap()
            .unwrap();
        let waited = waiter.finished().await.unwrap();
        assert_eq!(waited.digest(), compiled.digest());
        assert!(runtime.compilation(&digest).is_none(), "removed once done");
        assert_eq!(runtime.inner.flights.len(), 0);
    }

    #[tokio::test]
    async fn a_failed_or_abandoned_compilation_tells_its_waiters_why() {
        let runtime = runtime();
        let bad = example("invalid_wrong_signature");
        let digest = super::super::cache::digest(&bad);
        let slot = runtime.reserve_compile(&digest).unwrap();
        let waiter = runtime.compilation(&digest).unwrap();
        let err = slot.compile(&bad).unwrap_err();
        assert!(matches!(err, Error::WrongWorld(_)), "{err}");
        let waited = waiter.finished().await.unwrap_err();
        assert_eq!(waited.to_string(), err.to_string());

        let slot = runtime.reserve_compile("abc").unwrap();
        let waiter = runtime.compilation("abc").unwrap();
        drop(slot);
        let err = waiter.finished().await.unwrap_err();
        assert!(err.to_string().contains("abandoned"), "{err}");
        assert!(runtime.reserve_compile("abc").is_some(), "free again");
    }
}
