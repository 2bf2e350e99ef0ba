//! ax on a real PostgreSQL server (`scripts/test` starts one and names it
//! in `AX_TEST_POSTGRES`; each test makes a scratch database on it):
//! `ax store migrate` applies the embedded migrations once, `--dry-run`
//! prints them and changes nothing, and a server that does not answer is
//! one clear line with exit 1, its password never printed; a server on it
//! names its store and pool in `/readyz`, `/metrics` and `ax status`.

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

/// `/readyz`, `/metrics` and `ax status` of a server on PostgreSQL name the
/// store (`postgres`, its URL in `/metrics` only) and its pool's use.
#[test]
fn ax_serve_on_postgres_reports_its_store_and_pool() {
    use crate::crash::{AxProcess, TOKEN, call, new_agent};
    let Some(scratch) = TestDatabase::create() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = std::ffi::OsString::from(scratch.url());
    let args = [std::ffi::OsStr::new("--store"), store.as_os_str()];
    let agent = new_agent();
    let ax = AxProcess::start_with(dir.path(), &args);

    let (status, ready) =
        call(&agent, "GET", &format!("{}/readyz", ax.url), None, "").expect("answers");
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["store"]["kind"], "postgres", "{ready}");
    let pool = &ready["store"]["pool"];
    assert_eq!(pool["max"], 8, "the default store.connections: {ready}");
    assert!(
        pool["open"].as_u64().is_some_and(|n| (1..=8).contains(&n)),
        "{ready}"
    );
    assert!(pool["in_use"].as_u64().is_some_and(|n| n <= 8), "{ready}");
    assert_eq!(pool["connection_errors"], 0, "{ready}");
    assert!(pool["calls"].as_u64().is_some_and(|n| n > 0), "{ready}");
    assert!(
        pool["mean_call_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{ready}"
    );
    assert!(ready["store"].get("location").is_none(), "{ready}");

    let text = agent
        .get(format!("{}/metrics", ax.url))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .expect("scraped")
        .body_mut()
        .read_to_string()
        .expect("text");
    let sample = |key: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no sample {key} in\n{text}"))
    };
    let info = format!(
        "ax_store_info{{kind=\"postgres\",location=\"{}\"}}",
        scratch.url()
    );
    assert_eq!(sample(&info), 1.0);
    assert_eq!(sample("ax_store_pool_max_connections"), 8.0);
    let in_use = sample("ax_store_pool_connections{state=\"in_use\"}");
    let idle = sample("ax_store_pool_connections{state=\"idle\"}");
    assert!((1.0..=8.0).contains(&(in_use + idle)), "{text}");
    assert_eq!(sample("ax_store_connection_errors_total"), 0.0);
    assert!(sample("ax_store_query_seconds_count") > 0.0);
    assert!(sample("ax_store_query_seconds_bucket{le=\"+Inf\"}") > 0.0);

    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["status"])
        .env("AX_URL", &ax.url)
        .env("AX_TOKEN", TOKEN)
        .output()
        .expect("ax runs");
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let line = human
        .lines()
        .find(|l| l.starts_with("store "))
        .unwrap_or_else(|| panic!("no store line in {human}"));
    assert!(
        line.contains("postgres: ") && line.contains(" of 8 connections in use"),
        "{line}"
    );
    assert!(line.contains("0 connection errors"), "{line}");
}
