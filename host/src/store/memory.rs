//! [`MemoryStore`]: the [`Store`](super::Store) kept in memory, for scheduler and API unit
//! tests. It behaves like the sled store in every observable way (the shared
//! conformance suite checks it), except that nothing survives a restart, every
//! [`SyncTicket`] is ready at once and the store takes no room on disk.
//!
//! It also owns `select_page`, the paging rule both stores share, so that a
//! page boundary is the same whichever store answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{
    AlertQuery, AlertStatus, AttemptLogs, Catalog, Insert, KeyEntry, Lease, Leases, NewRun,
    Operations, Outbox, OutboxAlert, Result, RunPage, RunQuery, RunWrite, Runs, SyncTicket,
    Tenancy,
    rules::{
        MAX_SCAN, check_revisions, definition_changed, digest_of, list_floor, list_start,
        missing_run, queue_position, select_page, take_lease,
    },
};
use crate::model::ids::{RunId, TaskKey, TaskName, TenantId};
use crate::model::record::AttemptRecord;
use crate::model::{
    DeadLetter, Event, Millis, PluginRecord, PluginTag, RunRecord, RunStatus, ScheduleState,
    TaskRecord,
};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// Everything the memory store holds, behind one lock.
#[derive(Default)]
struct State {
    meta: BTreeMap<String, String>,
    blobs: HashMap<String, Vec<u8>>,
    /// Keyed by (tenant, name, version).
    plugins: BTreeMap<(String, String, String), PluginRecord>,
    /// Keyed by (tenant, name, tag).
    plugin_tags: BTreeMap<(String, String, String), PluginTag>,
    /// Keyed by (tenant, name).
    tasks: BTreeMap<TaskKey, TaskRecord>,
    /// Keyed by (tenant, task).
    schedules: BTreeMap<TaskKey, ScheduleState>,
    /// Keyed by id; ids sort by creation time.
    runs: BTreeMap<RunId, RunRecord>,
    /// (tenant, task, key) → run id.
    idempotency: HashMap<(TenantId, TaskName, String), RunId>,
    /// (expires at, (tenant, task, key)) → run id: the keys by expiry.
    key_expiry: BTreeMap<(Millis, (TenantId, TaskName, String)), RunId>,
    /// (tenant, task, scheduled_for) → run id, for runs inserted with `unique_fire`.
    fires: HashMap<(TenantId, TaskName, Millis), RunId>,
    /// Run id → events, oldest first.
    events: HashMap<String, Vec<Event>>,
    /// Run id → (step, attempt) → logs.
    logs: HashMap<String, BTreeMap<(String, u32), AttemptLogs>>,
    records: HashMap<String, BTreeMap<(String, u32), AttemptRecord>>,
    /// Keyed by id; ids sort by creation time.
    dead: BTreeMap<String, DeadLetter>,
    /// Keyed by name.
    tenants: BTreeMap<String, TenantRecord>,
    /// Keyed by id.
    tokens: BTreeMap<String, TokenRecord>,
    /// Keyed by (tenant, hour, task).
    usage: BTreeMap<(String, Millis, String), UsageBucket>,
    /// The alert outbox, keyed by id (ids sort by creation time).
    alerts: BTreeMap<String, OutboxAlert>,
    /// Leases by name.
    leases: BTreeMap<String, Lease>,
    /// Bytes of run data per tenant ([`Runs::run_bytes`](crate::store::Runs::run_bytes)), changed with
    /// every write of it.
    run_bytes: HashMap<String, i64>,
}

impl State {
    /// What refuses a write of `runs` as a whole, before anything changes:
    /// a stale revision, a changed definition.
    fn check_writes(&self, runs: &[RunWrite]) -> Result<()> {
        check_revisions(runs.iter().map(|w| &w.run), |id| {
            Ok(self.runs.get(id).map(|r| r.revision))
        })?;
        for RunWrite { run, .. } in runs {
            if let Some(old) = self.runs.get(&run.id)
                && old.spec != run.spec
            {
                return Err(definition_changed(&run.id));
            }
        }
        Ok(())
    }

