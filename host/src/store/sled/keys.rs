//! How records are keyed and encoded in sled (the key layout itself is
//! tabled in the module docs of [`super`]).
//!
//! A key is a list of parts, each encoded so that no part contains the
//! separator and byte order of the encoded key is the order of the parts as
//! strings (see [`key`]). Every value is one format byte (`VALUE_FORMAT`)
//! followed by JSON. A value of an unknown format is reported as
//! [`Error::Corrupt`], never a panic.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::{Millis, RECORD_FORMAT, RunRecord, RunStatus};
use crate::store::{Error, Result};

/// Format byte that starts every value.
pub(super) const VALUE_FORMAT: u8 = 1;

// --- keys -----------------------------------------------------------------

/// Encodes `kind` and `parts` as one key. Each part is written with bytes
/// 0x00 and 0x01 escaped (as 0x01 0x01 and 0x01 0x02) and ends with 0x00.
/// No encoded part contains 0x00, so a prefix of whole parts selects exactly
/// the keys below it; and since 0x00 sorts before any encoded byte, keys sort
/// like their parts compared as strings (`a` < `a.b` < `b`).
pub(super) fn key(kind: &str, parts: &[&str]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(kind.len() + 1 + parts.iter().map(|p| p.len() + 1).sum::<usize>());
    push_part(&mut out, kind);
    for part in parts {
        push_part(&mut out, part);
    }
    out
}

/// Instants as fixed-width text so keys sort by time (instants before 1970
/// sort first, clamped: nothing ax indexes by time happens then).
pub(super) fn instant_part(at: Millis) -> String {
    format!("{:020}", at.max(0))
}

/// Hours as fixed-width text so keys sort by time (see [`instant_part`]).
pub(super) fn hour_part(hour: Millis) -> String {
    instant_part(hour)
}

pub(super) fn usage_key(tenant: &str, hour: Millis, task: &str) -> Vec<u8> {
    key("use", &[tenant, &hour_part(hour), task])
}

pub(super) fn push_part(out: &mut Vec<u8>, part: &str) {
    for &b in part.as_bytes() {
        match b {
            0 => out.extend_from_slice(&[1, 1]),
            1 => out.extend_from_slice(&[1, 2]),
            b => out.push(b),
        }
    }
    out.push(0);
}

/// Decodes the single part that `bytes` holds (the rest of a key after a prefix).
pub(super) fn decode_part(bytes: &[u8]) -> Option<String> {
    let (&0, body) = bytes.split_last()? else {
        return None;
    };
    let mut out = Vec::with_capacity(body.len());
    let mut it = body.iter();
    while let Some(&b) = it.next() {
        out.push(match b {
            0 => return None,
            1 => match it.next()? {
                1 => 0,
                2 => 1,
                _ => return None,
            },
            b => b,
        });
    }
    String::from_utf8(out).ok()
}

/// Decodes the parts that `bytes` holds (the rest of a key after a prefix),
/// in order.
pub(super) fn split_parts(bytes: &[u8]) -> Option<Vec<String>> {
    if bytes.last() != Some(&0) {
        return None;
    }
    bytes
        .split_inclusive(|&b| b == 0)
        .map(decode_part)
        .collect()
}

/// A key made readable for messages: parts joined by `/`.
pub(super) fn show_key(key: &[u8]) -> String {
    let text = String::from_utf8_lossy(key);
    text.trim_end_matches('\0').replace('\0', "/")
}

pub(super) fn fire_key(run: &RunRecord) -> Vec<u8> {
    let instant = run.scheduled_for.to_string();
    key("fire", &[&run.tenant, &run.task, &instant])
}

/// The index entries of a run: its [`listing_indexes`] and its
/// [`state_indexes`].
pub(super) fn run_indexes(run: &RunRecord) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = listing_indexes(&run.id, &run.tenant, &run.task);
    out.extend(state_indexes(
        &run.id,
        &run.tenant,
        &run.task,
        run.status,
        run.priority,
    ));
    out
}

/// The entries that list a run by tenant (`rt/{tenant}/{id}`) and by task
/// (`rk/{tenant}/{task}/{id}`): written when the run is inserted and never
/// again, whatever its state. Their values are empty since store format 11
/// (a listing reads a run's state from its record's first fields); before,
/// they held its status (and `rt` its task), rewritten at every change of
/// state (stores before format 10; such values are not read).
pub(super) fn listing_indexes(id: &str, tenant: &str, task: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (key("rt", &[tenant, id]), Vec::new()),
        (key("rk", &[tenant, task, id]), Vec::new()),
    ]
}

