//! The task reader: `ax::task::parse` and `load` with the host's default caps,
//! on arbitrary text, on edited corpus tasks and on documents built from the
//! field names of docs/TASKS.md (as JSON, which is also YAML, and as YAML
//! flow text with anchors and aliases).

use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;

use crate::strategies::{Text, json, object, text};
use crate::{Target, Verdict, explained};

const TARGET: Target = Target {
    name: "task",
    cases: 2048,
    bound: Duration::from_secs(2),
};

/// Field names of a task, its steps, triggers, limits, retry, alerts and
/// retention (docs/TASKS.md).
const KEYS: &[&str] = &[
    "name",
    "description",
    "trigger",
    "cron",
    "timezone",
    "every",
    "at",
    "delay",
    "after",
    "on",
    "catch_up",
    "overlap",
    "priority",
    "steps",
    "plugin",
    "input",
    "limits",
    "fuel",
    "memory_mb",
    "timeout",
    "pool",
    "retry",
    "max_attempts",
    "backoff",
    "initial",
    "factor",
    "max",
    "retry_on",
    "needs",
    "when",
    "trigger_rule",
    "alerts",
    "webhook",
    "url",
    "events",
    "retention",
    "keep_runs",
    "keep_for",
    "tenant",
    "http",
    "allow",
    "kv",
    "config",
    "secrets",
    "paused",
    "jitter",
    "window",
];

/// Values that mean something in those fields.
const VALUES: &[&str] = &[
    "0 30 1 * * ?",
    "*/10 * * * * ?",
    "0 0 0 31 2 ?",
    "Asia/Shanghai",
    "Mars/Base",
    "latest",
    "all",
    "none",
    "skip",
    "queue",
    "allow",
    "one_success",
    "all_success",
    "all_done",
    "none_failed",
    "extract",
    "full",
    "push",
    "echo@1.0.0",
    "hello",
    "steps.extract.output.rows > 1",
    "steps.a.status == 'failed'",
    "2026-12-01T00:00:00Z",
    "9999-12-31T23:00:00-02:00",
    "succeeded",
    "failed",
    "trap",
    "timeout",
    "https://example.com/hook",
    "exponential",
];

/// Tokens for text edits: YAML syntax that changes the shape of a document.
const TOKENS: &[&str] = &[
    "\n",
    "\n  ",
    "\n- ",
    ": ",
    "- ",
    "&a ",
    "*a",
    "<<: *a\n",
    "!!binary ",
    "!!str ",
    "? ",
    "|\n",
    ">-\n",
    "'",
    "\"",
    "#",
    "\t",
    "{",
    "}",
    "[",
    "]",
    ",",
    "---\n",
    "...\n",
    "~",
    "%YAML 1.1\n",
    "name",
    "steps",
    "needs: [",
    "when: ",
    "plugin: a@1.0.0",
    "0x10",
    "1e400",
    ".inf",
    ".nan",
];

#[derive(Debug, Clone)]
enum Case {
    Text(Text),
    /// A tree written as JSON.
    Json(Value),
    /// A tree written as YAML flow text, with anchors on some nodes and
    /// aliases back to them.
    Yaml(Value, Vec<bool>),
}

fn pick(values: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![
        30 => proptest::sample::select(values).prop_map(Value::from),
        1 => json(KEYS, VALUES),
    ]
    .boxed()
}

fn num(range: std::ops::Range<i64>) -> BoxedStrategy<Value> {
    prop_oneof![30 => range.prop_map(Value::from), 1 => json(KEYS, VALUES)].boxed()
}

const DURATIONS: &[&str] = &[
    "30s",
    "2m",
    "1h",
    "0s",
    "1ms",
    "7d",
    "100000000000h",
    "1.5h",
    "-1s",
    "x",
];
const STEPS: &[&str] = &[
    "extract", "full", "push", "a", "b", "c", "x-1", "Bad Name", "",
];

