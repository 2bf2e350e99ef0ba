//! A tenant's quota as the scheduler enforces it: the fuel and wall-time
//! budgets of the current window (reserve before an attempt starts, settle
//! after), the trigger-rate bucket, the per-attempt caps, and the fairness
//! limits it hands to the queue (running cap, priority ceiling). Pure
//! bookkeeping: callers pass `now`, so it is tested without a clock.
//!
//! # Fuel
//! An attempt never gets more fuel than the tenant has left: starting one
//! reserves its fuel limit (cut to what is left), finishing it releases the
//! reservation and counts what it really used. Reservations are usually far
//! above use, so when another attempt's reservation stands between a step and
//! its full limit, the step waits for that settlement instead of starting
//! with a sliver it would likely exhaust; only when nothing is reserved does
//! a step start with less than its limit. Fuel is counted in the window the
//! attempt *finishes* in (as the usage buckets are), which is what makes the
//! window's use recomputable from the store after a restart.
//!
//! # Wall time
//! Fuel does not meter an attempt blocked in a host call (a sleep, a slow
//! HTTP answer): it holds a slot while burning almost nothing. The wall-time
//! budget (`wall_ms_per_window`) follows the same reserve-and-settle rule
//! with the attempt's timeout as its ask: an attempt's deadline is its
//! timeout cut to the wall time left in the window, so the attempts of one
//! window together never take longer than the budget, and an attempt running
//! when the budget runs out is stopped then (`timed_out`). It is charged the
//! attempt's measured duration, whatever ended it.

use std::time::Duration;

use crate::model::{Limits, Millis};
use crate::scheduler::admission::Exhausted;
use crate::tenant::{OutOfFuel, Quota, TenantRecord};

/// What `admit` decided for an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Start it with these reservations.
    Go(Grant),
    /// Wait until a running attempt settles its reservation.
    Wait,
    /// The window's fuel or wall time is used up.
    Exhausted,
}

/// What an admitted attempt reserved from its tenant's window budgets (0
/// where the tenant has no such budget); handed back to [`TenantQuota::settle`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Grant {
    /// Fuel reserved: the attempt's fuel limit.
    pub(super) fuel: u64,
    /// Wall time reserved (ms): the attempt's deadline.
    pub(super) wall_ms: u64,
}

/// What the attempts settled so far in a window used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct WindowUse {
    /// Fuel.
    pub(super) fuel: u64,
    /// Wall time (ms).
    pub(super) wall_ms: u64,
}

/// One budget of a window (fuel units or wall ms): what is used and reserved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Budget {
    used: u64,
    reserved: u64,
}

impl Budget {
    fn remaining(&self, cap: Option<u64>) -> Option<u64> {
        cap.map(|cap| cap.saturating_sub(self.used.saturating_add(self.reserved)))
    }

    /// Whether `want` may be reserved now: `Wait` when less is left only
    /// because of other attempts' reservations (which usually come back
    /// mostly unused), `Exhausted` when nothing is left.
    fn fits(&self, cap: Option<u64>, want: u64) -> Result<(), Admit> {
        match self.remaining(cap) {
            None => Ok(()),
            Some(0) => Err(Admit::Exhausted),
            Some(left) if left < want && self.reserved > 0 => Err(Admit::Wait),
            Some(_) => Ok(()),
        }
    }

    /// Reserves `want` cut to what is left; what was reserved (0 without a cap).
    fn reserve(&mut self, cap: Option<u64>, want: u64) -> u64 {
        match self.remaining(cap) {
            None => 0,
            Some(left) => {
                let got = want.min(left);
                self.reserved += got;
                got
            }
        }
    }

    fn settle(&mut self, given: u64, used: u64) {
        self.reserved = self.reserved.saturating_sub(given);
        self.used = self.used.saturating_add(used);
    }

    fn exhausted(&self, cap: Option<u64>) -> bool {
        self.remaining(cap) == Some(0) && self.reserved == 0
    }
}

/// Live quota state of one tenant.
#[derive(Clone, Debug)]
pub(super) struct TenantQuota {
    pub(super) quota: Quota,
    pub(super) disabled: bool,
    /// Running cap handed to the queue (explicit or the host default).
    pub(super) max_running: Option<usize>,
    /// Priority ceiling handed to the queue.
    pub(super) max_priority: u8,
    window_start: Millis,
    fuel: Budget,
    wall: Budget,
    /// Set when a step waits for a settlement; cleared by the next one.
    pub(super) waiting: bool,
    rate_tokens: f64,
    rate_at: Millis,
}

