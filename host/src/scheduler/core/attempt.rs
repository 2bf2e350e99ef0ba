//! Attempts as the core sees them: a run's first start, an attempt begun or
//! refused, an attempt ended (its outcome → the step's status), a failure
//! (retry after a backoff, fail, or dead-letter), a retry due, and what a
//! host crash did to the attempts that were running.

use super::run::{RunState, set_run, set_step};
use super::{Ctx, Effect};
use crate::model::{
    AttemptRecord, AttemptReport, DeadLetter, ErrorKind, Event, Millis, Outcome, PluginRecord,
    RunRecord, RunStatus, StepRunRecord, StepStatus, TriggerKind,
};

/// What a failure decision needs beyond the run: the bound on attempts lost
/// to crashes that do not count as retries, the randomness of the backoff
/// jitter, and how dead letters are named.
pub(crate) struct Retries<'a, R> {
    /// Attempts lost to host crashes that do not use up a step's retries.
    pub(crate) max_lost: u32,
    /// The backoff's jitter.
    pub(crate) rng: &'a mut R,
    /// A new dead letter's id, at an instant.
    pub(crate) dead_letter_id: fn(Millis) -> String,
}

/// What of an ended attempt's report its step keeps.
#[derive(Debug)]
pub(crate) struct Ended {
    /// The attempt's number.
    pub(crate) attempt: u32,
    /// How it ended.
    pub(crate) outcome: Outcome,
    /// The plugin's error kind (retryable or fatal), if it reported one.
    pub(crate) kind: Option<ErrorKind>,
    /// The step's output (kept when it succeeded).
    pub(crate) output: Option<serde_json::Value>,
    /// The error text.
    pub(crate) error: Option<String>,
}

/// A run's first attempt starts: it leaves `queued` ([`Effect::LeftQueue`])
/// and becomes `running`. Answers how late it started (ms after its
/// instant) when a trigger other than a person made it, for the lateness
/// metrics and alerts; `None` if it was running already or is manual.
pub(crate) fn run_started(
    rec: &mut RunRecord,
    now: Millis,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) -> Option<Millis> {
    if rec.status != RunStatus::Queued {
        return None;
    }
    effects.push(Effect::LeftQueue);
    rec.started_at = Some(now);
    set_run(
        rec,
        RunStatus::Running,
        now,
        "first step started",
        "scheduler",
        events,
    );
    (rec.trigger != TriggerKind::Manual).then(|| (now - rec.scheduled_for).max(0))
}

/// Step `i` could not start (its input did not render, its plugin is not
/// uploaded): it fails for good, without an attempt.
pub(crate) fn start_failed(
    rec: &mut RunRecord,
    i: usize,
    reason: String,
    now: Millis,
    events: &mut Vec<Event>,
) {
    rec.steps[i].error = Some(reason.clone());
    set_step(rec, i, StepStatus::Failed, now, reason, "scheduler", events);
}

/// Attempt `number` of step `i` starts with `input`, running `plugin` (the
/// version its reference resolved to now, recorded on the attempt).
pub(crate) fn attempt_begun(
    rec: &mut RunRecord,
    i: usize,
    number: u32,
    input: serde_json::Value,
    plugin: &PluginRecord,
    now: Millis,
    events: &mut Vec<Event>,
) {
    rec.steps[i].input = Some(input);
    rec.steps[i].attempts.push(AttemptRecord {
        number,
        outcome: None,
        started_at: now,
        finished_at: None,
        fuel_consumed: 0,
        memory_peak_bytes: 0,
        duration_ms: 0.0,
        error: None,
        error_kind: None,
        plugin_version: Some(plugin.version.clone()),
        plugin_digest: Some(plugin.digest.clone()),
    });
    set_step(
        rec,
        i,
        StepStatus::Running,
        now,
        // The version it runs, in the event too: `ax events` shows a tag's move.
        format!(
            "attempt {number} started ({}@{})",
            plugin.name, plugin.version
        ),
        "scheduler",
        events,
    );
}

