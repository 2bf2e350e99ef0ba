//! Active runs held in memory: a run's record with its parsed definition,
//! DAG counters, conditions and the cancellation of its running attempts.

use super::*;

/// An active run held in memory, with its parsed definition.
pub(super) struct ActiveRun {
    pub(super) rec: RunRecord,
    pub(super) spec: TaskSpec,
    pub(super) tz: chrono_tz::Tz,
    /// The DAG as indices, and per-step counters of ended upstreams.
    pub(super) graph: Graph,
    pub(super) readiness: Readiness,
    /// Steps whose upstreams all ended but which are not decided yet (the
    /// run is held or cancelled, or it was just activated).
    pub(super) candidates: Vec<usize>,
    /// Parsed `when` conditions, by step.
    pub(super) conds: Vec<Option<Condition>>,
    /// Steps whose condition is being evaluated, with the token of that
    /// evaluation (`cond_pool`): they stay `pending` until it is back.
    pub(super) evaluating: HashMap<usize, u64>,
    /// Waiting behind an active run of its task (`overlap: queue_one`).
    pub(super) held: bool,
    /// Set when a person cancelled the run.
    pub(super) cancelled: bool,
    /// Cancellation of running attempts, by step index.
    pub(super) cancels: HashMap<usize, CancellationToken>,
}

impl ActiveRun {
    /// Brings a run into memory: indexes its DAG, counts ended upstreams
    /// from the stored states, parses its conditions.
    pub(super) fn new(rec: RunRecord, spec: TaskSpec, held: bool) -> Self {
        let graph = Graph::new(&spec);
        let states: Vec<StepStatus> = rec.steps.iter().map(|s| s.status).collect();
        let (readiness, candidates) = Readiness::new(&graph, &states);
        // Conditions were validated on save; one that no longer parses fails
        // its step when evaluated.
        let conds = spec
            .steps
            .iter()
            .map(|s| {
                s.when
                    .as_deref()
                    .map(Condition::parse_cached)
                    .and_then(Result::ok)
            })
            .collect();
        Self {
            tz: task_timezone(&spec),
            rec,
            spec,
            graph,
            readiness,
            candidates,
            conds,
            evaluating: HashMap::new(),
            held,
            cancelled: false,
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
