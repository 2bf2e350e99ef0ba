//! A run's events as sled stores them: one value per write of the run
//! (`ev/{run}/{seq:020}`), holding the events of that write in order.
//!
//! Since store format 9 the list is the format byte [`EVENTS_REASONS`],
//! then the events in postcard (lengths and integers as varints, no field
//! names), each without its run id, which the key holds; the names that
//! come back in every event (the states in `from` and `to`, the actors
//! `scheduler`, `recovery` and `api:admin`, the fixed reasons such as
//! `ready`) as their place in [`NAMES`], any other as text; the reasons
//! that follow a pattern (`attempt 1 started (hello@1.0.0)`, `attempt 1:
//! succeeded`) as the pattern and its variable part only ([`Reason`]),
//! used only where writing the reason back from them gives the same text;
//! each instant after the first as its distance from the one before. A
//! one-step run's six events take ~140 B. Store format 8 wrote reasons as
//! text ([`EVENTS_NAMED`], ~210 B), format 6 also every name as text and
//! every instant whole ([`COMPACT_EVENTS`], ~320 B; docs/PERFORMANCE.md,
//! *Compact events*), and earlier formats JSON, a list per write or
//! (before lists) one event per key. Those are read as they are and never
//! rewritten, so an upgrade rewrites nothing (old runs keep their events
//! until retention deletes them).
//!
//! The encoding has no field names: a field added to [`Event`] is a compile
//! error in [`encode`] until it is stored, and storing it needs a new format
//! byte (postcard cannot tell a list of the old shape from the new). A name
//! may be added to [`NAMES`] at its end only: `tests::names_are_fixed`
//! holds their places.

use serde::{Deserialize, Serialize};

use super::keys::{VALUE_FORMAT, decode, show_key};
use crate::model::{Event, Millis};
use crate::store::{Error, Result};

/// First byte of an event list of store formats 6 and 7 (JSON values start
/// with [`VALUE_FORMAT`]).
pub(super) const COMPACT_EVENTS: u8 = 2;

/// First byte of an event list of store format 8 (reasons as text).
pub(super) const EVENTS_NAMED: u8 = 4;

/// First byte of an event list since store format 9.
pub(super) const EVENTS_REASONS: u8 = 5;

/// The names an event list stores by their place (append only: the first
/// ten are all a list of format 8 may name).
const NAMES: [&str; 20] = [
    "pending",
    "queued",
    "running",
    "retry_wait",
    "succeeded",
    "failed",
    "skipped",
    "cancelled",
    "dead",
    "scheduler",
    // Since format 9: actors and whole reasons.
    "recovery",
    "api:admin",
    "",
    "ready",
    "first step started",
    "triggered (manual)",
    "triggered (cron)",
    "triggered (every)",
    "triggered (after)",
    "triggered (at)",
];

/// A name as stored: its place in [`NAMES`], or its text.
#[derive(Serialize)]
enum Name<'a> {
    Known(u8),
    Text(&'a str),
}

impl<'a> Name<'a> {
    fn of(text: &'a str) -> Self {
        match NAMES.iter().position(|n| *n == text) {
            Some(i) => Name::Known(i as u8),
            None => Name::Text(text),
        }
    }
}

/// [`Name`], read back.
#[derive(Deserialize)]
enum ReadName {
    Known(u8),
    Text(String),
}

impl ReadName {
    fn text(self) -> Option<String> {
        match self {
            ReadName::Known(i) => NAMES.get(usize::from(i)).map(|n| (*n).to_owned()),
            ReadName::Text(text) => Some(text),
        }
    }
}

