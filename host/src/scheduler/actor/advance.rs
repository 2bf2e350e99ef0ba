//! Moving a run on: deciding the steps whose upstreams ended, `when`
//! conditions, finishing a run and releasing the next held run of its task.

use std::sync::atomic::Ordering;

use super::{Actor, Timer};
use crate::model::ids::TaskKey;
use crate::model::{Event, Millis, Outcome, RunRecord, RunStatus, StepStatus};
use crate::scheduler::cond_pool::{CondDone, CondJob, Request as CondRequest};
use crate::scheduler::core::{Ctx, Effect};
use crate::scheduler::queue::Entry;
use crate::scheduler::{Result, core as decide};

impl Actor {
    pub(super) fn entry_for(&self, run_id: &str, step: usize, now: Millis) -> Entry {
        let run = &self.runs[run_id];
        Entry {
            run_id: run_id.to_string(),
            step,
            tenant: run.rec.tenant.clone().into(),
            pool: self.queue.pool_for(run.spec.steps[step].pool.as_deref()),
            priority: run.rec.priority,
            enqueued_at: now,
        }
    }

    /// Moves a run on after a change (the core decides: [`decide::run::advance`])
    /// and marks it for the next write with `events`.
    pub(super) fn advance(
        &mut self,
        id: &str,
        now: Millis,
        actor: &str,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        self.advance_marked(id, now, actor, events, false)
    }

    /// [`Actor::advance`] for a run as the store holds it (just inserted,
    /// or taken up from the store unchanged): what a restart would derive
    /// again from the stored run (its first steps made ready) is deferred
    /// to the run's next write ([`super::write::Dirty`]).
    pub(super) fn advance_new(
        &mut self,
        id: &str,
        now: Millis,
        actor: &str,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        self.advance_marked(id, now, actor, events, true)
    }

    fn advance_marked(
        &mut self,
        id: &str,
        now: Millis,
        actor: &str,
        events: &mut Vec<Event>,
        new: bool,
    ) -> Result<()> {
        let Some(run) = self.runs.get_mut(id) else {
            return Ok(());
        };
        let mut effects = Vec::new();
        let attempts_out = !run.cancels.is_empty();
        decide::run::advance(
            &mut run.state,
            Ctx { now, actor },
            self.config.fire_ahead_ms,
            attempts_out,
            &mut effects,
            events,
        );
        // Only steps readied, conditions asked for, a release timer set —
        // all done again by recovery from the stored queued run. Anything
        // else (the run ended, a step failed) is written as usual.
        let derived = new
            && run.rec.status == RunStatus::Queued
            && effects.iter().all(|e| {
                matches!(
                    e,
                    Effect::Enqueue(_) | Effect::Evaluate(_) | Effect::ReleaseAt(_)
                )
            });
        if derived {
            self.dirty.defer(id, events, tokio::time::Instant::now());
        } else {
            self.dirty.add(id, events);
        }
        self.apply(id, effects, now)?;
        self.start_conditions();
        Ok(())
    }

    /// Applies what a decision of the core about run `id` asks for, in
    /// order; a finished run is forgotten last.
    pub(super) fn apply(&mut self, id: &str, effects: Vec<Effect>, now: Millis) -> Result<()> {
        let mut finished = false;
        for effect in effects {
            match effect {
                Effect::Enqueue(i) => {
                    let entry = self.entry_for(id, i, now);
                    self.queue.push(entry);
                }
                Effect::Evaluate(i) => {
                    let Some(run) = self.runs.get_mut(id) else {
                        continue;
                    };
                    self.cond_token += 1;
                    run.evaluating.insert(i, self.cond_token);
                    self.cond_pool.request(CondRequest {
                        run_id: id.to_string(),
                        step: i,
                        token: self.cond_token,
                        tenant: run.rec.tenant.clone().into(),
                    });
                }
                Effect::ReleaseAt(at) => {
                    let run_id = id.to_string();
                    self.timers.insert((at, Timer::Release { run_id }));
                }
                Effect::Retry { step, at } => {
                    let run_id = id.to_string();
                    self.timers.insert((at, Timer::Retry { run_id, step }));
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                }
                Effect::RetryTimer { step, at } => {
                    let run_id = id.to_string();
                    self.timers.insert((at, Timer::Retry { run_id, step }));
                }
                Effect::DeadLetter(dead) => {
                    if let Err(e) = self.store.put_dead_letter(&dead) {
                        tracing::error!(error = %e, "recording a dead letter failed");
                    }
                    self.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
                    if let Some(run) = self.runs.get(id) {
                        let alerts = self.config.alerts.dead_letter(&run.rec, &run.spec, &dead);
                        self.dirty.alerts.extend(alerts);
                    }
                    tracing::warn!(run = %id, tenant = %dead.tenant, task = %dead.task, step = %dead.step,
                        attempts = dead.attempts, dead_letter = %dead.id,
                        outcome = %dead.outcome.unwrap_or(Outcome::Failed), "step dead-lettered");
                }
                Effect::Lost => {
                    self.stats.count_attempt(Outcome::Lost);
                    if let Some(run) = self.runs.get(id) {
                        self.tenant_metrics.of(&run.rec.tenant).count(Outcome::Lost);
                    }
                }
                Effect::StopAttempt(i) => {
                    if let Some(token) = self.runs.get(id).and_then(|r| r.cancels.get(&i)) {
                        token.cancel();
                    }
                }
                Effect::Unqueue => self.queue.remove_run(id),
                Effect::LeftQueue => {
                    if let Some(run) = self.runs.get(id) {
                        self.queued_runs
                            .entry(run.rec.tenant.clone().into())
                            .and_modify(|n| *n = n.saturating_sub(1));
                    }
                }
                Effect::Finished => finished = true,
            }
        }
        if finished {
            self.finish_run(id, now)?;
        }
        Ok(())
    }

