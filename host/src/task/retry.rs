//! The retry policy of a step: whether an ended attempt is tried again
//! ([`RetryPolicy::should_retry`]) and how long to wait first
//! ([`RetryPolicy::delay`]: a list of waits, or an exponential backoff with
//! optional jitter). Pure: the scheduler passes the attempt number, the
//! outcome and a random number generator.

use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::types::duration_text;
use crate::model::{ErrorKind, Outcome};

/// How a step's failed attempts are retried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetryPolicy {
    /// Total attempts allowed, the first included: 1 (the default) means no retry.
    pub max_attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
    /// Outcomes retried in addition to the default set (see [`RetryPolicy::should_retry`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retry_on: Vec<RetryOn>,
}

/// The wait before each retry.
#[derive(Clone, Debug, PartialEq)]
pub enum Backoff {
    /// Fixed waits, one per retry; the last repeats (`[10s, 30s, 2m]`). No jitter.
    List(Vec<Duration>),
    /// `initial × factor^(n-1)`, capped at `max`, optionally jittered.
    Exponential(Exponential),
}

/// Parameters of an exponential backoff.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Exponential {
    /// The wait before the first retry (before jitter).
    #[serde(serialize_with = "duration_text::plain")]
    pub initial: Duration,
    /// The cap on any wait.
    #[serde(serialize_with = "duration_text::plain")]
    pub max: Duration,
    /// Growth per retry, 1.0..=10.0.
    pub factor: f64,
    /// Equal jitter: the wait is drawn uniformly from `[d/2, d]`.
    pub jitter: bool,
}

/// Outcomes that are not retried unless a policy lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// `failed` with an error the plugin marked `fatal`.
    Fatal,
    /// `fuel_exhausted`.
    FuelExhausted,
    /// `memory_exceeded`.
    MemoryExceeded,
    /// `output_too_large`.
    OutputTooLarge,
}

impl Default for Exponential {
    /// 1s, doubling, capped at 5m, jittered.
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
            factor: 2.0,
            jitter: true,
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::Exponential(Exponential::default())
    }
}

impl Default for RetryPolicy {
    /// One attempt (no retry), default exponential backoff.
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff: Backoff::default(),
            retry_on: Vec::new(),
        }
    }
}

impl RetryPolicy {
    /// Whether to try again after attempt number `attempt` (from 1) ended with
    /// `outcome` (and, for `failed`, the error kind the plugin gave).
    ///
    /// Never once `attempt >= max_attempts`, never after `succeeded` or
    /// `cancelled`. Retried by default: `failed` with a retryable error (or no
    /// kind), `trapped`, `timed_out`, `lost`. Retried only when listed in
    /// `retry_on`: `failed` + `fatal`, `fuel_exhausted`, `memory_exceeded`,
    /// `output_too_large` — the same input will almost surely fail the same way.
    ///
    /// `lost` counts like any attempt here; a scheduler that does not charge
    /// attempts lost to host crashes passes the number of attempts not lost.
    pub fn should_retry(&self, attempt: u32, outcome: Outcome, kind: Option<ErrorKind>) -> bool {
        if attempt >= self.max_attempts {
            return false;
        }
        let opted = |r: RetryOn| self.retry_on.contains(&r);
        match outcome {
            Outcome::Succeeded | Outcome::Cancelled => false,
            Outcome::Failed => match kind {
                Some(ErrorKind::Fatal) => opted(RetryOn::Fatal),
                Some(ErrorKind::Retryable) | None => true,
            },
            Outcome::Trapped | Outcome::TimedOut | Outcome::Lost => true,
            Outcome::FuelExhausted => opted(RetryOn::FuelExhausted),
            Outcome::MemoryExceeded => opted(RetryOn::MemoryExceeded),
            Outcome::OutputTooLarge => opted(RetryOn::OutputTooLarge),
        }
    }

    /// The wait before attempt `attempt + 1`, after attempt `attempt` (from 1;
    /// 0 is read as 1) failed.
    ///
    /// A list gives its `attempt`-th entry, the last one repeating (an empty
    /// list, refused on save, waits zero). Exponential gives
    /// `d = min(initial × factor^(attempt-1), max)`; with jitter the wait is
    /// drawn uniformly from `[d/2, d]` ("equal jitter": spreads retries of many
    /// runs apart while never waiting less than half the nominal delay).
    pub fn delay(&self, attempt: u32, rng: &mut impl rand::Rng) -> Duration {
        let n = attempt.max(1);
        match &self.backoff {
            Backoff::List(waits) => {
                let i = usize::try_from(n - 1)
                    .unwrap_or(usize::MAX)
                    .min(waits.len().saturating_sub(1));
                waits.get(i).copied().unwrap_or(Duration::ZERO)
            }
            Backoff::Exponential(e) => {
                let cap = e.max.as_secs_f64();
                let exponent = i32::try_from(n - 1).unwrap_or(i32::MAX);
                let nominal = e.initial.as_secs_f64() * e.factor.powi(exponent);
                // NaN (a bad factor) or overflow both end at the cap.
                let secs = if nominal.is_finite() {
                    nominal.min(cap)
                } else {
                    cap
                };
                let secs = if e.jitter {
                    secs / 2.0 + rng.random::<f64>() * (secs / 2.0)
                } else {
                    secs
                };
                Duration::try_from_secs_f64(secs.max(0.0))
                    .unwrap_or(e.max)
                    .min(e.max)
            }
        }
    }
}

impl Serialize for Backoff {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Backoff::List(waits) => {
                let mut seq = s.serialize_seq(Some(waits.len()))?;
                for w in waits {
                    seq.serialize_element(&humantime::format_duration(*w).to_string())?;
                }
                seq.end()
            }
            Backoff::Exponential(e) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("exponential", e)?;
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::task::test_support::secs;

