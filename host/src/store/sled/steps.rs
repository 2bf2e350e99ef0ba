//! The step runs of a large run, stored apart (store format 5).
//!
//! A run record held every step run and was rewritten whole at every state
//! change, so a run of N steps cost O(N) bytes encoded and written per
//! change, O(N²) over its life. A run of more than [`INLINE_STEPS`] steps
//! now keeps them under their own keys:
//!
//! | key | value |
//! |---|---|
//! | `run/{id}` | the run without its steps, its head saying how many (`step_count`) |
//! | `step/{id}/{index:05}` | step run `index` (compact since format 8, `compact.rs`; JSON before) |
//!
//! and a write stores the record and only the steps that changed
//! ([`crate::store::Changed`], which the scheduler's run writer computes),
//! in the one batch that checks the revision. Runs of at most
//! [`INLINE_STEPS`] steps (most runs) keep them in the record: two keys
//! instead of one would cost a small run more than rewriting its steps.
//!
//! Reading joins the steps back. Reads take no lock, so the record is read
//! again after its steps: the same revision means no write came between
//! (every write of a run moves its revision, and a sled batch is seen whole
//! or not at all), otherwise it reads again.

use std::collections::HashMap;

use super::compact;
use super::engine::Batch;
use super::footprint::{Weight, signed};
use super::keys::{decode, key};
use super::{SledStore, engine_error};
use crate::model::{RunRecord, StepRunRecord};
use crate::store::{Changed, Error, Result};

/// Runs with more steps than this store them apart.
pub(super) const INLINE_STEPS: usize = 8;

/// How often a read starts over when writes keep moving the run under it.
const READ_TRIES: usize = 16;

/// Whether a run of `steps` steps stores them apart.
pub(super) fn apart(steps: usize) -> bool {
    steps > INLINE_STEPS
}

fn step_key(run_id: &str, index: usize) -> Vec<u8> {
    key("step", &[run_id, &format!("{index:05}")])
}

/// The prefix of every step key of run `run_id`.
pub(super) fn steps_prefix(run_id: &str) -> Vec<u8> {
    key("step", &[run_id])
}

/// The encoded steps of `run` a write stores: those `changed` names.
pub(super) fn encode_changed(run: &RunRecord, changed: &Changed) -> Result<Vec<(usize, Vec<u8>)>> {
    run.steps
        .iter()
        .enumerate()
        .filter(|(i, _)| changed.has(*i))
        .map(|(i, step)| Ok((i, compact::encode_step(step)?)))
        .collect()
}

impl SledStore {
    /// Decodes the stored run `bytes` (at `run_key`) whose `count` steps
    /// are stored apart, joined; `None` when the run was deleted meanwhile.
    pub(super) fn decode_apart(
        &self,
        run_key: &[u8],
        bytes: &[u8],
        count: usize,
    ) -> Result<Option<RunRecord>> {
        let mut current: super::engine::Value = bytes.into();
        let mut count = count;
        for _ in 0..READ_TRIES {
            let Some(mut run) = self.decode_record(run_key, &current)? else {
                return Ok(None);
            };
            let steps = self.read_steps(&run.id)?;
            let Some(again) = self.db.get(run_key).map_err(engine_error)? else {
                return Ok(None);
            };
            if again == current {
                if steps.len() != count {
                    return Err(Error::Corrupt {
                        key: super::keys::show_key(run_key),
                        reason: format!("it has {count} steps; {} are stored", steps.len()),
                    });
                }
                run.steps = steps;
                return Ok(Some(run));
            }
            count = match super::definitions::head(&again).and_then(|h| h.step_count) {
                Some(count) => count,
                None => return self.decode_run(run_key, &again),
            };
            current = again;
        }
        Err(Error::Unavailable(format!(
            "run {} changed under {READ_TRIES} reads in a row",
            super::keys::show_key(run_key)
        )))
    }

    /// The steps of run `run_id` stored apart, in order.
    fn read_steps(&self, run_id: &str) -> Result<Vec<StepRunRecord>> {
        self.scan(&steps_prefix(run_id))
            .map(|item| {
                let (k, v) = item?;
                match compact::is_compact(&v) {
                    true => compact::decode_step(&k, &v),
                    false => decode(&k, &v),
                }
            })
            .collect()
    }

    /// Adds the steps of a write of `run` to `batch` and their bytes to
    /// `weight`: `encoded`, the changed ones; `apart`, whether the run keeps
    /// them apart now; `stored`, how many it kept apart before (`None`:
    /// in its record). Steps the stored record did not keep apart are
    /// written whether changed or not, and keys past the last step removed.
    /// The caller holds `run_lock`.
    pub(super) fn step_changes(
        &self,
        batch: &mut Batch,
        weight: &mut Weight,
        run: &RunRecord,
        encoded: Vec<(usize, Vec<u8>)>,
        stored: Option<usize>,
    ) -> Result<()> {
        let now = if apart(run.steps.len()) {
            run.steps.len()
        } else {
            0
        };
        let before = stored.unwrap_or(0);
        let mut given: HashMap<usize, Vec<u8>> = encoded.into_iter().collect();
        for index in 0..now {
            let value = match given.remove(&index) {
                Some(value) => value,
                None if stored.is_none() || index >= before => {
                    compact::encode_step(&run.steps[index])?
                }
                None => continue,
            };
            let step_key = step_key(&run.id, index);
            if index < before {
                weight.add(&run.tenant, -self.stored_len(&step_key)?);
            }
            weight.add(&run.tenant, signed(value.len()));
            batch.insert(step_key, value);
        }
        for index in now..before {
            let step_key = step_key(&run.id, index);
            weight.add(&run.tenant, -self.stored_len(&step_key)?);
            batch.remove(step_key);
        }
        Ok(())
    }

    fn stored_len(&self, k: &[u8]) -> Result<i64> {
        Ok(self
            .db
            .get(k)
            .map_err(engine_error)?
            .map_or(0, |v| signed(v.len())))
    }
}
