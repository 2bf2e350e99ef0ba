//! Crash recovery: rebuilding memory from the store at start (tenants'
//! usage, active runs with their lost attempts, schedules).

use super::active::ActiveRun;
use super::{Actor, dead_letter_id};
use crate::model::ids::TaskKey;
use crate::model::{Millis, RunStatus};
use crate::scheduler::core::Ctx;
use crate::scheduler::core::run::set_run;
use crate::scheduler::quota::{TenantQuota, WindowUse};
use crate::scheduler::{Result, core as decide};
use crate::store::prelude::*;
use crate::task::TaskSpec;
use crate::tenant::HOUR_MS;

impl Actor {
    /// Rebuilds memory from the store after a start: attempts that were
    /// running are marked `lost` and retried per policy, queued and waiting
    /// steps resume, the schedules due within the fire window are armed
    /// (missed fires follow `catch_up` when their timers fire, immediately).
    pub(in crate::scheduler) fn recover(&mut self) -> Result<()> {
        let now = self.clock.now_ms();
        let slots = self.config.queue.global_limit;
        for tenant in self.store.list_tenants()? {
            let start = tenant.quota.window_start(now);
            let used = self
                .store
                .usage(&tenant.name, start, now + HOUR_MS)?
                .iter()
                .fold(WindowUse::default(), |used, b| WindowUse {
                    fuel: used.fuel.saturating_add(b.fuel),
                    wall_ms: used
                        .wall_ms
                        .saturating_add(b.wall_ms.max(0.0).ceil() as u64),
                });
            self.quotas.insert(
                tenant.name.clone(),
                TenantQuota::new(&tenant, used, slots, now),
            );
            self.apply_quota(&tenant.name);
        }
        // The running runs whole (their attempts were lost), each tenant's
        // queue head, and the rest of the queue counted from its index.
        let mut active = self.store.running_runs()?;
        let counts = self.store.queued_counts()?;
        let mut tenants: Vec<&str> = counts.iter().map(|(t, _, _)| t.as_str()).collect();
        tenants.dedup();
        for tenant in tenants {
            active.extend(self.store.queued_runs(tenant, self.config.queue_head)?);
        }
        for (tenant, task, n) in &counts {
            *self.queued_runs.entry(tenant.clone().into()).or_default() += n;
            *self.parked.entry(tenant.clone().into()).or_default() += n;
            *self
                .parked_by_task
                .entry(TaskKey::new(tenant, task))
                .or_default() += n;
        }
        // The head's runs are not parked (and are counted as queued again
        // below, as each is taken up); only the rest count for `overlap` as
        // parked, so a head run is not held behind itself or a later one.
        for rec in active.iter().filter(|r| r.status == RunStatus::Queued) {
            self.unpark_count(rec);
            self.queued_runs
                .entry(rec.tenant.clone().into())
                .and_modify(|n| *n = n.saturating_sub(1));
        }
        active.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        for rec in active {
            let spec = match TaskSpec::stored(&rec.spec) {
                Ok(spec) => spec,
                Err(e) => {
                    tracing::error!(run = %rec.id, error = %e, "cannot read the task snapshot of an active run; failing it");
                    let mut rec = rec;
                    let mut events = Vec::new();
                    set_run(
                        &mut rec,
                        RunStatus::Failed,
                        now,
                        format!("unreadable task snapshot: {e}"),
                        "recovery",
                        &mut events,
                    );
                    self.store.update_run(&mut rec, &events)?;
                    continue;
                }
            };
            let key = TaskKey::new(&rec.tenant, &rec.task);
            let active = self.task_active(&key);
            let held = rec.status == RunStatus::Queued
                && decide::fire::held_on_create(rec.trigger, spec.overlap, active);
            if rec.status == RunStatus::Queued {
                *self
                    .queued_runs
                    .entry(rec.tenant.clone().into())
                    .or_default() += 1;
            }
            self.track(key, &rec.id, held);
            let id = rec.id.clone();
            self.runs
                .insert(id.clone().into(), ActiveRun::new(rec, spec, held));
            self.recover_run(&id, now)?;
            self.spill(&id);
        }
        // Only the fires due within the window (missed ones included: they
        // are due), not every task: the rest stay in the store's index.
        self.refill(now)?;
        self.flush()
    }

    pub(super) fn recover_run(&mut self, id: &str, now: Millis) -> Result<()> {
        let Some(run) = self.runs.get_mut(id) else {
            return Ok(());
        };
        let (mut effects, mut events) = (Vec::new(), Vec::new());
        let mut retries = decide::attempt::Retries {
            max_lost: self.config.max_lost_attempts,
            rng: &mut self.rng,
            dead_letter_id,
        };
        let ctx = Ctx {
            now,
            actor: "recovery",
        };
        decide::attempt::recover(&mut run.state, ctx, &mut retries, &mut effects, &mut events);
        // Nothing lost or moved: the run is as stored (a queued run parked,
        // or read at start), and making its steps ready is what the next
        // recovery would derive again, deferred like a new run's.
        let as_stored = effects.is_empty() && events.is_empty();
        self.apply(id, effects, now)?;
        if as_stored {
            self.advance_new(id, now, "recovery", &mut events)
        } else {
            self.advance(id, now, "recovery", &mut events)
        }
    }
}
