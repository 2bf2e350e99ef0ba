//! Why a condition was refused or could not be evaluated ([`CondError`]),
//! and the words of its messages: CEL's own, cut to a bounded length, with
//! a hint for the common mistakes.

use cel::{ExecutionError, Value};

use super::MAX_LEN;

/// Longest CEL message kept in an error (messages may quote whole values).
const MAX_MESSAGE_CHARS: usize = 240;

/// Why a condition was refused or could not be evaluated. The `Display` text
/// follows the field's path: `steps[2].when: is 1100 bytes; the limit is 1024`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CondError {
    /// Only white space.
    #[error("is empty; remove `when` or write a condition")]
    Empty,
    /// Longer than [`MAX_LEN`].
    #[error("is {len} bytes; the limit is {MAX_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Nested deeper than [`MAX_DEPTH`](super::MAX_DEPTH) brackets or
    /// [`MAX_EXPR_DEPTH`](super::MAX_EXPR_DEPTH)
    /// expression levels; the message says which.
    #[error("{0}")]
    TooDeep(String),
    /// Refused on save: even on the smallest input it would take more than
    /// [`MAX_EVAL_STEPS`](super::MAX_EVAL_STEPS) (macros nested over literal lists).
    #[error("{0}")]
    TooCostly(String),
    /// Not a valid condition: the message says what and, from the CEL
    /// parser, where (`syntax error at column 7: …`).
    #[error("{0}")]
    Syntax(String),
    /// Evaluation failed: a missing field, mismatched types, division by
    /// zero… The CEL message, with a hint for the common cases.
    #[error("evaluation failed: {0}")]
    Eval(String),
    /// Evaluated to something other than a bool (described in the message).
    #[error("evaluated to {0}, not a bool")]
    NotBool(String),
    /// Evaluation stopped: it took more steps, built more values or ran
    /// longer than its [`Budget`](super::Budget) allows (the message says which).
    #[error("exceeded its budget: {0}")]
    Budget(String),
    /// The host could not run the check (no thread could be started, or the
    /// CEL library panicked). Not the condition's fault.
    #[error("could not be checked: {0}")]
    Internal(String),
}

/// The CEL error message (cut to [`MAX_MESSAGE_CHARS`]), with a hint for
/// the common mistakes.
pub(super) fn eval_message(e: &ExecutionError) -> String {
    let hint = match e {
        ExecutionError::NoSuchKey(_) => "; test for a field that may be absent with has(x.field)",
        ExecutionError::UndeclaredReference(_) => {
            "; a condition can read `steps`, `input` and `run`"
        }
        ExecutionError::NoSuchOverload(o) => match o.argument_types() {
            [first, ..] if o.function() == "_._" && first == "null_type" => {
                "; the value is null (a step without output, or a JSON null): \
                 test it with `!= null` first"
            }
            _ if ["_<_", "_<=_", "_>_", "_>=_"].contains(&o.function()) => {
                "; compare values of the same kind, converting with int(), double() or string()"
            }
            _ => "",
        },
        _ => "",
    };
    // The CEL text may quote whole values; the hint is kept whole.
    format!("{}{hint}", truncate(&e.to_string()))
}

/// Names the type (and for a scalar, the value) of a non-bool result.
pub(super) fn describe(v: &Value) -> String {
    let quoted = |s: &str| truncate(&format!("{s:?}"));
    match v {
        Value::Int(i) => format!("the int {i}"),
        Value::UInt(u) => format!("the uint {u}u"),
        Value::Float(f) => format!("the double {f:?}"),
        Value::String(s) => format!("the string {}", quoted(s)),
        Value::Null => "null".to_owned(),
        Value::List(l) => format!("a list of {} items", l.len()),
        Value::Map(m) => format!("a map of {} entries", m.map.len()),
        other => format!("a value of type {}", other.type_of()),
    }
}

/// Cuts `s` to [`MAX_MESSAGE_CHARS`] characters.
pub(super) fn truncate(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}
