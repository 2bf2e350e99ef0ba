//! Which run of a dump holds a fire claimed by more than one of its runs,
//! and the order an import writes them in so that run gets it.
//!
//! A store keeps one run per fire (tenant, task, instant: [`claims_fire`]),
//! the first inserted with `unique_fire`; a run inserted after it without
//! `unique_fire` may claim the same instant and is stored without the
//! fire. An import gives a fire to the first run of it that it writes
//! ([`Runs::restore_runs`](crate::store::Runs::restore_runs), on every
//! store), and an export writes a task's runs newest first, so the newer
//! run would take the fire from the one that held it. The rule kept
//! instead: the run created first (the smallest id: ids sort by creation,
//! [`new_id`](crate::store::new_id)) holds it. [`Holders`] finds, while the
//! whole file is checked before anything is written, the fires more than
//! one run claims and the smallest id of each; the import then holds back
//! the other runs of such a fire until its holder is written, and writes
//! them right after it. One place for both import paths (the seam's
//! inserts and PostgreSQL's `COPY`s) and for the writers' rule that a batch
//! sharing a fire with one in flight waits for it: each only has to give
//! the fire to the first run written, as before.
//!
//! Can a store hold two runs for one fire? Not by the scheduler: runs of an
//! instant are made only by its fires (`scheduler/actor/fire.rs`, always
//! with `unique_fire`, so a second is refused while the first is stored,
//! and deleting the holder frees the fire with it); manual triggers and
//! `after` runs are `Manual` and `After`, which claim no fire, and a retry
//! reopens the same run. Only a direct write through the seam (a test,
//! another tool) or a hand-made dump has them; the rule makes their round
//! trip faithful when the first created is the first inserted.
//!
//! Fires are compared by a 128-bit hash (two keyed hashes), so the memory
//! is ~70 bytes per run that claims a fire, for the time of the check.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use crate::model::ids::RunId;
use crate::model::{Millis, RunRecord, TriggerKind};
use crate::store::{WholeRun, claims_fire, trigger_claims_fire};

/// A fire's 128-bit hash.
type Fire = u128;

/// The fires claimed by more than one run of a dump, with the run that
/// holds each.
pub(super) struct Holders {
    hashers: (RandomState, RandomState),
    /// While the file is read: every fire claimed, the smallest id claiming
    /// it, and whether another run claims it too. After
    /// ([`Holders::contested`]): only the fires claimed twice, the flag
    /// then saying that the holder is not written yet ([`Order`]).
    fires: HashMap<Fire, (RunId, bool)>,
}

impl Default for Holders {
    fn default() -> Self {
        Holders::new()
    }
}

impl Holders {
    pub(super) fn new() -> Self {
        Holders {
            hashers: (RandomState::new(), RandomState::new()),
            fires: HashMap::new(),
        }
    }

    fn fire(&self, run: &RunRecord) -> Option<Fire> {
        claims_fire(run).then(|| self.hash(&run.tenant, &run.task, run.scheduled_for))
    }

    fn hash(&self, tenant: &str, task: &str, at: Millis) -> Fire {
        let fire = (tenant, task, at);
        let (a, b) = (&self.hashers.0, &self.hashers.1);
        (u128::from(a.hash_one(fire)) << 64) | u128::from(b.hash_one(fire))
    }

    /// Notes the fire run `id` claims, if any: its trigger, tenant, task
    /// and instant (the whole-file check reads no [`RunRecord`]:
    /// `proof.rs`).
    pub(super) fn read(&mut self, id: &str, trigger: TriggerKind, fire: (&str, &str, Millis)) {
        if !trigger_claims_fire(trigger) {
            return;
        }
        let fire = self.hash(fire.0, fire.1, fire.2);
        self.fires
            .entry(fire)
            .and_modify(|(holder, twice)| {
                *twice = true;
                if id < holder.as_str() {
                    *holder = RunId::new(id);
                }
            })
            .or_insert_with(|| (RunId::new(id), false));
    }

    /// Keeps only the fires more than one run claims.
    pub(super) fn contested(mut self) -> Self {
        self.fires.retain(|_, (_, twice)| *twice);
        self.fires.shrink_to_fit();
        self
    }
}

/// Puts a dump's runs in the order an import writes them: a run claiming a
/// contested fire before its holder waits for it, and follows it.
pub(super) struct Order {
    holders: Holders,
    /// Runs waiting for their fire's holder, with their lines' sizes.
    waiting: HashMap<Fire, Vec<(WholeRun, usize)>>,
}

impl Order {
    pub(super) fn new(holders: Holders) -> Self {
        Order {
            holders,
            waiting: HashMap::new(),
        }
    }

    /// The runs to write now, given the next one read (with its line's
    /// size): none while it waits for its fire's holder, it and those
    /// waiting for it once it holds the fire, else it alone.
    pub(super) fn next(&mut self, whole: WholeRun, bytes: usize) -> Vec<(WholeRun, usize)> {
        let contested = self
            .holders
            .fire(&whole.run)
            .and_then(|fire| Some((fire, self.holders.fires.get_mut(&fire)?)));
        let Some((fire, (holder, unwritten))) = contested else {
            return vec![(whole, bytes)];
        };
        if !*unwritten {
            return vec![(whole, bytes)];
        }
        if whole.run.id != *holder {
            self.waiting.entry(fire).or_default().push((whole, bytes));
            return Vec::new();
        }
        *unwritten = false;
        let mut now = vec![(whole, bytes)];
        now.extend(self.waiting.remove(&fire).unwrap_or_default());
        now
    }

    /// Runs still waiting (a holder the file no longer holds: it changed
    /// since it was checked), in no particular order.
    pub(super) fn rest(&mut self) -> Vec<(WholeRun, usize)> {
        self.waiting.drain().flat_map(|(_, runs)| runs).collect()
    }
}
