//! The CLI's operator helpers against a real `ax serve`: `ax status` after
//! known work, tables cut to `COLUMNS`, and shell completions.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::plugin_path;
use crate::crash::{AxProcess, TOKEN};

fn ax(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.args(args)
        .env("AX_URL", url)
        .env("AX_TOKEN", TOKEN)
        .env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running ax")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Two plugins and three tasks: `greet` (succeeds), `flaky` (two retryable
/// failures, then a dead letter), `tick` (hourly, so it has a next fire).
fn fixture(url: &str, dir: &std::path::Path) {
    for (plugin, name) in [("hello", "hello"), ("fail", "fail")] {
        let path = plugin_path(plugin).display().to_string();
        ok(&ax(
            url,
            &[
                "plugin",
                "push",
                &path,
                "--name",
                name,
                "--version",
                "1.0.0",
            ],
            &[],
        ));
    }
    let tasks = [
        (
            "greet",
            "name: greet\nplugin: hello@1.0.0\ninput: { name: status }\n",
        ),
        (
            "flaky",
            "name: flaky\nplugin: fail@1.0.0\nretry: { max_attempts: 2, backoff: [100ms] }\n",
        ),
        (
            "tick",
            "name: tick\ntrigger: { every: 1h }\nplugin: hello@1.0.0\ninput: { name: tick }\n",
        ),
    ];
    for (name, text) in tasks {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, text).unwrap();
        ok(&ax(
            url,
            &["task", "apply", "-f", &file.display().to_string()],
            &[],
        ));
    }
}

#[test]
fn status_summarises_health_backlog_success_and_next_fires() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.clone();
    let url = url.as_str();
    fixture(url, dir.path());
    for _ in 0..2 {
        ok(&ax(url, &["trigger", "greet", "--wait"], &[]));
    }
    let out = ax(
        url,
        &["trigger", "flaky", "--wait", "--timeout", "30s"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    let s: Value = serde_json::from_str(&ok(&ax(url, &["status", "--json"], &[]))).unwrap();
    assert_eq!(s["healthy"], true);
    assert_eq!(s["ready"], true);
    assert_eq!(s["queued"], 0);
    assert_eq!(s["running"], 0);
    assert_eq!(s["recent"]["runs"], 3);
    assert_eq!(s["recent"]["succeeded"], 2);
    assert_eq!(s["recent"]["failed"], 1);
    let rate = s["recent"]["success_rate"].as_f64().unwrap();
    assert!((rate - 2.0 / 3.0).abs() < 1e-9, "{rate}");
    assert_eq!(s["dead_letters_open"], 1);
    assert_eq!(s["tasks"], 3);
    assert_eq!(s["next_fires"].as_array().unwrap().len(), 1);
    assert_eq!(s["next_fires"][0]["task"], "tick");

    let human = ok(&ax(url, &["status"], &[]));
    assert!(human.contains("healthy, ready"), "{human}");
    assert!(
        human.contains("66.7% of the last 3 finished runs (1 failed)"),
        "{human}"
    );
    assert!(human.contains("1 open dead letters"), "{human}");
    assert!(human.lines().any(|l| l.starts_with("tick ")), "{human}");

    // Nobody listening: a connection error, exit 2.
    drop(server);
    let out = ax(url, &["status"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("error: connection: "),
        "{out:?}"
    );
}

#[test]
fn tables_fit_columns_and_every_client_command_speaks_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    fixture(url, dir.path());
    let out = ax(
        url,
        &["trigger", "flaky", "--wait", "--timeout", "30s"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // The dead letter's error makes a wide row; 80 columns cut it with an ellipsis.
    let wide = ok(&ax(url, &["dead-letters"], &[]));
    assert!(wide.lines().any(|l| l.chars().count() > 80), "{wide}");
    let cut = ok(&ax(url, &["dead-letters"], &[("COLUMNS", "80")]));
    assert!(cut.lines().all(|l| l.chars().count() <= 80), "{cut}");
    assert!(cut.contains('…'), "{cut}");

    // `--json` on the listing commands prints the server's JSON.
    for args in [
        &["plugin", "list", "--json"][..],
        &["task", "list", "--json"],
        &["runs", "--json"],
        &["dead-letters", "--json"],
        &["task", "next", "tick", "--json"],
        &["status", "--json"],
    ] {
        let text = ok(&ax(url, args, &[]));
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"));
    }
}

#[test]
fn completions_cover_the_commands_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_ax()"),
        ("zsh", "#compdef ax"),
        ("fish", "complete -c ax"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(["completions", shell])
            .output()
            .unwrap();
        let script = ok(&out);
        assert!(script.contains(marker), "{shell}: no `{marker}`");
        for command in ["trigger", "status", "dead-letters", "completions"] {
            assert!(script.contains(command), "{shell}: `{command}` missing");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'tcsh'"));
}
