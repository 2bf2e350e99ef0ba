//! Outcome mapping: how an attempt that did not return cleanly ended — a
//! timeout, output over its limit or not JSON, fuel exhausted, memory
//! refused, a trap (with what the guest printed of why: a Python traceback,
//! a failed JavaScript error conversion, a Rust panic, else stderr's last
//! line).
//! Plugin misbehaviour is an [`Outcome`] in the report, never an error.

use wasmtime::Trap;

use super::host::MemoryLimiter;
use crate::model::{AttemptReport, ErrorKind, Limits, Outcome};

pub(super) fn set_timed_out(report: &mut AttemptReport, limits: &Limits) {
    report.outcome = Outcome::TimedOut;
    report.error = Some(format!(
        "timed out after {}; the plugin was stopped",
        humantime::format_duration(limits.timeout)
    ));
}

pub(super) fn settle_output(report: &mut AttemptReport, output: String, limits: &Limits) {
    if output.len() > limits.max_output_bytes {
        report.outcome = Outcome::OutputTooLarge;
        report.error = Some(format!(
            "output of {} bytes is above the limit of {} bytes",
            output.len(),
            limits.max_output_bytes
        ));
        return;
    }
    match serde_json::from_str(&output) {
        Ok(value) => report.output = Some(value),
        Err(e) => {
            report.outcome = Outcome::Failed;
            report.error_kind = Some(ErrorKind::Fatal);
            report.error = Some(format!("the plugin returned output that is not JSON: {e}"));
        }
    }
}

/// Tells apart the ways an instance can die. The order matters: a memory
/// denial shows up as a plain `unreachable` trap (the guest aborts on a failed
/// allocation), so the limiter's record is checked before the trap code.
pub(super) fn classify_trap(
    report: &mut AttemptReport,
    err: &wasmtime::Error,
    limiter: &MemoryLimiter,
    limits: &Limits,
) {
    let trap = err.downcast_ref::<Trap>().copied();
    let (outcome, message) = match trap {
        Some(Trap::OutOfFuel) => (
            Outcome::FuelExhausted,
            format!("fuel exhausted: all {} units consumed", limits.fuel),
        ),
        _ if limiter.denied().is_some() => {
            let wanted = limiter.denied().unwrap_or_default();
            (
                Outcome::MemoryExceeded,
                format!(
                    "memory limit of {} bytes exceeded: growing to {wanted} bytes was refused",
                    limits.memory_bytes
                ),
            )
        }
        Some(Trap::Interrupt) => (Outcome::TimedOut, "interrupted".to_string()),
        Some(Trap::StackOverflow) => (
            Outcome::Trapped,
            "stack overflow: call stack exhausted".to_string(),
        ),
        Some(trap) => (Outcome::Trapped, trap_message(trap)),
        None => (Outcome::Trapped, format!("{err:#}")),
    };
    report.outcome = outcome;
    let mut message = message;
    if outcome == Outcome::Trapped {
        if let Some(exception) = guest_exception(&report.stderr) {
            // The trap is only how the language runtime gave up; what the
            // plugin did is in what it printed first.
            message = exception;
        } else if let Some(panic) = panic_message(&report.stderr) {
            message = format!("{message}; {panic}");
        } else if let Some(tail) = stderr_tail(&report.stderr) {
            // A guest this module does not know (TinyGo's `panic: …`, a C
            // `assert`) usually says why on its last line before aborting.
            message = format!("{message}; stderr ends: {tail}");
        }
    }
    report.error = Some(message);
}

/// The longest [`stderr_tail`] kept in an error; the rest is in the attempt.
const STDERR_TAIL_CHARS: usize = 200;

/// The last line of `stderr` that says something, at most
/// [`STDERR_TAIL_CHARS`]; StarlingMonkey's own abort notice is not one.
fn stderr_tail(stderr: &str) -> Option<String> {
    let line = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && *l != "Redirecting call to abort() to mozalloc_abort")?;
    Some(match line.char_indices().nth(STDERR_TAIL_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    })
}