/// An event's reason as stored: a pattern of the scheduler's reasons with
/// its variable part, or a name. Chosen only when [`ReadReason::text`]
/// gives the reason back exactly.
#[derive(Serialize)]
enum Reason<'a> {
    Name(Name<'a>),
    /// `attempt {attempt} started ({0})`.
    Started(&'a str),
    /// `attempt {attempt}: {0}`.
    Ended(Name<'a>),
}

impl<'a> Reason<'a> {
    fn of(reason: &'a str, attempt: Option<u32>) -> Self {
        let tail = attempt.and_then(|n| {
            let rest = reason.strip_prefix("attempt ")?;
            let digits = rest.find(|c: char| !c.is_ascii_digit())?;
            (rest[..digits] == n.to_string()).then(|| &rest[digits..])
        });
        if let Some(tail) = tail {
            if let Some(plugin) = tail
                .strip_prefix(" started (")
                .and_then(|t| t.strip_suffix(')'))
            {
                return Reason::Started(plugin);
            }
            if let Some(rest) = tail.strip_prefix(": ") {
                return Reason::Ended(Name::of(rest));
            }
        }
        Reason::Name(Name::of(reason))
    }
}

/// [`Reason`], read back.
#[derive(Deserialize)]
enum ReadReason {
    Name(ReadName),
    Started(String),
    Ended(ReadName),
}

impl ReadReason {
    fn text(self, attempt: Option<u32>) -> Option<String> {
        match self {
            ReadReason::Name(name) => name.text(),
            ReadReason::Started(plugin) => Some(format!("attempt {} started ({plugin})", attempt?)),
            ReadReason::Ended(rest) => Some(format!("attempt {}: {}", attempt?, rest.text()?)),
        }
    }
}

/// A reason of a list of format 8: its text.
impl From<String> for ReadReason {
    fn from(text: String) -> Self {
        ReadReason::Name(ReadName::Text(text))
    }
}

/// One event as stored: [`Event`] without its run id; `at` after the
/// first event of the list is the distance from the event before.
#[derive(Serialize)]
struct Stored<'a> {
    step: Option<&'a str>,
    attempt: Option<u32>,
    from: Option<Name<'a>>,
    to: Name<'a>,
    at: Millis,
    reason: Reason<'a>,
    actor: Name<'a>,
}

/// [`Stored`] read back; `R` is the reason as a list of its format holds it
/// (text in format 8).
#[derive(Deserialize)]
struct Read<R> {
    step: Option<String>,
    attempt: Option<u32>,
    from: Option<ReadName>,
    to: ReadName,
    at: Millis,
    reason: R,
    actor: ReadName,
}

/// An event of a list of formats 6 and 7, read back.
#[derive(Deserialize)]
struct ReadText {
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
    let mut before = None;
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
            let since = before.map_or(*at, |b: Millis| at.wrapping_sub(b));
            before = Some(*at);
            Stored {
                step: step.as_deref(),
                attempt: *attempt,
                from: from.as_deref().map(Name::of),
                to: Name::of(to),
                at: since,
                reason: Reason::of(reason, *attempt),
                actor: Name::of(actor),
            }
        })
        .collect();
    let out = vec![EVENTS_REASONS];
    postcard::to_extend(&stored, out).map_err(|e| Error::Backend(e.to_string()))
}

