//! The terminal view: steps by layer, one line each, with the steps
//! downstream of them, the plugin, the condition, a trigger rule that is
//! not the default and, for a run, the step's state.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Layout, one_line, rule_note, state_of};

fn pad(text: &str, width: usize) -> String {
    let len = text.chars().count();
    format!("{text}{}", " ".repeat(width.saturating_sub(len)))
}

pub(super) fn text(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
    let steps = &l.spec.steps;
    let layers = l.layers();
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let mut out = one_line(&l.spec.name);
    out.push_str(": ");
    out.push_str(&plural(steps.len(), "step"));
    if layers > 1 {
        out.push_str(" in ");
        out.push_str(&plural(layers, "layer"));
    }
    out.push('\n');

    let names: Vec<String> = steps.iter().map(|s| one_line(&s.name)).collect();
    let arrows: Vec<String> = (0..steps.len())
        .map(|i| {
            if l.downstream[i].is_empty() {
                String::new()
            } else {
                let downs: Vec<&str> = l.downstream[i].iter().map(|&j| names[j].as_str()).collect();
                format!("──▶ {}", downs.join(", "))
            }
        })
        .collect();
    let name_width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let arrow_width = arrows.iter().map(|a| a.chars().count()).max().unwrap_or(0);

    for current in 0..layers {
        if layers > 1 {
            let _ = writeln!(out, "layer {}", current + 1);
        }
        for &i in l.order.iter().filter(|&&i| l.layer[i] == current) {
            let step = &steps[i];
            let mut line = format!("  {}  ", pad(&names[i], name_width));
            if arrow_width > 0 {
                line.push_str(&pad(&arrows[i], arrow_width));
                line.push_str("  ");
            }
            line.push_str(&one_line(&step.plugin.to_string()));
            if let Some(when) = &step.when {
                let _ = write!(line, " [when: {}]", one_line(when));
            }
            if let Some(rule) = rule_note(step.trigger_rule) {
                let _ = write!(line, " ({rule})");
            }
            if let Some(state) = state_of(states, &step.name) {
                let _ = write!(line, " · {}", one_line(state));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::{odd_names, one_step, order_report, run_states};
    use crate::graph::{Format, render};

    #[test]
    fn text_shows_layers_edges_conditions_and_rules() {
        let out = render(&order_report(), None, Format::Text);
        assert_eq!(
            out,
            "order_report: 4 steps in 3 layers\n\
             layer 1\n\
             \x20 extract      ──▶ full, incremental  extract-orders@1.2.0\n\
             layer 2\n\
             \x20 full         ──▶ push               pack-full@1.0.0 [when: steps.extract.output.rows > 800000]\n\
             \x20 incremental  ──▶ push               pack-incremental@1.0.0 [when: steps.extract.output.rows <= 800000]\n\
             layer 3\n\
             \x20 push                                notify@1.0.0 (one_success)\n"
        );
    }

    #[test]
    fn text_of_a_run_ends_each_line_with_the_state() {
        let out = render(&order_report(), Some(&run_states()), Format::Text);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[2].ends_with("extract-orders@1.2.0 · succeeded"),
            "{out}"
        );
        assert!(lines[4].ends_with("800000] · skipped"), "{out}");
        assert!(lines[5].ends_with("800000] · running"), "{out}");
        assert!(lines[7].ends_with("(one_success) · pending"), "{out}");
    }

    #[test]
    fn text_of_one_step_is_two_short_lines() {
        assert_eq!(
            render(&one_step(), None, Format::Text),
            "hello: 1 step\n  hello  hello@1.0.0\n"
        );
        let states = BTreeMap::from([("hello".to_owned(), "succeeded".to_owned())]);
        assert_eq!(
            render(&one_step(), Some(&states), Format::Text),
            "hello: 1 step\n  hello  hello@1.0.0 · succeeded\n"
        );
    }

    #[test]
    fn text_keeps_a_multi_line_condition_on_one_line() {
        let out = render(&odd_names(), None, Format::Text);
        assert!(out.contains("[when: x < 1 && y > \"#2\" || z]"), "{out}");
        assert_eq!(out.lines().count(), 5, "{out}");
    }
}
