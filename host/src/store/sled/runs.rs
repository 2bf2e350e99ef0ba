//! Runs under `run/{id}`, with their indexes (`rt`, `rk`, `q`, `act`), the
//! keys they claim (`idem`, `fire`) and their events (`ev`). Inserts are
//! serialised by `claim_lock` (check the claims, then write them), updates
//! by `run_lock`, deletes by both; each call is one sled batch.
//!
//! An idempotency key outlives its run: `idem/{tenant}/{task}/{key}` stays
//! when retention deletes the run, and `ik/{expires:020}/{tenant}/{task}/{key}`
//! (value: the run id) orders the keys by when they are forgotten, so that
//! [`expire`] reads only the keys that are due.

use std::borrow::Cow;

use super::compact::Indexed;
use super::counts::{QueueDelta, Side};
use super::definitions::{Shape, encode_run, head};
use super::engine::Batch;
use super::footprint::{self, Weight, signed};
use super::inputs::{Input, place};
use super::keys::{
    corrupt_key, decode, decode_part, encode, fire_key, instant_part, key, listing_indexes,
    push_part, run_indexes, state_indexes,
};
use super::steps::{apart, encode_changed};
use super::{SledStore, engine_error, lock};
use crate::model::ids::RunId;
use crate::model::{Event, Millis, RunRecord, RunStatus};
use crate::store::prelude::*;
use crate::store::rules::{definition_changed, list_floor, list_start, missing_run, select_page};
use crate::store::{
    Changed, Error, Insert, KeyEntry, NewRun, Result, RunPage, RunQuery, RunSummary, RunWrite,
};
use crate::tenant::UsageBucket;

/// [`Runs::insert_runs`](crate::store::Runs::insert_runs).
pub(super) fn insert(store: &SledStore, runs: &[NewRun]) -> Result<Vec<Insert>> {
    // Input files synced before the lock (`inputs.rs`); a run refused below
    // has its file removed again.
    let places: Vec<Input> = runs.iter().map(|new| place(&new.run.input)).collect();
    for (new, &at) in runs.iter().zip(&places) {
        store.write_input_file(&new.run, at)?;
    }
    let _serial = lock(&store.claim_lock);
    let mut batch = Batch::default();
    let mut outcomes = Vec::with_capacity(runs.len());
    // Keys claimed by runs earlier in this batch, to their run.
    let mut claimed: std::collections::HashMap<Vec<u8>, &RunRecord> = Default::default();
    let mut written = super::schedules::Written::new();
    let mut queued = QueueDelta::default();
    let mut weight = Weight::default();
    let mut references = std::collections::HashMap::new();
    for (new, &input) in runs.iter().zip(&places) {
        let run = &new.run;
        let run_key = key("run", &[&run.id]);
        let idem_key = run
            .idempotency_key
            .as_deref()
            .map(|k| key("idem", &[&run.tenant, &run.task, k]));
        let fire_key = new.unique_fire.then(|| fire_key(run));
        let claims = [Some(&run_key), idem_key.as_ref(), fire_key.as_ref()];
        if let Some(earlier) = claims.iter().flatten().find_map(|k| claimed.get(*k)) {
            outcomes.push(Insert::Existing(Box::new((*earlier).clone())));
            continue;
        }
        if let Some(existing) = store.claimed_by(&run_key, &idem_key, &fire_key)? {
            outcomes.push(existing);
            continue;
        }
        store.remember(&run.spec);
        store.refer(&mut batch, &run.spec, &mut references)?;
        let shape = Shape {
            steps_apart: apart(run.steps.len()),
            input,
        };
        let record = encode_run(run, run.spec.digest(), shape)?;
        weight.add(&run.tenant, signed(record.len()));
        batch.insert(run_key.clone(), record);
        store.step_changes(&mut batch, &mut weight, run, Vec::new(), None)?;
        store.put_input(&mut batch, &mut weight, run, input)?;
        for (index_key, value) in run_indexes(run) {
            batch.insert(index_key, value);
        }
        for claim in [&idem_key, &fire_key].into_iter().flatten() {
            batch.insert(claim.clone(), encode(&run.id)?);
        }
        if let Some(k) = run.idempotency_key.as_deref() {
            batch.insert(expiry_key(new.key_expires_at, run, k), encode(&run.id)?);
        }
        if let Some(schedule) = &new.schedule {
            store.schedule_changes(&mut batch, schedule, &mut written)?;
        }
        let events = store.add_events(&mut batch, &run.id, &new.events)?;
        weight.add(&run.tenant, events);
        queued.add(&run.tenant, &run.task, run.status, 1);
        for claim in [Some(run_key), idem_key, fire_key].into_iter().flatten() {
            claimed.insert(claim, run);
        }
        outcomes.push(Insert::Created);
    }
    if outcomes.contains(&Insert::Created) {
        store.count_changes(&mut batch, &queued, Side::Claims)?;
        store.weigh(&mut batch, &weight, footprint::Side::Claims)?;
        store.apply(batch)?;
    }
    for ((new, outcome), at) in runs.iter().zip(&outcomes).zip(&places) {
        let stored_before = matches!(outcome, Insert::Existing(run) if run.id == new.run.id);
        if matches!(at, Input::File(_)) && *outcome != Insert::Created && !stored_before {
            store.remove_input_file(&new.run.id)?;
        }
    }
    Ok(outcomes)
}

