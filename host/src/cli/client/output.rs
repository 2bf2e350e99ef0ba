//! Printing for people: one-line cells made terminal-safe, tables cut to the
//! terminal, instants and durations, and the server's JSON for `--json`.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::cli::term::{Layout, safe};

/// The elements of a JSON array (none for anything else).
pub(super) fn items(v: &Value) -> std::slice::Iter<'_, Value> {
    v.as_array().map(Vec::as_slice).unwrap_or_default().iter()
}

pub(super) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// A value for people, on one line: strings as they are, null as `-`,
/// other JSON compactly; made terminal-safe ([`crate::cli::term::safe`]).
pub(super) fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => safe(s, Layout::Line).into_owned(),
        // JSON text escapes C0 controls but not DEL, C1 or bidi characters.
        other => safe(&other.to_string(), Layout::Line).into_owned(),
    }
}

/// Columns padded to their widest cell, two spaces apart, cut to the
/// terminal's width (see [`crate::cli::term`]).
pub(super) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    crate::cli::term::table(headers, rows, crate::cli::term::table_width())
}

pub(super) fn instant(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// `1.25s`, `340ms`, `2m05s`, `8h38m`.
pub(super) fn human_ms(ms: f64) -> String {
    let secs = (ms / 1000.0).round() as u64;
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else if ms < 60_000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

pub(super) fn elapsed(start: &Value, end: &Value) -> String {
    match (instant(start), instant(end)) {
        (Some(a), Some(b)) => human_ms((b - a).num_milliseconds() as f64),
        _ => "-".into(),
    }
}

pub(super) fn short_digest(d: &Value) -> String {
    d.as_str()
        .map_or_else(|| "-".into(), |d| d.chars().take(12).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_ms(340.0), "340ms");
        assert_eq!(human_ms(1250.0), "1.25s");
        assert_eq!(human_ms(125_000.0), "2m05s");
        assert_eq!(human_ms(31_125_000.0), "8h38m");
    }
}
