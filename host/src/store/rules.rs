//! Rules every store follows the same way, so that an answer does not
//! depend on which store gives it: ids and the instant written in them, the
//! queue's order, blob digests, and how a page of runs is cut (a page
//! boundary is the same whichever store answers).

use sha2::{Digest, Sha256};

use super::{Error, Result};
use crate::model::{Millis, RunRecord, RunStatus};

/// The creation instant written into an id by [`new_id`] (`None` for ids
/// of another shape).
pub fn id_millis(id: &str) -> Option<Millis> {
    let hex = id.get(1..13)?;
    i64::from_str_radix(hex, 16).ok()
}

/// A fresh id: 12 hex digits of milliseconds, 6 of a per-process sequence
/// and 4 random ones, after a prefix naming the kind (`r` run, `d` dead
/// letter). Ids sort by creation time, and within a millisecond by creation
/// order, so "newest first" listings are exact.
pub fn new_id(prefix: &str, now: Millis) -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xff_ffff;
    format!(
        "{prefix}{:012x}{seq:06x}{:04x}",
        now.max(0),
        rand::random::<u16>()
    )
}

/// A queued run's place in the persistent queue: priority with aging from
/// its creation instant (the one written in its id, as the sled store
/// orders it).
pub fn queue_position(run: &RunRecord) -> Millis {
    let created = id_millis(&run.id).unwrap_or(0);
    crate::model::priority::queue_order(created, run.priority)
}

/// Most index entries one `list_runs` call examines before it returns a
/// (possibly short, possibly empty) page with a cursor. A status filter on a
/// long history would otherwise scan without bound for one page; ten thousand
/// small index entries take about a millisecond.
pub const MAX_SCAN: usize = 10_000;

/// Picks one page of run ids out of `entries`: the index entries `(id, status,
/// task)` in scope (a tenant's runs, a task's runs, or every run), newest
/// first, already positioned after the cursor.
///
/// Stops at `limit` matches, or after examining `scan_limit` entries; `next`
/// is the last id examined when more entries may follow, `None` when the
/// index is exhausted.
pub fn select_page<I>(
    entries: I,
    task: Option<&str>,
    status: Option<RunStatus>,
    limit: usize,
    scan_limit: usize,
) -> Result<(Vec<String>, Option<String>)>
where
    I: Iterator<Item = Result<(String, RunStatus, String)>>,
{
    let limit = limit.max(1);
    let scan_limit = scan_limit.max(1);
    let mut ids = Vec::new();
    let mut last: Option<String> = None;
    for (scanned, entry) in entries.enumerate() {
        if ids.len() == limit || scanned == scan_limit {
            // Another entry exists beyond this page: hand out a cursor.
            return Ok((ids, last));
        }
        let (id, entry_status, entry_task) = entry?;
        if task.is_none_or(|t| t == entry_task) && status.is_none_or(|s| s == entry_status) {
            ids.push(id.clone());
        }
        last = Some(id);
    }
    Ok((ids, None))
}

/// The sha256 of `bytes`, in lower-case hex: the name of a blob.
pub fn digest_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Error for writing a run that is not stored (never inserted, or deleted
/// by retention meanwhile): writing it would resurrect half a run.
pub fn missing_run(id: &str) -> Error {
    Error::Backend(format!("cannot update run {id}: it does not exist"))
}
