//! [`Trigger`]: a task's `trigger:` block, validated and compiled into
//! something that answers "when does this fire next?".

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

use super::{AfterOn, CronSchedule, Error, Result, TriggerSpec};
use crate::model::TriggerKind;

/// A compiled trigger. Instants are UTC.
#[derive(Clone, Debug, PartialEq)]
pub enum Trigger {
    /// No schedule: runs start only through the API or the CLI.
    Manual,
    /// A Quartz cron expression in a zone.
    Cron(CronSchedule),
    /// Once, at this instant.
    At(DateTime<Utc>),
    /// Once, at this instant (the task's creation plus its `delay`).
    Delay(DateTime<Utc>),
    /// At `anchor + k × period` for k = 1, 2, …
    Every {
        /// The task's creation instant; the first fire is one period later.
        anchor: DateTime<Utc>,
        /// The interval, at least one second.
        period: Duration,
    },
    /// When runs of these tasks finish (driven by the scheduler, not by time).
    After {
        /// Upstream task names.
        tasks: Vec<String>,
        /// Which upstream results fire this task.
        on: AfterOn,
    },
}

impl Trigger {
    /// Validates and compiles a task's trigger. `None` = manual. Errors: more
    /// than one kind set; `timezone` without `cron`; `on` without `after`;
    /// unknown zone; bad cron; `at` not RFC 3339 with offset; `every` below
    /// 1s; zero delay.
    pub fn compile(spec: Option<&TriggerSpec>, created_at: DateTime<Utc>) -> Result<Self> {
        let Some(spec) = spec else {
            return Ok(Trigger::Manual);
        };
        let kinds: Vec<&str> = [
            ("cron", spec.cron.is_some()),
            ("at", spec.at.is_some()),
            ("delay", spec.delay.is_some()),
            ("every", spec.every.is_some()),
            ("after", !spec.after.is_empty()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if kinds.len() > 1 {
            return Err(Error::MultipleKinds {
                kinds: format!("`{}`", kinds.join("`, `")),
            });
        }
        if spec.timezone.is_some() && spec.cron.is_none() {
            return Err(Error::TimezoneWithoutCron);
        }
        if spec.on.is_some() && spec.after.is_empty() {
            return Err(Error::OnWithoutAfter);
        }
        if let Some(expr) = &spec.cron {
            let zone = spec.timezone.as_deref().unwrap_or("");
            return CronSchedule::parse(expr, zone).map(Trigger::Cron);
        }
        if let Some(text) = &spec.at {
            return DateTime::parse_from_rfc3339(text.trim())
                .map(|at| Trigger::At(at.to_utc()))
                .map_err(|e| Error::InvalidAt {
                    value: text.clone(),
                    reason: e.to_string(),
                });
        }
        if let Some(delay) = spec.delay {
            if delay.is_zero() {
                return Err(Error::ZeroDelay);
            }
            return add(created_at, delay)
                .map(Trigger::Delay)
                .ok_or_else(|| Error::OutOfRange {
                    field: "delay",
                    value: humantime::format_duration(delay).to_string(),
                });
        }
        if let Some(period) = spec.every {
            if period < Duration::from_secs(1) {
                return Err(Error::EveryTooShort {
                    got: humantime::format_duration(period).to_string(),
                });
            }
            return Ok(Trigger::Every {
                anchor: created_at,
                period,
            });
        }
        if !spec.after.is_empty() {
            if spec.after.iter().any(|t| t.trim().is_empty()) {
                return Err(Error::EmptyAfterTask);
            }
            return Ok(Trigger::After {
                tasks: spec.after.clone(),
                on: spec.on.unwrap_or_default(),
            });
        }
        Ok(Trigger::Manual)
    }

    /// First fire instant strictly after `after` (None: never, e.g. manual,
    /// after, or a past one-shot).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Trigger::Manual | Trigger::After { .. } => None,
            Trigger::Cron(schedule) => schedule.next_after(after),
            Trigger::At(at) | Trigger::Delay(at) => (*at > after).then_some(*at),
            Trigger::Every { anchor, period } => {
                let p = nanos_of(*period);
                let k = (nanos(after) - nanos(*anchor)).div_euclid(p) + 1;
                at_nanos(nanos(*anchor) + k.max(1) * p)
            }
        }
    }

