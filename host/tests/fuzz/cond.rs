//! `when` conditions: `Condition::parse` on expressions generated from a CEL
//! grammar over the variables ax provides (`steps`, `input`, `run`), the
//! macros and functions that cost the most (`map`, `all`, `exists`, `filter`,
//! `matches`, string growth), plus garbage and edited corpus conditions; a
//! parsed condition is evaluated under the default `Budget` against random
//! step states. An evaluation ends in a bool or an error with a message;
//! `CondError::Internal` (the CEL library panicked, caught) counts as a
//! failure too.

use std::time::Duration;

use ax::cond::{CondError, CondVars, Condition};
use proptest::prelude::*;
use serde_json::Value;

use crate::strategies::{Text, json, text};
use crate::{Target, Verdict, explained};

const TARGET: Target = Target {
    name: "cond",
    cases: 512,
    // Evaluation stops at the budget's 1 s deadline; parsing and the
    // conversion of the variables come on top.
    bound: Duration::from_secs(3),
};

const ATOMS: &[&str] = &[
    "steps.a.status == 'succeeded'",
    "steps.b.status",
    "steps.a.output",
    "steps.a.output.rows",
    "steps.extract.output.rows",
    "steps.b.output.l",
    "input",
    "input.x",
    "input.l",
    "input.s",
    "run.id",
    "run.biz_date",
    "run.trigger",
    "run.scheduled_for",
    "1",
    "0",
    "-1",
    "1.5",
    "1u",
    "9223372036854775807",
    "'s'",
    "'a.*b'",
    "\"(a+)+$\"",
    "b'x'",
    "true",
    "false",
    "null",
    "[1, 2, 3]",
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]",
    "{'a': 1}",
    "x",
    "steps",
    "steps.nope.output",
    // Work that grows with the input: what the budget is for.
    "input.l.map(x, input.l.map(y, input.l.map(z, x + y + z)))",
    "input.l.all(x, input.l.all(y, input.l.exists(z, x * y == z)))",
    "input.l.map(x, input.s + input.s + input.s)",
    "size(input.l.filter(x, string(x).matches('^(a|b)*$')))",
    "input.s.matches('(a*)*b')",
];

const TOKENS: &[&str] = &[
    "(", ")", "[", "]", "{", "}", ".", ",", "?", ":", "!", "-", "+", "*", "/", "%", "==", "<",
    "&&", "||", " in ", "'", "\"", "\\", "/*", "//", "\n", "steps", ".map(x, ", ".all(", "size(",
    "x", "1", "0.0", "r'", "'''", "has(", "@read",
];

fn expr() -> impl Strategy<Value = String> {
    proptest::sample::select(ATOMS)
        .prop_map(str::to_owned)
        .prop_recursive(5, 64, 3, |inner| {
            let op = proptest::sample::select(
                &[
                    "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in",
                ][..],
            );
            let macro_ =
                proptest::sample::select(&["map", "all", "exists", "exists_one", "filter"][..]);
            let func = proptest::sample::select(
                &[
                    "size",
                    "string",
                    "int",
                    "uint",
                    "double",
                    "bytes",
                    "type",
                    "has",
                    "dyn",
                    "timestamp",
                    "duration",
                ][..],
            );
            let method = proptest::sample::select(
                &["matches", "startsWith", "endsWith", "contains", "size"][..],
            );
            prop_oneof![
                (inner.clone(), op, inner.clone()).prop_map(|(a, op, b)| format!("({a} {op} {b})")),
                (
                    proptest::sample::select(&["!", "-", "!!", "--"][..]),
                    inner.clone()
                )
                    .prop_map(|(u, a)| format!("{u}{a}")),
                (inner.clone(), macro_, inner.clone())
                    .prop_map(|(l, m, b)| format!("{l}.{m}(x, {b})")),
                (func, inner.clone()).prop_map(|(f, a)| format!("{f}({a})")),
                (inner.clone(), method, inner.clone())
                    .prop_map(|(a, m, b)| format!("{a}.{m}({b})")),
                (inner.clone(), inner.clone(), inner.clone())
                    .prop_map(|(c, a, b)| format!("{c} ? {a} : {b}")),
                (inner.clone(), inner.clone()).prop_map(|(a, i)| format!("{a}[{i}]")),
                prop::collection::vec(inner, 0..5)
                    .prop_map(|items| format!("[{}]", items.join(", "))),
            ]
        })
}

