//! One test per sandbox limit and per hostile plugin, asserting the exact
//! outcome, and a noisy-neighbour test.

use std::time::{Duration, Instant};

use ax::model::{ErrorKind, Limits, Outcome};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::{RUNTIME, context, limits, load, run};

#[tokio::test]
async fn echo_returns_its_input_and_sees_the_context() {
    let report = run("echo", r#"{"n": 7}"#, &limits(5_000)).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    let output = report.output.expect("output");
    assert_eq!(output["input"], json!({"n": 7}));
    assert_eq!(output["context"]["tenant"], "acme");
    assert_eq!(output["context"]["step"], "echo");
    assert_eq!(output["context"]["trigger"], "cron");
    assert_eq!(output["context"]["scheduled_for"], "2026-12-01T01:30:00Z");
    assert!(report.fuel_consumed > 0);
    assert!(report.memory_peak_bytes > 0);
    assert!(report.error.is_none());
}

#[tokio::test]
async fn example_plugins_log_and_report_progress() {
    let report = run(
        "extract-orders".replace('-', "_").as_str(),
        r#"{"date": "2026-11-29", "rows": 900000}"#,
        &limits(5_000),
    )
    .await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!(report.output.as_ref().unwrap()["rows"], 900000);
    assert_eq!(report.progress.as_ref().map(|p| p.percent), Some(100));
    let record = &report.logs[0];
    assert_eq!(record.message, "extracted orders");
    assert!(
        record
            .fields
            .contains(&("rows".to_string(), "900000".to_string()))
    );

    let report = run("notify", r#"{"text": "report ready"}"#, &limits(5_000)).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!(report.stdout, "[#acme] report ready\n");
}

#[tokio::test]
async fn bad_input_is_a_fatal_failure() {
    let report = run("extract_orders", r#"{"date": "yesterday"}"#, &limits(5_000)).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.error_kind, Some(ErrorKind::Fatal));
    assert!(report.error.unwrap().contains("not yyyy-MM-dd"));

    let report = run("hello", r#"{"nom": "x"}"#, &limits(5_000)).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.error_kind, Some(ErrorKind::Fatal));
    assert!(report.error.unwrap().contains("missing field `name`"));
}

#[tokio::test]
async fn plugin_errors_keep_their_kind() {
    let report = run("fail", r#"{"message": "warehouse busy"}"#, &limits(5_000)).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.error_kind, Some(ErrorKind::Retryable));
    assert_eq!(report.error.as_deref(), Some("warehouse busy"));

    let report = run("fail", r#"{"kind": "fatal"}"#, &limits(5_000)).await;
    assert_eq!(report.error_kind, Some(ErrorKind::Fatal));
}

#[tokio::test]
async fn infinite_loop_runs_out_of_fuel() {
    let limits = Limits {
        fuel: 5_000_000,
        ..limits(30_000)
    };
    let report = run("hostile_spin", "{}", &limits).await;
    assert_eq!(report.outcome, Outcome::FuelExhausted, "{report:?}");
    assert_eq!(report.fuel_consumed, 5_000_000);
    assert!(report.error.unwrap().contains("fuel exhausted"));
}

#[tokio::test]
async fn infinite_loop_with_ample_fuel_times_out() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        ..limits(200)
    };
    let report = run("hostile_spin", "{}", &limits).await;
    assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
    assert!(report.duration_ms >= 200.0);
    // Stopped by the epoch deadline, not left running: it burned fuel only
    // until the deadline (about 2e9/s here; the bound is loose for slow machines).
    assert!(
        report.fuel_consumed < 40_000_000_000,
        "{}",
        report.fuel_consumed
    );
}

#[tokio::test]
async fn memory_bomb_is_memory_exceeded_not_a_panic() {
    let limits = Limits {
        memory_bytes: 32 << 20,
        ..limits(10_000)
    };
    let report = run("hostile_membomb", "{}", &limits).await;
    assert_eq!(report.outcome, Outcome::MemoryExceeded, "{report:?}");
    assert!(report.memory_peak_bytes <= 32 << 20);
    assert!(report.memory_peak_bytes > 16 << 20);
    assert!(
        report
            .error
            .unwrap()
            .contains("memory limit of 33554432 bytes")
    );
}

#[tokio::test]
async fn deep_recursion_traps_with_stack_overflow() {
    let report = run("hostile_recursion", "{}", &limits(10_000)).await;
    assert_eq!(report.outcome, Outcome::Trapped, "{report:?}");
    assert!(report.error.unwrap().contains("stack overflow"));
}

#[tokio::test]
async fn panic_traps_and_reports_the_panic_message() {
    let report = run("hostile_panic", "{}", &limits(10_000)).await;
    assert_eq!(report.outcome, Outcome::Trapped, "{report:?}");
    let error = report.error.unwrap();
    assert!(error.contains("unreachable"), "{error}");
    assert!(
        error.contains("deliberate panic from the panic plugin"),
        "{error}"
    );
}

#[tokio::test]
async fn output_flood_is_captured_up_to_the_cap_with_a_marker() {
    let report = run("hostile_flood", r#"{"mib": 4}"#, &limits(30_000)).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    let cap = Limits::default().max_stdio_bytes;
    for text in [&report.stdout, &report.stderr] {
        assert!(text.len() < cap + 100, "{}", text.len());
        assert!(
            text.ends_with("more bytes dropped]"),
            "{}",
            &text[text.len() - 80..]
        );
    }
    let last = report.logs.last().unwrap();
    assert!(last.message.contains("more records dropped"), "{last:?}");
    let kept: usize = report.logs.iter().map(|l| l.message.len()).sum();
    assert!(kept < Limits::default().max_log_bytes + 200);
}

#[tokio::test]
async fn huge_output_is_output_too_large() {
    let report = run("hostile_huge_output", r#"{"mib": 4}"#, &limits(10_000)).await;
    assert_eq!(report.outcome, Outcome::OutputTooLarge, "{report:?}");
    assert!(report.output.is_none());
    assert!(
        report
            .error
            .unwrap()
            .contains("above the limit of 1048576 bytes")
    );
}

#[tokio::test]
async fn blocking_sleep_is_stopped_by_the_outer_timeout() {
    let started = Instant::now();
    let report = run("hostile_sleep", "{}", &limits(300)).await;
    assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
    // The plugin asked for an hour; the attempt ended at its 300 ms budget.
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[tokio::test]
async fn escape_attempts_are_all_refused() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("escaped");
    let input = json!({ "write_path": marker.display().to_string() }).to_string();
    let report = run("hostile_escape", &input, &limits(10_000)).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    let out = report.output.unwrap();
    for probe in [
        "read_passwd",
        "list_root",
        "write_file",
        "tcp_connect",
        "resolve",
    ] {
        assert_eq!(
            out[probe]["ok"], false,
            "{probe} was allowed: {}",
            out[probe]
        );
    }
    assert_eq!(out["env"], json!([]), "environment leaked");
    assert_eq!(out["args"], json!([]), "arguments leaked");
    assert!(!marker.exists(), "the plugin wrote a host file");
}

#[tokio::test]
async fn cancel_stops_a_running_attempt() {
    let plugin = load("hostile_spin");
    let cancel = CancellationToken::new();
    let limits = Limits {
        fuel: u64::MAX / 2,
        ..limits(30_000)
    };
    let ctx = context("spin");
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(SPIN_MS)).await;
            cancel.cancel();
        })
    };
    let report = RUNTIME
        .run(&plugin, &ctx, "{}", &limits, Some(&cancel))
        .await
        .unwrap();
    canceller.await.unwrap();
    assert_eq!(report.outcome, Outcome::Cancelled, "{report:?}");
    // The call future was dropped at a yield: the fuel it burned until then
    // is still read from the store (was the ~2,000 of the call's set-up only).
    assert!(
        report.fuel_consumed >= MIN_FUEL_BURNED,
        "a cancelled spin reported {} fuel after {:.0} ms",
        report.fuel_consumed,
        report.duration_ms
    );
}

/// Fuel a guest spinning for [`SPIN_MS`] surely burns: ~2e9 units/s on one
/// free core, so this holds with a tenth of a core on a loaded machine.
const MIN_FUEL_BURNED: u64 = 100_000_000;
/// How long the fuel-accounting tests let a guest spin.
const SPIN_MS: u64 = 500;

/// A spin stopped by its deadline (the epoch interrupt) is charged what it
/// burned, not what it had used before its loop (probe: 2,190 for any timeout).
#[tokio::test]
async fn a_timed_out_spin_reports_the_fuel_it_burned() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        ..limits(SPIN_MS)
    };
    let report = run("hostile_spin", "{}", &limits).await;
    assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
    assert!(
        report.fuel_consumed >= MIN_FUEL_BURNED,
        "a {SPIN_MS} ms spin reported {} fuel",
        report.fuel_consumed
    );
    // And not more than it could have: 1e11 units/s is 10-50x this
    // machine's rate (measured 2e9-1e10), far below the u64::MAX / 2 given.
    let ceiling = (report.duration_ms * 1e8) as u64;
    assert!(report.fuel_consumed <= ceiling, "{}", report.fuel_consumed);
}

