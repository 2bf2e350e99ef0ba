//! The tasks every format's tests draw (the SPEC example, one step, names
//! no validated task has) and the tests of what all formats share: format
//! names, layers and order, a cyclic spec.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::task::parse;

/// The SPEC §4 example (trigger and limits left out: they do not show).
const ORDER_REPORT: &str = r#"
name: order_report
steps:
  - name: extract
    plugin: extract-orders@1.2.0
    input: { date: "${bizDate}" }
  - name: full
    needs: [extract]
    when: "steps.extract.output.rows > 800000"
    plugin: pack-full@1.0.0
  - name: incremental
    needs: [extract]
    when: "steps.extract.output.rows <= 800000"
    plugin: pack-incremental@1.0.0
  - name: push
    needs: [full, incremental]
    trigger_rule: one_success
    plugin: notify@1.0.0
    input: { text: "report ready: ${steps.extract.output.rows} rows" }
"#;

pub(super) fn order_report() -> TaskSpec {
    parse(ORDER_REPORT).expect("the SPEC example parses")
}

pub(super) fn one_step() -> TaskSpec {
    parse("name: hello\nplugin: hello@1.0.0\n").expect("parses")
}

pub(super) fn run_states() -> BTreeMap<String, String> {
    [
        ("extract", "succeeded"),
        ("full", "skipped"),
        ("incremental", "running"),
        ("push", "pending"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Names no validated task has, to prove every format escapes them.
pub(super) fn odd_names() -> TaskSpec {
    let mut spec = parse(
        "name: odd\nsteps:\n  - name: a\n    plugin: p@1.0.0\n  - name: b\n    plugin: p@1.0.0\n    needs: [a]\n",
    )
    .unwrap();
    spec.name = "say \"hi\"".into();
    spec.steps[0].name = "we\"ird\\na.me".into();
    spec.steps[1].name = "end".into();
    spec.steps[1].needs = vec![spec.steps[0].name.clone()];
    spec.steps[1].when = Some("x < 1 && y > \"#2\"\n  || z".into());
    spec
}

#[test]
fn format_names_round_trip_and_unknown_names_list_the_choices() {
    for f in [Format::Text, Format::Dot, Format::Mermaid, Format::Json] {
        assert_eq!(f.as_str().parse::<Format>(), Ok(f));
    }
    let err = "svg".parse::<Format>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown graph format `svg`: expected text, dot, mermaid or json"
    );
    assert_eq!(Format::default(), Format::Text);
}

#[test]
fn layers_follow_the_longest_path_and_order_puts_needs_first() {
    // `late` is declared first but needs the chain a → b; `side` only needs a.
    let spec = parse(
        "name: t\nsteps:\n\
         \x20 - { name: late, plugin: p@1.0.0, needs: [b, a] }\n\
         \x20 - { name: a, plugin: p@1.0.0 }\n\
         \x20 - { name: b, plugin: p@1.0.0, needs: [a] }\n\
         \x20 - { name: side, plugin: p@1.0.0, needs: [a] }\n",
    )
    .unwrap();
    let v: Value = serde_json::from_str(&render(&spec, None, Format::Json)).unwrap();
    assert_eq!(v["order"], json!(["a", "b", "late", "side"]));
    let layers: Vec<u64> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["layer"].as_u64().unwrap())
        .collect();
    assert_eq!(layers, [2, 0, 1, 1]);
    let text = render(&spec, None, Format::Text);
    assert!(text.contains("layer 3\n  late  "), "{text}");
    assert!(text.contains("  a     ──▶ b, late, side"), "{text}");
}

#[test]
fn a_cyclic_spec_still_renders() {
    let mut spec = order_report();
    spec.steps[0].needs = vec!["push".into()];
    for format in [Format::Text, Format::Dot, Format::Mermaid, Format::Json] {
        assert!(!render(&spec, None, format).is_empty());
    }
}
