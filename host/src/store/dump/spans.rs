//! Where in a run's dump line its record, its events and its logs are
//! ([`JsonSpans`](crate::store::JsonSpans)), so that a store keeping them
//! as JSON stores the dump's bytes rather than encoding the parsed values
//! again (PostgreSQL's `restore_runs`: docs/PERFORMANCE.md, *Import: the
//! dump's JSON kept, the check on two threads*).
//!
//! Only for a line as this ax writes it (`{"kind":"run","run":{…},
//! "events":[…],"logs":[…],"records":[…]}`, no spaces) in a dump made by
//! the same ax version: serde_json writes a value it read from its own
//! output byte for byte as it was (floats are read exactly and written in
//! their shortest form, maps in the same order), so the text is what
//! encoding gives. Anything else (another layout, another version: a
//! record of an older shape is encoded in the current one) has no spans,
//! and the store encodes the values as before.

use std::ops::Range;

use serde::de::DeserializeOwned;

use crate::store::{DumpJson, JsonSpans, WholeRun};

/// What a run's line starts with.
const PREFIX: &[u8] = br#"{"kind":"run","run":"#;

/// Reads a run's line with the layout ax writes, keeping the line and where
/// its record and logs are in it; any other line is given back (and read
/// the usual way). Each value is read once, by serde, which says where it
/// ended: no second pass over the text.
pub(super) fn read_run(line: Vec<u8>) -> Result<WholeRun, Vec<u8>> {
    match spans(&line) {
        Some((mut whole, Spans { run, events, logs })) => {
            whole.json = DumpJson::new(JsonSpans {
                line,
                run,
                events,
                logs,
            });
            Ok(whole)
        }
        None => Err(line),
    }
}

/// The run of `line`, and the spans of its record, of its events and of
/// each of its logs.
fn spans(line: &[u8]) -> Option<(WholeRun, Spans)> {
    let at = after(line, 0, PREFIX)?;
    let (run, end) = value(line, at)?;
    let span = at..end;
    let at = after(line, end, br#","events":"#)?;
    let (events, end) = value(line, at)?;
    let events_span = at..end;
    let mut at = after(line, end, br#","logs":["#)?;
    let (mut logs, mut spans) = (Vec::new(), Vec::new());
    if line.get(at) != Some(&b']') {
        loop {
            let (one, end) = value(line, at)?;
            logs.push(one);
            spans.push(at..end);
            match line.get(end)? {
                b',' => at = end + 1,
                b']' => {
                    at = end;
                    break;
                }
                _ => return None,
            }
        }
    }
    let at = after(line, at, br#"],"records":"#)?;
    let (records, end) = value(line, at)?;
    (&line[end..] == b"}").then_some(())?;
    let whole = WholeRun {
        run,
        events,
        logs,
        records,
        json: DumpJson::default(),
    };
    let spans = Spans {
        run: span,
        events: events_span,
        logs: spans,
    };
    Some((whole, spans))
}

/// [`JsonSpans`] without the line.
struct Spans {
    run: Range<usize>,
    events: Range<usize>,
    logs: Vec<Range<usize>>,
}

/// The index after `text`, if `line` holds it at `at`.
fn after(line: &[u8], at: usize, text: &[u8]) -> Option<usize> {
    line.get(at..)?.starts_with(text).then_some(at + text.len())
}

/// The value starting at `at` (an object or an array), and the index after
/// it.
fn value<T: DeserializeOwned>(line: &[u8], at: usize) -> Option<(T, usize)> {
    if !matches!(line.get(at)?, b'{' | b'[') {
        return None;
    }
    let mut values = serde_json::Deserializer::from_slice(&line[at..]).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, at + values.byte_offset()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_layout_is_left_to_serde() {
        for line in [
            &br#"{"kind":"run","events":[],"run":{},"logs":[],"records":[]}"#[..],
            br#"{"kind":"run", "run":{},"events":[],"logs":[],"records":[]}"#,
            br#"{"kind":"run","run":{"a":1,"events":[],"logs":[],"records":[]}"#,
        ] {
            assert!(read_run(line.to_vec()).is_err());
        }
    }
}
