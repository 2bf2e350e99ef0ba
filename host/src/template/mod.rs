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

use std::borrow::Cow;
use std::fmt;
use std::io;

use serde_json::Value;

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

/// A piece of a parsed template string.
#[derive(Debug, PartialEq)]
enum Piece<'s> {
    Text(&'s str),
    Var(VarRef),
}

/// Parses one template string into text and variable pieces.
fn parse_str(s: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(dollar) = rest.find('$') {
        let after = &rest[dollar..];
        if let Some(tail) = after.strip_prefix("$${") {
            // The escape: keep the text before, then a literal `${`.
            pieces.push(Piece::Text(&rest[..dollar]));
            pieces.push(Piece::Text("${"));
            rest = tail;
        } else if let Some(body) = after.strip_prefix("${") {
            pieces.push(Piece::Text(&rest[..dollar]));
            let Some(close) = body.find('}') else {
                return Err(TemplateError::Unterminated {
                    text: shorten(after),
                });
            };
            pieces.push(Piece::Var(parse_var(&body[..close])?));
            rest = &body[close + 1..];
        } else {
            pieces.push(Piece::Text(&rest[..=dollar]));
            rest = &after[1..];
        }
    }
    pieces.push(Piece::Text(rest));
    pieces.retain(|p| !matches!(p, Piece::Text("")));
    Ok(pieces)
}

/// At most 80 characters of `text`, for error messages (which echo user text
/// into API responses and logs).
pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Parses what stands between `${` and `}`.
fn parse_var(raw: &str) -> Result<VarRef, TemplateError> {
    let text = raw.trim();
    if text.is_empty() {
        return Err(TemplateError::Empty);
    }
    if text.contains("${") || text.contains('{') {
        return Err(TemplateError::Nested {
            text: shorten(text),
        });
    }
    let bad = |reason: &str| TemplateError::BadPath {
        text: shorten(text),
        reason: reason.to_owned(),
    };
    let segments: Vec<&str> = text.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(bad("a path segment is empty (check the dots)"));
    }
    if let Some(s) = segments.iter().find(|s| s.chars().any(char::is_whitespace)) {
        return Err(bad(&format!("the path segment `{s}` contains a space")));
    }
    let (head, tail) = (segments[0], &segments[1..]);
    let owned = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let scalar = |var: VarRef| {
        if tail.is_empty() {
            Ok(var)
        } else {
            Err(bad(&format!("`{head}` is a plain value and has no fields")))
        }
    };
    match head {
        "bizDate" => scalar(VarRef::BizDate),
        "scheduledFor" => scalar(VarRef::ScheduledFor),
        "triggerTime" => scalar(VarRef::TriggerTime),
        "runId" => scalar(VarRef::RunId),
        "attempt" => scalar(VarRef::Attempt),
        "input" => Ok(VarRef::Input(owned(tail))),
        "steps" => {
            // Step names may contain dots, so the name runs up to the first
            // `output` segment after it.
            match tail.iter().skip(1).position(|s| *s == "output") {
                Some(at) => Ok(VarRef::StepOutput {
                    step: tail[..=at].join("."),
                    path: owned(&tail[at + 2..]),
                }),
                None => Err(bad(
                    "write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
                )),
            }
        }
        _ => Err(TemplateError::UnknownVariable {
            name: shorten(text),
            hint: hint_for(head),
        }),
    }
}

/// A "did you mean" for a misspelt variable head, or the list of variables.
fn hint_for(head: &str) -> String {
    let fold = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase();
    let heads = [
        "bizDate",
        "scheduledFor",
        "triggerTime",
        "runId",
        "attempt",
        "input",
        "steps",
    ];
    match heads.iter().find(|h| fold(h) == fold(head)) {
        Some(h) => format!("; did you mean `${{{h}}}`?"),
        None => format!("; known variables: {}", VARIABLES.join(", ")),
    }
}