/// Records what attempt `number` of `step` reported (outcome, end, costs).
pub(crate) fn record_report(
    step: &mut StepRunRecord,
    number: u32,
    report: &AttemptReport,
    now: Millis,
) {
    if let Some(a) = step.attempts.iter_mut().find(|a| a.number == number) {
        a.outcome = Some(report.outcome);
        a.finished_at = Some(now);
        a.fuel_consumed = report.fuel_consumed;
        a.memory_peak_bytes = report.memory_peak_bytes;
        a.duration_ms = report.duration_ms;
        a.error = report.error.clone();
        a.error_kind = report.error_kind;
    }
}

/// An attempt of step `i` ended: it succeeds or is cancelled with it, or
/// its failure is decided ([`failed`]). A step no longer running (its run
/// was cancelled meanwhile) was settled already and keeps its status.
/// [`super::run::advance`] the run next.
pub(crate) fn attempt_finished<R: rand::Rng>(
    run: &mut RunState,
    i: usize,
    ended: Ended,
    ctx: Ctx<'_>,
    retries: &mut Retries<'_, R>,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) {
    let step = &mut run.rec.steps[i];
    if step.status != StepStatus::Running {
        return;
    }
    let reason = match &ended.error {
        Some(e) => format!("attempt {}: {} ({e})", ended.attempt, ended.outcome),
        None => format!("attempt {}: {}", ended.attempt, ended.outcome),
    };
    match ended.outcome {
        Outcome::Succeeded => {
            step.output = ended.output;
            step.error = None;
            set_step(
                &mut run.rec,
                i,
                StepStatus::Succeeded,
                ctx.now,
                reason,
                ctx.actor,
                events,
            );
        }
        Outcome::Cancelled => {
            step.error = ended.error;
            set_step(
                &mut run.rec,
                i,
                StepStatus::Cancelled,
                ctx.now,
                reason,
                ctx.actor,
                events,
            );
        }
        outcome => {
            step.error = ended.error;
            failed(run, i, (outcome, ended.kind), ctx, retries, effects, events);
        }
    }
}

/// A failed attempt of step `i`: wait and retry ([`Effect::Retry`]) while
/// its policy allows and the run is not cancelled, else fail the step —
/// `dead` with a dead letter ([`Effect::DeadLetter`]) when it had retries
/// and they ran out, `failed` when it had none or the failure is not retried.
pub(crate) fn failed<R: rand::Rng>(
    run: &mut RunState,
    i: usize,
    (outcome, kind): (Outcome, Option<ErrorKind>),
    ctx: Ctx<'_>,
    retries: &mut Retries<'_, R>,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) {
    let now = ctx.now;
    let policy = &run.spec.steps[i].retry;
    let step = &run.rec.steps[i];
    // Attempts lost to host crashes (up to the bound) do not use up retries.
    let counted = (step.attempts.len() as u32)
        .saturating_sub(step.round_start)
        .saturating_sub(step.lost_attempts.min(retries.max_lost));
    let error = step.error.clone().unwrap_or_else(|| outcome.to_string());
    if policy.should_retry(counted, outcome, kind) && !run.cancelled {
        let delay = policy.delay(counted, retries.rng);
        let at = now + delay.as_millis() as Millis;
        run.rec.steps[i].next_attempt_at = Some(at);
        set_step(
            &mut run.rec,
            i,
            StepStatus::RetryWait,
            now,
            format!("{outcome}; retrying in {}", rounded(delay)),
            ctx.actor,
            events,
        );
        effects.push(Effect::Retry { step: i, at });
        return;
    }
    let exhausted = policy.max_attempts > 1 && policy.should_retry(0, outcome, kind);
    if exhausted {
        let dead = DeadLetter {
            id: (retries.dead_letter_id)(now),
            tenant: run.rec.tenant.clone().into(),
            task: run.rec.task.clone().into(),
            run_id: run.rec.id.clone().into(),
            step: run.rec.steps[i].name.clone(),
            input: run.rec.steps[i].input.clone(),
            error: Some(error),
            outcome: Some(outcome),
            attempts: run.rec.steps[i].attempts.len() as u32,
            created_at: now,
            resolution: None,
            resolved_at: None,
        };
        set_step(
            &mut run.rec,
            i,
            StepStatus::Dead,
            now,
            format!(
                "{outcome} after {} attempts; dead letter {}",
                dead.attempts, dead.id
            ),
            ctx.actor,
            events,
        );
        effects.push(Effect::DeadLetter(Box::new(dead)));
    } else {
        set_step(
            &mut run.rec,
            i,
            StepStatus::Failed,
            now,
            format!("{outcome}: {error}"),
            ctx.actor,
            events,
        );
    }
}

