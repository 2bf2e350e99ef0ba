//! The core without tokio, a store or a clock: states built by hand, events
//! applied, transitions and effects asserted.

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::attempt::{self, Ended, Retries};
use super::control;
use super::fire::{self, Fire, Firing};
use super::run::{self, RunState};
use super::{Ctx, Effect};
use crate::model::{
    Event, Millis, Outcome, RECORD_FORMAT, RunRecord, RunStatus, ScheduleState, StepRunRecord,
    StepStatus, TriggerKind,
};
use crate::schedule::Trigger;
use crate::task::{self, TaskSpec};

const T0: Millis = 1_800_000_000_000;

fn ctx(now: Millis) -> Ctx<'static> {
    Ctx {
        now,
        actor: "scheduler",
    }
}

fn dead_id(now: Millis) -> String {
    format!("d{now}")
}

/// A queued run of the task `yaml`, every step pending, created at `T0`.
fn state(yaml: &str) -> RunState {
    let spec: TaskSpec = task::parse(yaml).expect("valid task");
    let rec = RunRecord {
        format: RECORD_FORMAT,
        revision: 1,
        id: "r1".into(),
        tenant: "t".into(),
        task: spec.name.clone().into(),
        spec: serde_json::Value::Null.into(),
        status: RunStatus::Queued,
        reason: None,
        priority: 5,
        trigger: TriggerKind::Manual,
        scheduled_for: T0,
        created_at: T0,
        started_at: None,
        finished_at: None,
        input: serde_json::json!({}),
        idempotency_key: None,
        upstream_run: None,
        steps: spec
            .steps
            .iter()
            .map(|s| StepRunRecord::pending(&s.name))
            .collect(),
    };
    RunState::new(rec, std::sync::Arc::new(spec), false)
}

fn advance(run: &mut RunState, now: Millis, attempts_out: bool) -> Vec<Effect> {
    let (mut effects, mut events) = (Vec::new(), Vec::new());
    run::advance(run, ctx(now), 20, attempts_out, &mut effects, &mut events);
    effects
}

fn statuses(run: &RunState) -> Vec<StepStatus> {
    run.rec.steps.iter().map(|s| s.status).collect()
}

/// Starts attempt after attempt of step `i` (queued) as the actor would.
fn begin(run: &mut RunState, i: usize, now: Millis) -> u32 {
    let mut events = Vec::new();
    let number = run.rec.steps[i].attempts.len() as u32 + 1;
    let mut effects = Vec::new();
    attempt::run_started(&mut run.rec, now, &mut effects, &mut events);
    attempt::attempt_begun(
        &mut run.rec,
        i,
        number,
        serde_json::json!({}),
        &plugin_record(),
        now,
        &mut events,
    );
    number
}

/// The plugin version the attempts of these tests run.
fn plugin_record() -> crate::model::PluginRecord {
    crate::model::PluginRecord {
        tenant: "t".into(),
        name: "p".into(),
        version: "1.0.0".into(),
        digest: "ab".repeat(32),
        size: 1,
        created_at: 0,
        status: Default::default(),
        error: None,
    }
}

fn finish(
    run: &mut RunState,
    i: usize,
    number: u32,
    outcome: Outcome,
    now: Millis,
    rng: &mut StdRng,
) -> Vec<Effect> {
    let (mut effects, mut events) = (Vec::new(), Vec::new());
    let mut retries = Retries {
        max_lost: 3,
        rng,
        dead_letter_id: dead_id,
    };
    let ended = Ended {
        attempt: number,
        outcome,
        kind: None,
        output: None,
        error: Some("boom".into()),
    };
    attempt::attempt_finished(
        run,
        i,
        ended,
        ctx(now),
        &mut retries,
        &mut effects,
        &mut events,
    );
    effects
}

#[test]
fn a_new_run_queues_its_roots_only() {
    let mut run = state(
        "name: p\nsteps:\n  - name: a\n    plugin: x@1.0.0\n  - name: b\n    needs: [a]\n    plugin: x@1.0.0\n",
    );
    let effects = advance(&mut run, T0, false);
    assert_eq!(effects, [Effect::Enqueue(0)]);
    assert_eq!(statuses(&run), [StepStatus::Queued, StepStatus::Pending]);
    assert_eq!(run.rec.status, RunStatus::Queued);
}