/// Hostile plugins next to benign ones: the benign ones succeed within their
/// own timeouts while spinners, a memory bomb, a flood and a sleeper run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benign_plugins_succeed_beside_hostile_ones() {
    let mut hostile = tokio::task::JoinSet::new();
    let spin = Limits {
        fuel: u64::MAX / 2,
        ..limits(3_000)
    };
    for (name, input, limits) in [
        ("hostile_spin", "{}", spin.clone()),
        ("hostile_spin", "{}", spin),
        (
            "hostile_membomb",
            "{}",
            Limits {
                memory_bytes: 64 << 20,
                ..limits(3_000)
            },
        ),
        ("hostile_flood", r#"{"mib": 100000}"#, limits(3_000)),
        ("hostile_sleep", "{}", limits(3_000)),
        ("hostile_recursion", "{}", limits(3_000)),
    ] {
        hostile.spawn(async move { (name, run(name, input, &limits).await) });
    }
    // Give the hostile ones a head start so they are all running.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut benign = tokio::task::JoinSet::new();
    for i in 0..20 {
        benign.spawn(async move {
            let input = json!({ "i": i }).to_string();
            run("echo", &input, &limits(1_000)).await
        });
    }
    while let Some(report) = benign.join_next().await {
        let report = report.unwrap();
        assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
        assert!(report.duration_ms < 1_000.0);
    }
    while let Some(res) = hostile.join_next().await {
        let (name, report) = res.unwrap();
        assert_ne!(
            report.outcome,
            Outcome::Succeeded,
            "{name} should have been stopped"
        );
    }
}