/// The entries of a run's state: `q` while queued (value: the task name),
/// `act` while running, none once it ended.
pub(super) fn state_indexes(
    id: &str,
    tenant: &str,
    task: &str,
    status: RunStatus,
    priority: u8,
) -> Option<(Vec<u8>, Vec<u8>)> {
    match status {
        RunStatus::Queued => Some((queue_key(tenant, id, priority), task.as_bytes().to_vec())),
        RunStatus::Running => Some((key("act", &[id]), Vec::new())),
        _ => None,
    }
}

/// `q/{tenant}/{order}/{id}`: a queued run in dispatch order, `order` being
/// [`queue_order`](crate::model::priority::queue_order) of its creation
/// instant (from its id) and priority, as sortable text.
pub(super) fn queue_key(tenant: &str, id: &str, priority: u8) -> Vec<u8> {
    let created = crate::store::id_millis(id).unwrap_or(0);
    let order = crate::model::priority::queue_order(created, priority);
    // Shifted to be non-negative, so the text sorts like the number.
    let order = format!("{:020}", i128::from(order) - i128::from(Millis::MIN));
    key("q", &[tenant, &order, id])
}

pub(super) fn corrupt_key(key: &[u8]) -> Error {
    Error::Corrupt {
        key: show_key(key),
        reason: "malformed index entry".to_owned(),
    }
}

// --- values ---------------------------------------------------------------

pub(super) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut out = vec![VALUE_FORMAT];
    serde_json::to_writer(&mut out, value).map_err(|e| Error::Backend(e.to_string()))?;
    Ok(out)
}

pub(super) fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T> {
    let corrupt = |reason: String| Error::Corrupt {
        key: show_key(key),
        reason,
    };
    match bytes.split_first() {
        Some((&VALUE_FORMAT, json)) => {
            serde_json::from_slice(json).map_err(|e| corrupt(e.to_string()))
        }
        Some((&format, _)) if format > VALUE_FORMAT => Err(corrupt(format!(
            "written by a newer ax (value format {format}; this build reads {VALUE_FORMAT})"
        ))),
        _ => Err(corrupt(
            "not a stored value (unknown format byte)".to_owned(),
        )),
    }
}

pub(super) fn newer_record(key: &[u8], format: u32) -> Error {
    Error::Corrupt {
        key: show_key(key),
        reason: format!(
            "written by a newer ax (record format {format}; this build reads {RECORD_FORMAT})"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::SledStore;
    use super::super::fixtures::run;
    use super::*;
    use crate::store::prelude::*;

    #[test]
    fn split_parts_reads_back_what_key_wrote() {
        let parts = ["00042", "a\0b", "\u{1}", ""];
        let k = key("ik", &parts);
        let got = split_parts(&k).unwrap();
        assert_eq!(got, ["ik", "00042", "a\0b", "\u{1}", ""]);
        assert_eq!(split_parts(b"no-end"), None);
        assert_eq!(split_parts(&[0xff, 0]), None, "not UTF-8");
    }

    #[test]
    fn values_of_an_unknown_format_are_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let mut value = encode("v").unwrap();
        value[0] = 2;
        store.db.insert(key("meta", &["m"]), value).unwrap();
        store
            .db
            .insert(key("meta", &["junk"]), &b"\x01{not json"[..])
            .unwrap();
        store.db.insert(key("meta", &["empty"]), &b""[..]).unwrap();
        for (name, expected) in [
            ("m", "value format 2"),
            ("junk", "invalid type"),
            ("empty", "unknown format"),
        ] {
            match store.get_meta(name) {
                Err(e @ Error::Corrupt { .. }) => {
                    assert!(e.to_string().contains(expected), "{e}");
                    assert!(e.to_string().contains(&format!("meta/{name}")), "{e}");
                }
                other => panic!("{name}: expected Corrupt, got {other:?}"),
            }
        }

        let mut newer = run("r1", RunStatus::Queued);
        newer.format = RECORD_FORMAT + 1;
        store.insert_run(&newer, false, None, &[]).unwrap();
        match store.get_run("r1") {
            Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("newer ax"), "{reason}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}
