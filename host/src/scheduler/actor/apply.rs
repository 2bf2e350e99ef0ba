//! Bulk apply: many validated task definitions stored in one store write,
//! then taken up one by one as a single save is (the `after` index, the
//! armed trigger). Validation happened in the service; what is left here can
//! only fail on a record that does not read back or a store fault, and then
//! nothing is stored.
//!
//! The schedule each task gets is the one a single save gives it
//! ([`fire::next_fire_on_save`], the rule `Actor::on_put_task` applies), so a
//! task applied in bulk fires exactly as if it was applied alone.

use super::Actor;
use crate::model::{ScheduleState, TaskRecord};
use crate::schedule::Trigger;
use crate::scheduler::clock::from_ms;
use crate::scheduler::core::fire;
use crate::scheduler::{Error, Result};
use crate::task::TaskSpec;

impl Actor {
    /// Stores `records` with their schedule states in one write and
    /// (re)arms their triggers; answers the schedule states in order.
    pub(super) fn on_put_tasks(&mut self, records: Vec<TaskRecord>) -> Result<Vec<ScheduleState>> {
        let now = self.clock.now();
        let mut writes = Vec::with_capacity(records.len());
        for record in records {
            let schedule = self.schedule_on_save(&record, now)?;
            writes.push((record, schedule));
        }
        self.store.put_tasks(&writes)?;
        let mut schedules = Vec::with_capacity(writes.len());
        for (record, schedule) in writes {
            self.index_after(&record);
            self.on_task_changed(&record.tenant, &record.name)?;
            schedules.push(schedule);
        }
        Ok(schedules)
    }

    /// The schedule state a saved definition gets: its next fire from the
    /// old state (a replaced `at` that fired does not fire again), the old
    /// last fire and pause kept.
    fn schedule_on_save(
        &self,
        record: &TaskRecord,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<ScheduleState> {
        let spec: TaskSpec = serde_json::from_value(record.spec.clone())
            .map_err(|e| Error::Conflict(format!("definition of `{}`: {e}", record.name)))?;
        let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(record.created_at))
            .map_err(|e| Error::Conflict(format!("trigger of `{}`: {e}", record.name)))?;
        let old = self.store.get_schedule(&record.tenant, &record.name)?;
        let replaced = record.version > 1;
        let next_fire =
            fire::next_fire_on_save(&trigger, old.as_ref(), replaced, record.created_at, now);
        Ok(ScheduleState {
            tenant: record.tenant.clone(),
            task: record.name.clone(),
            next_fire,
            last_fired: old.as_ref().and_then(|s| s.last_fired),
            paused: old.as_ref().is_some_and(|s| s.paused),
        })
    }
}
