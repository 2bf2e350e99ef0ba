//! Bulk triggers and bulk apply: a batch of triggers is taken up in one
//! turn (the queue bound sees the whole batch, a key repeated in it gives
//! one run) and answered per item; a batch of task definitions is stored
//! and armed as single saves are.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_trigger_batch_answers_each_run_in_order_with_its_own_refusal() {
    let config = SchedulerConfig {
        queue: QueueConfig::for_cores(1),
        max_queued_per_tenant: 4,
        ..test_config()
    };
    let h = Harness::start_with(Arc::new(MemoryStore::new()), config).await;
    h.put_task("name: b\nplugin: ok@1.0.0\ninput: { n: \"${input.n}\" }\n")
        .await;
    let req = |task: &str, n: u64, key: Option<&str>| TriggerRequest {
        tenant: "t".into(),
        task: task.into(),
        input: Some(serde_json::json!({ "n": n })),
        idempotency_key: key.map(str::to_string),
        actor: "test".into(),
        ..Default::default()
    };
    let answers = h
        .scheduler
        .trigger_batch(vec![
            req("b", 0, Some("k")),
            req("b", 1, Some("k")),
            req("nope", 2, None),
            req("b", 3, None),
            req("b", 4, None),
            req("b", 5, None),
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 6);
    let (first, created) = answers[0].as_ref().unwrap();
    assert!(created);
    // The key repeated in the batch: the run of its first item.
    let (again, created_again) = answers[1].as_ref().unwrap();
    assert!(!created_again);
    assert_eq!(again.id, first.id);
    assert_eq!(again.input, serde_json::json!({ "n": 0 }));
    assert!(matches!(&answers[2], Err(Error::NotFound(what)) if what == "task `nope`"));
    // The queue bound of 4 counts the runs of the batch before each item;
    // until the batch is stored, the repeated key counts too (as two single
    // triggers with one key taken up in one turn do).
    assert!(answers[3].is_ok() && answers[4].is_ok());
    assert!(
        matches!(&answers[5], Err(Error::QueueFull { queued: 4, .. })),
        "{:?}",
        answers[5]
    );
    for answer in answers.iter().flatten() {
        let run = h.wait_terminal(&answer.0.id).await;
        assert_eq!(run.status, RunStatus::Succeeded);
    }
    let inputs: Vec<_> = h
        .runs("b")
        .into_iter()
        .map(|r| r.input["n"].clone())
        .collect();
    assert_eq!(inputs, [0, 3, 4].map(|n| serde_json::json!(n)));
}

#[tokio::test(start_paused = true)]
async fn tasks_put_in_one_batch_are_stored_and_armed_like_single_saves() {
    let h = Harness::start().await;
    let now = h.clock.now();
    h.put_task("name: old\ntrigger: { every: 10s }\nplugin: ok@1.0.0\n")
        .await;
    h.scheduler.set_paused("t", "old", true).await.unwrap();
    let mut replaced = task_record(
        "t",
        "name: old\ntrigger: { every: 20s }\nplugin: ok@1.0.0\n",
        now,
    );
    replaced.version = 2;
    let records = vec![
        task_record(
            "t",
            "name: c1\ntrigger: { cron: \"*/10 * * * * ?\" }\nplugin: ok@1.0.0\n",
            now,
        ),
        task_record(
            "t",
            "name: c2\ntrigger: { every: 15s }\nplugin: ok@1.0.0\n",
            now,
        ),
        task_record("t", "name: manual\nplugin: ok@1.0.0\n", now),
        replaced,
    ];
    // Half parsed and compiled by the caller, half here: the same schedules
    // either way.
    let records = records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let parsed = (i % 2 == 0).then(|| {
                let spec: crate::task::TaskSpec =
                    serde_json::from_value((*r.spec).clone()).unwrap();
                let anchor = crate::scheduler::clock::from_ms(r.created_at);
                let trigger =
                    crate::schedule::Trigger::compile(spec.trigger.as_ref(), anchor).unwrap();
                crate::scheduler::ParsedTask {
                    spec: std::sync::Arc::new(spec),
                    trigger: std::sync::Arc::new(trigger),
                }
            });
            (r, parsed)
        })
        .collect();
    let schedules = h.scheduler.put_tasks(records).await.unwrap();
    let names: Vec<_> = schedules.iter().map(|s| s.task.as_str()).collect();
    assert_eq!(names, ["c1", "c2", "manual", "old"]);
    let t = t0().timestamp_millis();
    assert_eq!(schedules[0].next_fire, Some(t + 10_000));
    assert_eq!(schedules[1].next_fire, Some(t + 15_000));
    assert_eq!(schedules[2].next_fire, None);
    // A replaced definition keeps its pause, as a single save does.
    assert!(schedules[3].paused);
    for s in &schedules {
        assert_eq!(
            h.store.get_schedule("t", &s.task).unwrap().as_ref(),
            Some(s)
        );
        assert!(h.store.get_task("t", &s.task).unwrap().is_some());
    }
    assert_eq!(h.store.get_task("t", "old").unwrap().unwrap().version, 2);
    tokio::time::sleep(Duration::from_millis(31_000)).await;
    let at = |task: &str| -> Vec<i64> {
        h.runs(task)
            .iter()
            .map(|r| (r.scheduled_for - t) / 1000)
            .collect()
    };
    assert_eq!(at("c1"), [10, 20, 30]);
    assert_eq!(at("c2"), [15, 30]);
    assert!(at("manual").is_empty() && at("old").is_empty());
}