/// Calls `f` with every string of a template and its JSON path (`a.b[0]`,
/// empty for the root), in document order. Object keys are not visited: they
/// are not templated.
pub fn for_each_string<'v, E>(
    template: &'v Value,
    f: &mut dyn FnMut(&str, &'v str) -> Result<(), E>,
) -> Result<(), E> {
    fn walk<'v, E>(
        value: &'v Value,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'v str) -> Result<(), E>,
    ) -> Result<(), E> {
        match value {
            Value::String(s) => f(path, s),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    walk(item, path, f)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    walk(item, path, f)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
        }
    }
    walk(template, &mut String::new(), f)
}

/// The variables one template string refers to, in order of appearance.
pub fn references_in_str(s: &str) -> Result<Vec<VarRef>, TemplateError> {
    Ok(parse_str(s)?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Var(v) => Some(v),
            Piece::Text(_) => None,
        })
        .collect())
}

/// Every variable a template refers to, in document order (repeats included).
/// Fails on the first malformed or unknown reference.
pub fn references(template: &Value) -> Result<Vec<VarRef>, TemplateError> {
    let mut found = Vec::new();
    for_each_string(template, &mut |_, s| {
        found.extend(references_in_str(s)?);
        Ok(())
    })?;
    Ok(found)
}

/// The values a run supplies to its step inputs.
pub struct Vars<'a> {
    /// `${bizDate}`, `yyyy-MM-dd`.
    pub biz_date: &'a str,
    /// `${scheduledFor}`, RFC 3339.
    pub scheduled_for: &'a str,
    /// `${triggerTime}`, RFC 3339.
    pub trigger_time: &'a str,
    /// `${runId}`.
    pub run_id: &'a str,
    /// `${attempt}`, from 1.
    pub attempt: u32,
    /// The trigger input, for `${input...}`.
    pub input: &'a Value,
    /// The output of a step by name, `None` when it has none (not run, not succeeded).
    pub step_outputs: &'a dyn Fn(&str) -> Option<&'a Value>,
}

/// Renders a template: every string's `${...}` replaced by its value (see the
/// module docs for whole-value versus spliced substitution).
pub fn render(template: &Value, vars: &Vars<'_>) -> Result<Value, TemplateError> {
    let mut budget = MAX_RENDERED_BYTES;
    render_value(template, vars, &mut budget)
}

fn render_value(
    template: &Value,
    vars: &Vars<'_>,
    budget: &mut usize,
) -> Result<Value, TemplateError> {
    Ok(match template {
        Value::String(s) => render_string(s, vars, budget)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| render_value(item, vars, budget))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render_value(v, vars, budget)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) => template.clone(),
    })
}

fn render_string(s: &str, vars: &Vars<'_>, budget: &mut usize) -> Result<Value, TemplateError> {
    let pieces = parse_str(s)?;
    if let [Piece::Var(var)] = pieces.as_slice() {
        let value = resolve(var, vars)?;
        charge(budget, &value)?;
        return Ok(value.into_owned());
    }
    let mut out = String::with_capacity(s.len());
    for piece in &pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Var(var) => {
                let value = resolve(var, vars)?;
                charge(budget, &value)?;
                match value.as_ref() {
                    Value::String(text) => out.push_str(text),
                    // Compact JSON of a value always serializes.
                    other => out.push_str(&other.to_string()),
                }
            }
        }
    }
    Ok(Value::String(out))
}