#[derive(Debug, Clone)]
enum Source {
    Grammar(String),
    Text(Text),
}

#[derive(Debug, Clone)]
struct Case {
    source: Source,
    /// (step, status, output) of the run.
    steps: Vec<(&'static str, &'static str, Option<Value>)>,
    input: Value,
}

const STEP_KEYS: &[&str] = &["rows", "l", "s", "x", "ratio", "ok", "a", "b"];
const STEP_VALUES: &[&str] = &["succeeded", "a", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", ""];

/// Data of the shape the atoms read (`rows` a number, `l` a list, `s` a
/// string…), so that evaluation gets past type errors to the macros and the
/// budget; sometimes random data instead.
fn data() -> BoxedStrategy<Value> {
    let typed = (
        any::<i64>(),
        prop::collection::vec(-5i64..5, 0..40),
        "[a-z!]{0,40}",
        any::<bool>(),
        proptest::option::of(json(STEP_KEYS, STEP_VALUES)),
    )
        .prop_map(|(n, l, s, ok, extra)| {
            serde_json::json!({"rows": n, "x": n, "l": l, "s": s, "ratio": 0.5, "ok": ok, "a": extra})
        });
    prop_oneof![3 => typed, 1 => json(STEP_KEYS, STEP_VALUES)].boxed()
}

fn strategy() -> impl Strategy<Value = Case> {
    let source = prop_oneof![
        4 => expr().prop_map(Source::Grammar),
        1 => text(TOKENS).prop_map(Source::Text),
    ];
    let status = proptest::sample::select(
        &[
            "succeeded",
            "failed",
            "skipped",
            "cancelled",
            "pending",
            "running",
            "upstream_failed",
            "weird",
        ][..],
    );
    let step = (
        proptest::sample::select(&["a", "b", "extract", "nope"][..]),
        status,
        proptest::option::of(data()),
    );
    (source, prop::collection::vec(step, 0..4), data()).prop_map(|(source, steps, input)| Case {
        source,
        steps,
        input,
    })
}

fn check(expr: &str, steps: &[(&str, &str, Option<&Value>)], input: &Value) -> Verdict {
    let cond = match Condition::parse(expr) {
        Ok(c) => c,
        Err(CondError::Internal(why)) => return Err(format!("parse: internal error: {why}")),
        Err(e) => {
            crate::tally("refused");
            return explained("Condition::parse", e.to_string());
        }
    };
    crate::tally("parsed");
    let vars = CondVars {
        steps,
        input,
        run_id: "run-1",
        scheduled_for: "2026-12-01T01:30:00Z",
        biz_date: "2026-11-30",
        trigger: "cron",
    };
    match cond.eval(&vars) {
        Ok(_) => {
            crate::tally("evaluated");
            Ok(())
        }
        Err(CondError::Budget(_)) => {
            crate::tally("over budget");
            Ok(())
        }
        Err(CondError::Eval(_)) => {
            crate::tally("eval error");
            Ok(())
        }
        Err(CondError::Internal(why)) => Err(format!("eval of `{expr}`: internal error: {why}")),
        Err(e) => explained("Condition::eval", e.to_string()),
    }
}

#[test]
fn fuzz() {
    let corpus: Vec<Vec<u8>> = crate::corpus(TARGET.name)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    let rows = serde_json::json!({"rows": 900000, "l": [1, 2, 3], "s": "abc", "ratio": 0.5});
    let corpus_steps = [
        ("extract", "succeeded", Some(&rows)),
        ("a", "succeeded", Some(&rows)),
    ];
    let corpus_input = serde_json::json!({"customer": "c", "ids": [1, 2], "l": [1, 2, 3], "x": 1});
    crate::run(
        &TARGET,
        |bytes| {
            check(
                &String::from_utf8_lossy(bytes),
                &corpus_steps,
                &corpus_input,
            )
        },
        strategy(),
        |case| {
            let expr = match &case.source {
                Source::Grammar(e) => e.clone(),
                Source::Text(t) => t.render(&corpus),
            };
            let steps: Vec<(&str, &str, Option<&Value>)> = case
                .steps
                .iter()
                .map(|(n, s, o)| (*n, *s, o.as_ref()))
                .collect();
            check(&expr, &steps, &case.input)
        },
    );
}