impl TenantQuota {
    /// State for `record` on a host of `slots`, with `used` already
    /// consumed in the window of `now`.
    pub(super) fn new(record: &TenantRecord, used: WindowUse, slots: usize, now: Millis) -> Self {
        let mut state = Self {
            quota: record.quota.clone(),
            disabled: record.disabled,
            max_running: record.max_running(slots),
            max_priority: record.max_priority(),
            window_start: record.quota.window_start(now),
            fuel: Budget {
                used: used.fuel,
                reserved: 0,
            },
            wall: Budget {
                used: used.wall_ms,
                reserved: 0,
            },
            waiting: false,
            rate_tokens: 0.0,
            rate_at: now,
        };
        state.rate_tokens = state.burst();
        state
    }

    /// Applies a changed record; counters carry over (a changed window length
    /// starts counting from the new window).
    pub(super) fn update(&mut self, record: &TenantRecord, slots: usize, now: Millis) {
        let window_changed = record.quota.window != self.quota.window;
        self.quota = record.quota.clone();
        self.disabled = record.disabled;
        self.max_running = record.max_running(slots);
        self.max_priority = record.max_priority();
        if window_changed {
            self.window_start = self.quota.window_start(now);
            self.fuel.used = 0;
            self.wall.used = 0;
        }
        self.rate_tokens = self.rate_tokens.min(self.burst());
        self.waiting = false;
    }

    /// Whether the window has a budget (fuel or wall time) to reset.
    pub(super) fn has_budget(&self) -> bool {
        self.quota.fuel_per_window.is_some() || self.quota.wall_ms_per_window.is_some()
    }

    fn burst(&self) -> f64 {
        self.quota.trigger_rate_per_sec.map_or(0.0, |r| r.max(1.0))
    }

    /// Starts a new window if `now` is past the current one; true if it did.
    pub(super) fn roll(&mut self, now: Millis) -> bool {
        let start = self.quota.window_start(now);
        if start > self.window_start {
            self.window_start = start;
            self.fuel.used = 0;
            self.wall.used = 0;
            return true;
        }
        false
    }

    /// When the current window ends (ms).
    pub(super) fn window_end(&self) -> Millis {
        self.window_start + self.quota.window_ms()
    }

    /// What the settled attempts of the current window used.
    #[cfg(test)]
    pub(super) fn used(&self) -> WindowUse {
        WindowUse {
            fuel: self.fuel.used,
            wall_ms: self.wall.used,
        }
    }

    /// Whether a budget is used up (nothing left, nothing reserved to come back).
    pub(super) fn exhausted(&self) -> bool {
        self.fuel.exhausted(self.quota.fuel_per_window)
            || self.wall.exhausted(self.quota.wall_ms_per_window)
    }

