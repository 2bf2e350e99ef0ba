//! Helpers shared by the integration tests.

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use ax::model::{AttemptContext, AttemptReport, Limits, TriggerKind};
use ax::runtime::{Plugin, Runtime, RuntimeConfig};

/// Whether the servers of the API, DAG and tenant tests run on PostgreSQL
/// (`AX_TEST_STORE=postgres`; scripts/test runs those tests a second time
/// so) instead of the store each test names.
pub(crate) fn on_postgres() -> bool {
    std::env::var("AX_TEST_STORE").as_deref() == Ok("postgres")
}

/// A scratch database for a server of those tests, under
/// `AX_TEST_STORE=postgres` (on the server `AX_TEST_POSTGRES` names).
pub(crate) fn scratch_database() -> Option<ax::store::postgres::testing::TestDatabase> {
    if !on_postgres() {
        return None;
    }
    let scratch = ax::store::postgres::testing::TestDatabase::create();
    assert!(
        scratch.is_some(),
        "AX_TEST_STORE=postgres needs AX_TEST_POSTGRES (scripts/test sets both)"
    );
    scratch
}

/// Whether a PostgreSQL server for the tests is named (`AX_TEST_POSTGRES`;
/// scripts/test sets it). Without one a test that needs it is skipped with
/// a line saying so, or fails under `AX_CI=1`.
pub(crate) fn postgres_server_named() -> bool {
    if std::env::var(ax::store::postgres::testing::SERVER_VAR).is_ok() {
        return true;
    }
    assert!(
        std::env::var("AX_CI").as_deref() != Ok("1"),
        "AX_TEST_POSTGRES is not set: scripts/test sets it"
    );
    eprintln!("skipped: AX_TEST_POSTGRES is not set (scripts/test sets it)");
    false
}

/// Folder of the plugins built to wasm32-wasip2 by host/build.rs.
pub(crate) fn plugin_path(name: &str) -> PathBuf {
    PathBuf::from(env!("AX_PLUGIN_DIR")).join(format!("{name}.wasm"))
}

pub(crate) fn plugin_bytes(name: &str) -> Vec<u8> {
    let path = plugin_path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// One runtime for the whole test binary: one engine, one pool, each plugin compiled once.
pub(crate) static RUNTIME: LazyLock<Runtime> =
    LazyLock::new(|| Runtime::new(RuntimeConfig::default()).expect("runtime"));

pub(crate) fn load(name: &str) -> Plugin {
    RUNTIME.load(&plugin_bytes(name)).expect("plugin loads")
}

pub(crate) fn context(step: &str) -> AttemptContext {
    AttemptContext {
        run_id: "run-1".into(),
        tenant: "acme".into(),
        task: "nightly".into(),
        step: step.into(),
        attempt: 1,
        scheduled_for: "2026-12-01T01:30:00Z".into(),
        trigger: TriggerKind::Cron,
    }
}

pub(crate) fn limits(timeout_ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        ..Limits::default()
    }
}

/// Runs `name` once with `input` and `limits`.
pub(crate) async fn run(name: &str, input: &str, limits: &Limits) -> AttemptReport {
    let plugin = load(name);
    RUNTIME
        .run(&plugin, &context(name), input, limits, None)
        .await
        .expect("no host fault")
}

/// `ax ARGS` against the server at `url` with the admin token.
pub(crate) fn ax_at(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .env("AX_URL", url)
        .env("AX_TOKEN", crate::crash::TOKEN)
        .env_remove("COLUMNS")
        .output()
        .expect("running ax")
}

/// The command succeeded; its stdout.
pub(crate) fn ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
