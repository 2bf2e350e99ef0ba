//! Large run inputs stored apart, in chunks (store format 5; issue 31).
//!
//! sled weighs a page in its cache by the bytes it logged for it, and a value
//! over a quarter of its 512 KiB segment is logged as a separate blob whose
//! log item is a pointer of a few bytes: a leaf holding such values is all
//! but weightless to the cache and never evicted. Runs with inputs of tens
//! or hundreds of KiB therefore grew the server by what they stored, whatever
//! `store.cache_mb` said (docs/PERFORMANCE.md, *Queued inputs*). An input
//! over [`INLINE_INPUT`] bytes of JSON is now kept under
//!
//! | key | value |
//! |---|---|
//! | `inp/{run}/{n:05}` | chunk `n` of the encoded input, at most [`CHUNK`] bytes |
//!
//! and the record holds `"input_parts":N` instead of the input: small values,
//! which the cache weighs as they are. A run's input never changes after its
//! insert (`scheduler/actor/spill.rs`), so writes leave the chunks alone and
//! no longer rewrite the input either; a record of an earlier format holding
//! a large input gets its chunks at its next write.

use serde_json::Value;

use super::footprint::{Weight, signed};
use super::keys::{decode, encode, key, show_key};
use super::{SledStore, sled_error};
use crate::model::{RunRecord, json_len};
use crate::store::{Error, Result};

/// Inputs up to this many bytes of JSON stay in the record.
pub(super) const INLINE_INPUT: u64 = 4 << 10;

/// The largest chunk: 16 of them (what sled keeps in a leaf before it
/// splits it) stay far below the size sled writes as a blob.
const CHUNK: usize = 4 << 10;

/// How many chunks `input` is stored in, or `None` when it stays in the
/// record: counted, not encoded (a write of a run names its input's chunks
/// but stores them only when they are not stored yet).
pub(super) fn parts(input: &Value) -> Option<usize> {
    let len = json_len(input);
    // The encoded value: a format byte, then the JSON.
    (len > INLINE_INPUT).then(|| (len as usize + 1).div_ceil(CHUNK))
}

/// The chunks `input` is stored in ([`parts`] of them).
fn chunks(input: &Value) -> Result<Vec<Vec<u8>>> {
    Ok(encode(input)?.chunks(CHUNK).map(<[u8]>::to_vec).collect())
}

fn chunk_key(run_id: &str, n: usize) -> Vec<u8> {
    key("inp", &[run_id, &format!("{n:05}")])
}

impl SledStore {
    /// Adds the chunks of the input of `run` to `batch`.
    pub(super) fn put_input(
        &self,
        batch: &mut sled::Batch,
        weight: &mut Weight,
        run: &RunRecord,
    ) -> Result<()> {
        for (n, chunk) in chunks(&run.input)?.into_iter().enumerate() {
            weight.add(&run.tenant, signed(chunk.len()));
            batch.insert(chunk_key(&run.id, n), chunk);
        }
        Ok(())
    }

    /// Removes the chunks of the input of run `run_id` in `batch`.
    pub(super) fn remove_input(
        &self,
        batch: &mut sled::Batch,
        weight: &mut Weight,
        tenant: &str,
        run_id: &str,
    ) -> Result<()> {
        for item in self.scan(&key("inp", &[run_id])) {
            let (k, v) = item?;
            weight.add(tenant, -signed(v.len()));
            batch.remove(k);
        }
        Ok(())
    }

    /// The input of run `run_id` (at `run_key`) stored in `parts` chunks;
    /// `None` when the run was deleted meanwhile.
    pub(super) fn read_input(
        &self,
        run_key: &[u8],
        run_id: &str,
        parts: usize,
    ) -> Result<Option<Value>> {
        let mut bytes = Vec::new();
        let mut found = 0;
        for item in self.scan(&key("inp", &[run_id])) {
            bytes.extend_from_slice(&item?.1);
            found += 1;
        }
        if found != parts {
            if !self.db.contains_key(run_key).map_err(sled_error)? {
                return Ok(None);
            }
            return Err(Error::Corrupt {
                key: show_key(run_key),
                reason: format!("its input is in {parts} parts; {found} are stored"),
            });
        }
        decode(run_key, &bytes).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::run;
    use super::super::keys::key;
    use super::*;
    use crate::model::RunStatus;
    use crate::store::prelude::*;

    /// A large input is stored in chunks no larger than [`CHUNK`], not in
    /// the record; a record of an earlier format holding one gets its
    /// chunks at its next write.
    #[test]
    fn a_large_input_is_kept_in_small_chunks_out_of_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let mut r = run("r1", RunStatus::Queued);
        r.input = json!({"blob": "x".repeat(100_000)});
        store.insert_run(&r, false, None, &[]).unwrap();
        let record = store.db.get(key("run", &["r1"])).unwrap().unwrap();
        assert!(record.len() < 2_000, "{} bytes in the record", record.len());
        let chunks: Vec<usize> = store
            .scan(&key("inp", &["r1"]))
            .map(|item| item.unwrap().1.len())
            .collect();
        assert_eq!(chunks.len(), 100_012_usize.div_ceil(CHUNK), "{chunks:?}");
        assert!(chunks.iter().all(|len| *len <= CHUNK));
        assert_eq!(store.get_run("r1").unwrap(), Some(r.clone()));

        // As a record of format 4 held it: inline, no chunks.
        let mut batch = sled::Batch::default();
        for item in store.scan(&key("inp", &["r1"])) {
            batch.remove(item.unwrap().0);
        }
        let digest = super::super::definitions::head(&record)
            .and_then(|h| h.def)
            .unwrap()
            .to_owned();
        let inline =
            super::super::definitions::encode_run(&r, &digest, Default::default()).unwrap();
        batch.insert(key("run", &["r1"]), inline);
        store.db.apply_batch(batch).unwrap();
        assert_eq!(store.get_run("r1").unwrap(), Some(r.clone()));
        r.status = RunStatus::Running;
        store.update_run(&mut r, &[]).unwrap();
        assert_eq!(store.scan(&key("inp", &["r1"])).count(), chunks.len());
        assert!(store.db.get(key("run", &["r1"])).unwrap().unwrap().len() < 2_000);
        assert_eq!(store.get_run("r1").unwrap(), Some(r));
    }
}
