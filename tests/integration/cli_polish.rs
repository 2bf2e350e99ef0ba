//! The CLI's operator helpers against a real `ax serve`: `ax status` after
//! known work, tables cut to `COLUMNS`, and shell completions.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{ok, plugin_path};
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
    assert_eq!(s["store"]["kind"], "sled", "{s}");
    assert!(s["store"]["pool"].is_null(), "{s}");
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
    assert_eq!(s["fuel_window"]["tenant"], "default");
    assert!(s["fuel_window"]["fuel_budget"].is_null(), "{s}");
    assert!(s["fuel_window"]["held"].is_null(), "{s}");

    let human = ok(&ax(url, &["status"], &[]));
    assert!(human.contains("healthy, ready"), "{human}");
    assert!(
        human
            .lines()
            .any(|l| l.split_whitespace().eq(["store", "sled"])),
        "{human}"
    );
    assert!(
        human.contains("66.7% of the last 3 finished runs (1 failed)"),
        "{human}"
    );
    assert!(human.contains("1 open dead letters"), "{human}");
    assert!(human.lines().any(|l| l.starts_with("tick ")), "{human}");
    assert!(
        human.contains("(no budget) used by tenant default until "),
        "{human}"
    );

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

/// The exit code and stderr of a failed command.
fn err(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

fn apply(url: &str, dir: &std::path::Path, name: &str, text: &str) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, text).unwrap();
    ok(&ax(
        url,
        &["task", "apply", "-f", &file.display().to_string()],
        &[],
    ));
}

/// `slow`: `zeta` fails twice (1 s apart) then succeeds, then `alpha`
/// greets; `pipeline`: `totals` dead after three attempts, its dependants
/// cancelled.
const SLOW: &str = "name: slow\nsteps:\n  - name: zeta\n    plugin: fail@1.0.0\n    input: { succeed_on_attempt: 3 }\n    retry: { max_attempts: 3, backoff: [1s] }\n  - name: alpha\n    needs: [zeta]\n    plugin: hello@1.0.0\n    input: { name: after }\n";
const PIPELINE: &str = "name: pipeline\nsteps:\n  - name: extract\n    plugin: hello@1.0.0\n    input: { name: rows }\n  - name: totals\n    needs: [extract]\n    plugin: fail@1.0.0\n    input: { message: totals cannot add up }\n    retry: { max_attempts: 3, backoff: [50ms] }\n  - name: small_day\n    needs: [totals]\n    plugin: hello@1.0.0\n";

fn run_id(out: &Output) -> String {
    let v: Value = serde_json::from_str(&ok(out)).unwrap();
    v["id"].as_str().unwrap().to_string()
}

#[test]
fn a_closed_stdout_ends_every_command_quietly_with_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    fixture(url, dir.path());
    let out = ax(url, &["trigger", "flaky", "--wait", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = run["id"].as_str().unwrap();
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["dead-letters"],
        &["dead-letters", "--json"],
        &["run", "show", id],
        &["logs", id],
        &["task", "list"],
        &["completions", "bash"],
    ] {
        // The reading end is closed before ax starts: its first write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(args)
            .env("AX_URL", url)
            .env("AX_TOKEN", TOKEN)
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_failed_run_names_its_root_cause_and_run_show_lists_every_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    fixture(url, dir.path());
    apply(url, dir.path(), "pipeline", PIPELINE);
    let out = ax(
        url,
        &["trigger", "pipeline", "--wait", "--timeout", "60s"],
        &[],
    );
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        shown.contains("reason    step `totals` dead after 3 attempts"),
        "{shown}"
    );
    // Every attempt with its error, in the ATTEMPTS table.
    let attempts: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("STEP  ") || !l.contains("ERROR"))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.contains(" output: ") && !l.contains(" error: "))
        .collect();
    assert_eq!(attempts.len(), 4, "{shown}");
    assert!(attempts[0].starts_with("extract "), "{shown}");
    for (n, line) in attempts[1..].iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words[..3],
            ["totals", &(n + 1).to_string(), "failed"],
            "{line}"
        );
        assert!(line.contains("totals cannot add up"), "{line}");
    }
}

