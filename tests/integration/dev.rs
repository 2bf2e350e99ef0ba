//! `ax dev` on the real binary (issue 34, item 5): a Rust scaffold, built
//! with cargo as `ax build` builds it (the target directory the `scaffold`
//! tests share), its task.yaml run in the process. `--once` builds and runs
//! once; without it, `ax dev` keeps watching: a broken source prints the
//! build's error and it goes on, a fixed and changed one runs again with
//! the change, and Ctrl-C ends it cleanly. `ax dev --url` runs each build
//! on a real `ax serve` instead: pushed as a development version, the task
//! applied naming it and triggered, the version it replaced deleted; a
//! server that is not there is one line and exit 2, before any build.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{ax_at, ok};
use crate::crash::{AxProcess, TOKEN};
use crate::scaffold::{rust_build_env, scaffold};

/// `ax dev ARGS` in `project`, with its own artifact cache and no server.
fn ax_dev(project: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("dev")
        .args(args)
        .current_dir(project)
        .env("AX_CACHE_DIR", project.join("../cache"))
        .env("AX_URL", "http://127.0.0.1:9")
        .env_remove("RUST_LOG");
    rust_build_env(&mut cmd);
    cmd
}

#[test]
fn dev_once_builds_the_rust_scaffold_runs_its_task_and_exits_with_the_runs_code() {
    let tmp = tempfile::tempdir().unwrap();
    let project = scaffold(tmp.path(), "dev-once", "rust");
    let out = ax_dev(&project, &["--once", "--json", "-p", "name=dev"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object on stdout");
    assert_eq!(v["run"]["status"], "succeeded", "{v}");
    assert_eq!(v["run"]["steps"][0]["output"]["greeting"], "hello, dev");
    assert!(stderr.contains("building dev-once (rust)"), "{stderr}");
    assert!(stderr.contains("built in"), "{stderr}");

    // The attempt ran the project's version, which the task's `^0.1`
    // resolves to; a bumped one runs without an edit of task.yaml.
    let attempt = &v["run"]["steps"][0]["attempts"][0];
    assert_eq!(attempt["plugin_version"], "0.1.0", "{v}");
    let manifest = project.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let bumped = text.replacen("version = \"0.1.0\"", "version = \"0.1.1\"", 1);
    assert_ne!(bumped, text, "the scaffold's Cargo.toml names 0.1.0");
    std::fs::write(&manifest, bumped).unwrap();
    let out = ax_dev(&project, &["--once", "--json"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object on stdout");
    let attempt = &v["run"]["steps"][0]["attempts"][0];
    assert_eq!(attempt["plugin_version"], "0.1.1", "{v}");

    // A run that fails (the plugin refuses an empty name): exit 1, the
    // error printed as `ax run show` prints it.
    let out = ax_dev(&project, &["--once", "-p", "name="])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("status    failed"), "{stdout}");
    assert!(stdout.contains("`name` is empty"), "{stdout}");

    // A build that fails: exit 1, with the command.
    let lib = project.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("{source}\nfn broken(\n")).unwrap();
    let out = ax_dev(&project, &["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: build: `cargo build --release --target wasm32-wasip2` failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("unclosed delimiter"),
        "cargo's error: {stderr}"
    );
}

/// Lines of a child's stdout and stderr, as they come.
struct Lines {
    rx: mpsc::Receiver<String>,
    seen: String,
}

impl Lines {
    fn of(child: &mut std::process::Child) -> Self {
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx2.send(line);
            }
        });
        Self {
            rx,
            seen: String::new(),
        }
    }

    /// Waits for a line containing `text`; the lines up to it.
    fn until(&mut self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut got = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    got.push_str(&line);
                    got.push('\n');
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if line.contains(text) {
                        return got;
                    }
                }
                Err(_) => panic!("no `{text}` within {within:?}; so far:\n{}", self.seen),
            }
        }
    }
}

/// A child killed when the test ends, passed or not: `ax dev` never ends
/// by itself.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dev_watches_the_sources_and_runs_again_on_every_change_until_ctrl_c() {
    let tmp = tempfile::tempdir().unwrap();
    let project = scaffold(tmp.path(), "dev-watch", "rust");
    let mut child = KillOnDrop(
        ax_dev(&project, &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = Lines::of(&mut child.0);
    // The first build may compile the SDK's dependencies.
    let first = lines.until(
        "dev-watch output: {\"greeting\":\"hello, ax\"}",
        Duration::from_secs(600),
    );
    assert!(first.contains("== step dev-watch attempt 1 =="), "{first}");
    lines.until("watching . for changes", Duration::from_secs(10));

    // A broken source: the build's error, and it keeps watching.
    let lib = project.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("{source}\nfn broken(\n")).unwrap();
    let mut broken = lines.until("from the change to the error", Duration::from_secs(120));
    // The build's error is on stderr and the timing line on stdout: two
    // pipes read by two threads, so either may arrive first.
    let error = "error: build: `cargo build";
    if !broken.contains(error) {
        broken.push_str(&lines.until(error, Duration::from_secs(10)));
    }
    assert!(broken.contains("── changed: src/lib.rs "), "{broken}");
    assert!(broken.contains("unclosed delimiter"), "{broken}");

    // Fixed, with a change: the next run shows it.
    let changed = source.replace("{greeting}, {}", "{greeting}!! {}");
    assert_ne!(changed, source, "the scaffold's greeting changed shape");
    std::fs::write(&lib, changed).unwrap();
    let again = lines.until("from the change to the result", Duration::from_secs(120));
    assert!(
        again.contains("dev-watch output: {\"greeting\":\"hello!! ax\"}"),
        "{again}"
    );
    assert!(again.contains("status    succeeded"), "{again}");

    // Ctrl-C: a clean end.
    let pid = child.0.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            panic!("ax dev did not stop on SIGINT:\n{}", lines.seen);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", lines.seen);
    lines.until("ax dev: stopped", Duration::from_secs(5));
}