    /// Which budget is used up, for messages.
    pub(super) fn exhausted_budget(&self) -> &'static str {
        if self.fuel.exhausted(self.quota.fuel_per_window) {
            "fuel budget"
        } else {
            "wall-time budget"
        }
    }

    /// Whether new steps of this tenant must wait.
    pub(super) fn held(&self) -> bool {
        self.disabled
            || self.fuel.remaining(self.quota.fuel_per_window) == Some(0)
            || self.wall.remaining(self.quota.wall_ms_per_window) == Some(0)
            || self.waiting
    }

    /// Why the tenant's runs wait, for people.
    pub(super) fn hold_reason(&self, tenant: &str) -> Option<String> {
        if self.disabled {
            return Some(format!("held: tenant `{tenant}` is disabled"));
        }
        let end = crate::model::time::rfc3339(self.window_end());
        let budgets = [
            ("fuel budget", "", self.fuel, self.quota.fuel_per_window),
            (
                "wall-time budget",
                " ms",
                self.wall,
                self.quota.wall_ms_per_window,
            ),
        ];
        budgets.into_iter().find_map(|(name, unit, b, cap)| {
            let cap = cap?;
            (b.remaining(Some(cap)) == Some(0)).then(|| {
                if b.reserved == 0 {
                    format!(
                        "held: tenant `{tenant}` used its {name} ({} of {cap}{unit}) for the window ending {end}",
                        b.used.min(cap)
                    )
                } else {
                    format!(
                        "held: tenant `{tenant}`'s {name} for the window ending {end} is used or \
                         reserved by running attempts ({}{unit} used, {}{unit} reserved, of {cap}{unit})",
                        b.used, b.reserved
                    )
                }
            })
        })
    }

    /// Decides whether an attempt with `limits` starts, reserving its fuel
    /// limit and its timeout (each cut to what is left) from the budgets.
    pub(super) fn admit(&mut self, limits: &Limits) -> Admit {
        let (fuel_cap, wall_cap) = (self.quota.fuel_per_window, self.quota.wall_ms_per_window);
        let wall_want = duration_ms(limits.timeout);
        let fits = self
            .fuel
            .fits(fuel_cap, limits.fuel)
            .and_then(|()| self.wall.fits(wall_cap, wall_want));
        match fits {
            Err(Admit::Wait) => {
                self.waiting = true;
                Admit::Wait
            }
            Err(other) => other,
            Ok(()) => Admit::Go(Grant {
                fuel: self.fuel.reserve(fuel_cap, limits.fuel),
                wall_ms: self.wall.reserve(wall_cap, wall_want),
            }),
        }
    }

    /// `limits` as granted: the fuel and timeout cut to the reservations
    /// (unchanged where the tenant has no such budget).
    pub(super) fn granted(&self, mut limits: Limits, grant: Grant) -> Limits {
        if self.quota.fuel_per_window.is_some() {
            limits.fuel = grant.fuel;
        }
        if self.quota.wall_ms_per_window.is_some() {
            limits.timeout = limits.timeout.min(Duration::from_millis(grant.wall_ms));
        }
        limits
    }

    /// Releases an attempt's reservations and counts what it used (in the
    /// window of `now`).
    pub(super) fn settle(&mut self, grant: Grant, used: WindowUse, now: Millis) {
        self.roll(now);
        self.fuel.settle(grant.fuel, used.fuel);
        self.wall.settle(grant.wall_ms, used.wall_ms);
        self.waiting = false;
    }

    /// Takes a trigger from the rate bucket, or says how long to wait.
    pub(super) fn take_trigger(&mut self, now: Millis) -> Result<(), Duration> {
        let Some(rate) = self.quota.trigger_rate_per_sec else {
            return Ok(());
        };
        let elapsed = (now - self.rate_at).max(0) as f64 / 1000.0;
        self.rate_tokens = (self.rate_tokens + elapsed * rate).min(self.burst());
        self.rate_at = now;
        if self.rate_tokens >= 1.0 {
            self.rate_tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - self.rate_tokens) / rate))
    }

    /// Whether out-of-fuel runs are refused rather than held.
    pub(super) fn refuses_when_exhausted(&self) -> bool {
        self.quota.out_of_fuel == OutOfFuel::Refuse
    }

    /// Starts a new window if `now` is past the current one, then: the
    /// budget used up, if the tenant refuses runs while it is (the facts of
    /// `admission::check_budget`).
    pub(super) fn refusing(&mut self, now: Millis) -> Option<Exhausted> {
        self.roll(now);
        (self.exhausted() && self.refuses_when_exhausted()).then(|| Exhausted {
            budget: self.exhausted_budget(),
            window_end: self.window_end(),
        })
    }
}

