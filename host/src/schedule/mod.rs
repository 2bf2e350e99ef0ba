//! # Scheduling time: triggers → fire instants
//!
//! Pure functions from a task's trigger to the instants it fires at. This
//! module owns the cron dialect (Quartz style, see `docs/CRON.md`), time
//! zones and the daylight-saving rules, one-shot/delay/interval arithmetic,
//! what to do about instants missed while ax was down ([`due`]), and the
//! `${bizDate}` day. It does no I/O and reads no clock: every function takes
//! the instants it needs, so everything here is tested exhaustively and fast.
//! Timers, persistence of the next fire and dispatch belong to the scheduler.
//!
//! # Layout
//! - [`spec`]: the `trigger:` block as users write it (serde data).
//! - `quartz`: Quartz cron text → the pattern croner evaluates.
//! - `cron`: [`CronSchedule`], wall-clock matches → UTC instants with the
//!   daylight-saving rules.
//! - `trigger`: [`Trigger`], compiled from a [`TriggerSpec`].
//! - here: [`due`], [`biz_date`], [`describe`], [`Error`].

mod cron;
mod quartz;
pub mod spec;
mod trigger;

use std::time::Duration;

use chrono::{DateTime, Days, Utc};
use chrono_tz::Tz;

pub use cron::{CronSchedule, parse_timezone};
pub use spec::{AfterOn, CatchUp, Overlap, TriggerSpec};
pub use trigger::Trigger;

/// Bound for `catch_up: all`: only the most recent this many missed instants
/// are fired; older ones are counted as skipped. A day of a one-minute cron
/// missed must not flood the queue with 1,440 runs.
pub const MAX_CATCH_UP: usize = 100;

/// Missed-fire threshold: a due instant older than this when noticed counts as
/// "missed" (catch_up applies); younger ones are on time. One minute covers a
/// busy or briefly paused scheduler loop without calling it downtime.
pub const MISFIRE_GRACE: Duration = Duration::from_secs(60);

/// Cap on [`CronSchedule::upcoming`]: a preview never builds an unbounded list.
pub const MAX_UPCOMING: usize = 1_000;

/// Why a trigger or cron expression was refused. Messages are meant for the
/// person who wrote the task.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The cron text is blank.
    #[error("cron expression is empty; expected 6 fields, seconds first, like `0 30 1 * * ?`")]
    EmptyCron,
    /// A Unix-style 5-field expression; ax never reads it as seconds-first.
    #[error(
        "cron `{expr}` has 5 fields, but ax cron is Quartz style with seconds first \
         (second minute hour day-of-month month day-of-week [year]): did you mean `{suggestion}`?"
    )]
    FiveFieldCron {
        /// The expression as written.
        expr: String,
        /// The 6-field expression with a `0` seconds field in front.
        suggestion: String,
    },
    /// Neither 6 nor 7 fields.
    #[error(
        "cron `{expr}` has {count} fields; expected 6 (second minute hour day-of-month month \
         day-of-week) or 7 (the same plus year)"
    )]
    FieldCount {
        /// The expression as written.
        expr: String,
        /// How many whitespace-separated fields it has.
        count: usize,
    },
    /// One field is malformed or out of range.
    #[error("cron `{expr}`: {field} field: {reason}")]
    InvalidField {
        /// The expression as written.
        expr: String,
        /// Which field (`second`, `day-of-week`, …).
        field: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// Both day fields restrict the day (Quartz cannot combine them).
    #[error(
        "cron `{expr}` sets both day-of-month (`{day_of_month}`) and day-of-week \
         (`{day_of_week}`); Quartz cron cannot combine them: put `?` in one of the two"
    )]
    DayOfMonthAndWeek {
        /// The expression as written.
        expr: String,
        /// Its day-of-month field.
        day_of_month: String,
        /// Its day-of-week field.
        day_of_week: String,
    },
    /// No date in 1970–2099 matches (e.g. 31 February).
    #[error("cron `{expr}` never fires: no date matches it")]
    NeverFires {
        /// The expression as written.
        expr: String,
    },
    /// Not an IANA zone name.
    #[error(
        "unknown time zone `{name}`{suggestion}; use an IANA name such as `Europe/Berlin`, \
         `America/New_York` or `UTC`"
    )]
    UnknownTimezone {
        /// The name as written.
        name: String,
        /// ` (did you mean `X`?)` when the letter case was wrong or a close name
        /// exists (`Europe/Pariss`), else empty.
        suggestion: String,
    },
    /// More than one of `cron`, `at`, `delay`, `every`, `after`.
    #[error("a trigger sets {kinds}; set only one of `cron`, `at`, `delay`, `every`, `after`")]
    MultipleKinds {
        /// The kinds that were set, quoted and comma-separated.
        kinds: String,
    },
    /// `timezone` is only read by `cron`.
    #[error("`timezone` applies only to `cron`; remove it or add a `cron` expression")]
    TimezoneWithoutCron,
    /// `on` is only read by `after`.
    #[error("`on` applies only to `after`; remove it or list the upstream tasks in `after`")]
    OnWithoutAfter,
    /// `at` is not an RFC 3339 instant with an offset.
    #[error(
        "`at` value `{value}` is not an RFC 3339 instant with an offset, such as \
         `2026-12-01T23:00:00+08:00` or `2026-12-01T15:00:00Z` ({reason})"
    )]
    InvalidAt {
        /// The text as written.
        value: String,
        /// The parser's complaint.
        reason: String,
    },
    /// `every` shorter than one second.
    #[error("`every` must be at least 1s (got {got})")]
    EveryTooShort {
        /// The interval as written back (`500ms`).
        got: String,
    },
    /// `delay: 0s`.
    #[error(
        "`delay` must be longer than zero (for an immediate run, trigger the task through the API)"
    )]
    ZeroDelay,
    /// A duration so long the instant cannot be represented.
    #[error("`{field}` of {value} puts the fire instant beyond the supported range of dates")]
    OutOfRange {
        /// Which setting.
        field: &'static str,
        /// Its value as written back.
        value: String,
    },
    /// `after` lists a blank name.
    #[error("`after` lists an empty task name")]
    EmptyAfterTask,
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to do now that the persisted next fire `next_fire` (<= now) came due.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// Instants to start runs for, ascending (each is a run's `scheduled_for`).
    pub fire: Vec<DateTime<Utc>>,
    /// Due instants not fired (missed under `catch_up: none`/`latest`, or
    /// beyond [`MAX_CATCH_UP`]).
    pub skipped: usize,
    /// The first instant strictly after `now`: the next fire to persist.
    pub next: Option<DateTime<Utc>>,
}

