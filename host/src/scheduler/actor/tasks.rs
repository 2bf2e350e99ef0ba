//! Task definitions as the actor uses them: read from the store and parsed
//! once, kept in a cache bounded by count that drops the least recently used
//! one when full. The store is the source of truth; every change of a task
//! passes through the actor (put, delete, `TaskChanged`), which drops the
//! cached copy, so a cached definition is never stale.
//!
//! Measured: parsing a small task's stored JSON costs about as much as
//! creating its run; without the cache each fire of a task outside the
//! window, and each `after` start, would parse it again.
//!
//! The `after` index ([`Catalog::downstream_tasks`](crate::store::Catalog::downstream_tasks):
//! the tasks started when a task's run ends) is cached the same way, by
//! (tenant, upstream), in an [`Lru`] of its own: it was read from the store
//! on the actor's task at every finished run, most often to learn that no
//! task waits for it. It is cached here rather than read off the actor with
//! the answer coming back as an event (as `when` conditions are): the index
//! changes only with a task's definition, and every such change passes
//! through the actor ([`Actor::forget_after_edges`], called before the store
//! write), so a cached answer is exactly what the store would say, and the
//! ended run's `after` runs are still created in the same turn (an event
//! would have held the ended run's write for another turn, and reordered
//! its `after` runs against the triggers of that turn).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::Actor;
use crate::model::TaskRecord;
use crate::model::ids::TaskKey;
use crate::scheduler::{Error, Result};
use crate::task::TaskSpec;

/// A parsed task definition.
#[derive(Clone)]
pub(super) struct Loaded {
    pub(super) record: Arc<TaskRecord>,
    pub(super) spec: Arc<TaskSpec>,
}

/// A definition being saved: its new schedule state, parsed, its trigger
/// compiled once (`fire::prepare_save`).
pub(super) struct Saved {
    pub(super) schedule: crate::model::ScheduleState,
    pub(super) loaded: Loaded,
    pub(super) trigger: Arc<crate::schedule::Trigger>,
}

/// Least-recently-used cache of parsed definitions.
pub(super) type TaskCache = Lru<Loaded>;

/// The tasks whose `trigger.after` names a task, by (tenant, upstream).
pub(super) type AfterCache = Lru<Arc<[String]>>;

/// Least-recently-used cache by task, at most `capacity` entries.
pub(super) struct Lru<V> {
    capacity: usize,
    tick: u64,
    entries: HashMap<TaskKey, (u64, V)>,
    /// Entries by last use, oldest first.
    by_use: BTreeMap<u64, TaskKey>,
}

impl<V: Clone> Lru<V> {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            tick: 0,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    /// The cached definition, marked as just used.
    fn get(&mut self, key: &TaskKey) -> Option<V> {
        let (used, loaded) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        self.tick += 1;
        *used = self.tick;
        self.by_use.insert(self.tick, key.clone());
        Some(loaded.clone())
    }

    pub(super) fn insert(&mut self, key: TaskKey, loaded: V) {
        self.remove(&key);
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.tick += 1;
        self.by_use.insert(self.tick, key.clone());
        self.entries.insert(key, (self.tick, loaded));
    }

    /// Forgets a task (it changed or was deleted).
    pub(super) fn remove(&mut self, key: &TaskKey) {
        if let Some((used, _)) = self.entries.remove(key) {
            self.by_use.remove(&used);
        }
    }

    /// Forgets every entry of `tenant` (one of its tasks changed).
    /// O(entries): task changes are rare beside the reads it saves.
    pub(super) fn remove_tenant(&mut self, tenant: &str) {
        let by_use = &mut self.by_use;
        self.entries.retain(|key, (used, _)| {
            let keep = key.tenant != tenant;
            if !keep {
                by_use.remove(used);
            }
            keep
        });
    }

