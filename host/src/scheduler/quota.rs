//! A tenant's quota as the scheduler enforces it: the fuel budget of the
//! current window (reserve before an attempt starts, settle after), the
//! trigger-rate bucket, and the per-attempt caps. Pure bookkeeping: callers
//! pass `now`, so it is tested without a clock.
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

use std::time::Duration;

use crate::model::{Limits, Millis};
use crate::tenant::{OutOfFuel, Quota, TenantRecord};

/// What `admit` decided for an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Start it with this much fuel (reserved).
    Go(u64),
    /// Wait until a running attempt settles its reservation.
    Wait,
    /// The window's fuel is used up.
    Exhausted,
}

/// Live quota state of one tenant.
#[derive(Clone, Debug)]
pub(super) struct TenantQuota {
    pub(super) quota: Quota,
    pub(super) disabled: bool,
    window_start: Millis,
    used: u64,
    reserved: u64,
    /// Set when a step waits for a settlement; cleared by the next one.
    pub(super) waiting: bool,
    rate_tokens: f64,
    rate_at: Millis,
}

impl TenantQuota {
    /// State for `record`, with `used` fuel already consumed in the window of `now`.
    pub(super) fn new(record: &TenantRecord, used: u64, now: Millis) -> Self {
        let mut state = Self {
            quota: record.quota.clone(),
            disabled: record.disabled,
            window_start: record.quota.window_start(now),
            used,
            reserved: 0,
            waiting: false,
            rate_tokens: 0.0,
            rate_at: now,
        };
        state.rate_tokens = state.burst();
        state
    }

    /// Applies a changed record; counters carry over (a changed window length
    /// starts counting from the new window).
    pub(super) fn update(&mut self, record: &TenantRecord, now: Millis) {
        let window_changed = record.quota.window != self.quota.window;
        self.quota = record.quota.clone();
        self.disabled = record.disabled;
        if window_changed {
            self.window_start = self.quota.window_start(now);
            self.used = 0;
        }
        self.rate_tokens = self.rate_tokens.min(self.burst());
        self.waiting = false;
    }

    fn burst(&self) -> f64 {
        self.quota.trigger_rate_per_sec.map_or(0.0, |r| r.max(1.0))
    }

    /// Starts a new window if `now` is past the current one; true if it did.
    pub(super) fn roll(&mut self, now: Millis) -> bool {
        let start = self.quota.window_start(now);
        if start > self.window_start {
            self.window_start = start;
            self.used = 0;
            return true;
        }
        false
    }

    /// When the current window ends (ms).
    pub(super) fn window_end(&self) -> Millis {
        self.window_start + self.quota.window_ms()
    }

    /// Fuel used (settled) in the current window.
    #[cfg(test)]
    pub(super) fn used(&self) -> u64 {
        self.used
    }

    /// Fuel left in the window after reservations (`None`: no budget).
    pub(super) fn remaining(&self) -> Option<u64> {
        self.quota
            .fuel_per_window
            .map(|cap| cap.saturating_sub(self.used.saturating_add(self.reserved)))
    }

    /// Whether the budget is used up (nothing left, nothing reserved to come back).
    pub(super) fn exhausted(&self) -> bool {
        self.remaining() == Some(0) && self.reserved == 0
    }

    /// Whether new steps of this tenant must wait.
    pub(super) fn held(&self) -> bool {
        self.disabled || self.remaining() == Some(0) || self.waiting
    }

    /// Why the tenant's runs wait, for people.
    pub(super) fn hold_reason(&self, tenant: &str) -> Option<String> {
        if self.disabled {
            return Some(format!("held: tenant `{tenant}` is disabled"));
        }
        let cap = self.quota.fuel_per_window?;
        let end = crate::scheduler::clock::rfc3339(self.window_end());
        (self.remaining() == Some(0)).then(|| {
            if self.reserved == 0 {
                format!(
                    "held: tenant `{tenant}` used its fuel budget ({} of {cap}) for the window ending {end}",
                    self.used.min(cap)
                )
            } else {
                format!(
                    "held: tenant `{tenant}`'s fuel budget for the window ending {end} is used or \
                     reserved by running attempts ({} used, {} reserved, of {cap})",
                    self.used, self.reserved
                )
            }
        })
    }