#[test]
fn a_failing_step_retries_with_backoff_until_max_attempts_then_is_dead() {
    let mut run =
        state("name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 3, backoff: [10s, 30s] }\n");
    let mut rng = StdRng::seed_from_u64(1);
    assert_eq!(advance(&mut run, T0, false), [Effect::Enqueue(0)]);
    let mut now = T0;
    for wait in [10_000, 30_000] {
        let n = begin(&mut run, 0, now);
        let effects = finish(&mut run, 0, n, Outcome::Failed, now, &mut rng);
        let at = now + wait;
        assert_eq!(effects, [Effect::Retry { step: 0, at }], "attempt {n}");
        assert_eq!(run.rec.steps[0].status, StepStatus::RetryWait);
        assert_eq!(run.rec.steps[0].next_attempt_at, Some(at));
        assert!(
            advance(&mut run, now, false).is_empty(),
            "a waiting step ends nothing"
        );
        now = at;
        let (mut effects, mut events) = (Vec::new(), Vec::new());
        assert!(attempt::retry_due(
            &mut run.rec,
            0,
            now,
            &mut effects,
            &mut events
        ));
        assert_eq!(effects, [Effect::Enqueue(0)]);
        assert_eq!(run.rec.steps[0].status, StepStatus::Queued);
    }
    let n = begin(&mut run, 0, now);
    assert_eq!(n, 3);
    let effects = finish(&mut run, 0, n, Outcome::Failed, now, &mut rng);
    let [Effect::DeadLetter(dead)] = effects.as_slice() else {
        panic!("expected a dead letter, got {effects:?}");
    };
    assert_eq!((dead.attempts, dead.step.as_str()), (3, "flaky"));
    assert_eq!(dead.id, dead_id(now));
    assert_eq!(run.rec.steps[0].status, StepStatus::Dead);
    assert_eq!(advance(&mut run, now, false), [Effect::Finished]);
    assert_eq!(run.rec.status, RunStatus::Failed);
    assert_eq!(
        run.rec.reason.as_deref(),
        Some("step `flaky` dead after 3 attempts")
    );
}

#[test]
fn a_step_without_retries_fails_without_a_dead_letter() {
    let mut run = state("name: once\nplugin: fail@1.0.0\n");
    let mut rng = StdRng::seed_from_u64(1);
    advance(&mut run, T0, false);
    let n = begin(&mut run, 0, T0);
    assert!(finish(&mut run, 0, n, Outcome::Failed, T0, &mut rng).is_empty());
    assert_eq!(run.rec.steps[0].status, StepStatus::Failed);
    assert_eq!(run.rec.steps[0].error.as_deref(), Some("boom"));
}

#[test]
fn a_skipped_upstream_skips_all_success_dependants_but_not_all_done_ones() {
    let mut run = state(
        "name: p\nsteps:\n  - name: a\n    plugin: x@1.0.0\n  - name: b\n    needs: [a]\n    plugin: x@1.0.0\n  - name: c\n    needs: [a]\n    plugin: x@1.0.0\n    trigger_rule: all_done\n  - name: d\n    needs: [b]\n    plugin: x@1.0.0\n",
    );
    advance(&mut run, T0, false);
    // `a` was skipped (its condition was false, say).
    run.rec.steps[0].status = StepStatus::Skipped;
    let effects = advance(&mut run, T0, false);
    assert_eq!(effects, [Effect::Enqueue(2)]);
    assert_eq!(
        statuses(&run),
        [
            StepStatus::Skipped,
            StepStatus::Skipped,
            StepStatus::Queued,
            StepStatus::Skipped
        ]
    );
    assert!(
        run.rec.steps[1]
            .error
            .as_deref()
            .unwrap()
            .contains("all_success")
    );
    run.rec.steps[2].status = StepStatus::Succeeded;
    assert_eq!(
        advance(&mut run, T0, false),
        [Effect::LeftQueue, Effect::Finished]
    );
    assert_eq!(run.rec.status, RunStatus::Succeeded);
}

