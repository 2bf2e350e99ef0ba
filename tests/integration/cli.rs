//! The real `ax` binary: `ax exec` output, JSON shape and exit codes.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::plugin_path;

fn ax(args: &[&str]) -> Output {
    let cache = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .env("AX_CACHE_DIR", cache.path())
        .output()
        .expect("running ax")
}

fn path(name: &str) -> String {
    plugin_path(name).display().to_string()
}

#[test]
fn exec_json_prints_the_report_and_exits_zero() {
    let out = ax(&[
        "exec",
        &path("hello"),
        "--input",
        r#"{"name":"ax"}"#,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"], "succeeded");
    assert_eq!(report["output"]["greeting"], "hello, ax");
    for field in [
        "error",
        "fuel_consumed",
        "memory_peak_bytes",
        "duration_ms",
        "stdout",
        "stderr",
        "logs",
    ] {
        assert!(report.get(field).is_some(), "missing {field}");
    }
    assert_eq!(report["logs"][0]["level"], "info");
}

#[test]
fn exec_human_output_names_the_outcome() {
    let out = ax(&["exec", &path("hello"), "--input", r#"{"name":"ax"}"#]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("outcome   succeeded\n"), "{text}");
    assert!(
        text.contains(r#"output    {"greeting":"hello, ax"}"#),
        "{text}"
    );
}

#[test]
fn exec_exits_one_for_a_plugin_that_did_not_succeed() {
    let out = ax(&["exec", &path("hostile_spin"), "--fuel", "1000000", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"], "fuel_exhausted");

    let out = ax(&[
        "exec",
        &path("hostile_sleep"),
        "--timeout",
        "200ms",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"], "timed_out");
}

#[test]
fn exec_refuses_bad_plugins_and_bad_input_with_exit_two() {
    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let out = ax(&["exec", &core.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a component"));

    let out = ax(&["exec", &path("hello"), "--input", "{not json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--input is not JSON"));

    let out = ax(&["exec", &path("hello"), "--timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a duration"));
}
