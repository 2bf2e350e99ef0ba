//! Where in a run's dump line its record and its logs are
//! ([`JsonSpans`](crate::store::JsonSpans)), so that a store keeping them
//! as JSON stores the dump's bytes rather than encoding the parsed values
//! again (on PostgreSQL that encoding was a fifth of ax's CPU in an
//! import: docs/PERFORMANCE.md, *Import: … (issue 35)*).
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

/// The spans of the run's record and of each of its logs in `line`, if
/// the line has the layout ax writes.
pub(super) fn spans(line: &[u8]) -> Option<(Range<usize>, Vec<Range<usize>>)> {
    let at = after(line, 0, br#"{"kind":"run","run":"#)?;
    let run = at..value_end(line, at)?;
    let at = after(line, run.end, br#","events":"#)?;
    let at = value_end(line, at)?;
    let mut at = after(line, at, br#","logs":["#)?;
    let mut logs = Vec::new();
    if line.get(at) != Some(&b']') {
        loop {
            let end = value_end(line, at)?;
            logs.push(at..end);
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
    after(line, at, br#"],"records":"#)?;
    Some((run, logs))
}

/// The index after `text`, if `line` holds it at `at`.
fn after(line: &[u8], at: usize, text: &[u8]) -> Option<usize> {
    line.get(at..)?.starts_with(text).then_some(at + text.len())
}

/// The index after the object or array starting at `at`.
fn value_end(line: &[u8], at: usize) -> Option<usize> {
    if !matches!(line.get(at)?, b'{' | b'[') {
        return None;
    }
    let (mut depth, mut string, mut escaped) = (0usize, false, false);
    for (i, &b) in line.iter().enumerate().skip(at) {
        if string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_and_each_logs_are_found_strings_and_nesting_included() {
        let line = br#"{"kind":"run","run":{"a":"}\"]","b":[{}]},"events":[{"x":"]"}],"logs":[{"s":"{"},{"t":[1]}],"records":[]}"#;
        let (run, logs) = spans(line).unwrap();
        assert_eq!(&line[run], br#"{"a":"}\"]","b":[{}]}"#);
        let logs: Vec<&[u8]> = logs.into_iter().map(|r| &line[r]).collect();
        assert_eq!(logs, [&br#"{"s":"{"}"#[..], br#"{"t":[1]}"#]);
        let none = br#"{"kind":"run","run":{},"events":[],"logs":[],"records":[]}"#;
        assert_eq!(spans(none).unwrap().1, Vec::<Range<usize>>::new());
    }

    #[test]
    fn another_layout_has_no_spans() {
        for line in [
            &br#"{"kind":"run","events":[],"run":{},"logs":[],"records":[]}"#[..],
            br#"{"kind":"run", "run":{},"events":[],"logs":[],"records":[]}"#,
            br#"{"kind":"run","run":{"a":1,"events":[],"logs":[],"records":[]}"#,
        ] {
            assert_eq!(spans(line), None);
        }
    }
}