/// [`StoreExt::write_runs`](crate::store::StoreExt::write_runs).
pub(super) fn write(
    store: &SledStore,
    runs: &[RunWrite],
    usage: &[UsageBucket],
    alerts: &[crate::store::OutboxAlert],
) -> Result<()> {
    if runs.is_empty() && usage.is_empty() && alerts.is_empty() {
        return Ok(());
    }
    // A run given twice: its last record, with the events of both and the
    // steps either changed; the first record's revision is the one checked
    // against the store, and each later one must follow the one before.
    let mut order: Vec<(&RunRecord, Vec<&Event>, u64, Changed)> = Vec::with_capacity(runs.len());
    let mut at: std::collections::HashMap<&str, usize> = Default::default();
    for RunWrite {
        run,
        events,
        changed,
    } in runs
    {
        match at.get(run.id.as_str()) {
            Some(&i) => {
                let before = order[i].0.revision;
                if run.revision != before + 1 {
                    return Err(Error::Conflict {
                        id: run.id.clone().into(),
                        stored: before,
                        given: run.revision,
                    });
                }
                order[i].0 = run;
                order[i].1.extend(events);
                order[i].3 = std::mem::take(&mut order[i].3).union(changed.clone());
            }
            None => {
                at.insert(&run.id, order.len());
                order.push((run, events.iter().collect(), run.revision, changed.clone()));
            }
        }
    }
    // Encoded before taking the lock: most of a write's time.
    let encoded = order
        .into_iter()
        .map(|(run, events, first, changed)| {
            let events = (!events.is_empty())
                .then(|| super::events::encode(events))
                .transpose()?;
            let apart = apart(run.steps.len());
            let shape = Shape {
                steps_apart: apart,
                input: place(&run.input),
            };
            let record = encode_run(run, run.spec.digest(), shape)?;
            let steps = if apart {
                encode_changed(run, &changed)?
            } else {
                Vec::new()
            };
            Ok((
                run,
                RunChange {
                    run,
                    record,
                    steps,
                    input: shape.input,
                    first,
                    def: run.spec.digest().to_owned(),
                },
                events,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let _serial = lock(&store.run_lock);
    let mut batch = Batch::default();
    let mut missing = None;
    let mut queued = QueueDelta::default();
    let mut weight = Weight::default();
    for (run, change, events) in encoded {
        // A conflict returns before the batch is applied: nothing is stored.
        if !store.run_changes(&mut batch, change, &mut queued, &mut weight)? {
            missing.get_or_insert(&run.id);
            continue;
        }
        if let Some(events) = events {
            weight.add(&run.tenant, signed(events.len()));
            store.add_event_list(&mut batch, &run.id, events)?;
        }
    }
    store.usage_changes(&mut batch, usage)?;
    for alert in alerts {
        store.alert_changes(&mut batch, alert)?;
    }
    store.count_changes(&mut batch, &queued, Side::Runs)?;
    store.weigh(&mut batch, &weight, footprint::Side::Runs)?;
    store.apply(batch)?;
    // The write is stored: a fold that fails now is tried again by the next
    // write, and must not make this one look refused (its retry would be a
    // stale revision).
    if let Err(e) = store.fold_soon() {
        tracing::warn!(error = %e, "folding the queue counters failed; the next write folds them");
    }
    missing.map_or(Ok(()), |id| Err(missing_run(id)))
}

/// [`Runs::list_runs`](crate::store::Runs::list_runs).
pub(super) fn list(store: &SledStore, query: &RunQuery) -> Result<RunPage> {
    let (prefix, task_filter) = match (&query.tenant, &query.task) {
        (Some(tenant), Some(task)) => (key("rk", &[tenant, task]), None),
        (Some(tenant), None) => (key("rt", &[tenant]), None),
        // Every tenant's runs: the records themselves, which sort by id
        // too (since store format 10 no index repeats them, [`drop_ra`]).
        (None, task) => (key("run", &[]), task.as_deref()),
    };
    // A listing entry names a run; its state and task are in its record.
    let records = query.tenant.is_none();
    let entries = match list_start(query) {
        Some(start) => {
            let mut end = prefix.clone();
            push_part(&mut end, &start);
            store.db.range(prefix.clone()..end)
        }
        None => store.db.scan_prefix(&prefix),
    };
    let entries = entries.rev().filter_map(|item| {
        let entry = || -> Result<Option<(String, RunStatus, String)>> {
            let (k, v) = item.map_err(engine_error)?;
            let id = decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
            let fields = match records {
                true => Some(status_and_task(&k, &v)?),
                // A run deleted since its entry was read is left out.
                false => store.status_and_task(&id)?,
            };
            Ok(fields.map(|(status, task)| (id, status, task)))
        };
        entry().transpose()
    });
    let (ids, next) = select_page(
        entries,
        task_filter,
        query.status,
        list_floor(query).as_deref(),
        query.limit,
        store.scan_limit,
    )?;
    let mut runs = Vec::with_capacity(ids.len());
    for id in ids {
        // Indexes and records are read without a snapshot: a run deleted
        // since its index entry was read is left out.
        if let Some(run) = store.get_run(&id)? {
            runs.push(run);
        }
    }
    Ok(RunPage { runs, next })
}

/// The status and task of the stored run `bytes` (at `run_key`), from its
/// first fields (a compact record) or its JSON (a record of a store before
/// format 8).
fn status_and_task(run_key: &[u8], bytes: &[u8]) -> Result<(RunStatus, String)> {
    if let Some((_, was)) = super::compact::head_and_indexed(bytes) {
        return Ok((was.status, was.task.into_owned()));
    }
    if super::compact::is_compact(bytes) {
        return Err(super::compact::unreadable_head(run_key));
    }
    #[derive(serde::Deserialize)]
    struct Fields {
        task: String,
        status: RunStatus,
    }
    let fields: Fields = decode(run_key, bytes)?;
    Ok((fields.status, fields.task))
}

impl SledStore {
    /// The status and task of stored run `id`, from its record's first
    /// fields; `None` when it is not stored.
    fn status_and_task(&self, id: &str) -> Result<Option<(RunStatus, String)>> {
        let run_key = key("run", &[id]);
        match self.db.get(&run_key).map_err(engine_error)? {
            Some(bytes) => status_and_task(&run_key, &bytes).map(Some),
            None => Ok(None),
        }
    }
}

/// Removes the `ra/{id}` index entries a store before format 10 kept (a
/// run's status and task under its id: what listing every tenant's runs
/// now reads from the records), a batch at a time. A crash in the middle
/// leaves entries nothing reads; the next open removes them.
pub(super) fn drop_ra(store: &SledStore) -> Result<usize> {
    const BATCH: usize = 10_000;
    let prefix = key("ra", &[]);
    let mut dropped = 0;
    loop {
        let mut batch = Batch::default();
        let mut n = 0;
        for item in store.db.scan_prefix(&prefix).keys().take(BATCH) {
            batch.remove(item.map_err(engine_error)?);
            n += 1;
        }
        if n == 0 {
            return Ok(dropped);
        }
        store.apply(batch)?;
        dropped += n;
    }
}

/// [`Runs::running_runs`](crate::store::Runs::running_runs): `act/{id}`.
pub(super) fn running(store: &SledStore) -> Result<Vec<RunRecord>> {
    let prefix = key("act", &[]);
    let ids = store
        .scan(&prefix)
        .map(|item| {
            let (k, _) = item?;
            decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))
        })
        .collect::<Result<Vec<_>>>()?;
    records(store, ids)
}

/// The stored runs of `ids`, in order (an id whose run is gone is skipped).
fn records(store: &SledStore, ids: Vec<String>) -> Result<Vec<RunRecord>> {
    let mut runs = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(run) = store.get_run(&id)? {
            runs.push(run);
        }
    }
    Ok(runs)
}

/// The ids of the first `limit` entries of the queue index under `prefix`
/// (`q/` or `q/{tenant}/`), from the keys alone.
fn ids_in_queue(store: &SledStore, prefix: &[u8], limit: usize) -> Result<Vec<String>> {
    store
        .scan(prefix)
        .take(limit)
        .map(|item| queued_id(&item?.0))
        .collect()
}

/// The id at the end of a `q/{tenant}/{order}/{id}` key.
fn queued_id(k: &[u8]) -> Result<String> {
    // The last part: after the second-to-last separator.
    let body = &k[..k.len().saturating_sub(1)];
    let start = body
        .iter()
        .rposition(|b| *b == 0)
        .ok_or_else(|| corrupt_key(k))?
        + 1;
    decode_part(&k[start..]).ok_or_else(|| corrupt_key(k))
}

/// [`Runs::queued_runs`](crate::store::Runs::queued_runs): `q/{tenant}/…`.
pub(super) fn queued(store: &SledStore, tenant: &str, limit: usize) -> Result<Vec<RunRecord>> {
    records(store, ids_in_queue(store, &key("q", &[tenant]), limit)?)
}

/// [`Runs::queued_ids`](crate::store::Runs::queued_ids): keys only.
pub(super) fn queued_ids(store: &SledStore, tenant: &str, limit: usize) -> Result<Vec<RunId>> {
    let ids = ids_in_queue(store, &key("q", &[tenant]), limit)?;
    Ok(ids.into_iter().map(RunId::from).collect())
}

/// [`Runs::run_summaries_page`](crate::store::Runs::run_summaries_page):
/// `rk/<tenant>/<task>/<id>` → status, read backwards; no record read.
pub(super) fn summaries_page(
    store: &SledStore,
    after: Option<&RunSummary>,
    limit: usize,
) -> Result<Vec<RunSummary>> {
    let prefix = key("rk", &[]);
    let entries = match after {
        Some(a) => store
            .db
            .range(prefix.clone()..key("rk", &[&a.tenant, &a.task, &a.id])),
        None => store.db.scan_prefix(&prefix),
    };
    entries
        .rev()
        .filter_map(|item| {
            let summary = || -> Result<Option<RunSummary>> {
                let (k, _) = item.map_err(engine_error)?;
                let parts =
                    super::keys::split_parts(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
                let [tenant, task, id] =
                    <[String; 3]>::try_from(parts).map_err(|_| corrupt_key(&k))?;
                // A run deleted since its entry was read is left out.
                let Some((status, _)) = store.status_and_task(&id)? else {
                    return Ok(None);
                };
                Ok(Some(RunSummary {
                    tenant: tenant.into(),
                    task: task.into(),
                    id: id.into(),
                    status,
                }))
            };
            summary().transpose()
        })
        .take(limit)
        .collect()
}

/// [`Runs::delete_run`](crate::store::Runs::delete_run).
pub(super) fn delete(store: &SledStore, id: &str) -> Result<bool> {
    let _claims = lock(&store.claim_lock);
    let _serial = lock(&store.run_lock);
    let Some(run) = store.get_run(id)? else {
        return Ok(false);
    };
    if !run.status.is_terminal() {
        return Ok(false);
    }
    let _blobs = lock(&store.blob_lock);
    let mut batch = Batch::default();
    let mut bytes = 0;
    let mut input_file = false;
    if let Some(record) = store.db.get(key("run", &[id])).map_err(engine_error)? {
        bytes += signed(record.len());
        if let Some(head) = head(&record) {
            if let Some(digest) = head.def {
                store.release(&mut batch, &digest)?;
            }
            if let Input::File(len) = head.input {
                bytes += len as i64;
                input_file = true;
            }
        }
    }
    batch.remove(key("run", &[id]));
    for (index_key, _) in run_indexes(&run) {
        batch.remove(index_key);
    }
    // The idempotency key stays until it expires (`expire`).
    let claim = fire_key(&run);
    let owner: Option<String> = store.get(&claim)?;
    if owner.as_deref() == Some(id) {
        batch.remove(claim);
    }
    for kind in ["ev", "rec", "step", "inp"] {
        for item in store.scan(&key(kind, &[id])) {
            let (k, v) = item?;
            bytes += signed(v.len());
            batch.remove(k);
        }
    }
    let log_prefix = key("log", &[id]);
    let mut blobs = Vec::new();
    for item in store.scan(&log_prefix) {
        let (k, v) = item?;
        bytes += store.log_weight(&k, &v)?;
        if let Some(digest) = super::logs::read(&k, &v)?.blob() {
            let mut lref = key("lref", &[digest]);
            lref.extend_from_slice(&k[key("log", &[]).len()..]);
            batch.remove(lref);
            blobs.push(digest.to_owned());
        }
        batch.remove(k);
    }
    let mut weight = Weight::default();
    weight.add(&run.tenant, -bytes);
    store.weigh(&mut batch, &weight, footprint::Side::Runs)?;
    store.apply(batch)?;
    store.release_log_blobs(blobs)?;
    if input_file {
        store.remove_input_file(id)?;
    }
    Ok(true)
}

impl SledStore {
    /// Adds `events` for `run_id` to `batch`, together under one fresh
    /// sequence number (none when there are none).
    /// Returns the bytes added.
    fn add_events(&self, batch: &mut Batch, run_id: &str, events: &[Event]) -> Result<i64> {
        if events.is_empty() {
            return Ok(0);
        }
        let list = super::events::encode(events)?;
        let bytes = signed(list.len());
        self.add_event_list(batch, run_id, list)?;
        Ok(bytes)
    }

    /// Adds the encoded list of events of one write for `run_id` to `batch`:
    /// one key per write, not per event (a run's six events cost six sled
    /// inserts, as many as its record and indexes together).
    fn add_event_list(&self, batch: &mut Batch, run_id: &str, events: Vec<u8>) -> Result<()> {
        let seq = self.db.generate_id().map_err(engine_error)?;
        batch.insert(key("ev", &[run_id, &format!("{seq:020}")]), events);
        Ok(())
    }

    /// The stored run at `run_key`, or the run that holds one of `claims`.
    fn claimed_by(
        &self,
        run_key: &[u8],
        idem_key: &Option<Vec<u8>>,
        fire_key: &Option<Vec<u8>>,
    ) -> Result<Option<Insert>> {
        if let Some(existing) = self.get_run_at(run_key)? {
            return Ok(Some(Insert::Existing(Box::new(existing))));
        }
        if let Some(claim) = idem_key
            && let Some(owner) = self.get::<String>(claim)?
        {
            // A key outlives its run until it expires.
            return Ok(Some(match self.get_run(&owner)? {
                Some(existing) => Insert::Existing(Box::new(existing)),
                None => Insert::Forgotten(owner.into()),
            }));
        }
        if let Some(claim) = fire_key {
            let owner: Option<String> = self.get(claim)?;
            // A fire claim whose run is gone (it cannot be, delete_run
            // removes both) is treated as free rather than blocking new runs.
            if let Some(existing) = owner.map(|id| self.get_run(&id)).transpose()?.flatten() {
                return Ok(Some(Insert::Existing(Box::new(existing))));
            }
        }
        Ok(None)
    }

    /// Adds the replacement of `run` (record and changed indexes) to
    /// `batch` (`record`: the run, encoded) and its move in or out of the
    /// queue to `queued` and the change of its record's size to `weight`;
    /// false if the run is not stored. Callers hold `run_lock`.
    fn run_changes(
        &self,
        batch: &mut Batch,
        change: RunChange<'_>,
        queued: &mut QueueDelta,
        weight: &mut Weight,
    ) -> Result<bool> {
        let RunChange {
            run,
            record,
            steps,
            input,
            first,
            def,
        } = change;
        // The stored record's head and first fields say whether the indexes
        // must change: one read, no decoding of the whole old record (all its
        // steps cost ~100 µs for a large run, most of a write's time).
        let run_key = key("run", &[&run.id]);
        let Some(old) = self.db.get(&run_key).map_err(engine_error)? else {
            return Ok(false);
        };
        let old_len = signed(old.len());
        let (stored, stored_def, stored_steps, stored_input, was) =
            match super::compact::head_and_indexed(&old) {
                Some((head, was)) => (
                    head.revision,
                    Some(head.def),
                    head.step_count,
                    head.input,
                    was,
                ),
                None if super::compact::is_compact(&old) => {
                    return Err(super::compact::unreadable_head(&run_key));
                }
                // A record of a store before format 8 (JSON): decoded whole.
                None => {
                    let Some(record) = self.decode_run(&run_key, &old)? else {
                        return Ok(false);
                    };
                    let was = Indexed::of(&record);
                    match head(&old) {
                        Some(h) => (
                            h.revision,
                            h.def.map(Cow::into_owned),
                            h.step_count,
                            h.input,
                            was,
                        ),
                        None => {
                            let revision = decode::<Revision>(&run_key, &old)?.revision;
                            (revision, None, None, Input::Inline, was)
                        }
                    }
                }
            };
        let same_tenant = was.tenant == run.tenant.as_str();
        let unchanged = same_tenant && was.task == run.task.as_str() && was.status == run.status;
        if stored_def.as_deref() != Some(def.as_str()) {
            return Err(definition_changed(&run.id));
        }
        if first != stored + 1 {
            return Err(Error::Conflict {
                id: run.id.clone().into(),
                stored,
                given: first,
            });
        }
        weight.add(&run.tenant, signed(record.len()));
        weight.add(&was.tenant, -old_len);
        batch.insert(run_key, record);
        self.step_changes(batch, weight, run, steps, stored_steps)?;
        // An input never changes: it is stored once, or again when a record
        // of an earlier format kept it elsewhere. A file left behind that
        // way is removed at the next open (`inputs::remove_orphan_inputs`).
        if std::mem::discriminant(&input) != std::mem::discriminant(&stored_input) {
            self.remove_input(batch, weight, &run.tenant, &run.id, stored_input)?;
            self.put_input(batch, weight, run, input)?;
        }
        if !unchanged {
            queued.replace((&was.tenant, &was.task, was.status), run);
            let (id, tenant, task) = (&run.id, &run.tenant, &run.task);
            let old = state_indexes(id, &was.tenant, &was.task, was.status, was.priority);
            let new = state_indexes(id, tenant, task, run.status, run.priority);
            // The listing entries follow the tenant and task alone.
            let (old_listing, new_listing) = match same_tenant && was.task == task.as_str() {
                true => (Vec::new(), Vec::new()),
                false => (
                    listing_indexes(id, &was.tenant, &was.task),
                    listing_indexes(id, tenant, task),
                ),
            };
            for (index_key, _) in old.into_iter().chain(old_listing) {
                batch.remove(index_key);
            }
            for (index_key, value) in new.into_iter().chain(new_listing) {
                batch.insert(index_key, value);
            }
        }
        Ok(true)
    }
}

/// One run of a write, as `run_changes` stores it.
struct RunChange<'a> {
    run: &'a RunRecord,
    /// Its encoded record.
    record: Vec<u8>,
    /// Its changed steps, encoded, when it keeps them apart.
    steps: Vec<(usize, Vec<u8>)>,
    /// Where its input is kept.
    input: Input,
    /// The revision of its first record in the write: the stored one + 1.
    first: u64,
    /// The digest of its definition, which must be the stored one.
    def: String,
}

/// The revision of a record that [`head`] does not read (one of another
/// shape), decoded.
#[derive(serde::Deserialize)]
struct Revision {
    #[serde(default)]
    revision: u64,
}

/// The key ordering an idempotency key by when it expires.
fn expiry_key(expires_at: Millis, run: &RunRecord, idempotency_key: &str) -> Vec<u8> {
    key(
        "ik",
        &[
            &instant_part(expires_at),
            &run.tenant,
            &run.task,
            idempotency_key,
        ],
    )
}

/// [`Runs::expire_keys`](crate::store::Runs::expire_keys): reads `ik` from
/// its start up to `now` and removes each entry with its `idem` claim (when
/// the claim still names the entry's run: a key freed and taken again by a
/// newer run is that run's).
pub(super) fn expire(store: &SledStore, now: Millis, limit: usize) -> Result<usize> {
    let _claims = lock(&store.claim_lock);
    let prefix = key("ik", &[]);
    let mut batch = Batch::default();
    let mut expired = 0;
    for item in store.scan(&prefix) {
        if expired >= limit {
            break;
        }
        let (k, v) = item?;
        let mut parts =
            super::keys::split_parts(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        let [at, tenant, task, idempotency_key] = parts.as_mut_slice() else {
            return Err(corrupt_key(&k));
        };
        let at: Millis = at.parse().map_err(|_| corrupt_key(&k))?;
        if at > now {
            break;
        }
        let run_id: String = decode(&k, &v)?;
        let claim = key("idem", &[tenant, task, idempotency_key]);
        if store.get::<String>(&claim)?.as_deref() == Some(run_id.as_str()) {
            batch.remove(claim);
        }
        batch.remove(k);
        expired += 1;
    }
    if expired > 0 {
        store.apply(batch)?;
    }
    Ok(expired)
}

/// The idempotency keys held whose run is gone, by the `ik` index (its
/// order is [`KeyEntry::order`]'s), after `after`, at most `limit`; an
/// index entry whose key a later run took is passed over.
pub(super) fn forgotten_keys(
    store: &SledStore,
    after: Option<&KeyEntry>,
    limit: usize,
) -> Result<Vec<KeyEntry>> {
    let prefix = key("ik", &[]);
    let start = match after {
        Some(a) => std::ops::Bound::Excluded(key(
            "ik",
            &[&instant_part(a.expires_at), &a.tenant, &a.task, &a.key],
        )),
        None => std::ops::Bound::Included(prefix.clone()),
    };
    let mut page = Vec::new();
    for item in store
        .db
        .range::<Vec<u8>, _>((start, std::ops::Bound::Unbounded))
    {
        if page.len() >= limit {
            break;
        }
        let (k, v) = item.map_err(engine_error)?;
        if !k.starts_with(&prefix) {
            break;
        }
        let mut parts =
            super::keys::split_parts(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        let [at, tenant, task, idempotency_key] = parts.as_mut_slice() else {
            return Err(corrupt_key(&k));
        };
        let run_id: String = decode(&k, &v)?;
        let claim = key("idem", &[tenant, task, idempotency_key]);
        if store.get::<String>(&claim)?.as_deref() != Some(run_id.as_str())
            || store
                .db
                .contains_key(key("run", &[&run_id]))
                .map_err(engine_error)?
        {
            continue;
        }
        page.push(KeyEntry {
            tenant: std::mem::take(tenant).into(),
            task: std::mem::take(task).into(),
            key: std::mem::take(idempotency_key),
            run_id: run_id.into(),
            expires_at: at.parse().map_err(|_| corrupt_key(&k))?,
        });
    }
    Ok(page)
}

/// Stores `keys` (an import), each unless its claim is held, in one batch.
pub(super) fn restore_keys(store: &SledStore, keys: &[KeyEntry]) -> Result<()> {
    let _claims = lock(&store.claim_lock);
    let mut batch = Batch::default();
    let mut taken = std::collections::HashSet::new();
    for k in keys {
        let claim = key("idem", &[&k.tenant, &k.task, &k.key]);
        if !taken.insert(claim.clone()) || store.db.contains_key(&claim).map_err(engine_error)? {
            continue;
        }
        let run_id = encode(&k.run_id.as_str())?;
        batch.insert(claim, run_id.clone());
        batch.insert(
            key(
                "ik",
                &[&instant_part(k.expires_at), &k.tenant, &k.task, &k.key],
            ),
            run_id,
        );
    }
    store.apply(batch)
}

/// Gives the idempotency keys of a store written before keys outlived their
/// runs an `ik` entry, once (the marker `sys/key-expiry`): each expires
/// `ttl_ms` after its run was created. Runs at open.
pub(super) fn build_key_expiry(store: &SledStore, ttl_ms: Millis) -> Result<()> {
    let marker = key("sys", &["key-expiry"]);
    if store.db.contains_key(&marker).map_err(engine_error)? {
        return Ok(());
    }
    let mut batch = Batch::default();
    let prefix = key("idem", &[]);
    for item in store.scan(&prefix) {
        let (k, v) = item?;
        let parts = super::keys::split_parts(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        let [tenant, task, idempotency_key] = parts.as_slice() else {
            return Err(corrupt_key(&k));
        };
        let run_id: String = decode(&k, &v)?;
        let created = crate::store::id_millis(&run_id).unwrap_or(0);
        let entry = key(
            "ik",
            &[
                &instant_part(created.saturating_add(ttl_ms)),
                tenant,
                task,
                idempotency_key,
            ],
        );
        batch.insert(entry, encode(&run_id)?);
    }
    batch.insert(marker, encode("1")?);
    store.apply(batch)
}

/// Moves the queued runs of a store written before the `q` index (when
/// `act` held every active run) into it, once; the marker `sys/queue-index`
/// records that. Runs at open, before anything else uses the store.
pub(super) fn build_queue_index(store: &SledStore) -> Result<()> {
    let marker = key("sys", &["queue-index"]);
    if store.db.contains_key(&marker).map_err(engine_error)? {
        return Ok(());
    }
    let mut batch = Batch::default();
    let prefix = key("act", &[]);
    for item in store.scan(&prefix) {
        let (k, _) = item?;
        let id = decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        let Some(run) = store.get_run(&id)? else {
            continue;
        };
        if run.status != crate::model::RunStatus::Running {
            batch.remove(k);
        }
        for (index_key, value) in run_indexes(&run) {
            batch.insert(index_key, value);
        }
    }
    batch.insert(marker, encode("1")?);
    store.apply(batch)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::run;
    use super::*;
    use crate::model::RunStatus;

    /// The events of one write share a key; a store written when each event
    /// had its own key reads back the same, old keys and new in order.
    #[test]
    fn events_of_one_write_share_a_key_and_single_event_keys_still_read() {
        use super::super::fixtures::event;
        let dir = tempfile::tempdir().unwrap();
        let r = run("r00000000000003e8000000", RunStatus::Queued);
        let store = SledStore::open(dir.path()).unwrap();
        store
            .insert_run(&r, false, None, &[event(&r.id, "queued")])
            .unwrap();
        // As an older ax wrote it: one event, not a list, under its own key.
        let mut batch = Batch::default();
        store
            .add_event_list(&mut batch, &r.id, encode(&event(&r.id, "held")).unwrap())
            .unwrap();
        store.db.apply_batch(batch).unwrap();
        let mut done = r.clone();
        done.status = RunStatus::Succeeded;
        done.next_revision();
        let two = [event(&r.id, "running"), event(&r.id, "succeeded")];
        store.write_runs(&[(done, two.to_vec())], &[]).unwrap();
        let to: Vec<String> = store
            .events(&r.id)
            .unwrap()
            .into_iter()
            .map(|e| e.to)
            .collect();
        assert_eq!(to, ["queued", "held", "running", "succeeded"]);
        assert_eq!(
            store.scan(&key("ev", &[&r.id])).count(),
            3,
            "one key per write"
        );
    }

    /// Listing entries hold nothing since format 10 (a run's state is read
    /// from its record); one written by an older ax (format 8: status and
    /// task; format 9: status), even with a status its record has left
    /// since, lists the same.
    #[test]
    fn task_index_entries_of_every_format_list_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let a = run("r00000000000003e8000001", RunStatus::Succeeded);
        let b = run("r00000000000003e8000002", RunStatus::Queued);
        for r in [&a, &b] {
            store.insert_run(r, false, None, &[]).unwrap();
        }
        let rk = |r: &RunRecord| key("rk", &[&r.tenant, &r.task, &r.id]);
        let rt = |r: &RunRecord| key("rt", &[&r.tenant, &r.id]);
        for r in [&a, &b] {
            assert!(store.db.get(rk(r)).unwrap().unwrap().is_empty());
            assert!(store.db.get(rt(r)).unwrap().unwrap().is_empty());
        }
        // As format 8 wrote it (status byte, then the task), with the
        // status `queued` this run has left; as format 9 wrote it.
        store
            .db
            .insert(rk(&a), [&[0u8][..], b"a"].concat())
            .unwrap();
        store
            .db
            .insert(rt(&a), [&[0u8][..], b"a"].concat())
            .unwrap();
        store.db.insert(rk(&b), &[0u8][..]).unwrap();
        for (status, tenant_only) in [None, Some(RunStatus::Succeeded), Some(RunStatus::Queued)]
            .into_iter()
            .flat_map(|s| [(s, false), (s, true)])
        {
            let page = store
                .list_runs(&RunQuery {
                    tenant: Some("t1".into()),
                    task: (!tenant_only).then(|| "a".into()),
                    status,
                    limit: 10,
                    ..Default::default()
                })
                .unwrap();
            let mut listed: Vec<(String, String)> = page
                .runs
                .iter()
                .map(|r| (r.id.to_string(), r.task.to_string()))
                .collect();
            listed.sort();
            let mut expected: Vec<(String, String)> = [&a, &b]
                .into_iter()
                .filter(|r| status.is_none_or(|s| s == r.status))
                .map(|r| (r.id.to_string(), "a".to_owned()))
                .collect();
            expected.sort();
            assert_eq!(listed, expected, "{status:?}");
        }
    }

    /// A store whose keys had no expiry (as an older ax left it: `idem`
    /// only, no `ik`, no marker) gets one at open: the run's creation plus
    /// the default TTL. Before that instant the key holds, after it a sweep
    /// frees it.
    #[test]
    fn keys_of_a_store_written_before_key_expiry_get_one_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = run("r00000000000003e8000000", RunStatus::Succeeded);
        r.idempotency_key = Some("k".to_owned());
        let created = crate::store::id_millis(&r.id).unwrap();
        {
            let store = SledStore::open(dir.path()).unwrap();
            store.insert_run(&r, false, None, &[]).unwrap();
            for item in store.db.scan_prefix(key("ik", &[])) {
                store.db.remove(item.unwrap().0).unwrap();
            }
            store.db.remove(key("sys", &["key-expiry"])).unwrap();
            store.db.flush().unwrap();
        }
        let store = SledStore::open(dir.path()).unwrap();
        let ttl = crate::task::retention::DEFAULT_IDEMPOTENCY_TTL.as_millis() as Millis;
        assert_eq!(store.expire_keys(created + ttl - 1, 10).unwrap(), 0);
        let mut again = r.clone();
        again.id = "r00000000000007d0000000".to_owned().into();
        assert!(matches!(
            store.insert_run(&again, false, None, &[]).unwrap(),
            Insert::Existing(_)
        ));
        assert_eq!(store.expire_keys(created + ttl, 10).unwrap(), 1);
        assert_eq!(
            store.insert_run(&again, false, None, &[]).unwrap(),
            Insert::Created
        );
    }
}
