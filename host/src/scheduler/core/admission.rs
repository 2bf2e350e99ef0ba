//! The admission rule: whether a new run is let in, as pure functions of the
//! facts (the request, the tenant's record or live quota, the counts of the
//! moment), each answering the refusal it makes. Every rule is written here
//! once; its callers only gather the facts and map the refusal to their error.
//!
//! What lives here, in the order a manual trigger meets it:
//! - what the request asks, answered early by the service
//!   (`service::runs`, `Ax::check_trigger`) before the actor sees it, a
//!   [`RequestRefusal`]: the priority's range ([`check_priority`]) and the
//!   tenant's ceiling, the input's size against `max_input_bytes`
//!   ([`check_input_size`]), the idempotency key's length
//!   ([`check_idempotency_key`]), a disabled tenant ([`check_enabled`]);
//! - what depends on the moment, decided by the actor
//!   (`scheduler::actor::create`, `Actor::check_trigger`), a
//!   [`LimitRefusal`]: the tenant's queue bound ([`check_queue`]), its run
//!   data against `run_bytes` ([`check_run_bytes`]; admitted on an estimate
//!   far from the limit, [`run_bytes_clear`]), its window's budget
//!   used up under `out_of_fuel: refuse` ([`check_budget`]), its trigger
//!   rate ([`LimitRefusal::TriggerRate`]; the token bucket itself is
//!   `scheduler::quota`'s);
//! - what a run created anyway (a fire, an `after` run, a trigger that
//!   raced a change) is recorded as cancelled for, decided by the actor
//!   (`Actor::create_run`): its tenant disabled or out of budget
//!   ([`recorded_refusal`], the same rules as above, worded as the run's
//!   reason), or shed past the high-water mark ([`shed`]).
//!
//! A disabled tenant is refused by both: the service answers the trigger 403,
//! and the actor records any run of it that gets that far as cancelled.
//!
//! How the refusals become answers: [`RequestRefusal`] maps to the
//! service's errors (`service::Error`), [`LimitRefusal`] to the scheduler's
//! (`scheduler::Error`), which the service maps in turn; the statuses and
//! codes are `api::error`'s.

use std::time::Duration;

use crate::model::priority::MAX_PRIORITY;
use crate::model::time::rfc3339;
use crate::model::{Millis, show_bytes};
use crate::tenant::TenantRecord;

/// How long a trigger refused for a full queue is told to wait.
pub(crate) const QUEUE_FULL_RETRY: Duration = Duration::from_secs(5);

/// The longest idempotency key, in characters (as the API document's
/// `maxLength` counts them).
pub(crate) const MAX_IDEMPOTENCY_KEY_CHARS: usize = 256;

/// A trigger refused for what it asks: the same answer whenever it is asked.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub(crate) enum RequestRefusal {
    /// A priority outside `0..=MAX_PRIORITY`.
    #[error("priority {0} is not in 0..={MAX_PRIORITY}")]
    PriorityRange(u8),
    /// A priority above the tenant's ceiling
    /// ([`TenantRecord::check_priority`]'s words).
    #[error("{0}")]
    PriorityCeiling(String),
    /// An idempotency key empty or too long.
    #[error("idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters")]
    IdempotencyKey,
    /// The run's input and params over the tenant's `max_input_bytes`.
    #[error(
        "the run's input is {size} bytes of JSON; tenant `{tenant}` allows at most {limit} \
         (quota `max_input_bytes`): pass a reference to the data (a key, a URL) instead"
    )]
    InputTooLarge {
        /// The tenant.
        tenant: String,
        /// Bytes of JSON of input and params.
        size: u64,
        /// The tenant's `max_input_bytes`.
        limit: u64,
    },
    /// The tenant is disabled.
    #[error("tenant `{tenant}` is disabled; enable it to trigger runs")]
    TenantDisabled {
        /// The tenant.
        tenant: String,
    },
}

