//! Stored instants (milliseconds since the Unix epoch, UTC) as calendar time
//! and as the RFC 3339 text every API, alert and log line shows.

use chrono::{DateTime, TimeZone, Utc};

use super::Millis;

/// Converts stored milliseconds to an instant (clamped to the representable range).
pub fn from_ms(ms: Millis) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// RFC 3339 with milliseconds, UTC (`2026-12-01T01:30:00.000Z`).
pub fn rfc3339(ms: Millis) -> String {
    from_ms(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
