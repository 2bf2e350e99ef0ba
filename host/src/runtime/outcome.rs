//! Outcome mapping: how an attempt that did not return cleanly ended — a
//! timeout, output over its limit or not JSON, fuel exhausted, memory
//! refused, a trap (with the guest's panic message when it printed one).
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
    if outcome == Outcome::Trapped
        && let Some(panic) = panic_message(&report.stderr)
    {
        message = format!("{message}; {panic}");
    }
    report.error = Some(message);
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
