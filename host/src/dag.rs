//! Pure checks on a task's step graph: duplicate names, unknown `needs`,
//! cycles (named in order), a deterministic topological order and the
//! transitive upstream of a step.
//!
//! The graph is given as `(name, needs)` pairs in declaration order; an edge
//! goes from a step to each step it needs. This module does no I/O and knows
//! nothing about plugins or runs; deciding when a step may start from its
//! upstream states is `task::TriggerRule::evaluate`.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

/// What is wrong with a step graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DagError {
    /// Two steps share a name.
    #[error("duplicate step name `{0}`")]
    Duplicate(String),
    /// A step needs a step that does not exist.
    #[error("step `{step}` needs `{need}`, which is not a step of this task")]
    UnknownNeed {
        /// The step with the bad `needs` entry.
        step: String,
        /// The missing name.
        need: String,
    },
    /// Steps need each other in a loop. The list starts and ends with the same
    /// step; each step needs the next one.
    #[error("cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
}

/// Checks the graph and returns a topological order (indices into `steps`):
/// every step comes after all the steps it needs. Among steps that are ready
/// at the same time, the one declared first comes first, so the order is
/// deterministic and equals declaration order when that is already valid.
///
/// Errors are reported in this order: the first duplicate name, then the
/// first unknown need (by step, then by position in `needs`), then a cycle
/// found by a depth-first search from the first declared step, rotated to
/// start at the earliest declared step on it.
pub fn check(steps: &[(&str, &[String])]) -> Result<Vec<usize>, DagError> {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(steps.len());
    for (i, (name, _)) in steps.iter().enumerate() {
        if index.insert(name, i).is_some() {
            return Err(DagError::Duplicate((*name).to_owned()));
        }
    }
    // Edges as indices, repeated needs collapsed.
    let mut needs: Vec<Vec<usize>> = Vec::with_capacity(steps.len());
    for (name, step_needs) in steps {
        let mut targets = Vec::with_capacity(step_needs.len());
        for need in step_needs.iter() {
            let &target = index
                .get(need.as_str())
                .ok_or_else(|| DagError::UnknownNeed {
                    step: (*name).to_owned(),
                    need: need.clone(),
                })?;
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
        needs.push(targets);
    }
    if let Some(cycle) = find_cycle(&needs) {
        return Err(DagError::Cycle(
            cycle.into_iter().map(|i| steps[i].0.to_owned()).collect(),
        ));
    }
    Ok(topological_order(&needs))
}

/// A cycle among named nodes whose edges may point at names that are not
/// nodes (those edges are ignored: an `after` trigger may name a task not
/// saved yet). The same search as [`check`]: linear in nodes and edges, and
/// the cycle is named from its earliest listed node, repeated at the end.
pub fn find_named_cycle(nodes: &[(&str, &[String])]) -> Option<Vec<String>> {
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (*name, i))
        .collect();
    let edges: Vec<Vec<usize>> = nodes
        .iter()
        .map(|(_, to)| {
            let mut targets: Vec<usize> = Vec::with_capacity(to.len());
            for t in to.iter().filter_map(|t| index.get(t.as_str()).copied()) {
                if !targets.contains(&t) {
                    targets.push(t);
                }
            }
            targets
        })
        .collect();
    find_cycle(&edges).map(|c| c.into_iter().map(|i| nodes[i].0.to_owned()).collect())
}

/// Finds a cycle by iterative depth-first search (no recursion, so a long
/// chain cannot overflow the stack). Returns the step indices of the cycle,
/// starting at its earliest declared step and repeating it at the end.
fn find_cycle(needs: &[Vec<usize>]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; needs.len()];
    for root in 0..needs.len() {
        if mark[root] != Mark::New {
            continue;
        }
        // The current path, each with the position of its next edge to follow.
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::OnPath;
        while let Some((node, edge)) = path.last_mut() {
            let node = *node;
            let Some(&next) = needs[node].get(*edge) else {
                mark[node] = Mark::Done;
                path.pop();
                continue;
            };
            *edge += 1;
            match mark[next] {
                Mark::New => {
                    mark[next] = Mark::OnPath;
                    path.push((next, 0));
                }
                Mark::OnPath => {
                    let start = path.iter().position(|&(n, _)| n == next).unwrap_or(0);
                    let mut cycle: Vec<usize> = path[start..].iter().map(|&(n, _)| n).collect();
                    let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                    cycle.rotate_left(first);
                    cycle.push(cycle[0]);
                    return Some(cycle);
                }
                Mark::Done => {}
            }
        }
    }
    None
}

