//! `matches`, metered: cel's function replaced by one of ours with the same
//! semantics (the same `regex` crate), whose pattern's Thompson NFA is
//! limited to [`MAX_REGEX_BYTES`] and whose every match is charged as the
//! worst case of the engine's fallback, text bytes × NFA states.

use cel::ExecutionError;
use cel::common::types::{CelBool, CelString};
use cel::common::value::CowVal;

use super::meter::charge;
use super::{BYTES_PER_STEP, MAX_REGEX_BYTES};

/// A match costs text bytes × NFA states / this in steps: the engine's
/// worst case (its lazy DFA giving up, then a PikeVM walking every state for
/// every byte) does about this many byte-states in the time of one step.
const BYTE_STATES_PER_STEP: u64 = 64;

/// `matches(text, pattern)`.
pub(super) fn meter_matches<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    matches_of(args, false)
}

/// `text.matches(pattern)`.
pub(super) fn meter_matches_method<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    matches_of(args, true)
}

/// cel's `matches` (`regex::Regex::new(pattern)?.is_match(text)`, with its
/// error messages), metered: the pattern is compiled once per evaluation
/// within [`MAX_REGEX_BYTES`], and each match charged as the engine's worst
/// case.
fn matches_of<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    method: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let strings = match args.as_slice() {
        [text, pattern] => text
            .downcast_ref::<CelString>()
            .zip(pattern.downcast_ref::<CelString>()),
        _ => None,
    };
    let Some((text, pattern)) = strings else {
        let types = args
            .iter()
            .map(|a| a.get_type().name().to_owned())
            .collect();
        return Err(if method {
            ExecutionError::no_such_member_overload("matches", types)
        } else {
            ExecutionError::no_such_overload("matches", types)
        });
    };
    let (text, pattern) = (text.inner(), pattern.inner());
    let compiled = charge(|m| {
        m.spend(1 + (pattern.len() as u64) / BYTES_PER_STEP)?;
        let compiled = m.pattern(pattern)?;
        if let Ok(p) = &compiled {
            let byte_states = (text.len() as u64 + 1).saturating_mul(p.states);
            m.spend(byte_states / BYTE_STATES_PER_STEP + text.len() as u64 / BYTES_PER_STEP)?;
        }
        Ok(Some(compiled))
    });
    match compiled {
        Some(Ok(p)) => Ok(CowVal::owned(CelBool::from(p.regex.is_match(text)))),
        Some(Err(message)) => Err(ExecutionError::function_error("matches", message)),
        // No meter (not inside an evaluation): compile without one.
        None => match Pattern::compile(pattern) {
            Ok(p) => Ok(CowVal::owned(CelBool::from(p.regex.is_match(text)))),
            Err(message) => Err(ExecutionError::function_error("matches", message)),
        },
    }
}

/// A compiled `matches` pattern and the size of its NFA.
pub(super) struct Pattern {
    regex: regex::Regex,
    /// States of its Thompson NFA: the engine's work per byte in the worst
    /// case.
    pub(super) states: u64,
    /// Estimated heap size: the NFA's, four times over (the engine builds
    /// several automata from it).
    pub(super) bytes: u64,
}

impl Pattern {
    /// Compiles `pattern` as cel does (`regex::Regex::new`), refusing an NFA
    /// over [`MAX_REGEX_BYTES`]. The error reads after "the pattern …".
    pub(super) fn compile(pattern: &str) -> Result<Self, String> {
        use regex_automata::nfa::thompson;
        let too_large = || {
            format!(
                "'{pattern}' compiles to more than {} KiB (large counted repetitions \
                 such as `{{1000}}` multiply); simplify it",
                MAX_REGEX_BYTES >> 10
            )
        };
        // First as cel compiles it, for the same messages on a bad pattern.
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(MAX_REGEX_BYTES)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => too_large(),
                e => format!("'{pattern}' not a valid regex:\n{e}"),
            })?;
        let nfa = thompson::Compiler::new()
            .configure(thompson::Config::new().nfa_size_limit(Some(MAX_REGEX_BYTES)))
            .build(pattern)
            .map_err(|_| too_large())?;
        Ok(Self {
            regex,
            states: nfa.states().len() as u64,
            bytes: 4 * nfa.memory_usage() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use crate::cond::tests::{budget_error, eval_input, no_deadline};
    use crate::cond::{CondError, Condition};

    #[test]
    fn matches_patterns_are_checked_on_save_and_metered() {
        let syntax = |e: &str| match Condition::parse(e) {
            Err(CondError::Syntax(m)) => m,
            other => panic!("{e}: {other:?}"),
        };
        let m = syntax("input.x.matches('(foo')");
        assert!(
            m.starts_with("the pattern of matches() '(foo' not a valid regex:"),
            "{m}"
        );
        let m = syntax("matches(input.x, '(?:a{1000}){1000}')");
        assert!(m.contains("compiles to more than 256 KiB"), "{m}");
        // A pattern read from the run is compiled when evaluated, with cel's
        // messages.
        let input = json!({ "x": "orders-2026", "p": "^orders-[0-9]{4}$", "bad": "(foo" });
        let ok = no_deadline();
        assert_eq!(
            eval_input("input.x.matches(input.p)", &input, ok).0,
            Ok(true)
        );
        assert_eq!(
            eval_input("matches(input.x, input.p)", &input, ok).0,
            Ok(true)
        );
        let Err(CondError::Eval(m)) = eval_input("input.x.matches(input.bad)", &input, ok).0 else {
            panic!("a bad pattern fails the evaluation");
        };
        assert!(
            m.starts_with("Error executing function 'matches': '(foo' not a valid regex"),
            "{m}"
        );
        let Err(CondError::Eval(m)) = eval_input("input.x.matches(1)", &input, ok).0 else {
            panic!("a pattern must be a string");
        };
        assert_eq!(
            m,
            "found no matching overload for 'matches' applied to 'string.(int)'"
        );
        // Unicode classes fit the limit.
        assert!(
            Condition::parse(r"input.x.matches('^\\w+@\\w+\\.com$') || input.x.matches('\\d{4}')")
                .is_ok()
        );
        // A new pattern per item is compiled (and charged) per item.
        let many = json!({ "l": (0..100_000).map(|i| format!("^a{i}$")).collect::<Vec<_>>() });
        let (result, took) = eval_input("input.l.all(p, !'zzz'.matches(p))", &many, ok);
        budget_error(&result);
        assert!(took < Duration::from_secs(10), "{took:?}");
        // Each match is charged as the engine's worst case: text × states.
        let long = json!({ "s": "a".repeat(1 << 20), "l": (0..100).collect::<Vec<_>>() });
        let expr = "input.l.all(i, !input.s.matches('[a-z]{200}b'))";
        let (result, took) = eval_input(expr, &long, ok);
        budget_error(&result);
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
}
