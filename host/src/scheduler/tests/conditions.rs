//! `when` conditions, evaluated on threads off the actor: a slow one delays
//! no other tenant's fires, one out at a crash is evaluated again, and tenants take turns.

use super::*;

/// Polls the store until `run` is terminal, for at most 30 s of real time
/// (a condition is evaluated on a thread of its own, in real time; virtual
/// time runs on meanwhile).
async fn wait_terminal_real(h: &Harness, id: &str) -> RunRecord {
    h.poll(id, Patience::Real, |run| run.status.is_terminal())
        .await
}

/// A task whose only step's `when` is n³ over `input.l`.
const CUBIC: &str = "name: cubic\nsteps:\n  - name: s\n    plugin: ok@1.0.0\n    when: \"input.l.all(x, input.l.all(y, input.l.all(z, x + y + z >= 0)))\"\n";

/// A budget that lets [`CUBIC`] over 1,000 items run for a good while of
/// real time (~1 s in a debug build) before it stops it.
fn slow_budget() -> crate::cond::Budget {
    crate::cond::Budget {
        steps: 5_000_000,
        bytes: u64::MAX,
        deadline: Duration::from_secs(20),
    }
}

/// The actor hands conditions to threads of their own and takes the result
/// as an event: while one tenant's expensive condition is being evaluated,
/// another tenant's `every: 1s` task keeps firing, each run starting at its
/// instant. Evaluated on the actor, as before, the condition held up every
/// fire until it was done.
#[tokio::test(start_paused = true)]
async fn a_slow_condition_does_not_delay_another_tenants_fires() {
    let config = SchedulerConfig {
        cond_budget: slow_budget(),
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task_for(
        "b",
        "name: tick\ntrigger: { every: 1s }\nplugin: ok@1.0.0\n",
    )
    .await;
    h.put_task_for("a", CUBIC).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let before = h.runs_for("b", "tick").len();
    let slow = h
        .trigger_for(
            "a",
            "cubic",
            serde_json::json!({ "l": (0..1000).collect::<Vec<_>>() }),
        )
        .await;
    // Virtual time goes on while the condition is out.
    while h.runs_for("b", "tick").len() < before + 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rec = h.store.get_run(&slow.id).unwrap().unwrap();
    assert_eq!(
        rec.steps[0].status,
        StepStatus::Pending,
        "the condition was decided before the other tenant's fires"
    );
    let ticks = h.runs_for("b", "tick");
    for run in &ticks[before..before + 2] {
        let run = h.wait_terminal(&run.id).await;
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.started_at, Some(run.scheduled_for), "started late");
    }
    h.scheduler.set_paused("b", "tick", true).await.unwrap();
    // The condition itself ends with the budget's reason.
    let done = wait_terminal_real(&h, &slow.id).await;
    assert_eq!(done.steps[0].status, StepStatus::Failed);
    assert_eq!(
        done.steps[0].error.as_deref(),
        Some(
            "condition exceeded its budget: more than 5000000 steps (a macro over a large \
             list, nested macros, or long values compared or searched)"
        )
    );
    assert_eq!(done.status, RunStatus::Failed);
    h.shutdown.cancel();
}