/// Collects every instant of `trigger` in [next_fire, now]; instants older than
/// MISFIRE_GRACE are "missed":
/// CatchUp::Latest → fire only the most recent due instant (missed or not);
/// CatchUp::None → fire only due instants within the grace (not missed), skip the rest;
/// CatchUp::All → fire all, but at most the most recent MAX_CATCH_UP (the rest counted in `skipped`).
/// `next` = first instant strictly after `now`. Work is bounded however long
/// the downtime: a cron schedule's instants are counted by calendar
/// arithmetic, not listed, once there are more than a thousand.
pub fn due(
    trigger: &Trigger,
    next_fire: DateTime<Utc>,
    now: DateTime<Utc>,
    catch_up: CatchUp,
) -> Due {
    let next = trigger.next_after(now);
    if next_fire > now {
        return Due {
            fire: Vec::new(),
            skipped: 0,
            next,
        };
    }
    // Instants are at least a second apart, so the grace window holds at most
    // 61 of them: keeping the latest MAX_CATCH_UP covers `none` as well.
    let (total, latest) = trigger.tail(next_fire, now, MAX_CATCH_UP);
    let on_time_from = now - MISFIRE_GRACE;
    let fire: Vec<_> = match catch_up {
        CatchUp::Latest => latest.last().copied().into_iter().collect(),
        CatchUp::None => latest
            .into_iter()
            .filter(|at| *at >= on_time_from)
            .collect(),
        CatchUp::All => latest,
    };
    Due {
        skipped: total.saturating_sub(fire.len()),
        fire,
        next,
    }
}

/// `${bizDate}`: the calendar day before `scheduled_for` in zone `tz`, yyyy-MM-dd.
pub fn biz_date(scheduled_for: DateTime<Utc>, tz: Tz) -> String {
    let day = scheduled_for.with_timezone(&tz).date_naive();
    // The day before the earliest representable date does not exist; keep the day.
    day.checked_sub_days(Days::new(1))
        .unwrap_or(day)
        .format("%Y-%m-%d")
        .to_string()
}

/// Formats an instant for people: local time in `tz` with weekday name and
/// offset, e.g. "2026-12-01 01:30:00 Tue +08:00".
pub fn describe(instant: DateTime<Utc>, tz: Tz) -> String {
    instant
        .with_timezone(&tz)
        .format("%Y-%m-%d %H:%M:%S %a %:z")
        .to_string()
}

#[cfg(test)]
mod tests;