/// A trigger refused for the moment: its tenant's limits as they stand.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub(crate) enum LimitRefusal {
    /// The tenant has as many runs waiting as it may.
    #[error("the queue of tenant `{tenant}` is full ({queued} runs waiting); retry in {}s", QUEUE_FULL_RETRY.as_secs())]
    QueueFull {
        /// The tenant.
        tenant: String,
        /// Runs waiting.
        queued: usize,
    },
    /// A new run would take the tenant's run data over `run_bytes`.
    #[error(
        "tenant `{tenant}` keeps {} of run data and allows {} (quota `run_bytes`); \
         a new run of ~{} does not fit: wait for retention to delete finished runs, \
         shorten their retention, or raise the quota",
        show_bytes(*kept), show_bytes(*limit), show_bytes(*new)
    )]
    RunBytes {
        /// The tenant.
        tenant: String,
        /// Run data stored and created but not yet stored.
        kept: u64,
        /// The tenant's `run_bytes`.
        limit: u64,
        /// What the new run is expected to weigh.
        new: u64,
    },
    /// The window's budget is used up and the tenant refuses runs then.
    #[error(
        "tenant `{tenant}` used its {} for the window ending {}; runs are refused until then",
        exhausted.budget, rfc3339(exhausted.window_end)
    )]
    OutOfBudget {
        /// The tenant.
        tenant: String,
        /// Which budget, and when its window ends.
        exhausted: Exhausted,
        /// Until the window ends (at least a second).
        retry_after: Duration,
    },
    /// The tenant's trigger rate is spent for now.
    #[error("tenant `{tenant}` is over its trigger rate of {rate}/s")]
    TriggerRate {
        /// The tenant.
        tenant: String,
        /// Its `trigger_rate_per_sec`.
        rate: f64,
        /// Until the bucket holds a trigger again.
        retry_after: Duration,
    },
}

/// A tenant's window budget used up while its quota says `out_of_fuel:
/// refuse` (`scheduler::quota`'s `TenantQuota::refusing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exhausted {
    /// Which budget (`fuel budget`, `wall-time budget`).
    pub(crate) budget: &'static str,
    /// When the window ends (ms).
    pub(crate) window_end: Millis,
}

/// A trigger's priority override: in `0..=MAX_PRIORITY`, and within the
/// tenant's ceiling when the tenant is known.
pub(crate) fn check_priority(
    priority: u8,
    tenant: Option<&TenantRecord>,
) -> Result<(), RequestRefusal> {
    if priority > MAX_PRIORITY {
        return Err(RequestRefusal::PriorityRange(priority));
    }
    match tenant {
        Some(t) => t
            .check_priority(priority)
            .map_err(RequestRefusal::PriorityCeiling),
        None => Ok(()),
    }
}

/// A run's input and params (`size` bytes of JSON together) against the
/// tenant's `max_input_bytes` (`limit`): the cap on one run, whatever the
/// request body's limit lets through (a bulk trigger's body holds many runs).
pub(crate) fn check_input_size(tenant: &str, size: u64, limit: u64) -> Result<(), RequestRefusal> {
    if size > limit {
        return Err(RequestRefusal::InputTooLarge {
            tenant: tenant.to_string(),
            size,
            limit,
        });
    }
    Ok(())
}

/// An idempotency key, when given, is 1 to [`MAX_IDEMPOTENCY_KEY_CHARS`]
/// characters.
pub(crate) fn check_idempotency_key(key: Option<&str>) -> Result<(), RequestRefusal> {
    match key {
        Some(k) if k.is_empty() || k.chars().count() > MAX_IDEMPOTENCY_KEY_CHARS => {
            Err(RequestRefusal::IdempotencyKey)
        }
        _ => Ok(()),
    }
}

/// A disabled tenant's triggers are refused.
pub(crate) fn check_enabled(tenant: &str, disabled: bool) -> Result<(), RequestRefusal> {
    if disabled {
        return Err(RequestRefusal::TenantDisabled {
            tenant: tenant.to_string(),
        });
    }
    Ok(())
}

/// The tenant's queue bound: `queued` runs waiting against the host's
/// per-tenant bound and the tenant's `max_queued_runs`, the lower of them.
pub(crate) fn check_queue(
    tenant: &str,
    queued: usize,
    host_cap: usize,
    tenant_cap: Option<u32>,
) -> Result<(), LimitRefusal> {
    let cap = tenant_cap.map_or(usize::MAX, |n| n as usize);
    if queued >= host_cap.min(cap) {
        return Err(LimitRefusal::QueueFull {
            tenant: tenant.to_string(),
            queued,
        });
    }
    Ok(())
}

/// A new run of `new` bytes against the tenant's `run_bytes` (`limit`), with
/// `kept` bytes of run data stored or created and not yet stored.
pub(crate) fn check_run_bytes(
    tenant: &str,
    kept: u64,
    new: u64,
    limit: u64,
) -> Result<(), LimitRefusal> {
    if kept.saturating_add(new) > limit {
        return Err(LimitRefusal::RunBytes {
            tenant: tenant.to_string(),
            kept,
            limit,
            new,
        });
    }
    Ok(())
}

/// Whether an estimate of the tenant's run data (`estimate`: a recent
/// reading of the store's count plus what was created since) admits a new
/// run of `new` bytes without reading the exact count: only when it stays
/// below 7/8 of `limit`. The eighth left is for what the estimate does not
/// see (writes since the reading that are not new runs); nearer the limit,
/// and for every refusal, the caller decides on the exact count with
/// [`check_run_bytes`].
pub(crate) fn run_bytes_clear(estimate: u64, new: u64, limit: u64) -> bool {
    estimate.saturating_add(new) <= limit - limit / 8
}

