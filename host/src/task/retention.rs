//! `retention:` of a task: how many finished runs are kept and for how long.
//! The policy and the sweeper that applies it are the scheduler's
//! (`crate::scheduler::retention`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SpecError;

/// Finished runs kept per task unless the task or the config says otherwise.
pub const DEFAULT_KEEP_RUNS: u64 = 1000;
/// How long finished runs are kept unless the task or the config says otherwise.
pub const DEFAULT_KEEP_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most `keep_runs` a task may ask for.
pub const MAX_KEEP_RUNS: u64 = 1_000_000;
/// Shortest `keep_for`.
pub const MIN_KEEP_FOR: Duration = Duration::from_secs(1);

/// `retention:` of a task; absent fields take the server defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSpec {
    /// Newest finished runs kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_runs: Option<u64>,
    /// Finished runs created longer ago than this are deleted (`30d`, `12h`).
    #[serde(
        default,
        with = "crate::schedule::spec::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub keep_for: Option<Duration>,
}

impl RetentionSpec {
    /// Reads `retention:` of a task definition; errors name the field.
    pub fn from_value(value: &serde_json::Value, path: &str) -> Result<Self, SpecError> {
        let spec: RetentionSpec = serde_json::from_value(value.clone()).map_err(|e| {
            SpecError::new(
                path,
                format!("{e}; expected {{keep_runs: N, keep_for: DURATION}}"),
            )
        })?;
        spec.validate(path)?;
        Ok(spec)
    }

    /// Bounds: `keep_runs` 1..=1,000,000, `keep_for` at least 1 s.
    pub fn validate(&self, path: &str) -> Result<(), SpecError> {
        if let Some(n) = self.keep_runs
            && !(1..=MAX_KEEP_RUNS).contains(&n)
        {
            return Err(SpecError::new(
                format!("{path}.keep_runs"),
                format!("{n} is outside 1..={MAX_KEEP_RUNS}"),
            ));
        }
        if let Some(d) = self.keep_for
            && d < MIN_KEEP_FOR
        {
            return Err(SpecError::new(
                format!("{path}.keep_for"),
                format!(
                    "{} is below the minimum of 1s",
                    humantime::format_duration(d)
                ),
            ));
        }
        Ok(())
    }
}
