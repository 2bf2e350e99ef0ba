//! Time triggers: arming and disarming fire timers, storing and pausing task
//! schedules, due timers, and firing a task's instants.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::tasks::{Loaded, Saved};
use super::window::Armed;
use super::{Actor, Origin, Timer};
use crate::model::ids::TaskKey;
use crate::model::{Millis, ScheduleState};
use crate::schedule::Trigger;
use crate::scheduler::clock::{from_ms, rfc3339};
use crate::scheduler::core::fire::{self, Fire, Firing};
use crate::scheduler::{Error, Result};
use crate::store::prelude::*;
use crate::task::TaskSpec;

impl Actor {
    /// Arms a task's timer for its next instant `at`: `fire_ahead` before
    /// it, or at the instant itself when `ahead` is false.
    pub(super) fn arm_fire(&mut self, tenant: &str, task: &str, at: Millis, ahead: bool) {
        let at = if ahead {
            at.saturating_sub(self.config.fire_ahead_ms)
        } else {
            at
        };
        let key = TaskKey::new(tenant, task);
        if let Some(old) = self.fire_timers.insert(key.clone(), at) {
            self.timers.remove(&(old, Timer::Fire(key.clone())));
        }
        self.timers.insert((at, Timer::Fire(key)));
    }

    pub(super) fn disarm_fire(&mut self, tenant: &str, task: &str) {
        if let Some(old) = self.fire_timers.remove(&TaskKey::new(tenant, task)) {
            self.timers
                .remove(&(old, Timer::Fire(TaskKey::new(tenant, task))));
        }
    }

    pub(super) fn on_put_task(
        &mut self,
        record: crate::model::TaskRecord,
    ) -> Result<ScheduleState> {
        let saved = self.prepare_save(record, None, self.clock.now())?;
        self.store.put_task(&saved.loaded.record, &saved.schedule)?;
        let schedule = saved.schedule.clone();
        self.take_up_saved(saved)?;
        Ok(schedule)
    }

