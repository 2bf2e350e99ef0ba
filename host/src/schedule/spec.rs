//! The `trigger:` block of a task definition, as written by users, and the
//! firing policies (`catch_up`, `overlap`). Plain serde data; compiling it into
//! something that computes fire instants is [`super::Trigger::compile`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When a task fires. Exactly one of `cron`, `at`, `delay`, `every`, `after`
/// may be set; none means manual/API only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    /// Quartz-style cron, 6 or 7 fields, seconds first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// IANA zone for `cron` (and for `${bizDate}`); default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// One-shot instant, RFC 3339 with an offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Fire once, this long after the task was created (`30m`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_duration"
    )]
    pub delay: Option<Duration>,
    /// Fire every interval, anchored at the task's creation (`5m`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_duration"
    )]
    pub every: Option<Duration>,
    /// Fire when any of these tasks' runs finish.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// With `after`: which upstream results fire this task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<AfterOn>,
}

/// Which finished upstream runs fire an `after` trigger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterOn {
    /// Only succeeded runs.
    #[default]
    Success,
    /// Only failed runs.
    Failure,
    /// Any terminal run.
    Done,
}

/// What to do about fire instants missed while ax was down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Run once for the most recent missed instant.
    #[default]
    Latest,
    /// Skip every missed instant.
    None,
    /// Run every missed instant (bounded by [`super::MAX_CATCH_UP`]).
    All,
}

/// What to do when a fire comes while the previous run is still active.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Do not start a new run (the fire is recorded as skipped).
    #[default]
    Skip,
    /// Keep at most one run waiting behind the active one.
    QueueOne,
    /// Start runs regardless.
    Allow,
}

/// Durations as people write them (`30s`, `5m`, `1h30m`).
pub mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `Some(d)` as humantime text.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    /// Reads humantime text (`30s`, `2m`).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| {
            humantime::parse_duration(&t).map_err(|e| {
                serde::de::Error::custom(format!("`{t}` is not a duration ({e}); try 30s, 5m, 1h"))
            })
        })
        .transpose()
    }
}