/// Takes the serialized size of `value` from the budget.
fn charge(budget: &mut usize, value: &Value) -> Result<(), TemplateError> {
    /// Counts bytes and refuses to go past a limit, so measuring a huge value stops early.
    struct Counter {
        left: usize,
    }
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.left = self
                .left
                .checked_sub(buf.len())
                .ok_or_else(|| io::Error::other("over budget"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { left: *budget };
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => {
            *budget = counter.left;
            Ok(())
        }
        Err(_) => Err(TemplateError::TooLarge {
            limit: MAX_RENDERED_BYTES,
        }),
    }
}

/// The value a reference stands for.
fn resolve<'v>(var: &VarRef, vars: &Vars<'v>) -> Result<Cow<'v, Value>, TemplateError> {
    let text = |s: &str| Cow::Owned(Value::String(s.to_owned()));
    Ok(match var {
        VarRef::BizDate => text(vars.biz_date),
        VarRef::ScheduledFor => text(vars.scheduled_for),
        VarRef::TriggerTime => text(vars.trigger_time),
        VarRef::RunId => text(vars.run_id),
        VarRef::Attempt => Cow::Owned(Value::from(vars.attempt)),
        VarRef::Input(path) => Cow::Borrowed(lookup(vars.input, "input", path, var)?),
        VarRef::StepOutput { step, path } => {
            let output = (vars.step_outputs)(step).ok_or_else(|| TemplateError::NoStepOutput {
                var: shorten(&var.to_string()),
                step: step.clone(),
            })?;
            Cow::Borrowed(lookup(output, &format!("steps.{step}.output"), path, var)?)
        }
    })
}

/// Walks `path` from `root` (named `root_name` in messages).
fn lookup<'v>(
    root: &'v Value,
    root_name: &str,
    path: &[String],
    var: &VarRef,
) -> Result<&'v Value, TemplateError> {
    let mut here = root;
    let mut walked = root_name.to_owned();
    for segment in path {
        let next = match here {
            Value::Object(map) => map
                .get(segment)
                .ok_or_else(|| format!("`{walked}` has no field `{segment}`")),
            Value::Array(items) => match segment.parse::<usize>() {
                Ok(i) => items.get(i).ok_or_else(|| {
                    format!(
                        "`{walked}` has {} items; index {i} is out of range",
                        items.len()
                    )
                }),
                Err(_) => Err(format!("`{walked}` is a list; `{segment}` is not an index")),
            },
            other => Err(format!(
                "`{walked}` is {}, which has no field `{segment}`",
                kind_of(other)
            )),
        };
        here = next.map_err(|detail| TemplateError::Missing {
            var: shorten(&var.to_string()),
            detail,
        })?;
        walked.push('.');
        walked.push_str(segment);
    }
    Ok(here)
}

