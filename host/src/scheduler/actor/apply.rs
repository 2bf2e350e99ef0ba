//! Bulk apply: many validated task definitions stored in one store write,
//! then taken up one by one as a single save is (cached, armed when due
//! within the window). Validation happened in the service; what is left here
//! can only fail on a record that does not read back or a store fault, and
//! then nothing is stored.
//!
//! The schedule each task gets is the one a single save gives it
//! ([`Actor::prepare_save`], the rule `Actor::on_put_task` applies), so a
//! task applied in bulk fires exactly as if it was applied alone.

use super::Actor;
use crate::model::{ScheduleState, TaskRecord};
use crate::scheduler::{ParsedTask, Result};

impl Actor {
    /// Stores `records` with their schedule states in one write and
    /// (re)arms their triggers; answers the schedule states in order.
    pub(super) fn on_put_tasks(
        &mut self,
        records: Vec<(TaskRecord, Option<ParsedTask>)>,
    ) -> Result<Vec<ScheduleState>> {
        let now = self.clock.now();
        let saved = records
            .into_iter()
            .map(|(record, parsed)| self.prepare_save(record, parsed, now))
            .collect::<Result<Vec<_>>>()?;
        let writes: Vec<(TaskRecord, ScheduleState)> = saved
            .iter()
            .map(|s| ((*s.loaded.record).clone(), s.schedule.clone()))
            .collect();
        self.store.put_tasks(&writes)?;
        let mut schedules = Vec::with_capacity(saved.len());
        for saved in saved {
            schedules.push(saved.schedule.clone());
            self.take_up_saved(saved)?;
        }
        Ok(schedules)
    }
}
