//! What each tenant's run data weighs, as the `run_bytes` check of a manual
//! trigger sees it without reading the store on the actor's task at every
//! trigger.
//!
//! The store counts a tenant's bytes exactly ([`Runs::run_bytes`](crate::store::Runs::run_bytes)),
//! but what changes that count mostly passes outside the actor: the run
//! writer's write-behind (events, a record rewritten at each change), logs
//! and attempt records, retention deletes. So the actor cannot keep the
//! figure itself from the deltas it writes; it keeps a **reading** of the
//! store's count per tenant, taken off its task, plus what it added since:
//!
//! - `stored`: the store's count when last read, and when (`read_at`);
//! - `landed`: the estimated weight ([`super::create`]'s `run_weight`) of
//!   the runs this actor inserted since that reading;
//! - `unstored`: the same for runs created whose insert has not landed
//!   (what `unstored_bytes` held before: a burst of triggers in one turn
//!   sees itself).
//!
//! A reading is refreshed off the actor once it is [`REFRESH_MS`] old and a
//! trigger of the tenant comes; its result comes back as an event
//! ([`ReadDone`]), as `when` conditions do. It takes off `landed` what had
//! landed when it started: those runs are in the count it read (their
//! insert returned before the read began). Runs landing while it reads may
//! be counted twice until the next reading: an over-count, never an under-count.
//!
//! The check ([`admission::run_bytes_clear`](crate::scheduler::admission::run_bytes_clear))
//! admits on the estimate only when the reading is at most [`FRESH_MS`] old
//! and the estimate with the new run stays below 7/8 of the limit. Otherwise
//! (a tenant's first trigger, an idle tenant, a tenant near or over its
//! limit) it reads the store on the actor as before, and decides exactly as
//! before: every refusal is decided on a fresh count, so room freed by
//! retention is seen at once. The estimate can only admit a run the exact
//! rule would refuse if the tenant's data grew by more than 1/8 of its
//! limit, by writes the actor does not count, within the last second.
//!
//! Why not a figure kept in memory from the deltas: the writer's and the
//! log path's sizes are known only inside the store's batches (sled's
//! `footprint.rs`), and a store shared with another process would change
//! the count with no delta here at all; a reading stays right for both.

use std::collections::HashMap;

use crate::model::Millis;

/// A reading older than this is refreshed (off the actor) at the next
/// trigger of its tenant. A quarter of [`FRESH_MS`], so a tenant triggering
/// steadily never falls back to reading on the actor.
pub(super) const REFRESH_MS: Millis = 250;

/// A reading older than this is not trusted: the check reads the store.
/// It bounds how long writes the actor does not count (write-behind,
/// logs, deletes) can go unseen by an admission.
pub(super) const FRESH_MS: Millis = 1_000;

/// A reading of a tenant's run bytes taken off the actor.
#[derive(Debug)]
pub(super) struct ReadDone {
    pub(super) tenant: String,
    /// Which reading this is ([`RunBytes::start_reading`]).
    pub(super) id: u64,
    /// When it was asked for (its age counts from there).
    pub(super) started_at: Millis,
    pub(super) bytes: crate::store::Result<u64>,
}

/// One tenant's figure (see the module docs).
#[derive(Debug, Default)]
struct Figure {
    /// The store's count at the last reading; `None`: never read.
    stored: Option<u64>,
    read_at: Millis,
    landed: u64,
    unstored: u64,
    /// The reading under way: its id and `landed` when it started.
    reading: Option<(u64, u64)>,
}

/// Run bytes by tenant, as the actor estimates them between readings.
#[derive(Debug, Default)]
pub(super) struct RunBytes {
    tenants: HashMap<String, Figure>,
    /// The last reading id handed out.
    last_id: u64,
}

impl RunBytes {
    /// A run of `weight` bytes was created for `tenant`, not yet stored.
    pub(super) fn created(&mut self, tenant: &str, weight: u64) {
        let f = self.tenants.entry(tenant.to_string()).or_default();
        f.unstored = f.unstored.saturating_add(weight);
    }

    /// The insert of a run of `weight` came back; `stored`: it was created
    /// (or may have been).
    pub(super) fn landed(&mut self, tenant: &str, weight: u64, stored: bool) {
        let Some(f) = self.tenants.get_mut(tenant) else {
            return;
        };
        f.unstored = f.unstored.saturating_sub(weight);
        if stored {
            f.landed = f.landed.saturating_add(weight);
        }
    }

    /// Bytes of `tenant`'s runs created and not yet stored.
    pub(super) fn unstored(&self, tenant: &str) -> u64 {
        self.tenants.get(tenant).map_or(0, |f| f.unstored)
    }

    /// The estimate of `tenant`'s run data, if its reading is fresh at `now`.
    pub(super) fn estimate(&self, tenant: &str, now: Millis) -> Option<u64> {
        let f = self.tenants.get(tenant)?;
        let stored = f.stored?;
        (now.saturating_sub(f.read_at) <= FRESH_MS)
            .then(|| stored.saturating_add(f.landed).saturating_add(f.unstored))
    }