/// "a string", "a number", … for messages.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars_with<'a>(input: &'a Value, outputs: &'a dyn Fn(&str) -> Option<&'a Value>) -> Vars<'a> {
        Vars {
            biz_date: "2026-02-28",
            scheduled_for: "2026-03-01T01:30:00Z",
            trigger_time: "2026-03-01T01:30:02Z",
            run_id: "run-1",
            attempt: 2,
            input,
            step_outputs: outputs,
        }
    }

    fn render_with(template: Value) -> Result<Value, TemplateError> {
        let input = json!({"region": "eu", "ids": [10, 20, 30], "customer": {"id": 7, "tags": ["a"]}, "n": null});
        let extract = json!({"rows": 812345, "file": "s3://x/y.csv", "meta": {"ok": true}});
        let extract = &extract;
        let outputs = move |name: &str| (name == "extract").then_some(extract);
        render(&template, &vars_with(&input, &outputs))
    }

    #[test]
    fn whole_string_reference_keeps_the_json_type() {
        assert_eq!(render_with(json!("${attempt}")).unwrap(), json!(2));
        assert_eq!(
            render_with(json!("${steps.extract.output.rows}")).unwrap(),
            json!(812345)
        );
        assert_eq!(
            render_with(json!("${input.customer}")).unwrap(),
            json!({"id": 7, "tags": ["a"]})
        );
        assert_eq!(
            render_with(json!("${input.ids}")).unwrap(),
            json!([10, 20, 30])
        );
        assert_eq!(
            render_with(json!("${steps.extract.output.meta.ok}")).unwrap(),
            json!(true)
        );
        assert_eq!(render_with(json!("${input.n}")).unwrap(), json!(null));
        assert_eq!(
            render_with(json!("${bizDate}")).unwrap(),
            json!("2026-02-28")
        );
    }

    #[test]
    fn spaces_inside_the_braces_are_ignored() {
        assert_eq!(render_with(json!("${ attempt }")).unwrap(), json!(2));
        assert_eq!(
            render_with(json!("d=${ bizDate }")).unwrap(),
            json!("d=2026-02-28")
        );
    }

    #[test]
    fn spliced_references_become_text() {
        assert_eq!(
            render_with(json!("report ready: ${steps.extract.output.rows} rows")).unwrap(),
            json!("report ready: 812345 rows")
        );
        assert_eq!(
            render_with(json!("${runId}/${attempt}/${input.region}")).unwrap(),
            json!("run-1/2/eu")
        );
        assert_eq!(
            render_with(json!("ids=${input.ids}")).unwrap(),
            json!("ids=[10,20,30]")
        );
        assert_eq!(
            render_with(json!("c=${input.customer}")).unwrap(),
            json!(r#"c={"id":7,"tags":["a"]}"#)
        );
        assert_eq!(render_with(json!("n=${input.n}")).unwrap(), json!("n=null"));
        assert_eq!(
            render_with(json!("at ${scheduledFor} (fired ${triggerTime})")).unwrap(),
            json!("at 2026-03-01T01:30:00Z (fired 2026-03-01T01:30:02Z)")
        );
    }

    #[test]
    fn numeric_segments_index_lists() {
        assert_eq!(render_with(json!("${input.ids.1}")).unwrap(), json!(20));
        assert_eq!(
            render_with(json!("${input.customer.tags.0}")).unwrap(),
            json!("a")
        );
    }

    #[test]
    fn numeric_segment_on_an_object_is_a_key() {
        let input = json!({"m": {"0": "zero"}});
        let none = |_: &str| None;
        let out = render(&json!("${input.m.0}"), &vars_with(&input, &none)).unwrap();
        assert_eq!(out, json!("zero"));
    }

    #[test]
    fn nested_templates_render_everywhere_but_keys() {
        let out = render_with(json!({
            "date": "${bizDate}",
            "${runId}": "key stays literal",
            "list": ["${attempt}", {"deep": "${input.region}"}, 5, true, null],
        }))
        .unwrap();
        assert_eq!(
            out,
            json!({
                "date": "2026-02-28",
                "${runId}": "key stays literal",
                "list": [2, {"deep": "eu"}, 5, true, null],
            })
        );
    }

    #[test]
    fn double_dollar_escapes_a_literal_placeholder() {
        assert_eq!(
            render_with(json!("$${bizDate}")).unwrap(),
            json!("${bizDate}")
        );
        assert_eq!(
            render_with(json!("cost: $5, $${x} and ${attempt}")).unwrap(),
            json!("cost: $5, ${x} and 2")
        );
        assert_eq!(render_with(json!("$$ stays")).unwrap(), json!("$$ stays"));
        assert_eq!(
            render_with(json!("trailing $")).unwrap(),
            json!("trailing $")
        );
        // An escaped placeholder alone is text, not a whole-value reference.
        assert_eq!(references(&json!("$${input.x}")).unwrap(), vec![]);
    }

    #[test]
    fn plain_strings_and_non_strings_are_unchanged() {
        let t = json!({"a": "no vars", "b": 1.5, "c": [false]});
        assert_eq!(render_with(t.clone()).unwrap(), t);
    }

    #[test]
    fn missing_input_field_names_the_path() {
        let err = render_with(json!("${input.customer.name}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`${input.customer.name}`: `input.customer` has no field `name`"
        );
    }

    #[test]
    fn out_of_range_index_names_the_length() {
        let err = render_with(json!("x ${input.ids.5}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`${input.ids.5}`: `input.ids` has 3 items; index 5 is out of range"
        );
    }

    #[test]
    fn walking_into_a_scalar_is_reported() {
        let err = render_with(json!("${input.region.code}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`${input.region.code}`: `input.region` is a string, which has no field `code`"
        );
        let err = render_with(json!("${input.ids.first}")).unwrap_err();
        assert!(
            err.to_string()
                .contains("`input.ids` is a list; `first` is not an index"),
            "{err}"
        );
    }

    #[test]
    fn missing_step_output_path_names_the_step_path() {
        let err = render_with(json!("${steps.extract.output.cols}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`${steps.extract.output.cols}`: `steps.extract.output` has no field `cols`"
        );
    }

    #[test]
    fn step_without_output_is_an_error() {
        let err = render_with(json!("${steps.full.output}")).unwrap_err();
        assert_eq!(
            err,
            TemplateError::NoStepOutput {
                var: "steps.full.output".into(),
                step: "full".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "`${steps.full.output}`: step `full` has no output"
        );
    }

    #[test]
    fn references_lists_every_variable_in_document_order() {
        let t = json!({
            "a": "${bizDate}-${scheduledFor}",
            "b": ["${triggerTime}", "${runId}", "${attempt}"],
            "c": {"d": "${input}", "e": "${input.x.0}", "f": "${steps.s1.output}", "g": "${steps.s-2.output.a.b}"},
        });
        assert_eq!(
            references(&t).unwrap(),
            vec![
                VarRef::BizDate,
                VarRef::ScheduledFor,
                VarRef::TriggerTime,
                VarRef::RunId,
                VarRef::Attempt,
                VarRef::Input(vec![]),
                VarRef::Input(vec!["x".into(), "0".into()]),
                VarRef::StepOutput {
                    step: "s1".into(),
                    path: vec![]
                },
                VarRef::StepOutput {
                    step: "s-2".into(),
                    path: vec!["a".into(), "b".into()]
                },
            ]
        );
    }

    #[test]
    fn dotted_step_names_end_at_the_first_output_segment() {
        assert_eq!(
            references(&json!("${steps.load.v2.output.rows}")).unwrap(),
            vec![VarRef::StepOutput {
                step: "load.v2".into(),
                path: vec!["rows".into()]
            }]
        );
        assert_eq!(
            references(&json!("${steps.output.output.output}")).unwrap(),
            vec![VarRef::StepOutput {
                step: "output".into(),
                path: vec!["output".into()]
            }]
        );
    }

    #[test]
    fn var_ref_displays_as_written() {
        for text in [
            "bizDate",
            "attempt",
            "input",
            "input.a.0",
            "steps.x.output",
            "steps.x.output.rows",
        ] {
            let [var] = references(&json!(format!("${{{text}}}")))
                .unwrap()
                .try_into()
                .unwrap();
            assert_eq!(var.to_string(), text);
        }
    }

    #[test]
    fn unknown_variable_is_refused_with_a_suggestion() {
        let err = references(&json!("${bizdate}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown variable `${bizdate}`; did you mean `${bizDate}`?"
        );
        let err = references(&json!("${run_id}")).unwrap_err();
        assert!(
            err.to_string().contains("did you mean `${runId}`?"),
            "{err}"
        );
        let err = references(&json!("${today}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown variable `${today}`; known variables: bizDate, scheduledFor, triggerTime, runId, attempt, input, steps.NAME.output"
        );
    }

    #[test]
    fn malformed_references_are_refused() {
        let cases = [
            (
                "${",
                "unterminated `${` in `${` (write `$${` for a literal `${`)",
            ),
            (
                "abc ${input.x",
                "unterminated `${` in `${input.x` (write `$${` for a literal `${`)",
            ),
            ("${}", "`${}` names no variable"),
            ("${  }", "`${}` names no variable"),
            (
                "${input..x}",
                "`${input..x}`: a path segment is empty (check the dots)",
            ),
            (
                "${input.}",
                "`${input.}`: a path segment is empty (check the dots)",
            ),
            (
                "${input.a b}",
                "`${input.a b}`: the path segment `a b` contains a space",
            ),
            (
                "${attempt.x}",
                "`${attempt.x}`: `attempt` is a plain value and has no fields",
            ),
            (
                "${steps.x}",
                "`${steps.x}`: write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
            ),
            (
                "${steps.x.status}",
                "`${steps.x.status}`: write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
            ),
            (
                "${steps.output}",
                "`${steps.output}`: write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
            ),
            (
                "${input.${x}}",
                "`${input.${x}`: a `${` cannot appear inside `${...}`",
            ),
        ];
        for (text, message) in cases {
            let err = references(&json!({"k": [text]})).unwrap_err();
            assert_eq!(err.to_string(), message, "for {text}");
        }
    }

    #[test]
    fn long_unterminated_text_is_shortened() {
        let text = format!("${{input.{}", "x".repeat(200));
        let err = references(&json!(text)).unwrap_err();
        let TemplateError::Unterminated { text } = err else {
            panic!("{err:?}")
        };
        assert_eq!(text.chars().count(), 81);
        assert!(text.ends_with('…'));
    }

    #[test]
    fn for_each_string_reports_json_paths() {
        let t = json!({"a": {"b": ["x", 1, {"c": "y"}]}, "d": "z"});
        let mut seen = Vec::new();
        for_each_string::<()>(&t, &mut |path, s| {
            seen.push(format!("{path}={s}"));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["a.b[0]=x", "a.b[2].c=y", "d=z"]);
        let mut root = Vec::new();
        for_each_string::<()>(&json!("top"), &mut |path, s| {
            root.push((path.to_owned(), s.to_owned()));
            Ok(())
        })
        .unwrap();
        assert_eq!(root, [(String::new(), "top".to_owned())]);
    }

    #[test]
    fn oversized_render_is_refused() {
        let big = json!("x".repeat(MAX_RENDERED_BYTES / 3));
        let none = |_: &str| None;
        let vars = vars_with(&big, &none);
        assert!(render(&json!(["${input}", "${input}"]), &vars).is_ok());
        let err = render(
            &json!(["${input}", "${input}", "a ${input}", "${input}"]),
            &vars,
        )
        .unwrap_err();
        assert_eq!(
            err,
            TemplateError::TooLarge {
                limit: MAX_RENDERED_BYTES
            }
        );
    }

    #[test]
    fn substituted_values_are_not_expanded_again() {
        let input = json!({ "t": "${input.t} ${input}", "n": 1 });
        let none = |_: &str| None;
        let vars = vars_with(&input, &none);
        assert_eq!(
            render(&json!("${input.t}"), &vars).unwrap(),
            json!("${input.t} ${input}")
        );
        assert_eq!(
            render(&json!("<${input.t}>"), &vars).unwrap(),
            json!("<${input.t} ${input}>")
        );
    }

    #[test]
    fn many_references_to_a_large_value_stop_at_the_cap() {
        // 100,000 references to 64 KiB would be 6.4 GB; the cap stops the
        // render after 64 of them, having measured no more than the cap.
        let big = json!("x".repeat(64 << 10));
        let none = |_: &str| None;
        let vars = vars_with(&big, &none);
        let refs = Value::Array(vec![json!("${input}"); 100_000]);
        let started = std::time::Instant::now();
        assert_eq!(
            render(&refs, &vars).unwrap_err(),
            TemplateError::TooLarge {
                limit: MAX_RENDERED_BYTES
            }
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let spliced = json!("${input}".repeat(100_000));
        assert!(render(&spliced, &vars).is_err());
    }

    #[test]
    fn unicode_text_around_references_is_kept() {
        assert_eq!(
            render_with(json!("日期 ${bizDate} ✓")).unwrap(),
            json!("日期 2026-02-28 ✓")
        );
    }
}
