//! The Python and JavaScript example plugins (plugins/python, plugins/js)
//! on the real runtime, and the isolation proof of issue 16: a value one
//! attempt writes into its instance's state (a module global in Python, a
//! module variable in JavaScript, a `static` in Rust) is invisible to the
//! next attempt, however the pool reuses and resets instance slots.
//!
//! The polyglot components are built by `scripts/polyglot-plugins` (once
//! per test target, into its tmpdir; the script skips what is up to date)
//! with the tools `.ci/run` installs and names in `AX_PLUGIN_TOOLS`. Without
//! them the Python and JavaScript tests say so and pass, except under
//! `AX_CI=1`, where a missing tool fails them. The Rust case always runs.
//! Compiled artifacts are cached under the tmpdir too, so a rerun does not
//! compile the 12–18 MiB components again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use ax::model::{Limits, Outcome};
use ax::runtime::{Plugin, Runtime, RuntimeConfig};
use serde_json::{Value, json};

use crate::common::{context, limits, plugin_bytes};

/// The folder with the built polyglot plugins, or `None` (tests skipped)
/// when the tools are missing outside CI. Built once per test binary.
pub(crate) fn polyglot_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let tools = std::env::var_os("AX_PLUGIN_TOOLS")
            .map(PathBuf::from)
            .filter(|dir| {
                dir.join("python/bin/componentize-py").exists()
                    && dir.join("node/node_modules/.bin/componentize-js").exists()
            });
        let Some(tools) = tools else {
            let why = "the Python and JavaScript plugins need componentize-py and \
                       componentize-js under AX_PLUGIN_TOOLS (scripts/plugin-tools installs them)";
            if std::env::var("AX_CI").as_deref() == Ok("1") {
                panic!("{why}; AX_CI=1, so a missing tool is a failure");
            }
            eprintln!("skipped: {why}");
            return None;
        };
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("polyglot");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/polyglot-plugins");
        let status = Command::new(script)
            .arg(&out)
            .env("AX_PLUGIN_TOOLS", &tools)
            .status()
            .unwrap_or_else(|e| panic!("starting {script}: {e}"));
        assert!(status.success(), "{script} failed: {status}");
        Some(out)
    })
    .as_deref()
}

/// Compiled artifacts shared by every runtime of this module (and reruns).
fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("polyglot-cache")
}

/// The bytes of `name`: a polyglot plugin (`echo_py`, `remember_js`, …)
/// from the script's folder, or a Rust one from host/build.rs.
fn bytes(name: &str) -> Option<Vec<u8>> {
    if name.ends_with("_py") || name.ends_with("_js") {
        let path = polyglot_dir()?.join(format!("{name}.wasm"));
        Some(std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display())))
    } else {
        Some(plugin_bytes(name))
    }
}

/// Enough for a Python attempt on a loaded machine (a first attempt of a
/// plugin also pays for nothing else: it is compiled at load).
fn polyglot_limits() -> Limits {
    Limits {
        memory_bytes: 64 << 20,
        ..limits(30_000)
    }
}

async fn run_once(runtime: &Runtime, plugin: &Plugin, name: &str, input: &str) -> Value {
    let report = runtime
        .run(plugin, &context(name), input, &polyglot_limits(), None)
        .await
        .expect("no host fault");
    assert_eq!(report.outcome, Outcome::Succeeded, "{name}: {report:?}");
    report.output.expect("an output")
}

