//! Trigger rules: how the results of a step's direct upstream steps decide
//! whether it runs, waits or is skipped ([`TriggerRule::evaluate`], with
//! Airflow's names). Pure; the scheduler asks when an upstream step ends, and
//! evaluates the step's `when` only once the rule says [`RuleVerdict::Run`].

use serde::{Deserialize, Serialize};

use crate::model::StepStatus;

/// How upstream results decide whether a step runs (SPEC §4, Airflow's names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerRule {
    /// Run when every upstream succeeded; skip as soon as one did not.
    #[default]
    AllSuccess,
    /// Run as soon as one upstream succeeded; skip if all ended and none did.
    OneSuccess,
    /// Run once every upstream ended, whatever the result.
    AllDone,
    /// Run once every upstream ended succeeded or skipped; skip as soon as one failed.
    NoneFailed,
}

/// What [`TriggerRule::evaluate`] decides for a step whose upstreams are in given states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleVerdict {
    /// Not decidable yet: some upstream is still pending or running.
    Wait,
    /// The rule is met: evaluate `when`, then queue the step.
    Run,
    /// The rule can no longer be met: the step is skipped.
    Skip,
}

impl TriggerRule {
    /// Decides a step's fate from the states of its direct upstream steps.
    /// A step with no upstream always runs. `Succeeded` is success; `Skipped`
    /// is neither success nor failure; `Failed`, `Dead` and `Cancelled` are
    /// failures; anything else is still in progress.
    pub fn evaluate(self, upstream: &[StepStatus]) -> RuleVerdict {
        if upstream.is_empty() {
            return RuleVerdict::Run;
        }
        let succeeded = |s: &StepStatus| *s == StepStatus::Succeeded;
        let failed = |s: &StepStatus| {
            matches!(
                s,
                StepStatus::Failed | StepStatus::Dead | StepStatus::Cancelled
            )
        };
        let done = |s: &StepStatus| s.is_terminal();
        let all_done = upstream.iter().all(done);
        match self {
            TriggerRule::AllSuccess => {
                if upstream.iter().any(|s| done(s) && !succeeded(s)) {
                    RuleVerdict::Skip
                } else if upstream.iter().all(succeeded) {
                    RuleVerdict::Run
                } else {
                    RuleVerdict::Wait
                }
            }
            TriggerRule::OneSuccess => {
                if upstream.iter().any(succeeded) {
                    RuleVerdict::Run
                } else if all_done {
                    RuleVerdict::Skip
                } else {
                    RuleVerdict::Wait
                }
            }
            TriggerRule::AllDone => {
                if all_done {
                    RuleVerdict::Run
                } else {
                    RuleVerdict::Wait
                }
            }
            TriggerRule::NoneFailed => {
                if upstream.iter().any(failed) {
                    RuleVerdict::Skip
                } else if all_done {
                    RuleVerdict::Run
                } else {
                    RuleVerdict::Wait
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_rules_decide_from_upstream_states() {
        use RuleVerdict::{Run, Skip, Wait};
        use StepStatus::{Cancelled, Dead, Failed, Pending, Running, Skipped, Succeeded};
        let cases: [(TriggerRule, &[StepStatus], RuleVerdict); 22] = [
            (TriggerRule::AllSuccess, &[], Run),
            (TriggerRule::AllSuccess, &[Succeeded, Succeeded], Run),
            (TriggerRule::AllSuccess, &[Succeeded, Running], Wait),
            (TriggerRule::AllSuccess, &[Running, Failed], Skip),
            (TriggerRule::AllSuccess, &[Succeeded, Skipped], Skip),
            (TriggerRule::AllSuccess, &[Dead], Skip),
            (TriggerRule::OneSuccess, &[Skipped, Succeeded], Run),
            (TriggerRule::OneSuccess, &[Running, Succeeded], Run),
            (TriggerRule::OneSuccess, &[Skipped, Running], Wait),
            (TriggerRule::OneSuccess, &[Skipped, Failed], Skip),
            (TriggerRule::OneSuccess, &[Cancelled], Skip),
            (
                TriggerRule::AllDone,
                &[Failed, Skipped, Succeeded, Dead, Cancelled],
                Run,
            ),
            (TriggerRule::AllDone, &[Failed, Pending], Wait),
            (TriggerRule::AllDone, &[StepStatus::RetryWait], Wait),
            (TriggerRule::AllDone, &[StepStatus::Queued], Wait),
            (TriggerRule::NoneFailed, &[Succeeded, Skipped], Run),
            (TriggerRule::NoneFailed, &[Skipped, Skipped], Run),
            (TriggerRule::NoneFailed, &[Succeeded, Running], Wait),
            (TriggerRule::NoneFailed, &[Running, Failed], Skip),
            (TriggerRule::NoneFailed, &[Dead], Skip),
            (TriggerRule::NoneFailed, &[Cancelled, Succeeded], Skip),
            (TriggerRule::NoneFailed, &[], Run),
        ];
        for (rule, upstream, verdict) in cases {
            assert_eq!(rule.evaluate(upstream), verdict, "{rule:?} on {upstream:?}");
        }
    }
}
