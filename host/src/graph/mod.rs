//! Renders a task's DAG for people and tools: a terminal view grouped in
//! layers, Graphviz DOT, Mermaid and JSON, optionally annotated with the step
//! states of one run (`GET /v1/tasks/{name}/graph`, `ax graph`).
//!
//! Pure: a [`TaskSpec`] and a step → state map in, text out. Loading the task
//! or the run is the service's job ([`crate::service::Ax::task_graph`]);
//! checking the graph is [`crate::dag`]'s, on save. A graph that is not a DAG
//! (never stored, but possible in a hand-made spec) still renders, in
//! declaration order, and needs naming unknown steps are drawn as no edge.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::str::FromStr;

use serde_json::{Value, json};

use crate::dag;
use crate::task::{TaskSpec, TriggerRule};
use crate::template::shorten;

/// An output format of [`render`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// For a terminal: steps by layer, one line each, with their downstream steps.
    #[default]
    Text,
    /// Graphviz `digraph` (`dot -Tsvg`).
    Dot,
    /// A Mermaid `flowchart LR` (renders in GitHub and GitLab Markdown).
    Mermaid,
    /// `{"task", "nodes", "edges", "order"}` for programs.
    Json,
}

impl Format {
    /// The name accepted by [`FromStr`] (`text`, `dot`, `mermaid`, `json`).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Dot => "dot",
            Format::Mermaid => "mermaid",
            Format::Json => "json",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A format name that is none of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown graph format `{0}`: expected text, dot, mermaid or json")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Format::Text),
            "dot" => Ok(Format::Dot),
            "mermaid" => Ok(Format::Mermaid),
            "json" => Ok(Format::Json),
            other => Err(UnknownFormat(other.to_owned())),
        }
    }
}

/// Renders `spec`'s DAG in `format`. `states` maps a step name to its status
/// name (`"succeeded"`, `"running"`, …) for the view of one run; steps missing
/// from it are drawn without a state. Text, DOT and Mermaid end with a newline;
/// JSON is one pretty-printed object.
pub fn render(
    spec: &TaskSpec,
    states: Option<&BTreeMap<String, String>>,
    format: Format,
) -> String {
    let layout = Layout::new(spec);
    match format {
        Format::Text => text(&layout, states),
        Format::Dot => dot(&layout, states),
        Format::Mermaid => mermaid(&layout, states),
        Format::Json => json_graph(&layout, states),
    }
}

/// The shape of the graph, as step indices, computed once for every format.
struct Layout<'a> {
    spec: &'a TaskSpec,
    /// Per step, the steps it needs: known names only, repeats collapsed.
    needs: Vec<Vec<usize>>,
    /// Per step, the steps that need it, in topological order.
    downstream: Vec<Vec<usize>>,
    /// Every step once, each after the steps it needs ([`dag::check`]'s order).
    order: Vec<usize>,
    /// Per step, the longest path from a root (roots are 0).
    layer: Vec<usize>,
}

impl<'a> Layout<'a> {
    fn new(spec: &'a TaskSpec) -> Self {
        let steps = &spec.steps;
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(steps.len());
        for (i, step) in steps.iter().enumerate() {
            index.entry(step.name.as_str()).or_insert(i);
        }
        let needs: Vec<Vec<usize>> = steps
            .iter()
            .map(|step| {
                let mut known: Vec<usize> = Vec::with_capacity(step.needs.len());
                for need in &step.needs {
                    if let Some(&j) = index.get(need.as_str())
                        && !known.contains(&j)
                    {
                        known.push(j);
                    }
                }
                known
            })
            .collect();
        // A stored spec always passes; the fallback only keeps a broken one drawable.
        let order = dag::check(&spec.graph()).unwrap_or_else(|_| (0..steps.len()).collect());
        let mut layer = vec![0; steps.len()];
        let mut downstream = vec![Vec::new(); steps.len()];
        for &i in &order {
            // In a valid order every need already has its layer; on the
            // fallback a later need counts as 0, which cannot loop.
            layer[i] = needs[i].iter().map(|&j| layer[j] + 1).max().unwrap_or(0);
            for &j in &needs[i] {
                downstream[j].push(i);
            }
        }
        Self {
            spec,
            needs,
            downstream,
            order,
            layer,
        }
    }

