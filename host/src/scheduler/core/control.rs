//! Run control asked by a person: cancelling an active run, and which steps
//! go back to `pending` when a finished run is retried, a dead letter
//! requeued or a step rerun (reopening the run).

use std::collections::HashSet;

use super::readiness::Graph;
use super::run::{RunState, event, set_run, set_step};
use super::{Ctx, Effect};
use crate::model::{Event, RunRecord, RunStatus, StepRunRecord, StepStatus};
use crate::task::TaskSpec;

/// Cancels an active run for `ctx.actor`: its unfinished steps become
/// `cancelled` (running attempts are stopped: [`Effect::StopAttempt`]; they
/// still report), queued ones leave the queue ([`Effect::Unqueue`]), and
/// the run is `cancelled`. It is forgotten at once unless `attempts_out`.
/// False if it was cancelled already (nothing changed).
pub(crate) fn cancel(
    run: &mut RunState,
    ctx: Ctx<'_>,
    attempts_out: bool,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) -> bool {
    if run.cancelled {
        return false;
    }
    let (now, actor) = (ctx.now, ctx.actor);
    run.cancelled = true;
    let reason = format!("cancelled by {actor}");
    run.rec.reason = Some(reason.clone());
    for i in 0..run.rec.steps.len() {
        let status = run.rec.steps[i].status;
        if status == StepStatus::Running {
            effects.push(Effect::StopAttempt(i));
        }
        if !status.is_terminal() {
            set_step(
                &mut run.rec,
                i,
                StepStatus::Cancelled,
                now,
                reason.as_str(),
                actor,
                events,
            );
        }
    }
    effects.push(Effect::Unqueue);
    if run.rec.status == RunStatus::Queued {
        effects.push(Effect::LeftQueue);
    }
    set_run(
        &mut run.rec,
        RunStatus::Cancelled,
        now,
        reason,
        actor,
        events,
    );
    // With attempts still running, the run stays in memory until they
    // report, so each is recorded (outcome, end, fuel) and charged.
    if !attempts_out {
        effects.push(Effect::Finished);
    }
    true
}

/// The steps a retry of a failed or cancelled run runs again: those that
/// did not succeed or get skipped (succeeded steps keep their outputs).
pub(crate) fn retry_resets(step: &StepRunRecord) -> bool {
    !matches!(step.status, StepStatus::Succeeded | StepStatus::Skipped)
}

/// The steps requeueing the dead letter of `dead_step` runs again: that
/// step and the steps cancelled because of it.
pub(crate) fn requeue_resets(dead_step: &str) -> impl Fn(&StepRunRecord) -> bool + '_ {
    move |s| s.name == dead_step || matches!(s.status, StepStatus::Cancelled)
}

/// The steps a rerun of step `i` runs again: it and every step downstream.
pub(crate) fn rerun_resets(spec: &TaskSpec, i: usize) -> HashSet<String> {
    Graph::new(spec)
        .with_descendants(i)
        .into_iter()
        .map(|j| spec.steps[j].name.clone())
        .collect()
}

/// Puts a finished run back to work: the steps `reset` selects go back to
/// pending (their attempts kept, so numbering continues; retries start
/// afresh), the rest keep their results; the run is `queued` again.
pub(crate) fn reopen(
    rec: &mut RunRecord,
    reset: impl Fn(&StepRunRecord) -> bool,
    ctx: Ctx<'_>,
    reason: &str,
    events: &mut Vec<Event>,
) {
    let (now, actor) = (ctx.now, ctx.actor);
    for i in 0..rec.steps.len() {
        if reset(&rec.steps[i]) {
            let step = &mut rec.steps[i];
            step.error = None;
            step.output = None;
            step.next_attempt_at = None;
            step.lost_attempts = 0;
            step.round_start = step.attempts.len() as u32;
            set_step(rec, i, StepStatus::Pending, now, reason, actor, events);
        }
    }
    rec.finished_at = None;
    rec.reason = None;
    let from = rec.status;
    rec.status = RunStatus::Queued;
    events.push(event(
        rec,
        None,
        Some(from.as_str()),
        "queued",
        now,
        reason,
        actor,
    ));
}
