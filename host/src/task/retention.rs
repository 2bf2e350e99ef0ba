//! `retention:` of a task: how many finished runs are kept and for how long,
//! and how long its idempotency keys are remembered (`idempotency_ttl`):
//! a key outlives its run, so a client retrying a trigger after the run aged
//! out of history still gets the original run's id, not a second run.
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
/// How long idempotency keys are remembered unless the task or the config
/// says otherwise: 7 days (payment APIs keep theirs 24 hours to 30 days).
pub const DEFAULT_IDEMPOTENCY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Shortest `idempotency_ttl`.
pub const MIN_IDEMPOTENCY_TTL: Duration = Duration::from_secs(1);
/// Longest `idempotency_ttl`: a year. Keys take store space (about 200
/// bytes each) for as long as they are remembered.
pub const MAX_IDEMPOTENCY_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

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
    /// How long a run's idempotency key answers with that run (`7d`), from
    /// the run's creation, whether or not the run is still kept.
    #[serde(
        default,
        with = "crate::schedule::spec::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub idempotency_ttl: Option<Duration>,
}

impl RetentionSpec {
    /// Reads `retention:` of a task definition; errors name the field.
    pub fn from_value(value: &serde_json::Value, path: &str) -> Result<Self, SpecError> {
        let spec: RetentionSpec = serde_json::from_value(value.clone()).map_err(|e| {
            SpecError::new(
                path,
                format!(
                    "{e}; expected {{keep_runs: N, keep_for: DURATION, idempotency_ttl: DURATION}}"
                ),
            )
        })?;
        spec.validate(path)?;
        Ok(spec)
    }

    /// Bounds: `keep_runs` 1..=1,000,000, `keep_for` at least 1 s,
    /// `idempotency_ttl` 1 s to a year.
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
        if let Some(d) = self.idempotency_ttl {
            check_idempotency_ttl(d)
                .map_err(|m| SpecError::new(format!("{path}.idempotency_ttl"), m))?;
        }
        Ok(())
    }
}

/// The bounds of an `idempotency_ttl` (a task's, or the server default):
/// [`MIN_IDEMPOTENCY_TTL`] to [`MAX_IDEMPOTENCY_TTL`].
pub fn check_idempotency_ttl(d: Duration) -> Result<(), String> {
    if (MIN_IDEMPOTENCY_TTL..=MAX_IDEMPOTENCY_TTL).contains(&d) {
        return Ok(());
    }
    Err(format!(
        "{} is outside {}..={}",
        humantime::format_duration(d),
        humantime::format_duration(MIN_IDEMPOTENCY_TTL),
        humantime::format_duration(MAX_IDEMPOTENCY_TTL)
    ))
}