    fn name(&self, i: usize) -> &str {
        &self.spec.steps[i].name
    }

    fn layers(&self) -> usize {
        self.layer.iter().max().map_or(0, |&l| l + 1)
    }

    /// Every edge as `(from, to)`: from a needed step to the step needing it,
    /// in topological order of `to`.
    fn edges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.order
            .iter()
            .flat_map(move |&to| self.needs[to].iter().map(move |&from| (from, to)))
    }
}

fn state_of<'s>(states: Option<&'s BTreeMap<String, String>>, name: &str) -> Option<&'s str> {
    states.and_then(|s| s.get(name)).map(String::as_str)
}

/// The trigger rule's name when it is not the default `all_success`.
fn rule_note(rule: TriggerRule) -> Option<&'static str> {
    match rule {
        TriggerRule::AllSuccess => None,
        TriggerRule::OneSuccess => Some("one_success"),
        TriggerRule::AllDone => Some("all_done"),
        TriggerRule::NoneFailed => Some("none_failed"),
    }
}

/// One line of text: control characters (newlines of a YAML block `when`)
/// become spaces and runs of whitespace collapse.
fn one_line(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn pad(text: &str, width: usize) -> String {
    let len = text.chars().count();
    format!("{text}{}", " ".repeat(width.saturating_sub(len)))
}

/// Fill and border colours of a node in a given state (Tailwind's 200/700
/// shades: readable with black text, and told apart without the label).
fn colours(state: &str) -> (&'static str, &'static str) {
    match state {
        "pending" => ("#f3f4f6", "#6b7280"),
        "queued" => ("#e0f2fe", "#0369a1"),
        "running" => ("#bfdbfe", "#1d4ed8"),
        "retry_wait" => ("#fde68a", "#b45309"),
        "succeeded" => ("#bbf7d0", "#15803d"),
        "failed" => ("#fecaca", "#b91c1c"),
        "dead" => ("#fca5a5", "#7f1d1d"),
        "skipped" => ("#e5e7eb", "#9ca3af"),
        "cancelled" => ("#d1d5db", "#374151"),
        _ => ("#ffffff", "#6b7280"),
    }
}

// ---------------------------------------------------------------------------
// Text
// ---------------------------------------------------------------------------

fn text(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
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

// ---------------------------------------------------------------------------
// DOT
// ---------------------------------------------------------------------------

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

/// The label lines of a node: name, plugin, then what changes when it runs.
fn label_lines(l: &Layout<'_>, i: usize, state: Option<&str>) -> Vec<String> {
    let step = &l.spec.steps[i];
    let mut lines = vec![one_line(&step.name), one_line(&step.plugin.to_string())];
    if let Some(when) = &step.when {
        lines.push(format!("when: {}", shorten(&one_line(when))));
    }
    if let Some(rule) = rule_note(step.trigger_rule) {
        lines.push(format!("({rule})"));
    }
    if let Some(state) = state {
        lines.push(format!("· {}", one_line(state)));
    }
    lines
}

fn dot(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
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

// ---------------------------------------------------------------------------
// Mermaid
// ---------------------------------------------------------------------------

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

fn mermaid(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
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

// ---------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------

fn json_graph(l: &Layout<'_>, states: Option<&BTreeMap<String, String>>) -> String {
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

    fn order_report() -> TaskSpec {
        parse(ORDER_REPORT).expect("the SPEC example parses")
    }

    fn one_step() -> TaskSpec {
        parse("name: hello\nplugin: hello@1.0.0\n").expect("parses")
    }

    fn run_states() -> BTreeMap<String, String> {
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
    fn odd_names() -> TaskSpec {
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
}
