//! `ax task run -f FILE --local` on the real binary (issue 34, item 5): a
//! whole task runs in the process, without a server, against the plugins
//! built from `plugins/`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{ok, plugin_path};

/// `ax ARGS` in `dir`, with its own artifact cache and no server anywhere.
fn ax_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .current_dir(dir)
        .env("AX_CACHE_DIR", dir.join("cache"))
        // A server a local run would wrongly talk to: nothing listens there.
        .env("AX_URL", "http://127.0.0.1:9")
        .env_remove("COLUMNS")
        .env_remove("RUST_LOG")
        .output()
        .expect("running ax")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `--plugin NAME=PATH` of a plugin built from `plugins/`.
fn plugin_flag(name: &str, file: &str) -> String {
    format!("--plugin={name}={}", plugin_path(file).display())
}

/// Two steps joined by a condition on the first one's output (true), a third
/// whose condition is false, params and a template of the trigger input.
const TWO_STEPS: &str = r#"name: greet-twice
trigger: { every: 1s }
params:
  - { name: name, type: string, default: ax }
steps:
  - name: greet
    plugin: hello@1.0.0
    input: { name: "${input.name}" }
  - name: again
    needs: [greet]
    when: "steps.greet.output.greeting == 'hello, local'"
    plugin: hello@^1
    input: { name: "${steps.greet.output.greeting}" }
  - name: never
    needs: [greet]
    when: "steps.greet.output.greeting == 'nope'"
    plugin: hello@stable
    input: { name: x }
"#;

