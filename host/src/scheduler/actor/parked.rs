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

use super::Actor;
use super::active::ActiveRun;
use crate::model::ids::TaskKey;
use crate::model::priority::HIGH_PRIORITY;
use crate::model::{Millis, RunRecord, RunStatus, TriggerKind};
use crate::scheduler::Result;
use crate::scheduler::core as decide;
use crate::store::prelude::*;
use crate::task::TaskSpec;

/// Least time between two refills of the heads (ms).
const HEAD_REFILL_MS: Millis = 5;

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

    /// Refills the heads that fell to half: reads each such tenant's next
    /// queued runs from the store, in dispatch order, and takes them up.
    pub(super) fn refill_heads(&mut self, now: Millis) {
        // At most every few milliseconds: a head that cannot grow yet (its
        // runs' writes not landed) must not cost every turn of the loop.
        if now < self.heads_refilled_at.saturating_add(HEAD_REFILL_MS) {
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
        for tenant in low {
            if let Err(e) = self.refill_head(&tenant, head, now) {
                tracing::error!(%tenant, error = %e, "reading queued runs from the store failed");
            }
        }
    }

    /// When the loop must wake to refill a head that has room (throttled
    /// by [`HEAD_REFILL_MS`]), if one has.
    pub(super) fn heads_wake(&self) -> Option<Millis> {
        let half = self.config.queue_head.max(1) / 2;
        self.parked
            .keys()
            .any(|t| self.resident_queued(t) <= half)
            .then(|| self.heads_refilled_at.saturating_add(HEAD_REFILL_MS))
    }

    fn refill_head(&mut self, tenant: &str, head: usize, now: Millis) -> Result<()> {
        let resident = self.resident_queued(tenant);
        let room = head.saturating_sub(resident);
        // The runs in memory come first in the index (they were read in
        // order; a started one stays there until its write lands): read
        // past them by id, and only the ones taken up whole.
        let ids = self
            .store
            .queued_ids(tenant, head.saturating_mul(2) + room)?;
        let mut taken = 0;
        for id in ids {
            if taken == room || !self.parked.contains_key(tenant) {
                break;
            }
            if self.in_memory(&id) {
                continue;
            }
            let Some(rec) = self.store.get_run(&id)? else {
                continue;
            };
            if rec.status != RunStatus::Queued {
                continue;
            }
            self.take_up_parked(rec, now)?;
            taken += 1;
        }
        Ok(())
    }

    /// Takes a parked run (as stored) up into memory: it becomes resident
    /// like a run just created, its first steps made ready.
    pub(super) fn take_up_parked(&mut self, rec: RunRecord, now: Millis) -> Result<()> {
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
