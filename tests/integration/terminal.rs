//! What a plugin writes cannot drive the operator's terminal: a real
//! `ax serve`, the `probe` plugin writing terminal escapes (clear screen,
//! an OSC window title, CR, NUL, a C1 CSI, bidi overrides and isolates) in
//! its log message, a log field's key and value, stdout, stderr, progress,
//! output and error; then the `ax` commands people read it with. Their
//! human output holds visible escapes and no raw control character; their
//! `--json` output holds the exact text.

use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::common::plugin_path;
use crate::crash::{AxProcess, TOKEN};

/// Everything a terminal would act on, in one string.
const HOSTILE: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}all runs succeeded\r\0\u{9b}31m\u{7f}\u{202e}exe.txt\u{2066}x\u{2069}\u{2028}";

fn ax(server: &AxProcess, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .env("AX_URL", &server.url)
        .env("AX_TOKEN", TOKEN)
        // A table wide enough that no cell is cut.
        .env("COLUMNS", "10000")
        .output()
        .expect("running ax")
}

/// The raw characters a terminal acts on found in `out` (a newline ends a
/// line of output and is fine).
fn raw_controls(out: &[u8]) -> Vec<char> {
    String::from_utf8_lossy(out)
        .chars()
        .filter(|&c| {
            c != '\n'
                && matches!(c,
                    '\u{0}'..='\u{1f}'
                    | '\u{7f}'..='\u{9f}'
                    | '\u{61c}' | '\u{200e}' | '\u{200f}'
                    | '\u{2028}'..='\u{202e}'
                    | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

/// Runs `args`, which must succeed with human output free of raw controls
/// that shows the escaped form of [`HOSTILE`]; returns the output.
fn human(server: &AxProcess, args: &[&str]) -> String {
    let out = ax(server, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ax {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        raw_controls(&out.stdout),
        Vec::<char>::new(),
        "ax {args:?} printed raw control characters:\n{stdout:?}"
    );
    assert!(
        stdout.contains("\\x1b[2J\\x1b]0;pwned\\x07all runs succeeded\\r\\x00\\u{9b}31m\\x7f\\u{202e}exe.txt\\u{2066}x\\u{2069}\\u{2028}"),
        "ax {args:?} does not show the escaped text:\n{stdout}"
    );
    stdout
}

fn json_of(server: &AxProcess, args: &[&str]) -> Value {
    let out = ax(server, args);
    assert!(
        out.status.success(),
        "ax {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

#[test]
fn plugin_text_is_escaped_for_people_and_exact_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(&dir.path().join("data"));
    let probe = plugin_path("probe").display().to_string();
    let out = ax(
        &server,
        &[
            "plugin",
            "push",
            &probe,
            "--name",
            "probe",
            "--version",
            "1.0.0",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let task = dir.path().join("hostile.yaml");
    std::fs::write(
        &task,
        // Retried once, so the failure leaves a dead letter.
        "name: hostile\nplugin: probe@1.0.0\ninput: { ops: \"${input.ops}\" }\n\
         retry: { max_attempts: 2, backoff: [10ms], retry_on: [fatal] }\n",
    )
    .unwrap();
    let out = ax(
        &server,
        &["task", "apply", "-f", &task.display().to_string()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // One step that says the text everywhere, then fails with it.
    let input = json!({ "ops": [{ "say": HOSTILE }, { "fail": HOSTILE }] }).to_string();
    let out = ax(
        &server,
        &["trigger", "hostile", "--input", &input, "--wait", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["status"], "failed", "{run}");
    let id = run["id"].as_str().unwrap().to_string();

    // Logs: the message, the field's key and value, stdout, stderr.
    let logs = human(&server, &["logs", &id]);
    assert!(logs.contains("== step hostile attempt 2 =="), "{logs}");
    let v = json_of(&server, &["logs", &id, "--json"]);
    let attempt = &v["attempts"][0];
    assert_eq!(attempt["logs"][0]["message"], HOSTILE, "{attempt}");
    assert_eq!(attempt["logs"][0]["fields"][0], json!([HOSTILE, HOSTILE]));
    assert_eq!(attempt["stdout"], format!("{HOSTILE}\n"));
    assert_eq!(attempt["stderr"], format!("{HOSTILE}\n"));

    // The run: its step's error (the plugin's message) and the run listing.
    let show = human(&server, &["run", "show", &id]);
    assert!(show.contains("hostile error: "), "{show}");
    let v = json_of(&server, &["run", "show", &id, "--json"]);
    assert_eq!(v["steps"][0]["error"], HOSTILE, "{v}");
    let out = ax(&server, &["runs"]);
    assert!(out.status.success());
    assert_eq!(raw_controls(&out.stdout), Vec::<char>::new());

    // The dead letter the failure left, in the table of open ones.
    human(&server, &["dead-letters"]);
    let v = json_of(&server, &["dead-letters", "--json"]);
    assert_eq!(v["dead_letters"][0]["error"], HOSTILE, "{v}");
}