    /// Memory holds each run whole: a write replaces it, whatever
    /// [`RunWrite::changed`] says.
    fn write_runs(&mut self, runs: &[RunWrite], usage: &[UsageBucket]) -> Result<()> {
        self.check_writes(runs)?;
        let mut missing = None;
        for RunWrite { run, events, .. } in runs {
            let Some(slot) = self.runs.get_mut(&run.id) else {
                missing.get_or_insert_with(|| run.id.clone());
                continue;
            };
            let old = std::mem::replace(slot, run.clone());
            self.weigh(&old.tenant, -weight(&old));
            self.weigh(&run.tenant, weight(run) + events_weight(events));
            let log = self.events.entry(run.id.clone().into()).or_default();
            log.extend_from_slice(events);
        }
        for u in usage {
            let key = (u.tenant.clone(), u.hour, u.task.clone());
            self.usage
                .entry(key)
                .and_modify(|b| b.add(u))
                .or_insert_with(|| u.clone());
        }
        missing.map_or(Ok(()), |id| Err(missing_run(&id)))
    }

    /// Adds `bytes` to `tenant`'s run data.
    fn weigh(&mut self, tenant: &str, bytes: i64) {
        *self.run_bytes.entry(tenant.to_owned()).or_default() += bytes;
    }

    /// The tenant of run `id`, or `fallback` when it is not stored.
    fn tenant_of(&self, id: &str, fallback: &str) -> String {
        self.runs
            .get(id)
            .map_or_else(|| fallback.to_owned(), |r| r.tenant.clone().into())
    }

    fn put_alerts(&mut self, alerts: &[OutboxAlert]) {
        for a in alerts {
            self.alerts.insert(a.id.clone(), a.clone());
        }
    }
}

/// Holds the first read of one run ([`MemoryStore::with_read_gate`]).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct ReadGate {
    id: Mutex<Option<String>>,
    entered: std::sync::atomic::AtomicBool,
    open: std::sync::atomic::AtomicBool,
}

#[cfg(test)]
impl ReadGate {
    /// Holds the first read of run `id` from now on.
    pub(crate) fn hold(&self, id: &str) {
        *self.id.lock().unwrap() = Some(id.to_owned());
    }

