//! Spilled inputs: the queue head holds what dispatch needs, not the payload
//! (issue 31, item 3).
//!
//! A queued run held in memory (the head, `parked`) keeps its whole record,
//! and its input is most of it: a tenant queueing runs of large inputs grew
//! the server by `queue_head` × `max_input_bytes` (1,000 runs × 1 MiB = 1 GB
//! for one tenant whose cap the admin raised). Nothing decides anything from
//! a queued run's input until one of its steps starts (its input template,
//! `${input.x}`) or a `when` condition reads it, so it need not be resident
//! until then.
//!
//! The rule, kept here and nowhere else:
//! - A run is *spilled* once its record is stored and it waits queued with
//!   nothing under way (no condition being evaluated, no attempt out), if its
//!   input weighs more than [`SPILL_BYTES`] as JSON: `rec.input` is replaced
//!   by `null` in memory and the run's id kept in `Actor::spilled`. This is
//!   done where a queued run's record is handed to the writer (`write.rs`:
//!   the write carries the whole input) and where a stored run is taken up
//!   with nothing to write (`parked.rs`, `recovery.rs`). The stored record
//!   is never changed: its input is the truth, and a run's input never
//!   changes after its insert, so any stored copy has it.
//! - [`Actor::unspill`] reads the input back from the store before anything
//!   uses or hands out the record: an attempt's start (`attempts.rs`), a
//!   condition's data (`advance.rs`), a cancel's answer (`control.rs`), and
//!   every write of the run (`write.rs`) — a spilled record written as it is
//!   would lose the stored input, so the write path restores it (and a debug
//!   assertion checks it). Reopened runs are read whole from the store.
//! - The cost: one store read (tens of µs) at the first start of a run with
//!   a large input; small inputs are never spilled and pay nothing. Memory
//!   with a full head no longer depends on input size
//!   (docs/PERFORMANCE.md, *Queued inputs*).

use super::Actor;
use crate::model::RunStatus;
use crate::scheduler::{Error, Result};

/// Inputs larger than this (compact JSON bytes) are spilled while their run
/// waits queued. Small enough that a head of 1,000 runs holds at most ~1 MB
/// of inputs; large enough that the usual small inputs cost no read.
pub(super) const SPILL_BYTES: u64 = 1 << 10;

impl Actor {
    /// Spills run `id`'s input if it waits queued with nothing under way, is
    /// not waiting to be written, and its input is large (module doc).
    pub(super) fn spill(&mut self, id: &str) {
        if self.spilled.contains(id) || self.dirty.runs.contains_key(id) {
            return;
        }
        let Some(run) = self.runs.get_mut(id) else {
            return;
        };
        if run.rec.status != RunStatus::Queued
            || !run.evaluating.is_empty()
            || !run.cancels.is_empty()
            || crate::model::json_len(&run.rec.input) <= SPILL_BYTES
        {
            return;
        }
        run.state.rec.input = serde_json::Value::Null;
        self.spilled.insert(id.to_string());
    }

    /// Puts run `id`'s input back from the store if it was spilled: to be
    /// called before its record is used, handed out or written.
    pub(super) fn unspill(&mut self, id: &str) -> Result<()> {
        if !self.spilled.contains(id) {
            return Ok(());
        }
        let input = self
            .store
            .get_run(id)?
            .ok_or_else(|| Error::NotFound(format!("run `{id}` in the store")))?
            .input;
        match self.runs.get_mut(id) {
            Some(run) => run.state.rec.input = input,
            None => {
                if let Some(rec) = self.finished.get_mut(id) {
                    rec.input = input;
                }
            }
        }
        self.spilled.remove(id);
        Ok(())
    }
}