#[test]
fn logs_come_in_step_order_and_follow_a_running_run_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    fixture(url, dir.path());
    apply(url, dir.path(), "slow", SLOW);
    let id = run_id(&ax(url, &["trigger", "slow", "--json"], &[]));
    // Started at once: the run has two seconds of backoff ahead of it.
    let followed = ok(&ax(url, &["logs", &id, "-f"], &[]));
    let headers: Vec<&str> = followed.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(
        headers,
        // zeta's third attempt succeeds without a word: no log entry.
        [
            "== step zeta attempt 1 ==",
            "== step zeta attempt 2 ==",
            "== step alpha attempt 1 ==",
            &format!("== run {id} succeeded =="),
        ],
        "{followed}"
    );
    // `zeta` is the first step though `alpha` sorts first.
    let logs = ok(&ax(url, &["logs", &id], &[]));
    let headers: Vec<&str> = logs.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(
        headers,
        followed
            .lines()
            .filter(|l| l.starts_with("== step"))
            .collect::<Vec<_>>()
    );
    let v: Value = serde_json::from_str(&ok(&ax(url, &["logs", &id, "--json"], &[]))).unwrap();
    assert_eq!(v["attempts"][0]["step"], "zeta", "{v}");
    assert_eq!(v["attempts"][2]["step"], "alpha", "{v}");
}

#[test]
fn wait_timeout_exits_124_and_an_unknown_task_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    fixture(url, dir.path());
    apply(url, dir.path(), "slow", SLOW);
    let out = ax(
        url,
        &["trigger", "slow", "--wait", "--timeout", "200ms"],
        &[],
    );
    let stderr = err(&out, 124);
    assert!(stderr.starts_with("error: timeout: run "), "{stderr}");
    assert!(stderr.contains("it goes on"), "{stderr}");
    let help = ok(&ax(url, &["trigger", "--help"], &[]));
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("124 if --timeout passed first"), "{help}");

    let stderr = err(&ax(url, &["runs", "--task", "nope"], &[]), 2);
    assert!(stderr.contains("no task `nope`"), "{stderr}");
    // A known task without runs is an empty listing.
    let none = ok(&ax(url, &["runs", "--task", "tick", "--json"], &[]));
    assert!(none.contains("\"runs\": []"), "{none}");
    // A tenant that does not exist: the message names the CLI command.
    let stderr = err(&ax(url, &["task", "list", "--tenant", "nobody"], &[]), 2);
    assert!(stderr.contains("`ax tenant create nobody`"), "{stderr}");
}

#[test]
fn secrets_are_set_from_stdin_listed_without_values_and_deleted() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["secret", "set", "db_pass"])
        .env("AX_URL", url)
        .env("AX_TOKEN", TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hunter2\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(ok(&out), "secret db_pass created\n");
    let file = dir.path().join("value");
    std::fs::write(&file, "from a file").unwrap();
    assert_eq!(
        ok(&ax(
            url,
            &[
                "secret",
                "set",
                "db_pass",
                "--file",
                &file.display().to_string()
            ],
            &[]
        )),
        "secret db_pass replaced\n"
    );
    let listed = ok(&ax(url, &["secret", "list"], &[]));
    assert!(
        listed.lines().any(|l| l.starts_with("db_pass ")),
        "{listed}"
    );
    let json = ok(&ax(url, &["secret", "list", "--json"], &[]));
    assert!(
        !json.contains("hunter2") && !json.contains("from a file"),
        "{json}"
    );
    assert_eq!(
        ok(&ax(url, &["secret", "delete", "db_pass"], &[])),
        "secret db_pass deleted\n"
    );
    assert!(!ok(&ax(url, &["secret", "list"], &[])).contains("db_pass"));
    let stderr = err(&ax(url, &["secret", "delete", "db_pass"], &[]), 2);
    assert!(stderr.starts_with("error: not_found: "), "{stderr}");
}