/// Nothing about an evaluation in flight is stored: stopped while one is
/// out, the step is still `pending`, and after the restart it is evaluated
/// again (here under the default budget, which stops it soon).
#[tokio::test(start_paused = true)]
async fn a_condition_out_at_a_crash_is_evaluated_again() {
    let store = Arc::new(MemoryStore::new());
    let config = SchedulerConfig {
        cond_budget: crate::cond::Budget {
            deadline: Duration::from_secs(2),
            ..slow_budget()
        },
        ..test_config()
    };
    let h = Harness::start_with(store.clone(), config).await;
    h.put_task(CUBIC).await;
    let run = h
        .trigger(
            "cubic",
            serde_json::json!({ "l": (0..1000).collect::<Vec<_>>() }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let stored = store.get_run(&run.id).unwrap().unwrap();
    assert_eq!(stored.steps[0].status, StepStatus::Pending);
    assert_eq!(stored.status, RunStatus::Queued);
    let h = restart_at(store, t0() + chrono::Duration::seconds(5)).await;
    let done = wait_terminal_real(&h, &run.id).await;
    assert_eq!(done.steps[0].status, StepStatus::Failed);
    assert!(
        done.steps[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("condition exceeded its budget: "),
        "{:?}",
        done.steps[0]
    );
    let decided: Vec<_> = h
        .store
        .events(&run.id)
        .unwrap()
        .into_iter()
        .filter(|e| e.step.is_some())
        .map(|e| (e.to, e.actor))
        .collect();
    assert_eq!(decided, [("failed".to_owned(), "scheduler".to_owned())]);
}

/// A condition decides its step once it is back from the threads: true
/// runs it, false skips it, and the run goes on from there.
#[tokio::test(start_paused = true)]
async fn conditions_decide_their_steps_when_they_come_back() {
    let h = Harness::start().await;
    h.put_task(
        "name: w\nsteps:\n  - { name: a, plugin: ok@1.0.0, input: { n: \"${input.n}\" } }\n  - { name: yes, needs: [a], plugin: ok@1.0.0, when: \"steps.a.output.echo.n > 1\" }\n  - { name: no, needs: [a], plugin: ok@1.0.0, when: \"input.n < 1\" }\n  - { name: after, needs: [no], plugin: ok@1.0.0, trigger_rule: all_done }\n",
    )
    .await;
    let run = h.trigger("w", serde_json::json!({ "n": 2 })).await;
    let run = wait_terminal_real(&h, &run.id).await;
    let states: Vec<_> = run
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.status))
        .collect();
    assert_eq!(
        states,
        [
            ("a", StepStatus::Succeeded),
            ("yes", StepStatus::Succeeded),
            ("no", StepStatus::Skipped),
            ("after", StepStatus::Succeeded),
        ]
    );
    assert_eq!(
        run.steps[2].error.as_deref(),
        Some("condition is false: input.n < 1")
    );
    assert_eq!(run.status, RunStatus::Succeeded);
}

/// Steps waiting for their condition take turns by tenant: with one
/// evaluation thread busy with tenant `a`'s ten costly conditions, tenant
/// `b`'s condition is evaluated after at most two of them, not after all.
#[tokio::test(start_paused = true)]
async fn one_tenants_conditions_do_not_hold_up_another_tenants() {
    let config = SchedulerConfig {
        cond_workers: 1,
        cond_budget: crate::cond::Budget {
            deadline: Duration::from_secs(600),
            ..crate::cond::Budget::default()
        },
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    let task = |name: &str| {
        format!(
            "name: {name}\nsteps:\n  - name: s\n    plugin: ok@1.0.0\n    when: \"input.l.all(x, input.l.all(y, x + y >= 0))\"\n"
        )
    };
    h.put_task_for("a", &task("many")).await;
    h.put_task_for("b", &task("one")).await;
    let costly = serde_json::json!({ "l": (0..150).collect::<Vec<_>>() });
    let mut a_runs = Vec::new();
    for _ in 0..10 {
        a_runs.push(h.trigger_for("a", "many", costly.clone()).await);
    }
    let b = h
        .trigger_for("b", "one", serde_json::json!({ "l": [1] }))
        .await;
    wait_terminal_real(&h, &b.id).await;
    for run in &a_runs {
        assert_eq!(
            wait_terminal_real(&h, &run.id).await.status,
            RunStatus::Succeeded
        );
    }
    let calls = h.runner.calls.lock().unwrap().clone();
    let b_at = calls.iter().position(|(run, _, _)| *run == b.id).unwrap();
    assert!(b_at <= 2, "{b_at} of a's steps ran before b's: {calls:?}");
    h.shutdown.cancel();
}
