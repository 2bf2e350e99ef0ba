//! The task reader: `ax::task::parse` and `load` with the host's default caps,
//! on arbitrary text, on edited corpus tasks and on documents built from the
//! field names of docs/TASKS.md (as JSON, which is also YAML, and as YAML
//! flow text with anchors and aliases).

use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;

use crate::strategies::{Text, json, text};
use crate::{Target, Verdict, explained};

const TARGET: Target = Target {
    name: "task",
    cases: 384,
    bound: Duration::from_secs(2),
};

/// Field names of a task, its steps, triggers, limits, retry, alerts and
/// retention (docs/TASKS.md).
const KEYS: &[&str] = &[
    "name", "description", "trigger", "cron", "timezone", "every", "at", "delay", "after",
    "on", "catch_up", "overlap", "priority", "steps", "plugin", "input", "limits", "fuel",
    "memory_mb", "timeout", "pool", "retry", "max_attempts", "backoff", "initial", "factor",
    "max", "retry_on", "needs", "when", "trigger_rule", "alerts", "webhook", "url", "events",
    "retention", "keep_runs", "keep_for", "tenant", "http", "allow", "kv", "config", "secrets",
    "paused", "jitter", "window",
];

/// Values that mean something in those fields.
const VALUES: &[&str] = &[
    "0 30 1 * * ?", "*/10 * * * * ?", "0 0 0 31 2 ?", "Asia/Shanghai", "Mars/Base", "latest",
    "all", "none", "skip", "queue", "allow", "one_success", "all_success", "all_done",
    "none_failed", "extract", "full", "push", "echo@1.0.0", "hello", "steps.extract.output.rows > 1",
    "steps.a.status == 'failed'", "2026-12-01T00:00:00Z", "9999-12-31T23:00:00-02:00",
    "succeeded", "failed", "trap", "timeout", "https://example.com/hook", "exponential",
];

/// Tokens for text edits: YAML syntax that changes the shape of a document.
const TOKENS: &[&str] = &[
    "\n", "\n  ", "\n- ", ": ", "- ", "&a ", "*a", "<<: *a\n", "!!binary ", "!!str ", "? ", "|\n",
    ">-\n", "'", "\"", "#", "\t", "{", "}", "[", "]", ",", "---\n", "...\n", "~", "%YAML 1.1\n",
    "name", "steps", "needs: [", "when: ", "plugin: a@1.0.0", "0x10", "1e400", ".inf", ".nan",
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

fn strategy() -> impl Strategy<Value = Case> {
    let tree = || {
        // Mostly a mapping at the top, as a task is.
        prop::collection::vec((proptest::sample::select(KEYS), json(KEYS, VALUES)), 0..10)
            .prop_map(|pairs| Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
    };
    prop_oneof![
        2 => text(TOKENS).prop_map(Case::Text),
        2 => tree().prop_map(Case::Json),
        2 => (tree(), prop::collection::vec(any::<bool>(), 0..16)).prop_map(|(t, a)| Case::Yaml(t, a)),
    ]
}

/// YAML flow text for `value`; where `anchors` says so, a node gets an
/// anchor and a later leaf becomes an alias to the last one.
fn flow(value: &Value, anchors: &[bool], n: &mut usize, out: &mut String) {
    *n += 1;
    let anchor = anchors.get(*n % anchors.len().max(1)).copied().unwrap_or(false);
    match value {
        Value::Object(map) => {
            if anchor {
                out.push_str(&format!("&n{n} "));
            }
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(k);
                out.push_str(": ");
                flow(v, anchors, n, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(v, anchors, n, out);
            }
            out.push(']');
        }
        _ if anchor && *n > 2 => out.push_str(&format!("*n{}", *n - 2)),
        Value::String(s) if s.chars().all(|c| c.is_ascii_alphanumeric() || "_@.-/ ".contains(c)) => {
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
            let mut out = String::new();
            flow(v, anchors, &mut 0, &mut out);
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
    let corpus: Vec<Vec<u8>> = crate::corpus(TARGET.name).into_iter().map(|(_, b)| b).collect();
    crate::run(
        &TARGET,
        |bytes| check(&String::from_utf8_lossy(bytes)),
        strategy(),
        |case| check(&input(case, &corpus)),
    );
}