    /// Whether a read of the run is held.
    pub(crate) fn entered(&self) -> bool {
        self.entered.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Lets the held read go on.
    pub(crate) fn open(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn pass(&self, id: &str) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.id.lock().unwrap().as_deref() != Some(id) || self.entered.swap(true, SeqCst) {
            return;
        }
        while !self.open.load(SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// A [`Store`](super::Store) in memory: maps under one mutex. For tests.
pub struct MemoryStore {
    state: Mutex<State>,
    scan_limit: usize,
    /// How long each `write_runs` takes (zero but in tests of slow writes).
    write_delay: std::time::Duration,
    /// Holds the first `get_run` of one run, its copy made, until a test opens it.
    #[cfg(test)]
    read_gate: Option<std::sync::Arc<ReadGate>>,
    /// The plugins' key-value store.
    kv: std::sync::Arc<super::kv::MemoryKv>,
    /// Tenants' secrets.
    secrets: std::sync::Arc<super::secrets::MemorySecrets>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            scan_limit: MAX_SCAN,
            write_delay: std::time::Duration::ZERO,
            #[cfg(test)]
            read_gate: None,
            kv: Default::default(),
            secrets: Default::default(),
        }
    }

    /// Lowers the `list_runs` scan bound, so tests reach it with few runs.
    #[cfg(test)]
    pub(crate) fn with_scan_limit(mut self, scan_limit: usize) -> Self {
        self.scan_limit = scan_limit;
        self
    }

    /// Makes every `write_runs` take `delay` (real time, holding no lock),
    /// as a loaded disk would, so tests see runs while they are being written.
    #[cfg(test)]
    pub(crate) fn with_write_delay(mut self, delay: std::time::Duration) -> Self {
        self.write_delay = delay;
        self
    }

    /// Holds the first `get_run` of the run `gate` names, once it has
    /// copied the run, until the test opens it (holding no lock): a test
    /// can change a run while a copy of it is on its way.
    #[cfg(test)]
    pub(crate) fn with_read_gate(mut self, gate: std::sync::Arc<ReadGate>) -> Self {
        self.read_gate = Some(gate);
        self
    }

    /// Calls `f` with every stored run, borrowed (the simulation's checks
    /// read them all after every step; cloning them was most of its time).
    #[cfg(test)]
    pub(crate) fn with_runs<R>(&self, f: impl FnOnce(Vec<&RunRecord>) -> R) -> R {
        let state = self.state();
        f(state.runs.values().collect())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every operation leaves the maps consistent before it can panic
        // (clones and inserts only), so a poisoned lock still guards sound data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a value weighs in [`Runs::run_bytes`]: its JSON.
fn weight(value: &impl serde::Serialize) -> i64 {
    i64::try_from(crate::model::json_len(value)).unwrap_or(i64::MAX)
}

fn events_weight(events: &[Event]) -> i64 {
    events.iter().map(weight).sum()
}

fn key2(tenant: &str, task: &str) -> TaskKey {
    TaskKey::new(tenant, task)
}

impl Operations for MemoryStore {
    fn sync_ticket(&self) -> SyncTicket {
        SyncTicket::ready()
    }

    fn get_meta(&self, key: &str) -> Result<Option<String>> {
        Ok(self.state().meta.get(key).cloned())
    }

    fn put_meta(&self, key: &str, value: &str) -> Result<()> {
        self.state().meta.insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    fn size_on_disk(&self) -> u64 {
        0
    }

    fn kv(&self) -> std::sync::Arc<dyn super::kv::KvStore> {
        self.kv.clone()
    }

    fn secrets(&self) -> std::sync::Arc<dyn super::secrets::SecretStore> {
        self.secrets.clone()
    }
}

impl Catalog for MemoryStore {
    fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        let digest = digest_of(bytes);
        self.state()
            .blobs
            .entry(digest.clone())
            .or_insert_with(|| bytes.to_vec());
        Ok(digest)
    }

    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.state().blobs.get(digest).cloned())
    }

    fn delete_blob(&self, digest: &str) -> Result<()> {
        self.state().blobs.remove(digest);
        Ok(())
    }

    fn put_plugin(&self, plugin: &PluginRecord) -> Result<()> {
        let key = (
            plugin.tenant.clone(),
            plugin.name.clone(),
            plugin.version.clone(),
        );
        self.state().plugins.insert(key, plugin.clone());
        Ok(())
    }

    fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<Option<PluginRecord>> {
        let key = (tenant.to_owned(), name.to_owned(), version.to_owned());
        Ok(self.state().plugins.get(&key).cloned())
    }

    fn list_plugins(&self, tenant: &str) -> Result<Vec<PluginRecord>> {
        let state = self.state();
        Ok(state
            .plugins
            .values()
            .filter(|p| p.tenant == tenant)
            .cloned()
            .collect())
    }

    fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool> {
        let key = (tenant.to_owned(), name.to_owned(), version.to_owned());
        Ok(self.state().plugins.remove(&key).is_some())
    }

    fn put_plugin_tag(&self, tag: &PluginTag) -> Result<()> {
        let key = (tag.tenant.clone(), tag.name.clone(), tag.tag.clone());
        self.state().plugin_tags.insert(key, tag.clone());
        Ok(())
    }

    fn get_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<Option<PluginTag>> {
        let key = (tenant.to_owned(), name.to_owned(), tag.to_owned());
        Ok(self.state().plugin_tags.get(&key).cloned())
    }

    fn list_plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>> {
        let state = self.state();
        Ok(state
            .plugin_tags
            .values()
            .filter(|t| t.tenant == tenant)
            .cloned()
            .collect())
    }

    fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<bool> {
        let key = (tenant.to_owned(), name.to_owned(), tag.to_owned());
        Ok(self.state().plugin_tags.remove(&key).is_some())
    }

    fn put_tasks(&self, tasks: &[(TaskRecord, ScheduleState)]) -> Result<()> {
        // One lock: a reader sees all of them or none.
        let mut state = self.state();
        for (task, schedule) in tasks {
            state
                .tasks
                .insert(key2(&task.tenant, &task.name), task.clone());
            state
                .schedules
                .insert(key2(&schedule.tenant, &schedule.task), schedule.clone());
        }
        Ok(())
    }

    fn get_task(&self, tenant: &str, name: &str) -> Result<Option<TaskRecord>> {
        Ok(self.state().tasks.get(&key2(tenant, name)).cloned())
    }

    fn list_tasks(&self, tenant: Option<&str>) -> Result<Vec<TaskRecord>> {
        let state = self.state();
        Ok(state
            .tasks
            .values()
            .filter(|t| tenant.is_none_or(|tenant| t.tenant == tenant))
            .cloned()
            .collect())
    }

    fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        let state = self.state();
        Ok(state
            .tasks
            .values()
            .filter(|t| t.tenant == tenant && after.is_none_or(|a| t.name.as_str() > a))
            .take(limit)
            .cloned()
            .collect())
    }

    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool> {
        let mut state = self.state();
        state.schedules.remove(&key2(tenant, name));
        Ok(state.tasks.remove(&key2(tenant, name)).is_some())
    }

    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()> {
        self.state()
            .schedules
            .insert(key2(&schedule.tenant, &schedule.task), schedule.clone());
        Ok(())
    }

    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>> {
        Ok(self.state().schedules.get(&key2(tenant, task)).cloned())
    }

    // The memory store serves tests: it scans instead of keeping indexes.
    fn due_schedules(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>> {
        let state = self.state();
        let mut due: Vec<&ScheduleState> = state
            .schedules
            .values()
            .filter(|s| !s.paused && s.next_fire.is_some_and(|at| (from..=until).contains(&at)))
            .collect();
        due.sort_by(|a, b| {
            (a.next_fire, &a.tenant, &a.task).cmp(&(b.next_fire, &b.tenant, &b.task))
        });
        Ok(due.into_iter().take(limit).cloned().collect())
    }

    fn downstream_tasks(&self, tenant: &str, upstream: &str) -> Result<Vec<String>> {
        let state = self.state();
        Ok(state
            .tasks
            .values()
            .filter(|t| t.tenant == tenant && t.upstreams().iter().any(|u| u == upstream))
            .map(|t| t.name.clone())
            .collect())
    }
}

impl Runs for MemoryStore {
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>> {
        let mut state = self.state();
        let mut outcomes = Vec::with_capacity(runs.len());
        for NewRun {
            run,
            unique_fire,
            schedule,
            events,
            key_expires_at,
        } in runs
        {
            let existing = |id: Option<&RunId>| id.and_then(|id| state.runs.get(id)).cloned();
            let key_owner = run.idempotency_key.as_ref().and_then(|key| {
                let key = (run.tenant.clone(), run.task.clone(), key.clone());
                state.idempotency.get(&key).cloned()
            });
            let found = existing(Some(&run.id))
                .map(|r| Insert::Existing(Box::new(r)))
                .or_else(|| {
                    // A key outlives its run until it expires.
                    let owner = key_owner?;
                    Some(match existing(Some(&owner)) {
                        Some(r) => Insert::Existing(Box::new(r)),
                        None => Insert::Forgotten(owner),
                    })
                })
                .or_else(|| {
                    let key = (run.tenant.clone(), run.task.clone(), run.scheduled_for);
                    let r = unique_fire.then(|| existing(state.fires.get(&key)))??;
                    Some(Insert::Existing(Box::new(r)))
                });
            if let Some(found) = found {
                outcomes.push(found);
                continue;
            }
            state.runs.insert(run.id.clone(), run.clone());
            if let Some(key) = &run.idempotency_key {
                let key = (run.tenant.clone(), run.task.clone(), key.clone());
                state.idempotency.insert(key.clone(), run.id.clone());
                state
                    .key_expiry
                    .insert((*key_expires_at, key), run.id.clone());
            }
            if *unique_fire {
                let key = (run.tenant.clone(), run.task.clone(), run.scheduled_for);
                state.fires.insert(key, run.id.clone());
            }
            if let Some(schedule) = schedule {
                state
                    .schedules
                    .insert(key2(&schedule.tenant, &schedule.task), schedule.clone());
            }
            state.weigh(&run.tenant, weight(run) + events_weight(events));
            let log = state.events.entry(run.id.clone().into()).or_default();
            log.extend_from_slice(events);
            outcomes.push(Insert::Created);
        }
        Ok(outcomes)
    }

    fn write_runs_with_alerts(
        &self,
        runs: &[RunWrite],
        usage: &[UsageBucket],
        alerts: &[OutboxAlert],
    ) -> Result<()> {
        if !self.write_delay.is_zero() {
            std::thread::sleep(self.write_delay);
        }
        let mut state = self.state();
        // A refused write stores none of it, its alerts neither.
        state.check_writes(runs)?;
        state.put_alerts(alerts);
        state.write_runs(runs, usage)
    }

    fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        let run = self.state().runs.get(id).cloned();
        #[cfg(test)]
        if let Some(gate) = &self.read_gate {
            gate.pass(id);
        }
        Ok(run)
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage> {
        let state = self.state();
        let start = list_start(query);
        let cursor = start.as_deref();
        let below_cursor = state
            .runs
            .iter()
            .rev()
            .skip_while(|(id, _)| cursor.is_some_and(|c| id.as_str() >= c));
        // The scope mirrors the sled indexes: by task when tenant and task
        // are given, by tenant, or every run (the task is then a filter).
        let in_scope = below_cursor.filter(|(_, run)| match (&query.tenant, &query.task) {
            (Some(tenant), Some(task)) => run.tenant == *tenant && run.task == *task,
            (Some(tenant), None) => run.tenant == *tenant,
            (None, _) => true,
        });
        let entries =
            in_scope.map(|(id, run)| Ok((id.to_string(), run.status, run.task.to_string())));
        let task_filter = if query.tenant.is_none() {
            query.task.as_deref()
        } else {
            None
        };
        let (ids, next) = select_page(
            entries,
            task_filter,
            query.status,
            list_floor(query).as_deref(),
            query.limit,
            self.scan_limit,
        )?;
        let runs = ids
            .iter()
            .filter_map(|id| state.runs.get(id.as_str()))
            .cloned();
        Ok(RunPage {
            runs: runs.collect(),
            next,
        })
    }

    fn running_runs(&self) -> Result<Vec<RunRecord>> {
        let state = self.state();
        let running = state
            .runs
            .values()
            .filter(|r| r.status == RunStatus::Running);
        Ok(running.cloned().collect())
    }

    fn queued_runs(&self, tenant: &str, limit: usize) -> Result<Vec<RunRecord>> {
        let state = self.state();
        let mut queued: Vec<&RunRecord> = state
            .runs
            .values()
            .filter(|r| r.tenant == tenant && r.status == RunStatus::Queued)
            .collect();
        queued.sort_by_key(|r| (queue_position(r), r.id.clone()));
        Ok(queued.into_iter().take(limit).cloned().collect())
    }

    fn queued_ids(&self, tenant: &str, limit: usize) -> Result<Vec<RunId>> {
        Ok(self
            .queued_runs(tenant, limit)?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }

    fn queued_counts(&self) -> Result<Vec<(TenantId, TaskName, usize)>> {
        let state = self.state();
        let mut counts: BTreeMap<(TenantId, TaskName), usize> = BTreeMap::new();
        for r in state
            .runs
            .values()
            .filter(|r| r.status == RunStatus::Queued)
        {
            *counts
                .entry((r.tenant.clone(), r.task.clone()))
                .or_default() += 1;
        }
        Ok(counts
            .into_iter()
            .map(|((tenant, task), n)| (tenant, task, n))
            .collect())
    }

    fn run_summaries_page(
        &self,
        after: Option<&super::RunSummary>,
        limit: usize,
    ) -> Result<Vec<super::RunSummary>> {
        let order = |r: &super::RunSummary| (r.tenant.clone(), r.task.clone(), r.id.clone());
        let after = after.map(order);
        let state = self.state();
        let mut page: Vec<super::RunSummary> = state
            .runs
            .values()
            .map(|r| super::RunSummary {
                tenant: r.tenant.clone(),
                task: r.task.clone(),
                id: r.id.clone(),
                status: r.status,
            })
            .filter(|r| after.as_ref().is_none_or(|after| order(r) < *after))
            .collect();
        page.sort_by_key(|r| std::cmp::Reverse(order(r)));
        page.truncate(limit);
        Ok(page)
    }

    fn expire_keys(&self, now: Millis, limit: usize) -> Result<usize> {
        let mut state = self.state();
        // Everything before (now + 1, the least key): the keys due at `now`
        // or earlier. A key that never expires (`Millis::MAX`) is never due.
        let least = (TenantId::default(), TaskName::default(), String::new());
        let due: Vec<_> = state
            .key_expiry
            .range(..(now.saturating_add(1), least))
            .take(limit)
            .map(|(k, run)| (k.clone(), run.clone()))
            .collect();
        for (entry, run) in &due {
            state.key_expiry.remove(entry);
            if state.idempotency.get(&entry.1) == Some(run) {
                state.idempotency.remove(&entry.1);
            }
        }
        Ok(due.len())
    }

    fn forgotten_keys(&self, after: Option<&KeyEntry>, limit: usize) -> Result<Vec<KeyEntry>> {
        let state = self.state();
        Ok(state
            .key_expiry
            .iter()
            // An entry whose key a later run took holds no key.
            .filter(|(entry, run)| state.idempotency.get(&entry.1) == Some(*run))
            .filter(|(_, run)| !state.runs.contains_key(run.as_str()))
            .map(|((expires_at, (tenant, task, key)), run)| KeyEntry {
                tenant: tenant.clone(),
                task: task.clone(),
                key: key.clone(),
                run_id: run.clone(),
                expires_at: *expires_at,
            })
            .filter(|k| after.is_none_or(|after| k.order() > after.order()))
            .take(limit)
            .collect())
    }

    fn restore_keys(&self, keys: &[KeyEntry]) -> Result<()> {
        let mut state = self.state();
        for k in keys {
            let held = (k.tenant.clone(), k.task.clone(), k.key.clone());
            if state.idempotency.contains_key(&held) {
                continue;
            }
            state.idempotency.insert(held.clone(), k.run_id.clone());
            state
                .key_expiry
                .insert((k.expires_at, held), k.run_id.clone());
        }
        Ok(())
    }

    fn delete_run(&self, id: &str) -> Result<bool> {
        let mut state = self.state();
        let Some(run) = state.runs.get(id) else {
            return Ok(false);
        };
        if !run.status.is_terminal() {
            return Ok(false);
        }
        // Its idempotency key stays until it expires (`expire_keys`).
        let run = state.runs.remove(id).expect("the run was just found");
        let fire = (run.tenant.clone(), run.task.clone(), run.scheduled_for);
        if state.fires.get(&fire).is_some_and(|owner| owner == id) {
            state.fires.remove(&fire);
        }
        let mut bytes = weight(&run);
        bytes += state.events.remove(id).map_or(0, |e| events_weight(&e));
        bytes += state
            .logs
            .remove(id)
            .map_or(0, |l| l.values().map(weight).sum());
        bytes += state
            .records
            .remove(id)
            .map_or(0, |r| r.values().map(weight).sum());
        state.weigh(&fire.0, -bytes);
        Ok(true)
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event>> {
        Ok(self.state().events.get(run_id).cloned().unwrap_or_default())
    }

    fn put_logs(&self, tenant: &str, run_id: &str, logs: &AttemptLogs) -> Result<()> {
        let mut state = self.state();
        let tenant = state.tenant_of(run_id, tenant);
        let by_attempt = state.logs.entry(run_id.to_owned()).or_default();
        let old = by_attempt.insert((logs.step.clone(), logs.attempt), logs.clone());
        let bytes = weight(logs) - old.as_ref().map_or(0, weight);
        state.weigh(&tenant, bytes);
        Ok(())
    }

    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>> {
        let state = self.state();
        let Some(by_attempt) = state.logs.get(run_id) else {
            return Ok(Vec::new());
        };
        Ok(by_attempt.values().cloned().collect())
    }

    /// Each value weighs its JSON (an event on its own): the sled store
    /// weighs its values as stored, so the two agree on what grows and what
    /// is settled, not to the byte.
    fn run_bytes(&self, tenant: &str) -> Result<u64> {
        let bytes = self.state().run_bytes.get(tenant).copied().unwrap_or(0);
        Ok(u64::try_from(bytes).unwrap_or(0))
    }

    fn put_record(&self, record: &AttemptRecord) -> Result<()> {
        let ctx = &record.context;
        let mut state = self.state();
        let tenant = state.tenant_of(&ctx.run_id, &ctx.tenant);
        let old = state
            .records
            .entry(ctx.run_id.clone())
            .or_default()
            .insert((ctx.step.clone(), ctx.attempt), record.clone());
        let bytes = weight(record) - old.as_ref().map_or(0, weight);
        state.weigh(&tenant, bytes);
        Ok(())
    }

    fn get_record(&self, run_id: &str, step: &str, attempt: u32) -> Result<Option<AttemptRecord>> {
        Ok(self
            .state()
            .records
            .get(run_id)
            .and_then(|by_attempt| by_attempt.get(&(step.to_owned(), attempt)))
            .cloned())
    }

    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()> {
        self.state().dead.insert(dead.id.clone(), dead.clone());
        Ok(())
    }

    fn get_dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        Ok(self.state().dead.get(id).cloned())
    }

    fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>> {
        let state = self.state();
        let newest_first = state.dead.values().rev();
        let selected =
            newest_first.filter(|d| d.tenant == tenant && (!open_only || d.resolution.is_none()));
        Ok(selected.cloned().collect())
    }
}

impl Outbox for MemoryStore {
    fn put_alerts(&self, alerts: &[OutboxAlert]) -> Result<()> {
        self.state().put_alerts(alerts);
        Ok(())
    }

    fn get_alert(&self, id: &str) -> Result<Option<OutboxAlert>> {
        Ok(self.state().alerts.get(id).cloned())
    }

    fn due_alerts(&self, until: Millis, limit: usize) -> Result<Vec<OutboxAlert>> {
        let state = self.state();
        let mut due: Vec<&OutboxAlert> = state
            .alerts
            .values()
            .filter(|a| a.status == AlertStatus::Pending && a.next_try <= until)
            .collect();
        due.sort_by(|a, b| (a.next_try, &a.id).cmp(&(b.next_try, &b.id)));
        Ok(due.into_iter().take(limit).cloned().collect())
    }

    fn list_alerts(&self, query: &AlertQuery) -> Result<(Vec<OutboxAlert>, Option<String>)> {
        let state = self.state();
        let cursor = query.cursor.as_deref().filter(|c| !c.is_empty());
        let limit = query.limit.max(1);
        let mut page: Vec<OutboxAlert> = state
            .alerts
            .values()
            .rev()
            .filter(|a| cursor.is_none_or(|c| a.id.as_str() < c))
            .filter(|a| a.tenant == query.tenant && query.status.is_none_or(|s| s == a.status))
            .take(limit + 1)
            .cloned()
            .collect();
        let more = page.len() > limit;
        page.truncate(limit);
        let next = more.then(|| page.last().map(|a| a.id.clone())).flatten();
        Ok((page, next))
    }

    fn trim_alerts(&self, tenant: &str, status: AlertStatus, keep: usize) -> Result<usize> {
        let mut state = self.state();
        let old: Vec<String> = state
            .alerts
            .values()
            .rev()
            .filter(|a| a.tenant == tenant && a.status == status)
            .skip(keep)
            .map(|a| a.id.clone())
            .collect();
        for id in &old {
            state.alerts.remove(id);
        }
        Ok(old.len())
    }

    fn alert_counts(&self) -> Result<Vec<(String, AlertStatus, usize)>> {
        let mut counts: BTreeMap<(String, AlertStatus), usize> = BTreeMap::new();
        for a in self.state().alerts.values() {
            *counts.entry((a.tenant.clone(), a.status)).or_default() += 1;
        }
        Ok(counts.into_iter().map(|((t, s), n)| (t, s, n)).collect())
    }
}

impl Leases for MemoryStore {
    fn take_lease(&self, name: &str, holder: &str, now: Millis, until: Millis) -> Result<Lease> {
        let mut state = self.state();
        let current = state.leases.get(name);
        match take_lease(current, name, holder, now, until) {
            Some(taken) => {
                state.leases.insert(name.to_owned(), taken.clone());
                Ok(taken)
            }
            None => Ok(current.cloned().expect("a live lease was compared")),
        }
    }

    fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<bool> {
        let mut state = self.state();
        match state.leases.get_mut(name) {
            Some(lease) if lease.held_by(holder, now) => {
                lease.until = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

impl Tenancy for MemoryStore {
    fn put_tenant(&self, tenant: &TenantRecord) -> Result<()> {
        self.state()
            .tenants
            .insert(tenant.name.clone(), tenant.clone());
        Ok(())
    }

    fn list_tenants(&self) -> Result<Vec<TenantRecord>> {
        Ok(self.state().tenants.values().cloned().collect())
    }

    fn put_token(&self, token: &TokenRecord) -> Result<()> {
        self.state().tokens.insert(token.id.clone(), token.clone());
        Ok(())
    }

    fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        Ok(self.state().tokens.values().cloned().collect())
    }

    fn usage(&self, tenant: &str, from: Millis, to: Millis) -> Result<Vec<UsageBucket>> {
        if from >= to {
            return Ok(Vec::new());
        }
        let lo = (tenant.to_owned(), from, String::new());
        let hi = (tenant.to_owned(), to, String::new());
        Ok(self
            .state()
            .usage
            .range(lo..hi)
            .map(|(_, b)| b.clone())
            .collect())
    }
}

impl super::Backup for MemoryStore {
    fn map_page(
        &self,
        tree: super::Tree,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.maps().page(tree, after, limit)
    }

    fn restore_map(&self, tree: super::Tree, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        self.maps().restore(tree, entries)
    }
}

impl MemoryStore {
    fn maps(&self) -> super::backup::Maps<'_, super::kv::MemoryMap> {
        super::backup::Maps {
            kv: &self.kv,
            secrets: &self.secrets,
        }
    }
}
