//! The retention sweep walks the runs a page at a time: a task whose runs
//! span pages keeps exactly its newest `keep_runs`, the others keep theirs,
//! and active runs are never chosen.

use super::*;
use crate::scheduler::retention::{RetentionConfig, SWEEP_PAGE, sweep};

#[tokio::test(start_paused = true)]
async fn a_sweep_over_many_pages_keeps_each_tasks_newest_runs() {
    let h = Harness::start().await;
    let now = h.clock.now();
    for yaml in [
        "name: big\nplugin: ok@1.0.0\nretention: { keep_runs: 10 }\n",
        "name: small\nplugin: ok@1.0.0\n",
    ] {
        h.scheduler
            .put_task(task_record("t", yaml, now))
            .await
            .unwrap();
    }
    let template = h.trigger("big", serde_json::json!({})).await;
    let template = h.wait_terminal(&template.id).await;
    // Stored directly: more finished runs of `big` than one page holds,
    // three of `small`, and one of `big` still queued.
    let big = SWEEP_PAGE + 900;
    let mut id = 0u32;
    let mut put = |task: &str, status: RunStatus| {
        id += 1;
        let mut run = template.clone();
        run.id = format!(
            "r{:012x}{id:08x}",
            now.timestamp_millis() - 1_000_000 + i64::from(id)
        )
        .into();
        run.task = task.into();
        run.status = status;
        run.idempotency_key = None;
        h.store.insert_run(&run, false, None, &[]).unwrap();
        run.id
    };
    let bigs: Vec<RunId> = (0..big).map(|_| put("big", RunStatus::Succeeded)).collect();
    let smalls: Vec<RunId> = (0..3).map(|_| put("small", RunStatus::Failed)).collect();
    let queued = put("big", RunStatus::Queued);
    let store: Arc<dyn Store> = h.store.clone();
    let clock: Arc<dyn Clock> = h.clock.clone();
    let report = sweep(&store, &h.scheduler, &clock, &RetentionConfig::default())
        .await
        .unwrap();
    // The template run is the newest finished run of `big`.
    assert_eq!(report.scanned, big + 3 + 2, "{report:?}");
    assert_eq!(report.deleted, (big + 1 - 10) as u64, "{report:?}");
    let left = |task: &str| -> Vec<RunId> {
        let mut ids: Vec<RunId> = h
            .store
            .run_summaries()
            .unwrap()
            .into_iter()
            .filter(|r| r.task == task)
            .map(|r| r.id)
            .collect();
        ids.sort();
        ids
    };
    let mut want: Vec<RunId> = bigs[big - 9..].to_vec();
    want.push(queued);
    want.push(template.id.clone());
    want.sort();
    assert_eq!(left("big"), want);
    let mut smalls = smalls;
    smalls.sort();
    assert_eq!(left("small"), smalls);
}
