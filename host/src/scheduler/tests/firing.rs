//! Timed fires: a cron task fires once per instant, a run is stored ahead
//! and starts at its instant, and the overlap policies judge fires while a run is active.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_cron_task_fires_once_per_instant() {
    let h = Harness::start().await;
    h.put_task("name: tick\ntrigger: { cron: \"*/10 * * * * ?\" }\nplugin: ok@1.0.0\n")
        .await;
    tokio::time::sleep(Duration::from_millis(35_500)).await;
    let runs = h.runs("tick");
    let instants: Vec<_> = runs
        .iter()
        .map(|r| r.scheduled_for - t0().timestamp_millis())
        .collect();
    assert_eq!(instants, [10_000, 20_000, 30_000]);
    assert!(
        runs.iter()
            .all(|r| r.trigger == crate::model::TriggerKind::Cron)
    );
}

/// Each run's scheduled instant, in whole seconds after `t0`.
fn seconds_after_t0(runs: &[RunRecord]) -> Vec<i64> {
    runs.iter()
        .map(|r| (r.scheduled_for - t0().timestamp_millis()) / 1000)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn overlap_skip_drops_fires_while_a_run_is_active() {
    let h = Harness::start().await;
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: skip\nplugin: slow@1.0.0\ninput: { ms: 25000 }\n").await;
    tokio::time::sleep(Duration::from_millis(45_500)).await;
    let runs = h.runs("o");
    let instants = seconds_after_t0(&runs);
    // 10 s starts a 25 s run; 20 s and 30 s are skipped; 40 s starts the next.
    assert_eq!(instants, [10, 40]);
    assert_eq!(
        h.scheduler
            .stats()
            .overlap_skips
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn overlap_queue_one_keeps_one_run_waiting() {
    let h = Harness::start().await;
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: queue_one\nplugin: slow@1.0.0\ninput: { ms: 25000 }\n").await;
    tokio::time::sleep(Duration::from_millis(30_500)).await;
    let runs = h.runs("o");
    let instants = seconds_after_t0(&runs);
    // 10 s runs, 20 s waits, 30 s is skipped (one is already waiting).
    assert_eq!(instants, [10, 20]);
    assert_eq!(runs[1].status, RunStatus::Queued);
    let second = h.wait_terminal(&runs[1].id).await;
    // The waiting run starts when the first finishes (at 35 s).
    assert_eq!(second.started_at.unwrap() - t0().timestamp_millis(), 35_000);
}

#[tokio::test(start_paused = true)]
async fn overlap_allow_runs_side_by_side() {
    let h = Harness::start().await;
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: allow\nplugin: slow@1.0.0\ninput: { ms: 25000 }\n").await;
    tokio::time::sleep(Duration::from_millis(30_500)).await;
    assert_eq!(h.runs("o").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_run_is_stored_ahead_and_starts_at_its_instant() {
    let h = Harness::start().await;
    h.put_task("name: a\ntrigger: { every: 10s }\nplugin: ok@1.0.0\n")
        .await;
    // Within the lead before the 10 s instant: stored, not started.
    tokio::time::sleep(Duration::from_millis(9_990)).await;
    let runs = h.runs("a");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let instant = t0().timestamp_millis() + 10_000;
    assert_eq!(runs[0].scheduled_for, instant);
    assert!(runs[0].created_at <= instant - 10, "{:?}", runs[0]);
    assert_eq!(runs[0].status, RunStatus::Queued);
    assert!(h.runner.calls.lock().unwrap().is_empty());
    // Released at the instant itself.
    let done = h.wait_terminal(&runs[0].id).await;
    assert_eq!(done.started_at, Some(instant));
    assert_eq!(done.steps[0].attempts[0].started_at, instant);
    assert_eq!(h.runner.calls.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn overlap_is_judged_at_the_instant_when_a_run_is_active_ahead_of_it() {
    let h = Harness::start().await;
    // The 10 s run ends at 19.995 s: still active when the 20 s instant is
    // within the lead, over by the instant itself.
    h.put_task("name: o\ntrigger: { every: 10s }\noverlap: skip\nplugin: slow@1.0.0\ninput: { ms: 9995 }\n").await;
    tokio::time::sleep(Duration::from_millis(20_500)).await;
    let runs = h.runs("o");
    let instants = seconds_after_t0(&runs);
    assert_eq!(instants, [10, 20], "{runs:?}");
    assert_eq!(runs[1].started_at, Some(t0().timestamp_millis() + 20_000));
}