    fn policy(max_attempts: u32, retry_on: &[RetryOn]) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            retry_on: retry_on.to_vec(),
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn default_retry_decision_for_every_outcome() {
        let p = policy(3, &[]);
        let expected = |o: Outcome| match o {
            Outcome::Succeeded | Outcome::Cancelled => false,
            Outcome::Failed | Outcome::Trapped | Outcome::TimedOut | Outcome::Lost => true,
            Outcome::FuelExhausted | Outcome::MemoryExceeded | Outcome::OutputTooLarge => false,
        };
        for outcome in Outcome::ALL {
            assert_eq!(
                p.should_retry(1, outcome, None),
                expected(outcome),
                "{outcome}"
            );
        }
        assert!(p.should_retry(1, Outcome::Failed, Some(ErrorKind::Retryable)));
        assert!(!p.should_retry(1, Outcome::Failed, Some(ErrorKind::Fatal)));
    }

    #[test]
    fn retry_on_opts_in_each_listed_outcome_only() {
        let p = policy(
            3,
            &[
                RetryOn::Fatal,
                RetryOn::FuelExhausted,
                RetryOn::MemoryExceeded,
                RetryOn::OutputTooLarge,
            ],
        );
        for outcome in Outcome::ALL {
            let want = !matches!(outcome, Outcome::Succeeded | Outcome::Cancelled);
            assert_eq!(
                p.should_retry(2, outcome, Some(ErrorKind::Fatal)),
                want,
                "{outcome}"
            );
        }
        let fuel_only = policy(3, &[RetryOn::FuelExhausted]);
        assert!(fuel_only.should_retry(1, Outcome::FuelExhausted, None));
        assert!(!fuel_only.should_retry(1, Outcome::MemoryExceeded, None));
        assert!(!fuel_only.should_retry(1, Outcome::OutputTooLarge, None));
        assert!(!fuel_only.should_retry(1, Outcome::Failed, Some(ErrorKind::Fatal)));
    }

    #[test]
    fn no_retry_once_attempts_are_used_up() {
        let p = policy(3, &[RetryOn::Fatal]);
        for outcome in Outcome::ALL {
            assert!(
                !p.should_retry(3, outcome, Some(ErrorKind::Retryable)),
                "{outcome}"
            );
            assert!(!p.should_retry(4, outcome, None), "{outcome}");
        }
        assert!(p.should_retry(2, Outcome::Trapped, None));
        let once = RetryPolicy::default();
        for outcome in Outcome::ALL {
            assert!(
                !once.should_retry(1, outcome, Some(ErrorKind::Retryable)),
                "default policy never retries {outcome}"
            );
        }
    }

    #[test]
    fn backoff_list_repeats_its_last_entry() {
        let p = RetryPolicy {
            max_attempts: 10,
            backoff: Backoff::List(vec![secs(10), secs(30), secs(120)]),
            retry_on: vec![],
        };
        let mut rng = StdRng::seed_from_u64(1);
        let waits: Vec<u64> = (0..=6).map(|a| p.delay(a, &mut rng).as_secs()).collect();
        assert_eq!(waits, [10, 10, 30, 120, 120, 120, 120]);
        assert_eq!(p.delay(u32::MAX, &mut rng), secs(120));
        let empty = RetryPolicy {
            backoff: Backoff::List(vec![]),
            ..p
        };
        assert_eq!(empty.delay(1, &mut rng), Duration::ZERO);
    }

    #[test]
    fn exponential_backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_attempts: 100,
            backoff: Backoff::Exponential(Exponential {
                jitter: false,
                ..Exponential::default()
            }),
            retry_on: vec![],
        };
        let mut rng = StdRng::seed_from_u64(2);
        let waits: Vec<u64> = (1..=11).map(|a| p.delay(a, &mut rng).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(
            p.delay(u32::MAX, &mut rng),
            secs(300),
            "no overflow far out"
        );
        let fractional = RetryPolicy {
            backoff: Backoff::Exponential(Exponential {
                initial: Duration::from_millis(100),
                max: secs(10),
                factor: 1.5,
                jitter: false,
            }),
            ..p
        };
        assert_eq!(fractional.delay(3, &mut rng), Duration::from_millis(225));
    }

    #[test]
    fn exponential_jitter_stays_within_half_to_full_delay() {
        let p = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(3);
        for attempt in 1..=12u32 {
            let nominal = (2f64.powi(attempt as i32 - 1)).min(300.0);
            let samples: Vec<f64> = (0..200)
                .map(|_| p.delay(attempt, &mut rng).as_secs_f64())
                .collect();
            for s in &samples {
                assert!(
                    *s >= nominal / 2.0 - 1e-9 && *s <= nominal + 1e-9,
                    "attempt {attempt}: {s} outside [{}, {nominal}]",
                    nominal / 2.0
                );
            }
            let spread = samples.iter().cloned().fold(f64::MIN, f64::max)
                - samples.iter().cloned().fold(f64::MAX, f64::min);
            assert!(
                spread > nominal / 4.0,
                "attempt {attempt}: jitter should spread waits, spread {spread}"
            );
        }
    }

    #[test]
    fn jitter_is_reproducible_with_a_seeded_rng() {
        let p = RetryPolicy::default();
        let a: Vec<Duration> = (1..6)
            .map(|n| p.delay(n, &mut StdRng::seed_from_u64(9)))
            .collect();
        let b: Vec<Duration> = (1..6)
            .map(|n| p.delay(n, &mut StdRng::seed_from_u64(9)))
            .collect();
        assert_eq!(a, b);
    }
}