/// What the guest did, when a trap follows an exception that escaped `run`
/// as something other than the WIT's `task-error`: componentize-py prints
/// the Python traceback, componentize-js the message of the failed lowering
/// (`"undefined" is not one of the cases of error-kind` for a thrown
/// `TypeError`) above a `Stack:` line, before both abort.
fn guest_exception(stderr: &str) -> Option<String> {
    const NOT_WIT: &str = "the plugin threw an exception that is not an error of the WIT interface";
    if let Some(python) = python_exception(stderr) {
        return Some(format!("{NOT_WIT}: {python}"));
    }
    let lines: Vec<&str> = stderr.lines().collect();
    let stack = lines.iter().rposition(|l| l.trim_end() == "Stack:")?;
    let thrown = lines[..stack].iter().rev().find(|l| !l.trim().is_empty())?;
    let thrown = thrown.trim();
    Some(format!("{NOT_WIT}: {thrown} ({})", javascript_hint(thrown)))
}

/// The lowering componentize-js 0.23 reports when the thrown value has no
/// `kind` at all.
const JS_NO_KIND: &str = "\"undefined\" is not one of the cases of error-kind";

/// What to do about a JavaScript throw componentize-js could not lower.
/// A value without `kind` is nearly always an `Error` from a bug (or a
/// thrown string), and componentize-js prints neither its message nor its
/// stack, only the failed lowering: the error says so and names the
/// scaffold's wrapper, which keeps them (issue 34, item 2).
fn javascript_hint(thrown: &str) -> &'static str {
    if thrown.starts_with(JS_NO_KIND) {
        "the thrown value has no `kind`: an `Error` such as a `TypeError`, whose message \
         and line componentize-js does not print; export `run` as `task(run)` from the \
         scaffold's ax.js to see them here, or throw { kind: \"fatal\" or \"retryable\", \
         message }"
    } else {
        "to return an error, throw { kind: \"fatal\" or \"retryable\", message }"
    }
}

/// The last Python traceback in `stderr` as `Type: message (at file:line, in
/// function)`, the frame being the innermost one of the plugin's own code,
/// its file without folders. When the exception was raised deeper, in the
/// standard library or a dependency (`json.loads` of bad text), that frame
/// follows: `(at app.py:8, in run; raised at decoder.py:363, in raw_decode)`,
/// so the error names the plugin's line rather than only the library's.
fn python_exception(stderr: &str) -> Option<String> {
    let start = stderr.rfind("Traceback (most recent call last):")?;
    // (frame as shown, whether it is the plugin's own code)
    let mut innermost: Option<(String, bool)> = None;
    let mut own = None;
    for line in stderr[start..].lines().skip(1) {
        if let Some(rest) = line.trim_start().strip_prefix("File \"") {
            // `File "/0/app.py", line 6, in pick`
            let (path, rest) = rest.split_once('"')?;
            let file = path.rsplit('/').next().unwrap_or(path);
            let mut parts = rest.trim_start_matches(',').split(',').map(str::trim);
            let line_no = parts.next()?.strip_prefix("line ")?;
            let function = parts.next().and_then(|f| f.strip_prefix("in "));
            let shown = match function {
                Some(function) => format!("{file}:{line_no}, in {function}"),
                None => format!("{file}:{line_no}"),
            };
            let is_own = is_plugin_source(path);
            if is_own {
                own = Some(shown.clone());
            }
            innermost = Some((shown, is_own));
        } else if line.starts_with(char::is_whitespace) || line.trim().is_empty() {
            // A frame's source line (when the source was bundled).
            continue;
        } else {
            // The first unindented line: `IndexError: list index out of range`.
            let exception = line.trim();
            return Some(match (own, innermost) {
                (_, None) => exception.to_owned(),
                (Some(own), Some((deeper, false))) => {
                    format!("{exception} (at {own}; raised at {deeper})")
                }
                (_, Some((frame, _))) => format!("{exception} (at {frame})"),
            });
        }
    }
    None
}

