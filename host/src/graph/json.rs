//! JSON for programs: `{"task", "nodes", "edges", "order"}`, each node
//! with its layer and, for a run, its state.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Layout, state_of};

pub(super) fn json_graph(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
    let nodes: Vec<Value> = l
        .spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let mut node = json!({
                "name": step.name,
                "plugin": step.plugin.to_string(),
                "needs": step.needs,
                "when": step.when,
                "trigger_rule": step.trigger_rule,
                "layer": l.layer[i],
            });
            if states.is_some() {
                node["state"] = json!(state_of(states, &step.name));
            }
            node
        })
        .collect();
    let edges: Vec<Value> = l
        .edges()
        .map(|(from, to)| json!({ "from": l.name(from), "to": l.name(to) }))
        .collect();
    let order: Vec<&str> = l.order.iter().map(|&i| l.name(i)).collect();
    let graph = json!({
        "task": l.spec.name,
        "nodes": nodes,
        "edges": edges,
        "order": order,
    });
    // Serializing a `Value` cannot fail.
    let mut out = serde_json::to_string_pretty(&graph).unwrap_or_default();
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::{odd_names, one_step, order_report, run_states};
    use crate::graph::{Format, render};

    #[test]
    fn json_lists_nodes_edges_and_order() {
        let out = render(&order_report(), None, Format::Json);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["task"], "order_report");
        assert_eq!(
            v["order"],
            json!(["extract", "full", "incremental", "push"])
        );
        assert_eq!(
            v["edges"],
            json!([
                {"from": "extract", "to": "full"},
                {"from": "extract", "to": "incremental"},
                {"from": "full", "to": "push"},
                {"from": "incremental", "to": "push"},
            ])
        );
        assert_eq!(
            v["nodes"][1],
            json!({
                "name": "full",
                "plugin": "pack-full@1.0.0",
                "needs": ["extract"],
                "when": "steps.extract.output.rows > 800000",
                "trigger_rule": "all_success",
                "layer": 1,
            })
        );
        assert_eq!(v["nodes"][0]["when"], Value::Null);
        assert_eq!(v["nodes"][3]["trigger_rule"], "one_success");
        assert_eq!(v["nodes"][3]["layer"], 2);
        assert!(v["nodes"][0].get("state").is_none(), "no run, no state");
    }

    #[test]
    fn json_of_a_run_has_a_state_per_node() {
        let mut states = run_states();
        states.remove("push");
        let v: Value =
            serde_json::from_str(&render(&order_report(), Some(&states), Format::Json)).unwrap();
        let got: Vec<&Value> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| &n["state"])
            .collect();
        assert_eq!(
            got,
            [
                &json!("succeeded"),
                &json!("skipped"),
                &json!("running"),
                &Value::Null
            ]
        );
    }

    #[test]
    fn json_of_one_step_and_of_odd_names_is_valid() {
        let v: Value = serde_json::from_str(&render(&one_step(), None, Format::Json)).unwrap();
        assert_eq!(v["order"], json!(["hello"]));
        assert_eq!(v["edges"], json!([]));
        let v: Value = serde_json::from_str(&render(&odd_names(), None, Format::Json)).unwrap();
        assert_eq!(v["edges"][0]["from"], "we\"ird\\na.me");
        assert_eq!(v["nodes"][1]["when"], "x < 1 && y > \"#2\"\n  || z");
    }
}
