//! ax on a real PostgreSQL server (`scripts/test` starts one and names it
//! in `AX_TEST_POSTGRES`; each test makes a scratch database on it):
//! `ax store migrate` applies the embedded migrations once, `--dry-run`
//! prints them and changes nothing, and a server that does not answer is
//! one clear line with exit 1, its password never printed.

use std::process::Command;

use ax::store::postgres::testing::TestDatabase;

fn migrate(url: &str, dry_run: bool) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.args(["store", "migrate", "--store", url]);
    if dry_run {
        cmd.arg("--dry-run");
    }
    let out = cmd.output().expect("ax runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn store_migrate_dry_runs_then_applies_once() {
    let Some(scratch) = TestDatabase::create() else {
        return;
    };
    let latest = ax::store::postgres::latest();
    let (ok, out) = migrate(scratch.url(), true);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "schema version 0, this ax's is {latest}; {latest} migration(s) would run"
        )),
        "{out}"
    );
    assert!(
        out.contains("-- migration 1: schema") && out.contains("CREATE TABLE ax_runs"),
        "{out}"
    );
    // The dry run wrote nothing: a second one says the same.
    let (ok, again) = migrate(scratch.url(), true);
    assert!(ok && again.contains("schema version 0,"), "{again}");

    let (ok, out) = migrate(scratch.url(), false);
    assert!(ok, "{out}");
    assert!(out.contains("applied migration 1 (schema)"), "{out}");
    let (ok, out) = migrate(scratch.url(), false);
    assert!(ok && !out.contains("applied"), "{out}");
    let (ok, out) = migrate(scratch.url(), true);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "schema version {latest}, current: nothing would run"
        )),
        "{out}"
    );
}

#[test]
fn store_migrate_against_a_closed_port_is_one_line_without_the_password() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bound");
        listener.local_addr().expect("an address").port()
    };
    let (ok, out) = migrate(&format!("postgres://ax:hunter2@127.0.0.1:{port}/ax"), false);
    assert!(!ok, "{out}");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
    assert!(
        out.contains(&format!("postgres://ax:***@127.0.0.1:{port}/ax")),
        "{out}"
    );
    assert_eq!(out.trim().lines().count(), 1, "{out}");
}

/// `ax serve --store postgres://…`: a task applied and triggered on one
/// server runs to its end; a second server started on the same database
/// after a SIGKILL of the first finds the run, its plugin and its task, and
/// runs 20 runs accepted just before the kill to their end.
#[test]
fn ax_serve_on_postgres_runs_a_task_and_keeps_it_across_sigkill() {
    use crate::crash::{AxProcess, call, new_agent};
    let Some(scratch) = TestDatabase::create() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = std::ffi::OsString::from(scratch.url());
    let args = [std::ffi::OsStr::new("--store"), store.as_os_str()];
    let agent = new_agent();
    let ax = AxProcess::start_with(&dir.path().join("a"), &args);
    ax.upload(&agent, "echo");
    let task = b"name: greet\nplugin: echo@1.0.0\ninput: {\"who\": \"pg\"}\n";
    let (status, body) = call(
        &agent,
        "PUT",
        &format!("{}/v1/tasks/greet", ax.url),
        Some(task),
        "application/yaml",
    )
    .expect("the server answers");
    assert!((200..300).contains(&status), "{status} {body}");
    let trigger = |url: &str| -> String {
        let (status, run) = call(
            &agent,
            "POST",
            &format!("{url}/v1/tasks/greet/runs"),
            Some(b"{}"),
            "application/json",
        )
        .expect("the server answers");
        assert!((200..300).contains(&status), "{status} {run}");
        run["id"].as_str().expect("a run id").to_string()
    };
    let wait = |url: &str, id: &str| -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (_, run) = call(&agent, "GET", &format!("{url}/v1/runs/{id}"), None, "")
                .expect("the server answers");
            if run["status"] == "succeeded" || run["status"] == "failed" {
                return run;
            }
            assert!(std::time::Instant::now() < deadline, "{run}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let first = trigger(&ax.url);
    let run = wait(&ax.url, &first);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["steps"][0]["output"]["input"]["who"], "pg", "{run}");
    let accepted: Vec<String> = (0..20).map(|_| trigger(&ax.url)).collect();
    ax.kill();

    // Another data directory: everything but the compiled artifacts is in
    // the database.
    let ax = AxProcess::start_with(&dir.path().join("b"), &args);
    assert_eq!(wait(&ax.url, &first)["status"], "succeeded");
    for id in &accepted {
        let run = wait(&ax.url, id);
        assert_eq!(run["status"], "succeeded", "{run}");
    }
    assert_eq!(wait(&ax.url, &trigger(&ax.url))["status"], "succeeded");
}
