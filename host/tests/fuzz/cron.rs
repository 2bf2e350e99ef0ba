//! Cron expressions and the next-fire search: `CronSchedule::parse` on
//! expressions put together from Quartz field syntax (and garbage), in a zone
//! from a list of real ones (DST, half-hour, Chatham's 45 minutes, the date
//! line) or a garbage name, then a bounded number of next fires from a random
//! instant. A corpus file is the expression, a newline, the zone.

use std::time::Duration;

use ax::schedule::CronSchedule;
use chrono::{DateTime, Utc};
use proptest::prelude::*;

use crate::strategies::{Text, text};
use crate::{Target, Verdict, explained};

const TARGET: Target = Target {
    name: "cron",
    cases: 2048,
    bound: Duration::from_secs(2),
};

/// Fires asked for per case: enough to cross a DST change or a month end.
const FIRES: usize = 16;

const ZONES: &[&str] = &[
    "UTC",
    "Asia/Shanghai",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "America/St_Johns",
    "Pacific/Apia",
    "Pacific/Kiritimati",
    "Africa/Casablanca",
    "America/Santiago",
    "Antarctica/Troll",
    "Etc/GMT+12",
    "Europe/Dublin",
    "Asia/Tehran",
    "America/Havana",
];

/// Field pieces of the Quartz dialect, valid and not.
const FIELD: &[&str] = &[
    "*", "?", "0", "1", "2", "5", "7", "12", "13", "15", "23", "24", "28", "29", "30", "31", "59",
    "60", "99", "-1", "1970", "2026", "2027", "2099", "2100", "9999", "L", "LW", "W", "15W", "L-3",
    "6L", "6#3", "2#5", "7#1", "#", "/", "-", ",", "0/30", "*/10", "5/0", "1-5", "5-1", "MON",
    "MON-FRI", "SUN", "SAT-MON", "JAN", "JAN,JUL", "DEC-FEB", "FEB", "mon", "1,2,3", "0-59/7",
    "\u{663}",
];

const TOKENS: &[&str] = &[
    " ", "  ", "\t", "*", "?", "L", "W", "#", "/", "-", ",", "0", "9", "MON", "JAN",
];

#[derive(Debug, Clone)]
enum Expr {
    /// 5 to 8 fields of pieces joined by spaces.
    Fields(Vec<Vec<&'static str>>),
    Text(Text),
}

#[derive(Debug, Clone)]
struct Case {
    expr: Expr,
    zone: Result<&'static str, String>,
    /// Seconds since the epoch of the instant to search from.
    from: i64,
}

fn strategy() -> impl Strategy<Value = Case> {
    // Mostly one piece a field (so many expressions parse), sometimes a few.
    let field = || {
        prop_oneof![
            6 => proptest::sample::select(FIELD).prop_map(|f| vec![f]),
            1 => prop::collection::vec(proptest::sample::select(FIELD), 2..4),
        ]
    };
    // Fields by position, each from pieces meant for it (with a chance of any
    // piece), so that most expressions parse and the search runs.
    let at = |pieces: &'static [&'static str]| {
        prop_oneof![
            20 => proptest::sample::select(pieces).prop_map(|p| vec![p]),
            1 => field(),
        ]
    };
    let positional = (
        at(&["0", "30", "*/10", "0/15", "5-10", "59", "*"]),
        at(&["0", "30", "0/30", "*/7", "15,45", "*", "59"]),
        at(&["1", "2", "9", "0", "23", "*", "*/2", "1,13", "2-4"]),
        at(&[
            "*", "?", "1", "15", "L", "L-3", "LW", "15W", "29", "31", "1-7",
        ]),
        at(&["*", "1", "2", "JAN,JUL", "DEC", "FEB", "2-11/3", "NOV-FEB"]),
        at(&["?", "*", "MON-FRI", "6#3", "2#5", "6L", "SUN", "1", "7"]),
        proptest::option::of(at(&[
            "2026",
            "2027",
            "2026-2030",
            "*",
            "2099",
            "1970-2100/7",
        ])),
    )
        .prop_flat_map(|fields| (Just(fields), 0..3u8))
        .prop_map(|((s, m, h, dom, mon, dow, year), free)| {
            // Quartz refuses a day-of-month and a day-of-week that both
            // restrict: mostly one of them is left open.
            let (dom, dow) = match free {
                0 => (dom, vec!["?"]),
                1 => (vec!["?"], dow),
                _ => (dom, dow),
            };
            let mut fields = vec![s, m, h, dom, mon, dow];
            fields.extend(year);
            fields
        });
    let expr = prop_oneof![
        4 => positional.prop_map(Expr::Fields),
        1 => prop::collection::vec(field(), 5..=8).prop_map(Expr::Fields),
        1 => text(TOKENS).prop_map(Expr::Text),
    ];
    let zone = prop_oneof![
        6 => proptest::sample::select(ZONES).prop_map(Ok),
        1 => "\\PC{0,24}".prop_map(Err),
    ];
    let from = prop_oneof![
        // Around now, where tasks live.
        4 => 1_700_000_000i64..2_100_000_000,
        // Any representable year.
        1 => -62_135_596_800i64..253_402_300_799,
        1 => Just(253_402_300_799i64),
        1 => Just(-62_135_596_800i64),
    ];
    (expr, zone, from).prop_map(|(expr, zone, from)| Case { expr, zone, from })
}

fn check(expr: &str, zone: &str, from: DateTime<Utc>) -> Verdict {
    let schedule = match CronSchedule::parse(expr, zone) {
        Ok(s) => s,
        Err(e) => {
            crate::tally("refused");
            return explained("CronSchedule::parse", e.to_string());
        }
    };
    crate::tally("parsed");
    let fires = schedule.upcoming(from, FIRES);
    if fires.is_empty() {
        crate::tally("no fire");
    }
    let mut last = from;
    for fire in fires {
        if fire <= last {
            return Err(format!(
                "`{expr}` in {zone}: fire {fire} is not after {last} (from {from})"
            ));
        }
        last = fire;
    }
    Ok(())
}

fn corpus_case(bytes: &[u8]) -> Verdict {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines();
    let expr = lines.next().unwrap_or("");
    let zone = lines.next().unwrap_or("UTC");
    check(
        expr,
        zone,
        DateTime::from_timestamp(1_780_000_000, 0).expect("in range"),
    )
}

#[test]
fn fuzz() {
    let corpus: Vec<Vec<u8>> = crate::corpus(TARGET.name)
        .into_iter()
        .map(|(_, b)| b.split(|&c| c == b'\n').next().unwrap_or(&[]).to_vec())
        .collect();
    crate::run(&TARGET, corpus_case, strategy(), |case| {
        let expr = match &case.expr {
            Expr::Fields(fields) => fields
                .iter()
                .map(|f| f.concat())
                .collect::<Vec<_>>()
                .join(" "),
            Expr::Text(t) => t.render(&corpus),
        };
        let zone = match &case.zone {
            Ok(z) => *z,
            Err(garbage) => garbage.as_str(),
        };
        let from = DateTime::from_timestamp(case.from, 0).expect("the strategy stays in range");
        check(&expr, zone, from)
    });
}
