//! `alerts:` of a task or a tenant: where webhook alerts go and on which
//! events. Reading and validating the spec lives here with the task; where a
//! webhook may point and the delivery are the alert worker's
//! (`crate::scheduler::alerts`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SpecError;
use crate::capability::http::Destination;

/// The seeds' lateness threshold.
pub const DEFAULT_LATE_AFTER: Duration = Duration::from_secs(5);
/// Longest webhook URL accepted.
const MAX_URL_LEN: usize = 2048;

/// What an alert is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlertOn {
    /// A run ended `failed`.
    Failed,
    /// A step exhausted its retries.
    DeadLetter,
    /// A timed run's first attempt started more than `late_after` after its instant.
    Late,
}

/// `alerts:` of a task (or of a tenant in the server config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertSpec {
    /// Where to POST (http or https).
    pub webhook: String,
    /// Which events; default all.
    #[serde(default = "all_events")]
    pub on: Vec<AlertOn>,
    /// Lateness past which `late` fires; default 5 s.
    #[serde(
        default,
        with = "crate::schedule::spec::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, example = "5s")]
    pub late_after: Option<Duration>,
}

/// Every event: what `on` means when left out.
pub fn all_events() -> Vec<AlertOn> {
    vec![AlertOn::Failed, AlertOn::DeadLetter, AlertOn::Late]
}

impl AlertSpec {
    /// Reads `alerts:` of a task definition; errors name the field.
    pub fn from_value(value: &serde_json::Value, path: &str) -> Result<Self, SpecError> {
        let spec: AlertSpec = serde_json::from_value(value.clone()).map_err(|e| {
            SpecError::new(
                path,
                format!(
                    "{e}; expected {{webhook: URL, on: [failed, dead_letter, late], late_after: DURATION}}"
                ),
            )
        })?;
        spec.validate(path)?;
        Ok(spec)
    }

    /// An http(s) URL with a host (the destination grammar of
    /// [`Destination::from_url`]); `on` not empty, no repeats; `late_after` ≥ 1 ms.
    /// Where the URL may point is `check_webhook`'s business (in the scheduler's alert worker).
    pub fn validate(&self, path: &str) -> Result<(), SpecError> {
        let url = self.webhook.as_str();
        let bad = |why: String| {
            SpecError::new(
                format!("{path}.webhook"),
                format!(
                    "`{}` is not an http:// or https:// URL with a host: {why}",
                    crate::template::shorten(url)
                ),
            )
        };
        if url.len() > MAX_URL_LEN {
            return Err(bad(format!("longer than {MAX_URL_LEN} bytes")));
        }
        if url.chars().any(char::is_whitespace) {
            return Err(bad("it contains white space".into()));
        }
        Destination::from_url(url).map_err(bad)?;
        if self.on.is_empty() {
            return Err(SpecError::new(
                format!("{path}.on"),
                "list at least one of failed, dead_letter, late",
            ));
        }
        for (i, e) in self.on.iter().enumerate() {
            if self.on[..i].contains(e) {
                return Err(SpecError::new(
                    format!("{path}.on[{i}]"),
                    "listed twice".to_string(),
                ));
            }
        }
        if self.late_after.is_some_and(|d| d.is_zero()) {
            return Err(SpecError::new(
                format!("{path}.late_after"),
                "must be above 0",
            ));
        }
        Ok(())
    }

    /// Whether this spec asks for `event`.
    pub fn wants(&self, event: AlertOn) -> bool {
        self.on.contains(&event)
    }

    /// The lateness threshold, default [`DEFAULT_LATE_AFTER`].
    pub fn late_after(&self) -> Duration {
        self.late_after.unwrap_or(DEFAULT_LATE_AFTER)
    }
}