#[tokio::test]
async fn python_and_javascript_echo_return_their_input_and_the_context() {
    if polyglot_dir().is_none() {
        return;
    }
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    for name in ["echo_py", "echo_js"] {
        let plugin = runtime.load(&bytes(name).unwrap()).expect("plugin loads");
        let output = run_once(&runtime, &plugin, name, r#"{"n": 7, "s": "é"}"#).await;
        assert_eq!(output["input"], json!({"n": 7, "s": "é"}), "{name}");
        assert_eq!(output["context"]["tenant"], "acme", "{name}");
        assert_eq!(output["context"]["step"], name, "{name}");
        assert_eq!(output["context"]["attempt"], 1, "{name}");
        assert_eq!(output["context"]["trigger"], "cron", "{name}");
        assert_eq!(
            output["context"]["scheduled_for"], "2026-12-01T01:30:00Z",
            "{name}"
        );
    }
}

/// The pool set-ups an attempt may land in: the default (128 slots, slots
/// kept warm per plugin, dirty pages reset in place), one slot (every
/// attempt reuses the very slot the previous one dirtied), a large
/// keep-resident (nothing handed back to the kernel: every reset is a copy
/// in place), resets of whole resident regions without `PAGEMAP_SCAN`, and
/// no pooling at all.
fn setups() -> Vec<(&'static str, RuntimeConfig)> {
    let base = RuntimeConfig {
        cache_dir: Some(cache_dir()),
        ..RuntimeConfig::default()
    };
    vec![
        ("default pool", base.clone()),
        (
            "one slot",
            RuntimeConfig {
                max_instances: 1,
                ..base.clone()
            },
        ),
        (
            "64 MiB kept resident",
            RuntimeConfig {
                max_instances: 2,
                memory_keep_resident: 64 << 20,
                ..base.clone()
            },
        ),
        (
            "no pagemap scan",
            RuntimeConfig {
                max_instances: 2,
                pagemap_scan: false,
                ..base.clone()
            },
        ),
        (
            "no pooling",
            RuntimeConfig {
                pooling: false,
                ..base
            },
        ),
    ]
}

/// Separate runs of dirty pages each attempt leaves (`spread` in the
/// probe's input): more than one `PAGEMAP_SCAN` of wasmtime's pool
/// reports (32 runs in wasmtime 48, which then decommits the rest; 64 in
/// 50, which scans on), so a reset must get past its first scan.
const SPREAD: usize = 200;

/// Attempts of `remember*` one after another and two at a time: each must
/// find the plugin's state as the component left it (`before` null, no mark
/// of its spread buffer), and see its own writes (`after`, `SPREAD` marks),
/// which shows the writes are real.
async fn state_does_not_survive_an_attempt(name: &str) {
    let Some(bytes) = bytes(name) else {
        return;
    };
    for (setup, config) in setups() {
        let runtime = Runtime::new(config).unwrap();
        let plugin = runtime.load(&bytes).expect("plugin loads");
        for i in 0..4 {
            let secret = format!("{setup}: secret {i}");
            let input = json!({ "write": secret, "spread": SPREAD }).to_string();
            let output = run_once(&runtime, &plugin, name, &input).await;
            assert_eq!(
                output,
                json!({
                    "before": null,
                    "after": secret,
                    "spread": { "before": 0, "after": SPREAD },
                }),
                "{name}, {setup}, attempt {i}: the value of an earlier attempt leaked"
            );
        }
        let inputs = ["a", "b"]
            .map(|w| json!({ "write": format!("{setup}: {w}"), "spread": SPREAD }).to_string());
        let (a, b) = tokio::join!(
            run_once(&runtime, &plugin, name, &inputs[0]),
            run_once(&runtime, &plugin, name, &inputs[1]),
        );
        for (output, w) in [(a, "a"), (b, "b")] {
            assert_eq!(
                output,
                json!({
                    "before": null,
                    "after": format!("{setup}: {w}"),
                    "spread": { "before": 0, "after": SPREAD },
                }),
                "{name}, {setup}, in parallel"
            );
        }
    }
}

#[tokio::test]
async fn a_rust_static_written_by_one_attempt_is_invisible_to_the_next() {
    state_does_not_survive_an_attempt("remember").await;
}

#[tokio::test]
async fn a_python_global_written_by_one_attempt_is_invisible_to_the_next() {
    state_does_not_survive_an_attempt("remember_py").await;
}

#[tokio::test]
async fn a_javascript_variable_written_by_one_attempt_is_invisible_to_the_next() {
    state_does_not_survive_an_attempt("remember_js").await;
}

/// An exception the Python standard library raised (`json.loads` of text
/// that is not JSON) names the plugin's line that called it, then the
/// library's frame: the innermost frame alone pointed into `decoder.py`,
/// away from the plugin's bug (issue 34, item 3).
#[tokio::test]
async fn a_python_exception_raised_in_the_standard_library_names_the_plugins_line() {
    if polyglot_dir().is_none() {
        return;
    }
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let plugin = runtime
        .load(&bytes("throw_py").unwrap())
        .expect("plugin loads");
    let input = r#"{"parse": "not json"}"#;
    let report = runtime
        .run(
            &plugin,
            &context("throw_py"),
            input,
            &polyglot_limits(),
            None,
        )
        .await
        .expect("no host fault");
    assert_eq!(report.outcome, Outcome::Trapped, "{report:?}");
    let error = report.error.unwrap_or_default();
    assert!(
        error.starts_with(
            "the plugin threw an exception that is not an error of the WIT interface: \
             json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0) \
             (at app.py:21, in run; raised at decoder.py:"
        ),
        "{error}"
    );
}

/// An exception that escapes `run` without becoming the WIT's `task-error`
/// (the scaffolds' wrappers are not used) still traps, and the error says
/// what the plugin threw: the Python type, message and innermost frame from
/// the traceback; for JavaScript the failed conversion componentize-js
/// printed, that the thrown `Error`'s message is lost there, and the
/// scaffold's wrapper that keeps it.
#[tokio::test]
async fn an_exception_escaping_run_is_named_in_the_error() {
    if polyglot_dir().is_none() {
        return;
    }
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let not_wit = "the plugin threw an exception that is not an error of the WIT interface: ";
    for (name, expected) in [
        (
            "throw_py",
            "IndexError: list index out of range (at app.py:12, in third)",
        ),
        (
            "throw_js",
            "\"undefined\" is not one of the cases of error-kind (the thrown value has no \
             `kind`: an `Error` such as a `TypeError`, whose message and line componentize-js \
             does not print; export `run` as `task(run)` from the scaffold's ax.js",
        ),
    ] {
        let plugin = runtime.load(&bytes(name).unwrap()).expect("plugin loads");
        let report = runtime
            .run(&plugin, &context(name), "{}", &polyglot_limits(), None)
            .await
            .expect("no host fault");
        assert_eq!(report.outcome, Outcome::Trapped, "{name}: {report:?}");
        let error = report.error.unwrap_or_default();
        assert!(
            error.starts_with(&format!("{not_wit}{expected}")),
            "{name}: {error}"
        );
        assert!(!error.contains("wasm trap"), "{name}: {error}");
    }
}