#[test]
fn a_plugin_version_a_task_pins_is_not_deleted_and_another_is() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    fixture(url, dir.path());
    let hello = plugin_path("hello").display().to_string();
    ok(&ax(
        url,
        &["plugin", "push", &hello, "--version", "2.0.0"],
        &[],
    ));
    let stderr = err(&ax(url, &["plugin", "delete", "hello@1.0.0"], &[]), 2);
    assert!(stderr.starts_with("error: conflict: "), "{stderr}");
    assert!(stderr.contains("used by task(s) greet, tick"), "{stderr}");
    assert!(stderr.contains("`ax task apply`"), "{stderr}");
    assert_eq!(
        ok(&ax(url, &["plugin", "delete", "hello", "2.0.0"], &[])),
        "deleted: hello@2.0.0\n"
    );
    let listed = ok(&ax(url, &["plugin", "list", "--json"], &[]));
    let v: Value = serde_json::from_str(&listed).unwrap();
    let versions: Vec<String> = v["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "hello")
        .map(|p| p["version"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(versions, ["1.0.0"]);
    let stderr = err(&ax(url, &["plugin", "delete", "hello"], &[]), 2);
    assert!(stderr.contains("hello@1.0.0"), "{stderr}");
    let stderr = err(&ax(url, &["plugin", "delete", "hello@9.9.9"], &[]), 2);
    assert!(stderr.starts_with("error: not_found: "), "{stderr}");
}

#[test]
fn task_validate_and_a_dry_run_check_without_storing_and_show_the_diff() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    fixture(url, dir.path());
    let write = |name: &str, text: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        file.display().to_string()
    };
    let bad = write(
        "bad.yaml",
        "name: t\nplugin: hello@1.0.0\nretry: { max_attempts: 0 }\n",
    );
    let stderr = err(&ax(url, &["task", "validate", &bad], &[]), 2);
    assert!(
        stderr.contains(&format!("{bad}: retry.max_attempts: ")),
        "{stderr}"
    );
    let missing = write("missing.yaml", "name: t\nplugin: nothere@1.0.0\n");
    let stderr = err(&ax(url, &["task", "validate", &missing], &[]), 2);
    assert!(
        stderr.contains("plugin nothere@1.0.0 is not uploaded"),
        "{stderr}"
    );
    let good = write(
        "good.yaml",
        "name: fresh\nplugin: hello@1.0.0\ninput: { name: a }\n",
    );
    assert_eq!(
        ok(&ax(url, &["task", "validate", &good], &[])),
        format!("{good}: task fresh is valid (1 step)\n")
    );
    // Unreachable: still validated, with a note that plugins were not checked.
    let out = ax("http://127.0.0.1:9", &["task", "validate", &good], &[]);
    assert!(ok(&out).contains("is valid"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("plugins not checked"));

    let created = ok(&ax(url, &["task", "apply", "-f", &good, "--dry-run"], &[]));
    assert!(
        created.starts_with("task fresh would be created (dry run"),
        "{created}"
    );
    assert!(created.contains("+ name: fresh\n"), "{created}");
    let stderr = err(&ax(url, &["task", "show", "fresh"], &[]), 2);
    assert!(stderr.starts_with("error: not_found"), "{stderr}");

    ok(&ax(url, &["task", "apply", "-f", &good], &[]));
    let unchanged = ok(&ax(url, &["task", "apply", "-f", &good, "--dry-run"], &[]));
    assert!(
        unchanged.starts_with("task fresh is unchanged"),
        "{unchanged}"
    );
    let changed = write(
        "good.yaml",
        "name: fresh\nplugin: hello@1.0.0\ninput: { name: b }\n",
    );
    let diff = ok(&ax(
        url,
        &["task", "apply", "-f", &changed, "--dry-run"],
        &[],
    ));
    assert!(
        diff.starts_with("task fresh would be replaced (version 1 → 2"),
        "{diff}"
    );
    assert!(
        diff.contains("\n- input: { name: a }\n+ input: { name: b }\n"),
        "{diff}"
    );
    assert!(diff.contains("  plugin: hello@1.0.0\n"), "{diff}");
    let shown = ok(&ax(url, &["task", "show", "fresh"], &[]));
    assert!(
        shown.contains("input: { name: a }"),
        "nothing stored: {shown}"
    );
    let stderr = err(
        &ax(url, &["task", "apply", "-f", &bad, "--dry-run"], &[]),
        2,
    );
    assert!(stderr.contains("retry.max_attempts"), "{stderr}");
}

#[test]
fn serve_demo_on_a_taken_port_writes_nothing_and_prints_no_token() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["serve", "--demo", "--listen", &addr])
        .current_dir(cwd.path())
        .env_remove("AX_ADMIN_TOKEN")
        .env_remove("AX_DATA_DIR")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("listening on {addr}")), "{stderr}");
    assert!(!cwd.path().join("ax-data").exists(), "ax-data was written");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("token"), "{stdout}");
}
