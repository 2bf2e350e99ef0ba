//! The Quartz dialect: `L`, `W`, `#`, names, the year and seconds fields,
//! and what `next_after` and `upcoming` return.

use super::*;

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
