//! Renders a task's DAG for people and tools: a terminal view grouped in
//! layers, Graphviz DOT, Mermaid and JSON, optionally annotated with the step
//! states of one run (`GET /v1/tasks/{name}/graph`, `ax graph`).
//!
//! Pure: a [`TaskSpec`] and a step → state map in, text out. Loading the task
//! or the run is the service's job ([`crate::service::Ax::task_graph`]);
//! checking the graph is [`crate::dag`]'s, on save. A graph that is not a DAG
//! (never stored, but possible in a hand-made spec) still renders, in
//! declaration order, and needs naming unknown steps are drawn as no edge.
//!
//! # Layout
//! - here: [`Format`], [`render`], the layout every format draws (layers,
//!   order, edges) and the labels they share;
//! - `text`, `dot`, `mermaid`, `json`: one file per format.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use crate::dag;
use crate::task::{TaskSpec, TriggerRule};
use crate::template::shorten;

mod dot;
mod json;
mod mermaid;
#[cfg(test)]
mod tests;
mod text;

use self::dot::dot;
use self::json::json_graph;
use self::mermaid::mermaid;
use self::text::text;

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
