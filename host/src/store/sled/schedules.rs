//! Tasks under `task/{tenant}/{name}` and their schedules under
//! `sched/{tenant}/{task}`, with the two indexes the scheduler reads instead
//! of holding every task in memory:
//!
//! - `nf/{next_fire:020}/{tenant}/{task}` (value: `[tenant, task]`): the
//!   next-fire index, one entry per unpaused schedule with a next fire,
//!   ordered by instant. [`Catalog::due_schedules`](crate::store::Catalog::due_schedules) reads a range of it.
//! - `aft/{tenant}/{upstream}/{downstream}` (value: the downstream name): the
//!   tasks an `after` trigger starts when a run of `upstream` ends.
//!
//! Every write of a schedule or a task changes its index entries in the same
//! sled batch (atomic across a crash), under `claim_lock` so that the old
//! entry removed is the one stored. A reader still checks each index entry
//! against its schedule record, so an entry that disagrees (none should)
//! can never fire a task at a stale instant.
//!
//! Stores written before these indexes existed get them built once, when
//! opened ([`build_indexes`]); the marker `sys/indexes` records that.

use std::collections::HashMap;

use super::engine::Batch;
use super::keys::{decode, encode, instant_part, key};
use super::{SledStore, engine_error, lock};
use crate::model::{Millis, ScheduleState, TaskRecord};
use crate::store::Result;
use crate::store::prelude::*;

/// Marker: the `nf` and `aft` indexes exist for every stored task.
const INDEXES_MARKER: &str = "indexes";

fn next_fire_key(schedule: &ScheduleState, at: Millis) -> Vec<u8> {
    key("nf", &[&instant_part(at), &schedule.tenant, &schedule.task])
}

/// The index entry a schedule has, if any.
fn indexed_at(schedule: &ScheduleState) -> Option<Millis> {
    schedule.next_fire.filter(|_| !schedule.paused)
}

fn after_key(tenant: &str, upstream: &str, downstream: &str) -> Vec<u8> {
    key("aft", &[tenant, upstream, downstream])
}

/// Schedules written earlier in the batch being built, by (tenant, task):
/// the "old" value of a second write of the same schedule in one batch.
pub(super) type Written = HashMap<(String, String), ScheduleState>;

impl SledStore {
    /// Adds to `batch` the write of `schedule` and the move of its
    /// next-fire entry. Callers hold `claim_lock`.
    pub(super) fn schedule_changes(
        &self,
        batch: &mut Batch,
        schedule: &ScheduleState,
        written: &mut Written,
    ) -> Result<()> {
        let id = (schedule.tenant.clone(), schedule.task.clone());
        let sched_key = key("sched", &[&schedule.tenant, &schedule.task]);
        let old = match written.get(&id) {
            Some(old) => Some(old.clone()),
            None => self.get::<ScheduleState>(&sched_key)?,
        };
        let old_at = old.as_ref().and_then(indexed_at);
        let new_at = indexed_at(schedule);
        if old_at != new_at {
            if let (Some(old), Some(at)) = (&old, old_at) {
                batch.remove(next_fire_key(old, at));
            }
            if let Some(at) = new_at {
                let value = encode(&(&schedule.tenant, &schedule.task))?;
                batch.insert(next_fire_key(schedule, at), value);
            }
        }
        batch.insert(sched_key, encode(schedule)?);
        written.insert(id, schedule.clone());
        Ok(())
    }

    /// Adds to `batch` the write of `task` and the move of its `after`
    /// entries, from the version `written` earlier in the same batch if
    /// any (else the stored one). Callers hold `claim_lock`.
    fn task_changes(
        &self,
        batch: &mut Batch,
        task: &TaskRecord,
        written: &mut HashMap<(String, String), TaskRecord>,
    ) -> Result<()> {
        let task_key = key("task", &[&task.tenant, &task.name]);
        let id = (task.tenant.to_string(), task.name.to_string());
        let old: Option<TaskRecord> = match written.get(&id) {
            Some(old) => Some(old.clone()),
            None => self.get(&task_key)?,
        };
        let ups = task.upstreams();
        for up in old.iter().flat_map(TaskRecord::upstreams) {
            if !ups.contains(&up) {
                batch.remove(after_key(&task.tenant, &up, &task.name));
            }
        }
        for up in &ups {
            batch.insert(after_key(&task.tenant, up, &task.name), encode(&task.name)?);
        }
        batch.insert(task_key, encode(task)?);
        written.insert(id, task.clone());
        Ok(())
    }

    /// Tasks with their schedules (and index entries), in one batch.
    pub(super) fn put_tasks_at(&self, tasks: &[(&TaskRecord, &ScheduleState)]) -> Result<()> {
        let _serial = lock(&self.claim_lock);
        let mut batch = Batch::default();
        let mut written = Written::new();
        let mut written_tasks = HashMap::new();
        for (task, schedule) in tasks {
            self.task_changes(&mut batch, task, &mut written_tasks)?;
            self.schedule_changes(&mut batch, schedule, &mut written)?;
        }
        self.apply(batch)
    }

    pub(super) fn delete_task_at(&self, tenant: &str, name: &str) -> Result<bool> {
        let _serial = lock(&self.claim_lock);
        let task_key = key("task", &[tenant, name]);
        let sched_key = key("sched", &[tenant, name]);
        let old: Option<TaskRecord> = self.get(&task_key)?;
        let schedule: Option<ScheduleState> = self.get(&sched_key)?;
        let mut batch = Batch::default();
        for up in old.iter().flat_map(TaskRecord::upstreams) {
            batch.remove(after_key(tenant, &up, name));
        }
        if let Some((schedule, at)) = schedule.as_ref().and_then(|s| Some((s, indexed_at(s)?))) {
            batch.remove(next_fire_key(schedule, at));
        }
        batch.remove(task_key);
        batch.remove(sched_key);
        self.apply(batch)?;
        Ok(old.is_some())
    }

