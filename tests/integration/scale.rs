//! `ax bench scale` with small counts, as CI runs it: the real binary starts
//! a real `ax serve` child, loads tasks and a held queue over HTTP, kills it
//! with SIGKILL, restarts it, and measures; the table's figures must be sane
//! and no queued run may be lost across the restart.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_scale_loads_restarts_and_loses_nothing() {
    scale_with(&[]);
}

/// The same through the bulk routes, with a last request that is not full.
#[test]
fn bench_scale_with_bulk_requests_loads_the_same() {
    scale_with(&["--batch", "60"]);
}

fn scale_with(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args([
            "bench",
            "scale",
            "--tasks",
            "200",
            "--queued",
            "200",
            "--every-second",
            "10",
            "--seconds",
            "3",
            "--cache-mb",
            "16",
            "--json",
        ])
        .args(extra)
        .arg("--dir")
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let stats: Value = serde_json::from_str(&stdout).expect("--json prints one object");
    let num = |k: &str| {
        stats[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} missing: {stats}"))
    };
    assert_eq!(num("tasks"), 200.0);
    assert_eq!(num("applied"), 190.0, "the every-second tasks come later");
    assert_eq!(num("triggered"), 200.0, "every trigger was accepted");
    assert_eq!(num("cache_mb"), 16.0);
    for k in [
        "apply_per_sec",
        "trigger_per_sec",
        "trigger_p50_ms",
        "store_after_tasks",
        "store_after_queue",
        "restart_ready_secs",
        "restart_serving_secs",
        "lateness_samples",
    ] {
        assert!(num(k) > 0.0, "{k}: {stats}");
    }
    for phase in ["idle", "after_tasks", "after_queue", "after_restart"] {
        let rss = stats[phase]["rss"].as_f64().unwrap();
        let peak = stats[phase]["peak"].as_f64().unwrap();
        assert!(rss > 1e6 && peak >= rss, "{phase}: {stats}");
    }
    assert!(
        num("store_after_queue") >= num("store_after_tasks"),
        "{stats}"
    );
    assert!(
        num("restart_serving_secs") >= num("restart_ready_secs"),
        "{stats}"
    );
    // None lost: every accepted run is still queued, or ended if it got
    // through before its tenant's fuel ran out.
    assert_eq!(num("lost"), 0.0, "{stats}");
    assert_eq!(num("still_queued") + num("finished"), 200.0, "{stats}");
    assert!(num("finished") <= 2.0, "the held tenant held: {stats}");
    // 10 tasks each firing every second over 3 s.
    assert!((20.0..=40.0).contains(&num("lateness_samples")), "{stats}");
    assert!(num("lateness_p99_ms") >= num("lateness_p50_ms"), "{stats}");
    // The scratch directory is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