/// A duration in whole ms, rounded up (an attempt of 0.3 ms costs 1 ms) and
/// saturating.
pub(super) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::HOUR_MS;

    const SLOTS: usize = 4;

    fn tenant(fuel: Option<u64>) -> TenantRecord {
        let mut t = TenantRecord::new("t", Quota::default(), 0);
        t.quota.fuel_per_window = fuel;
        t.quota.window = Duration::from_secs(3600);
        t
    }

    fn used(fuel: u64) -> WindowUse {
        WindowUse { fuel, wall_ms: 0 }
    }

    fn fuel(f: u64) -> Limits {
        Limits {
            fuel: f,
            ..Limits::default()
        }
    }

    fn go(fuel: u64) -> Admit {
        Admit::Go(Grant { fuel, wall_ms: 0 })
    }

    #[test]
    fn no_budget_admits_everything() {
        let mut q = TenantQuota::new(&tenant(None), used(0), SLOTS, 0);
        assert_eq!(q.admit(&fuel(u64::MAX)), go(0), "nothing reserved");
        assert_eq!(q.granted(fuel(u64::MAX), Grant::default()).fuel, u64::MAX);
        assert!(!q.held());
        assert_eq!(q.hold_reason("t"), None);
    }

    #[test]
    fn reservations_never_exceed_what_is_left() {
        let mut q = TenantQuota::new(&tenant(Some(100)), used(30), SLOTS, 0);
        assert_eq!(q.admit(&fuel(50)), go(50));
        assert_eq!(
            q.admit(&fuel(50)),
            Admit::Wait,
            "20 left, 50 reserved: wait"
        );
        assert!(q.held());
        q.settle(
            Grant {
                fuel: 50,
                wall_ms: 0,
            },
            used(10),
            1,
        );
        assert_eq!(q.used().fuel, 40);
        assert!(!q.held());
        assert_eq!(
            q.admit(&fuel(100)),
            go(60),
            "nothing reserved: start with what is left"
        );
        q.settle(
            Grant {
                fuel: 60,
                wall_ms: 0,
            },
            used(60),
            2,
        );
        assert!(q.exhausted());
        assert_eq!(q.admit(&fuel(1)), Admit::Exhausted);
        assert!(q.hold_reason("t").unwrap().contains("100 of 100"));
    }

    #[test]
    fn a_new_window_resets_the_count() {
        let mut q = TenantQuota::new(&tenant(Some(10)), used(10), SLOTS, HOUR_MS + 5);
        assert!(q.exhausted());
        assert_eq!(q.window_end(), 2 * HOUR_MS);
        assert!(!q.roll(2 * HOUR_MS - 1));
        assert!(q.roll(2 * HOUR_MS));
        assert_eq!(q.admit(&fuel(4)), go(4));
    }

    #[test]
    fn raising_the_budget_releases_the_hold() {
        let mut record = tenant(Some(10));
        let mut q = TenantQuota::new(&record, used(10), SLOTS, 0);
        assert!(q.held());
        record.quota.fuel_per_window = Some(1000);
        q.update(&record, SLOTS, 1);
        assert!(!q.held());
        assert_eq!(q.admit(&fuel(100)), go(100));
    }

    /// The wall-time budget: an attempt's deadline is its timeout cut to
    /// what is left, a later one waits for reservations to settle, and the
    /// tenant is held once the window's wall time is used, whatever fuel it
    /// burned.
    #[test]
    fn the_wall_budget_cuts_deadlines_and_holds_when_spent() {
        let mut record = tenant(None);
        record.quota.wall_ms_per_window = Some(20_000);
        let mut q = TenantQuota::new(&record, WindowUse::default(), SLOTS, 0);
        let timeout = |s: u64| Limits {
            timeout: Duration::from_secs(s),
            ..Limits::default()
        };
        let first = q.admit(&timeout(15));
        assert_eq!(
            first,
            Admit::Go(Grant {
                fuel: 0,
                wall_ms: 15_000
            })
        );
        assert_eq!(
            q.admit(&timeout(15)),
            Admit::Wait,
            "5 s left, 15 s reserved"
        );
        // The first blocked for its whole timeout: charged 15 s (almost no fuel).
        let Admit::Go(grant) = first else {
            unreachable!()
        };
        q.settle(
            grant,
            WindowUse {
                fuel: 2_400,
                wall_ms: 15_000,
            },
            15_000,
        );
        let Admit::Go(second) = q.admit(&timeout(15)) else {
            panic!("5 s are left and nothing is reserved")
        };
        let limits = q.granted(timeout(15), second);
        assert_eq!(
            limits.timeout,
            Duration::from_secs(5),
            "cut to what is left"
        );
        assert!(q.held(), "nothing left beyond the running attempt");
        q.settle(
            second,
            WindowUse {
                fuel: 2_400,
                wall_ms: 5_004,
            },
            20_004,
        );
        assert!(q.exhausted());
        assert_eq!(q.admit(&timeout(1)), Admit::Exhausted);
        let reason = q.hold_reason("t").unwrap();
        assert!(
            reason.contains("wall-time budget (20000 of 20000 ms)"),
            "{reason}"
        );
        assert_eq!(q.exhausted_budget(), "wall-time budget");
        // The next window starts afresh.
        assert!(q.roll(HOUR_MS));
        assert!(!q.held());
    }

    #[test]
    fn the_fairness_defaults_apply_to_every_tenant_but_default() {
        let q = TenantQuota::new(&tenant(None), WindowUse::default(), 8, 0);
        assert_eq!(q.max_running, Some(4), "half of 8 slots");
        assert_eq!(q.max_priority, crate::tenant::DEFAULT_MAX_PRIORITY);
        let owner = TenantRecord::new(crate::tenant::DEFAULT_TENANT, Quota::default(), 0);
        let q = TenantQuota::new(&owner, WindowUse::default(), 8, 0);
        assert_eq!((q.max_running, q.max_priority), (None, 9));
        let mut explicit = tenant(None);
        explicit.quota.max_concurrent_attempts = Some(7);
        explicit.quota.max_priority = Some(9);
        let q = TenantQuota::new(&explicit, WindowUse::default(), 8, 0);
        assert_eq!((q.max_running, q.max_priority), (Some(7), 9));
        assert_eq!(crate::tenant::default_max_running(1), 1);
    }

    #[test]
    fn the_trigger_bucket_refills_at_the_rate() {
        let mut record = tenant(None);
        record.quota.trigger_rate_per_sec = Some(2.0);
        let mut q = TenantQuota::new(&record, used(0), SLOTS, 0);
        assert!(q.take_trigger(0).is_ok());
        assert!(q.take_trigger(0).is_ok());
        let wait = q.take_trigger(0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(q.take_trigger(500).is_ok());
    }

    #[test]
    fn durations_round_up_to_whole_ms() {
        assert_eq!(duration_ms(Duration::from_micros(300)), 1);
        assert_eq!(duration_ms(Duration::from_millis(7)), 7);
        assert_eq!(duration_ms(Duration::MAX), u64::MAX);
    }
}
