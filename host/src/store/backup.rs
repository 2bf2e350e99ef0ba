//! [`Backup`]: what a whole-store dump (`store::dump`, `ax store export` /
//! `import`) needs that the other concepts do not give: the ordered maps of
//! the capability stores (the plugins' key-value entries with their usage
//! counters, tenants' secrets) read whole, a page at a time, and written
//! back verbatim.
//!
//! Everything else a dump holds is read and written through the other
//! concepts' own methods (tenants, tokens, plugins and blobs, tags, tasks
//! with their schedules, runs with their events, logs and attempt records,
//! dead letters, alerts, usage), so this trait stays this small.

use super::Result;
use super::kv::{KvEngine, OrderedMap};
use super::secrets::SecretEngine;

/// An ordered map of a store's capability stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tree {
    /// The plugins' key-value store (`store::kv`): entries and the
    /// per-tenant usage counters, in its own layout.
    Kv,
    /// Tenants' secrets (`store::secrets`).
    Secrets,
}

/// Whole-store reads and verbatim writes of the capability maps.
pub trait Backup {
    /// The entries of `tree` whose key is greater than `after` (`None`: from
    /// the first), in key order, at most `limit`, as stored.
    fn map_page(
        &self,
        tree: Tree,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Writes `entries` into `tree` as given (replacing equal keys), bypassing
    /// the capability's own rules (quotas, usage counting): the entries are a
    /// [`Backup::map_page`] of another store, counters included.
    fn restore_map(&self, tree: Tree, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()>;
}

/// [`Backup`] for a store whose KV and secret engines run over maps of one
/// type (every backend's).
pub(crate) struct Maps<'a, M> {
    /// The KV engine.
    pub(crate) kv: &'a KvEngine<M>,
    /// The secret engine.
    pub(crate) secrets: &'a SecretEngine<M>,
}

impl<M: OrderedMap> Maps<'_, M> {
    fn map(&self, tree: Tree) -> &M {
        match tree {
            Tree::Kv => self.kv.map(),
            Tree::Secrets => self.secrets.map(),
        }
    }

    /// [`Backup::map_page`].
    pub(crate) fn page(
        &self,
        tree: Tree,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.map(tree).range(after, limit)
    }

    /// [`Backup::restore_map`].
    pub(crate) fn restore(&self, tree: Tree, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let map = self.map(tree);
        for (key, value) in entries {
            map.insert(key, value)?;
        }
        Ok(())
    }
}
