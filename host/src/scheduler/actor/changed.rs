//! Which step runs of a run changed since the run writer stored it last
//! ([`crate::store::Changed`]), so that a store keeping step runs apart
//! writes only those (sled's runs of many steps): a run of 250 steps
//! otherwise had all of them encoded and written at each of its changes.
//!
//! The writer keeps the steps of the runs it stored, with the revision they
//! were stored at, and compares the next write of a run with them (equality
//! of each step: cheaper than encoding it). A run it does not know, or
//! knows at another revision (a write lost, or written over by `rebase`),
//! is written whole, so what it says is never behind the store. The steps
//! kept are those of the written records, moved, not copied; a run is
//! forgotten when it ends, and all of them when more than [`BOUND`] pile up.

use std::collections::HashMap;

use crate::model::{RunStatus, StepRunRecord};
use crate::store::{Changed, RunWrite};

/// Runs whose steps the writer keeps at most.
const BOUND: usize = 20_000;

/// The steps of the runs last stored, by run: (revision, steps).
#[derive(Default)]
pub(super) struct StoredSteps {
    runs: HashMap<String, (u64, Vec<StepRunRecord>)>,
}

impl StoredSteps {
    /// Says in each of `runs` which of its steps changed since the store's
    /// revision of it (a run given twice: the second since the first).
    pub(super) fn mark(&self, runs: &mut [RunWrite]) {
        let mut earlier: HashMap<&str, usize> = HashMap::new();
        let mut marks = Vec::with_capacity(runs.len());
        for (i, write) in runs.iter().enumerate() {
            let run = &write.run;
            let before = match earlier.insert(&run.id, i) {
                Some(j) => Some((runs[j].run.revision, &runs[j].run.steps)),
                None => self
                    .runs
                    .get(run.id.as_str())
                    .map(|(rev, steps)| (*rev, steps)),
            };
            marks.push(match before {
                Some((revision, steps)) if revision + 1 == run.revision => {
                    changed(steps, &run.steps)
                }
                _ => Changed::All,
            });
        }
        for (write, mark) in runs.iter_mut().zip(marks) {
            write.changed = mark;
        }
    }

    /// Keeps the steps of `runs`, just stored (an ended run is forgotten).
    pub(super) fn stored(&mut self, runs: Vec<RunWrite>) {
        if self.runs.len() > BOUND {
            self.runs.clear();
        }
        for RunWrite { run, .. } in runs {
            // A queued run waits (and may wait long): kept only once it runs.
            if run.status.is_terminal() || run.status == RunStatus::Queued {
                self.runs.remove(run.id.as_str());
            } else {
                self.runs.insert(run.id.into(), (run.revision, run.steps));
            }
        }
    }

    /// Forgets every run: what the store holds is no longer known.
    pub(super) fn forget(&mut self) {
        self.runs.clear();
    }
}

/// The steps of `now` that differ from `before`'s (all past its end).
fn changed(before: &[StepRunRecord], now: &[StepRunRecord]) -> Changed {
    Changed::Steps(
        now.iter()
            .enumerate()
            .filter(|(i, step)| before.get(*i) != Some(*step))
            .map(|(i, _)| i)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StepStatus;

    fn step(name: &str, status: StepStatus) -> StepRunRecord {
        StepRunRecord {
            status,
            ..StepRunRecord::pending(name)
        }
    }

    fn write(revision: u64, steps: Vec<StepRunRecord>) -> RunWrite {
        let mut run = crate::store::conformance::run("r1", "t1", "task", RunStatus::Running);
        run.revision = revision;
        run.steps = steps;
        RunWrite::whole(run, Vec::new())
    }

    fn steps(statuses: &[StepStatus]) -> Vec<StepRunRecord> {
        statuses
            .iter()
            .enumerate()
            .map(|(i, s)| step(&format!("s{i}"), *s))
            .collect()
    }

    /// A run written again names the steps that changed; a run not known,
    /// or known at another revision, is written whole; a run given twice is
    /// compared with its first record.
    #[test]
    fn a_write_names_the_steps_changed_since_the_stored_revision() {
        use StepStatus::{Pending, Queued, Succeeded};
        let mut stored = StoredSteps::default();
        let mut first = vec![write(2, steps(&[Pending, Pending, Pending]))];
        stored.mark(&mut first);
        assert_eq!(first[0].changed, Changed::All, "not known");
        stored.stored(first);

        let mut next = vec![
            write(3, steps(&[Succeeded, Pending, Pending])),
            write(4, steps(&[Succeeded, Queued, Queued])),
        ];
        stored.mark(&mut next);
        assert_eq!(next[0].changed, Changed::Steps(vec![0]));
        assert_eq!(next[1].changed, Changed::Steps(vec![1, 2]));
        stored.stored(next);

        let mut skipped = vec![write(6, steps(&[Succeeded, Queued, Queued]))];
        stored.mark(&mut skipped);
        assert_eq!(skipped[0].changed, Changed::All, "a revision between");
    }
}
