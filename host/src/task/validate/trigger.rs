//! The checks of a task's `trigger`: one kind only; `timezone` only with
//! `cron`; a cron expression's field count (Quartz style, seconds first); the
//! shape of a zone name; `at` as an RFC 3339 instant between
//! [`MIN_AT_MS`] and [`MAX_AT_MS`]; `delay` and `every` bounds; the `after`
//! names. Compiling the cron expression and the zone is `schedule`'s work.

use std::time::Duration;

use super::name_error;
use crate::model::name::{MAX_NAME_LEN, is_valid_name};
use crate::schedule::TriggerSpec;
use crate::task::error::{Result, SpecError};
use crate::task::{MAX_AT_MS, MIN_AT_MS, MIN_EVERY, utc};
use crate::template::shorten;

/// The trigger of the task named `task` (which its `after` may not list).
pub(super) fn validate_trigger(t: &TriggerSpec, task: &str) -> Result<()> {
    let kinds: Vec<&str> = [
        ("cron", t.cron.is_some()),
        ("at", t.at.is_some()),
        ("delay", t.delay.is_some()),
        ("every", t.every.is_some()),
        ("after", !t.after.is_empty()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if kinds.len() > 1 {
        return Err(SpecError::new(
            "trigger",
            format!(
                "set only one of cron, at, delay, every, after (found {})",
                kinds.join(" and ")
            ),
        ));
    }
    // As `schedule::Trigger::compile` rules: the zone is read by `cron` only.
    if t.timezone.is_some() && t.cron.is_none() {
        return Err(SpecError::new(
            "trigger.timezone",
            "`timezone` applies only to `cron`; remove it or add a `cron` expression",
        ));
    }
    if let Some(cron) = &t.cron {
        let fields: Vec<&str> = cron.split_whitespace().collect();
        match fields.len() {
            6 | 7 => {}
            0 => return Err(SpecError::new("trigger.cron", "is empty")),
            5 => {
                return Err(SpecError::new(
                    "trigger.cron",
                    format!(
                        "`{cron}` has 5 fields; ax cron is Quartz style with seconds first: \
                         write `0 {}` to fire at second 0",
                        fields.join(" ")
                    ),
                ));
            }
            n => {
                return Err(SpecError::new(
                    "trigger.cron",
                    format!(
                        "`{}` has {n} fields; write 6 or 7, seconds first (like `0 30 1 * * ?`)",
                        shorten(cron)
                    ),
                ));
            }
        }
    }
    if let Some(zone) = &t.timezone {
        let ok = !zone.is_empty()
            && zone.len() <= MAX_NAME_LEN
            && zone
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'));
        if !ok {
            return Err(SpecError::new(
                "trigger.timezone",
                format!(
                    "`{}` is not an IANA time zone name (like Asia/Shanghai or UTC)",
                    shorten(zone)
                ),
            ));
        }
    }
    if let Some(at) = &t.at {
        let Ok(instant) = chrono::DateTime::parse_from_rfc3339(at.trim()) else {
            return Err(SpecError::new(
                "trigger.at",
                format!(
                    "`{}` is not an RFC 3339 instant with an offset (like 2026-12-01T23:00:00+08:00)",
                    shorten(at)
                ),
            ));
        };
        if !(MIN_AT_MS..=MAX_AT_MS).contains(&instant.timestamp_millis()) {
            return Err(SpecError::new(
                "trigger.at",
                format!(
                    "`{}` is outside {}..={} (UTC)",
                    shorten(at),
                    utc(MIN_AT_MS),
                    utc(MAX_AT_MS)
                ),
            ));
        }
    }
    if t.delay == Some(Duration::ZERO) {
        return Err(SpecError::new("trigger.delay", "must be longer than 0s"));
    }
    if let Some(every) = t.every
        && every < MIN_EVERY
    {
        return Err(SpecError::new(
            "trigger.every",
            format!(
                "{} is shorter than the minimum of 1s",
                humantime::format_duration(every)
            ),
        ));
    }
    for (i, other) in t.after.iter().enumerate() {
        let path = format!("trigger.after[{i}]");
        if !is_valid_name(other) {
            return Err(name_error(&path, "task", other));
        }
        if other == task {
            return Err(SpecError::new(path, "a task cannot fire after itself"));
        }
        if t.after[..i].contains(other) {
            return Err(SpecError::new(path, format!("`{other}` is listed twice")));
        }
    }
    if t.on.is_some() && t.after.is_empty() {
        return Err(SpecError::new(
            "trigger.on",
            "`on` only applies to an `after` trigger",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::schedule::AfterOn;
    use crate::task::load;
    use crate::task::test_support::{CAPS, err_of, secs};

    #[test]
    fn trigger_kinds_are_checked() {
        let with = |trigger: &str| format!("name: t\nplugin: p@1.0.0\ntrigger: {trigger}\n");
        let cases = [
            (
                "{cron: '0 0 1 * * ?', every: 5m}",
                "trigger",
                "set only one of cron, at, delay, every, after (found cron and every)",
            ),
            (
                "{cron: '0 2 * * *'}",
                "trigger.cron",
                "`0 2 * * *` has 5 fields; ax cron is Quartz style with seconds first: write `0 0 2 * * *` to fire at second 0",
            ),
            (
                "{cron: '* *'}",
                "trigger.cron",
                "`* *` has 2 fields; write 6 or 7, seconds first (like `0 30 1 * * ?`)",
            ),
            ("{cron: ' '}", "trigger.cron", "is empty"),
            (
                "{cron: '0 0 1 * * ?', timezone: 'Mars Base'}",
                "trigger.timezone",
                "`Mars Base` is not an IANA time zone name (like Asia/Shanghai or UTC)",
            ),
            (
                "{at: '2026-12-01 23:00'}",
                "trigger.at",
                "`2026-12-01 23:00` is not an RFC 3339 instant with an offset (like 2026-12-01T23:00:00+08:00)",
            ),
            (
                "{at: '0000-01-01T00:00:00Z'}",
                "trigger.at",
                "`0000-01-01T00:00:00Z` is outside 1970-01-01T00:00:00.000Z..=9999-12-31T23:59:59.999Z (UTC)",
            ),
            (
                "{at: '1969-12-31T23:59:59.999Z'}",
                "trigger.at",
                "`1969-12-31T23:59:59.999Z` is outside 1970-01-01T00:00:00.000Z..=9999-12-31T23:59:59.999Z (UTC)",
            ),
            (
                "{at: '9999-12-31T23:00:00-02:00'}",
                "trigger.at",
                "`9999-12-31T23:00:00-02:00` is outside 1970-01-01T00:00:00.000Z..=9999-12-31T23:59:59.999Z (UTC)",
            ),
            ("{delay: 0s}", "trigger.delay", "must be longer than 0s"),
            (
                "{timezone: UTC}",
                "trigger.timezone",
                "`timezone` applies only to `cron`; remove it or add a `cron` expression",
            ),
            (
                "{every: 5m, timezone: UTC}",
                "trigger.timezone",
                "`timezone` applies only to `cron`; remove it or add a `cron` expression",
            ),
            (
                "{every: 500ms}",
                "trigger.every",
                "500ms is shorter than the minimum of 1s",
            ),
            (
                "{after: [t]}",
                "trigger.after[0]",
                "a task cannot fire after itself",
            ),
            (
                "{after: [x, 'bad name']}",
                "trigger.after[1]",
                "`bad name` is not a valid task name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters",
            ),
            ("{after: [x, x]}", "trigger.after[1]", "`x` is listed twice"),
            (
                "{every: 5m, on: success}",
                "trigger.on",
                "`on` only applies to an `after` trigger",
            ),
            (
                "{after: [x], on: maybe}",
                "trigger.on",
                "unknown value `maybe`, expected one of `success`, `failure`, `done`",
            ),
            (
                "{cron: 5}",
                "trigger.cron",
                "invalid type: integer `5`, expected a string",
            ),
        ];
        for (trigger, path, message) in cases {
            let (p, m) = err_of(&with(trigger));
            assert_eq!((p.as_str(), m.as_str()), (path, message), "for {trigger}");
        }
    }

    #[test]
    fn every_trigger_kind_is_accepted() {
        let with = |trigger: &str| {
            load(
                &format!("name: t\nplugin: p@1.0.0\ntrigger: {trigger}\n"),
                &CAPS,
            )
            .unwrap()
        };
        let t = with("{cron: '0 0 2 * * ? 2027', timezone: America/New_York}")
            .trigger
            .unwrap();
        assert_eq!(t.timezone.as_deref(), Some("America/New_York"));
        let t = with("{at: '2026-12-01T23:00:00+08:00'}").trigger.unwrap();
        assert_eq!(t.at.as_deref(), Some("2026-12-01T23:00:00+08:00"));
        assert_eq!(
            with("{delay: 30m}").trigger.unwrap().delay,
            Some(secs(1800))
        );
        assert_eq!(with("{every: 5m}").trigger.unwrap().every, Some(secs(300)));
        let t = with("{after: [other_task, b], on: failure}")
            .trigger
            .unwrap();
        assert_eq!(t.after, ["other_task", "b"]);
        assert_eq!(t.on, Some(AfterOn::Failure));
    }
}