    /// What saving `record` at `now` gives: its schedule state (the next
    /// fire from the old state, so a replaced `at` that fired does not fire
    /// again; the old last fire and pause kept), with the definition parsed
    /// and the trigger compiled once for arming it — or `compiled`, the
    /// trigger the caller's check compiled from the same definition.
    pub(super) fn prepare_save(
        &self,
        record: crate::model::TaskRecord,
        parsed: Option<crate::scheduler::ParsedTask>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Saved> {
        let (spec, trigger) = match parsed {
            Some(parsed) => (parsed.spec, parsed.trigger),
            None => {
                let spec = TaskSpec::stored(&record.spec).map_err(|e| {
                    Error::Conflict(format!("definition of `{}`: {e}", record.name))
                })?;
                let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
                    .map_err(|e| {
                    Error::Conflict(format!("trigger of `{}`: {e}", record.name))
                })?;
                (spec, Arc::new(trigger))
            }
        };
        let old = self.store.get_schedule(&record.tenant, &record.name)?;
        let replaced = record.version > 1;
        let next_fire =
            fire::next_fire_on_save(&trigger, old.as_ref(), replaced, record.created_at, now);
        let schedule = ScheduleState {
            tenant: record.tenant.clone(),
            task: record.name.clone(),
            next_fire,
            last_fired: old.as_ref().and_then(|s| s.last_fired),
            paused: old.as_ref().is_some_and(|s| s.paused),
        };
        Ok(Saved {
            schedule,
            loaded: Loaded {
                record: Arc::new(record),
                spec,
            },
            trigger,
        })
    }

    /// Takes up a definition just stored: cached, and armed if it fires
    /// within the window.
    pub(super) fn take_up_saved(&mut self, saved: Saved) -> Result<()> {
        let (tenant, task) = (saved.schedule.tenant.clone(), saved.schedule.task.clone());
        self.tasks
            .insert(TaskKey::new(&tenant, &task), saved.loaded.clone());
        self.arm_compiled(
            &tenant,
            &task,
            Some(saved.schedule),
            saved.loaded,
            saved.trigger,
        );
        Ok(())
    }

    pub(super) fn on_set_paused(
        &mut self,
        tenant: &str,
        task: &str,
        paused: bool,
    ) -> Result<ScheduleState> {
        let loaded = self.load_task(tenant, task)?;
        let (record, spec) = (&loaded.record, &loaded.spec);
        let mut schedule = self
            .store
            .get_schedule(tenant, task)?
            .unwrap_or(ScheduleState {
                tenant: tenant.to_string(),
                task: task.to_string(),
                next_fire: None,
                last_fired: None,
                paused: false,
            });
        schedule.paused = paused;
        if !paused {
            let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
                .map_err(|e| Error::Conflict(format!("trigger of `{task}`: {e}")))?;
            let now = self.clock.now();
            schedule.next_fire =
                fire::next_fire_on_resume(&trigger, schedule.last_fired, record.created_at, now);
        }
        self.store.put_schedule(&schedule)?;
        self.on_task_changed(tenant, task)?;
        Ok(schedule)
    }

    /// (Re)loads a task's schedule and (re)arms its timer if its next fire
    /// is within the window; otherwise the store's index holds it until the
    /// window reaches it.
    pub(super) fn on_task_changed(&mut self, tenant: &str, task: &str) -> Result<()> {
        let schedule = self.store.get_schedule(tenant, task)?;
        self.arm_schedule(tenant, task, schedule)
    }

    /// Arms `schedule` (the stored state of `tenant`'s `task`) when it fires
    /// within the window, and forgets the task otherwise.
    fn arm_schedule(
        &mut self,
        tenant: &str,
        task: &str,
        schedule: Option<ScheduleState>,
    ) -> Result<()> {
        let due = schedule
            .as_ref()
            .filter(|s| !s.paused)
            .and_then(|s| s.next_fire)
            .is_some_and(|next| self.window.reaches(next));
        if !due {
            self.window.forget(&TaskKey::new(tenant, task));
            self.disarm_fire(tenant, task);
            return Ok(());
        }
        let loaded = self.load_task(tenant, task)?;
        let trigger = Trigger::compile(
            loaded.spec.trigger.as_ref(),
            from_ms(loaded.record.created_at),
        )
        .map_err(|e| Error::Conflict(format!("trigger of `{task}`: {e}")))?;
        self.arm_compiled(tenant, task, schedule, loaded, Arc::new(trigger));
        Ok(())
    }

    /// [`Actor::arm_schedule`] with the definition and trigger at hand.
    fn arm_compiled(
        &mut self,
        tenant: &str,
        task: &str,
        schedule: Option<ScheduleState>,
        loaded: Loaded,
        trigger: Arc<Trigger>,
    ) {
        let key = TaskKey::new(tenant, task);
        self.window.forget(&key);
        let Some((schedule, next)) = schedule
            .filter(|s| !s.paused)
            .and_then(|s| Some((s.clone(), s.next_fire?)))
            .filter(|(_, next)| self.window.reaches(*next))
        else {
            self.disarm_fire(tenant, task);
            return;
        };
        self.armed_insert(
            key.clone(),
            Armed {
                task: loaded.record,
                spec: loaded.spec,
                trigger,
                schedule,
            },
        );
        if self.window.is_armed(&key) {
            self.arm_fire(tenant, task, next, true);
        }
    }

    /// Moves the fire window on: arms the tasks whose next fire came within
    /// `window.ahead_ms` of now since the last refill, read from the store's
    /// next-fire index, and sets the next refill. It never waits for a
    /// write: a task that left the window (fired past it, or dropped by
    /// `max_armed`) is kept in `beyond` with its schedule until the window
    /// reaches it, since the write that moves its index entry may still be
    /// under way; the index's copy of such a task is ignored.
    ///
    /// At most `window.max_armed` tasks are held: when more are due, the
    /// window ends before the last instant read (all of one instant are
    /// taken, however many: an instant cannot be split).
    pub(super) fn refill(&mut self, now: Millis) -> Result<()> {
        let window = self.config.window;
        let until = now.saturating_add(window.ahead_ms);
        let from = self.window.horizon().saturating_add(1);
        let next_refill = now.saturating_add(window.refill_ms.max(1));
        if from > until {
            self.timers.insert((next_refill, Timer::Refill));
            return Ok(());
        }
        let room = self.window.room();
        let mut due = self.store.due_schedules(from, until, room)?;
        let mut horizon = until;
        if due.len() == room {
            let first = due.first().and_then(|s| s.next_fire).unwrap_or(from);
            let last = due.last().and_then(|s| s.next_fire).unwrap_or(until);
            if first == last {
                due = self.store.due_schedules(last, last, usize::MAX)?;
                horizon = last;
            } else {
                due.retain(|s| s.next_fire.is_some_and(|at| at < last));
                horizon = last - 1;
            }
        }
        self.window.set_horizon(horizon);
        // What memory knows is newer than the index: an armed task's
        // progress, or one that left the window, may not be stored yet.
        let mut arm: Vec<ScheduleState> = due
            .into_iter()
            .filter(|s| !self.window.knows(&TaskKey::new(&s.tenant, &s.task)))
            .collect();
        arm.extend(self.window.take_reached());
        for schedule in arm {
            let (tenant, task) = (schedule.tenant.clone(), schedule.task.clone());
            if let Err(e) = self.arm_schedule(&tenant, &task, Some(schedule)) {
                tracing::error!(%tenant, %task, error = %e, "cannot arm the trigger");
            }
        }
        // A window cut short by `max_armed` moves on as soon as fires leave it.
        let at = next_refill.min(horizon.saturating_sub(window.ahead_ms / 2).max(now + 1));
        self.timers.insert((at, Timer::Refill));
        Ok(())
    }

    pub(super) fn on_timers(&mut self) -> Result<()> {
        let now = self.clock.now_ms();
        while let Some((at, _)) = self.timers.first() {
            if *at > now {
                break;
            }
            let (_, timer) = self.timers.pop_first().expect("non-empty");
            match timer {
                Timer::Fire(key) => {
                    self.fire_timers.remove(&key);
                    // Runs that cannot be stored are not made (`faults`).
                    if self.down {
                        self.hold_fire(key);
                        continue;
                    }
                    let TaskKey { tenant, task } = key;
                    if let Err(e) = self.fire(&tenant, &task, now) {
                        tracing::error!(%tenant, %task, error = %e, "firing failed");
                    }
                }
                Timer::Probe => self.probe(now),
                Timer::Requeue(entry) => self.requeue(entry),
                Timer::Retry { run_id, step } => {
                    if let Err(e) = self.retry_due(&run_id, step, now) {
                        tracing::error!(run = %run_id, error = %e, "requeueing a retry failed");
                    }
                }
                Timer::Release { run_id } => {
                    let mut events = Vec::new();
                    if let Err(e) = self.advance(&run_id, now, "scheduler", &mut events) {
                        tracing::error!(run = %run_id, error = %e, "releasing a run failed");
                    }
                }
                Timer::Refill => {
                    if let Err(e) = self.refill(now) {
                        tracing::error!(error = %e, "moving the fire window failed; retrying");
                        self.timers
                            .insert((now + self.config.window.refill_ms.max(1), Timer::Refill));
                    }
                }
                Timer::Window { tenant } => {
                    if let Some(q) = self.quotas.get_mut(&tenant)
                        && q.roll(now)
                    {
                        tracing::info!(%tenant, "fuel window reset");
                    }
                    self.apply_quota(&tenant);
                }
            }
        }
        Ok(())
    }

    /// Fires a task's due instants (per `catch_up`), and its next instant
    /// too when that is within `fire_ahead`: the run is stored ahead and
    /// released at its instant (see `advance`), so storing it is not part of
    /// its lateness. Should the overlap policy skip that instant now, it is
    /// judged at the instant itself instead, as without the lead: a run still
    /// active now may have ended by then.
    pub(super) fn fire(&mut self, tenant: &str, task_name: &str, now: Millis) -> Result<()> {
        let key = TaskKey::new(tenant, task_name);
        let Some(armed) = self.window.get(&key) else {
            return Ok(());
        };
        let (task, spec) = (armed.task.clone(), armed.spec.clone());
        let trigger = armed.trigger.clone();
        let mut sched = armed.schedule.clone();
        let active = self.task_active(&key);
        let lead = self.config.fire_ahead_ms;
        let Some(mut firing) = Firing::new(&trigger, &sched, &spec, active, now, lead) else {
            return Ok(());
        };
        let kind = trigger.kind();
        if firing.missed > 0 {
            tracing::info!(%tenant, task = %task_name, skipped = firing.missed, "missed fires skipped per catch_up");
        }
        let mut last_created = None;
        while let Some(fire) = firing.next(&trigger) {
            let instant = match fire {
                Fire::Create(instant) => instant,
                Fire::Skip(instant) => {
                    self.stats.overlap_skips.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(%tenant, task = %task_name, at = %rfc3339(instant), overlap = ?spec.overlap, "fire skipped: previous run still active");
                    continue;
                }
            };
            let origin = Origin {
                trigger: kind,
                scheduled_for: instant,
                input: spec.fire_input(),
                idempotency_key: None,
                upstream_run: None,
                priority: spec.priority,
            };
            let rec = self.new_run(&task, &spec, origin, now);
            let pending = self.create_run(rec, Arc::clone(&spec), true, "scheduler", now, None);
            firing.created(self.pending[pending].shed.is_none());
            last_created = Some(pending);
        }
        sched.next_fire = firing.next_fire;
        sched.last_fired = firing.last_fired;
        let ahead = firing.ahead;
        // The runs, their fire keys and the schedule's progress are one
        // write: after a crash either all are there or none, so no instant
        // fires twice.
        match last_created {
            Some(i) => self.pending[i].new.schedule = Some(sched.clone()),
            None if self.window.get(&key).is_none_or(|a| a.schedule != sched) => {
                if let Err(e) = self.store.put_schedule(&sched) {
                    // Its instants fire (per `catch_up`) once the store writes.
                    if e.is_unavailable() {
                        self.hold_fire(key);
                    }
                    return Err(e.into());
                }
            }
            None => {}
        }
        let armed = self.window.remove(&key);
        match (armed, sched.next_fire) {
            (Some(mut armed), Some(next)) if self.window.reaches(next) => {
                armed.schedule = sched;
                self.armed_insert(key, armed);
                self.arm_fire(tenant, task_name, next, ahead);
            }
            // Beyond the window: the index has it (once the run carrying
            // the progress is stored), and the window's refill arms it again.
            (_, Some(_)) => self.window.set_beyond(key, sched),
            (_, None) => {}
        }
        Ok(())
    }

    /// Arms a task in the window, disarming the fire timers of the tasks
    /// the window lets go to stay within `max_armed`.
    fn armed_insert(&mut self, key: TaskKey, armed: Armed) {
        for let_go in self.window.insert(key, armed) {
            self.disarm_fire(&let_go.tenant, &let_go.task);
        }
    }
}
