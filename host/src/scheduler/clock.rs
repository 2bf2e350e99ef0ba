//! Time as the scheduler sees it. Production uses the system clock; tests use
//! [`TokioClock`], whose wall time advances with tokio's (pausable) clock, so
//! firing, backoff and catch-up are tested without real sleeps.

use chrono::{DateTime, TimeZone, Utc};

use crate::model::Millis;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;

    /// Now, as stored (ms since the epoch).
    fn now_ms(&self) -> Millis {
        self.now().timestamp_millis()
    }
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Wall time = `start` + time elapsed on tokio's clock. Under
/// `tokio::time::pause()` it only moves when the test advances it.
#[derive(Clone, Debug)]
pub struct TokioClock {
    start: DateTime<Utc>,
    base: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `start` now.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Self {
            start,
            base: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = tokio::time::Instant::now() - self.base;
        self.start + chrono::Duration::from_std(elapsed).unwrap_or_default()
    }
}

/// Converts stored milliseconds to an instant (clamped to the representable range).
pub fn from_ms(ms: Millis) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// RFC 3339 with milliseconds, UTC (`2026-12-01T01:30:00.000Z`).
pub fn rfc3339(ms: Millis) -> String {
    from_ms(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
