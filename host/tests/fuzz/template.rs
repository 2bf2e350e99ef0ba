//! Step input templates: `template::references` and `template::render` on
//! JSON templates whose strings are put together from `${...}` syntax and
//! variable names (plus garbage), rendered against random trigger inputs and
//! step outputs. A render that succeeds must stay within the documented cap
//! on what substitution adds.

use std::time::Duration;

use ax::template::{MAX_RENDERED_BYTES, Vars, references, render};
use proptest::prelude::*;
use serde_json::Value;

use crate::strategies::json;
use crate::{Target, Verdict, explained};

const TARGET: Target = Target {
    name: "template",
    cases: 2048,
    bound: Duration::from_secs(2),
};

const PIECES: &[&str] = &[
    "${",
    "}",
    "$${",
    "$",
    "${ ",
    " }",
    "bizDate",
    "scheduledFor",
    "triggerTime",
    "runId",
    "attempt",
    "input",
    "input.",
    "steps.",
    "steps.a.output",
    "steps.a.output.",
    "steps.nope.output",
    ".output",
    "a",
    "b",
    "0",
    "1",
    "99999999999999999999",
    ".",
    "..",
    "-",
    "é",
    "\u{0}",
    " ",
    "text ",
    "{",
    "${input}",
    "${bizDate}",
    "${steps.a.output.l.0}",
];

const KEYS: &[&str] = &["a", "b", "l", "0", "1", "x", "text", "${input}"];

fn template_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(proptest::sample::select(PIECES), 0..12).prop_map(|p| p.concat()),
        1 => "\\PC{0,32}",
    ]
}

fn template() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        4 => template_string().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => any::<i64>().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(
                |pairs| {
                    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                }
            ),
        ]
    })
}

#[derive(Debug, Clone)]
struct Case {
    template: Value,
    input: Value,
    output: Option<Value>,
    attempt: u32,
}

fn strategy() -> impl Strategy<Value = Case> {
    (
        template(),
        json(KEYS, PIECES),
        proptest::option::of(json(KEYS, PIECES)),
        any::<u32>(),
    )
        .prop_map(|(template, input, output, attempt)| Case {
            template,
            input,
            output,
            attempt,
        })
}

fn check(template: &Value, input: &Value, output: Option<&Value>, attempt: u32) -> Verdict {
    if let Err(e) = references(template) {
        explained("template::references", e.to_string())?;
    }
    let outputs = move |name: &str| if name == "a" { output } else { None };
    let vars = Vars {
        biz_date: "2026-11-30",
        scheduled_for: "2026-12-01T01:30:00Z",
        trigger_time: "2026-12-01T01:30:00.012Z",
        run_id: "run-1",
        attempt,
        input,
        step_outputs: &outputs,
    };
    match render(template, &vars) {
        Ok(rendered) => {
            crate::tally("rendered");
            let (before, after) = (template.to_string().len(), rendered.to_string().len());
            // Escaping can grow a spliced value's text (a quote becomes `\"`),
            // so allow the cap twice over plus the template itself.
            if after > before + 2 * MAX_RENDERED_BYTES + 64 {
                return Err(format!(
                    "rendered {after} bytes from a {before}-byte template"
                ));
            }
            Ok(())
        }
        Err(e) => {
            crate::tally("refused");
            explained("template::render", e.to_string())
        }
    }
}

#[test]
fn fuzz() {
    let input = serde_json::json!({"a": {"0": [1, {"b": "x"}]}, "l": [1, 2], "text": "${input}"});
    let output = serde_json::json!({"rows": 900000, "l": ["x", "y"]});
    crate::run(
        &TARGET,
        |bytes| match serde_json::from_slice::<Value>(bytes) {
            Ok(template) => check(&template, &input, Some(&output), 1),
            // A seed that is not JSON is one template string.
            Err(_) => check(
                &Value::from(String::from_utf8_lossy(bytes)),
                &input,
                Some(&output),
                1,
            ),
        },
        strategy(),
        |case| {
            check(
                &case.template,
                &case.input,
                case.output.as_ref(),
                case.attempt,
            )
        },
    );
}
