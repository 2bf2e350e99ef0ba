//! Firing a time trigger: which of its instants fire now (the due ones, per
//! `catch_up`, and the next one when it is within the fire-ahead lead) and
//! which of those the overlap policy skips because runs of the task are
//! still active; whether a new run waits behind them (`queue_one`); where a
//! saved or resumed schedule starts; which `after` triggers a run's end fires.

use std::collections::VecDeque;

use chrono::{DateTime, TimeZone, Utc};

use crate::model::{Millis, RunStatus, ScheduleState, TriggerKind};
use crate::schedule::{self, AfterOn, Overlap, Trigger};
use crate::task::TaskSpec;

/// What to do with one instant of a trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fire {
    /// Create a run for this instant (then report it with [`Firing::created`]).
    Create(Millis),
    /// Skip this instant: runs of the task are still active (`overlap`).
    Skip(Millis),
}

/// One firing of a task in progress: the instants to take in turn, and the
/// schedule's progress. Runs are created between two [`Firing::next`]
/// calls, since whether each one counts as active (it may be shed) is the
/// actor's to know.
#[derive(Debug)]
pub(crate) struct Firing {
    fires: Vec<Millis>,
    taken: usize,
    overlap: Overlap,
    /// Runs of the task active before this firing.
    active: usize,
    /// Runs created by this firing that count as active.
    created: usize,
    /// The end of the fire-ahead lead: an instant up to it fires now.
    lead_until: Millis,
    /// Due instants not fired (`catch_up`), for the log.
    pub(crate) missed: usize,
    /// The schedule's next instant after this firing.
    pub(crate) next_fire: Option<Millis>,
    /// The schedule's last instant taken (fired or skipped).
    pub(crate) last_fired: Option<Millis>,
    /// Whether the next instant's timer is set ahead of it (false when the
    /// overlap policy would skip it now: it is judged at the instant itself
    /// instead, as without the lead, since a run active now may have ended).
    pub(crate) ahead: bool,
}

/// An instant as a date (0 for one out of range).
fn date(ms: Millis) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

impl Firing {
    /// Starts firing `trigger` of `spec` at `now` from `schedule`, with
    /// `active` runs of the task active, taking instants up to
    /// `fire_ahead_ms` ahead. `None` if the schedule has no next instant.
    pub(crate) fn new(
        trigger: &Trigger,
        schedule: &ScheduleState,
        spec: &TaskSpec,
        active: usize,
        now: Millis,
        fire_ahead_ms: Millis,
    ) -> Option<Self> {
        let next_fire = schedule.next_fire?;
        let due = schedule::due(trigger, date(next_fire), date(now), spec.catch_up);
        Some(Self {
            fires: due.fire.iter().map(|d| d.timestamp_millis()).collect(),
            taken: 0,
            overlap: spec.overlap,
            active,
            created: 0,
            lead_until: now + fire_ahead_ms,
            missed: due.skipped,
            next_fire: due.next.map(|d| d.timestamp_millis()),
            last_fired: schedule.last_fired,
            ahead: true,
        })
    }

    /// Whether a new run now would overlap the active ones beyond the policy.
    fn overlaps(&self) -> bool {
        let active = self.active + self.created;
        match self.overlap {
            Overlap::Skip => active >= 1,
            Overlap::QueueOne => active >= 2,
            Overlap::Allow => false,
        }
    }

    /// The next instant to take: the due ones, then the next one if it is
    /// within the lead (and would not be skipped now). `None` when done.
    pub(crate) fn next(&mut self, trigger: &Trigger) -> Option<Fire> {
        if self.taken == self.fires.len() {
            let next = self.next_fire.filter(|n| *n <= self.lead_until)?;
            if self.overlaps() {
                self.ahead = false;
                return None;
            }
            self.fires.push(next);
            self.next_fire = trigger.next_after(date(next)).map(|d| d.timestamp_millis());
        }
        let instant = self.fires[self.taken];
        self.taken += 1;
        self.last_fired = Some(instant);
        Some(if self.overlaps() {
            Fire::Skip(instant)
        } else {
            Fire::Create(instant)
        })
    }

    /// The run of the last [`Fire::Create`] was created; `active` says
    /// whether it counts as active (false for a shed run).
    pub(crate) fn created(&mut self, active: bool) {
        self.created += usize::from(active);
    }
}

/// Whether a new run waits behind the active runs of its task: runs that
/// a trigger made, under `overlap: queue_one`, while one is active.
pub(crate) fn held_on_create(trigger: TriggerKind, overlap: Overlap, active: usize) -> bool {
    trigger != TriggerKind::Manual && overlap == Overlap::QueueOne && active > 0
}

/// The next instant of a task's trigger once its definition is saved at
/// `now`. A new task starts at its first instant (for `at`/`delay` even a
/// past one: `catch_up` decides). A replaced one fires from now on, and not
/// again at or before the instant it last fired (an `at` that fired does
/// not fire again).
pub(crate) fn next_fire_on_save(
    trigger: &Trigger,
    old: Option<&ScheduleState>,
    replaced: bool,
    created_at: Millis,
    now: DateTime<Utc>,
) -> Option<Millis> {
    let last_fired = old.and_then(|s| s.last_fired);
    match (last_fired, replaced) {
        (Some(last), true) => trigger.next_after(now.max(date(last))),
        (None, true) => trigger
            .next_after(now)
            .or_else(|| trigger.first_fire(date(created_at))),
        (_, false) => trigger.first_fire(date(created_at)),
    }
    .map(|d| d.timestamp_millis())
}

/// The next instant of a resumed trigger: from `now` on (missed instants
/// are not caught up), its first one if it never fired.
pub(crate) fn next_fire_on_resume(
    trigger: &Trigger,
    last_fired: Option<Millis>,
    created_at: Millis,
    now: DateTime<Utc>,
) -> Option<Millis> {
    match last_fired {
        Some(_) => trigger.next_after(now),
        None => trigger.first_fire(date(created_at)).map(|f| f.max(now)),
    }
    .map(|d| d.timestamp_millis())
}

/// Whether a run that ended with `status` starts a task waiting for it
/// with `after` … `on`.
pub(crate) fn after_fires(on: AfterOn, status: RunStatus) -> bool {
    match on {
        AfterOn::Success => status == RunStatus::Succeeded,
        AfterOn::Failure => status == RunStatus::Failed,
        AfterOn::Done => status.is_terminal(),
    }
}

/// The active runs of one task: how many, and which wait behind the others
/// (`overlap: queue_one`), oldest first. Counts, not lists of every run: a
/// task with 10,000 queued manual runs must not make each finish O(10,000).
#[derive(Debug, Default)]
pub(crate) struct TaskRuns {
    /// Runs of the task in memory (queued, running, held).
    pub(crate) active: usize,
    held: VecDeque<String>,
}

impl TaskRuns {
    /// Counts run `id` as active (and queues it behind the others when held).
    pub(crate) fn track(&mut self, id: &str, held: bool) {
        self.active += 1;
        if held {
            self.held.push_back(id.to_string());
        }
    }

    /// Run `id` ended: answers the held run that may go now, if any. A held
    /// run that ended (cancelled) frees no slot.
    pub(crate) fn ended(&mut self, id: &str, was_held: bool) -> Option<String> {
        self.active = self.active.saturating_sub(1);
        if was_held {
            self.held.retain(|r| r != id);
            None
        } else {
            self.held.pop_front()
        }
    }
}
