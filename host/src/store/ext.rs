//! [`StoreExt`]: conveniences every store gets from the seam, so an
//! implementation writes none of them — one run inserted or written, one
//! task stored, and the whole-store listings tests, benchmarks and
//! operations use (the scheduler reads the bounded ones of the seam).

use super::{Insert, NewRun, Result, RunSummary, RunWrite, Store};
use crate::model::{Event, Millis, RunRecord, ScheduleState, TaskRecord};
use crate::tenant::UsageBucket;

/// Page size of the whole-store listings.
const PAGE: usize = 4096;

/// Conveniences over [`Store`], for every store.
pub trait StoreExt: Store {
    /// Stores one run and its creation events, atomically with `schedule`
    /// if given ([`super::Runs::insert_runs`] of one run whose idempotency
    /// key never expires: tests and tools insert this way).
    fn insert_run(
        &self,
        run: &RunRecord,
        unique_fire: bool,
        schedule: Option<&ScheduleState>,
        events: &[Event],
    ) -> Result<Insert> {
        let new = NewRun {
            run: run.clone(),
            unique_fire,
            schedule: schedule.cloned(),
            events: events.to_vec(),
            key_expires_at: Millis::MAX,
        };
        let mut outcome = self.insert_runs(std::slice::from_ref(&new))?;
        Ok(outcome.pop().expect("one outcome per run"))
    }

    /// Replaces runs, appends their events and adds `usage`, as one atomic
    /// write ([`super::Runs::write_runs_with_alerts`] without alerts).
    /// Each run is written whole ([`super::Changed::All`]).
    fn write_runs(&self, runs: &[(RunRecord, Vec<Event>)], usage: &[UsageBucket]) -> Result<()> {
        let runs: Vec<RunWrite> = runs
            .iter()
            .map(|(run, events)| RunWrite::whole(run.clone(), events.clone()))
            .collect();
        self.write_runs_with_alerts(&runs, usage, &[])
    }

    /// Writes `run` as its next revision, with `events`, atomically: the
    /// revision is taken here ([`RunRecord::next_revision`]), so the write is
    /// refused ([`super::Error::Conflict`]) when another writer stored the
    /// run since `run` was read, and `run` is left as it was then.
    fn update_run(&self, run: &mut RunRecord, events: &[Event]) -> Result<()> {
        let mut next = run.clone();
        next.next_revision();
        self.write_runs(&[(next, events.to_vec())], &[])?;
        run.next_revision();
        Ok(())
    }

    /// Adds usage to the hourly buckets `(tenant, hour, task)`, creating them
    /// as needed (counters add up; nothing is replaced).
    fn add_usage(&self, usage: &[UsageBucket]) -> Result<()> {
        self.write_runs(&[], usage)
    }

    /// Creates or replaces a task, with its schedule state in the same write.
    fn put_task(&self, task: &TaskRecord, schedule: &ScheduleState) -> Result<()> {
        self.put_tasks(&[(task.clone(), schedule.clone())])
    }

    /// Every run as its indexes know it, in
    /// [`super::Runs::run_summaries_page`]'s order, read a page at a time.
    fn run_summaries(&self) -> Result<Vec<RunSummary>> {
        let mut all: Vec<RunSummary> = Vec::new();
        loop {
            let page = self.run_summaries_page(all.last(), PAGE)?;
            let done = page.len() < PAGE;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    /// Every run not in a terminal state, by id: the summaries walked, the
    /// active ones read.
    fn active_runs(&self) -> Result<Vec<RunRecord>> {
        let mut active = Vec::new();
        for summary in self.run_summaries()? {
            if summary.status.is_terminal() {
                continue;
            }
            if let Some(run) = self.get_run(&summary.id)? {
                active.push(run);
            }
        }
        active.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(active)
    }

    /// Every schedule state, by tenant then task: each stored task's.
    fn list_schedules(&self) -> Result<Vec<ScheduleState>> {
        let mut schedules = Vec::new();
        for task in self.list_tasks(None)? {
            if let Some(schedule) = self.get_schedule(&task.tenant, &task.name)? {
                schedules.push(schedule);
            }
        }
        Ok(schedules)
    }
}

impl<S: Store + ?Sized> StoreExt for S {}
