//! Graphviz DOT: a `digraph` with a node per step (filled by its state in
//! the view of a run) and an edge per need, dashed into a conditional step.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Layout, colours, label_lines, state_of};

/// A DOT double-quoted string: `"` and `\` escaped, line breaks as `\n`
/// (a centred line break inside a label), other control characters dropped.
fn dot_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(super) fn dot(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
    let mut out = format!("digraph {} {{\n", dot_quote(&l.spec.name));
    out.push_str("  rankdir=LR;\n");
    out.push_str(
        "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", fontname=\"Helvetica\"];\n",
    );
    out.push_str("  edge [color=\"#4b5563\"];\n");
    for &i in &l.order {
        let step = &l.spec.steps[i];
        let state = state_of(states, &step.name);
        let label = label_lines(l, i, state).join("\n");
        let mut attrs = vec![format!("label={}", dot_quote(&label))];
        if let Some(when) = &step.when {
            attrs.push(format!("tooltip={}", dot_quote(&format!("when: {when}"))));
        }
        if let Some(state) = state {
            let (fill, stroke) = colours(state);
            attrs.push(format!("fillcolor=\"{fill}\", color=\"{stroke}\""));
        }
        let _ = writeln!(out, "  {} [{}];", dot_quote(&step.name), attrs.join(", "));
    }
    for (from, to) in l.edges() {
        // A conditional step may not run even when its upstream did: dashed.
        let style = if l.spec.steps[to].when.is_some() {
            " [style=dashed, label=\"when\"]"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {} -> {}{style};",
            dot_quote(l.name(from)),
            dot_quote(l.name(to))
        );
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use crate::graph::tests::{odd_names, one_step, order_report, run_states};
    use crate::graph::{Format, render};

    #[test]
    fn dot_has_a_node_per_step_and_an_edge_per_need() {
        let out = render(&order_report(), None, Format::Dot);
        assert!(
            out.starts_with("digraph \"order_report\" {\n  rankdir=LR;\n"),
            "{out}"
        );
        assert!(out.ends_with("}\n"));
        assert!(
            out.contains("  \"extract\" [label=\"extract\\nextract-orders@1.2.0\"];"),
            "{out}"
        );
        assert!(
            out.contains("\"push\" [label=\"push\\nnotify@1.0.0\\n(one_success)\"]"),
            "{out}"
        );
        assert!(
            out.contains(
                "label=\"full\\npack-full@1.0.0\\nwhen: steps.extract.output.rows > 800000\""
            ),
            "{out}"
        );
        assert!(
            out.contains("  \"extract\" -> \"full\" [style=dashed, label=\"when\"];"),
            "{out}"
        );
        assert!(out.contains("  \"full\" -> \"push\";"), "{out}");
        assert!(out.contains("  \"incremental\" -> \"push\";"), "{out}");
        assert_eq!(out.matches(" -> ").count(), 4);
        assert!(
            !out.contains("fillcolor=\"#bbf7d0\""),
            "no run, no state colours"
        );
    }

    #[test]
    fn dot_fills_nodes_by_state() {
        let out = render(&order_report(), Some(&run_states()), Format::Dot);
        assert!(
            out.contains(
                "\"extract\" [label=\"extract\\nextract-orders@1.2.0\\n· succeeded\", fillcolor=\"#bbf7d0\", color=\"#15803d\"];"
            ),
            "{out}"
        );
        assert!(out.contains("· skipped\""), "{out}");
        assert!(out.contains("fillcolor=\"#bfdbfe\""), "running: {out}");
    }

    #[test]
    fn dot_escapes_quotes_backslashes_and_newlines() {
        let out = render(&odd_names(), None, Format::Dot);
        assert!(out.starts_with("digraph \"say \\\"hi\\\"\" {"), "{out}");
        assert!(out.contains("  \"we\\\"ird\\\\na.me\" -> \"end\""), "{out}");
        assert!(
            out.contains("tooltip=\"when: x < 1 && y > \\\"#2\\\"\\n  || z\""),
            "{out}"
        );
        // Every line is a statement: no raw newline leaked out of a string.
        for line in out.lines().skip(1) {
            assert!(
                line == "}" || line.ends_with(';'),
                "unterminated line `{line}` in {out}"
            );
        }
    }

    #[test]
    fn dot_of_one_step_has_no_edge() {
        let out = render(&one_step(), None, Format::Dot);
        assert!(
            out.contains("\"hello\" [label=\"hello\\nhello@1.0.0\"];"),
            "{out}"
        );
        assert!(!out.contains("->"), "{out}");
    }
}
