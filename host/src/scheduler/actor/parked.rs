//! The persistent queue's head: which queued runs are held in memory.
//!
//! Every queued run is in the store's queue index, in dispatch order per
//! tenant (priority with aging, [`Runs::queued_runs`](crate::store::Runs::queued_runs)). The actor holds at
//! most `queue_head` of a tenant's queued runs in memory — their DAG state,
//! ready steps in the dispatch queue — and *parks* the others: stored, counted
//! (for the queue bounds, shedding and `overlap`), not resident. When a
//! tenant's resident queued runs fall to half the head, the next ones are
//! read from the index and taken up like new runs.
//!
//! What this keeps and what it changes:
//! - Only manual triggers are parked (see [`Actor::parks`]); fires and
//!   `after` runs are few per task and stay in memory.
//! - Order: the head is read in dispatch order, so the order between the
//!   head and the rest is the dispatch queue's own. A run of priority ≥
//!   `HIGH_PRIORITY` is never parked (it must be able to reach the reserved
//!   share at once); the queue bounds still cap them.
//! - A run created while its tenant's head is full is parked, even if it
//!   would sort before runs in the head: it waits for at most `queue_head`
//!   runs of its own tenant (the head is refilled in order from then on).
//! - Fair share across tenants is unchanged: every tenant with queued runs
//!   has a head in memory, and dispatch picks among the heads.
//! - The index is written with the run (one atomic write), so a crash loses
//!   no parked run; recovery reads the running runs and each tenant's head,
//!   and counts the rest from the index without reading them.
//!
//! [`Runs::queued_runs`]: crate::store::Runs::queued_runs

use std::collections::HashSet;

use super::Actor;
use super::active::ActiveRun;
use crate::model::ids::{RunId, TaskKey};
use crate::model::priority::HIGH_PRIORITY;
use crate::model::{Millis, RunRecord, RunStatus, TriggerKind};
use crate::scheduler::Result;
use crate::scheduler::core as decide;
use crate::store::prelude::*;
use crate::task::TaskSpec;

/// Least time between two refills of the heads (ms).
const HEAD_REFILL_MS: Millis = 5;

/// A refill of the heads being read off the actor's task (at most one at a
/// time). The actor picks the runs by id from the queue index, skipping
/// those in memory; a thread reads them whole; the actor takes up what
/// comes back. A run picked was parked, so only the actor taking it up
/// could change it meanwhile (a cancel takes a parked run up first,
/// [`Actor::take_up_if_parked`]; a run in memory is written by the actor
/// alone): every take-up while a read is under way is noted here, and the
/// read's copies of those runs are dropped as stale, as are copies of runs
/// in memory when the read comes back.
#[derive(Debug, Default)]
pub(super) struct HeadRead {
    /// Runs taken up since the read began.
    taken: HashSet<String>,
}

/// What a head read brings back: for each tenant, its picked runs still
/// stored, in dispatch order.
#[derive(Debug)]
pub(super) struct HeadsRead {
    tenants: Vec<(String, crate::store::Result<Vec<RunRecord>>)>,
}

impl Actor {
    /// Queued runs of `tenant` held in memory.
    pub(super) fn resident_queued(&self, tenant: &str) -> usize {
        let queued = self.queued_runs.get(tenant).copied().unwrap_or(0);
        queued.saturating_sub(self.parked.get(tenant).copied().unwrap_or(0))
    }

    /// Runs of a task that count for `overlap`: those in memory and those
    /// parked in the store.
    pub(super) fn task_active(&self, key: &TaskKey) -> usize {
        self.by_task.get(key).map_or(0, |t| t.active)
            + self.parked_by_task.get(key).copied().unwrap_or(0)
    }

