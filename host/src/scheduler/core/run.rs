//! A run's state and its step transitions: recording a status change with
//! its event, deciding the steps whose upstreams ended (trigger rules and
//! `when`), and ending the run with the status its leaf steps give it.

use std::collections::HashMap;
use std::sync::Arc;

use super::readiness::{Decision, Graph, Readiness};
use super::{Ctx, Effect};
use crate::cond::{CondError, Condition};
use crate::model::{Event, Millis, RunRecord, RunStatus, StepStatus};
use crate::task::TaskSpec;

/// An active run as the core sees it: its record, its definition, its DAG
/// with per-step counters of ended upstreams, and its conditions.
#[derive(Debug)]
pub(crate) struct RunState {
    /// The run's record: what is stored and shown.
    pub(crate) rec: RunRecord,
    /// The task definition the run was created from (its snapshot),
    /// shared with the task record and the other runs of that definition.
    pub(crate) spec: Arc<TaskSpec>,
    /// The DAG as indices, and per-step counters of ended upstreams.
    pub(crate) graph: Graph,
    pub(crate) readiness: Readiness,
    /// Steps whose upstreams all ended but which are not decided yet (the
    /// run is held or cancelled, or it was just activated).
    pub(crate) candidates: Vec<usize>,
    /// Parsed `when` conditions, by step.
    pub(crate) conds: Vec<Option<Condition>>,
    /// Steps whose condition is being evaluated, with the token of that
    /// evaluation: they stay `pending` until it is back.
    pub(crate) evaluating: HashMap<usize, u64>,
    /// Waiting behind an active run of its task (`overlap: queue_one`).
    pub(crate) held: bool,
    /// Set when a person cancelled the run.
    pub(crate) cancelled: bool,
}

impl RunState {
    /// Brings a run into memory: indexes its DAG, counts ended upstreams
    /// from the stored states, parses its conditions.
    pub(crate) fn new(rec: RunRecord, spec: Arc<TaskSpec>, held: bool) -> Self {
        let graph = Graph::new(&spec);
        let states: Vec<StepStatus> = rec.steps.iter().map(|s| s.status).collect();
        let (readiness, candidates) = Readiness::new(&graph, &states);
        // Conditions were validated on save; one that no longer parses fails
        // its step when evaluated.
        let conds = spec
            .steps
            .iter()
            .map(|s| {
                s.when
                    .as_deref()
                    .map(Condition::parse_cached)
                    .and_then(Result::ok)
            })
            .collect();
        Self {
            rec,
            spec,
            graph,
            readiness,
            candidates,
            conds,
            evaluating: HashMap::new(),
            held,
            cancelled: false,
        }
    }
}

/// One event; `step` names the step and attempt for step-level changes.
pub(crate) fn event(
    run: &RunRecord,
    step: Option<(&str, Option<u32>)>,
    from: Option<&str>,
    to: &str,
    at: Millis,
    reason: impl Into<String>,
    actor: &str,
) -> Event {
    Event {
        run_id: run.id.clone().into(),
        step: step.map(|(s, _)| s.to_string()),
        attempt: step.and_then(|(_, a)| a),
        from: from.map(str::to_string),
        to: to.to_string(),
        at,
        reason: reason.into(),
        actor: actor.to_string(),
    }
}

/// How a condition that could not be evaluated fails its step: `condition
/// exceeded its budget: …` past the budget, else `condition could not be
/// evaluated: …`.
pub(crate) fn condition_failed(e: &CondError) -> (StepStatus, String) {
    let reason = match e {
        CondError::Budget(_) => format!("condition {e}"),
        e => format!("condition could not be evaluated: {e}"),
    };
    (StepStatus::Failed, reason)
}

/// A step status as events and conditions name it.
pub(crate) fn step_status_name(s: StepStatus) -> &'static str {
    match s {
        StepStatus::Pending => "pending",
        StepStatus::Queued => "queued",
        StepStatus::Running => "running",
        StepStatus::RetryWait => "retry_wait",
        StepStatus::Succeeded => "succeeded",
        StepStatus::Failed => "failed",
        StepStatus::Skipped => "skipped",
        StepStatus::Cancelled => "cancelled",
        StepStatus::Dead => "dead",
    }
}

/// Sets a step's status and records the event.
pub(crate) fn set_step(
    run: &mut RunRecord,
    i: usize,
    to: StepStatus,
    at: Millis,
    reason: impl Into<String>,
    actor: &str,
    events: &mut Vec<Event>,
) {
    let from = run.steps[i].status;
    run.steps[i].status = to;
    let attempt = run.steps[i].attempts.last().map(|a| a.number);
    let name = run.steps[i].name.clone();
    events.push(event(
        run,
        Some((&name, attempt)),
        Some(step_status_name(from)),
        step_status_name(to),
        at,
        reason,
        actor,
    ));
}

