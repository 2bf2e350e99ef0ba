//! Mermaid: a `flowchart LR` with ids and labels Mermaid cannot misread,
//! dotted edges into conditional steps, and a class per state.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Layout, colours, label_lines, one_line, state_of};

/// A node id Mermaid cannot misread: `s<index>_` (unique, and no keyword such
/// as `end` or edge marker such as a leading `o`/`x`) plus the name with
/// everything but ASCII letters and digits as `_`.
fn mermaid_id(l: &Layout<'_>, i: usize) -> String {
    let name: String = l
        .name(i)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("s{i}_{name}")
}

/// Text inside a quoted Mermaid label, with the characters Mermaid or its
/// HTML rendering would read as syntax written as entity codes.
fn mermaid_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in one_line(text).chars() {
        match c {
            '#' => out.push_str("#35;"),
            '"' => out.push_str("#quot;"),
            '&' => out.push_str("#amp;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '`' => out.push_str("#96;"),
            c => out.push(c),
        }
    }
    out
}

fn mermaid_class(state: &str) -> String {
    let name: String = state
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("state_{name}")
}

pub(super) fn mermaid(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
    let mut out = String::from("flowchart LR\n");
    // State → its nodes, for one `class` line per state (sorted, so stable).
    let mut classes: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for &i in &l.order {
        let state = state_of(states, l.name(i));
        let label: Vec<String> = label_lines(l, i, state)
            .iter()
            .map(|line| mermaid_text(line))
            .collect();
        let id = mermaid_id(l, i);
        let _ = writeln!(out, "  {id}[\"{}\"]", label.join("<br/>"));
        if let Some(state) = state {
            classes.entry(state).or_default().push(id);
        }
    }
    for (from, to) in l.edges() {
        // Dotted into a conditional step, as in the DOT form.
        let arrow = if l.spec.steps[to].when.is_some() {
            "-.->"
        } else {
            "-->"
        };
        let _ = writeln!(
            out,
            "  {} {arrow} {}",
            mermaid_id(l, from),
            mermaid_id(l, to)
        );
    }
    for (state, ids) in &classes {
        let (fill, stroke) = colours(state);
        let class = mermaid_class(state);
        let _ = writeln!(
            out,
            "  classDef {class} fill:{fill},stroke:{stroke},color:#111827"
        );
        let _ = writeln!(out, "  class {} {class}", ids.join(","));
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::graph::tests::{odd_names, one_step, order_report, run_states};
    use crate::graph::{Format, render};

    #[test]
    fn mermaid_uses_safe_ids_and_dotted_edges_into_conditions() {
        let out = render(&order_report(), None, Format::Mermaid);
        assert_eq!(
            out,
            "flowchart LR\n\
             \x20 s0_extract[\"extract<br/>extract-orders@1.2.0\"]\n\
             \x20 s1_full[\"full<br/>pack-full@1.0.0<br/>when: steps.extract.output.rows #gt; 800000\"]\n\
             \x20 s2_incremental[\"incremental<br/>pack-incremental@1.0.0<br/>when: steps.extract.output.rows #lt;= 800000\"]\n\
             \x20 s3_push[\"push<br/>notify@1.0.0<br/>(one_success)\"]\n\
             \x20 s0_extract -.-> s1_full\n\
             \x20 s0_extract -.-> s2_incremental\n\
             \x20 s1_full --> s3_push\n\
             \x20 s2_incremental --> s3_push\n"
        );
    }

    #[test]
    fn mermaid_classes_nodes_by_state() {
        let out = render(&order_report(), Some(&run_states()), Format::Mermaid);
        assert!(
            out.contains("s0_extract[\"extract<br/>extract-orders@1.2.0<br/>· succeeded\"]"),
            "{out}"
        );
        assert!(
            out.contains("  classDef state_succeeded fill:#bbf7d0,stroke:#15803d,color:#111827\n  class s0_extract state_succeeded\n"),
            "{out}"
        );
        for class in ["state_skipped", "state_running", "state_pending"] {
            assert!(
                out.contains(&format!("classDef {class} ")),
                "{class}: {out}"
            );
        }
    }

    #[test]
    fn mermaid_escapes_odd_names_and_conditions() {
        let out = render(&odd_names(), None, Format::Mermaid);
        assert!(
            out.contains("  s0_we_ird_na_me[\"we#quot;ird\\na.me<br/>p@1.0.0\"]"),
            "{out}"
        );
        // `end` is a Mermaid keyword; the prefix keeps it an id.
        assert!(
            out.contains("  s1_end[\"end<br/>p@1.0.0<br/>when: x #lt; 1 #amp;#amp; y #gt; #quot;#35;2#quot; || z\"]"),
            "{out}"
        );
        assert!(out.contains("  s0_we_ird_na_me -.-> s1_end\n"), "{out}");
    }

    #[test]
    fn mermaid_of_one_step_is_one_node() {
        assert_eq!(
            render(&one_step(), None, Format::Mermaid),
            "flowchart LR\n  s0_hello[\"hello<br/>hello@1.0.0\"]\n"
        );
    }
}
