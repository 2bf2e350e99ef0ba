//! Run control asked by a person: cancel, retry, requeue a dead letter,
//! rerun a step (and what reopening a finished run does).

use super::Actor;
use super::active::ActiveRun;
use crate::model::ids::TaskKey;
use crate::model::{Millis, RunRecord, RunStatus, StepRunRecord};
use crate::scheduler::core::Ctx;
use crate::scheduler::{Error, Result, core as decide};
use crate::store::prelude::*;
use crate::task::TaskSpec;

/// The definition a stored run was started from, parsed (once per definition).
fn stored_snapshot(rec: &RunRecord) -> Result<std::sync::Arc<TaskSpec>> {
    TaskSpec::stored(&rec.spec)
        .map_err(|e| Error::Conflict(format!("the run's task snapshot is unreadable: {e}")))
}

impl Actor {
    pub(super) fn on_cancel(&mut self, run_id: &str, actor: &str) -> Result<RunRecord> {
        let now = self.clock.now_ms();
        self.take_up_if_parked(run_id, now)?;
        // The answer shows the run whole (`spill`).
        self.unspill(run_id)?;
        let Some(run) = self.runs.get_mut(run_id) else {
            let rec = self
                .store
                .get_run(run_id)?
                .ok_or_else(|| Error::NotFound(format!("run `{run_id}`")))?;
            return Err(Error::Conflict(format!(
                "run `{}` is already {}",
                rec.id,
                rec.status.as_str()
            )));
        };
        let attempts_out = !run.cancels.is_empty();
        let (mut effects, mut events) = (Vec::new(), Vec::new());
        let ctx = Ctx { now, actor };
        if !decide::control::cancel(&mut run.state, ctx, attempts_out, &mut effects, &mut events) {
            return Err(Error::Conflict(format!(
                "run `{run_id}` is already cancelled"
            )));
        }
        let rec = run.rec.clone();
        self.dirty.add(run_id, &mut events);
        self.apply(run_id, effects, now)?;
        Ok(rec)
    }

    /// An ended run read back from the store to be reopened (retry,
    /// requeue, rerun). Refused while the run is active, or while it has
    /// changes the store has not taken yet (it refuses writes and the writer
    /// retries them): the stored copy is stale then — a run whose step
    /// succeeded in memory may still read `cancelled` there, and reopening
    /// that copy would run the succeeded step again.
    fn stored_ended_run(&self, run_id: &str) -> Result<RunRecord> {
        if self.runs.contains_key(run_id) {
            return Err(Error::Conflict(format!("run `{run_id}` is still active")));
        }
        if self.unwritten(run_id) {
            return Err(Error::Store(crate::store::Error::Unavailable(format!(
                "run `{run_id}` has changes the store has not taken yet; try again once it writes"
            ))));
        }
        self.store
            .get_run(run_id)?
            .ok_or_else(|| Error::NotFound(format!("run `{run_id}`")))
    }

    pub(super) fn on_retry(&mut self, run_id: &str, actor: &str) -> Result<RunRecord> {
        // The stored run must be current before it is read back.
        self.flush()?;
        let now = self.clock.now_ms();
        let rec = self.stored_ended_run(run_id)?;
        if rec.status == RunStatus::Succeeded {
            return Err(Error::Conflict(format!(
                "run `{run_id}` succeeded; nothing to retry"
            )));
        }
        // Its open dead letters are settled if the retry succeeds
        // (`advance.rs`, `resolve_letters`).
        self.reopen(
            rec,
            decide::control::retry_resets,
            actor,
            now,
            "retry requested",
        )
    }

    pub(super) fn on_requeue(&mut self, dead_id: &str, actor: &str) -> Result<RunRecord> {
        self.flush()?;
        let now = self.clock.now_ms();
        let mut dead = self
            .store
            .get_dead_letter(dead_id)?
            .ok_or_else(|| Error::NotFound(format!("dead letter `{dead_id}`")))?;
        if dead.resolution.is_some() {
            return Err(Error::Conflict(format!(
                "dead letter `{dead_id}` is already resolved"
            )));
        }
        let rec = self.stored_ended_run(&dead.run_id)?;
        let step = dead.step.clone();
        // A run retried since its step died may have run the step to success:
        // requeueing the stale letter would run a succeeded step again.
        let status = rec.steps.iter().find(|s| s.name == step).map(|s| s.status);
        if status != Some(crate::model::StepStatus::Dead) {
            return Err(Error::Conflict(format!(
                "step `{step}` of run `{}` is no longer dead (the run was retried since)",
                dead.run_id
            )));
        }
        let reopened = self.reopen(
            rec,
            decide::control::requeue_resets(&step),
            actor,
            now,
            "dead letter requeued",
        )?;
        dead.resolution = Some(format!("requeued by {actor}"));
        dead.resolved_at = Some(now);
        self.store.put_dead_letter(&dead)?;
        Ok(reopened)
    }

    pub(super) fn on_rerun_step(
        &mut self,
        run_id: &str,
        step: &str,
        actor: &str,
    ) -> Result<RunRecord> {
        self.flush()?;
        let now = self.clock.now_ms();
        let rec = self.stored_ended_run(run_id)?;
        let spec = stored_snapshot(&rec)?;
        let i = spec
            .steps
            .iter()
            .position(|s| s.name == step)
            .ok_or_else(|| Error::NotFound(format!("step `{step}` in run `{run_id}`")))?;
        let names = decide::control::rerun_resets(&spec, i);
        self.reopen(
            rec,
            |s| names.contains(&s.name),
            actor,
            now,
            &format!("rerun of step `{step}` requested"),
        )
    }

    /// Puts a finished run back to work: the steps `reset` selects go back to
    /// pending (their attempts kept, so numbering continues), the rest keep their results.
    pub(super) fn reopen(
        &mut self,
        mut rec: RunRecord,
        reset: impl Fn(&StepRunRecord) -> bool,
        actor: &str,
        now: Millis,
        reason: &str,
    ) -> Result<RunRecord> {
        let spec = stored_snapshot(&rec)?;
        let mut events = Vec::new();
        decide::control::reopen(&mut rec, reset, Ctx { now, actor }, reason, &mut events);
        self.store.update_run(&mut rec, &events)?;
        let key = TaskKey::new(&rec.tenant, &rec.task);
        self.track(key, &rec.id, false);
        *self
            .queued_runs
            .entry(rec.tenant.clone().into())
            .or_default() += 1;
        let id = rec.id.clone();
        self.runs
            .insert(id.clone().into(), ActiveRun::new(rec, spec, false));
        let mut events = Vec::new();
        self.advance(&id, now, actor, &mut events)?;
        Ok(
            match self
                .runs
                .get(id.as_str())
                .map(|r| r.rec.clone())
                .or_else(|| self.finished.get(id.as_str()).cloned())
            {
                Some(r) => r,
                None => self
                    .store
                    .get_run(&id)?
                    .ok_or_else(|| Error::NotFound(format!("run `{id}`")))?,
            },
        )
    }
}