    /// Decides whether an attempt wanting `want` fuel starts, reserving its fuel.
    pub(super) fn admit(&mut self, want: u64) -> Admit {
        let Some(left) = self.remaining() else {
            return Admit::Go(want);
        };
        if left == 0 {
            return Admit::Exhausted;
        }
        if left < want && self.reserved > 0 {
            self.waiting = true;
            return Admit::Wait;
        }
        let fuel = want.min(left);
        self.reserved += fuel;
        Admit::Go(fuel)
    }

    /// Releases an attempt's reservation of `given` and counts `used`.
    pub(super) fn settle(&mut self, given: u64, used: u64, now: Millis) {
        if self.quota.fuel_per_window.is_some() {
            self.reserved = self.reserved.saturating_sub(given);
        }
        self.roll(now);
        self.used = self.used.saturating_add(used);
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

    /// A step's limits cut to the tenant's per-attempt caps (as they are now:
    /// lowering a cap applies to the next attempts of tasks saved before).
    pub(super) fn cap(&self, mut limits: Limits) -> Limits {
        if let Some(f) = self.quota.max_fuel_per_attempt {
            limits.fuel = limits.fuel.min(f);
        }
        if let Some(mb) = self.quota.max_memory_mb {
            limits.memory_bytes = limits.memory_bytes.min(mb.saturating_mul(1 << 20));
        }
        if let Some(t) = self.quota.max_timeout {
            limits.timeout = limits.timeout.min(t);
        }
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::HOUR_MS;

    fn tenant(fuel: Option<u64>) -> TenantRecord {
        let mut t = TenantRecord::new("t", Quota::default(), 0);
        t.quota.fuel_per_window = fuel;
        t.quota.window = Duration::from_secs(3600);
        t
    }

    #[test]
    fn no_budget_admits_everything() {
        let mut q = TenantQuota::new(&tenant(None), 0, 0);
        assert_eq!(q.admit(u64::MAX), Admit::Go(u64::MAX));
        assert!(!q.held());
        assert_eq!(q.hold_reason("t"), None);
    }

    #[test]
    fn reservations_never_exceed_what_is_left() {
        let mut q = TenantQuota::new(&tenant(Some(100)), 30, 0);
        assert_eq!(q.admit(50), Admit::Go(50));
        assert_eq!(q.admit(50), Admit::Wait, "20 left, 50 reserved: wait");
        assert!(q.held());
        q.settle(50, 10, 1);
        assert_eq!(q.used(), 40);
        assert!(!q.held());
        assert_eq!(
            q.admit(100),
            Admit::Go(60),
            "nothing reserved: start with what is left"
        );
        q.settle(60, 60, 2);
        assert!(q.exhausted());
        assert_eq!(q.admit(1), Admit::Exhausted);
        assert!(q.hold_reason("t").unwrap().contains("100 of 100"));
    }

    #[test]
    fn a_new_window_resets_the_count() {
        let mut q = TenantQuota::new(&tenant(Some(10)), 10, HOUR_MS + 5);
        assert!(q.exhausted());
        assert_eq!(q.window_end(), 2 * HOUR_MS);
        assert!(!q.roll(2 * HOUR_MS - 1));
        assert!(q.roll(2 * HOUR_MS));
        assert_eq!(q.admit(4), Admit::Go(4));
    }

    #[test]
    fn raising_the_budget_releases_the_hold() {
        let mut record = tenant(Some(10));
        let mut q = TenantQuota::new(&record, 10, 0);
        assert!(q.held());
        record.quota.fuel_per_window = Some(1000);
        q.update(&record, 1);
        assert!(!q.held());
        assert_eq!(q.admit(100), Admit::Go(100));
    }

    #[test]
    fn the_trigger_bucket_refills_at_the_rate() {
        let mut record = tenant(None);
        record.quota.trigger_rate_per_sec = Some(2.0);
        let mut q = TenantQuota::new(&record, 0, 0);
        assert!(q.take_trigger(0).is_ok());
        assert!(q.take_trigger(0).is_ok());
        let wait = q.take_trigger(0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(q.take_trigger(500).is_ok());
    }

    #[test]
    fn caps_cut_limits() {
        let mut record = tenant(None);
        record.quota.max_fuel_per_attempt = Some(5);
        record.quota.max_memory_mb = Some(1);
        record.quota.max_timeout = Some(Duration::from_secs(1));
        let q = TenantQuota::new(&record, 0, 0);
        let l = q.cap(Limits::default());
        assert_eq!(
            (l.fuel, l.memory_bytes, l.timeout),
            (5, 1 << 20, Duration::from_secs(1))
        );
    }
}
