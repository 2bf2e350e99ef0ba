//! `ax deploy` on the real binary: a Rust scaffold (built with cargo as `ax
//! build` builds it, in the target directory the `scaffold` tests share)
//! deployed to a real `ax serve`, then run with `ax trigger --wait`; a
//! deploy again without a change builds nothing and keeps the uploaded
//! version, a change
//! without a new version is refused with what to bump, a bumped version
//! runs without an edit of the scaffold's task.yaml (`NAME@^0.1`), and a
//! broken source stops the deploy at the build.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{ax_at, ok};
use crate::crash::{AxProcess, TOKEN};
use crate::scaffold::{rust_build_env, scaffold};

/// `ax deploy ARGS` in `project`, against the server at `url`.
fn ax_deploy(url: &str, project: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("deploy")
        .args(args)
        .current_dir(project)
        .env("AX_URL", url)
        .env("AX_TOKEN", TOKEN)
        .env_remove("COLUMNS")
        .env_remove("RUST_LOG");
    rust_build_env(&mut cmd);
    cmd.output().expect("running ax deploy")
}

/// Stdout and stderr, for assertions' messages.
fn both(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The greeting of `ax trigger NAME --wait`, which must succeed.
fn trigger(url: &str, name: &str) -> String {
    let out = ax_at(
        url,
        &["trigger", name, "--wait", "--json", "--timeout", "60s"],
    );
    let run: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    run["steps"][0]["output"]["greeting"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Replaces `from` with `to` in the project's `file`, which must hold it.
fn edit(project: &Path, file: &str, from: &str, to: &str) {
    let path = project.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} holds no {from:?}:\n{text}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn deploy_builds_pushes_and_applies_a_rust_scaffold_and_refuses_changed_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let project = scaffold(tmp.path(), "deploy-rs", "rust");

    // The first deploy: one line per stage, then how to run it.
    let out = ax_deploy(url, &project, &[]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "build: building deploy-rs (rust): cargo build --release --target wasm32-wasip2",
        "build: built deploy-rs in ",
        "push: deploy-rs@0.1.0 uploaded (version from Cargo.toml), sha256:",
        "apply: task deploy-rs created from ./task.yaml",
        "deployed; run it: ax trigger deploy-rs --wait",
    ] {
        assert!(stdout.contains(line), "{line:?} missing: {shown}");
    }
    assert_eq!(trigger(url, "deploy-rs"), "hello, ax");

    // Again without a change: not built (no source is newer than the
    // component), the same bytes kept, the task replaced.
    let out = ax_deploy(url, &project, &[]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("build: up to date: no source changed since "),
        "{shown}"
    );
    assert!(!shown.contains("build: building"), "{shown}");
    assert!(
        shown.contains("push: deploy-rs@0.1.0 already uploaded with the same bytes, kept"),
        "{shown}"
    );
    assert!(shown.contains("apply: task deploy-rs replaced"), "{shown}");
    // --no-build pushes what is built, without running cargo.
    let out = ax_deploy(url, &project, &["--no-build"]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(shown.contains("build: skipped (--no-build): "), "{shown}");
    assert!(!shown.contains("build: building"), "{shown}");
    assert!(
        shown.contains("already uploaded with the same bytes"),
        "{shown}"
    );

    // A change under the same version: refused by the server's rule
    // (versions are immutable), with the file to bump; nothing applied.
    edit(&project, "src/lib.rs", "{greeting}, {}", "{greeting}!! {}");
    let out = ax_deploy(url, &project, &[]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("error: conflict: plugin deploy-rs@0.1.0 already exists with another digest"),
        "{shown}"
    );
    assert!(
        stderr.contains("bump the version in Cargo.toml (now 0.1.0)"),
        "{shown}"
    );
    assert!(stderr.contains("deploy: stopped at push"), "{shown}");
    assert!(!shown.contains("apply:"), "{shown}");
    assert_eq!(
        trigger(url, "deploy-rs"),
        "hello, ax",
        "the old one still runs"
    );

    // Bumped: deployed, and run without an edit of task.yaml, whose
    // `deploy-rs@^0.1` follows the 0.1 line.
    edit(
        &project,
        "Cargo.toml",
        "version = \"0.1.0\"",
        "version = \"0.1.1\"",
    );
    let out = ax_deploy(url, &project, &[]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("push: deploy-rs@0.1.1 uploaded (version from Cargo.toml)"),
        "{shown}"
    );
    assert!(!shown.contains("warning:"), "{shown}");
    assert_eq!(trigger(url, "deploy-rs"), "hello!! ax");

    // A task pinned to the old version: applied, with a warning, and it
    // goes on running the old one, as the warning says.
    edit(&project, "task.yaml", "deploy-rs@^0.1", "deploy-rs@0.1.0");
    let out = ax_deploy(url, &project, &[]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("build: up to date"),
        "a task file is applied, not built: {shown}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "warning: step `deploy-rs` of ./task.yaml runs deploy-rs@0.1.0, not \
             deploy-rs@0.1.1 just pushed: write `deploy-rs@0.1.1` there, or \
             `deploy-rs@^0.1` to follow new versions"
        ),
        "{shown}"
    );
    assert_eq!(
        trigger(url, "deploy-rs"),
        "hello, ax",
        "as the warning says"
    );

    // A broken source: the deploy stops at the build with cargo's error.
    let lib = project.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("{source}\nfn broken(\n")).unwrap();
    let out = ax_deploy(url, &project, &[]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: build: `cargo build --release --target wasm32-wasip2` failed"),
        "{shown}"
    );
    assert!(
        stderr.contains("unclosed delimiter"),
        "cargo's error: {shown}"
    );
    assert!(stderr.contains("deploy: stopped at build"), "{shown}");
    assert!(!shown.contains("push:"), "{shown}");
}

#[test]
fn deploy_outside_a_project_names_the_build_stage_and_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let out = ax_deploy("http://127.0.0.1:9", tmp.path(), &[]);
    let shown = both(&out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(shown.contains("no ax.yaml in ."), "{shown}");
    assert!(shown.contains("deploy: stopped at build"), "{shown}");
}

/// The Python and JavaScript scaffolds through the same first hour: `ax
/// deploy` builds (componentize-py, componentize-js: the tools of
/// `AX_PLUGIN_TOOLS`, as the `scaffold` tests use them), pushes and
/// applies, and the run on the server greets; `ax dev --once` runs the task
/// in the process on Winch's code, the fast tier a large component gets.
#[test]
fn deploy_and_dev_build_and_run_the_python_and_javascript_scaffolds() {
    for (lang, what, relative) in [
        ("python", "Python", "python/bin/componentize-py"),
        ("js", "JavaScript", "node/node_modules/.bin/componentize-js"),
    ] {
        let Some(tools) = crate::scaffold::tool(what, relative) else {
            continue;
        };
        let tmp = tempfile::tempdir().unwrap();
        let server = AxProcess::start(&tmp.path().join("data"));
        let url = server.url.as_str();
        let name = format!("first-{lang}");
        let project = scaffold(tmp.path(), &name, lang);
        if lang == "js" {
            // What `npm install` would put there, installed once by scripts/plugin-tools.
            std::os::unix::fs::symlink(
                tools.join("node/node_modules"),
                project.join("node_modules"),
            )
            .unwrap();
        }
        let with_tools = |cmd: &mut Command| {
            cmd.env("COMPONENTIZE_PY", tools.join("python/bin/componentize-py"))
                .env("AX_CACHE_DIR", tmp.path().join("cache"))
                .current_dir(&project)
                .env_remove("RUST_LOG");
        };

        let mut deploy = Command::new(env!("CARGO_BIN_EXE_ax"));
        deploy
            .arg("deploy")
            .env("AX_URL", url)
            .env("AX_TOKEN", TOKEN);
        with_tools(&mut deploy);
        let out = deploy.output().unwrap();
        let shown = both(&out);
        assert_eq!(out.status.code(), Some(0), "{lang}: {shown}");
        assert!(
            shown.contains(&format!("build: building {name} ({lang}): ")),
            "{lang}: {shown}"
        );
        assert!(
            shown.contains(&format!("deployed; run it: ax trigger {name} --wait")),
            "{lang}: {shown}"
        );
        assert_eq!(trigger(url, &name), "hello, ax", "{lang}");

        let mut dev = Command::new(env!("CARGO_BIN_EXE_ax"));
        dev.args(["dev", "--once", "--json", "-p", "name=dev"])
            .env("AX_URL", "http://127.0.0.1:9");
        with_tools(&mut dev);
        let out = dev.output().unwrap();
        let shown = both(&out);
        assert_eq!(out.status.code(), Some(0), "{lang}: {shown}");
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{lang}: not one JSON object on stdout ({e}): {shown}"));
        assert_eq!(v["run"]["status"], "succeeded", "{lang}: {v}");
        assert_eq!(
            v["run"]["steps"][0]["output"]["greeting"], "hello, dev",
            "{lang}: {v}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("(Winch's code, the fast tier) in "),
            "{lang}: {stderr}"
        );
    }
}