/// A task as docs/TASKS.md describes it: the known fields in their places,
/// values mostly of the right kind.
fn task_tree() -> BoxedStrategy<Value> {
    let trigger = object(
        0.35,
        vec![
            (
                "cron",
                pick(&[
                    "0 30 1 * * ?",
                    "*/10 * * * * ?",
                    "0 0 0 31 2 ?",
                    "0 0 9 ? * MON-FRI",
                    "0 2 * * *",
                ]),
            ),
            (
                "timezone",
                pick(&["UTC", "Asia/Shanghai", "America/New_York", "Mars/Base"]),
            ),
            ("every", pick(DURATIONS)),
            (
                "at",
                pick(&[
                    "2026-12-01T00:00:00Z",
                    "9999-12-31T23:00:00-02:00",
                    "0000-01-01T00:00:00Z",
                    "yesterday",
                ]),
            ),
            ("delay", pick(DURATIONS)),
            (
                "after",
                prop::collection::vec(pick(&["other", "order_report", ""]), 0..3)
                    .prop_map(Value::Array)
                    .boxed(),
            ),
            ("on", pick(&["success", "failure", "done", "never"])),
        ],
    );
    let limits = object(
        0.35,
        vec![
            ("fuel", num(0..200_000_000_000)),
            ("memory_mb", num(0..100_000)),
            ("timeout", pick(DURATIONS)),
        ],
    );
    let retry = object(
        0.35,
        vec![
            ("max_attempts", num(0..200)),
            (
                "backoff",
                prop_oneof![
                    prop::collection::vec(pick(DURATIONS), 0..4).prop_map(Value::Array),
                    object(
                        0.35,
                        vec![
                            ("initial", pick(DURATIONS)),
                            ("factor", num(0..10)),
                            ("max", pick(DURATIONS))
                        ]
                    ),
                ]
                .boxed(),
            ),
            (
                "retry_on",
                prop::collection::vec(pick(&["failed", "trap", "timeout", "error"]), 0..3)
                    .prop_map(Value::Array)
                    .boxed(),
            ),
        ],
    );
    let input = json(
        KEYS,
        &[
            "${bizDate}",
            "${input.x}",
            "${steps.extract.output.rows}",
            "${nope}",
            "$${x}",
            "${",
        ],
    );
    let step = object(
        0.35,
        vec![
            ("name", pick(STEPS)),
            (
                "plugin",
                pick(&[
                    "echo@1.0.0",
                    "extract-orders@1.2.0",
                    "hello",
                    "a@",
                    "@1",
                    "x@1.0.0.0",
                ]),
            ),
            ("input", input.clone()),
            ("limits", limits.clone()),
            ("pool", pick(&["warehouse", "", "default"])),
            ("retry", retry.clone()),
            (
                "needs",
                prop::collection::vec(pick(STEPS), 0..4)
                    .prop_map(Value::Array)
                    .boxed(),
            ),
            (
                "when",
                pick(&[
                    "steps.extract.output.rows > 800000",
                    "steps.a.status == 'failed'",
                    "input.x",
                    "(((",
                    "true",
                ]),
            ),
            (
                "trigger_rule",
                pick(&[
                    "all_success",
                    "one_success",
                    "all_done",
                    "none_failed",
                    "always",
                ]),
            ),
        ],
    );
    let alerts = object(
        0.35,
        vec![
            (
                "webhook",
                pick(&["https://hooks.example.com/x", "ftp://x", "http://10.0.0.1/"]),
            ),
            (
                "events",
                prop::collection::vec(pick(&["run_failed", "run_succeeded", "nope"]), 0..3)
                    .prop_map(Value::Array)
                    .boxed(),
            ),
        ],
    );
    let retention = object(
        0.35,
        vec![
            ("keep_runs", num(0..100_000)),
            ("keep_for", pick(DURATIONS)),
        ],
    );
    let steps_or_shorthand = prop_oneof![
        prop::collection::vec(step, 0..6).prop_map(|s| vec![("steps", Value::Array(s))]),
        (
            pick(&["echo@1.0.0", "purge-tmp@0.3.1", "x"]),
            input,
            limits,
            retry
        )
            .prop_map(|(p, i, l, r)| {
                vec![("plugin", p), ("input", i), ("limits", l), ("retry", r)]
            }),
    ];
    (
        object(
            0.35,
            vec![
                // `name` is required: mostly there (below), sometimes odd.
                ("description", pick(&["a task", ""])),
                ("trigger", trigger),
                ("catch_up", pick(&["latest", "all", "none", "some"])),
                ("overlap", pick(&["skip", "queue", "allow", "cancel"])),
                ("priority", num(-1..12)),
                ("alerts", alerts),
                ("retention", retention),
            ],
        ),
        steps_or_shorthand,
        proptest::option::weighted(
            0.95,
            pick(&["order_report", "cleanup", "a", "A", "x-y_z", "", "a b"]),
        ),
        // One field anywhere at the top that may not belong.
        proptest::option::weighted(0.2, (proptest::sample::select(KEYS), json(KEYS, VALUES))),
    )
        .prop_map(|(mut top, rest, name, extra)| {
            let map = top.as_object_mut().expect("an object");
            if let Some(name) = name {
                map.insert("name".to_owned(), name);
            }
            for (k, v) in rest {
                map.insert(k.to_owned(), v);
            }
            if let Some((k, v)) = extra {
                map.insert(k.to_owned(), v);
            }
            top
        })
        .boxed()
}