    pub(super) fn put_schedule_at(&self, schedule: &ScheduleState) -> Result<()> {
        let _serial = lock(&self.claim_lock);
        let mut batch = Batch::default();
        self.schedule_changes(&mut batch, schedule, &mut Written::new())?;
        self.apply(batch)
    }

    pub(super) fn due_schedules_in(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>> {
        if from > until || limit == 0 {
            return Ok(Vec::new());
        }
        let start = key("nf", &[&instant_part(from)]);
        let end = key("nf", &[&instant_part(until.saturating_add(1))]);
        let mut due = Vec::new();
        for item in self.db.range(start..end) {
            let (k, v) = item.map_err(engine_error)?;
            let (tenant, task): (String, String) = decode(&k, &v)?;
            // The schedule record is the truth; the entry only says where to look.
            let Some(schedule) = self.get_schedule(&tenant, &task)? else {
                continue;
            };
            let Some(at) = indexed_at(&schedule) else {
                continue;
            };
            if next_fire_key(&schedule, at) != k.as_ref() {
                continue;
            }
            due.push(schedule);
            if due.len() == limit {
                break;
            }
        }
        Ok(due)
    }

    pub(super) fn tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        let prefix = key("task", &[tenant]);
        // Keys sort like names; the key of `after` itself is skipped.
        let start = match after {
            Some(after) => key("task", &[tenant, after]),
            None => prefix.clone(),
        };
        let skip = after.map(|after| key("task", &[tenant, after]));
        let mut page = Vec::new();
        for item in self.db.range(start..) {
            let (k, v) = item.map_err(engine_error)?;
            if !k.starts_with(&prefix) || page.len() == limit {
                break;
            }
            if skip.as_deref() == Some(k.as_ref()) {
                continue;
            }
            let task: TaskRecord = decode(&k, &v)?;
            if task.format > crate::model::RECORD_FORMAT {
                return Err(super::keys::newer_record(&k, task.format));
            }
            page.push(task);
        }
        Ok(page)
    }

    pub(super) fn downstream_of(&self, tenant: &str, upstream: &str) -> Result<Vec<String>> {
        self.values(&key("aft", &[tenant, upstream]))
    }
}

/// Builds the `nf` and `aft` indexes of a store written before they
/// existed, once (then sets the marker). Runs at open, before anything else
/// reads or writes the store.
pub(super) fn build_indexes(store: &SledStore) -> Result<()> {
    if store.get_meta_raw(INDEXES_MARKER)?.is_some() {
        return Ok(());
    }
    let mut batch = Batch::default();
    for schedule in store.values::<ScheduleState>(&key("sched", &[]))? {
        if let Some(at) = indexed_at(&schedule) {
            let value = encode(&(&schedule.tenant, &schedule.task))?;
            batch.insert(next_fire_key(&schedule, at), value);
        }
    }
    for task in store.values::<TaskRecord>(&key("task", &[]))? {
        for up in task.upstreams() {
            batch.insert(
                after_key(&task.tenant, &up, &task.name),
                encode(&task.name)?,
            );
        }
    }
    batch.insert(key("sys", &[INDEXES_MARKER]), encode("1")?);
    store.apply(batch)
}

impl SledStore {
    fn get_meta_raw(&self, name: &str) -> Result<Option<String>> {
        self.get(&key("sys", &[name]))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::RECORD_FORMAT;

    fn task(name: &str, after: &[&str]) -> TaskRecord {
        TaskRecord {
            format: RECORD_FORMAT,
            tenant: "t".into(),
            name: name.into(),
            spec: json!({"trigger": {"after": after}}).into(),
            source: String::new(),
            created_at: 0,
            updated_at: 0,
            version: 1,
        }
    }

    fn schedule(name: &str, next_fire: Option<Millis>) -> ScheduleState {
        ScheduleState {
            tenant: "t".into(),
            task: name.into(),
            next_fire,
            last_fired: None,
            paused: false,
        }
    }

    #[test]
    fn a_store_written_before_the_indexes_gets_them_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path()).unwrap();
            store
                .put_task(&task("up", &[]), &schedule("up", Some(500)))
                .unwrap();
            store
                .put_task(&task("down", &["up"]), &schedule("down", None))
                .unwrap();
            // As an older ax left it: records only, no index, no marker.
            for prefix in ["nf", "aft"] {
                for item in store.db.scan_prefix(key(prefix, &[])) {
                    store.db.remove(item.unwrap().0).unwrap();
                }
            }
            store.db.remove(key("sys", &[INDEXES_MARKER])).unwrap();
            store.db.flush().unwrap();
            assert!(store.due_schedules(0, 1000, 10).unwrap().is_empty());
        }
        let store = SledStore::open(dir.path()).unwrap();
        let due = store.due_schedules(0, 1000, 10).unwrap();
        assert_eq!(due, [schedule("up", Some(500))]);
        assert_eq!(store.downstream_tasks("t", "up").unwrap(), ["down"]);
    }

    #[test]
    fn an_index_entry_that_disagrees_with_its_schedule_is_not_returned() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        store
            .put_task(&task("a", &[]), &schedule("a", Some(500)))
            .unwrap();
        // A stray entry (none should exist) for an instant the schedule does not hold.
        let stray = next_fire_key(&schedule("a", Some(100)), 100);
        store
            .db
            .insert(stray, encode(&("t", "a")).unwrap())
            .unwrap();
        let due = store.due_schedules(0, 1000, 10).unwrap();
        assert_eq!(due, [schedule("a", Some(500))]);
    }
}
