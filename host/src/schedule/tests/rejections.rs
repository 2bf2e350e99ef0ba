//! Cron expressions and zones that are refused, with the message each gets.

use super::*;

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