fn strategy() -> impl Strategy<Value = Case> {
    let tree = task_tree;
    prop_oneof![
        2 => text(TOKENS).prop_map(Case::Text),
        2 => tree().prop_map(Case::Json),
        2 => (tree(), prop::collection::vec(proptest::bool::weighted(0.1), 0..16)).prop_map(|(t, a)| Case::Yaml(t, a)),
    ]
}

/// YAML flow text for `value`; where `anchors` says so, a node gets an
/// anchor and a later leaf becomes an alias to the last one.
fn flow(
    value: &Value,
    anchors: &[bool],
    n: &mut usize,
    last: &mut Option<usize>,
    out: &mut String,
) {
    *n += 1;
    let anchor = anchors
        .get(*n % anchors.len().max(1))
        .copied()
        .unwrap_or(false);
    match value {
        Value::Object(map) => {
            if anchor {
                out.push_str(&format!("&n{n} "));
            }
            let me = *n;
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(k);
                out.push_str(": ");
                flow(v, anchors, n, last, out);
            }
            out.push('}');
            if anchor {
                *last = Some(me);
            }
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(v, anchors, n, last, out);
            }
            out.push(']');
        }
        _ if anchor && last.is_some() => out.push_str(&format!("*n{}", last.unwrap_or_default())),
        Value::String(s)
            if s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_@.-/ ".contains(c)) =>
        {
            out.push_str(s)
        }
        leaf => out.push_str(&leaf.to_string()),
    }
}

fn input(case: &Case, corpus: &[Vec<u8>]) -> String {
    match case {
        Case::Text(t) => t.render(corpus),
        Case::Json(v) => v.to_string(),
        Case::Yaml(v, anchors) => {
            // A block mapping at the top (flow text starting with `{` would
            // be read as JSON), flow values below it.
            let (mut out, mut n, mut last) = (String::new(), 0, None);
            match v {
                Value::Object(map) => {
                    for (k, v) in map {
                        out.push_str(k);
                        out.push_str(": ");
                        flow(v, anchors, &mut n, &mut last, &mut out);
                        out.push('\n');
                    }
                }
                other => flow(other, anchors, &mut n, &mut last, &mut out),
            }
            out
        }
    }
}

fn check(text: &str) -> Verdict {
    let caps = default_caps();
    if let Err(e) = ax::task::parse(text) {
        crate::tally("parse refused");
        return explained("task::parse", e.to_string());
    }
    crate::tally("parsed");
    match ax::task::load(text, &caps) {
        Ok(_) => crate::tally("loaded"),
        Err(e) => explained("task::load", e.to_string())?,
    }
    Ok(())
}

/// The caps `ax serve` applies when its config sets none.
fn default_caps() -> ax::task::Caps {
    let file = ax::config::CapsFile::default();
    ax::task::Caps {
        max_fuel: file.max_fuel,
        max_memory_mb: file.max_memory_mb,
        max_timeout: file.max_timeout.unwrap_or(ax::config::DEFAULT_MAX_TIMEOUT),
    }
}

#[test]
fn fuzz() {
    let corpus: Vec<Vec<u8>> = crate::corpus(TARGET.name)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    crate::run(
        &TARGET,
        |bytes| check(&String::from_utf8_lossy(bytes)),
        strategy(),
        |case| check(&input(case, &corpus)),
    );
}