#[test]
fn a_failed_upstream_cancels_its_dependants_and_fails_the_run() {
    let mut run = state(
        "name: p\nsteps:\n  - name: a\n    plugin: x@1.0.0\n  - name: b\n    needs: [a]\n    plugin: x@1.0.0\n",
    );
    advance(&mut run, T0, false);
    run.rec.steps[0].status = StepStatus::Failed;
    assert_eq!(
        advance(&mut run, T0, false),
        [Effect::LeftQueue, Effect::Finished]
    );
    assert_eq!(statuses(&run), [StepStatus::Failed, StepStatus::Cancelled]);
    assert_eq!(run.rec.status, RunStatus::Failed);
    // The reason names the failed step, not the cancelled leaf it reached.
    assert_eq!(run.rec.reason.as_deref(), Some("step `a` failed"));
}

#[test]
fn a_failed_runs_reason_names_the_root_cause_not_a_cancelled_leaf() {
    // extract → totals → {small_day, big_day}; `noise` fails too, but
    // `audit` (all_done) handles it, so it is no cause; totals comes first
    // in the DAG among the causes reaching the cancelled leaves.
    let mut run = state(
        "name: p\nsteps:\n  - { name: small_day, needs: [totals], plugin: x@1.0.0 }\n  - { name: big_day, needs: [totals, late], plugin: x@1.0.0 }\n  - { name: late, needs: [totals], plugin: x@1.0.0 }\n  - { name: totals, needs: [extract], plugin: x@1.0.0 }\n  - { name: extract, plugin: x@1.0.0 }\n  - { name: noise, plugin: x@1.0.0 }\n  - { name: audit, needs: [noise], plugin: x@1.0.0, trigger_rule: all_done }\n",
    );
    advance(&mut run, T0, false);
    run.rec.steps[4].status = StepStatus::Succeeded;
    run.rec.steps[5].status = StepStatus::Failed;
    advance(&mut run, T0, false);
    // totals: dead after three attempts, after two of an earlier round.
    for _ in 0..5 {
        begin(&mut run, 3, T0);
    }
    run.rec.steps[3].round_start = 2;
    run.rec.steps[3].status = StepStatus::Dead;
    run.rec.steps[6].status = StepStatus::Succeeded;
    advance(&mut run, T0, false);
    assert_eq!(
        statuses(&run),
        [
            StepStatus::Cancelled,
            StepStatus::Cancelled,
            StepStatus::Cancelled,
            StepStatus::Dead,
            StepStatus::Succeeded,
            StepStatus::Failed,
            StepStatus::Succeeded
        ]
    );
    assert_eq!(run.rec.status, RunStatus::Failed);
    assert_eq!(
        run.rec.reason.as_deref(),
        Some("step `totals` dead after 3 attempts")
    );
}

#[test]
fn a_when_step_waits_for_its_condition_and_a_false_one_skips_it() {
    let mut run =
        state("name: w\nsteps:\n  - { name: s, plugin: x@1.0.0, when: \"input.n < 1\" }\n");
    assert_eq!(advance(&mut run, T0, false), [Effect::Evaluate(0)]);
    run.evaluating.insert(0, 7);
    assert!(advance(&mut run, T0, false).is_empty(), "asked once");
    let (mut effects, mut events) = (Vec::new(), Vec::new());
    let stale = run::condition_done(&mut run, 0, 6, Ok(true), ctx(T0), &mut effects, &mut events);
    assert!(!stale, "another evaluation's result is dropped");
    assert!(run::condition_done(
        &mut run,
        0,
        7,
        Ok(false),
        ctx(T0),
        &mut effects,
        &mut events
    ));
    assert!(effects.is_empty());
    assert_eq!(run.rec.steps[0].status, StepStatus::Skipped);
    assert_eq!(
        advance(&mut run, T0, false),
        [Effect::LeftQueue, Effect::Finished]
    );
    assert_eq!(run.rec.status, RunStatus::Succeeded);
}

