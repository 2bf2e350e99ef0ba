//! A plugin author's first hour (issue 34), on the real binary: the
//! scaffold's task passes trigger input through, the CLI's hints.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::common::{ax_at as ax, ok, plugin_path};
use crate::crash::{AxProcess, TOKEN, listening_url};

/// `ax plugin push FILE --name NAME --version VERSION`, which must succeed.
fn push(url: &str, file: &str, name: &str, version: &str) {
    ok(&ax(
        url,
        &["plugin", "push", file, "--name", name, "--version", version],
    ));
}

/// `ax plugin new NAME --lang LANG` into `dir`; its stdout.
fn plugin_new(name: &str, lang: &str, dir: &std::path::Path) -> String {
    let dir = dir.display().to_string();
    ok(&ax(
        "http://unused.invalid",
        &["plugin", "new", name, "--lang", lang, "--dir", &dir],
    ))
}

/// The greeting of a `--json` run of the one-step sample task.
fn greeting(out: &Output) -> String {
    let run: Value = serde_json::from_str(&ok(out)).unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    run["steps"][0]["output"]["greeting"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn the_scaffold_task_passes_trigger_input_to_the_plugin_in_every_language() {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let hello = plugin_path("hello").display().to_string();
    for lang in ["rust", "python", "js"] {
        let name = format!("greet-{lang}");
        let project = tmp.path().join(&name);
        plugin_new(&name, lang, &project);
        // `hello` greets `input.name` as the sample plugins do.
        push(url, &hello, &name, "0.1.0");
        let task = project.join("task.yaml").display().to_string();
        ok(&ax(url, &["task", "apply", "-f", &task]));
        let wait = ["--wait", "--json", "--timeout", "60s"];
        let trigger = |extra: &[&str]| {
            let mut args = vec!["trigger", name.as_str()];
            args.extend_from_slice(extra);
            args.extend_from_slice(&wait);
            ax(url, &args)
        };
        assert_eq!(greeting(&trigger(&[])), "hello, ax", "{lang}: the default");
        assert_eq!(
            greeting(&trigger(&["--input", r#"{"name":"boom"}"#])),
            "hello, boom",
            "{lang}: --input"
        );
        assert_eq!(
            greeting(&trigger(&["-p", "name=you"])),
            "hello, you",
            "{lang}: -p"
        );
    }
}

#[test]
fn plugin_new_ends_its_next_steps_with_the_trigger() {
    let tmp = tempfile::tempdir().unwrap();
    let shown = plugin_new("order-export", "js", &tmp.path().join("p"));
    let next = shown.split("next:").nth(1).expect("a next: section");
    assert!(
        next.trim_end().ends_with("ax trigger order-export --wait"),
        "{shown}"
    );
}

#[test]
fn a_refused_connection_names_the_url_and_suggests_ax_serve() {
    // A port nothing listens on: bound, then freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = ax(&url, &["task", "list"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&url), "{stderr}");
    assert!(stderr.contains("`ax serve`"), "{stderr}");
}

#[test]
fn the_server_log_has_no_colours_when_stderr_is_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("data"))
        .env("AX_ADMIN_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = listening_url(&mut child).expect("ax serve listens");
    // A request the server logs about is not needed: startup logs at info.
    let _ = ax(&url, &["task", "list"]);
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.trim().is_empty(), "the server logged nothing");
    assert!(!text.contains('\u{1b}'), "ANSI escapes in a file:\n{text}");
}

#[test]
fn run_show_prints_a_skipped_step_as_skipped_with_its_condition() {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let hello = plugin_path("hello").display().to_string();
    push(url, &hello, "hello", "1.0.0");
    let task = tmp.path().join("skip.yaml");
    std::fs::write(
        &task,
        "name: skip\nsteps:\n  - name: quiet\n    plugin: hello@1.0.0\n    \
         input: { name: x }\n    when: \"input.n < 1\"\n",
    )
    .unwrap();
    ok(&ax(
        url,
        &["task", "apply", "-f", &task.display().to_string()],
    ));
    let out = ax(
        url,
        &[
            "trigger",
            "skip",
            "--input",
            r#"{"n": 5}"#,
            "--wait",
            "--json",
            "--timeout",
            "60s",
        ],
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["steps"][0]["status"], "skipped", "{run}");
    let shown = ok(&ax(url, &["run", "show", run["id"].as_str().unwrap()]));
    assert!(
        shown.contains("quiet skipped: condition is false: input.n < 1"),
        "{shown}"
    );
    assert!(!shown.contains("quiet error"), "{shown}");
}

#[test]
fn a_missing_plugin_version_lists_the_versions_that_are_uploaded() {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let hello = plugin_path("hello").display().to_string();
    for version in ["0.2.0", "0.1.0"] {
        push(url, &hello, "greet", version);
    }
    let task = tmp.path().join("greet.yaml");
    std::fs::write(&task, "name: greet\nplugin: greet@1.0.0\n").unwrap();
    let task = task.display().to_string();
    for args in [
        &["task", "apply", "-f", &task][..],
        &["task", "validate", &task],
    ] {
        let out = ax(url, args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("greet@1.0.0 is not uploaded"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("uploaded versions of `greet`: 0.1.0, 0.2.0"),
            "{args:?}: {stderr}"
        );
    }
    let task = tmp.path().join("other.yaml");
    std::fs::write(&task, "name: other\nplugin: nothing@1.0.0\n").unwrap();
    let out = ax(url, &["task", "apply", "-f", &task.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no version of `nothing` is uploaded"),
        "{stderr}"
    );
}

#[test]
fn usage_lines_do_not_show_url_and_token_as_required() {
    // With AX_URL and AX_TOKEN set (as `ax()` sets them), a usage error
    // shows only what the command needs.
    let out = ax("http://unused.invalid", &["trigger"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Usage: ax trigger <TASK>"), "{stderr}");
    assert!(!stderr.contains("--url <URL>"), "{stderr}");
    assert!(!stderr.contains("--token <TOKEN>"), "{stderr}");
    // The help lists them as options with their environment fallbacks.
    let help = ok(&ax("http://unused.invalid", &["trigger", "--help"]));
    assert!(
        help.contains("Usage: ax trigger [OPTIONS] <TASK>"),
        "{help}"
    );
    assert!(help.contains("[env: AX_URL]"), "{help}");
    assert!(help.contains("[env: AX_TOKEN]"), "{help}");
}

#[test]
fn plugin_new_reads_an_underscore_name_as_the_readme_file_name_does() {
    let tmp = tempfile::tempdir().unwrap();
    let shown = plugin_new("my_plugin", "js", &tmp.path().join("p"));
    assert!(
        shown.contains("`my_plugin` is named `my-plugin`"),
        "{shown}"
    );
    assert!(shown.contains("keeps `_`, my_plugin.wasm,"), "{shown}");
    assert!(shown.contains("\n  ax deploy "), "{shown}");
    assert!(shown.contains("ax trigger my-plugin --wait"), "{shown}");
    let task = std::fs::read_to_string(tmp.path().join("p/task.yaml")).unwrap();
    assert!(task.contains("plugin: my-plugin@"), "{task}");
}

/// `ax` run in `dir`, with the server's URL and token.
fn ax_in(url: &str, dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .current_dir(dir)
        .env("AX_URL", url)
        .env("AX_TOKEN", TOKEN)
        .env_remove("COLUMNS")
        .output()
        .expect("running ax")
}

#[test]
fn plugin_push_takes_the_version_from_the_project_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let hello = std::fs::read(plugin_path("hello")).unwrap();
    let pushed = |out: &Output| -> String {
        let v: Value = serde_json::from_str(&ok(out)).unwrap();
        format!(
            "{}@{}",
            v["name"].as_str().unwrap(),
            v["version"].as_str().unwrap()
        )
    };

    // In the project folder, as the scaffolds' READMEs say: each language's manifest.
    for (lang, name, manifest) in [
        ("js", "greet-js", "package.json"),
        ("python", "greet-py", "pyproject.toml"),
    ] {
        let project = tmp.path().join(name);
        plugin_new(name, lang, &project);
        let file = format!("{}.wasm", name.replace('-', "_"));
        std::fs::write(project.join(&file), &hello).unwrap();
        let out = ax_in(url, &project, &["plugin", "push", &file, "--json"]);
        assert_eq!(pushed(&out), format!("{name}@0.1.0"), "{lang}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("version 0.1.0 from {manifest}")),
            "{stderr}"
        );
    }

    // A Rust project: the file under target/, pushed from elsewhere.
    let crate_dir = tmp.path().join("greet-rs");
    let release = crate_dir.join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::write(
        crate_dir.join("Cargo.toml"),
        "[package]\nname = \"greet-rs\"\nversion = \"0.4.2\"\n",
    )
    .unwrap();
    std::fs::write(release.join("greet_rs.wasm"), &hello).unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let wasm = release.join("greet_rs.wasm").display().to_string();
    let out = ax_in(url, &elsewhere, &["plugin", "push", &wasm, "--json"]);
    assert_eq!(pushed(&out), "greet-rs@0.4.2");

    // An explicit --version wins.
    let out = ax_in(
        url,
        &elsewhere,
        &["plugin", "push", &wasm, "--version", "9.0.0", "--json"],
    );
    assert_eq!(pushed(&out), "greet-rs@9.0.0");

    // Other bytes under a version the server holds: refused (versions are
    // immutable), with what names a new one: the manifest, or --version.
    let echo = std::fs::read(plugin_path("echo")).unwrap();
    std::fs::write(release.join("greet_rs.wasm"), &echo).unwrap();
    for (extra, hint) in [
        (&[][..], "greet-rs/Cargo.toml (now 0.4.2)"),
        (&["--version", "9.0.0"][..], "pass a new --version"),
    ] {
        let mut args = vec!["plugin", "push", wasm.as_str()];
        args.extend_from_slice(extra);
        let out = ax_in(url, &elsewhere, &args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("already exists with another digest"),
            "{stderr}"
        );
        assert!(stderr.contains(hint), "{stderr}");
    }

    // No version anywhere: an error naming the files looked at.
    let bare = tmp.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::write(bare.join("x.wasm"), &hello).unwrap();
    let out = ax_in(url, &bare, &["plugin", "push", "x.wasm"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for file in ["Cargo.toml", "package.json", "pyproject.toml"] {
        assert!(stderr.contains(&format!("{file} (absent)")), "{stderr}");
    }
    assert!(stderr.contains("pass --version"), "{stderr}");
}

#[test]
fn replay_prints_stderr_and_a_fixed_build_exits_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let probe = plugin_path("probe").display().to_string();
    push(url, &probe, "probe", "1.0.0");
    // Writes a "traceback" to stderr, then fails (fatal: no retry).
    let task = tmp.path().join("buggy.yaml");
    std::fs::write(
        &task,
        "name: buggy\nrecord: on_failure\nsteps:\n  - name: s\n    plugin: probe@1.0.0\n    \
         input: { ops: [ { say: \"Traceback: app.py line 7\" }, { fail: \"IndexError: boom\" } ] }\n",
    )
    .unwrap();
    ok(&ax(
        url,
        &["task", "apply", "-f", &task.display().to_string()],
    ));
    let out = ax(
        url,
        &["trigger", "buggy", "--wait", "--json", "--timeout", "60s"],
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["status"], "failed", "{run}");
    let id = run["id"].as_str().unwrap();
    let cache = tmp.path().join("cache").display().to_string();
    let replay = |extra: &[&str]| {
        let mut args = vec!["run", "replay", id, "--step", "s", "--cache-dir", &cache];
        args.extend_from_slice(extra);
        ax(url, &args)
    };

    // The recorded component: the failure reproduced (exit 0), its stderr shown.
    let out = replay(&[]);
    let shown = ok(&out);
    assert!(
        shown.contains("outcome   failed (recorded: failed)"),
        "{shown}"
    );
    assert!(
        shown.contains("--- stderr\nTraceback: app.py line 7"),
        "{shown}"
    );

    // A fixed build that succeeds: exit 0, and the difference said apart.
    let fixed = plugin_path("echo").display().to_string();
    let out = replay(&["--plugin", &fixed]);
    let shown = ok(&out);
    assert!(
        shown.contains("outcome   succeeded (recorded: failed)"),
        "{shown}"
    );
    assert!(
        shown.contains("result    different from the recorded attempt"),
        "{shown}"
    );
    assert!(shown.contains("verdict   passed"), "{shown}");

    // A build that still fails: exit 1.
    let still = plugin_path("fail").display().to_string();
    let out = replay(&["--plugin", &still]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("verdict   failed"));
}

#[test]
fn trigger_input_the_task_never_reads_is_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let hello = plugin_path("hello").display().to_string();
    push(url, &hello, "hello", "1.0.0");
    // The issue's task: a hard-coded input, no params.
    let apply = |name: &str, input: &str| {
        let task = tmp.path().join(format!("{name}.yaml"));
        std::fs::write(
            &task,
            format!("name: {name}\nplugin: hello@1.0.0\ninput: {input}\n"),
        )
        .unwrap();
        ok(&ax(
            url,
            &["task", "apply", "-f", &task.display().to_string()],
        ));
    };
    apply("fixed", "{ name: ax }");
    apply("reads", "{ name: \"${input.name}\" }");
    apply("whole", "\"${input}\"");
    let trigger = |task: &str, input: &str| ax(url, &["trigger", task, "--input", input, "--json"]);

    let out = trigger("fixed", r#"{"name": "boom"}"#);
    let run: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(run["warnings"][0]["code"], "input_not_read", "{run}");
    assert_eq!(run["warnings"][0]["fields"], serde_json::json!(["name"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: task `fixed` never reads input field `name`"),
        "{stderr}"
    );

    // A typo beside a field that is read: named, with the likely one.
    let out = trigger("reads", r#"{"name": "a", "nmae": "b"}"#);
    let run: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(run["warnings"][0]["fields"], serde_json::json!(["nmae"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`nmae` (did you mean `name`?)"), "{stderr}");

    // Read by name, or the input passed whole: no warning.
    for (task, input) in [("reads", r#"{"name": "a"}"#), ("whole", r#"{"x": 1}"#)] {
        let out = trigger(task, input);
        let run: Value = serde_json::from_str(&ok(&out)).unwrap();
        assert!(run.get("warnings").is_none(), "{task}: {run}");
        assert!(
            out.stderr.is_empty(),
            "{task}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `ax run show` of a step whose plugin let an exception escape `run`
/// (without the scaffolds' wrappers) names the exception, once prefixed:
/// the Python type, message and innermost frame, the JavaScript conversion
/// that failed with why (an `Error` has no `kind`), never `wasm trap: wasm
/// trap:` (issue 34, items 2 and 3).
#[test]
fn run_show_names_the_exception_a_python_or_javascript_plugin_threw() {
    let Some(dir) = crate::polyglot::polyglot_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    for (name, expected) in [
        (
            "throw-py",
            "IndexError: list index out of range (at app.py:12, in third)",
        ),
        (
            "throw-js",
            "\"undefined\" is not one of the cases of error-kind (the thrown value has no \
             `kind`: an `Error` such as a `TypeError`",
        ),
    ] {
        let wasm = dir.join(format!("{}.wasm", name.replace('-', "_")));
        push(url, &wasm.display().to_string(), name, "0.1.0");
        let task = tmp.path().join(format!("{name}.yaml"));
        std::fs::write(
            &task,
            format!(
                "name: {name}\nplugin: {name}@0.1.0\nretry: {{ max_attempts: 1 }}\n\
                 limits: {{ memory_mb: 64, timeout: 60s }}\n"
            ),
        )
        .unwrap();
        ok(&ax(
            url,
            &["task", "apply", "-f", &task.display().to_string()],
        ));
        let out = ax(
            url,
            &["trigger", name, "--wait", "--json", "--timeout", "120s"],
        );
        let run: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(run["status"], "failed", "{name}: {run}");
        // The API's run view (what the dashboard's run page shows) names it.
        let error = run["steps"][0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(expected), "{name}: {run}");
        assert!(!error.contains("wasm trap"), "{name}: {run}");
        let shown = ok(&ax(url, &["run", "show", run["id"].as_str().unwrap()]));
        assert!(
            shown.contains(&format!(
                "the plugin threw an exception that is not an error of the WIT interface: {expected}"
            )),
            "{name}: {shown}"
        );
        assert!(!shown.contains("wasm trap"), "{name}: {shown}");
    }
}
