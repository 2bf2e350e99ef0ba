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

use std::time::{Duration, Instant};

use chrono::{DateTime, LocalResult, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;

use super::*;
use crate::model::TriggerKind;

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

const ZONES: [&str; 5] = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Asia/Shanghai",
    "Australia/Lord_Howe",
];

// ---------------------------------------------------------------- DST: gaps

#[test]
fn daily_at_nonexistent_time_fires_once_after_the_gap_in_new_york() {
    // 03-08 02:30 does not exist → 03:00 EDT; 03-09 02:30 EDT.
    assert_eq!(
        fires(
            "0 30 2 * * ?",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            2
        ),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    );
}

#[test]
fn daily_at_nonexistent_time_fires_once_after_the_gap_in_berlin() {
    // 03-29 02:30 does not exist → 03:00 CEST; 03-30 02:30 CEST.
    assert_eq!(
        fires("0 30 2 * * ?", "Europe/Berlin", "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    );
}

#[test]
fn daily_at_nonexistent_time_fires_once_after_the_gap_in_sydney() {
    // 10-03 02:30 AEST; 10-04 02:30 does not exist → 03:00 AEDT; 10-05 02:30 AEDT.
    assert_eq!(
        fires(
            "0 30 2 * * ?",
            "Australia/Sydney",
            "2026-10-02T12:00:00Z",
            3
        ),
        [
            "2026-10-02T16:30:00Z",
            "2026-10-03T16:00:00Z",
            "2026-10-04T15:30:00Z"
        ]
    );
}

#[test]
fn daily_at_two_thirty_in_shanghai_is_unaffected_by_us_dst() {
    assert_eq!(
        fires("0 30 2 * * ?", "Asia/Shanghai", "2026-03-07T12:00:00Z", 2),
        ["2026-03-07T18:30:00Z", "2026-03-08T18:30:00Z"]
    );
}

#[test]
fn fixed_time_with_several_hours_still_fires_after_the_gap() {
    // croner alone treats `2,14` as an interval job and drops 02:30 (see below).
    assert_eq!(
        fires(
            "0 30 2,14 * * ?",
            "America/New_York",
            "2026-03-08T00:00:00Z",
            3
        ),
        [
            "2026-03-08T07:00:00Z",
            "2026-03-08T18:30:00Z",
            "2026-03-09T06:30:00Z"
        ]
    );
}

#[test]
fn gap_match_and_the_first_time_after_the_gap_fire_once_together() {
    // 02:00 (gap) and 03:00 EDT both map to 07:00Z: one fire.
    assert_eq!(
        fires(
            "0 0 2,3 * * ?",
            "America/New_York",
            "2026-03-08T00:00:00Z",
            3
        ),
        [
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:00:00Z",
            "2026-03-09T07:00:00Z"
        ]
    );
}

#[test]
fn every_two_hours_is_fixed_time_and_fires_after_the_gap() {
    // 00:00 CET, 02:00 (gap) → 03:00 CEST, 04:00 CEST.
    assert_eq!(
        fires("0 0 */2 * * ?", "Europe/Berlin", "2026-03-28T22:30:00Z", 3),
        [
            "2026-03-28T23:00:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T02:00:00Z"
        ]
    );
}

#[test]
fn hourly_is_interval_and_skips_the_missing_hour() {
    // 01:00 EST, (02:00 missing), 03:00 EDT: one real hour apart.
    assert_eq!(
        fires("0 0 * * * ?", "America/New_York", "2026-03-08T05:30:00Z", 3),
        [
            "2026-03-08T06:00:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T08:00:00Z"
        ]
    );
}

#[test]
fn interval_firing_only_inside_the_gap_skips_that_day() {
    // 02:00 and 02:30 never happen in New York on 2026-03-08.
    assert_eq!(
        fires(
            "0 0/30 2 * * ?",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            3
        ),
        [
            "2026-03-09T06:00:00Z",
            "2026-03-09T06:30:00Z",
            "2026-03-10T06:00:00Z"
        ]
    );
}

#[test]
fn a_day_long_gap_is_crossed() {
    // Samoa skipped 2011-12-30 (−10 → +14 at 10:00Z). 12-28 and 12-29 09:00
    // −10; 12-30 09:00 fires at the first instant after the gap, 12-31 00:00
    // +14; then 12-31 09:00 +14. croner alone errors here (gap over 2 h).
    assert_eq!(
        fires("0 0 9 * * ?", "Pacific/Apia", "2011-12-28T12:00:00Z", 4),
        [
            "2011-12-28T19:00:00Z",
            "2011-12-29T19:00:00Z",
            "2011-12-30T10:00:00Z",
            "2011-12-30T19:00:00Z"
        ]
    );
}

// ------------------------------------------------------------- DST: repeats

#[test]
fn daily_at_repeated_time_fires_once_on_the_first_pass_in_new_york() {
    // 11-01 01:30 EDT (first pass); 11-02 01:30 EST.
    assert_eq!(
        fires(
            "0 30 1 * * ?",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            2
        ),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
}

#[test]
fn daily_at_repeated_time_fires_once_on_the_first_pass_in_berlin() {
    // 10-25 02:30 CEST (first pass); 10-26 02:30 CET.
    assert_eq!(
        fires("0 30 2 * * ?", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
}

#[test]
fn daily_at_repeated_time_fires_once_on_the_first_pass_in_sydney() {
    // 04-04 02:30 AEDT; 04-05 02:30 AEDT (first pass); 04-06 02:30 AEST.
    assert_eq!(
        fires(
            "0 30 2 * * ?",
            "Australia/Sydney",
            "2026-04-03T12:00:00Z",
            3
        ),
        [
            "2026-04-03T15:30:00Z",
            "2026-04-04T15:30:00Z",
            "2026-04-05T16:30:00Z"
        ]
    );
}

#[test]
fn repeated_time_is_not_fired_again_when_asked_from_the_second_pass() {
    // Asked from 01:10 EST (second pass): 01:30 EST is not a new fire.
    assert_eq!(
        fires(
            "0 30 1 * * ?",
            "America/New_York",
            "2026-11-01T06:10:00Z",
            1
        ),
        ["2026-11-02T06:30:00Z"]
    );
}

#[test]
fn fixed_time_with_several_hours_fires_once_in_the_repeated_hour() {
    // croner alone fires 01:30 twice here (05:30Z and 06:30Z).
    assert_eq!(
        fires(
            "0 30 1,13 * * ?",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            3
        ),
        [
            "2026-10-31T17:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T18:30:00Z"
        ]
    );
}

#[test]
fn hourly_fires_on_both_passes_of_the_repeated_hour() {
    // 01:00 EDT, 01:00 EST, 02:00 EST.
    assert_eq!(
        fires("0 0 * * * ?", "America/New_York", "2026-11-01T04:30:00Z", 3),
        [
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z"
        ]
    );
}

#[test]
fn interval_asked_from_the_first_pass_finds_the_second_pass() {
    // From 01:30 EDT exactly, hourly at :30: next is 01:30 EST, one hour later.
    assert_eq!(
        fires(
            "0 30 * * * ?",
            "America/New_York",
            "2026-11-01T05:30:00Z",
            2
        ),
        ["2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"]
    );
}

// ---------------------------------------------------- DST: every 30 minutes

#[test]
fn every_30_minutes_keeps_real_spacing_across_new_york_transitions() {
    // Spring: 01:30 EST, 03:00 EDT, 03:30 EDT.
    assert_eq!(
        fires(
            "0 0/30 * * * ?",
            "America/New_York",
            "2026-03-08T06:00:00Z",
            3
        ),
        [
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:30:00Z"
        ]
    );
    // Fall: 01:00 EDT, 01:30 EDT, 01:00 EST, 01:30 EST, 02:00 EST.
    assert_eq!(
        fires(
            "0 0/30 * * * ?",
            "America/New_York",
            "2026-11-01T04:45:00Z",
            5
        ),
        [
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:00:00Z"
        ]
    );
}

#[test]
fn every_30_minutes_keeps_real_spacing_across_berlin_transitions() {
    // Spring: 01:30 CET, 03:00 CEST, 03:30 CEST.
    assert_eq!(
        fires("0 */30 * * * ?", "Europe/Berlin", "2026-03-29T00:15:00Z", 3),
        [
            "2026-03-29T00:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:30:00Z"
        ]
    );
    // Fall: 02:30 CEST, 02:00 CET, 02:30 CET, 03:00 CET.
    assert_eq!(
        fires("0 */30 * * * ?", "Europe/Berlin", "2026-10-25T00:15:00Z", 4),
        [
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-25T02:00:00Z"
        ]
    );
}

#[test]
fn every_30_minutes_keeps_real_spacing_across_sydney_transitions() {
    // Fall (04-05): 02:30 AEDT, 02:00 AEST, 02:30 AEST, 03:00 AEST.
    assert_eq!(
        fires(
            "0 0,30 * * * ?",
            "Australia/Sydney",
            "2026-04-04T15:15:00Z",
            4
        ),
        [
            "2026-04-04T15:30:00Z",
            "2026-04-04T16:00:00Z",
            "2026-04-04T16:30:00Z",
            "2026-04-04T17:00:00Z"
        ]
    );
    // Spring (10-04): 01:30 AEST, 03:00 AEDT, 03:30 AEDT.
    assert_eq!(
        fires(
            "0 0,30 * * * ?",
            "Australia/Sydney",
            "2026-10-03T15:15:00Z",
            3
        ),
        [
            "2026-10-03T15:30:00Z",
            "2026-10-03T16:00:00Z",
            "2026-10-03T16:30:00Z"
        ]
    );
}

#[test]
fn every_30_minutes_for_a_year_is_strictly_increasing_and_evenly_spaced() {
    for zone in ZONES {
        let schedule = cron("0 0/30 * * * ?", zone);
        let mut t = utc("2026-01-01T00:00:00Z");
        let mut count = 0;
        while let Some(next) = schedule.next_after(t) {
            if next >= utc("2027-01-01T00:00:00Z") {
                break;
            }
            assert_eq!(next - t, chrono::TimeDelta::minutes(30), "{zone} after {t}");
            t = next;
            count += 1;
        }
        // Both ends excluded: 2026-01-01 00:00 and 2027-01-01 00:00.
        assert_eq!(count, 365 * 48 - 1, "{zone}");
    }
}

#[test]
fn fire_instants_are_strictly_increasing_for_a_year() {
    let exprs = [
        "0 30 2 * * ?",
        "0 30 1 * * ?",
        "0 0 0,2,3 * * ?",
        "0 0 */2 * * ?",
        "0 0 * * * ?",
        "*/20 59 1,2 * * ?",
        "0 15 2 ? * SUN",
    ];
    for zone in ZONES {
        for expr in exprs {
            let list = cron(expr, zone).upcoming(utc("2026-01-01T00:00:00Z"), MAX_UPCOMING);
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{expr} in {zone}");
        }
    }
}

/// What the DST rules say, computed straight from chrono-tz: every matching
/// wall-clock second of each local day, mapped to instants.
fn reference(
    schedule: &CronSchedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let tz = schedule.timezone();
    let matcher = CronSchedule::parse(schedule.expression(), "UTC").expect("reparse");
    let mut out = Vec::new();
    let mut day = from.with_timezone(&tz).date_naive() - chrono::Days::new(1);
    let last = to.with_timezone(&tz).date_naive() + chrono::Days::new(1);
    while day <= last {
        let midnight = day.and_hms_opt(0, 0, 0).expect("midnight").and_utc();
        // Wall-clock matches of this day, found with the zone-less schedule.
        let mut cursor = midnight - chrono::TimeDelta::seconds(1);
        while let Some(wall) = matcher.next_after(cursor).filter(|w| w.date_naive() == day) {
            cursor = wall;
            let wall = wall.naive_utc();
            match tz.from_local_datetime(&wall) {
                LocalResult::Single(i) => out.push(i.to_utc()),
                LocalResult::Ambiguous(earlier, later) => {
                    out.push(earlier.to_utc());
                    if !schedule.is_fixed_time() {
                        out.push(later.to_utc());
                    }
                }
                LocalResult::None => {
                    if schedule.is_fixed_time() {
                        let end = chrono_tz::GapInfo::new(&wall, &tz).and_then(|g| g.end);
                        out.extend(end.map(|e| e.to_utc()));
                    }
                }
            }
        }
        day = day.succ_opt().expect("next day");
    }
    out.sort();
    out.dedup();
    out.retain(|i| *i > from && *i <= to);
    out
}

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

/// Two days around each 2026 transition of the test zones.
const WINDOWS: [(&str, &str); 8] = [
    ("2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z"),
    ("2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z"),
    ("2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z"),
    ("2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"),
    ("2026-04-03T12:00:00Z", "2026-04-05T12:00:00Z"),
    ("2026-10-02T12:00:00Z", "2026-10-04T12:00:00Z"),
    ("2026-12-31T00:00:00Z", "2027-01-02T00:00:00Z"),
    ("2025-12-31T23:00:00Z", "2026-01-02T01:00:00Z"),
];

const DST_EXPRESSIONS: [&str; 10] = [
    "0 30 2 * * ?",
    "0 30 1 * * ?",
    "0 0 2,3 * * ?",
    "0 0 0/2 * * ?",
    "0 0/30 * * * ?",
    "0 0 * * * ?",
    "*/15 */7 1-3 * * ?",
    "0 15 2 ? * SUN",
    "0 45 1,2,3 * * ?",
    "0 0 0 L * ?",
];

#[test]
fn next_after_matches_the_rules_computed_from_chrono_tz_around_every_transition() {
    for zone in ZONES {
        for expr in DST_EXPRESSIONS {
            let schedule = cron(expr, zone);
            for (from, to) in WINDOWS {
                let (from, to) = (utc(from), utc(to));
                assert_eq!(
                    enumerate(&schedule, from, to),
                    reference(&schedule, from, to),
                    "{expr} in {zone} from {from}"
                );
            }
        }
    }
}

#[test]
fn counting_agrees_with_enumeration_around_every_transition() {
    for zone in ZONES {
        for expr in DST_EXPRESSIONS {
            let schedule = cron(expr, zone);
            for (from, to) in WINDOWS {
                let (from, to) = (utc(from), utc(to));
                // Also windows starting and ending inside the transition hours.
                for shift in [0, 3_600 * 13 + 1_799, 3_600 * 30 + 1] {
                    let t0 = from.timestamp() + shift;
                    let listed = enumerate(&schedule, instant(t0), to).len() as u64;
                    assert_eq!(
                        schedule.count_between(t0, to.timestamp()),
                        listed,
                        "{expr} in {zone} ({t0}, {to}]"
                    );
                }
            }
        }
    }
}

fn instant(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).expect("in range")
}

#[test]
fn croner_alone_mishandles_fixed_times_listing_several_hours() {
    // Why the wrapper maps wall-clock times to instants itself: croner 4.0.3
    // classifies `0 30 1,13` as an interval job (more than one hour value).
    use croner::parser::{CronParser, Seconds};
    let raw = CronParser::builder()
        .seconds(Seconds::Required)
        .build()
        .parse("0 30 1,13 * * *");
    let raw = raw.expect("croner parses");
    let ny: Tz = "America/New_York".parse().expect("zone");
    let first = raw.find_next_occurrence(&utc("2026-11-01T05:30:00Z").with_timezone(&ny), false);
    // The second pass of 01:30 (06:30Z) — a repeat that ax does not fire.
    assert_eq!(
        first.map(|t| rfc(t.to_utc())).ok(),
        Some("2026-11-01T06:30:00Z".to_owned())
    );
}

// --------------------------------------------------- Quartz special forms

#[test]
fn l_is_the_last_day_of_the_month() {
    assert_eq!(
        fires("0 0 0 L * ?", "", "2026-01-15T00:00:00Z", 4),
        [
            "2026-01-31T00:00:00Z",
            "2026-02-28T00:00:00Z",
            "2026-03-31T00:00:00Z",
            "2026-04-30T00:00:00Z"
        ]
    );
    assert_eq!(
        fires("0 0 0 L 2 ?", "", "2027-06-01T00:00:00Z", 1),
        ["2028-02-29T00:00:00Z"]
    );
}

#[test]
fn lw_is_the_last_weekday_of_the_month() {
    // Jan 31 2026 is a Saturday → Fri 30; Feb 28 is a Saturday → Fri 27;
    // Mar 31 is a Tuesday; May 31 is a Sunday → Fri 29.
    assert_eq!(
        fires("0 0 0 LW * ?", "", "2026-01-01T00:00:00Z", 5),
        [
            "2026-01-30T00:00:00Z",
            "2026-02-27T00:00:00Z",
            "2026-03-31T00:00:00Z",
            "2026-04-30T00:00:00Z",
            "2026-05-29T00:00:00Z"
        ]
    );
}

#[test]
fn w_is_the_nearest_weekday_within_the_month() {
    // Mar 15 2026 Sun → Mon 16; Jun 15 Mon; Aug 15 Sat → Fri 14; Nov 15 Sun → Mon 16.
    let list = fires("0 0 0 15W * ?", "", "2026-03-01T00:00:00Z", 9);
    assert_eq!(list[0], "2026-03-16T00:00:00Z");
    assert_eq!(list[3], "2026-06-15T00:00:00Z");
    assert_eq!(list[5], "2026-08-14T00:00:00Z");
    assert_eq!(list[8], "2026-11-16T00:00:00Z");
    // Aug 1 2026 is a Saturday: 1W cannot go back into July → Mon 3.
    assert_eq!(
        fires("0 0 0 1W * ?", "", "2026-07-15T00:00:00Z", 1),
        ["2026-08-03T00:00:00Z"]
    );
}

#[test]
fn hash_is_the_nth_weekday_with_quartz_numbering() {
    // 6#3 = third Friday (Quartz 6 = FRI): Jan 16, Feb 20, Mar 20 2026.
    assert_eq!(
        fires("0 0 0 ? * 6#3", "", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-16T00:00:00Z",
            "2026-02-20T00:00:00Z",
            "2026-03-20T00:00:00Z"
        ]
    );
    // 2#1 = first Monday: Jan 5, Feb 2.
    assert_eq!(
        fires("0 0 0 ? * 2#1", "", "2026-01-01T00:00:00Z", 2),
        ["2026-01-05T00:00:00Z", "2026-02-02T00:00:00Z"]
    );
    assert_eq!(
        fires("0 0 0 ? * MON#1", "", "2026-01-01T00:00:00Z", 2),
        fires("0 0 0 ? * 2#1", "", "2026-01-01T00:00:00Z", 2)
    );
}

#[test]
fn nl_is_the_last_such_weekday_with_quartz_numbering() {
    // 6L = last Friday (croner's own numbering would read Saturday, Jan 31).
    assert_eq!(
        fires("0 0 0 ? * 6L", "", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-30T00:00:00Z",
            "2026-02-27T00:00:00Z",
            "2026-03-27T00:00:00Z"
        ]
    );
    // 1L = last Sunday: the EU transition days.
    assert_eq!(
        fires("0 0 0 ? 3,10 1L", "", "2026-01-01T00:00:00Z", 2),
        ["2026-03-29T00:00:00Z", "2026-10-25T00:00:00Z"]
    );
    // L alone in day-of-week is Saturday.
    assert_eq!(
        fires("0 0 0 ? * L", "", "2026-01-01T00:00:00Z", 1),
        ["2026-01-03T00:00:00Z"]
    );
}

#[test]
fn nth_and_last_weekday_items_mix_in_a_list() {
    // First Monday (Jan 5) and last Friday (Jan 30) of January 2026.
    assert_eq!(
        fires("0 0 0 ? * 2#1,6L", "", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-05T00:00:00Z",
            "2026-01-30T00:00:00Z",
            "2026-02-02T00:00:00Z"
        ]
    );
}

#[test]
fn day_numbers_follow_quartz_one_is_sunday() {
    // 2026-01-01 is a Thursday: first Sunday Jan 4, first Saturday Jan 3.
    assert_eq!(
        fires("0 0 0 ? * 1", "", "2026-01-01T00:00:00Z", 1),
        ["2026-01-04T00:00:00Z"]
    );
    assert_eq!(
        fires("0 0 0 ? * 7", "", "2026-01-01T00:00:00Z", 1),
        ["2026-01-03T00:00:00Z"]
    );
    assert_eq!(
        fires("0 0 0 ? * SUN", "", "2026-01-01T00:00:00Z", 1),
        ["2026-01-04T00:00:00Z"]
    );
}

#[test]
fn day_names_select_weekdays() {
    // From Fri 2026-01-02 10:00: Mon 5 … Fri 9, then Mon 12.
    let weekdays = fires("0 0 9 ? * MON-FRI", "", "2026-01-02T10:00:00Z", 6);
    assert_eq!(
        weekdays,
        [
            "2026-01-05T09:00:00Z",
            "2026-01-06T09:00:00Z",
            "2026-01-07T09:00:00Z",
            "2026-01-08T09:00:00Z",
            "2026-01-09T09:00:00Z",
            "2026-01-12T09:00:00Z"
        ]
    );
    assert_eq!(
        fires("0 0 9 ? * 2-6", "", "2026-01-02T10:00:00Z", 6),
        weekdays
    );
    assert_eq!(
        fires("0 0 9 ? * sat,SUN", "", "2026-01-01T00:00:00Z", 2),
        ["2026-01-03T09:00:00Z", "2026-01-04T09:00:00Z"]
    );
}

#[test]
fn month_names_select_months() {
    assert_eq!(
        fires("0 0 0 1 JAN,JUL ?", "", "2026-01-15T00:00:00Z", 2),
        ["2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"]
    );
    assert_eq!(
        fires("0 0 0 1 jan,jul ?", "", "2026-01-15T00:00:00Z", 2),
        fires("0 0 0 1 1,7 ?", "", "2026-01-15T00:00:00Z", 2)
    );
}

#[test]
fn year_field_limits_the_years() {
    assert_eq!(
        fires("0 0 12 25 DEC ? 2027", "", "2026-01-01T00:00:00Z", 3),
        ["2027-12-25T12:00:00Z"]
    );
    assert_eq!(
        fires("0 0 12 25 DEC ? 2027/2", "", "2026-01-01T00:00:00Z", 2),
        ["2027-12-25T12:00:00Z", "2029-12-25T12:00:00Z"]
    );
    // A year in the past parses but has no next fire.
    assert_eq!(
        cron("0 0 0 1 1 ? 2020", "").next_after(utc("2026-01-01T00:00:00Z")),
        None
    );
}

#[test]
fn seconds_field_and_steps_work() {
    assert_eq!(
        fires("5/20 0 0 * * ?", "", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-01T00:00:05Z",
            "2026-01-01T00:00:25Z",
            "2026-01-01T00:00:45Z"
        ]
    );
}

#[test]
fn local_time_in_a_zone_maps_to_utc() {
    // SPEC example: 01:30 Shanghai = 17:30Z the day before.
    assert_eq!(
        fires("0 30 1 * * ?", "Asia/Shanghai", "2026-11-30T00:00:00Z", 2),
        ["2026-11-30T17:30:00Z", "2026-12-01T17:30:00Z"]
    );
}

#[test]
fn next_after_is_strict_and_ignores_sub_seconds() {
    let s = cron("0 0 0 * * ?", "");
    assert_eq!(
        s.next_after(utc("2026-01-01T00:00:00Z")),
        Some(utc("2026-01-02T00:00:00Z"))
    );
    assert_eq!(
        s.next_after(utc("2025-12-31T23:59:59.999Z")),
        Some(utc("2026-01-01T00:00:00Z"))
    );
    assert_eq!(
        s.next_after(utc("2026-01-01T00:00:00.001Z")),
        Some(utc("2026-01-02T00:00:00Z"))
    );
}

#[test]
fn upcoming_is_capped() {
    assert_eq!(
        cron("* * * * * ?", "")
            .upcoming(utc("2026-01-01T00:00:00Z"), 1_000_000)
            .len(),
        MAX_UPCOMING
    );
    assert!(
        cron("0 0 0 1 1 ? 2027", "")
            .upcoming(utc("2026-01-01T00:00:00Z"), 5)
            .len()
            == 1
    );
}

// ------------------------------------------------------------ rejections

#[test]
fn five_fields_are_rejected_with_the_six_field_expression_meant() {
    let e = parse_error("0 2 * * *", "");
    assert!(matches!(e, Error::FiveFieldCron { .. }), "{e:?}");
    assert!(e.to_string().contains("`0 0 2 * * *`"), "{e}");
    assert!(
        parse_error("*/5 * * * 1-5", "")
            .to_string()
            .contains("`0 */5 * * * 1-5`")
    );
}

#[test]
fn eight_fields_are_rejected() {
    let e = parse_error("0 0 0 1 1 ? 2027 5", "");
    assert_eq!(
        e,
        Error::FieldCount {
            expr: "0 0 0 1 1 ? 2027 5".into(),
            count: 8
        }
    );
    assert!(e.to_string().contains("has 8 fields"), "{e}");
}

#[test]
fn unknown_time_zone_is_named() {
    let e = parse_error("0 0 0 * * ?", "Mars/Olympus_Mons");
    assert!(e.to_string().contains("`Mars/Olympus_Mons`"), "{e}");
    let e = parse_error("0 0 0 * * ?", "asia/shanghai");
    assert!(
        e.to_string().contains("did you mean `Asia/Shanghai`?"),
        "{e}"
    );
}

#[test]
fn zone_names_parse_like_triggers_read_them() {
    assert_eq!(parse_timezone(""), Ok(Tz::UTC));
    assert_eq!(parse_timezone(" UTC "), Ok(Tz::UTC));
    assert_eq!(
        parse_timezone("Asia/Shanghai"),
        Ok(chrono_tz::Asia::Shanghai)
    );
    assert!(matches!(
        parse_timezone("Asia/Nowhere"),
        Err(Error::UnknownTimezone { .. })
    ));
}

#[test]
fn empty_and_utc_zone_names_mean_utc() {
    assert_eq!(cron("0 0 0 * * ?", "").timezone(), Tz::UTC);
    assert_eq!(cron("0 0 0 * * ?", "UTC").timezone(), Tz::UTC);
    assert_eq!(
        cron("0 0 0 * * ?", "Europe/Berlin").timezone(),
        chrono_tz::Europe::Berlin
    );
}

#[test]
fn day_of_week_zero_is_rejected() {
    let e = parse_error("0 0 0 ? * 0", "");
    assert!(
        matches!(
            e,
            Error::InvalidField {
                field: "day-of-week",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("1 = SUN … 7 = SAT"), "{e}");
    assert!(
        parse_error("0 0 0 ? * 8", "")
            .to_string()
            .contains("there is no 8")
    );
}

#[test]
fn both_day_fields_are_rejected() {
    let e = parse_error("0 0 0 15 * MON", "");
    assert!(matches!(e, Error::DayOfMonthAndWeek { .. }), "{e:?}");
}

#[test]
fn garbage_is_rejected() {
    assert_eq!(parse_error("", ""), Error::EmptyCron);
    assert_eq!(parse_error("   ", ""), Error::EmptyCron);
    assert!(matches!(
        parse_error("hello", ""),
        Error::FieldCount { count: 1, .. }
    ));
    assert!(matches!(
        parse_error("@daily", ""),
        Error::FieldCount { count: 1, .. }
    ));
    assert!(matches!(
        parse_error("a b c d e f", ""),
        Error::InvalidField {
            field: "second",
            ..
        }
    ));
    assert!(matches!(
        parse_error("0 0 0 * * ? abc", ""),
        Error::InvalidField { field: "year", .. }
    ));
    assert!(matches!(
        parse_error("0 0 0 * * ? 1,,2", ""),
        Error::InvalidField { .. }
    ));
    assert!(matches!(
        parse_error("0 0 0 ** * ?", ""),
        Error::InvalidField { .. }
    ));
    assert!(matches!(
        parse_error("0 0 0 1-2-3 * ?", ""),
        Error::InvalidField { .. }
    ));
    assert!(matches!(
        parse_error("0 0 0 ? * +MON", ""),
        Error::InvalidField { .. }
    ));
}

#[test]
fn an_expression_matching_no_date_is_rejected() {
    let e = parse_error("0 0 0 31 2 ?", "");
    assert_eq!(
        e,
        Error::NeverFires {
            expr: "0 0 0 31 2 ?".into()
        }
    );
    assert!(e.to_string().contains("never fires"), "{e}");
}

// -------------------------------------------------------------- Trigger

fn created() -> DateTime<Utc> {
    utc("2026-05-01T10:00:00.250Z")
}

fn compile(spec: TriggerSpec) -> Result<Trigger> {
    Trigger::compile(Some(&spec), created())
}

#[test]
fn no_trigger_or_an_empty_one_is_manual() {
    let t = Trigger::compile(None, created()).expect("manual");
    assert_eq!(t, Trigger::Manual);
    assert_eq!(compile(TriggerSpec::default()), Ok(Trigger::Manual));
    assert_eq!(t.kind(), TriggerKind::Manual);
    assert_eq!(t.next_after(created()), None);
    assert_eq!(t.first_fire(created()), None);
}

#[test]
fn more_than_one_kind_is_rejected() {
    let spec = TriggerSpec {
        cron: Some("0 0 0 * * ?".into()),
        every: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let e = compile(spec).expect_err("two kinds");
    assert_eq!(
        e,
        Error::MultipleKinds {
            kinds: "`cron`, `every`".into()
        }
    );
    let spec = TriggerSpec {
        at: Some("2026-12-01T23:00:00+08:00".into()),
        after: vec!["a".into()],
        ..Default::default()
    };
    assert!(
        compile(spec)
            .expect_err("two kinds")
            .to_string()
            .contains("`at`, `after`")
    );
}

#[test]
fn timezone_without_cron_is_rejected() {
    let spec = TriggerSpec {
        timezone: Some("Asia/Shanghai".into()),
        every: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    assert_eq!(compile(spec), Err(Error::TimezoneWithoutCron));
}

#[test]
fn on_without_after_is_rejected() {
    let spec = TriggerSpec {
        on: Some(AfterOn::Failure),
        ..Default::default()
    };
    assert_eq!(compile(spec), Err(Error::OnWithoutAfter));
}

#[test]
fn cron_trigger_compiles_with_its_zone_and_rejects_bad_zones_and_expressions() {
    let spec = TriggerSpec {
        cron: Some("0 30 1 * * ?".into()),
        timezone: Some("Asia/Shanghai".into()),
        ..Default::default()
    };
    let t = compile(spec.clone()).expect("cron");
    assert_eq!(t.kind(), TriggerKind::Cron);
    assert_eq!(t.timezone(), chrono_tz::Asia::Shanghai);
    // 2026-05-01 10:00Z = 18:00 Shanghai → next 01:30 local is 05-01 17:30Z.
    assert_eq!(t.first_fire(created()), Some(utc("2026-05-01T17:30:00Z")));
    assert_eq!(
        t.next_after(utc("2026-05-01T17:30:00Z")),
        Some(utc("2026-05-02T17:30:00Z"))
    );

    let bad_zone = TriggerSpec {
        timezone: Some("Nowhere/City".into()),
        ..spec.clone()
    };
    assert!(matches!(
        compile(bad_zone),
        Err(Error::UnknownTimezone { .. })
    ));
    let bad_cron = TriggerSpec {
        cron: Some("0 2 * * *".into()),
        ..spec
    };
    assert!(matches!(
        compile(bad_cron),
        Err(Error::FiveFieldCron { .. })
    ));
}

#[test]
fn at_needs_rfc3339_with_an_offset() {
    let at = |text: &str| {
        compile(TriggerSpec {
            at: Some(text.into()),
            ..Default::default()
        })
    };
    let t = at("2026-12-01T23:00:00+08:00").expect("at");
    assert_eq!(t, Trigger::At(utc("2026-12-01T15:00:00Z")));
    assert_eq!(t.kind(), TriggerKind::At);
    assert_eq!(
        at("2026-12-01T15:00:00Z"),
        Ok(Trigger::At(utc("2026-12-01T15:00:00Z")))
    );
    for bad in ["2026-12-01T23:00:00", "2026-12-01 23:00", "tomorrow", ""] {
        let e = at(bad).expect_err(bad);
        assert!(matches!(e, Error::InvalidAt { .. }), "{bad}: {e:?}");
        assert!(e.to_string().contains("RFC 3339"), "{e}");
    }
}

#[test]
fn a_past_one_shot_still_has_its_first_fire() {
    let t = Trigger::At(utc("2026-01-01T00:00:00Z"));
    assert_eq!(t.first_fire(created()), Some(utc("2026-01-01T00:00:00Z")));
    assert_eq!(t.next_after(created()), None);
    assert_eq!(
        t.next_after(utc("2025-12-31T23:59:59Z")),
        Some(utc("2026-01-01T00:00:00Z"))
    );
}

#[test]
fn delay_counts_from_creation_and_zero_is_rejected() {
    let delay = |d: u64| {
        compile(TriggerSpec {
            delay: Some(Duration::from_secs(d)),
            ..Default::default()
        })
    };
    let t = delay(30 * 60).expect("delay");
    assert_eq!(t, Trigger::Delay(utc("2026-05-01T10:30:00.250Z")));
    assert_eq!(t.kind(), TriggerKind::Delay);
    assert_eq!(
        t.first_fire(utc("2026-06-01T00:00:00Z")),
        Some(utc("2026-05-01T10:30:00.250Z"))
    );
    assert_eq!(delay(0), Err(Error::ZeroDelay));
    let huge = compile(TriggerSpec {
        delay: Some(Duration::from_secs(u64::MAX)),
        ..Default::default()
    });
    assert!(matches!(
        huge,
        Err(Error::OutOfRange { field: "delay", .. })
    ));
}

#[test]
fn every_is_anchored_at_creation_and_at_least_a_second() {
    let every = |d: Duration| {
        compile(TriggerSpec {
            every: Some(d),
            ..Default::default()
        })
    };
    let t = every(Duration::from_secs(300)).expect("every");
    assert_eq!(
        t,
        Trigger::Every {
            anchor: created(),
            period: Duration::from_secs(300)
        }
    );
    assert_eq!(t.kind(), TriggerKind::Every);
    assert_eq!(t.timezone(), Tz::UTC);
    assert_eq!(
        t.first_fire(created()),
        Some(utc("2026-05-01T10:05:00.250Z"))
    );
    assert_eq!(
        t.next_after(utc("2026-05-01T09:00:00Z")),
        Some(utc("2026-05-01T10:05:00.250Z"))
    );
    assert_eq!(
        t.next_after(utc("2026-05-01T10:05:00.250Z")),
        Some(utc("2026-05-01T10:10:00.250Z"))
    );
    assert_eq!(
        t.next_after(utc("2026-05-01T10:07:00Z")),
        Some(utc("2026-05-01T10:10:00.250Z"))
    );
    let e = every(Duration::from_millis(500)).expect_err("too short");
    assert_eq!(e.to_string(), "`every` must be at least 1s (got 500ms)");
    assert!(every(Duration::ZERO).is_err());
    assert!(every(Duration::from_secs(1)).is_ok());
}

#[test]
fn after_compiles_with_its_result_filter() {
    let spec = TriggerSpec {
        after: vec!["extract".into()],
        on: Some(AfterOn::Done),
        ..Default::default()
    };
    let t = compile(spec).expect("after");
    assert_eq!(
        t,
        Trigger::After {
            tasks: vec!["extract".into()],
            on: AfterOn::Done
        }
    );
    assert_eq!(t.kind(), TriggerKind::After);
    assert_eq!(t.next_after(created()), None);
    let default_on = compile(TriggerSpec {
        after: vec!["a".into()],
        ..Default::default()
    });
    assert_eq!(
        default_on,
        Ok(Trigger::After {
            tasks: vec!["a".into()],
            on: AfterOn::Success
        })
    );
    let blank = compile(TriggerSpec {
        after: vec![" ".into()],
        ..Default::default()
    });
    assert_eq!(blank, Err(Error::EmptyAfterTask));
}

#[test]
fn trigger_spec_from_json_compiles() {
    let spec: TriggerSpec =
        serde_json::from_str(r#"{"cron": "0 30 1 * * ?", "timezone": "Asia/Shanghai"}"#)
            .expect("json");
    assert!(matches!(compile(spec), Ok(Trigger::Cron(_))));
    let spec: TriggerSpec = serde_json::from_str(r#"{"every": "5m"}"#).expect("json");
    assert_eq!(
        compile(spec).ok().and_then(|t| t.first_fire(created())),
        Some(utc("2026-05-01T10:05:00.250Z"))
    );
}

// ------------------------------------------------------------------- due

fn hourly() -> Trigger {
    Trigger::Cron(cron("0 0 * * * ?", ""))
}

#[test]
fn due_on_time_fires_the_instant_under_every_policy() {
    for policy in [CatchUp::Latest, CatchUp::None, CatchUp::All] {
        let d = due(
            &hourly(),
            utc("2026-01-01T01:00:00Z"),
            utc("2026-01-01T01:00:00.250Z"),
            policy,
        );
        assert_eq!(
            d,
            Due {
                fire: vec![utc("2026-01-01T01:00:00Z")],
                skipped: 0,
                next: Some(utc("2026-01-01T02:00:00Z"))
            },
            "{policy:?}"
        );
    }
}

#[test]
fn due_within_the_grace_is_on_time_and_after_it_is_missed() {
    let fire = utc("2026-01-01T01:00:00Z");
    let at_grace = due(&hourly(), fire, fire + MISFIRE_GRACE, CatchUp::None);
    assert_eq!(at_grace.fire, [fire]);
    let past_grace = due(
        &hourly(),
        fire,
        fire + MISFIRE_GRACE + Duration::from_secs(1),
        CatchUp::None,
    );
    assert_eq!((past_grace.fire.len(), past_grace.skipped), (0, 1));
    assert_eq!(past_grace.next, Some(utc("2026-01-01T02:00:00Z")));
}

#[test]
fn due_after_a_day_down_follows_catch_up() {
    // 25 hourly instants in [Jan 1 00:00, Jan 2 00:00]; now is 30 s past the last.
    let (from, now) = (utc("2026-01-01T00:00:00Z"), utc("2026-01-02T00:00:30Z"));
    let latest = due(&hourly(), from, now, CatchUp::Latest);
    assert_eq!(latest.fire, [utc("2026-01-02T00:00:00Z")]);
    assert_eq!(latest.skipped, 24);
    assert_eq!(latest.next, Some(utc("2026-01-02T01:00:00Z")));
    let none = due(&hourly(), from, now, CatchUp::None);
    assert_eq!(none.fire, [utc("2026-01-02T00:00:00Z")]);
    assert_eq!(none.skipped, 24);
    let all = due(&hourly(), from, now, CatchUp::All);
    assert_eq!(all.fire.len(), 25);
    assert_eq!((all.fire[0], all.skipped), (from, 0));
}

#[test]
fn due_after_downtime_with_everything_missed() {
    // Now is 5 minutes past the last instant: all 25 are missed.
    let (from, now) = (utc("2026-01-01T00:00:00Z"), utc("2026-01-02T00:05:00Z"));
    let none = due(&hourly(), from, now, CatchUp::None);
    assert_eq!((none.fire.len(), none.skipped), (0, 25));
    let latest = due(&hourly(), from, now, CatchUp::Latest);
    assert_eq!(
        (latest.fire.clone(), latest.skipped),
        (vec![utc("2026-01-02T00:00:00Z")], 24)
    );
}

#[test]
fn due_all_keeps_only_the_most_recent_max_catch_up() {
    // A minutely cron down for a day: 1,441 instants.
    let t = Trigger::Cron(cron("0 * * * * ?", ""));
    let d = due(
        &t,
        utc("2026-01-01T00:00:00Z"),
        utc("2026-01-02T00:00:00Z"),
        CatchUp::All,
    );
    assert_eq!(d.fire.len(), MAX_CATCH_UP);
    assert_eq!(d.skipped, 1_441 - MAX_CATCH_UP);
    assert_eq!(d.fire[0], utc("2026-01-01T22:21:00Z"));
    assert_eq!(d.fire[MAX_CATCH_UP - 1], utc("2026-01-02T00:00:00Z"));
    assert!(d.fire.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn due_for_a_one_second_cron_after_a_year_down_is_quick_and_exact() {
    // Every second of 2025, both ends included: 365 × 86,400 + 1 instants.
    // New York included: both passes of the repeated hour fire and the
    // skipped hour does not exist, so the count is still one per real second.
    let total = 365 * 86_400 + 1;
    for zone in ["", "America/New_York"] {
        let t = Trigger::Cron(cron("* * * * * ?", zone));
        let (from, now) = (utc("2025-01-01T00:00:00Z"), utc("2026-01-01T00:00:00Z"));
        let started = Instant::now();
        let all = due(&t, from, now, CatchUp::All);
        let latest = due(&t, from, now, CatchUp::Latest);
        let none = due(&t, from, now, CatchUp::None);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "{zone}: took {took:?}");
        assert_eq!(all.fire.len(), MAX_CATCH_UP);
        assert_eq!(all.fire.last(), Some(&now));
        assert_eq!(
            all.fire[0],
            now - Duration::from_secs(MAX_CATCH_UP as u64 - 1)
        );
        assert_eq!(all.skipped, total - MAX_CATCH_UP);
        assert_eq!(
            (latest.fire.clone(), latest.skipped),
            (vec![now], total - 1)
        );
        // Within the grace: now − 60 s … now, 61 instants.
        assert_eq!(none.fire.len(), 61);
        assert_eq!(none.fire[0], now - MISFIRE_GRACE);
        assert_eq!(none.skipped, total - 61);
        assert_eq!(all.next, Some(now + Duration::from_secs(1)));
    }
}

#[test]
fn due_tail_agrees_with_enumeration_across_a_fall_back() {
    // Minutely in New York over five days including 2026-11-01: more than the
    // enumeration limit, so the counting path is used.
    let schedule = cron("0 * * * * ?", "America/New_York");
    let (from, now) = (utc("2026-10-30T00:00:00Z"), utc("2026-11-04T00:00:00Z"));
    let listed = enumerate(&schedule, from - chrono::TimeDelta::seconds(1), now);
    let d = due(&Trigger::Cron(schedule), from, now, CatchUp::All);
    assert_eq!(listed.len(), 5 * 1_440 + 1);
    assert_eq!(d.fire, listed[listed.len() - MAX_CATCH_UP..]);
    assert_eq!(d.skipped, listed.len() - MAX_CATCH_UP);
}

#[test]
fn due_for_every_is_computed_not_listed() {
    let t = Trigger::Every {
        anchor: utc("2025-01-01T00:00:00Z"),
        period: Duration::from_secs(1),
    };
    let now = utc("2026-01-01T00:00:00Z");
    let d = due(&t, utc("2025-01-01T00:00:01Z"), now, CatchUp::All);
    assert_eq!(d.fire.len(), MAX_CATCH_UP);
    assert_eq!(d.fire.last(), Some(&now));
    assert_eq!(d.skipped, 365 * 86_400 - MAX_CATCH_UP);
    assert_eq!(d.next, Some(now + Duration::from_secs(1)));
    // Sub-second anchor: instants keep its fraction.
    let t = Trigger::Every {
        anchor: utc("2026-01-01T00:00:00.5Z"),
        period: Duration::from_secs(10),
    };
    let d = due(
        &t,
        utc("2026-01-01T00:00:10.5Z"),
        utc("2026-01-01T00:00:31Z"),
        CatchUp::All,
    );
    assert_eq!(
        d.fire,
        [
            utc("2026-01-01T00:00:10.5Z"),
            utc("2026-01-01T00:00:20.5Z"),
            utc("2026-01-01T00:00:30.5Z")
        ]
    );
    assert_eq!(d.next, Some(utc("2026-01-01T00:00:40.5Z")));
}

#[test]
fn due_for_a_missed_one_shot_follows_catch_up() {
    let at = utc("2026-01-01T00:00:00Z");
    let now = utc("2026-01-02T00:00:00Z");
    for t in [Trigger::At(at), Trigger::Delay(at)] {
        assert_eq!(
            due(&t, at, now, CatchUp::Latest),
            Due {
                fire: vec![at],
                skipped: 0,
                next: None
            }
        );
        assert_eq!(
            due(&t, at, now, CatchUp::All),
            Due {
                fire: vec![at],
                skipped: 0,
                next: None
            }
        );
        assert_eq!(
            due(&t, at, now, CatchUp::None),
            Due {
                fire: vec![],
                skipped: 1,
                next: None
            }
        );
        // Noticed on time, even `none` fires it.
        let soon = at + Duration::from_secs(5);
        assert_eq!(due(&t, at, soon, CatchUp::None).fire, [at]);
    }
}

#[test]
fn due_before_next_fire_or_without_a_schedule_fires_nothing() {
    let d = due(
        &hourly(),
        utc("2026-01-01T02:00:00Z"),
        utc("2026-01-01T01:30:00Z"),
        CatchUp::All,
    );
    assert_eq!(
        d,
        Due {
            fire: vec![],
            skipped: 0,
            next: Some(utc("2026-01-01T02:00:00Z"))
        }
    );
    let now = utc("2026-01-01T01:30:00Z");
    assert_eq!(
        due(&Trigger::Manual, now, now, CatchUp::All),
        Due {
            fire: vec![],
            skipped: 0,
            next: None
        }
    );
}

#[test]
fn due_in_the_repeated_hour_fires_fixed_time_once() {
    // Down across the whole fall-back night: 01:30 fired once (05:30Z).
    let t = Trigger::Cron(cron("0 30 1 * * ?", "America/New_York"));
    let d = due(
        &t,
        utc("2026-11-01T05:30:00Z"),
        utc("2026-11-01T08:00:00Z"),
        CatchUp::All,
    );
    assert_eq!(d.fire, [utc("2026-11-01T05:30:00Z")]);
    assert_eq!(d.next, Some(utc("2026-11-02T06:30:00Z")));
}

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