/// Kahn's algorithm with the lowest ready index first. Assumes no cycle.
fn topological_order(needs: &[Vec<usize>]) -> Vec<usize> {
    let mut waiting_on: Vec<usize> = needs.iter().map(Vec::len).collect();
    let mut needed_by: Vec<Vec<usize>> = vec![Vec::new(); needs.len()];
    for (step, targets) in needs.iter().enumerate() {
        for &target in targets {
            needed_by[target].push(step);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..needs.len())
        .filter(|&i| waiting_on[i] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(needs.len());
    while let Some(Reverse(step)) = ready.pop() {
        order.push(step);
        for &downstream in &needed_by[step] {
            waiting_on[downstream] -= 1;
            if waiting_on[downstream] == 0 {
                ready.push(Reverse(downstream));
            }
        }
    }
    order
}

/// The names of every step that `steps[index]` needs, directly or through
/// other steps. Unknown names are included as written but not followed; a
/// cycle does not loop forever. The step itself is included only if it is on
/// a cycle.
pub fn upstream(steps: &[(&str, &[String])], index: usize) -> BTreeSet<String> {
    let by_name: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (*n, i))
        .collect();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<&str> = match steps.get(index) {
        Some((_, needs)) => needs.iter().map(String::as_str).collect(),
        None => return seen,
    };
    while let Some(name) = stack.pop() {
        if !seen.insert(name.to_owned()) {
            continue;
        }
        if let Some(&i) = by_name.get(name) {
            stack.extend(steps[i].1.iter().map(String::as_str));
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds owned `(name, needs)` pairs from a compact description.
    fn graph(spec: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        spec.iter()
            .map(|(n, needs)| {
                (
                    (*n).to_owned(),
                    needs.iter().map(|s| (*s).to_owned()).collect(),
                )
            })
            .collect()
    }

    fn run_check(spec: &[(&str, &[&str])]) -> Result<Vec<usize>, DagError> {
        let owned = graph(spec);
        let borrowed: Vec<(&str, &[String])> = owned
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        check(&borrowed)
    }

    fn run_upstream(spec: &[(&str, &[&str])], index: usize) -> Vec<String> {
        let owned = graph(spec);
        let borrowed: Vec<(&str, &[String])> = owned
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        upstream(&borrowed, index).into_iter().collect()
    }

    #[test]
    fn empty_graph_has_empty_order() {
        assert_eq!(run_check(&[]).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn valid_declaration_order_is_kept() {
        let order = run_check(&[
            ("extract", &[]),
            ("full", &["extract"]),
            ("incremental", &["extract"]),
            ("push", &["full", "incremental"]),
        ])
        .unwrap();
        assert_eq!(order, [0, 1, 2, 3]);
    }

    #[test]
    fn order_puts_needs_first_and_is_deterministic() {
        let spec: &[(&str, &[&str])] = &[
            ("d", &["b", "c"]),
            ("c", &["a"]),
            ("b", &["a"]),
            ("a", &[]),
            ("e", &[]),
        ];
        let order = run_check(spec).unwrap();
        assert_eq!(order, [3, 1, 2, 0, 4]);
        for _ in 0..5 {
            assert_eq!(run_check(spec).unwrap(), order);
        }
    }

    #[test]
    fn independent_steps_come_in_declaration_order() {
        assert_eq!(
            run_check(&[("z", &[]), ("y", &[]), ("x", &[])]).unwrap(),
            [0, 1, 2]
        );
    }

    #[test]
    fn duplicate_name_is_rejected() {
        let err = run_check(&[("a", &[]), ("b", &[]), ("a", &[])]).unwrap_err();
        assert_eq!(err, DagError::Duplicate("a".into()));
        assert_eq!(err.to_string(), "duplicate step name `a`");
    }

    #[test]
    fn unknown_need_is_rejected_naming_both_steps() {
        let err = run_check(&[("a", &[]), ("b", &["a", "nope"])]).unwrap_err();
        assert_eq!(
            err,
            DagError::UnknownNeed {
                step: "b".into(),
                need: "nope".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "step `b` needs `nope`, which is not a step of this task"
        );
    }

    #[test]
    fn cycle_is_rejected_with_its_path_in_order() {
        let err = run_check(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]).unwrap_err();
        assert_eq!(
            err,
            DagError::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        assert_eq!(err.to_string(), "cycle: a -> b -> c -> a");
    }

    #[test]
    fn cycle_starts_at_its_earliest_declared_step() {
        // The search enters the loop at `c` (via `entry`), but the report starts at `x`.
        let err = run_check(&[
            ("entry", &["c"]),
            ("x", &["y"]),
            ("c", &["x"]),
            ("y", &["c"]),
        ])
        .unwrap_err();
        assert_eq!(err.to_string(), "cycle: x -> y -> c -> x");
    }

    #[test]
    fn cycle_excludes_steps_that_only_lead_into_it() {
        let err = run_check(&[
            ("root", &[]),
            ("lead", &["p"]),
            ("p", &["q"]),
            ("q", &["p"]),
        ])
        .unwrap_err();
        assert_eq!(err.to_string(), "cycle: p -> q -> p");
    }

    #[test]
    fn self_need_is_a_cycle_of_one() {
        let err = run_check(&[("a", &[]), ("b", &["b"])]).unwrap_err();
        assert_eq!(err.to_string(), "cycle: b -> b");
    }

    #[test]
    fn duplicate_is_reported_before_unknown_need_and_cycle() {
        let err = run_check(&[("a", &["a"]), ("b", &["zz"]), ("a", &[])]).unwrap_err();
        assert_eq!(err, DagError::Duplicate("a".into()));
        let err = run_check(&[("a", &["a"]), ("b", &["zz"])]).unwrap_err();
        assert!(matches!(err, DagError::UnknownNeed { .. }));
    }

    #[test]
    fn repeated_needs_are_harmless() {
        assert_eq!(
            run_check(&[("a", &[]), ("b", &["a", "a"])]).unwrap(),
            [0, 1]
        );
    }

    #[test]
    fn long_chain_does_not_overflow_the_stack() {
        let names: Vec<String> = (0..20_000).map(|i| format!("s{i}")).collect();
        let needs: Vec<Vec<String>> = (0..names.len())
            .map(|i| {
                if i + 1 < names.len() {
                    vec![names[i + 1].clone()]
                } else {
                    vec![]
                }
            })
            .collect();
        let steps: Vec<(&str, &[String])> = names
            .iter()
            .zip(&needs)
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let order = check(&steps).unwrap();
        assert_eq!(order.first(), Some(&(names.len() - 1)));
        assert_eq!(order.last(), Some(&0));
        assert_eq!(upstream(&steps, 0).len(), names.len() - 1);
    }

    #[test]
    fn upstream_is_transitive() {
        let spec: &[(&str, &[&str])] = &[
            ("extract", &[]),
            ("full", &["extract"]),
            ("incremental", &["extract"]),
            ("push", &["full", "incremental"]),
            ("other", &[]),
        ];
        assert_eq!(run_upstream(spec, 3), ["extract", "full", "incremental"]);
        assert_eq!(run_upstream(spec, 1), ["extract"]);
        assert!(run_upstream(spec, 0).is_empty());
        assert!(run_upstream(spec, 4).is_empty());
    }

    #[test]
    fn upstream_survives_cycles_and_unknown_names() {
        let spec: &[(&str, &[&str])] = &[("a", &["b"]), ("b", &["a", "ghost"])];
        assert_eq!(run_upstream(spec, 0), ["a", "b", "ghost"]);
        assert!(run_upstream(spec, 7).is_empty());
    }

    #[test]
    fn named_cycles_ignore_unknown_targets_and_start_at_the_first_node() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (a, b, c) = (v(&["b", "ghost"]), v(&["c"]), v(&["a"]));
        let nodes = [
            ("a", a.as_slice()),
            ("b", b.as_slice()),
            ("c", c.as_slice()),
        ];
        assert_eq!(find_named_cycle(&nodes), Some(v(&["a", "b", "c", "a"])));
        let (ghost, to_a) = (v(&["ghost"]), v(&["a"]));
        let open = [("a", ghost.as_slice()), ("b", to_a.as_slice())];
        assert_eq!(find_named_cycle(&open), None);
    }

    #[test]
    fn named_cycle_search_is_linear_on_diamonds() {
        // 2 * 2000 nodes, each needing both nodes of the layer below: an
        // all-paths search would take 2^2000 steps; this one visits each
        // edge once.
        let mut nodes: Vec<(String, Vec<String>)> = vec![("base".into(), vec![])];
        for layer in 1..=2000 {
            let below = if layer == 1 {
                vec!["base".to_string(), "base".to_string()]
            } else {
                vec![format!("x{}", layer - 1), format!("y{}", layer - 1)]
            };
            nodes.push((format!("x{layer}"), below.clone()));
            nodes.push((format!("y{layer}"), below));
        }
        nodes[0].1.push("x2000".into());
        let named: Vec<(&str, &[String])> = nodes
            .iter()
            .map(|(n, e)| (n.as_str(), e.as_slice()))
            .collect();
        let cycle = find_named_cycle(&named).unwrap();
        assert_eq!(cycle.len(), 2002);
        assert_eq!((cycle[0].as_str(), cycle[2001].as_str()), ("base", "base"));
    }
}
