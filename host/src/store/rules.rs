//! Rules every store follows the same way, so that an answer does not
//! depend on which store gives it: ids and the instant written in them, the
//! queue's order, blob digests, and how a page of runs is cut (a page
//! boundary is the same whichever store answers).

use super::{Error, Result};
pub use crate::model::digest::{Digester, digest_of};
use crate::model::{Millis, RunRecord, RunStatus};
use crate::store::RunQuery;

/// The creation instant written into an id by [`new_id`] (`None` for ids
/// of another shape).
pub fn id_millis(id: &str) -> Option<Millis> {
    let hex = id.get(1..13)?;
    i64::from_str_radix(hex, 16).ok()
}

/// A fresh id: 12 hex digits of milliseconds, 6 of a per-process sequence
/// and 8 of this process's [`writer_tag`], after a prefix naming the kind
/// (`r` run, `d` dead letter, `a` alert). Ids sort by creation time, and
/// within a millisecond by creation order in one process, so "newest first"
/// listings are exact; the tag keeps two processes writing one store from
/// making the same id in the same millisecond (ids made before it ended in
/// 4 random digits: both shapes sort and read the same).
pub fn new_id(prefix: &str, now: Millis) -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xff_ffff;
    format!("{prefix}{:012x}{seq:06x}{:08x}", now.max(0), writer_tag())
}

/// This process's part of every id it makes ([`new_id`]): 32 random bits
/// drawn once. Two processes on one store (the cluster) collide only if
/// they draw the same tag *and* reach the same sequence number in the same
/// millisecond.
pub fn writer_tag() -> u32 {
    static TAG: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *TAG.get_or_init(rand::random::<u32>)
}

/// The lowest run id made at `at` or later ([`new_id`] with prefix `r`),
/// as a bound: an id made before `at` sorts below it, one made at `at` or
/// later sorts at or above it (instants before 1970 are clamped, as ids are).
pub fn id_floor(at: Millis) -> String {
    format!("r{:012x}", at.max(0))
}

/// Where a listing of `query` starts, newest first: below its cursor or
/// below its `until` ([`id_floor`]), whichever is lower. Either is an
/// exclusive upper bound on ids, so `until` costs nothing over a cursor.
pub fn list_start(query: &RunQuery) -> Option<String> {
    let cursor = query.cursor.clone().filter(|c| !c.is_empty());
    let until = query.until.map(id_floor);
    match (cursor, until) {
        (Some(c), Some(u)) => Some(c.min(u)),
        (c, u) => c.or(u),
    }
}

/// Where a listing of `query` ends, newest first: at the first id below
/// its `since` ([`id_floor`]); `None` for no lower bound.
pub fn list_floor(query: &RunQuery) -> Option<String> {
    query.since.map(id_floor)
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
/// first, already positioned after the cursor ([`list_start`]).
///
/// Stops at `limit` matches, or after examining `scan_limit` entries; `next`
/// is the last id examined when more entries may follow, `None` when the
/// index is exhausted or its next id lies below `floor` ([`list_floor`]):
/// entries below the floor are never examined, so a time range costs the
/// runs inside it, not the history behind it.
pub fn select_page<I>(
    entries: I,
    task: Option<&str>,
    status: Option<RunStatus>,
    floor: Option<&str>,
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
        if floor.is_some_and(|f| id.as_str() < f) {
            return Ok((ids, None));
        }
        if task.is_none_or(|t| t == entry_task) && status.is_none_or(|s| s == entry_status) {
            ids.push(id.clone());
        }
        last = Some(id);
    }
    Ok((ids, None))
}

/// Error for a write that gives a run another task definition than the one
/// it was inserted with: a run's definition is fixed when it is inserted
/// (stores may keep it apart, once per definition: sled's `definitions.rs`).
/// Checked like revisions, before anything is changed.
pub fn definition_changed(id: &str) -> Error {
    Error::Backend(format!(
        "cannot update run {id}: a run's task definition is fixed when it is inserted"
    ))
}

/// Error for writing a run that is not stored (never inserted, or deleted
/// by retention meanwhile): writing it would resurrect half a run.
pub fn missing_run(id: &str) -> Error {
    Error::Backend(format!("cannot update run {id}: it does not exist"))
}

/// The revision a run is inserted with ([`RunRecord::revision`]).
pub const FIRST_REVISION: u64 = 1;

/// Checks the revisions of a write of runs against the stored ones: each
/// run's first record in `runs` must make the revision after `stored(id)`
/// (`None`: the run is not stored, which the write reports on its own), and
/// each further record of the same run the one after that. The first run
/// that does not is the [`Error::Conflict`]. Stores call it before changing
/// anything, under their write lock, so a refused write stores nothing.
pub fn check_revisions<'a>(
    runs: impl IntoIterator<Item = &'a RunRecord>,
    mut stored: impl FnMut(&str) -> Result<Option<u64>>,
) -> Result<()> {
    let mut last: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for run in runs {
        let before = match last.get(run.id.as_str()) {
            Some(&revision) => revision,
            None => match stored(&run.id)? {
                Some(revision) => revision,
                None => continue,
            },
        };
        if run.revision != before + 1 {
            return Err(Error::Conflict {
                id: run.id.clone().into(),
                stored: before,
                given: run.revision,
            });
        }
        last.insert(&run.id, run.revision);
    }
    Ok(())
}

/// This process's name as a lease holder ([`super::Leases`]): the host
/// name, the process id and the [`writer_tag`], so two processes never
/// share one (a restarted process is a new holder).
pub fn holder() -> String {
    static HOLDER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOLDER
        .get_or_init(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default();
            let host = if host.is_empty() {
                "host".to_owned()
            } else {
                host
            };
            format!("{host}/{}/{:08x}", std::process::id(), writer_tag())
        })
        .clone()
}

/// What taking lease `name` for `holder` until `until` leaves stored, given
/// the lease stored now (`current`): see [`super::Leases::take_lease`].
/// `None`: nothing changes (another holder's live lease).
pub fn take_lease(
    current: Option<&super::Lease>,
    name: &str,
    holder: &str,
    now: Millis,
    until: Millis,
) -> Option<super::Lease> {
    let token = match current {
        Some(live) if live.until > now && live.holder != holder => return None,
        Some(mine) if mine.until > now => mine.token,
        Some(lapsed) => lapsed.token + 1,
        None => 1,
    };
    Some(super::Lease {
        name: name.to_owned(),
        holder: holder.to_owned(),
        until,
        token,
    })
}
