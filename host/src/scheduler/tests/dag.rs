//! Steps as a graph: needs order the steps and pass outputs, trigger rules
//! decide the downstream steps, and `after` triggers start tasks from other tasks' runs.

use super::*;

#[tokio::test(start_paused = true)]
async fn steps_run_after_their_needs_and_see_upstream_outputs() {
    let h = Harness::start().await;
    h.put_task(
        "name: pipe\nsteps:\n  - name: a\n    plugin: ok@1.0.0\n    input: { n: 1 }\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n    input: { from_a: \"${steps.a.output.echo.n}\" }\n",
    ).await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.steps[1].input, Some(serde_json::json!({ "from_a": 1 })));
    assert!(run.steps[1].attempts[0].started_at >= run.steps[0].attempts[0].finished_at.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_failed_upstream_cancels_all_success_downstream() {
    let h = Harness::start().await;
    h.put_task("name: pipe\nsteps:\n  - name: a\n    plugin: fatal@1.0.0\n  - name: b\n    needs: [a]\n    plugin: ok@1.0.0\n").await;
    let run = h.trigger("pipe", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.steps[1].status, StepStatus::Cancelled);
    assert!(run.steps[1].attempts.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_after_trigger_starts_the_downstream_task_with_upstream_outputs() {
    let h = Harness::start().await;
    h.put_task("name: up\nplugin: ok@1.0.0\ninput: { rows: 5 }\n")
        .await;
    h.put_task("name: down\ntrigger: { after: [up], on: success }\nplugin: ok@1.0.0\ninput: { got: \"${input.upstream.outputs.up.echo.rows}\" }\n").await;
    h.put_task("name: on_fail\ntrigger: { after: [up], on: failure }\nplugin: ok@1.0.0\n")
        .await;
    let run = h.trigger("up", serde_json::json!({})).await;
    h.wait_terminal(&run.id).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let downs = h.runs("down");
    assert_eq!(downs.len(), 1);
    let down = h.wait_terminal(&downs[0].id).await;
    assert_eq!(down.trigger, crate::model::TriggerKind::After);
    assert_eq!(
        down.steps[0].output,
        Some(serde_json::json!({ "echo": { "got": 5 } }))
    );
    assert_eq!(down.input["upstream"]["run_id"], run.id.as_str());
    assert!(
        h.runs("on_fail").is_empty(),
        "on: failure must not fire for a success"
    );
}

/// The actor caches the `after` index by upstream: a task saved with or
/// without `after`, or deleted, changes what the next run of the upstream
/// starts, with no run in between.
#[tokio::test(start_paused = true)]
async fn after_edges_follow_saves_and_deletes_at_once() {
    let h = Harness::start().await;
    h.put_task("name: up\nplugin: ok@1.0.0\n").await;
    h.put_task("name: down\ntrigger: { after: [up] }\nplugin: ok@1.0.0\n")
        .await;
    let starts = async |h: &Harness| {
        let run = h.trigger("up", serde_json::json!({})).await;
        h.wait_terminal(&run.id).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        (h.runs("down").len(), h.runs("other").len())
    };
    assert_eq!(starts(&h).await, (1, 0));
    h.put_task("name: down\nplugin: ok@1.0.0\n").await;
    assert_eq!(starts(&h).await, (1, 0), "down no longer waits for up");
    h.put_task("name: other\ntrigger: { after: [up] }\nplugin: ok@1.0.0\n")
        .await;
    h.put_task("name: down\ntrigger: { after: [up] }\nplugin: ok@1.0.0\n")
        .await;
    assert_eq!(starts(&h).await, (2, 1), "a new and a restored edge");
    h.scheduler.delete_task("t", "other").await.unwrap();
    assert_eq!(starts(&h).await, (3, 1), "a deleted task starts nothing");
}

#[tokio::test(start_paused = true)]
async fn a_one_success_join_runs_when_one_branch_failed() {
    let h = Harness::start().await;
    h.put_task(
        "name: j\nsteps:\n  - name: a\n    plugin: fatal@1.0.0\n  - name: b\n    plugin: ok@1.0.0\n  - name: join\n    needs: [a, b]\n    trigger_rule: one_success\n    plugin: ok@1.0.0\n",
    )
    .await;
    let run = h.trigger("j", serde_json::json!({})).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.steps[2].status, StepStatus::Succeeded);
    // The join started only after both branches ended.
    let ends = run.steps[..2]
        .iter()
        .map(|s| s.attempts[0].finished_at.unwrap())
        .max()
        .unwrap();
    assert!(run.steps[2].attempts[0].started_at >= ends);
    assert_eq!(
        run.status,
        RunStatus::Succeeded,
        "the failure was handled by the join"
    );
}