/// A tenant whose window budget is used up under `out_of_fuel: refuse`
/// (`exhausted`) refuses new runs until the window ends, at `now`.
pub(crate) fn check_budget(
    tenant: &str,
    exhausted: Option<Exhausted>,
    now: Millis,
) -> Result<(), LimitRefusal> {
    match exhausted {
        Some(exhausted) => {
            let wait = (exhausted.window_end - now).max(1000);
            Err(LimitRefusal::OutOfBudget {
                tenant: tenant.to_string(),
                exhausted,
                retry_after: Duration::from_millis(wait as u64),
            })
        }
        None => Ok(()),
    }
}

/// Why a run created for `tenant` is recorded as cancelled instead of
/// queued: the tenant is disabled ([`check_enabled`]'s rule), or its budget
/// is used up and it refuses ([`check_budget`]'s). `exhausted` is asked only
/// when the tenant is enabled.
pub(crate) fn recorded_refusal(
    tenant: &str,
    disabled: bool,
    exhausted: impl FnOnce() -> Option<Exhausted>,
) -> Option<String> {
    if check_enabled(tenant, disabled).is_err() {
        return Some(format!("refused: tenant `{tenant}` is disabled"));
    }
    exhausted().map(|e| {
        format!(
            "refused: tenant `{tenant}` used its {} for the window ending {}",
            e.budget,
            rfc3339(e.window_end)
        )
    })
}

