//! Rendering a template against a run's values ([`Vars`]): one pass over
//! it, whole-string references kept as JSON values, spliced ones turned into
//! text, and what substitution adds charged to [`MAX_RENDERED_BYTES`] as it
//! is added.

use std::borrow::Cow;
use std::io;

use serde_json::Value;

use super::parse::{Piece, parse_str};
use super::{MAX_RENDERED_BYTES, TemplateError, VarRef, shorten};

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
    use crate::template::references;

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