#[test]
fn cancelling_a_run_with_a_running_attempt_stops_it_and_waits_for_its_report() {
    let mut run = state(
        "name: p\nsteps:\n  - name: a\n    plugin: x@1.0.0\n  - name: b\n    needs: [a]\n    plugin: x@1.0.0\n",
    );
    let mut rng = StdRng::seed_from_u64(1);
    advance(&mut run, T0, false);
    let n = begin(&mut run, 0, T0);
    let (mut effects, mut events) = (Vec::new(), Vec::<Event>::new());
    let by = Ctx {
        now: T0 + 5,
        actor: "alice",
    };
    assert!(control::cancel(
        &mut run,
        by,
        true,
        &mut effects,
        &mut events
    ));
    // Running already: it left the queue at its first start.
    assert_eq!(effects, [Effect::StopAttempt(0), Effect::Unqueue]);
    assert_eq!(
        statuses(&run),
        [StepStatus::Cancelled, StepStatus::Cancelled]
    );
    assert_eq!(run.rec.status, RunStatus::Cancelled);
    assert_eq!(run.rec.reason.as_deref(), Some("cancelled by alice"));
    assert!(!control::cancel(
        &mut run,
        by,
        true,
        &mut effects,
        &mut events
    ));
    // The stopped attempt reports; the step keeps its status and the run
    // is forgotten once nothing is out.
    assert!(finish(&mut run, 0, n, Outcome::Cancelled, T0 + 9, &mut rng).is_empty());
    assert_eq!(run.rec.steps[0].status, StepStatus::Cancelled);
    assert_eq!(advance(&mut run, T0 + 9, false), [Effect::Finished]);
    assert_eq!(run.rec.status, RunStatus::Cancelled);
}

#[test]
fn a_failure_in_a_cancelled_run_is_not_retried() {
    let mut run =
        state("name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 3, backoff: [10s] }\n");
    let mut rng = StdRng::seed_from_u64(1);
    advance(&mut run, T0, false);
    let n = begin(&mut run, 0, T0);
    run.cancelled = true;
    let effects = finish(&mut run, 0, n, Outcome::Failed, T0, &mut rng);
    assert!(
        matches!(effects.as_slice(), [Effect::DeadLetter(_)]),
        "{effects:?}"
    );
}

#[test]
fn reopening_for_a_rerun_resets_the_step_and_its_descendants_only() {
    let mut run = state(
        "name: p\nsteps:\n  - name: a\n    plugin: x@1.0.0\n  - name: b\n    needs: [a]\n    plugin: x@1.0.0\n  - name: c\n    plugin: x@1.0.0\n",
    );
    for s in &mut run.rec.steps {
        s.status = StepStatus::Succeeded;
    }
    run.rec.status = RunStatus::Succeeded;
    let names = control::rerun_resets(&run.spec, 0);
    let mut events = Vec::new();
    control::reopen(
        &mut run.rec,
        |s| names.contains(&s.name),
        ctx(T0),
        "rerun",
        &mut events,
    );
    assert_eq!(
        statuses(&run),
        [
            StepStatus::Pending,
            StepStatus::Pending,
            StepStatus::Succeeded
        ]
    );
    assert_eq!(run.rec.status, RunStatus::Queued);
    assert_eq!(events.len(), 3);
    assert!(control::retry_resets(&run.rec.steps[0]));
    assert!(!control::retry_resets(&run.rec.steps[2]));
}

#[test]
fn a_crash_loses_running_attempts_and_runs_them_again_within_the_bound() {
    let mut rng = StdRng::seed_from_u64(1);
    for (lost_before, want) in [(0, StepStatus::Queued), (3, StepStatus::RetryWait)] {
        let mut run = state("name: l\nplugin: x@1.0.0\n");
        advance(&mut run, T0, false);
        begin(&mut run, 0, T0);
        run.rec.steps[0].lost_attempts = lost_before;
        let (mut effects, mut events) = (Vec::new(), Vec::new());
        let mut retries = Retries {
            max_lost: 3,
            rng: &mut rng,
            dead_letter_id: dead_id,
        };
        attempt::recover(&mut run, ctx(T0), &mut retries, &mut effects, &mut events);
        assert_eq!(run.rec.steps[0].attempts[0].outcome, Some(Outcome::Lost));
        assert_eq!(run.rec.steps[0].status, want, "{lost_before} lost before");
        assert_eq!(effects[0], Effect::Lost);
        match want {
            // Within the bound: run again at once, no retry used up.
            StepStatus::Queued => assert_eq!(effects[1..], [Effect::Enqueue(0)]),
            // Past it: a failure per the policy (a lost attempt is retried).
            _ => assert!(matches!(effects[1..], [Effect::Retry { step: 0, .. }])),
        }
    }
}

