//! Which steps of a run may be decided, incrementally: per step, counters of
//! upstreams still open, succeeded, failed and skipped. When an upstream
//! settles (reaches a terminal state) only its direct downstream steps are
//! touched, so a step costs O(its edges) over a whole run, not a rescan of the
//! DAG per event.
//!
//! A step is decided once *all* its upstreams are terminal — also for
//! `one_success` — so no step ever runs before its upstreams ended, and the
//! decision depends only on the final upstream states, never on the order in
//! which they finished:
//!
//! | rule | runs when | otherwise |
//! |---|---|---|
//! | `all_success` | every upstream succeeded | `cancelled` if one failed, else `skipped` |
//! | `one_success` | at least one succeeded | `skipped` if all were skipped, else `cancelled` |
//! | `all_done` | always | — |
//! | `none_failed` | none failed (skipped is fine) | `cancelled` |
//!
//! "Failed" means `failed`, `dead` or `cancelled`.

use std::collections::HashMap;

use crate::model::StepStatus;
use crate::task::{TaskSpec, TriggerRule};

/// The DAG of a task as indices.
#[derive(Clone, Debug)]
pub(crate) struct Graph {
    ups: Vec<Vec<usize>>,
    downs: Vec<Vec<usize>>,
    rules: Vec<TriggerRule>,
}

impl Graph {
    /// Builds the index form of `spec`'s steps (names already validated).
    pub(crate) fn new(spec: &TaskSpec) -> Self {
        let index: HashMap<&str, usize> = spec
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut ups = vec![Vec::new(); spec.steps.len()];
        let mut downs = vec![Vec::new(); spec.steps.len()];
        for (i, step) in spec.steps.iter().enumerate() {
            for need in &step.needs {
                if let Some(&u) = index.get(need.as_str()) {
                    ups[i].push(u);
                    downs[u].push(i);
                }
            }
        }
        Self {
            ups,
            downs,
            rules: spec.steps.iter().map(|s| s.trigger_rule).collect(),
        }
    }

    /// Whether no step needs `i` (its result is one of the run's results).
    pub(crate) fn is_leaf(&self, i: usize) -> bool {
        self.downs[i].is_empty()
    }

    /// The steps `i` needs.
    pub(crate) fn upstreams(&self, i: usize) -> &[usize] {
        &self.ups[i]
    }

    /// Each step's position in a topological order (Kahn's, taking ready
    /// steps in spec order): an upstream always comes before its dependants.
    pub(crate) fn topological_positions(&self) -> Vec<usize> {
        let n = self.ups.len();
        let mut waiting: Vec<usize> = self.ups.iter().map(Vec::len).collect();
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| waiting[i] == 0).collect();
        // Steps left on a cycle (refused on save) keep the last positions.
        let mut position = vec![n; n];
        let mut next = 0;
        while let Some(i) = ready.pop_first() {
            position[i] = next;
            next += 1;
            for &d in &self.downs[i] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.insert(d);
                }
            }
        }
        position
    }

    /// `i` and every step downstream of it, transitively.
    pub(crate) fn with_descendants(&self, i: usize) -> Vec<usize> {
        let mut seen = vec![false; self.downs.len()];
        let mut stack = vec![i];
        let mut out = Vec::new();
        while let Some(s) = stack.pop() {
            if std::mem::replace(&mut seen[s], true) {
                continue;
            }
            out.push(s);
            stack.extend(&self.downs[s]);
        }
        out
    }
}

/// What happens to a step whose upstreams all ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Run it (after its `when`, if any).
    Run,
    /// Mark it with this terminal status, for this reason.
    Settle(StepStatus, &'static str),
}

/// Per-step counters of one run.
#[derive(Clone, Debug)]
pub(crate) struct Readiness {
    open: Vec<u32>,
    ok: Vec<u32>,
    bad: Vec<u32>,
    skipped: Vec<u32>,
    settled: Vec<bool>,
}

fn is_bad(s: StepStatus) -> bool {
    matches!(
        s,
        StepStatus::Failed | StepStatus::Dead | StepStatus::Cancelled
    )
}

impl Readiness {
    /// Counters for the given current states; returns with them the pending
    /// steps that can be decided now.
    pub(crate) fn new(graph: &Graph, states: &[StepStatus]) -> (Self, Vec<usize>) {
        let n = states.len();
        let mut r = Self {
            open: graph.ups.iter().map(|u| u.len() as u32).collect(),
            ok: vec![0; n],
            bad: vec![0; n],
            skipped: vec![0; n],
            settled: vec![false; n],
        };
        let mut ignored = Vec::new();
        for (i, s) in states.iter().enumerate() {
            if s.is_terminal() {
                r.settle(graph, i, *s, &mut ignored);
            }
        }
        let ready = (0..n)
            .filter(|&i| states[i] == StepStatus::Pending && r.open[i] == 0)
            .collect();
        (r, ready)
    }

