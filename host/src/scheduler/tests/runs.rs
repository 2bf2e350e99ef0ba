//! Manual triggers and run control: a trigger becomes a run (once per
//! idempotency key, batched per actor turn), and cancel, retry and rerun act on it.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_manual_trigger_runs_its_step_and_stores_the_output() {
    let h = Harness::start().await;
    h.put_task("name: t1\nplugin: ok@1.0.0\ninput: { x: \"${input.x}\" }\n")
        .await;
    let run = h.trigger("t1", serde_json::json!({ "x": 7 })).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(
        run.steps[0].output,
        Some(serde_json::json!({ "echo": { "x": 7 } }))
    );
    let events = h.store.events(&run.id).unwrap();
    let path: Vec<_> = events
        .iter()
        .map(|e| (e.step.clone(), e.to.clone()))
        .collect();
    assert_eq!(path.first().unwrap(), &(None, "queued".to_string()));
    assert_eq!(path.last().unwrap(), &(None, "succeeded".to_string()));
    assert!(path.contains(&(Some("t1".into()), "running".into())));
}

#[tokio::test(start_paused = true)]
async fn an_idempotency_key_returns_the_existing_run() {
    let h = Harness::start().await;
    h.put_task("name: t1\nplugin: ok@1.0.0\n").await;
    let req = TriggerRequest {
        tenant: "t".into(),
        task: "t1".into(),
        idempotency_key: Some("k1".into()),
        actor: "test".into(),
        ..Default::default()
    };
    let (first, created) = h.scheduler.trigger(req.clone()).await.unwrap();
    assert!(created);
    let (second, created) = h.scheduler.trigger(req).await.unwrap();
    assert!(!created);
    assert_eq!(first.id, second.id);
    assert_eq!(h.runs("t1").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_stops_a_running_attempt_and_drops_queued_steps() {
    let h = Harness::start().await;
    h.put_task("name: long\nsteps:\n  - name: a\n    plugin: block@1.0.0\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n").await;
    let run = h.trigger("long", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled = h.scheduler.cancel(&run_id(&run), "test").await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    // The scheduler answers before the stopped attempt reports: the record
    // says so (the service waits for the report: `Ax::cancel_run`).
    assert_eq!(cancelled.attempts_stopping(), 1);
    assert_eq!(cancelled.steps[0].attempts[0].outcome, None);
    let run = h.wait_terminal(&run.id).await;
    assert!(run.steps.iter().all(|s| s.status == StepStatus::Cancelled));
    let run = h
        .poll(&run.id, Patience::Paused, |r| r.attempts_stopping() == 0)
        .await;
    assert_eq!(run.attempts_stopping(), 0);
    assert_eq!(
        run.steps[0].attempts[0].outcome,
        Some(crate::model::Outcome::Cancelled)
    );
    assert!(matches!(
        h.scheduler.cancel(&run_id(&run), "test").await,
        Err(Error::Conflict(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn retrying_a_failed_run_keeps_succeeded_steps() {
    let h = Harness::start().await;
    h.put_task("name: pipe\nsteps:\n  - name: a\n    plugin: ok@1.0.0\n  - name: b\n    needs: [a]\n    plugin: fatal@1.0.0\n").await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    h.scheduler.retry(&run_id(&run), "test").await.unwrap();
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(
        run.steps[0].attempts.len(),
        1,
        "a succeeded and is not run again"
    );
    assert_eq!(run.steps[1].attempts.len(), 2);
    let calls = h.runner.calls.lock().unwrap().clone();
    assert_eq!(calls.iter().filter(|c| c.1 == "a").count(), 1);
}

#[tokio::test(start_paused = true)]
async fn rerunning_a_step_runs_it_and_its_downstream_only() {
    let h = Harness::start().await;
    h.put_task(
        "name: pipe\nsteps:\n  - name: a\n    plugin: ok@1.0.0\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n  - name: c\n    needs: [b]\n    plugin: ok@1.0.0\n",
    )
    .await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    assert!(matches!(
        h.scheduler.rerun_step(&run_id(&run), "nope", "test").await,
        Err(Error::NotFound(_))
    ));
    h.scheduler
        .rerun_step(&run_id(&run), "b", "test")
        .await
        .unwrap();
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    let attempts: Vec<usize> = run.steps.iter().map(|s| s.attempts.len()).collect();
    assert_eq!(attempts, [1, 2, 2]);
}

#[tokio::test(start_paused = true)]
async fn triggers_taken_in_one_turn_are_stored_together_and_see_each_other() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        max_queued_per_tenant: 2,
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: q\nplugin: block@1.0.0\n").await;
    h.put_task("name: k\nplugin: ok@1.0.0\n").await;
    let req = |task: &str, key: Option<&str>| TriggerRequest {
        tenant: "t".into(),
        task: task.into(),
        idempotency_key: key.map(str::to_string),
        actor: "test".into(),
        ..Default::default()
    };
    // Sent before the actor runs: it drains them in one turn and inserts
    // the new runs in one store write.
    let (a, again) = tokio::join!(
        h.scheduler.trigger(req("k", Some("a"))),
        h.scheduler.trigger(req("k", Some("a"))),
    );
    let ((first, created), (second, created_again)) = (a.unwrap(), again.unwrap());
    assert!(created && !created_again);
    assert_eq!(first.id, second.id, "one run for one key");
    h.wait_terminal(&first.id).await;
    assert_eq!(h.runs("k").len(), 1);

    // The queue bound counts the runs of the same turn.
    let answers = tokio::join!(
        h.scheduler.trigger(req("q", None)),
        h.scheduler.trigger(req("q", None)),
        h.scheduler.trigger(req("q", None)),
        h.scheduler.trigger(req("q", None)),
    );
    let answers = [answers.0, answers.1, answers.2, answers.3];
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 2);
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert!(
            matches!(refused, Error::QueueFull { queued: 2, .. }),
            "{refused}"
        );
    }
    assert_eq!(h.runs("q").len(), 2);
}
