//! Active runs held in memory: a run's record with its parsed definition,
//! DAG counters, conditions and the cancellation of its running attempts.

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cond::{CondVars, Condition, Extract};
use crate::model::RunRecord;
use crate::schedule;
use crate::scheduler::clock::{from_ms, rfc3339};
use crate::scheduler::core::RunState;
use crate::scheduler::core::run::step_status_name;
use crate::task::TaskSpec;

/// An active run held in memory: the core's state of it, with what only
/// the actor needs (its time zone, the cancellation of running attempts).
/// It derefs to the [`RunState`].
pub(super) struct ActiveRun {
    pub(super) state: RunState,
    pub(super) tz: chrono_tz::Tz,
    /// Cancellation of running attempts, by step index.
    pub(super) cancels: HashMap<usize, CancellationToken>,
}

impl std::ops::Deref for ActiveRun {
    type Target = RunState;

    fn deref(&self) -> &RunState {
        &self.state
    }
}

impl std::ops::DerefMut for ActiveRun {
    fn deref_mut(&mut self) -> &mut RunState {
        &mut self.state
    }
}

impl ActiveRun {
    /// Brings a run into memory: indexes its DAG, counts ended upstreams
    /// from the stored states, parses its conditions.
    pub(super) fn new(rec: RunRecord, spec: Arc<TaskSpec>, held: bool) -> Self {
        Self {
            tz: task_timezone(&spec),
            state: RunState::new(rec, spec, held),
            cancels: HashMap::new(),
        }
    }

    /// What evaluating step `i`'s `when` needs, copied out of the run for
    /// the condition threads: the parsed condition and the parts of the
    /// run's data it reads (bounded by `budget`). `None` if it is not parsed
    /// (`advance` parses it before asking for an evaluation).
    pub(super) fn condition_job(
        &self,
        i: usize,
        budget: &crate::cond::Budget,
    ) -> Option<(Condition, Extract)> {
        let cond = self.conds[i].clone()?;
        let statuses: Vec<(&str, &str, Option<&serde_json::Value>)> = self
            .rec
            .steps
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    step_status_name(s.status),
                    s.output.as_ref(),
                )
            })
            .collect();
        let biz_date = schedule::biz_date(from_ms(self.rec.scheduled_for), self.tz);
        let scheduled_for = rfc3339(self.rec.scheduled_for);
        let trigger = serde_json::to_value(self.rec.trigger)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let vars = CondVars {
            steps: &statuses,
            input: &self.rec.input,
            run_id: &self.rec.id,
            scheduled_for: &scheduled_for,
            biz_date: &biz_date,
            trigger: &trigger,
        };
        let data = cond.extract(&vars, budget);
        Some((cond, data))
    }
}

pub(super) fn task_timezone(spec: &TaskSpec) -> chrono_tz::Tz {
    spec.trigger
        .as_ref()
        .and_then(|t| t.timezone.as_deref())
        .and_then(|z| z.parse().ok())
        .unwrap_or(chrono_tz::UTC)
}
