//! A store that refuses writes (full disk, I/O error): what the actor does
//! until it writes again. See docs/RELIABILITY.md, "Store faults".
//!
//! - It notices from [`Operations::writable`](crate::store::Operations::writable) at each turn of the loop (the
//!   store tracks its last write: a trigger's insert, the writer's retry, a
//!   task save through the API).
//! - While down, no fire creates runs: a due fire timer only marks its
//!   task in `refire`, so does a fire whose runs or progress the store
//!   refused. The task's stored schedule is untouched, so when the store
//!   writes again the task is armed from it and its timer is due at once:
//!   the missed instants go through `catch_up` ([`crate::schedule::due`]),
//!   the same rule as after a restart, not a second copy of it.
//! - No attempt starts (their results could not be stored); attempts that
//!   end keep their results in `dirty`, one entry per run, until written;
//!   the writer retries its job with backoff. Memory stays bounded by the
//!   runs it already held.
//! - A probe write every [`PROBE_EVERY`] finds out when writes succeed
//!   again (through the store guard, which reopens sled if needed). A store
//!   that does not track whether it writes (always "writable") gets its
//!   held fires armed again at each probe instead, so none is lost.
//! - An ended run whose `after` runs the store refused keeps them to start
//!   again (their keys `after:<run id>` dedupe) once it writes; its own
//!   end is not written before them, so a crash meanwhile re-runs its last
//!   attempt rather than losing the `after` runs.
//! - If the store was reopened ([`Operations::generation`](crate::store::Operations::generation)), what it lost (the
//!   writes not yet on disk) is re-derived the way a crash is: the loop
//!   hands back its mailbox and the scheduler recovers a new actor from the
//!   store ([`crate::scheduler::Scheduler::start`]).

use super::{Actor, Timer};
use crate::model::Millis;
use crate::model::ids::TaskKey;

/// How often a write is tried while the store refuses them.
pub(super) const PROBE_EVERY: Millis = 1_000;

/// The metadata key the probe writes (the time of the probe).
const PROBE_KEY: &str = "write_probe";

impl Actor {
    /// Follows the store's state at a turn of the loop; true if it was
    /// reopened (memory is stale: start over from the store).
    pub(super) fn check_store(&mut self) -> bool {
        if self.store.generation() != self.generation {
            tracing::warn!("the store was reopened after a fault; recovering from it");
            return true;
        }
        let writable = self.store.writable();
        if self.down && writable {
            self.down = false;
            tracing::info!(
                tasks = self.refire.len(),
                "the store writes again: firing and dispatch resume"
            );
            self.rearm_held();
        } else if !self.down && !writable {
            self.down = true;
            tracing::error!(
                "the store refuses writes: fires and new attempts pause until it writes again"
            );
            self.ensure_probe();
        }
        false
    }

    /// Arms the tasks whose fires were held, from their stored schedules
    /// (missed instants per `catch_up`).
    fn rearm_held(&mut self) {
        let now = self.clock.now_ms();
        for id in std::mem::take(&mut self.after_refire) {
            match self.finished.get(&id).cloned() {
                Some(rec) => self.fire_after(&rec, now),
                None => {
                    tracing::error!(run = %id, "an ended run to start `after` tasks of is gone")
                }
            }
        }
        for key in std::mem::take(&mut self.refire) {
            let TaskKey { tenant, task } = key;
            if let Err(e) = self.on_task_changed(&tenant, &task) {
                tracing::error!(%tenant, %task, error = %e, "cannot arm the trigger again");
                self.refire.insert(TaskKey { tenant, task });
                self.ensure_probe();
            }
        }
    }

    /// A fire of `key` due (or refused) while the store refuses writes:
    /// taken up again once it writes, or at the next probe for a store that
    /// does not say whether it writes ([`Operations::writable`](crate::store::Operations::writable)).
    pub(super) fn hold_fire(&mut self, key: TaskKey) {
        self.disarm_fire(&key.tenant, &key.task);
        self.refire.insert(key);
        self.ensure_probe();
    }

    /// The `after` runs `upstream` started were refused for now: started
    /// again once the store writes (its own write waits until then).
    pub(super) fn hold_after(&mut self, upstream: String) {
        self.after_refire.insert(upstream);
        self.ensure_probe();
    }

    /// Sets the probe timer unless it is set.
    fn ensure_probe(&mut self) {
        if !self.probing {
            self.probing = true;
            let now = self.clock.now_ms();
            self.timers.insert((now + PROBE_EVERY, Timer::Probe));
        }
    }

    /// The probe timer: while down, one small write (its outcome is what
    /// [`Actor::check_store`] reads next); otherwise the held fires are
    /// armed again.
    pub(super) fn probe(&mut self, now: Millis) {
        self.probing = false;
        if !self.down {
            return self.rearm_held();
        }
        if let Err(e) = self.store.put_meta(PROBE_KEY, &now.to_string()) {
            tracing::debug!(error = %e, "the store still refuses writes");
        }
        self.ensure_probe();
    }
}
