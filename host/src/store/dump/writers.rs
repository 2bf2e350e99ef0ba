//! An import's batches of runs, two written at a time
//! ([`Runs::restore_runs`](crate::store::Runs::restore_runs) on a thread
//! each).
//!
//! One batch at a time left the database idle while ax encoded a batch,
//! and ax idle while the database stored it: on PostgreSQL each took about
//! half of an import (docs/PERFORMANCE.md, *Import: two batches at a
//! time*). Two batches in flight overlap the two, and a PostgreSQL store
//! writes them on two connections.
//!
//! # What stays as with one batch at a time
//! A batch is not started beside an earlier one still in flight that holds
//! the same run id, idempotency key or fire (tenant, task, instant) as it:
//! it waits for that batch to be stored first. So of two runs claiming one
//! fire, the first written still holds it (the importer writes the one to
//! hold it first: `fires.rs`), and a run held twice is
//! still found by the store's own check (the earlier one is committed) and
//! named, never met as a write that waited on the other's lock. (Claims are
//! compared by hash: a collision only makes a batch wait.) Batches that do
//! not share any of these write different rows, except the tenants' byte
//! counters, which a store locks in one order and which only make the later
//! batch's end wait for the earlier's commit.
//!
//! What changes: when a batch fails, the one after it may already be
//! stored, so a failed import may have written some runs after the one it
//! names (the error says so; an import fills an empty store, which is what
//! to go back to before a corrected dump).

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::thread::{Scope, ScopedJoinHandle};

use super::{Error, Result};
use crate::model::Millis;
use crate::model::ids::RunId;
use crate::store::{Store, WholeRun, claims_fire};

/// Batches in flight at most: one being encoded while one is stored (more
/// would only share the same 2 cores).
const IN_FLIGHT: usize = 2;

/// Writes batches of runs, [`IN_FLIGHT`] at a time, in threads of `scope`.
pub(super) struct Writers<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    store: &'env dyn Store,
    key_ttl: Millis,
    hasher: RandomState,
    /// Oldest first.
    flights: VecDeque<Flight<'scope>>,
}

/// A batch being written.
struct Flight<'scope> {
    claims: HashSet<u64>,
    handle: ScopedJoinHandle<'scope, crate::store::Result<Option<RunId>>>,
}

impl<'scope, 'env> Writers<'scope, 'env> {
    pub(super) fn new(
        scope: &'scope Scope<'scope, 'env>,
        store: &'env dyn Store,
        key_ttl: Millis,
    ) -> Self {
        Writers {
            scope,
            store,
            key_ttl,
            hasher: RandomState::new(),
            flights: VecDeque::with_capacity(IN_FLIGHT),
        }
    }

    /// Starts writing `runs`, once a writer is free and no batch in flight
    /// claims what one of them does. Fails with an earlier batch's error.
    pub(super) fn write(&mut self, runs: Vec<WholeRun>) -> Result<()> {
        let claims = self.claims(&runs);
        if self.flights.len() >= IN_FLIGHT {
            self.land_oldest()?;
        }
        if self.flights.iter().any(|f| !f.claims.is_disjoint(&claims)) {
            self.land()?;
        }
        let (store, key_ttl) = (self.store, self.key_ttl);
        let handle = self.scope.spawn(move || store.restore_runs(runs, key_ttl));
        self.flights.push_back(Flight { claims, handle });
        Ok(())
    }

    /// Waits for every batch in flight to be stored; the first error, in
    /// the dump's order, once all have ended.
    pub(super) fn land(&mut self) -> Result<()> {
        let mut first = Ok(());
        while !self.flights.is_empty() {
            let landed = self.land_oldest();
            if first.is_ok() {
                first = landed;
            }
        }
        first
    }

    fn land_oldest(&mut self) -> Result<()> {
        let Some(flight) = self.flights.pop_front() else {
            return Ok(());
        };
        // A writer that panicked: the panic is the import's.
        let landed = flight
            .handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match landed? {
            None => Ok(()),
            Some(id) => Err(Error::Twice(id.to_string())),
        }
    }

    /// The hashes of the ids, idempotency keys and fires `runs` claim.
    fn claims(&self, runs: &[WholeRun]) -> HashSet<u64> {
        let mut claims = HashSet::with_capacity(runs.len() * 2);
        for run in runs.iter().map(|w| &w.run) {
            claims.insert(self.hasher.hash_one(("id", run.id.as_str())));
            if let Some(key) = &run.idempotency_key {
                let key = (run.tenant.as_str(), run.task.as_str(), key.as_str());
                claims.insert(self.hasher.hash_one(("key", key)));
            }
            if claims_fire(run) {
                let fire = (run.tenant.as_str(), run.task.as_str(), run.scheduled_for);
                claims.insert(self.hasher.hash_one(("fire", fire)));
            }
        }
        claims
    }
}
