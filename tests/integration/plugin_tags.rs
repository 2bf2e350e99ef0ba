//! Versions that move and runs that stay reproducible, against a real `ax
//! serve` with real plugins and the real CLI: `ax plugin push --tag`, `ax
//! plugin tag` and `untag`, tasks naming a semver range or a tag, the
//! version each attempt ran recorded on it, and the refusals (a bad tag, an
//! unknown tag or an empty range at save, deleting what a task or a tag
//! names).
//!
//! `greet@1.0.0` is the `hello` plugin and `greet@1.1.0` the `echo` one, so
//! a run's output says which component ran, not only its record.

use std::process::Output;

use serde_json::Value;

use crate::common::{ax_at as ax, ok, plugin_path};
use crate::crash::AxProcess;

/// The command failed; its stderr.
fn refused(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a refusal: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn push(url: &str, plugin: &str, version: &str, tags: &[&str]) -> String {
    let path = plugin_path(plugin).display().to_string();
    let mut args = vec![
        "plugin",
        "push",
        &path,
        "--name",
        "greet",
        "--version",
        version,
    ];
    for tag in tags {
        args.extend(["--tag", tag]);
    }
    ok(&ax(url, &args))
}

fn apply(url: &str, dir: &std::path::Path, name: &str, plugin: &str) -> Output {
    let file = dir.join(format!("{name}.yaml"));
    let text = format!("name: {name}\nplugin: \"{plugin}\"\ninput: {{ name: {name} }}\n");
    std::fs::write(&file, text).unwrap();
    ax(url, &["task", "apply", "-f", &file.display().to_string()])
}

/// Triggers `task`, waits, and gives the run's JSON.
fn run(url: &str, task: &str) -> Value {
    let out = ax(
        url,
        &["trigger", task, "--wait", "--json", "--timeout", "60s"],
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// The version attempt 1 of the run's only step ran, and its output.
fn ran(run: &Value) -> (String, Value) {
    let step = &run["steps"][0];
    assert_eq!(run["status"], "succeeded", "{run}");
    let version = step["attempts"][0]["plugin_version"].as_str().unwrap();
    assert_eq!(
        step["attempts"][0]["plugin_digest"].as_str().map(str::len),
        Some(64),
        "{run}"
    );
    (version.to_owned(), step["output"].clone())
}

#[test]
fn ranges_and_tags_resolve_when_an_attempt_starts_and_each_attempt_records_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    let pushed = push(url, "hello", "1.0.0", &["stable"]);
    assert!(pushed.contains("tag greet@stable -> 1.0.0"), "{pushed}");
    push(url, "echo", "1.1.0", &[]);
    ok(&apply(url, dir.path(), "ranged", "greet@^1.0"));
    ok(&apply(url, dir.path(), "tagged", "greet@stable"));

    // The range takes the highest 1.x: echo's output (its input back).
    let r = run(url, "ranged");
    let (version, output) = ran(&r);
    assert_eq!(version, "1.1.0", "{r}");
    assert_eq!(output["input"]["name"], "ranged", "{r}");
    assert_eq!(r["steps"][0]["plugin"], "greet@^1.0", "{r}");
    // The tag takes what it points at: hello's greeting.
    let (version, output) = ran(&run(url, "tagged"));
    assert_eq!(version, "1.0.0");
    assert_eq!(output["greeting"], "hello, tagged");

    // Moved: the next run of the same, unchanged task takes the new target.
    let moved = ok(&ax(url, &["plugin", "tag", "greet@1.1.0", "stable"]));
    assert!(
        moved.contains("tag greet@stable -> 1.1.0 (moved from 1.0.0)"),
        "{moved}"
    );
    let r = run(url, "tagged");
    let (version, output) = ran(&r);
    assert_eq!(version, "1.1.0");
    assert_eq!(output["input"]["name"], "tagged");
    // `run show` says which version each attempt ran.
    let shown = ok(&ax(url, &["run", "show", r["id"].as_str().unwrap()]));
    let line = shown
        .lines()
        .find(|l| l.starts_with("tagged ") && l.contains(" succeeded "))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(line.contains("greet@stable"), "{shown}");
    let attempt = shown
        .lines()
        .skip_while(|l| !l.contains("VERSION"))
        .nth(1)
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(attempt.contains(" 1.1.0 "), "{shown}");

    // A pre-release is not in a range that does not name one.
    push(url, "hello", "1.2.0-rc.1", &[]);
    assert_eq!(ran(&run(url, "ranged")).0, "1.1.0");

    // `ax plugin list` shows each version's tags.
    let listed = ok(&ax(url, &["plugin", "list"]));
    let tags_of = |version: &str| {
        let line = listed
            .lines()
            .find(|l| l.starts_with("greet ") && l.contains(&format!(" {version} ")))
            .unwrap_or_else(|| panic!("{listed}"));
        line.split_whitespace().last().unwrap().to_owned()
    };
    assert!(listed.lines().next().unwrap().ends_with("TAGS"), "{listed}");
    assert_eq!(tags_of("1.1.0"), "stable", "{listed}");
    assert_eq!(tags_of("1.0.0"), "-", "{listed}");
    let v: Value = serde_json::from_str(&ok(&ax(url, &["plugin", "list", "--json"]))).unwrap();
    let tagged: Vec<&Value> = v["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["tags"] == serde_json::json!(["stable"]))
        .collect();
    assert_eq!(tagged.len(), 1, "{v}");
    assert_eq!(tagged[0]["version"], "1.1.0");
}

#[test]
fn bad_tags_unknown_tags_empty_ranges_and_deleting_what_is_named_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let url = server.url.as_str();
    push(url, "hello", "1.0.0", &[]);

    // A tag that reads as a range, or names no stored version.
    let e = refused(&ax(url, &["plugin", "tag", "greet@1.0.0", "x"]));
    assert!(e.contains("tag `x` is not valid"), "{e}");
    let e = refused(&ax(url, &["plugin", "tag", "greet@9.9.9", "stable"]));
    assert!(e.contains("greet@9.9.9 not found"), "{e}");
    // At save: an unknown tag, a range nothing matches (server and client checks).
    let e = refused(&apply(url, dir.path(), "t1", "greet@canary"));
    assert!(
        e.contains("steps[0].plugin") && e.contains("`greet` has no tag `canary`"),
        "{e}"
    );
    let e = refused(&apply(url, dir.path(), "t2", "greet@^2"));
    assert!(
        e.contains("no uploaded version of `greet` is in the range `^2`"),
        "{e}"
    );
    assert!(e.contains("uploaded: 1.0.0"), "{e}");
    let file = dir.path().join("t2.yaml").display().to_string();
    let e = refused(&ax(url, &["task", "validate", &file]));
    assert!(e.contains("no uploaded version is in the range"), "{e}");
    let tasks: Value = serde_json::from_str(&ok(&ax(url, &["task", "list", "--json"]))).unwrap();
    assert_eq!(tasks["tasks"], serde_json::json!([]), "nothing was saved");

    ok(&ax(url, &["plugin", "tag", "greet@1.0.0", "stable"]));
    ok(&apply(url, dir.path(), "pinned", "greet@1.0.0"));
    ok(&apply(url, dir.path(), "tagged", "greet@stable"));
    let e = refused(&ax(url, &["plugin", "delete", "greet@1.0.0"]));
    assert!(e.contains("used by task(s) pinned"), "{e}");
    ok(&ax(url, &["task", "delete", "pinned"]));
    let e = refused(&ax(url, &["plugin", "delete", "greet@1.0.0"]));
    assert!(e.contains("target of tag(s) stable"), "{e}");
    let e = refused(&ax(url, &["plugin", "untag", "greet", "stable"]));
    assert!(e.contains("used by task(s) tagged"), "{e}");
    ok(&ax(url, &["task", "delete", "tagged"]));
    ok(&ax(url, &["plugin", "untag", "greet", "stable"]));
    let e = refused(&ax(url, &["plugin", "untag", "greet", "stable"]));
    assert!(e.contains("not found"), "{e}");

    // A range is not protected: its last match may go, and the next attempt
    // fails with the reason (the host goes on).
    ok(&apply(url, dir.path(), "ranged", "greet@^1"));
    ok(&ax(url, &["plugin", "delete", "greet@1.0.0"]));
    let r = run(url, "ranged");
    assert_eq!(r["status"], "failed", "{r}");
    let error = r["steps"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("no version of `greet` is uploaded"), "{r}");
    push(url, "hello", "1.0.1", &[]);
    assert_eq!(ran(&run(url, "ranged")).0, "1.0.1", "the next run finds it");
}