fn every_10s(overlap: &str, catch_up: &str) -> (TaskSpec, Trigger) {
    let spec = task::parse(&format!(
        "name: o\ntrigger: {{ every: 10s }}\noverlap: {overlap}\ncatch_up: {catch_up}\nplugin: x@1.0.0\n"
    ))
    .expect("valid task");
    let created = chrono::DateTime::from_timestamp_millis(T0).unwrap();
    let trigger = Trigger::compile(spec.trigger.as_ref(), created).expect("valid trigger");
    (spec, trigger)
}

fn schedule_at(next: Millis) -> ScheduleState {
    ScheduleState {
        tenant: "t".into(),
        task: "o".into(),
        next_fire: Some(next),
        last_fired: None,
        paused: false,
    }
}

/// Drives a firing, with every created run active; returns what it did.
fn drive(firing: &mut Firing, trigger: &Trigger) -> Vec<Fire> {
    let mut out = Vec::new();
    while let Some(f) = firing.next(trigger) {
        if matches!(f, Fire::Create(_)) {
            firing.created(true);
        }
        out.push(f);
    }
    out
}

#[test]
fn overlap_skip_skips_while_a_run_is_active_and_queue_one_queues_one() {
    let at = T0 + 10_000;
    let (spec, trigger) = every_10s("skip", "latest");
    let mut firing = Firing::new(&trigger, &schedule_at(at), &spec, 1, at, 20).unwrap();
    assert_eq!(drive(&mut firing, &trigger), [Fire::Skip(at)]);
    assert_eq!(firing.last_fired, Some(at));
    assert_eq!(firing.next_fire, Some(at + 10_000));

    let (spec, trigger) = every_10s("queue_one", "latest");
    let mut firing = Firing::new(&trigger, &schedule_at(at), &spec, 1, at, 20).unwrap();
    assert_eq!(drive(&mut firing, &trigger), [Fire::Create(at)]);
    let mut firing = Firing::new(&trigger, &schedule_at(at), &spec, 2, at, 20).unwrap();
    assert_eq!(drive(&mut firing, &trigger), [Fire::Skip(at)]);

    let (spec, trigger) = every_10s("allow", "latest");
    let mut firing = Firing::new(&trigger, &schedule_at(at), &spec, 5, at, 20).unwrap();
    assert_eq!(drive(&mut firing, &trigger), [Fire::Create(at)]);
}

#[test]
fn the_next_instant_within_the_lead_fires_ahead_unless_it_would_be_skipped() {
    let at = T0 + 10_000;
    let (spec, trigger) = every_10s("allow", "latest");
    // 15 ms before the instant, with a 20 ms lead: created now, released later.
    let mut firing = Firing::new(&trigger, &schedule_at(at), &spec, 0, at - 15, 20).unwrap();
    assert_eq!(drive(&mut firing, &trigger), [Fire::Create(at)]);
    assert!(firing.ahead);
    assert_eq!(firing.next_fire, Some(at + 10_000));

    let (spec, trigger) = every_10s("skip", "latest");
    let mut firing = Firing::new(&trigger, &schedule_at(at), &spec, 1, at - 15, 20).unwrap();
    assert!(
        drive(&mut firing, &trigger).is_empty(),
        "judged at the instant"
    );
    assert!(!firing.ahead);
    assert_eq!(firing.next_fire, Some(at));
}