/// Sets a run's status and records the event (nothing if it has it); a
/// terminal status also sets the end and, if given, the reason.
pub(crate) fn set_run(
    run: &mut RunRecord,
    to: RunStatus,
    at: Millis,
    reason: impl Into<String>,
    actor: &str,
    events: &mut Vec<Event>,
) {
    let from = run.status;
    if from == to {
        return;
    }
    run.status = to;
    let reason = reason.into();
    events.push(event(
        run,
        None,
        Some(from.as_str()),
        to.as_str(),
        at,
        reason.clone(),
        actor,
    ));
    if to.is_terminal() {
        run.finished_at = Some(at);
        if !reason.is_empty() {
            run.reason = Some(reason);
        }
    }
}

/// Sets a step to a terminal status for `reason`, which becomes its error,
/// and counts it downstream (`decidable` gets the steps it makes decidable).
fn settle_step(
    run: &mut RunState,
    i: usize,
    (status, reason): (StepStatus, String),
    ctx: Ctx<'_>,
    events: &mut Vec<Event>,
    decidable: &mut Vec<usize>,
) {
    run.rec.steps[i].error = Some(reason.clone());
    set_step(&mut run.rec, i, status, ctx.now, reason, ctx.actor, events);
    run.readiness.settle(&run.graph, i, status, decidable);
}

/// Moves a run on after any change: counts steps that ended since the last
/// call, decides the steps whose upstreams have all ended (queue, skip or
/// cancel them per trigger rule, or evaluate their `when` first) and ends
/// the run when every step is terminal.
///
/// A run created ahead of its instant (by at most `fire_ahead_ms`) waits for
/// it ([`Effect::ReleaseAt`]); a held or cancelled run decides nothing.
/// `attempts_out` says whether attempts of the run still run: a run whose
/// steps all ended is forgotten ([`Effect::Finished`]) only once they reported.
pub(crate) fn advance(
    run: &mut RunState,
    ctx: Ctx<'_>,
    fire_ahead_ms: Millis,
    attempts_out: bool,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) {
    let now = ctx.now;
    let mut decidable = std::mem::take(&mut run.candidates);
    for i in 0..run.rec.steps.len() {
        let status = run.rec.steps[i].status;
        if status.is_terminal() && !run.readiness.is_settled(i) {
            run.readiness.settle(&run.graph, i, status, &mut decidable);
        }
    }
    // A run created ahead of its instant waits for it (`fire`). Only for
    // as long as the lead: a run further ahead means the clock stepped
    // back, and its runs (manual ones too) must not wait for that.
    let ahead = run.rec.scheduled_for - now;
    let early = ahead > 0 && ahead <= fire_ahead_ms;
    if early && !run.cancelled {
        effects.push(Effect::ReleaseAt(run.rec.scheduled_for));
    }
    if run.held || run.cancelled || early {
        run.candidates = decidable;
    } else {
        while let Some(i) = decidable.pop() {
            if run.rec.steps[i].status != StepStatus::Pending {
                continue;
            }
            // A condition out for evaluation decides the step when it is back.
            if run.evaluating.contains_key(&i) {
                continue;
            }
            let settle_as = match run.readiness.decide(&run.graph, i) {
                Decision::Run if run.spec.steps[i].when.is_some() => {
                    // Parsed when the run was loaded; one that did not
                    // parse then is tried again, and fails its step now.
                    let parsed = match &run.conds[i] {
                        Some(_) => Ok(()),
                        None => Condition::parse_cached(
                            run.spec.steps[i].when.as_deref().unwrap_or_default(),
                        )
                        .map(|c| run.conds[i] = Some(c)),
                    };
                    match parsed {
                        Ok(()) => {
                            effects.push(Effect::Evaluate(i));
                            None
                        }
                        Err(e) => Some(condition_failed(&e)),
                    }
                }
                Decision::Run => {
                    set_step(
                        &mut run.rec,
                        i,
                        StepStatus::Queued,
                        now,
                        "ready",
                        ctx.actor,
                        events,
                    );
                    effects.push(Effect::Enqueue(i));
                    None
                }
                Decision::Settle(status, reason) => Some((status, reason.to_string())),
            };
            if let Some(settle) = settle_as {
                settle_step(run, i, settle, ctx, events, &mut decidable);
            }
        }
    }
    let finished = run.rec.steps.iter().all(|s| s.status.is_terminal());
    if finished && !run.rec.status.is_terminal() {
        let (status, reason) = outcome(run);
        if run.rec.status == RunStatus::Queued {
            effects.push(Effect::LeftQueue);
        }
        set_run(&mut run.rec, status, now, reason, ctx.actor, events);
    }
    // Steps of a cancelled run are terminal before their attempts end:
    // the run is forgotten only once those have reported.
    if finished && !attempts_out {
        effects.push(Effect::Finished);
    }
}

