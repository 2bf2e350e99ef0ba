//! Evaluating a condition against a run's state ([`CondVars`]) under a
//! [`Budget`]: the variables built from only the parts it reads, the meter
//! installed on the evaluating thread, cel's interpreter run on the metered
//! tree, and its outcome (a bool, or why not).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cel::common::ast::IdedExpr;
use cel::common::types::{CelMap, CelMapKey, CelNull, CelString};
use cel::common::value::Val;
use cel::{Context, Value};

use super::convert::Convert;
use super::error::{describe, eval_message};
use super::meter::{Installed, Meter, Stop, charge};
use super::reads::{Extract, Reads, WHOLE, reads_too_large};
use super::{Budget, CondError, Condition, ENV, on_own_stack};

/// The state of a run a condition is evaluated against.
#[derive(Debug, Clone, Copy)]
pub struct CondVars<'a> {
    /// Upstream (and all other) steps of the run: status as its snake_case
    /// name ("succeeded", "skipped", …) and output (None when the step has
    /// none). Only the steps the condition names are converted.
    pub steps: &'a [(&'a str, &'a str, Option<&'a serde_json::Value>)],
    /// The trigger input.
    pub input: &'a serde_json::Value,
    /// `run.id`.
    pub run_id: &'a str,
    /// `run.scheduled_for` (RFC 3339).
    pub scheduled_for: &'a str,
    /// `run.biz_date` (yyyy-MM-dd).
    pub biz_date: &'a str,
    /// `run.trigger`: what started the run ("cron", "manual", …).
    pub trigger: &'a str,
}

impl Condition {
    /// [`Condition::eval_here`] on what [`Condition::extract`] copied.
    pub fn eval_extract(&self, data: &Extract, budget: &Budget) -> Result<bool, CondError> {
        if data.over {
            return Err(CondError::Budget(reads_too_large(budget.steps)));
        }
        let steps: Vec<(&str, &str, Option<&serde_json::Value>)> = data
            .steps
            .iter()
            .map(|(name, status, output)| (name.as_str(), status.as_str(), output.as_ref()))
            .collect();
        let vars = CondVars {
            steps: &steps,
            input: &data.input,
            run_id: &data.run_id,
            scheduled_for: &data.scheduled_for,
            biz_date: &data.biz_date,
            trigger: &data.trigger,
        };
        self.eval_here(&vars, budget)
    }

    /// Evaluates against the run's state under the default [`Budget`] on a
    /// thread of its own with [`EVAL_STACK`](super::EVAL_STACK), and blocks until done. See
    /// [`Condition::eval_here`].
    pub fn eval(&self, vars: &CondVars<'_>) -> Result<bool, CondError> {
        let budget = Budget::default();
        on_own_stack(|| self.eval_here(vars, &budget))
    }

    /// Evaluates against the run's state on the calling thread, which must
    /// have [`EVAL_STACK`](super::EVAL_STACK) bytes of stack (the scheduler's evaluation
    /// threads do). Anything but a bool is [`CondError::NotBool`]; a missing
    /// field or a type mismatch is [`CondError::Eval`] with the CEL message
    /// (never silently false); past `budget`, [`CondError::Budget`].
    pub fn eval_here(&self, vars: &CondVars<'_>, budget: &Budget) -> Result<bool, CondError> {
        let meter = Meter::new(budget, Arc::clone(&self.patterns));
        let _installed = Installed::new(meter);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            charge(|m| m.spend(self.base_steps));
            self.execute(vars, &self.expr, &self.reads)
        }));
        match outcome {
            Ok(result) => result,
            Err(payload) => match payload.downcast::<Stop>() {
                Ok(stop) => Err(CondError::Budget(stop.reason(budget))),
                Err(_) => Err(CondError::Internal("the CEL library panicked".to_owned())),
            },
        }
    }

    /// Builds the variables — converting only the parts of the run's data
    /// the condition reads, charged to the meter — and runs `tree` (the
    /// metered one, inside the meter; tests compare it with the tree as
    /// parsed).
    pub(super) fn execute(
        &self,
        vars: &CondVars<'_>,
        tree: &IdedExpr,
        reads: &Reads,
    ) -> Result<bool, CondError> {
        let (cap_steps, cap_bytes, limit) =
            charge(|m| Ok(Some((m.steps_left, m.bytes_left, m.limit)))).unwrap_or((
                u64::MAX,
                u64::MAX,
                u64::MAX,
            ));
        let mut conv = Convert {
            steps: 0,
            bytes: 0,
            cap_steps,
            cap_bytes,
            limit,
        };
        let mut ctx = Context::with_env(Arc::clone(&ENV));
        if !self.steps.is_empty() {
            let mut map: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = HashMap::new();
            for name in &self.steps {
                // A step missing from `vars` stays missing: reading it is an
                // evaluation error naming it.
                let Some((name, status, output)) = vars.steps.iter().find(|s| s.0 == name) else {
                    continue;
                };
                let read = reads.steps.fields.get(*name).unwrap_or(&WHOLE);
                let mut step: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = HashMap::new();
                if read.full || read.fields.contains_key("status") {
                    step.insert(
                        CelMapKey::from("status"),
                        Box::new(CelString::from(*status)),
                    );
                }
                let output_read = if read.full {
                    Some(&WHOLE)
                } else {
                    read.fields.get("output")
                };
                if let Some(output_read) = output_read {
                    let output = match output {
                        Some(v) => conv.cut(v, output_read, 1)?,
                        None => Box::new(CelNull),
                    };
                    step.insert(CelMapKey::from("output"), output);
                }
                map.insert(CelMapKey::from(*name), Box::new(CelMap::from(step)));
            }
            ctx.add_variable_as_val("steps", Box::new(CelMap::from(map)));
        }
        if self.uses_input {
            ctx.add_variable_as_val("input", conv.cut(vars.input, &reads.input, 1)?);
        }
        charge(|m| {
            m.spend(conv.steps)?;
            m.build(conv.bytes)
        });
        if self.uses_run {
            let run: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = [
                ("id", vars.run_id),
                ("scheduled_for", vars.scheduled_for),
                ("biz_date", vars.biz_date),
                ("trigger", vars.trigger),
            ]
            .into_iter()
            .map(|(k, v)| {
                (
                    CelMapKey::from(k),
                    Box::new(CelString::from(v)) as Box<dyn Val>,
                )
            })
            .collect();
            ctx.add_variable_as_val("run", Box::new(CelMap::from(run)));
        }
        match Value::resolve(tree, &ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CondError::NotBool(describe(&other))),
            Err(e) => Err(CondError::Eval(eval_message(&e))),
        }
    }
}
