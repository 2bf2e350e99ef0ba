//! The fire window: only tasks due within `window.ahead_ms` are held in
//! memory, at most `window.max_armed`; the rest wait in the store's
//! next-fire index and still fire on time, once per instant, through edits,
//! pauses, deletions, restarts and clock steps.

use super::*;
use crate::scheduler::FireWindow;

fn windowed(ahead_ms: i64, max_armed: usize, task_cache: usize) -> SchedulerConfig {
    SchedulerConfig {
        window: FireWindow {
            ahead_ms,
            refill_ms: 1_000,
            max_armed,
        },
        task_cache,
        ..test_config()
    }
}

async fn snapshot(h: &Harness) -> Snapshot {
    h.scheduler.snapshot().await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn tasks_beyond_the_window_are_not_held_and_still_fire_on_time() {
    let h = Harness::start_with(Arc::new(MemoryStore::new()), windowed(10_000, 1_000, 1_000)).await;
    for n in 0..20 {
        h.put_task(&format!(
            "name: w{n}\ntrigger: {{ every: 30s }}\nplugin: ok@1.0.0\n"
        ))
        .await;
    }
    assert_eq!(
        snapshot(&h).await.armed_tasks,
        0,
        "30 s away, beyond a 10 s window"
    );
    tokio::time::sleep(Duration::from_millis(25_000)).await;
    assert_eq!(snapshot(&h).await.armed_tasks, 20, "within the window now");
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    assert_eq!(
        snapshot(&h).await.armed_tasks,
        0,
        "fired; the next instant (60 s) is beyond the window again"
    );
    tokio::time::sleep(Duration::from_millis(30_000)).await;
    for n in 0..20 {
        let runs = h.runs(&format!("w{n}"));
        let instants: Vec<_> = runs
            .iter()
            .map(|r| r.scheduled_for - t0().timestamp_millis())
            .collect();
        assert_eq!(instants, [30_000, 60_000], "w{n}");
        for run in &runs {
            let run = h.wait_terminal(&run.id).await;
            assert_eq!(
                run.started_at,
                Some(run.scheduled_for),
                "started at its instant"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_working_set_stays_bounded_while_tasks_grow() {
    // Several tasks share some instants (16 of them fire at 120 s, the
    // largest group before 150 s), and an instant is never split: a bound
    // above that keeps the window's own cap in view.
    let (max_armed, cache) = (20, 10);
    let h = Harness::start_with(
        Arc::new(MemoryStore::new()),
        windowed(60_000, max_armed, cache),
    )
    .await;
    // 120 tasks, task n every (n + 1) s: 120 distinct instants in the first
    // two minutes, most of them within a 60 s window.
    let count = 120;
    for n in 0..count {
        h.put_task(&format!(
            "name: g{n}\ntrigger: {{ every: {}s }}\nplugin: ok@1.0.0\n",
            n + 1
        ))
        .await;
        let s = snapshot(&h).await;
        assert!(
            s.armed_tasks <= max_armed,
            "after {n} puts: {}",
            s.armed_tasks
        );
        assert!(
            s.cached_tasks <= cache,
            "after {n} puts: {}",
            s.cached_tasks
        );
    }
    let mut most = 0;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let s = snapshot(&h).await;
        assert!(s.armed_tasks <= max_armed, "armed {}", s.armed_tasks);
        assert!(s.cached_tasks <= cache, "cached {}", s.cached_tasks);
        // One fire timer per armed task, plus releases and the refill.
        assert!(s.timers <= max_armed + 40, "timers {}", s.timers);
        most = most.max(s.armed_tasks);
    }
    assert!(most > 0, "the window held some tasks");
    // 150 s in: every task fired at each of its instants, once.
    for n in 0..count {
        let every = (n + 1) as i64 * 1000;
        let runs = h.runs(&format!("g{n}"));
        let instants: Vec<_> = runs
            .iter()
            .map(|r| r.scheduled_for - t0().timestamp_millis())
            .collect();
        let expected: Vec<i64> = (1..)
            .map(|k| k * every)
            .take_while(|&at| at <= 150_000)
            .collect();
        assert_eq!(instants, expected, "g{n}");
    }
}

#[tokio::test(start_paused = true)]
async fn edits_pauses_and_deletes_inside_and_outside_the_window() {
    let h = Harness::start_with(Arc::new(MemoryStore::new()), windowed(10_000, 1_000, 1_000)).await;
    let task = |name: &str, every: &str| {
        format!("name: {name}\ntrigger: {{ every: {every} }}\nplugin: ok@1.0.0\n")
    };
    h.put_task(&task("inside", "5s")).await;
    h.put_task(&task("outside", "40s")).await;
    h.put_task(&task("paused", "5s")).await;
    h.put_task(&task("gone", "5s")).await;
    h.put_task(&task("gone_later", "40s")).await;
    assert_eq!(snapshot(&h).await.armed_tasks, 3);
    h.scheduler.set_paused("t", "paused", true).await.unwrap();
    assert!(h.scheduler.delete_task("t", "gone").await.unwrap());
    // An edit moves a task out of the window, another one into it.
    h.put_task(&task("inside", "30s")).await;
    h.put_task(&task("outside", "3s")).await;
    assert_eq!(
        snapshot(&h).await.armed_tasks,
        1,
        "only `outside` (now every 3 s)"
    );
    tokio::time::sleep(Duration::from_millis(20_000)).await;
    // Deleted while outside the window: never fires.
    assert!(h.scheduler.delete_task("t", "gone_later").await.unwrap());
    tokio::time::sleep(Duration::from_millis(25_500)).await;
    let secs = |name: &str| -> Vec<i64> {
        h.runs(name)
            .iter()
            .map(|r| (r.scheduled_for - t0().timestamp_millis()) / 1000)
            .collect()
    };
    assert_eq!(secs("inside"), [30]);
    assert_eq!(secs("outside"), (1..=15).map(|k| 3 * k).collect::<Vec<_>>());
    assert!(secs("paused").is_empty());
    assert!(secs("gone").is_empty());
    assert!(secs("gone_later").is_empty());
    // Resumed outside the window: it comes back when the window reaches it.
    h.scheduler.set_paused("t", "paused", false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    assert!(!secs("paused").is_empty(), "resumed and fired");
}

#[tokio::test(start_paused = true)]
async fn a_restart_reads_only_the_window_and_loses_no_fire() {
    let store = Arc::new(MemoryStore::new());
    {
        let h = Harness::start_with(store.clone(), windowed(10_000, 1_000, 1_000)).await;
        for n in 0..10 {
            h.put_task(&format!(
                "name: far{n}\ntrigger: {{ every: 120s }}\nplugin: ok@1.0.0\n"
            ))
            .await;
        }
        h.put_task("name: near\ntrigger: { every: 2s }\nplugin: ok@1.0.0\n")
            .await;
        tokio::time::sleep(Duration::from_millis(5_500)).await;
        h.shutdown.cancel();
    }
    let at = t0() + chrono::Duration::milliseconds(5_600);
    let clock = Arc::new(TokioClock::starting_at(at));
    let h = Harness::start_at(
        store,
        Arc::new(FakeRunner::default()),
        clock,
        windowed(10_000, 1_000, 1_000),
    )
    .await;
    let s = snapshot(&h).await;
    assert_eq!(s.armed_tasks, 1, "only `near` is due within 10 s");
    assert!(
        s.cached_tasks <= 1,
        "no definition read but the armed one's"
    );
    tokio::time::sleep(Duration::from_millis(120_000)).await;
    for n in 0..10 {
        assert_eq!(
            h.runs(&format!("far{n}")).len(),
            1,
            "far{n} fired at 120 s, once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_clock_stepping_forward_and_back_across_the_window_fires_each_instant_once() {
    let h = Harness::start_with(Arc::new(MemoryStore::new()), windowed(10_000, 1_000, 1_000)).await;
    h.put_task(
        "name: c\ntrigger: { every: 30s }\ncatch_up: all\noverlap: allow\nplugin: ok@1.0.0\n",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // Forward by 95 s, far past the window: the missed instants are caught up.
    h.clock.shift(Duration::from_secs(95), true);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let secs = |h: &Harness| -> Vec<i64> {
        h.runs("c")
            .iter()
            .map(|r| (r.scheduled_for - t0().timestamp_millis()) / 1000)
            .collect()
    };
    assert_eq!(secs(&h), [30, 60, 90]);
    // Back by 60 s: the instants already fired do not fire again.
    h.clock.shift(Duration::from_secs(60), false);
    tokio::time::sleep(Duration::from_millis(40_000)).await;
    assert_eq!(secs(&h), [30, 60, 90]);
    tokio::time::sleep(Duration::from_millis(45_000)).await;
    assert_eq!(secs(&h), [30, 60, 90, 120]);
}