    /// Entries held (for the bounded-memory tests and gauges).
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl Actor {
    /// A task's definition, from the cache or read and parsed from the store.
    pub(super) fn load_task(&mut self, tenant: &str, name: &str) -> Result<Loaded> {
        let key = TaskKey::new(tenant, name);
        if let Some(loaded) = self.tasks.get(&key) {
            return Ok(loaded);
        }
        let record = self
            .store
            .get_task(tenant, name)?
            .ok_or_else(|| Error::NotFound(format!("task `{name}`")))?;
        let spec = TaskSpec::stored(&record.spec).map_err(|e| {
            Error::Conflict(format!("stored definition of `{name}` is unreadable: {e}"))
        })?;
        let loaded = Loaded {
            record: Arc::new(record),
            spec,
        };
        self.tasks.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// The tasks of `tenant` started when a run of `upstream` ends, from the
    /// cache or the store's `after` index.
    pub(super) fn downstream_tasks(
        &mut self,
        tenant: &str,
        upstream: &str,
    ) -> crate::store::Result<Arc<[String]>> {
        let key = TaskKey::new(tenant, upstream);
        if let Some(downs) = self.after.get(&key) {
            return Ok(downs);
        }
        let downs: Arc<[String]> = self.store.downstream_tasks(tenant, upstream)?.into();
        self.after.insert(key, downs.clone());
        Ok(downs)
    }

    /// A task of `tenant` is about to be saved or deleted (called before
    /// the store write, so no later read sees the old index), or was changed
    /// elsewhere (`TaskChanged`, as for the definitions): its `after` edges
    /// may change, so the cached index of the whole tenant goes (the task's
    /// old upstreams are not known here).
    pub(super) fn forget_after_edges(&mut self, tenant: &str) {
        self.after.remove_tenant(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(name: &str) -> Loaded {
        let spec: TaskSpec = serde_json::from_value(serde_json::json!({
            "name": name,
            "steps": [{"name": "s", "plugin": "echo@1.0.0"}],
        }))
        .unwrap();
        let record = TaskRecord {
            format: crate::model::RECORD_FORMAT,
            tenant: "t".into(),
            name: name.into(),
            spec: serde_json::to_value(&spec).unwrap().into(),
            source: String::new(),
            created_at: 0,
            updated_at: 0,
            version: 1,
        };
        Loaded {
            record: Arc::new(record),
            spec: Arc::new(spec),
        }
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity_and_drops_the_least_recently_used() {
        let mut cache = TaskCache::new(2);
        let key = |n: &str| TaskKey::new("t", n);
        cache.insert(key("a"), loaded("a"));
        cache.insert(key("b"), loaded("b"));
        assert!(cache.get(&key("a")).is_some(), "a used after b");
        cache.insert(key("c"), loaded("c"));
        assert_eq!(cache.len(), 2);
        assert!(
            cache.get(&key("b")).is_none(),
            "b was the least recently used"
        );
        assert!(cache.get(&key("a")).is_some());
        assert!(cache.get(&key("c")).is_some());
        cache.remove(&key("a"));
        assert!(cache.get(&key("a")).is_none());
        assert_eq!(cache.len(), 1);
        for n in 0..100 {
            cache.insert(key(&format!("n{n}")), loaded("n"));
        }
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.by_use.len(), 2, "the use order is bounded too");
    }

    #[test]
    fn forgetting_a_tenant_drops_its_entries_and_keeps_the_others() {
        let mut cache: AfterCache = Lru::new(10);
        cache.insert(TaskKey::new("t", "a"), Arc::from(vec!["b".to_string()]));
        cache.insert(TaskKey::new("t", "c"), Arc::from(Vec::new()));
        cache.insert(TaskKey::new("u", "a"), Arc::from(vec!["d".to_string()]));
        cache.remove_tenant("t");
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.by_use.len(), 1, "the use order follows");
        assert!(cache.get(&TaskKey::new("t", "a")).is_none());
        assert_eq!(
            cache.get(&TaskKey::new("u", "a")).as_deref(),
            Some(&["d".to_string()][..])
        );
    }
}