/// Step `i`'s backoff elapsed: it is queued again ([`Effect::Enqueue`]).
/// False if it no longer waits for a retry (nothing changed).
pub(crate) fn retry_due(
    rec: &mut RunRecord,
    i: usize,
    now: Millis,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) -> bool {
    if rec.steps[i].status != StepStatus::RetryWait {
        return false;
    }
    rec.steps[i].next_attempt_at = None;
    set_step(
        rec,
        i,
        StepStatus::Queued,
        now,
        "backoff elapsed",
        "scheduler",
        events,
    );
    effects.push(Effect::Enqueue(i));
    true
}

/// A run found active when the host starts: attempts that were running are
/// `lost` ([`Effect::Lost`]) and run again while the step's lost attempts
/// stay within the bound (else the step fails per its policy), queued steps
/// are queued again, steps waiting for a retry get their timer back.
/// [`super::run::advance`] the run next.
pub(crate) fn recover<R: rand::Rng>(
    run: &mut RunState,
    ctx: Ctx<'_>,
    retries: &mut Retries<'_, R>,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) {
    let now = ctx.now;
    let (mut queued, mut lost) = (Vec::new(), Vec::new());
    for i in 0..run.rec.steps.len() {
        let step = &mut run.rec.steps[i];
        match step.status {
            StepStatus::Running => {
                if let Some(a) = step.attempts.last_mut()
                    && a.outcome.is_none()
                {
                    a.outcome = Some(Outcome::Lost);
                    a.finished_at = Some(now);
                    a.error = Some("the host stopped while this attempt was running".into());
                }
                step.lost_attempts += 1;
                lost.push(i);
            }
            StepStatus::Queued => queued.push(i),
            StepStatus::RetryWait => effects.push(Effect::RetryTimer {
                step: i,
                at: step.next_attempt_at.unwrap_or(now),
            }),
            _ => {}
        }
    }
    for i in lost {
        effects.push(Effect::Lost);
        let step = &run.rec.steps[i];
        let attempt = step.attempts.last().map_or(0, |a| a.number);
        if step.lost_attempts <= retries.max_lost {
            set_step(
                &mut run.rec,
                i,
                StepStatus::Queued,
                now,
                format!("attempt {attempt} lost in a host crash; running it again"),
                ctx.actor,
                events,
            );
            queued.push(i);
        } else {
            run.rec.steps[i].error = Some("attempts keep getting lost in host crashes".into());
            failed(run, i, (Outcome::Lost, None), ctx, retries, effects, events);
        }
    }
    effects.extend(queued.into_iter().map(Effect::Enqueue));
}

/// A wait as people read it in an event reason: whole milliseconds
/// (`937ms`, `1m 30s 250ms`), not the jittered nanoseconds.
fn rounded(d: std::time::Duration) -> humantime::FormattedDuration {
    humantime::format_duration(std::time::Duration::from_millis(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_wait_prints_in_whole_milliseconds() {
        let jittered = Duration::from_nanos(937_437_231);
        assert_eq!(super::rounded(jittered).to_string(), "937ms");
        let long = Duration::from_millis(90_250) + Duration::from_nanos(1);
        assert_eq!(super::rounded(long).to_string(), "1m 30s 250ms");
    }
}
