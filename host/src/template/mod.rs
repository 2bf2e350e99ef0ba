//! The `${...}` template language of step inputs: parsing, listing the
//! variables a template refers to, and rendering it against a run's values.
//!
//! A template is any JSON value; only its strings are templated (object keys are
//! copied as written). Inside a string:
//!
//! - `${name}` refers to a variable: `bizDate`, `scheduledFor`, `triggerTime`,
//!   `runId`, `attempt`, `input` / `input.PATH` (the trigger input) or
//!   `steps.NAME.output` / `steps.NAME.output.PATH` (an upstream step's output).
//!   Spaces just inside the braces are ignored (`${ bizDate }`).
//! - `PATH` is dot-separated: `a.b.0.c`; a numeric segment indexes a list (on an
//!   object it is an ordinary key).
//! - `$${` is a literal `${`; any other `$` is itself.
//!
//! A string that is exactly one `${x}` becomes x's JSON value (a number stays a
//! number, an object stays an object). A `${x}` inside longer text is spliced
//! as text: strings as they are, other values as compact JSON.
//!
//! Rendering cannot loop or multiply: it is one pass over the template, and a
//! substituted value is never read again as a template (a `${input}` inside
//! the input stays text). What substitution adds is capped at
//! [`MAX_RENDERED_BYTES`], measured as it is added (a measure stops at what
//! is left), so one render costs time linear in the template's size plus
//! that cap, whatever the template.
//!
//! This module does no I/O and knows nothing about how a run obtains its
//! values: the caller fills [`Vars`]. Whether a `steps.NAME` reference is
//! allowed (NAME must be upstream of the step) is checked by `task::validate`.
//!
//! # Layout
//! - here: the variables ([`VARIABLES`], [`VarRef`]) and [`TemplateError`];
//! - `parse`: template strings → text and references ([`references`],
//!   [`for_each_string`]);
//! - `render`: a template and a run's [`Vars`] → the step's input ([`render()`]).

use std::fmt;

mod parse;
mod render;

pub use self::parse::{for_each_string, references, references_in_str};
pub use self::render::{Vars, render};

/// Cap on what one render may add by substitution, in bytes of JSON text. A
/// template that splices a large input many times would otherwise multiply
/// memory use; 4 MiB is far above any sensible plugin input.
pub const MAX_RENDERED_BYTES: usize = 4 << 20;

/// The variables a template may name, as written after `${`.
pub const VARIABLES: [&str; 7] = [
    "bizDate",
    "scheduledFor",
    "triggerTime",
    "runId",
    "attempt",
    "input",
    "steps.NAME.output",
];

/// One variable reference found in a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VarRef {
    /// `${bizDate}`: the day before `scheduled_for` in the task's zone, `yyyy-MM-dd`.
    BizDate,
    /// `${scheduledFor}`: the instant the run is for (RFC 3339).
    ScheduledFor,
    /// `${triggerTime}`: when the run was actually triggered (RFC 3339).
    TriggerTime,
    /// `${runId}`: the run's id.
    RunId,
    /// `${attempt}`: the attempt number, from 1 (a JSON number).
    Attempt,
    /// `${input}` or `${input.a.b}`: the trigger input, or a value inside it.
    Input(Vec<String>),
    /// `${steps.NAME.output}` or `${steps.NAME.output.a.b}`: an upstream step's output.
    StepOutput {
        /// The step's name.
        step: String,
        /// The path inside its output (empty: the whole output).
        path: Vec<String>,
    },
}

impl fmt::Display for VarRef {
    /// The reference as written inside `${...}`, e.g. `steps.extract.output.rows`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn dotted(f: &mut fmt::Formatter<'_>, head: &str, path: &[String]) -> fmt::Result {
            f.write_str(head)?;
            for segment in path {
                write!(f, ".{segment}")?;
            }
            Ok(())
        }
        match self {
            VarRef::BizDate => f.write_str("bizDate"),
            VarRef::ScheduledFor => f.write_str("scheduledFor"),
            VarRef::TriggerTime => f.write_str("triggerTime"),
            VarRef::RunId => f.write_str("runId"),
            VarRef::Attempt => f.write_str("attempt"),
            VarRef::Input(path) => dotted(f, "input", path),
            VarRef::StepOutput { step, path } => dotted(f, &format!("steps.{step}.output"), path),
        }
    }
}

/// Why a template could not be read or rendered. Every message names the
/// variable (or the text) concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `${` without its closing `}`.
    #[error("unterminated `${{` in `{text}` (write `$${{` for a literal `${{`)")]
    Unterminated {
        /// The text from the `${` on (shortened).
        text: String,
    },
    /// `${}` with nothing inside.
    #[error("`${{}}` names no variable")]
    Empty,
    /// A `${` inside a `${...}`.
    #[error("`${{{text}}}`: a `${{` cannot appear inside `${{...}}`")]
    Nested {
        /// What stood between the braces.
        text: String,
    },
    /// A name that is not one of [`VARIABLES`].
    #[error("unknown variable `${{{name}}}`{hint}")]
    UnknownVariable {
        /// The name as written.
        name: String,
        /// A suggestion (`; did you mean ...`) or the list of known variables.
        hint: String,
    },
    /// A known variable written with a malformed path.
    #[error("`${{{text}}}`: {reason}")]
    BadPath {
        /// What stood between the braces.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The path leads nowhere in the value it walks.
    #[error("`${{{var}}}`: {detail}")]
    Missing {
        /// The reference, e.g. `input.customer.id`.
        var: String,
        /// Where the walk stopped and why.
        detail: String,
    },
    /// The referenced step has no output (it did not run, or did not succeed).
    #[error("`${{{var}}}`: step `{step}` has no output")]
    NoStepOutput {
        /// The reference.
        var: String,
        /// The step.
        step: String,
    },
    /// Substitutions would add more than [`MAX_RENDERED_BYTES`].
    #[error("the rendered input would exceed {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// At most 80 characters of `text`, for error messages (which echo user text
/// into API responses and logs).
pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
