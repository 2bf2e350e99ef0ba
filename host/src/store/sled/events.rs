//! A run's events as sled stores them: one value per write of the run
//! (`ev/{run}/{seq:020}`), holding the events of that write in order.
//!
//! Since store format 6 the list is compact: the format byte
//! [`COMPACT_EVENTS`], then the events in postcard (lengths and integers as
//! varints, no field names), each without its run id, which the key holds.
//! A one-step run's six events take ~320 B instead of ~1,000 B of JSON
//! (docs/PERFORMANCE.md, *Compact events*). Stores of earlier formats hold
//! JSON, a list per write or (before lists) one event per key; those are
//! read as they are and never rewritten, so the upgrade to format 6 rewrites
//! nothing (old runs keep their JSON events until retention deletes them).
//!
//! The encoding has no field names: a field added to [`Event`] is a compile
//! error in [`encode`] until it is stored, and storing it needs a new format
//! byte (postcard cannot tell a list of the old shape from the new).

use serde::{Deserialize, Serialize};

use super::keys::{VALUE_FORMAT, decode, show_key};
use crate::model::{Event, Millis};
use crate::store::{Error, Result};

/// First byte of a compact event list (JSON values start with
/// [`VALUE_FORMAT`]).
pub(super) const COMPACT_EVENTS: u8 = 2;

/// One event as stored: [`Event`] without its run id.
#[derive(Serialize)]
struct Stored<'a> {
    step: Option<&'a str>,
    attempt: Option<u32>,
    from: Option<&'a str>,
    to: &'a str,
    at: Millis,
    reason: &'a str,
    actor: &'a str,
}

/// [`Stored`], read back.
#[derive(Deserialize)]
struct Read {
    step: Option<String>,
    attempt: Option<u32>,
    from: Option<String>,
    to: String,
    at: Millis,
    reason: String,
    actor: String,
}

/// The events of one write, encoded compactly (all of one run).
pub(super) fn encode<'a>(events: impl IntoIterator<Item = &'a Event>) -> Result<Vec<u8>> {
    let stored: Vec<Stored<'_>> = events
        .into_iter()
        .map(|event| {
            // Every field named, so that a field added to `Event` is a
            // compile error here until it is stored.
            let Event {
                run_id: _,
                step,
                attempt,
                from,
                to,
                at,
                reason,
                actor,
            } = event;
            Stored {
                step: step.as_deref(),
                attempt: *attempt,
                from: from.as_deref(),
                to,
                at: *at,
                reason,
                actor,
            }
        })
        .collect();
    let out = vec![COMPACT_EVENTS];
    postcard::to_extend(&stored, out).map_err(|e| Error::Backend(e.to_string()))
}

/// The events stored at `key` for `run_id`, in any of the encodings a
/// store has held (see the module docs).
pub(super) fn decode_at(key: &[u8], run_id: &str, bytes: &[u8]) -> Result<Vec<Event>> {
    match bytes.split_first() {
        Some((&COMPACT_EVENTS, list)) => {
            let read: Vec<Read> = postcard::from_bytes(list).map_err(|e| Error::Corrupt {
                key: show_key(key),
                reason: format!("unreadable event list: {e}"),
            })?;
            Ok(read
                .into_iter()
                .map(|r| Event {
                    run_id: run_id.to_owned(),
                    step: r.step,
                    attempt: r.attempt,
                    from: r.from,
                    to: r.to,
                    at: r.at,
                    reason: r.reason,
                    actor: r.actor,
                })
                .collect())
        }
        // A JSON list per write (`[` after the format byte); a store
        // written before lists holds one event per key.
        Some((&VALUE_FORMAT, [b'[', ..])) => decode(key, bytes),
        _ => Ok(vec![decode(key, bytes)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::{self, key};
    use super::*;

    fn event(step: Option<&str>, attempt: Option<u32>, from: Option<&str>, to: &str) -> Event {
        Event {
            run_id: "r01".to_owned(),
            step: step.map(str::to_owned),
            attempt,
            from: from.map(str::to_owned),
            to: to.to_owned(),
            at: 1_796_507_855_042,
            reason: "attempt 1 started (hello@1.0.0)".to_owned(),
            actor: "api:default".to_owned(),
        }
    }

    fn sample() -> Vec<Event> {
        vec![
            event(None, None, None, "queued"),
            event(Some("hello"), None, Some("pending"), "queued"),
            event(Some("hello"), Some(1), Some("queued"), "running"),
            event(Some("ünï\0cödé"), Some(u32::MAX), Some(""), ""),
        ]
    }

    #[test]
    fn a_compact_list_reads_back_with_the_run_id_of_its_key() {
        let events = sample();
        let bytes = encode(&events).unwrap();
        assert_eq!(bytes[0], COMPACT_EVENTS);
        let k = key("ev", &["r01", "00000000000000000001"]);
        assert_eq!(decode_at(&k, "r01", &bytes).unwrap(), events);
        let json = keys::encode(&events).unwrap();
        assert!(
            bytes.len() * 2 < json.len(),
            "{} compact against {} JSON",
            bytes.len(),
            json.len()
        );
    }

    #[test]
    fn json_lists_and_single_json_events_of_older_stores_still_read() {
        let events = sample();
        let k = key("ev", &["r01", "00000000000000000001"]);
        let list = keys::encode(&events).unwrap();
        assert_eq!(decode_at(&k, "r01", &list).unwrap(), events);
        let single = keys::encode(&events[2]).unwrap();
        assert_eq!(
            decode_at(&k, "r01", &single).unwrap(),
            vec![events[2].clone()]
        );
    }

    #[test]
    fn a_damaged_list_is_corrupt_naming_its_key_not_a_panic() {
        let bytes = encode(&sample()).unwrap();
        let k = key("ev", &["r01", "00000000000000000001"]);
        for cut in [1, 2, bytes.len() / 2, bytes.len() - 1] {
            let err = decode_at(&k, "r01", &bytes[..cut]).unwrap_err();
            assert!(
                matches!(&err, Error::Corrupt { key, .. } if key.contains("r01")),
                "{err}"
            );
        }
        let err = decode_at(&k, "r01", &[9, 1, 2]).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }
}
