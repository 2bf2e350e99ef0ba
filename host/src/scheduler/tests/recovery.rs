//! Restarts: a run stored ahead still waits for its instant, missed fires
//! follow the task's catch-up policy, and an attempt running at a crash is lost and run again.

use super::*;

/// A task firing every 10 s, stopped at 9.990 s (its 10 s run stored
/// ahead, not started), restarted with the clock at `ms` after `t0`.
async fn stored_ahead_then_restarted_at(ms: i64) -> Harness {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::start_with(store.clone(), test_config()).await;
    h.put_task("name: a\ntrigger: { every: 10s }\nplugin: ok@1.0.0\n")
        .await;
    tokio::time::sleep(Duration::from_millis(9_990)).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(1)).await;
    restart_at(store, t0() + chrono::Duration::milliseconds(ms)).await
}

#[tokio::test(start_paused = true)]
async fn a_run_stored_ahead_of_a_crash_still_waits_for_its_instant() {
    let h = stored_ahead_then_restarted_at(9_992).await;
    let runs = h.runs("a");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let done = h.wait_terminal(&runs[0].id).await;
    assert_eq!(done.started_at, Some(t0().timestamp_millis() + 10_000));
}

#[tokio::test(start_paused = true)]
async fn a_clock_stepped_back_past_the_lead_does_not_hold_runs_back() {
    // Restarted with the wall clock a second behind: the run is not held
    // for that second (only a run within the lead waits for its instant).
    let h = stored_ahead_then_restarted_at(9_000).await;
    let runs = h.runs("a");
    let done = h.wait_terminal(&runs[0].id).await;
    assert_eq!(done.started_at, Some(t0().timestamp_millis() + 9_000));
}

async fn downtime_fires(catch_up: &str) -> Vec<i64> {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::start_with(store.clone(), test_config()).await;
    h.put_task(&format!("name: c\ntrigger: {{ every: 5m }}\ncatch_up: {catch_up}\noverlap: allow\nplugin: ok@1.0.0\n")).await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Down for 32 minutes: the fires at 5, 10, … 30 minutes were missed
    // (the latest by 2 minutes, past the misfire grace).
    let h = restart_at(store, t0() + chrono::Duration::minutes(32)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut minutes: Vec<i64> = h
        .runs("c")
        .iter()
        .map(|r| (r.scheduled_for - t0().timestamp_millis()) / 60_000)
        .collect();
    minutes.sort();
    minutes
}

#[tokio::test(start_paused = true)]
async fn catch_up_latest_runs_only_the_most_recent_missed_fire() {
    assert_eq!(downtime_fires("latest").await, [30]);
}

#[tokio::test(start_paused = true)]
async fn catch_up_none_skips_every_missed_fire() {
    assert_eq!(downtime_fires("none").await, Vec::<i64>::new());
}

#[tokio::test(start_paused = true)]
async fn catch_up_all_runs_every_missed_fire() {
    assert_eq!(downtime_fires("all").await, [5, 10, 15, 20, 25, 30]);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_running_at_a_crash_is_lost_and_run_again() {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::start_with(store.clone(), test_config()).await;
    // `flip` blocks before the crash and succeeds after it.
    let flip = |digest: &str| PluginRecord {
        tenant: "t".into(),
        name: "flip".into(),
        version: "1.0.0".into(),
        digest: digest.into(),
        size: 1,
        created_at: 0,
        status: crate::model::PluginStatus::Ready,
        error: None,
    };
    store.put_plugin(&flip("block")).unwrap();
    h.put_task("name: l\nplugin: flip@1.0.0\n").await;
    let run = h.trigger("l", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store.get_run(&run.id).unwrap().unwrap().steps[0].status,
        StepStatus::Running
    );
    // "Crash": stop the actor without letting it settle anything, then swap the plugin.
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut rec = store.get_run(&run.id).unwrap().unwrap();
    if rec.steps[0].status != StepStatus::Running {
        // Shutdown may have recorded the cancellation; put back the crash picture.
        rec.steps[0].status = StepStatus::Running;
        rec.steps[0].attempts[0].outcome = None;
        rec.status = RunStatus::Running;
        rec.finished_at = None;
        store.update_run(&mut rec, &[]).unwrap();
    }
    store.put_plugin(&flip("ok")).unwrap();
    let h = restart_at(store.clone(), t0() + chrono::Duration::seconds(5)).await;
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    let outcomes: Vec<_> = run.steps[0].attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, [Some(Outcome::Lost), Some(Outcome::Succeeded)]);
    assert!(
        h.store
            .events(&run.id)
            .unwrap()
            .iter()
            .any(|e| e.actor == "recovery")
    );
}