#[test]
fn catch_up_fires_the_latest_or_every_missed_instant_or_none() {
    let first = T0 + 10_000;
    // Down for 10 minutes: 61 instants due, all but the last few missed.
    let now = first + 600_000;
    let (spec, trigger) = every_10s("allow", "latest");
    let mut firing = Firing::new(&trigger, &schedule_at(first), &spec, 0, now, 0).unwrap();
    assert_eq!(drive(&mut firing, &trigger), [Fire::Create(now)]);
    assert_eq!(firing.missed, 60);

    let (spec, trigger) = every_10s("allow", "all");
    let mut firing = Firing::new(&trigger, &schedule_at(first), &spec, 0, now, 0).unwrap();
    let fired = drive(&mut firing, &trigger);
    assert_eq!(fired.len(), 61);
    assert_eq!(fired[0], Fire::Create(first));
    assert_eq!(firing.next_fire, Some(now + 10_000));

    // `none`: only the instants within the misfire grace (60 s) fire.
    let (spec, trigger) = every_10s("allow", "none");
    let mut firing = Firing::new(&trigger, &schedule_at(first), &spec, 0, now, 0).unwrap();
    let fired = drive(&mut firing, &trigger);
    assert_eq!(fired.first(), Some(&Fire::Create(now - 60_000)));
    assert_eq!(fired.len(), 7);
    assert_eq!(firing.missed, 54);
}

#[test]
fn catch_up_all_is_bounded() {
    let first = T0 + 10_000;
    let now = first + 10_000 * 500;
    let (spec, trigger) = every_10s("allow", "all");
    let mut firing = Firing::new(&trigger, &schedule_at(first), &spec, 0, now, 0).unwrap();
    assert_eq!(
        drive(&mut firing, &trigger).len(),
        crate::schedule::MAX_CATCH_UP
    );
    assert_eq!(firing.missed, 501 - crate::schedule::MAX_CATCH_UP);
}

#[test]
fn a_replaced_definition_fires_from_now_on_and_a_resumed_one_skips_what_it_missed() {
    let (_, trigger) = every_10s("allow", "latest");
    let date = |ms| chrono::DateTime::from_timestamp_millis(ms).unwrap();
    let first = T0 + 10_000;
    assert_eq!(
        fire::next_fire_on_save(&trigger, None, false, T0, date(T0)),
        Some(first),
        "a new task starts at its first instant"
    );
    let mut old = schedule_at(first);
    // Replaced long after its first instant, never fired: from now on.
    let now = T0 + 95_000;
    assert_eq!(
        fire::next_fire_on_save(&trigger, Some(&old), true, T0, date(now)),
        Some(T0 + 100_000)
    );
    // It fired at an instant after `now` (ahead): not at it again.
    old.last_fired = Some(T0 + 100_000);
    assert_eq!(
        fire::next_fire_on_save(&trigger, Some(&old), true, T0, date(now)),
        Some(T0 + 110_000)
    );
    assert_eq!(
        fire::next_fire_on_resume(&trigger, Some(first), T0, date(now)),
        Some(T0 + 100_000)
    );
    assert_eq!(
        fire::next_fire_on_resume(&trigger, None, T0, date(now)),
        Some(now),
        "a trigger that never fired starts at once when its first instant passed"
    );
}

#[test]
fn after_triggers_fire_on_their_outcome() {
    use crate::schedule::AfterOn;
    assert!(fire::after_fires(AfterOn::Success, RunStatus::Succeeded));
    assert!(!fire::after_fires(AfterOn::Success, RunStatus::Failed));
    assert!(fire::after_fires(AfterOn::Failure, RunStatus::Failed));
    assert!(!fire::after_fires(AfterOn::Failure, RunStatus::Cancelled));
    assert!(fire::after_fires(AfterOn::Done, RunStatus::Cancelled));
    assert!(!fire::after_fires(AfterOn::Done, RunStatus::Running));
}

#[test]
fn queue_one_lets_the_oldest_held_run_go_when_a_running_one_ends() {
    let mut t = fire::TaskRuns::default();
    t.track("a", false);
    t.track("b", true);
    t.track("c", true);
    t.track("d", true);
    // A held run cancelled while waiting frees no slot.
    assert_eq!(t.ended("c", true), None);
    assert_eq!(t.ended("a", false), Some("b".into()));
    assert_eq!(t.ended("b", false), Some("d".into()));
    assert_eq!(t.ended("d", false), None);
    assert_eq!(t.active, 0);
}