/// `ax dev --url URL --once ARGS` in `project`; exit code, stdout, stderr.
fn ax_dev_at(url: &str, project: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = ax_dev(project, &["--url", url, "--once"])
        .args(args)
        .env("AX_TOKEN", TOKEN)
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The development version named after `name@` in `text`.
fn dev_version_in(text: &str, name: &str) -> String {
    let at = format!("{name}@0.1.0-dev.");
    let start = text
        .find(&at)
        .unwrap_or_else(|| panic!("no {at} in:\n{text}"))
        + name.len()
        + 1;
    text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
        .collect()
}

#[test]
fn dev_url_pushes_each_build_as_a_development_version_runs_it_there_and_deletes_the_one_it_replaced()
 {
    let tmp = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&tmp.path().join("data"));
    let url = server.url.as_str();
    let project = scaffold(tmp.path(), "dev-url", "rust");

    // The first run: pushed, applied, run on the server, printed.
    let (code, stdout, stderr) = ax_dev_at(url, &project, &["-p", "name=remote"]);
    let shown = format!("exit {code:?}\n--- stdout\n{stdout}--- stderr\n{stderr}");
    assert_eq!(code, Some(0), "{shown}");
    let first = dev_version_in(&stdout, "dev-url");
    for line in [
        format!("push: dev-url@{first} uploaded (a development version of Cargo.toml's 0.1.0)"),
        format!("apply: task dev-url created naming dev-url@{first}, without its time trigger"),
        "== step dev-url attempt 1 ==".to_owned(),
        "dev-url output: {\"greeting\":\"hello, remote\"}".to_owned(),
        "status    succeeded".to_owned(),
    ] {
        assert!(stdout.contains(&line), "{line:?} missing: {shown}");
    }
    assert!(!shown.contains("deleted"), "nothing to delete yet: {shown}");

    // The server holds the run and the version.
    let runs: Value =
        serde_json::from_str(&ok(&ax_at(url, &["runs", "--task", "dev-url", "--json"]))).unwrap();
    let run = &runs["runs"][0];
    assert_eq!(run["status"], "succeeded", "{runs}");
    let id = run["id"].as_str().unwrap();
    let shown_run: Value =
        serde_json::from_str(&ok(&ax_at(url, &["run", "show", id, "--json"]))).unwrap();
    let attempt = &shown_run["steps"][0]["attempts"][0];
    assert_eq!(attempt["plugin_version"], first.as_str(), "{shown_run}");
    let version = format!("dev-url@{first}");
    let plugin: Value =
        serde_json::from_str(&ok(&ax_at(url, &["plugin", "show", &version, "--json"]))).unwrap();
    assert_eq!(plugin["status"], "ready", "{plugin}");

    // A change: a new development version runs it, and the one it
    // replaced is deleted once that run ended.
    let lib = project.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, source.replace("{greeting}, {}", "{greeting}!! {}")).unwrap();
    let (code, stdout, stderr) = ax_dev_at(url, &project, &["--json"]);
    let shown = format!("exit {code:?}\n--- stdout\n{stdout}--- stderr\n{stderr}");
    assert_eq!(code, Some(0), "{shown}");
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object on stdout");
    assert_eq!(
        v["run"]["steps"][0]["output"]["greeting"], "hello!! ax",
        "{shown}"
    );
    let second = dev_version_in(&stderr, "dev-url");
    assert_ne!(second, first);
    assert_eq!(
        v["run"]["steps"][0]["attempts"][0]["plugin_version"],
        second.as_str()
    );
    assert!(
        stderr.contains(&format!(
            "apply: task dev-url replaced naming dev-url@{second}"
        )),
        "{shown}"
    );
    assert!(
        stderr.contains(&format!(
            "dev: deleted dev-url@{first}, the development version this one replaced"
        )),
        "{shown}"
    );
    let gone = ax_at(url, &["plugin", "show", &version]);
    assert_eq!(gone.status.code(), Some(2), "{version} is deleted");
    let task: Value =
        serde_json::from_str(&ok(&ax_at(url, &["task", "show", "dev-url", "--json"]))).unwrap();
    assert_eq!(
        task["spec"]["steps"][0]["plugin"],
        format!("dev-url@{second}"),
        "{task}"
    );
    // A failed run: exit 1, printed as `ax run show` prints it. `--url`
    // alone takes AX_URL's.
    let out = ax_dev(&project, &["--url", "--once", "-p", "name="])
        .env("AX_URL", url)
        .env("AX_TOKEN", TOKEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("status    failed"), "{stdout}");
    assert!(stdout.contains("`name` is empty"), "{stdout}");
}

#[test]
fn dev_url_with_no_server_there_says_so_in_one_line_and_exits_2_before_building() {
    let tmp = tempfile::tempdir().unwrap();
    let project = scaffold(tmp.path(), "dev-gone", "rust");
    let (code, stdout, stderr) = ax_dev_at("http://127.0.0.1:9", &project, &[]);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert_eq!(stdout, "", "nothing built or run");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: connection: cannot reach the ax server at http://127.0.0.1:9"),
        "{stderr}"
    );
}
