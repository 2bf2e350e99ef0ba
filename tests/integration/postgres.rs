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
