//! The `ax` client commands against a real `ax serve` on a loopback port:
//! push a plugin, apply a task, trigger and wait, list, read logs; and the
//! errors a person sees.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::plugin_path;
use crate::crash::AxProcess;

fn ax(server: &AxProcess, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.args(args)
        .env("AX_URL", &server.url)
        .env_remove("AX_TOKEN");
    if let Some(token) = token {
        cmd.env("AX_TOKEN", token);
    }
    cmd.output().expect("running ax")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn push_apply_trigger_wait_and_read_back_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(dir.path());
    let token = Some(crate::crash::TOKEN);
    let hello = plugin_path("hello").display().to_string();
    let out = ax(
        &server,
        token,
        &[
            "plugin",
            "push",
            &hello,
            "--name",
            "hello",
            "--version",
            "1.0.0",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let fail = plugin_path("fail").display().to_string();
    assert!(
        ax(
            &server,
            token,
            &[
                "plugin",
                "push",
                &fail,
                "--name",
                "fail",
                "--version",
                "1.0.0"
            ]
        )
        .status
        .success()
    );

    let task = dir.path().join("greet.yaml");
    std::fs::write(
        &task,
        "name: greet\nplugin: hello@1.0.0\ninput: { name: \"${input.who}\" }\n",
    )
    .unwrap();
    let out = ax(
        &server,
        token,
        &["task", "apply", "-f", &task.display().to_string()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = ax(
        &server,
        token,
        &[
            "trigger",
            "greet",
            "--input",
            r#"{"who":"cli"}"#,
            "--wait",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["steps"][0]["output"]["greeting"], "hello, cli");
    let id = run["id"].as_str().unwrap();

    let out = ax(&server, token, &["runs", "--task", "greet"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains(id), "{}", text(&out.stdout));
    let out = ax(&server, token, &["logs", id]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("greeting cli"),
        "{}",
        text(&out.stdout)
    );

    // A run that fails: --wait exits 1.
    let failing = dir.path().join("flaky.yaml");
    std::fs::write(
        &failing,
        "name: flaky\nplugin: fail@1.0.0\ninput: { kind: fatal }\n",
    )
    .unwrap();
    assert!(
        ax(
            &server,
            token,
            &["task", "apply", "-f", &failing.display().to_string()]
        )
        .status
        .success()
    );
    let out = ax(&server, token, &["trigger", "flaky", "--wait"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));

    // No token: a clear error, exit 2.
    let out = ax(&server, None, &["runs"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unauthorized"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn cron_next_previews_locally_and_refuses_five_fields() {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args([
            "cron",
            "next",
            "0 30 1 * * ?",
            "--tz",
            "Asia/Shanghai",
            "-n",
            "2",
            "--from",
            "2026-12-01T00:00:00Z",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines = text(&out.stdout);
    assert!(lines.contains("2026-12-02 01:30:00 Wed +08:00"), "{lines}");
    assert!(lines.contains("2026-12-03 01:30:00 Thu +08:00"), "{lines}");

    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["cron", "next", "0 2 * * *"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("0 0 2 * * *"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_store_cache_out_of_range_refuses_to_start_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("ax.yaml");
    for bad in ["0", "65537"] {
        std::fs::write(
            &config,
            format!("listen: 127.0.0.1:0\nstore: {{ cache_mb: {bad} }}\n"),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .env("AX_ADMIN_TOKEN", "t")
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("store.cache_mb: {bad} is not in 1..=65536")),
            "{stderr}"
        );
        assert!(!data.exists(), "nothing is written");
    }
}