    /// The first fire instant for a new task: for At/Delay the instant itself
    /// even if in the past (catch_up decides), for Every anchor+period, for
    /// Cron next_after(created_at).
    pub fn first_fire(&self, created_at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Trigger::Manual | Trigger::After { .. } => None,
            Trigger::Cron(schedule) => schedule.next_after(created_at),
            Trigger::At(at) | Trigger::Delay(at) => Some(*at),
            Trigger::Every { anchor, period } => add(*anchor, *period),
        }
    }

    /// What kind of trigger this is (as plugins and runs record it).
    pub fn kind(&self) -> TriggerKind {
        match self {
            Trigger::Manual => TriggerKind::Manual,
            Trigger::Cron(_) => TriggerKind::Cron,
            Trigger::At(_) => TriggerKind::At,
            Trigger::Delay(_) => TriggerKind::Delay,
            Trigger::Every { .. } => TriggerKind::Every,
            Trigger::After { .. } => TriggerKind::After,
        }
    }

    /// The cron expression's zone; UTC for every other kind.
    pub fn timezone(&self) -> Tz {
        match self {
            Trigger::Cron(schedule) => schedule.timezone(),
            _ => Tz::UTC,
        }
    }

    /// How many fire instants lie in `[from, until]`, and the latest `keep`
    /// of them in ascending order. Bounded work however long the range.
    pub(super) fn tail(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        keep: usize,
    ) -> (usize, Vec<DateTime<Utc>>) {
        match self {
            Trigger::Manual | Trigger::After { .. } => (0, Vec::new()),
            Trigger::Cron(schedule) => schedule.tail(from, until, keep),
            Trigger::At(at) | Trigger::Delay(at) => {
                if (from..=until).contains(at) {
                    (1, if keep > 0 { vec![*at] } else { Vec::new() })
                } else {
                    (0, Vec::new())
                }
            }
            Trigger::Every { anchor, period } => {
                let (a, p) = (nanos(*anchor), nanos_of(*period));
                // k from the first anchor + k·p >= from (k >= 1) to the last <= until.
                let first = (nanos(from) - a + p - 1).div_euclid(p).max(1);
                let last = (nanos(until) - a).div_euclid(p);
                if last < first {
                    return (0, Vec::new());
                }
                let total = usize::try_from(last - first + 1).unwrap_or(usize::MAX);
                let keep_from = (last - keep as i128 + 1).max(first);
                let kept = (keep_from..=last)
                    .filter_map(|k| at_nanos(a + k * p))
                    .collect();
                (total, kept)
            }
        }
    }
}

/// `at + d`, or None past chrono's range.
fn add(at: DateTime<Utc>, d: Duration) -> Option<DateTime<Utc>> {
    at.checked_add_signed(TimeDelta::from_std(d).ok()?)
}

/// Nanoseconds since the epoch; i128 so that any period times any count fits.
fn nanos(at: DateTime<Utc>) -> i128 {
    i128::from(at.timestamp()) * 1_000_000_000 + i128::from(at.timestamp_subsec_nanos())
}

/// A period in nanoseconds (at least 1, so it can divide).
fn nanos_of(d: Duration) -> i128 {
    (d.as_nanos() as i128).max(1)
}

fn at_nanos(n: i128) -> Option<DateTime<Utc>> {
    let secs = i64::try_from(n.div_euclid(1_000_000_000)).ok()?;
    DateTime::from_timestamp(secs, n.rem_euclid(1_000_000_000) as u32)
}
