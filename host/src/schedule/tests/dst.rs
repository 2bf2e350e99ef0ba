//! Daylight saving: a cron time that falls in a gap fires once after it,
//! one that is repeated fires once on the first pass (intervals keep real
//! spacing across both), checked by hand in the test zones and against the
//! rules computed straight from chrono-tz around every transition.

use super::*;

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