/// The status of a run whose steps all ended. Like Airflow: the run's
/// result is its leaf steps' results. A failure handled downstream
/// (`one_success`, `all_done`) does not fail the run; an unhandled one
/// reaches a leaf as `cancelled`. The reason names the root cause
/// ([`root_cause`]), not the cancelled leaf it reached.
fn outcome(run: &RunState) -> (RunStatus, String) {
    let graph = &run.graph;
    let failed_leaf = run.rec.steps.iter().enumerate().position(|(i, s)| {
        graph.is_leaf(i)
            && matches!(
                s.status,
                StepStatus::Failed | StepStatus::Dead | StepStatus::Cancelled
            )
    });
    if run.cancelled {
        (
            RunStatus::Cancelled,
            run.rec.reason.clone().unwrap_or_else(|| "cancelled".into()),
        )
    } else if let Some(leaf) = failed_leaf {
        let step = &run.rec.steps[root_cause(run, leaf)];
        // This round's attempts: a retried run counts afresh.
        let attempts = step
            .attempts
            .len()
            .saturating_sub(step.round_start as usize);
        let after = match attempts {
            0 => String::new(),
            1 => " after 1 attempt".into(),
            n => format!(" after {n} attempts"),
        };
        (
            RunStatus::Failed,
            format!(
                "step `{}` {}{after}",
                step.name,
                step_status_name(step.status)
            ),
        )
    } else {
        (RunStatus::Succeeded, String::new())
    }
}

/// The step whose failure made step `leaf` end unsuccessfully: from a
/// cancelled step, up through the upstreams that ended unsuccessfully
/// (cancelled ones lead further up), to the failed or dead ones; of those
/// the first in topological order (spec order among equals). `leaf` itself
/// when it failed, or when nothing upstream did (cancelled for another reason).
fn root_cause(run: &RunState, leaf: usize) -> usize {
    let steps = &run.rec.steps;
    let unsuccessful = |i: usize| {
        matches!(
            steps[i].status,
            StepStatus::Failed | StepStatus::Dead | StepStatus::Cancelled
        )
    };
    let mut seen = vec![false; steps.len()];
    let mut stack = vec![leaf];
    let mut causes = Vec::new();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        if steps[i].status == StepStatus::Cancelled {
            stack.extend(
                run.graph
                    .upstreams(i)
                    .iter()
                    .copied()
                    .filter(|&u| unsuccessful(u)),
            );
        } else {
            causes.push(i);
        }
    }
    let order = run.graph.topological_positions();
    causes.into_iter().min_by_key(|&i| order[i]).unwrap_or(leaf)
}

/// Takes up the result of step `i`'s condition, evaluated under `token`:
/// true queues the step ([`Effect::Enqueue`]), false skips it, an error
/// fails it. Returns false for a result nobody waits for any more (another
/// evaluation's, or the run was cancelled or the step decided otherwise):
/// then nothing changed. Otherwise [`advance`] the run next.
pub(crate) fn condition_done(
    run: &mut RunState,
    i: usize,
    token: u64,
    result: Result<bool, CondError>,
    ctx: Ctx<'_>,
    effects: &mut Vec<Effect>,
    events: &mut Vec<Event>,
) -> bool {
    if run.evaluating.get(&i) != Some(&token) {
        return false;
    }
    run.evaluating.remove(&i);
    if run.cancelled || run.rec.steps.get(i).map(|s| s.status) != Some(StepStatus::Pending) {
        return false;
    }
    let settle_as = match result {
        Ok(true) => None,
        Ok(false) => Some((
            StepStatus::Skipped,
            format!(
                "condition is false: {}",
                run.spec.steps[i].when.as_deref().unwrap_or_default()
            ),
        )),
        Err(e) => Some(condition_failed(&e)),
    };
    match settle_as {
        None => {
            set_step(
                &mut run.rec,
                i,
                StepStatus::Queued,
                ctx.now,
                "ready",
                ctx.actor,
                events,
            );
            effects.push(Effect::Enqueue(i));
        }
        Some((status, reason)) => {
            run.rec.steps[i].error = Some(reason.clone());
            set_step(&mut run.rec, i, status, ctx.now, reason, ctx.actor, events);
        }
    }
    true
}