    /// Hands waiting conditions to free evaluation threads, tenants in
    /// turn, copying each one's data out of its run now; drops those whose
    /// step no longer waits (the run ended or was cancelled).
    pub(super) fn start_conditions(&mut self) {
        let budget = self.config.cond_budget;
        while let Some(request) = self.cond_pool.next() {
            // A condition may read `input` (`spill`). Not read back, the
            // step stays pending; a store that cannot read is logged.
            if let Err(e) = self.unspill(&request.run_id) {
                tracing::error!(run = %request.run_id, error = %e, "cannot read a run's input back for a condition");
                continue;
            }
            let Some(run) = self.runs.get(&request.run_id) else {
                continue;
            };
            let i = request.step;
            let waits = !run.cancelled
                && run.evaluating.get(&i) == Some(&request.token)
                && run.rec.steps.get(i).map(|s| s.status) == Some(StepStatus::Pending);
            if let Some((cond, data)) = waits.then(|| run.condition_job(i, &budget)).flatten() {
                self.cond_pool.start(CondJob {
                    request,
                    cond,
                    data,
                });
            }
        }
    }

    /// Takes up an evaluated condition: runs, skips or fails its step, then
    /// decides what follows. A result nobody waits for any more (the run
    /// ended or was cancelled, the step was decided otherwise) is dropped.
    pub(super) fn on_condition(&mut self, done: CondDone) -> Result<()> {
        self.cond_pool.finished();
        let taken = self.take_condition(done);
        self.start_conditions();
        taken
    }

    pub(super) fn take_condition(&mut self, done: CondDone) -> Result<()> {
        let now = self.clock.now_ms();
        let Some(run) = self.runs.get_mut(&done.run_id) else {
            return Ok(());
        };
        let (mut effects, mut events) = (Vec::new(), Vec::new());
        let ctx = Ctx {
            now,
            actor: "scheduler",
        };
        let (i, token) = (done.step, done.token);
        if !decide::run::condition_done(
            &mut run.state,
            i,
            token,
            done.result,
            ctx,
            &mut effects,
            &mut events,
        ) {
            return Ok(());
        }
        self.apply(&done.run_id, effects, now)?;
        // Settles the step for its downstream steps and marks the run dirty.
        self.advance(&done.run_id, now, "scheduler", &mut events)
    }

    /// Counts a run as active for its task (and queues it behind the others when held).
    pub(super) fn track(&mut self, key: TaskKey, id: &str, held: bool) {
        self.by_task.entry(key).or_default().track(id, held);
    }

    /// Forgets a terminal run and lets the next held run of its task go.
    pub(super) fn finish_run(&mut self, id: &str, now: Millis) -> Result<()> {
        let Some(run) = self.runs.remove(id) else {
            return Ok(());
        };
        let key = TaskKey::new(&run.rec.tenant, &run.rec.task);
        self.tenant_metrics
            .of(&run.rec.tenant)
            .run_finished(run.rec.status);
        let alerts = self.config.alerts.run_ended(&run.rec, &run.spec, now);
        self.dirty.alerts.extend(alerts);
        let r = &run.rec;
        if r.status == RunStatus::Succeeded {
            tracing::debug!(run = %r.id, tenant = %r.tenant, task = %r.task, "run succeeded");
        } else {
            tracing::info!(run = %r.id, tenant = %r.tenant, task = %r.task, status = r.status.as_str(),
                reason = r.reason.as_deref().unwrap_or(""), "run ended without success");
        }
        self.resolve_letters(r, now);
        self.fire_after(&run.rec, now);
        let was_held = run.held;
        self.finished.insert(id.to_string(), run.state.rec);
        let mut next_held = None;
        if let Some(t) = self.by_task.get_mut(&key) {
            next_held = t.ended(id, was_held);
            if t.active == 0 {
                self.by_task.remove(&key);
            }
        }
        if let Some(next) = next_held {
            if let Some(r) = self.runs.get_mut(&next) {
                r.held = false;
            }
            let mut events = Vec::new();
            self.advance(&next, now, "scheduler", &mut events)?;
        }
        Ok(())
    }

    /// A run put back to work (retried, requeued, a step rerun) that
    /// succeeded settles the dead letters still open for it: the steps they
    /// were for ran to success. Such a run is known from its record (a step
    /// with attempts of an earlier round), so this holds across a restart;
    /// only such runs read their tenant's open letters.
    fn resolve_letters(&mut self, rec: &RunRecord, now: Millis) {
        if rec.status != RunStatus::Succeeded || rec.steps.iter().all(|s| s.round_start == 0) {
            return;
        }
        let letters = match self.store.list_dead_letters(&rec.tenant, true) {
            Ok(letters) => letters,
            Err(e) => {
                tracing::error!(error = %e, run = %rec.id, "cannot read the run's dead letters to resolve them");
                return;
            }
        };
        for mut dead in letters.into_iter().filter(|d| d.run_id == rec.id) {
            dead.resolution = Some("retried: the run succeeded".into());
            dead.resolved_at = Some(now);
            if let Err(e) = self.store.put_dead_letter(&dead) {
                tracing::error!(error = %e, dead_letter = %dead.id, "resolving a dead letter failed");
            }
        }
    }
}