/// Whether a traceback's file is the plugin's own code rather than what
/// componentize-py bundles around it: the standard library, under
/// `/python/`, or a package whose path names a `site-packages` folder. The
/// plugin's folders are `/0/`, `/1/`, … in the order of `-p`; a dependency
/// bundled from such a folder counts as the plugin's, so its innermost frame
/// is shown alone, as before.
fn is_plugin_source(path: &str) -> bool {
    !path.starts_with("/python/") && !path.contains("/site-packages/")
}

/// The prefix every trap's message carries, once.
const TRAP_PREFIX: &str = "wasm trap: ";

/// A trap's description behind one [`TRAP_PREFIX`]. wasmtime's `Display` for
/// [`Trap`] already writes that prefix, so adding it here again gave
/// `wasm trap: wasm trap: …` (issue 34); it is added only when missing.
fn trap_message(trap: Trap) -> String {
    let shown = trap.to_string();
    if shown.starts_with(TRAP_PREFIX) {
        shown
    } else {
        format!("{TRAP_PREFIX}{shown}")
    }
}

/// The panic line (and message) Rust guests print to stderr before aborting.
fn panic_message(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines();
    let at = lines.position(|l| l.contains("panicked at"))?;
    let mut all = stderr.lines().skip(at);
    let head = all.next()?.trim().to_string();
    match all.next() {
        Some(msg) if !msg.trim().is_empty() && !msg.starts_with("note:") => {
            Some(format!("{head} {}", msg.trim()))
        }
        _ => Some(head),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> AttemptReport {
        AttemptReport {
            outcome: Outcome::Succeeded,
            output: None,
            error: None,
            error_kind: None,
            fuel_consumed: 0,
            memory_peak_bytes: 0,
            duration_ms: 0.0,
            stdout: String::new(),
            stderr: String::new(),
            logs: Vec::new(),
            progress: None,
        }
    }

    #[test]
    fn a_trap_message_has_one_clean_prefix() {
        let mut report = report();
        let err = wasmtime::Error::from(Trap::UnreachableCodeReached);
        classify_trap(
            &mut report,
            &err,
            &MemoryLimiter::new(1 << 20),
            &Limits::default(),
        );
        assert_eq!(report.outcome, Outcome::Trapped);
        let error = report.error.unwrap();
        assert_eq!(error, "wasm trap: wasm `unreachable` instruction executed");
        assert_eq!(error.matches("wasm trap:").count(), 1, "{error}");
    }

    /// What componentize-py 0.25 prints before aborting on an `IndexError`.
    const PYTHON_STDERR: &str = "Traceback (most recent call last):\n  File \"/0/app.py\", line 11, in run\n  File \"/0/app.py\", line 6, in pick\nIndexError: list index out of range\n\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\nPython function threw an unexpected exception\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
    /// What componentize-js 0.23 prints before aborting on a thrown `TypeError`.
    const JS_STDERR: &str = "\"undefined\" is not one of the cases of error-kind\nStack:\n  export_run@/tmp/956180c15d03/sources/initializer.js:883:17\n\nRedirecting call to abort() to mozalloc_abort\n\n";

    fn trapped_with(stderr: &str) -> AttemptReport {
        let mut report = report();
        report.stderr = stderr.to_owned();
        let err = wasmtime::Error::from(Trap::UnreachableCodeReached);
        classify_trap(
            &mut report,
            &err,
            &MemoryLimiter::new(1 << 20),
            &Limits::default(),
        );
        report
    }

    #[test]
    fn a_python_exception_names_its_type_message_and_innermost_frame() {
        let report = trapped_with(PYTHON_STDERR);
        assert_eq!(report.outcome, Outcome::Trapped);
        assert_eq!(
            report.error.as_deref(),
            Some(
                "the plugin threw an exception that is not an error of the WIT interface: \
                 IndexError: list index out of range (at app.py:6, in pick)"
            )
        );
    }

    /// What componentize-py 0.25 prints for `json.loads("not json")` in
    /// `run`: the innermost frames are the standard library's.
    const PYTHON_LIBRARY_STDERR: &str = "Traceback (most recent call last):\n  File \"/0/app.py\", line 8, in run\n  File \"/python/json/__init__.py\", line 346, in loads\n  File \"/python/json/decoder.py\", line 345, in decode\n  File \"/python/json/decoder.py\", line 363, in raw_decode\njson.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\nPython function threw an unexpected exception\n";

    #[test]
    fn a_python_exception_raised_in_a_library_names_the_plugins_line_first() {
        let report = trapped_with(PYTHON_LIBRARY_STDERR);
        assert_eq!(
            report.error.as_deref(),
            Some(
                "the plugin threw an exception that is not an error of the WIT interface: \
                 json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0) \
                 (at app.py:8, in run; raised at decoder.py:363, in raw_decode)"
            )
        );
    }

    #[test]
    fn a_python_exception_only_in_library_frames_names_the_innermost() {
        let stderr = "Traceback (most recent call last):\n  File \"/1/site-packages/lib/x.py\", line 3, in f\nValueError: bad\n";
        assert_eq!(
            python_exception(stderr).as_deref(),
            Some("ValueError: bad (at x.py:3, in f)")
        );
    }

    #[test]
    fn a_javascript_throw_that_is_no_task_error_says_so_with_the_stderr_line() {
        let report = trapped_with(JS_STDERR);
        assert_eq!(report.outcome, Outcome::Trapped);
        let error = report.error.unwrap();
        assert!(
            error.starts_with(
                "the plugin threw an exception that is not an error of the WIT interface: \
                 \"undefined\" is not one of the cases of error-kind (the thrown value has \
                 no `kind`: an `Error` such as a `TypeError`"
            ),
            "{error}"
        );
        // Where the lost message can be had: the scaffold's wrapper.
        assert!(
            error.contains("`task(run)` from the scaffold's ax.js"),
            "{error}"
        );
        assert!(!error.contains("wasm trap"), "{error}");
    }

    #[test]
    fn a_javascript_throw_with_a_wrong_kind_is_told_the_kinds() {
        let stderr = JS_STDERR.replace("\"undefined\"", "\"fatl\"");
        let error = trapped_with(&stderr).error.unwrap();
        assert!(
            error.ends_with(
                "\"fatl\" is not one of the cases of error-kind (to return an error, \
                 throw { kind: \"fatal\" or \"retryable\", message })"
            ),
            "{error}"
        );
        assert!(!error.contains("ax.js"), "{error}");
    }

    #[test]
    fn a_rust_panic_keeps_the_trap_and_the_panic_message() {
        let report =
            trapped_with("\nthread '<unnamed>' panicked at src/lib.rs:5:5:\nboom\nnote: …\n");
        assert_eq!(
            report.error.as_deref(),
            Some(
                "wasm trap: wasm `unreachable` instruction executed; \
                 thread '<unnamed>' panicked at src/lib.rs:5:5: boom"
            )
        );
    }

    #[test]
    fn an_unknown_guest_trap_keeps_the_last_line_of_stderr() {
        // What TinyGo prints before its `unreachable`.
        let report = trapped_with(
            "starting\npanic: runtime error: index out of range [3] with length 1\n\n",
        );
        assert_eq!(
            report.error.as_deref(),
            Some(
                "wasm trap: wasm `unreachable` instruction executed; stderr ends: \
                 panic: runtime error: index out of range [3] with length 1"
            )
        );
        let long = "x".repeat(500);
        let error = trapped_with(&long).error.unwrap();
        assert!(error.ends_with(&format!("{}…", "x".repeat(200))), "{error}");
        assert!(
            !trapped_with("\nRedirecting call to abort() to mozalloc_abort\n")
                .error
                .unwrap()
                .contains("stderr ends"),
        );
        assert_eq!(
            trapped_with("").error.as_deref(),
            Some("wasm trap: wasm `unreachable` instruction executed")
        );
    }

    #[test]
    fn panic_message_takes_the_line_and_its_message() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:5:5:\nboom\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("thread '<unnamed>' panicked at src/lib.rs:5:5: boom")
        );
        assert_eq!(panic_message("nothing here"), None);
    }
}