    /// Whether a new queued run (already counted in `queued_runs`) is parked
    /// rather than taken up: its tenant's head is full. Only manual triggers
    /// are parked: `overlap` never holds them, so a parked run needs no place
    /// in its task's line of held runs (fires and `after` runs, at most a few
    /// per task, stay resident).
    pub(super) fn parks(&self, rec: &RunRecord) -> bool {
        rec.trigger == TriggerKind::Manual
            && rec.priority < HIGH_PRIORITY
            && self.resident_queued(&rec.tenant) > self.config.queue_head
    }

    /// Counts a stored run as parked.
    pub(super) fn park(&mut self, rec: &RunRecord) {
        *self.parked.entry(rec.tenant.clone().into()).or_default() += 1;
        *self
            .parked_by_task
            .entry(TaskKey::new(&rec.tenant, &rec.task))
            .or_default() += 1;
    }

    pub(super) fn unpark_count(&mut self, rec: &RunRecord) {
        if let Some(n) = self.parked.get_mut(rec.tenant.as_str()) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.parked.remove(rec.tenant.as_str());
            }
        }
        let key = TaskKey::new(&rec.tenant, &rec.task);
        if let Some(n) = self.parked_by_task.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.parked_by_task.remove(&key);
            }
        }
    }

    /// Whether run `id` is known in memory, as active, finished or with
    /// changes not yet stored or still being written (then the store's copy
    /// is stale).
    pub(super) fn in_memory(&self, id: &str) -> bool {
        self.runs.contains_key(id) || self.unwritten(id)
    }

    /// Refills the heads that fell to half: picks each such tenant's next
    /// queued runs from the store's index, in dispatch order, and reads
    /// them off this task ([`HeadRead`]); they are taken up when the read
    /// comes back ([`Actor::on_heads_read`]). One read at a time.
    pub(super) fn refill_heads(&mut self, now: Millis) {
        // At most every few milliseconds: a head that cannot grow yet (its
        // runs' writes not landed) must not cost every turn of the loop.
        if self.head_read.is_some() || now < self.heads_refilled_at.saturating_add(HEAD_REFILL_MS) {
            return;
        }
        self.heads_refilled_at = now;
        let head = self.config.queue_head.max(1);
        let low: Vec<String> = self
            .parked
            .keys()
            .filter(|t| self.resident_queued(t) <= head / 2)
            .cloned()
            .collect();
        let mut wanted = Vec::new();
        for tenant in low {
            match self.head_candidates(&tenant, head) {
                Ok(ids) if ids.is_empty() => {}
                Ok(ids) => wanted.push((tenant, ids)),
                Err(e) => {
                    tracing::error!(%tenant, error = %e, "reading queued runs from the store failed");
                }
            }
        }
        if wanted.is_empty() {
            return;
        }
        self.head_read = Some(HeadRead::default());
        let (store, tx) = (self.store.clone(), self.heads_tx.clone());
        // Detached: a read nobody takes up any more (the actor stopped) is dropped.
        drop(super::off_actor(self.config.inline_store, move || {
            let tenants = wanted
                .into_iter()
                .map(|(tenant, ids)| {
                    let runs = ids
                        .iter()
                        .filter_map(|id| store.get_run(id).transpose())
                        .collect();
                    (tenant, runs)
                })
                .collect();
            let _ = tx.send(HeadsRead { tenants });
        }));
    }

    /// The ids of `tenant`'s next parked runs, as many as its head has room
    /// for, in dispatch order.
    fn head_candidates(&self, tenant: &str, head: usize) -> Result<Vec<RunId>> {
        let room = head.saturating_sub(self.resident_queued(tenant));
        // The runs in memory come first in the index (they were read in
        // order; a started one stays there until its write lands): read
        // past them.
        let ids = self
            .store
            .queued_ids(tenant, head.saturating_mul(2) + room)?;
        Ok(ids
            .into_iter()
            .filter(|id| !self.in_memory(id))
            .take(room)
            .collect())
    }

    /// When the loop must wake to refill a head that has room (throttled
    /// by [`HEAD_REFILL_MS`]), if one has; not while a read is under way
    /// (its result wakes the loop).
    pub(super) fn heads_wake(&self) -> Option<Millis> {
        if self.head_read.is_some() {
            return None;
        }
        let half = self.config.queue_head.max(1) / 2;
        self.parked
            .keys()
            .any(|t| self.resident_queued(t) <= half)
            .then(|| self.heads_refilled_at.saturating_add(HEAD_REFILL_MS))
    }

    /// Takes up the runs a head read brought back, each still parked as
    /// read: not taken up by other means meanwhile ([`HeadRead::taken`]),
    /// not in memory, still queued; as many as each head has room for now.
    pub(super) fn on_heads_read(&mut self, read: HeadsRead) {
        let Some(HeadRead { taken }) = self.head_read.take() else {
            return;
        };
        let now = self.clock.now_ms();
        let head = self.config.queue_head.max(1);
        for (tenant, runs) in read.tenants {
            let runs = match runs {
                Ok(runs) => runs,
                Err(e) => {
                    tracing::error!(%tenant, error = %e, "reading queued runs from the store failed");
                    continue;
                }
            };
            let room = head.saturating_sub(self.resident_queued(&tenant));
            let mut taken_up = 0;
            for rec in runs {
                if taken_up == room || !self.parked.contains_key(tenant.as_str()) {
                    break;
                }
                if rec.status != RunStatus::Queued
                    || taken.contains(rec.id.as_str())
                    || self.in_memory(&rec.id)
                {
                    continue;
                }
                if let Err(e) = self.take_up_parked(rec, now) {
                    tracing::error!(%tenant, error = %e, "taking up a queued run failed");
                    break;
                }
                taken_up += 1;
            }
        }
    }

    /// Takes a parked run (as stored) up into memory: it becomes resident
    /// like a run just created, its first steps made ready.
    pub(super) fn take_up_parked(&mut self, rec: RunRecord, now: Millis) -> Result<()> {
        if let Some(read) = &mut self.head_read {
            read.taken.insert(rec.id.to_string());
        }
        self.unpark_count(&rec);
        let spec = match TaskSpec::stored(&rec.spec) {
            Ok(spec) => spec,
            Err(e) => {
                tracing::error!(run = %rec.id, error = %e, "cannot read the task snapshot of a queued run; failing it");
                let mut rec = rec;
                let mut events = Vec::new();
                decide::run::set_run(
                    &mut rec,
                    RunStatus::Failed,
                    now,
                    format!("unreadable task snapshot: {e}"),
                    "scheduler",
                    &mut events,
                );
                self.queued_runs
                    .entry(rec.tenant.clone().into())
                    .and_modify(|n| *n = n.saturating_sub(1));
                self.store.update_run(&mut rec, &events)?;
                return Ok(());
            }
        };
        let key = TaskKey::new(&rec.tenant, &rec.task);
        let active = self.task_active(&key);
        let held = decide::fire::held_on_create(rec.trigger, spec.overlap, active);
        self.track(key, &rec.id, held);
        let id = rec.id.clone();
        self.runs
            .insert(id.clone().into(), ActiveRun::new(rec, spec, held));
        // As at recovery: a run parked by a restart may have steps that were
        // already queued (or attempts lost) before it; they are queued again.
        self.recover_run(&id, now)?;
        self.spill(&id);
        Ok(())
    }

    /// Takes up a parked run a command names (cancel), if it is one.
    pub(super) fn take_up_if_parked(&mut self, id: &str, now: Millis) -> Result<()> {
        if self.in_memory(id) || self.parked.is_empty() {
            return Ok(());
        }
        match self.store.get_run(id)? {
            Some(rec)
                if rec.status == RunStatus::Queued
                    && self.parked.contains_key(rec.tenant.as_str()) =>
            {
                self.take_up_parked(rec, now)
            }
            _ => Ok(()),
        }
    }
}