/// Whether a new run of `priority` is shed (recorded as cancelled, not run):
/// `total` runs waiting on the host have reached `high_water` and its
/// priority is below `shed_below`. The reason, if so.
pub(crate) fn shed(
    total: usize,
    high_water: usize,
    shed_below: u8,
    priority: u8,
) -> Option<String> {
    (total >= high_water && priority < shed_below).then(|| {
        format!(
            "shed: {total} runs waiting is past the high-water mark of {high_water}; priority {priority} is below {shed_below}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::{DEFAULT_MAX_PRIORITY, Quota};

    fn tenant(name: &str, max_priority: Option<u8>) -> TenantRecord {
        let mut t = TenantRecord::new(name, Quota::default(), 0);
        t.quota.max_priority = max_priority;
        t
    }

    #[test]
    fn priority_in_range_and_under_the_ceiling_is_admitted() {
        assert_eq!(check_priority(MAX_PRIORITY, None), Ok(()));
        assert_eq!(check_priority(0, Some(&tenant("t", None))), Ok(()));
        assert_eq!(
            check_priority(DEFAULT_MAX_PRIORITY, Some(&tenant("t", None))),
            Ok(())
        );
        assert_eq!(check_priority(7, Some(&tenant("t", Some(7)))), Ok(()));
        assert_eq!(
            check_priority(MAX_PRIORITY, Some(&tenant("default", None))),
            Ok(()),
            "`default` has no ceiling below the range"
        );
    }

    #[test]
    fn priority_out_of_range_is_refused_before_the_ceiling() {
        let e = check_priority(MAX_PRIORITY + 1, Some(&tenant("t", Some(2)))).unwrap_err();
        assert_eq!(e, RequestRefusal::PriorityRange(MAX_PRIORITY + 1));
        assert_eq!(e.to_string(), "priority 10 is not in 0..=9");
        assert!(check_priority(255, None).is_err());
    }

    #[test]
    fn priority_above_the_ceiling_is_refused_with_it_named() {
        let e = check_priority(5, Some(&tenant("acme", Some(4)))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "5 is above the priority ceiling of tenant `acme` (4; the admin sets it as quota `max_priority`)"
        );
        assert!(matches!(e, RequestRefusal::PriorityCeiling(_)));
    }

    #[test]
    fn input_up_to_the_limit_is_admitted_and_over_it_refused() {
        assert_eq!(check_input_size("t", 0, 10), Ok(()));
        assert_eq!(check_input_size("t", 10, 10), Ok(()));
        let e = check_input_size("t", 11, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the run's input is 11 bytes of JSON; tenant `t` allows at most 10 (quota \
             `max_input_bytes`): pass a reference to the data (a key, a URL) instead"
        );
    }

    #[test]
    fn idempotency_key_is_one_to_256_characters() {
        assert_eq!(check_idempotency_key(None), Ok(()));
        assert_eq!(check_idempotency_key(Some("k")), Ok(()));
        // Characters, not bytes: 256 two-byte characters are admitted.
        assert_eq!(check_idempotency_key(Some(&"é".repeat(256))), Ok(()));
        let e = check_idempotency_key(Some("")).unwrap_err();
        assert_eq!(e.to_string(), "idempotency_key must be 1 to 256 characters");
        assert_eq!(
            check_idempotency_key(Some(&"k".repeat(257))),
            Err(RequestRefusal::IdempotencyKey)
        );
    }

    #[test]
    fn a_disabled_tenant_is_refused_and_an_enabled_one_admitted() {
        assert_eq!(check_enabled("t", false), Ok(()));
        assert_eq!(
            check_enabled("t", true).unwrap_err().to_string(),
            "tenant `t` is disabled; enable it to trigger runs"
        );
    }

    #[test]
    fn the_queue_bound_is_the_lower_of_the_host_and_the_tenant() {
        assert_eq!(check_queue("t", 9, 10, None), Ok(()));
        assert_eq!(check_queue("t", 2, 10, Some(3)), Ok(()));
        assert_eq!(
            check_queue("t", 10, 10, None),
            Err(LimitRefusal::QueueFull {
                tenant: "t".into(),
                queued: 10
            })
        );
        let e = check_queue("t", 3, 10, Some(3)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the queue of tenant `t` is full (3 runs waiting); retry in 5s"
        );
        assert!(check_queue("t", 0, 10, Some(0)).is_err(), "a cap of 0");
    }

    #[test]
    fn an_estimate_admits_only_below_seven_eighths_of_the_limit() {
        assert!(run_bytes_clear(0, 100, 800));
        assert!(run_bytes_clear(600, 100, 800));
        assert!(!run_bytes_clear(601, 100, 800), "the last eighth is exact");
        assert!(!run_bytes_clear(u64::MAX, 1, u64::MAX));
        assert!(!run_bytes_clear(0, 1, 0));
    }

    #[test]
    fn run_bytes_admit_up_to_the_limit_and_refuse_past_it() {
        assert_eq!(check_run_bytes("t", 90, 10, 100), Ok(()));
        assert_eq!(
            check_run_bytes("t", u64::MAX, 0, u64::MAX),
            Ok(()),
            "saturates"
        );
        let e = check_run_bytes("t", 91, 10, 100).unwrap_err();
        assert!(matches!(e, LimitRefusal::RunBytes { kept: 91, .. }));
        assert_eq!(
            e.to_string(),
            "tenant `t` keeps 91 B of run data and allows 100 B (quota `run_bytes`); a new run \
             of ~10 B does not fit: wait for retention to delete finished runs, shorten their \
             retention, or raise the quota"
        );
    }

    #[test]
    fn an_exhausted_budget_refuses_until_the_window_ends() {
        assert_eq!(check_budget("t", None, 0), Ok(()));
        let exhausted = Exhausted {
            budget: "fuel budget",
            window_end: 3_600_000,
        };
        let e = check_budget("t", Some(exhausted), 1_000_000).unwrap_err();
        assert_eq!(
            e,
            LimitRefusal::OutOfBudget {
                tenant: "t".into(),
                exhausted,
                retry_after: Duration::from_millis(2_600_000),
            }
        );
        assert_eq!(
            e.to_string(),
            "tenant `t` used its fuel budget for the window ending 1970-01-01T01:00:00.000Z; runs \
             are refused until then"
        );
        let LimitRefusal::OutOfBudget { retry_after, .. } =
            check_budget("t", Some(exhausted), 3_599_999).unwrap_err()
        else {
            unreachable!()
        };
        assert_eq!(retry_after, Duration::from_secs(1), "at least a second");
    }

    #[test]
    fn trigger_rate_refusal_names_the_rate() {
        let e = LimitRefusal::TriggerRate {
            tenant: "t".into(),
            rate: 0.5,
            retry_after: Duration::from_secs(2),
        };
        assert_eq!(
            e.to_string(),
            "tenant `t` is over its trigger rate of 0.5/s"
        );
    }

    #[test]
    fn recorded_refusal_names_disabled_first_then_the_budget() {
        let exhausted = Exhausted {
            budget: "wall-time budget",
            window_end: 0,
        };
        assert_eq!(recorded_refusal("t", false, || None), None);
        assert_eq!(
            recorded_refusal("t", true, || panic!("not asked when disabled")),
            Some("refused: tenant `t` is disabled".into())
        );
        assert_eq!(
            recorded_refusal("t", false, || Some(exhausted)),
            Some(
                "refused: tenant `t` used its wall-time budget for the window ending \
                 1970-01-01T00:00:00.000Z"
                    .into()
            )
        );
    }

    #[test]
    fn low_priority_runs_are_shed_past_the_high_water_mark() {
        assert_eq!(shed(9, 10, 5, 0), None, "under the mark");
        assert_eq!(shed(10, 10, 5, 5), None, "not below the priority");
        assert_eq!(
            shed(10, 10, 5, 4).as_deref(),
            Some("shed: 10 runs waiting is past the high-water mark of 10; priority 4 is below 5")
        );
    }
}
