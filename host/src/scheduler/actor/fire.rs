//! Time triggers: arming and disarming fire timers, storing and pausing task
//! schedules, due timers, and firing a task's instants.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Actor, Armed, Origin, Timer};
use crate::model::ids::TaskKey;
use crate::model::{Millis, ScheduleState};
use crate::schedule::Trigger;
use crate::scheduler::clock::{from_ms, rfc3339};
use crate::scheduler::core::fire::{self, Fire, Firing};
use crate::scheduler::{Error, Result};
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
        let now = self.clock.now();
        let spec: TaskSpec = serde_json::from_value(record.spec.clone())
            .map_err(|e| Error::Conflict(format!("definition of `{}`: {e}", record.name)))?;
        let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
            .map_err(|e| Error::Conflict(format!("trigger of `{}`: {e}", record.name)))?;
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
        self.store.put_task(&record, &schedule)?;
        self.index_after(&record);
        self.on_task_changed(&record.tenant, &record.name)?;
        Ok(schedule)
    }

    pub(super) fn on_set_paused(
        &mut self,
        tenant: &str,
        task: &str,
        paused: bool,
    ) -> Result<ScheduleState> {
        let (record, spec) = self.load_task(tenant, task)?;
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

    /// (Re)loads a task's definition and schedule and (re)arms its timer.
    pub(super) fn on_task_changed(&mut self, tenant: &str, task: &str) -> Result<()> {
        let key = TaskKey::new(tenant, task);
        self.armed.remove(&key);
        let schedule = self.store.get_schedule(tenant, task)?;
        let Some(schedule) = schedule.filter(|s| !s.paused && s.next_fire.is_some()) else {
            self.disarm_fire(tenant, task);
            return Ok(());
        };
        let (record, spec) = self.load_task(tenant, task)?;
        let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
            .map_err(|e| Error::Conflict(format!("trigger of `{task}`: {e}")))?;
        let next = schedule.next_fire.unwrap_or_default();
        self.armed.insert(
            key,
            Armed {
                task: Arc::new(record),
                spec: Arc::new(spec),
                trigger: Arc::new(trigger),
                schedule,
            },
        );
        self.arm_fire(tenant, task, next, true);
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
                    let TaskKey { tenant, task } = key;
                    if let Err(e) = self.fire(&tenant, &task, now) {
                        tracing::error!(%tenant, %task, error = %e, "firing failed");
                    }
                }
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
        let Some(armed) = self.armed.get(&key) else {
            return Ok(());
        };
        let (task, spec) = (armed.task.clone(), armed.spec.clone());
        let trigger = armed.trigger.clone();
        let mut sched = armed.schedule.clone();
        let active = self.by_task.get(&key).map_or(0, |t| t.active);
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
                input: serde_json::json!({}),
                idempotency_key: None,
                priority: spec.priority,
            };
            let rec = self.new_run(&task, &spec, origin, now);
            let pending = self.create_run(rec, (*spec).clone(), true, "scheduler", now, None);
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
            None if self.armed.get(&key).is_none_or(|a| a.schedule != sched) => {
                self.store.put_schedule(&sched)?;
            }
            None => {}
        }
        if let Some(armed) = self.armed.get_mut(&key) {
            armed.schedule = sched.clone();
        }
        match sched.next_fire {
            Some(next) => self.arm_fire(tenant, task_name, next, ahead),
            None => {
                self.armed.remove(&key);
            }
        }
        Ok(())
    }
}