#[test]
fn a_two_step_task_with_a_condition_runs_locally_and_prints_both_steps() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("task.yaml"), TWO_STEPS).unwrap();
    let hello = plugin_flag("hello", "hello");
    let out = ax_in(
        tmp.path(),
        &[
            "task",
            "run",
            "-f",
            "task.yaml",
            "--local",
            &hello,
            "-p",
            "name=local",
        ],
    );
    let shown = ok(&out);
    for line in [
        "status    succeeded",
        "greet output: {\"greeting\":\"hello, local\"}",
        "again output: {\"greeting\":\"hello, hello, local\"}",
        "never skipped: condition is false: steps.greet.output.greeting == 'nope'",
        "== step greet attempt 1 ==",
        "greeting local (attempt 1)",
        "== step again attempt 1 ==",
        "greeting hello, local (attempt 1)",
    ] {
        assert!(shown.contains(line), "no `{line}` in:\n{shown}");
    }
    // The plugin loaded once for the three references; the scheduler's own
    // info lines stay out of the way.
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("hello.wasm: compiled").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("INFO"), "{stderr}");

    // --input instead of -p, as JSON: the run's view and its logs.
    let out = ax_in(
        tmp.path(),
        &[
            "task",
            "run",
            "-f",
            "task.yaml",
            "--local",
            &hello,
            "--input",
            r#"{"name": "json"}"#,
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(v["run"]["status"], "succeeded", "{v}");
    let steps: Vec<(&str, &str)> = v["run"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    // `again`'s condition wants `hello, local`: false this time.
    assert_eq!(
        steps,
        [
            ("greet", "succeeded"),
            ("again", "skipped"),
            ("never", "skipped")
        ]
    );
    assert_eq!(
        v["run"]["steps"][0]["output"]["greeting"], "hello, json",
        "{v}"
    );
    assert_eq!(v["logs"][0]["step"], "greet", "{v}");
    assert!(
        text(&out.stderr).contains("loaded from the artifact cache"),
        "the second run takes the first one's artifact: {}",
        text(&out.stderr)
    );
}

/// A task that fires every second runs once, the run asked for: it is
/// saved without its schedule, so no fire can come between saving and
/// running. What it would be refused for on a server it is refused for
/// here: its trigger is checked as written.
#[test]
fn a_scheduled_task_runs_once_and_its_trigger_is_checked_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let hello = plugin_flag("hello", "hello");
    std::fs::write(
        tmp.path().join("task.yaml"),
        "name: each-second\ntrigger: { cron: '* * * * * *' }\nplugin: hello@1.0.0\n\
         input: { name: once }\n",
    )
    .unwrap();
    let out = ax_in(
        tmp.path(),
        &[
            "task",
            "run",
            "-f",
            "task.yaml",
            "--local",
            &hello,
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(v["run"]["status"], "succeeded", "{v}");
    assert_eq!(v["run"]["trigger"], "manual", "{v}");
    assert_eq!(v["run"]["steps"][0]["output"]["greeting"], "hello, once");

    // A required param on a task nobody triggers by hand: refused, as
    // `ax task apply` refuses it, though the local copy has no schedule.
    std::fs::write(
        tmp.path().join("task.yaml"),
        "name: each-second\ntrigger: { every: 1s }\nparams: [{ name: who, type: string }]\n\
         plugin: hello@1.0.0\ninput: { name: '${input.who}' }\n",
    )
    .unwrap();
    let out = ax_in(
        tmp.path(),
        &[
            "task",
            "run",
            "-f",
            "task.yaml",
            "--local",
            &hello,
            "-p",
            "who=x",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("has no default, but the task's trigger fires it"),
        "{stderr}"
    );
    // A time zone the scheduler cannot read: refused with the trigger's path.
    std::fs::write(
        tmp.path().join("task.yaml"),
        "name: each-second\ntrigger: { cron: '0 0 2 * * ?', timezone: Europe/Pariss }\n\
         plugin: hello@1.0.0\ninput: { name: x }\n",
    )
    .unwrap();
    let out = ax_in(
        tmp.path(),
        &["task", "run", "-f", "task.yaml", "--local", &hello],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("trigger"), "{stderr}");
    assert!(stderr.contains("Europe/Pariss"), "{stderr}");
}

#[test]
fn a_failing_step_exits_1_with_its_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("task.yaml"),
        "name: failing\nsteps:\n  - name: boom\n    plugin: fail@0.1.0\n    \
         input: { kind: fatal, message: the disk is on fire }\n  - name: after\n    \
         needs: [boom]\n    plugin: hello@1.0.0\n    input: { name: x }\n",
    )
    .unwrap();
    let out = ax_in(
        tmp.path(),
        &[
            "task",
            "run",
            "-f",
            "task.yaml",
            "--local",
            &plugin_flag("fail", "fail"),
            &plugin_flag("hello", "hello"),
        ],
    );
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}{}", text(&out.stderr));
    for line in [
        "status    failed",
        "reason    step `boom` failed after 1 attempt",
        "boom error: the disk is on fire",
        "after error: an upstream step did not succeed",
        "warn  the disk is on fire",
    ] {
        assert!(shown.contains(line), "no `{line}` in:\n{shown}");
    }
}

#[test]
fn a_plugin_without_a_local_file_is_named_with_the_flag_to_pass() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("task.yaml"),
        "name: lonely\nsteps:\n  - name: first\n    plugin: hello@1.0.0\n    input: { name: x }\n  \
         - name: second\n    needs: [first]\n    plugin: notify@^1\n    input: { text: y }\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["task", "run", "-f", "task.yaml", "--local"];
        args.extend_from_slice(extra);
        ax_in(tmp.path(), &args)
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        "error: usage: step `first` runs plugin `hello@1.0.0`, which has no local file: \
         pass --plugin hello=PATH.wasm (no ax.yaml in .)"
    );
    // The project's manifest builds another plugin: it is named.
    std::fs::write(
        tmp.path().join("ax.yaml"),
        "name: hello\nlang: rust\nbuild:\n  command: \"true\"\n  output: out/hello.wasm\n",
    )
    .unwrap();
    let out = run(&[&plugin_flag("hello", "hello")]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        "error: usage: step `second` runs plugin `notify@^1`, which has no local file: \
         pass --plugin notify=PATH.wasm (ax.yaml in . builds `hello`)"
    );
    // Without --local: what to write instead.
    let out = ax_in(tmp.path(), &["task", "run", "-f", "task.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("needs --local"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_projects_plugin_comes_from_its_manifests_build_output() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("greet");
    std::fs::create_dir_all(project.join("out")).unwrap();
    // `ax build` would write it; the test copies a plugin built from `plugins/`.
    std::fs::write(
        project.join("ax.yaml"),
        "name: greet\nlang: rust\nbuild:\n  command: \"true\"\n  output: out/greet.wasm\n",
    )
    .unwrap();
    std::fs::write(
        project.join("task.yaml"),
        "name: greet\nplugin: greet@0.1.0\ninput: { name: project }\n",
    )
    .unwrap();
    // Not built yet: says so.
    let out = ax_in(
        tmp.path(),
        &["task", "run", "-f", "greet/task.yaml", "--local"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("run `ax build` first"), "{stderr}");
    std::fs::copy(plugin_path("hello"), project.join("out/greet.wasm")).unwrap();
    // The project is the task file's folder, wherever ax runs from.
    let out = ax_in(
        tmp.path(),
        &["task", "run", "-f", "greet/task.yaml", "--local"],
    );
    let shown = ok(&out);
    assert!(
        shown.contains("greet output: {\"greeting\":\"hello, project\"}"),
        "{shown}"
    );
}