/// The events stored at `key` for `run_id`, in any of the encodings a
/// store has held (see the module docs).
pub(super) fn decode_at(key: &[u8], run_id: &str, bytes: &[u8]) -> Result<Vec<Event>> {
    let corrupt = |reason: String| Error::Corrupt {
        key: show_key(key),
        reason,
    };
    let named = |read: Vec<Read<ReadReason>>| {
        let unknown = || corrupt("an event names an unknown state, actor or reason".to_owned());
        let mut before: Option<Millis> = None;
        read.into_iter()
            .map(|r| {
                let at = before.map_or(r.at, |b| b.wrapping_add(r.at));
                before = Some(at);
                Ok(Event {
                    run_id: run_id.to_owned(),
                    step: r.step,
                    attempt: r.attempt,
                    from: r.from.map(|f| f.text().ok_or_else(unknown)).transpose()?,
                    to: r.to.text().ok_or_else(unknown)?,
                    at,
                    reason: r.reason.text(r.attempt).ok_or_else(unknown)?,
                    actor: r.actor.text().ok_or_else(unknown)?,
                })
            })
            .collect()
    };
    match bytes.split_first() {
        Some((&EVENTS_REASONS, list)) => named(
            postcard::from_bytes(list)
                .map_err(|e| corrupt(format!("unreadable event list: {e}")))?,
        ),
        Some((&EVENTS_NAMED, list)) => {
            let read: Vec<Read<String>> = postcard::from_bytes(list)
                .map_err(|e| corrupt(format!("unreadable event list: {e}")))?;
            named(
                read.into_iter()
                    .map(|r| Read {
                        reason: ReadReason::from(r.reason),
                        step: r.step,
                        attempt: r.attempt,
                        from: r.from,
                        to: r.to,
                        at: r.at,
                        actor: r.actor,
                    })
                    .collect(),
            )
        }
        Some((&COMPACT_EVENTS, list)) => {
            let read: Vec<ReadText> = postcard::from_bytes(list)
                .map_err(|e| corrupt(format!("unreadable event list: {e}")))?;
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
        assert_eq!(bytes[0], EVENTS_REASONS);
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

    /// A list of formats 6 and 7: every name as text, every instant whole.
    fn format_6(events: &[Event]) -> Vec<u8> {
        #[derive(Serialize)]
        struct Text<'a> {
            step: Option<&'a str>,
            attempt: Option<u32>,
            from: Option<&'a str>,
            to: &'a str,
            at: Millis,
            reason: &'a str,
            actor: &'a str,
        }
        let list: Vec<Text<'_>> = events
            .iter()
            .map(|e| Text {
                step: e.step.as_deref(),
                attempt: e.attempt,
                from: e.from.as_deref(),
                to: &e.to,
                at: e.at,
                reason: &e.reason,
                actor: &e.actor,
            })
            .collect();
        postcard::to_extend(&list, vec![COMPACT_EVENTS]).unwrap()
    }

    #[test]
    fn lists_of_formats_6_and_7_still_read_and_named_ones_are_smaller() {
        let mut events = sample();
        events[1].actor = "scheduler".to_owned();
        events[2].at -= 5_000;
        let k = key("ev", &["r01", "00000000000000000001"]);
        let older = format_6(&events);
        assert_eq!(decode_at(&k, "r01", &older).unwrap(), events);
        let named = encode(&events).unwrap();
        assert_eq!(decode_at(&k, "r01", &named).unwrap(), events);
        assert!(
            named.len() < older.len(),
            "{} against {}",
            named.len(),
            older.len()
        );
    }

    /// Stored lists name states and the scheduler by these places.
    #[test]
    fn names_are_fixed() {
        assert_eq!(
            NAMES,
            [
                "pending",
                "queued",
                "running",
                "retry_wait",
                "succeeded",
                "failed",
                "skipped",
                "cancelled",
                "dead",
                "scheduler",
                "recovery",
                "api:admin",
                "",
                "ready",
                "first step started",
                "triggered (manual)",
                "triggered (cron)",
                "triggered (every)",
                "triggered (after)",
                "triggered (at)",
            ]
        );
        // Every state a run or a step can be in is known.
        use crate::model::{RunStatus as R, StepStatus as S};
        let runs = [R::Queued, R::Running, R::Succeeded, R::Failed, R::Cancelled];
        let steps = [
            S::Pending,
            S::Queued,
            S::Running,
            S::RetryWait,
            S::Succeeded,
            S::Failed,
            S::Skipped,
            S::Cancelled,
            S::Dead,
        ];
        let names = runs
            .iter()
            .map(serde_json::to_value)
            .chain(steps.iter().map(serde_json::to_value));
        for name in names {
            let name = name.unwrap();
            assert!(NAMES.contains(&name.as_str().unwrap()), "{name}");
        }
    }

    /// A list of format 8: names by their place, reasons as text.
    fn format_8(events: &[Event]) -> Vec<u8> {
        #[derive(Serialize)]
        struct Named<'a> {
            step: Option<&'a str>,
            attempt: Option<u32>,
            from: Option<Name<'a>>,
            to: Name<'a>,
            at: Millis,
            reason: &'a str,
            actor: Name<'a>,
        }
        let mut before = None;
        let list: Vec<Named<'_>> = events
            .iter()
            .map(|e| {
                let at = before.map_or(e.at, |b: Millis| e.at - b);
                before = Some(e.at);
                Named {
                    step: e.step.as_deref(),
                    attempt: e.attempt,
                    from: e.from.as_deref().map(Name::of),
                    to: Name::of(&e.to),
                    at,
                    reason: &e.reason,
                    actor: Name::of(&e.actor),
                }
            })
            .collect();
        postcard::to_extend(&list, vec![EVENTS_NAMED]).unwrap()
    }

    /// The six events of a one-step run, as the scheduler words them.
    fn one_step_run() -> Vec<Event> {
        let e = |step: Option<&str>,
                 attempt,
                 from: Option<&str>,
                 to: &str,
                 reason: &str,
                 actor: &str| Event {
            run_id: "r01".to_owned(),
            step: step.map(str::to_owned),
            attempt,
            from: from.map(str::to_owned),
            to: to.to_owned(),
            at: 1_796_507_855_042,
            reason: reason.to_owned(),
            actor: actor.to_owned(),
        };
        vec![
            e(
                None,
                None,
                None,
                "queued",
                "triggered (manual)",
                "api:admin",
            ),
            e(
                Some("hello"),
                None,
                Some("pending"),
                "queued",
                "ready",
                "api:admin",
            ),
            e(
                None,
                None,
                Some("queued"),
                "running",
                "first step started",
                "scheduler",
            ),
            e(
                Some("hello"),
                Some(1),
                Some("queued"),
                "running",
                "attempt 1 started (hello@1.0.0)",
                "scheduler",
            ),
            e(
                Some("hello"),
                Some(1),
                Some("running"),
                "succeeded",
                "attempt 1: succeeded",
                "scheduler",
            ),
            e(None, None, Some("running"), "succeeded", "", "scheduler"),
        ]
    }

    #[test]
    fn lists_of_format_8_still_read_and_patterned_reasons_are_smaller() {
        let events = one_step_run();
        let k = key("ev", &["r01", "00000000000000000001"]);
        let older = format_8(&events);
        assert_eq!(decode_at(&k, "r01", &older).unwrap(), events);
        let now = encode(&events).unwrap();
        assert_eq!(decode_at(&k, "r01", &now).unwrap(), events);
        assert!(
            now.len() * 3 < older.len() * 2,
            "{} against {}",
            now.len(),
            older.len()
        );
    }

    /// A reason is stored by a pattern only where writing it back gives the
    /// same text: every one of these reads back exactly.
    #[test]
    fn every_reason_reads_back_as_it_was_written() {
        let reasons: [(&str, Option<u32>); 18] = [
            ("attempt 1 started (hello@1.0.0)", Some(1)),
            ("attempt 1 started (hello@1.0.0)", Some(2)),
            ("attempt 1 started (hello@1.0.0)", None),
            ("attempt 12: failed (boom)", Some(12)),
            ("attempt 12: failed (boom)", Some(1)),
            ("attempt 1: succeeded", Some(1)),
            ("attempt 01: succeeded", Some(1)),
            ("attempt 1 started (a) (b)", Some(1)),
            ("attempt 1 started (", Some(1)),
            ("attempt 1 started ()", Some(1)),
            ("attempt 1: ", Some(1)),
            ("attempt 1", Some(1)),
            ("attempt ", Some(1)),
            ("ready", Some(3)),
            ("", None),
            ("ünï\0cödé", Some(7)),
            ("attempt 4294967295: lost", Some(u32::MAX)),
            ("attempt 1 lost in a host crash; running it again", Some(1)),
        ];
        let events: Vec<Event> = reasons
            .iter()
            .map(|(reason, attempt)| Event {
                reason: (*reason).to_owned(),
                attempt: *attempt,
                ..event(Some("s"), None, None, "queued")
            })
            .collect();
        let k = key("ev", &["r01", "00000000000000000001"]);
        let bytes = encode(&events).unwrap();
        assert_eq!(decode_at(&k, "r01", &bytes).unwrap(), events);
    }

    #[test]
    fn a_patterned_reason_without_its_attempt_is_corrupt() {
        let k = key("ev", &["r01", "00000000000000000001"]);
        let mut events = one_step_run();
        events.truncate(4);
        let mut bytes = encode(&events[3..]).unwrap();
        // [byte, len 1, step Some "hello", attempt Some(1), ...]: attempt
        // None instead leaves `Started` without its number.
        assert_eq!(
            &bytes[..10],
            &[EVENTS_REASONS, 1, 1, 5, b'h', b'e', b'l', b'l', b'o', 1]
        );
        bytes.remove(10);
        bytes[9] = 0;
        let err = decode_at(&k, "r01", &bytes).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    #[test]
    fn a_name_past_the_table_is_corrupt() {
        let k = key("ev", &["r01", "00000000000000000001"]);
        let mut bytes = encode(&sample()[..1]).unwrap();
        // [byte, len 1, step None, attempt None, from None, to Known(1), ...]
        assert_eq!(&bytes[..6], &[EVENTS_REASONS, 1, 0, 0, 0, 0]);
        bytes[6] = 200;
        let err = decode_at(&k, "r01", &bytes).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
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
