//! Tests for the schedule module. Expected instants are computed by hand
//! and written as UTC literals; the comments give the local wall-clock time.
//!
//! 2026 transitions used throughout:
//! - America/New_York: 2026-03-08 02:00 EST → 03:00 EDT (07:00Z);
//!   2026-11-01 02:00 EDT → 01:00 EST (06:00Z).
//! - Europe/Berlin: 2026-03-29 02:00 CET → 03:00 CEST (01:00Z);
//!   2026-10-25 03:00 CEST → 02:00 CET (01:00Z).
//! - Australia/Sydney: 2026-04-05 03:00 AEDT → 02:00 AEST (04-04 16:00Z);
//!   2026-10-04 02:00 AEST → 03:00 AEDT (10-03 16:00Z).
//! - Asia/Shanghai: UTC+8 all year (control).
//!
//! One file per subject: `dst` (daylight saving), `quartz` (the dialect),
//! `rejections` (what is refused), `trigger` (compiling a trigger), `due`
//! (missed fires); here, the shared helpers and `biz_date`/`describe`.

use std::time::{Duration, Instant};

use chrono::{DateTime, LocalResult, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;

use super::*;
use crate::model::TriggerKind;

mod dst;
mod due;
mod quartz;
mod rejections;
mod trigger;

fn utc(text: &str) -> DateTime<Utc> {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn cron(expr: &str, tz: &str) -> CronSchedule {
    CronSchedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

fn rfc(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The first `n` fires of `expr` in `tz` strictly after `from`, as RFC 3339 UTC.
fn fires(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
    cron(expr, tz)
        .upcoming(utc(from), n)
        .into_iter()
        .map(rfc)
        .collect()
}

fn parse_error(expr: &str, tz: &str) -> Error {
    CronSchedule::parse(expr, tz).expect_err(expr)
}

/// Every fire of `schedule` in `(from, to]`, by repeated `next_after`.
fn enumerate(
    schedule: &CronSchedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(next) = schedule.next_after(t).filter(|n| *n <= to) {
        out.push(next);
        t = next;
    }
    out
}

const ZONES: [&str; 5] = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Asia/Shanghai",
    "Australia/Lord_Howe",
];

// --------------------------------------------------- bizDate and describe

#[test]
fn biz_date_is_the_day_before_in_the_task_zone() {
    let at = utc("2026-12-01T17:30:00Z");
    // Shanghai: 2026-12-02 01:30 local → 2026-12-01.
    assert_eq!(biz_date(at, chrono_tz::Asia::Shanghai), "2026-12-01");
    assert_eq!(biz_date(at, Tz::UTC), "2026-11-30");
    assert_eq!(biz_date(at, chrono_tz::America::New_York), "2026-11-30");
    assert_eq!(biz_date(utc("2027-01-01T00:30:00Z"), Tz::UTC), "2026-12-31");
    assert_eq!(biz_date(utc("2028-03-01T12:00:00Z"), Tz::UTC), "2028-02-29");
}

#[test]
fn describe_shows_local_time_weekday_and_offset() {
    assert_eq!(
        describe(utc("2026-11-30T17:30:00Z"), chrono_tz::Asia::Shanghai),
        "2026-12-01 01:30:00 Tue +08:00"
    );
    assert_eq!(
        describe(utc("2026-11-01T05:30:00Z"), chrono_tz::America::New_York),
        "2026-11-01 01:30:00 Sun -04:00"
    );
    assert_eq!(
        describe(utc("2026-11-01T06:30:00Z"), chrono_tz::America::New_York),
        "2026-11-01 01:30:00 Sun -05:00"
    );
    assert_eq!(
        describe(utc("2026-01-01T00:00:00Z"), Tz::UTC),
        "2026-01-01 00:00:00 Thu +00:00"
    );
}

#[test]
fn errors_are_cloneable_and_comparable() {
    let e = parse_error("0 2 * * *", "");
    assert_eq!(e.clone(), e);
}