    /// Whether `i`'s terminal state was already counted downstream.
    pub(crate) fn is_settled(&self, i: usize) -> bool {
        self.settled[i]
    }

    /// Counts `i`'s terminal `status` in its downstream steps; pushes those
    /// whose upstreams have now all ended onto `decidable`.
    pub(crate) fn settle(
        &mut self,
        graph: &Graph,
        i: usize,
        status: StepStatus,
        decidable: &mut Vec<usize>,
    ) {
        if std::mem::replace(&mut self.settled[i], true) {
            return;
        }
        for &d in &graph.downs[i] {
            self.open[d] -= 1;
            match status {
                StepStatus::Succeeded => self.ok[d] += 1,
                StepStatus::Skipped => self.skipped[d] += 1,
                s if is_bad(s) => self.bad[d] += 1,
                _ => {}
            }
            if self.open[d] == 0 {
                decidable.push(d);
            }
        }
    }

    /// The decision for a step whose upstreams all ended.
    pub(crate) fn decide(&self, graph: &Graph, i: usize) -> Decision {
        let total = graph.ups[i].len() as u32;
        let (ok, bad) = (self.ok[i], self.bad[i]);
        debug_assert_eq!(self.open[i], 0, "decided before its upstreams ended");
        match graph.rules[i] {
            _ if total == 0 => Decision::Run,
            TriggerRule::AllSuccess if ok == total => Decision::Run,
            TriggerRule::AllSuccess if bad > 0 => Decision::Settle(
                StepStatus::Cancelled,
                "an upstream step did not succeed (trigger_rule: all_success)",
            ),
            TriggerRule::AllSuccess => Decision::Settle(
                StepStatus::Skipped,
                "an upstream step was skipped (trigger_rule: all_success)",
            ),
            TriggerRule::OneSuccess if ok > 0 => Decision::Run,
            TriggerRule::OneSuccess if bad == 0 => Decision::Settle(
                StepStatus::Skipped,
                "every upstream step was skipped (trigger_rule: one_success)",
            ),
            TriggerRule::OneSuccess => Decision::Settle(
                StepStatus::Cancelled,
                "no upstream step succeeded (trigger_rule: one_success)",
            ),
            TriggerRule::AllDone => Decision::Run,
            TriggerRule::NoneFailed if bad == 0 => Decision::Run,
            TriggerRule::NoneFailed => Decision::Settle(
                StepStatus::Cancelled,
                "an upstream step failed (trigger_rule: none_failed)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Property tests over random DAGs: the incremental engine, driven in a
    //! random completion order, against a reference evaluation that decides
    //! each step from the full list of its upstream states.

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::task;

    const RULES: [&str; 4] = ["all_success", "one_success", "all_done", "none_failed"];

    /// A random DAG (edges only from earlier to later steps, so acyclic) with
    /// random rules, and what each step does when it runs.
    fn random_task(rng: &mut StdRng) -> (TaskSpec, Vec<StepStatus>) {
        let n = rng.random_range(1..14);
        let mut yaml = "name: p\nsteps:\n".to_string();
        let mut plays = Vec::new();
        for i in 0..n {
            let needs: Vec<String> = (0..i)
                .filter(|_| rng.random_bool(0.3))
                .map(|u| format!("s{u}"))
                .collect();
            let rule = RULES[rng.random_range(0..4)];
            yaml.push_str(&format!(
                "  - name: s{i}\n    plugin: x@1.0.0\n    needs: [{}]\n    trigger_rule: {rule}\n",
                needs.join(", ")
            ));
            // What the step's attempt (or its condition) gives when it runs.
            plays.push(match rng.random_range(0..6) {
                0 => StepStatus::Failed,
                1 => StepStatus::Skipped,
                2 => StepStatus::Dead,
                _ => StepStatus::Succeeded,
            });
        }
        (task::parse(&yaml).expect("valid random task"), plays)
    }

    /// Decides every step in topological (declaration) order from the final
    /// states of its upstreams.
    fn reference(spec: &TaskSpec, plays: &[StepStatus]) -> Vec<StepStatus> {
        let mut out: Vec<StepStatus> = Vec::new();
        for (i, step) in spec.steps.iter().enumerate() {
            let ups: Vec<StepStatus> = step
                .needs
                .iter()
                .map(|n| out[n[1..].parse::<usize>().unwrap()])
                .collect();
            let ok = ups.iter().filter(|s| **s == StepStatus::Succeeded).count();
            let bad = ups.iter().filter(|s| is_bad(**s)).count();
            let runs = match step.trigger_rule {
                _ if ups.is_empty() => Ok(()),
                TriggerRule::AllSuccess if ok == ups.len() => Ok(()),
                TriggerRule::AllSuccess if bad > 0 => Err(StepStatus::Cancelled),
                TriggerRule::AllSuccess => Err(StepStatus::Skipped),
                TriggerRule::OneSuccess if ok > 0 => Ok(()),
                TriggerRule::OneSuccess if bad == 0 => Err(StepStatus::Skipped),
                TriggerRule::OneSuccess => Err(StepStatus::Cancelled),
                TriggerRule::AllDone => Ok(()),
                TriggerRule::NoneFailed if bad == 0 => Ok(()),
                TriggerRule::NoneFailed => Err(StepStatus::Cancelled),
            };
            out.push(match runs {
                Ok(()) => plays[i],
                Err(s) => s,
            });
        }
        out
    }

    /// Runs the incremental engine; running steps finish in a random order.
    fn simulate(spec: &TaskSpec, plays: &[StepStatus], rng: &mut StdRng) -> Vec<StepStatus> {
        let graph = Graph::new(spec);
        let mut states = vec![StepStatus::Pending; spec.steps.len()];
        let (mut r, mut decidable) = Readiness::new(&graph, &states);
        let mut running: Vec<usize> = Vec::new();
        loop {
            while let Some(i) = decidable.pop() {
                assert_eq!(states[i], StepStatus::Pending, "step {i} decided twice");
                for &u in &graph.ups[i] {
                    assert!(
                        states[u].is_terminal(),
                        "step {i} decided before upstream {u} ended"
                    );
                }
                match r.decide(&graph, i) {
                    Decision::Run => {
                        states[i] = StepStatus::Running;
                        running.push(i);
                    }
                    Decision::Settle(s, _) => {
                        states[i] = s;
                        r.settle(&graph, i, s, &mut decidable);
                    }
                }
            }
            if running.is_empty() {
                break;
            }
            let i = running.swap_remove(rng.random_range(0..running.len()));
            states[i] = plays[i];
            r.settle(&graph, i, plays[i], &mut decidable);
        }
        states
    }

    #[test]
    fn every_step_ends_exactly_once_and_matches_the_reference() {
        for seed in 0..3000 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (spec, plays) = random_task(&mut rng);
            let got = simulate(&spec, &plays, &mut rng);
            assert!(got.iter().all(|s| s.is_terminal()), "seed {seed}: {got:?}");
            assert_eq!(got, reference(&spec, &plays), "seed {seed}");
        }
    }

    #[test]
    fn counters_rebuilt_mid_run_agree_with_the_incremental_ones() {
        // A run reopened or recovered rebuilds counters from states.
        let spec = task::parse(
            "name: p\nsteps:\n  - name: a\n    plugin: x@1.0.0\n  - name: b\n    plugin: x@1.0.0\n  - name: c\n    needs: [a, b]\n    plugin: x@1.0.0\n    trigger_rule: one_success\n",
        )
        .unwrap();
        let graph = Graph::new(&spec);
        let states = [StepStatus::Failed, StepStatus::Running, StepStatus::Pending];
        let (mut r, ready) = Readiness::new(&graph, &states);
        assert!(ready.is_empty());
        let mut decidable = Vec::new();
        r.settle(&graph, 1, StepStatus::Succeeded, &mut decidable);
        assert_eq!(decidable, [2]);
        assert_eq!(r.decide(&graph, 2), Decision::Run);
    }

    #[test]
    fn descendants_include_the_step_and_everything_below() {
        let spec = task::parse(
            "name: p\nsteps:\n  - name: a\n    plugin: x@1.0.0\n  - name: b\n    needs: [a]\n    plugin: x@1.0.0\n  - name: c\n    needs: [b]\n    plugin: x@1.0.0\n  - name: d\n    plugin: x@1.0.0\n",
        )
        .unwrap();
        let mut got = Graph::new(&spec).with_descendants(1);
        got.sort();
        assert_eq!(got, [1, 2]);
    }
}
