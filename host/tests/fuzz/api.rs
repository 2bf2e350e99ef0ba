//! API request bodies: `api::error::parse_json` (the path every JSON body of
//! the API takes) into the body types the library exposes — a tenant
//! (`TenantSpec`, with its quota and alerts), a quota, the optional
//! `null`-or-object body — and a stored task spec, as the store's read
//! parses it (`TaskSpec::stored`) and through serde (`TaskSpec`'s
//! `Deserialize`). Bodies are objects
//! built from the fields of those types, with edge values and whole floats,
//! plus edited corpus bodies and garbage. The trigger, token and resolve
//! bodies are private to the API module and reached only over HTTP (the
//! integration tests); the same `parse_json` is fuzzed here.

use std::time::Duration;

use ax::api::error::parse_json;
use ax::model::Definition;
use ax::service::TenantSpec;
use ax::task::TaskSpec;
use ax::tenant::Quota;
use proptest::prelude::*;
use serde_json::Value;

use crate::strategies::{Text, json, object, text};
use crate::{Target, Verdict, explained};

const TARGET: Target = Target {
    name: "api",
    cases: 2048,
    bound: Duration::from_secs(2),
};

const KEYS: &[&str] = &[
    "name",
    "description",
    "quota",
    "allow_http",
    "alerts",
    "fuel_per_window",
    "window",
    "wall_ms_per_window",
    "max_fuel_per_attempt",
    "max_memory_mb",
    "max_timeout",
    "max_running",
    "max_queued",
    "max_priority",
    "max_tasks",
    "max_plugins",
    "kv_bytes",
    "weight",
    "input",
    "idempotency_key",
    "priority",
    "label",
    "action",
    "webhook",
    "url",
    "events",
    "steps",
    "plugin",
    "trigger",
    "limits",
    "retry",
];

const VALUES: &[&str] = &[
    "acme",
    "24h",
    "1h",
    "90m",
    "0s",
    "5m",
    "api.example.com",
    "*.example.com",
    "10.0.0.1",
    "https://hooks.example.com/x",
    "run_failed",
    "echo@1.0.0",
    "k972",
];

const TOKENS: &[&str] = &[
    "{", "}", "[", "]", ":", ",", "\"", "null", "1.0", "-0", "1e999", "\\u0000", "\\ud800",
];

#[derive(Debug, Clone)]
enum Case {
    Body(Value),
    Text(Text),
}

/// Mostly a number of the right kind: whole, whole as a float, negative, huge.
fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => (0u64..1 << 40).prop_map(Value::from),
        1 => (0u32..1000).prop_map(|n| Value::from(f64::from(n))),
        1 => Just(serde_json::json!(0.5)),
        1 => Just(serde_json::json!(-1)),
        1 => Just(serde_json::json!(18446744073709551615u64)),
        1 => json(KEYS, VALUES),
    ]
    .boxed()
}

fn duration() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => proptest::sample::select(&["24h", "1h", "90m", "0s", "5m", "1ms", "100000000000h", "x", ""][..]).prop_map(Value::from),
        1 => json(KEYS, VALUES),
    ]
    .boxed()
}

fn quota() -> BoxedStrategy<Value> {
    let mut fields: Vec<(&'static str, BoxedStrategy<Value>)> = [
        "fuel_per_window",
        "wall_ms_per_window",
        "max_fuel_per_attempt",
        "max_memory_mb",
        "max_running",
        "max_queued",
        "max_priority",
        "max_tasks",
        "max_plugins",
        "kv_bytes",
        "weight",
    ]
    .into_iter()
    .map(|k| (k, number()))
    .collect();
    fields.push(("window", duration()));
    fields.push(("max_timeout", duration()));
    object(0.5, fields)
}

fn tenant() -> BoxedStrategy<Value> {
    let hosts = prop::collection::vec(
        proptest::sample::select(
            &[
                "api.example.com",
                "*.example.com",
                "10.0.0.1",
                "[::1]",
                "",
                "*",
            ][..],
        )
        .prop_map(Value::from),
        0..4,
    )
    .prop_map(Value::Array)
    .boxed();
    let alerts = object(
        0.5,
        vec![
            (
                "webhook",
                proptest::sample::select(
                    &["https://hooks.example.com/x", "http://10.0.0.1/", "x"][..],
                )
                .prop_map(Value::from)
                .boxed(),
            ),
            (
                "on",
                json(KEYS, &["run_failed", "failed", "late", "succeeded"]),
            ),
        ],
    );
    object(
        0.5,
        vec![
        (
            "name",
            prop_oneof![4 => "[a-z][a-z0-9_-]{0,8}".prop_map(Value::from), 1 => json(KEYS, VALUES)]
                .boxed(),
        ),
        (
            "description",
            prop_oneof![4 => "\\PC{0,16}".prop_map(Value::from), 1 => json(KEYS, VALUES)].boxed(),
        ),
        ("quota", quota()),
        ("allow_http", hosts),
        ("alerts", alerts),
    ],
    )
}

fn strategy() -> impl Strategy<Value = Case> {
    let object = prop::collection::vec((proptest::sample::select(KEYS), json(KEYS, VALUES)), 0..8)
        .prop_map(|pairs| {
            Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        });
    prop_oneof![
        2 => tenant().prop_map(Case::Body),
        2 => quota().prop_map(Case::Body),
        1 => object.prop_map(Case::Body),
        1 => text(TOKENS).prop_map(Case::Text),
    ]
}

fn check(body: &[u8]) -> Verdict {
    if let Err(e) = parse_json::<TenantSpec>(body) {
        crate::tally("tenant refused");
        explained("parse_json::<TenantSpec>", e.to_string())?;
    }
    if let Err(e) = parse_json::<Quota>(body) {
        crate::tally("quota refused");
        explained("parse_json::<Quota>", e.to_string())?;
    }
    if let Err(e) = parse_json::<Option<Value>>(body) {
        explained("parse_json::<Option<Value>>", e.to_string())?;
    }
    if let Err(e) = serde_json::from_slice::<TaskSpec>(body) {
        explained("TaskSpec's Deserialize", e.to_string())?;
    } else {
        crate::tally("task accepted");
    }
    if let Ok(stored) = serde_json::from_slice::<Value>(body) {
        let definition = Definition::new(stored);
        let first = TaskSpec::stored(&definition).map_err(|e| e.to_string());
        if let Err(e) = &first {
            explained("TaskSpec::stored", e.clone())?;
        }
        // Parsed once: a second read gives what the first did.
        let again = TaskSpec::stored(&definition).map_err(|e| e.to_string());
        if first != again {
            return Err(format!("TaskSpec::stored read {first:?}, then {again:?}"));
        }
    }
    Ok(())
}

#[test]
fn fuzz() {
    let corpus: Vec<Vec<u8>> = crate::corpus(TARGET.name)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    crate::run(&TARGET, check, strategy(), |case| match case {
        Case::Body(v) => check(v.to_string().as_bytes()),
        Case::Text(t) => check(t.render(&corpus).as_bytes()),
    });
}