    /// The store was read on the actor at `now`: `stored` counts every run
    /// landed so far. A reading under way is superseded.
    pub(super) fn settle(&mut self, tenant: &str, stored: u64, now: Millis) {
        let f = self.tenants.entry(tenant.to_string()).or_default();
        f.stored = Some(stored);
        f.read_at = now;
        f.landed = 0;
        f.reading = None;
    }

    /// Starts a reading of `tenant` if its figure is due for one at `now`
    /// (read before, [`REFRESH_MS`] old, none under way): its id.
    pub(super) fn start_reading(&mut self, tenant: &str, now: Millis) -> Option<u64> {
        let f = self.tenants.get_mut(tenant)?;
        if f.stored.is_none() || f.reading.is_some() || now.saturating_sub(f.read_at) < REFRESH_MS {
            return None;
        }
        self.last_id += 1;
        f.reading = Some((self.last_id, f.landed));
        Some(self.last_id)
    }

    /// Takes up a reading: the figure starts again from it, unless it was
    /// superseded or failed (then the next trigger asks again).
    pub(super) fn read(&mut self, done: ReadDone) {
        let Some(f) = self.tenants.get_mut(&done.tenant) else {
            return;
        };
        let Some((id, landed_then)) = f.reading else {
            return;
        };
        if id != done.id {
            return;
        }
        f.reading = None;
        match done.bytes {
            Ok(bytes) => {
                f.stored = Some(bytes);
                f.read_at = done.started_at;
                f.landed = f.landed.saturating_sub(landed_then);
            }
            Err(e) => {
                tracing::debug!(tenant = %done.tenant, error = %e, "reading run bytes failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(id: u64, started_at: Millis, bytes: u64) -> ReadDone {
        ReadDone {
            tenant: "t".into(),
            id,
            started_at,
            bytes: Ok(bytes),
        }
    }

    #[test]
    fn a_tenant_never_read_has_no_estimate_and_starts_no_reading() {
        let mut b = RunBytes::default();
        b.created("t", 10);
        assert_eq!(b.estimate("t", 0), None);
        assert_eq!(b.start_reading("t", 10_000), None);
        assert_eq!(b.unstored("t"), 10);
    }

    #[test]
    fn the_estimate_adds_what_landed_and_what_waits_to_the_reading() {
        let mut b = RunBytes::default();
        b.settle("t", 1_000, 0);
        b.created("t", 10);
        b.created("t", 20);
        assert_eq!(b.estimate("t", 0), Some(1_030));
        b.landed("t", 10, true);
        b.landed("t", 20, false);
        assert_eq!(
            b.estimate("t", 0),
            Some(1_010),
            "a refused insert weighs nothing"
        );
        assert_eq!(b.unstored("t"), 0);
        assert_eq!(b.estimate("t", FRESH_MS), Some(1_010));
        assert_eq!(b.estimate("t", FRESH_MS + 1), None, "too old to trust");
    }

    #[test]
    fn a_reading_replaces_what_had_landed_when_it_started_and_keeps_the_rest() {
        let mut b = RunBytes::default();
        b.settle("t", 1_000, 0);
        b.created("t", 10);
        b.landed("t", 10, true);
        assert_eq!(b.start_reading("t", REFRESH_MS - 1), None, "not due yet");
        let id = b.start_reading("t", REFRESH_MS).unwrap();
        assert_eq!(b.start_reading("t", REFRESH_MS), None, "one at a time");
        // Lands while the store is read: maybe in the count, maybe not.
        b.created("t", 5);
        b.landed("t", 5, true);
        b.created("t", 7);
        // The store says 1,010 plus 3 bytes of events the actor did not count.
        b.read(done(id, REFRESH_MS, 1_013));
        assert_eq!(b.estimate("t", REFRESH_MS), Some(1_013 + 5 + 7));
        assert_eq!(b.start_reading("t", REFRESH_MS), None);
        assert!(b.start_reading("t", 2 * REFRESH_MS).is_some());
    }

    #[test]
    fn a_settle_supersedes_a_reading_under_way_and_a_failed_one_is_asked_again() {
        let mut b = RunBytes::default();
        b.settle("t", 100, 0);
        let id = b.start_reading("t", REFRESH_MS).unwrap();
        b.settle("t", 500, REFRESH_MS + 1);
        b.read(done(id, REFRESH_MS, 100));
        assert_eq!(
            b.estimate("t", REFRESH_MS + 1),
            Some(500),
            "the older reading is dropped"
        );
        let id = b.start_reading("t", 3 * REFRESH_MS).unwrap();
        b.read(ReadDone {
            bytes: Err(crate::store::Error::Backend("down".into())),
            ..done(id, 3 * REFRESH_MS, 0)
        });
        assert_eq!(b.estimate("t", 3 * REFRESH_MS), Some(500));
        assert!(b.start_reading("t", 3 * REFRESH_MS).is_some());
    }
}
