//! Large run inputs stored apart (issue 31): in chunks in sled (store format
//! 5), and the largest in files (format 7).
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
//! which the cache weighs as they are. Chunks still pass through sled's cache
//! and its write buffers: a queue of runs with inputs of hundreds of KiB kept
//! the server ~110 MiB larger (44 MB of cached chunks, 20 MB of segment
//! buffers), over the 100 MB. So an input over [`FILE_INPUT`] bytes
//! is a file of the data directory, read when the run is read:
//!
//! | file | content |
//! |---|---|
//! | `inputs/{run}` | the encoded input (format byte, JSON), written atomically |
//!
//! and the record holds `"input_bytes":N`, the file's length, checked when
//! it is read. Its memory is the kernel's page cache, not the server's. The
//! file is written (and synced) before the batch that stores its run, and
//! removed after the batch that deletes it: a crash in between leaves a file
//! no record names, which the next open removes ([`remove_orphan_inputs`]).
//! An insert writes its runs' files before it takes the claim lock, so their
//! syncs (~0.4 ms each here) do not hold other inserts.
//!
//! A run's input never changes after its insert (`scheduler/actor/spill.rs`),
//! so writes leave it where it is; a record of an earlier format holding a
//! large input, or chunks over [`FILE_INPUT`], moves it at its next write.

use std::fs;
use std::path::PathBuf;

use serde_json::Value;

use super::blobs::{remove_file_if_present, write_atomically};
use super::definitions::head;
use super::engine::Batch;
use super::footprint::{Weight, signed};
use super::keys::{decode, encode, key, show_key};
use super::{SledStore, engine_error};
use crate::model::{RunRecord, json_len};
use crate::store::{Error, Result};

/// Inputs up to this many bytes of JSON stay in the record.
pub(super) const INLINE_INPUT: u64 = 4 << 10;

/// Inputs over this many bytes of JSON are files; between the two, chunks.
pub(super) const FILE_INPUT: u64 = 64 << 10;

/// The largest chunk: 16 of them (what sled keeps in a leaf before it
/// splits it) stay far below the size sled writes as a blob.
const CHUNK: usize = 4 << 10;

/// The folder of input files in a data directory.
pub(super) const INPUTS_DIR: &str = "inputs";

/// Where a run's input is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Input {
    /// In the record.
    #[default]
    Inline,
    /// In this many chunks under `inp/{run}/`.
    Chunks(usize),
    /// In `inputs/{run}`, of this many bytes.
    File(u64),
}

/// Where `input` is stored: counted, not encoded (a write of a run names
/// its input's place but stores it only when it is not stored yet).
pub(super) fn place(input: &Value) -> Input {
    let len = json_len(input);
    // The encoded value: a format byte, then the JSON.
    if len > FILE_INPUT {
        Input::File(len + 1)
    } else if len > INLINE_INPUT {
        Input::Chunks((len as usize + 1).div_ceil(CHUNK))
    } else {
        Input::Inline
    }
}

/// The chunks `input` is stored in.
fn chunks(input: &Value) -> Result<Vec<Vec<u8>>> {
    Ok(encode(input)?.chunks(CHUNK).map(<[u8]>::to_vec).collect())
}

fn chunk_key(run_id: &str, n: usize) -> Vec<u8> {
    key("inp", &[run_id, &format!("{n:05}")])
}

/// The file name of run `run_id`'s input: the id when it is made of
/// letters, digits, `-` and `_` (as the ids ax makes are), else `~` and its
/// hex, so that no id names a path outside `inputs/`.
fn file_name(run_id: &str) -> String {
    let plain = !run_id.is_empty()
        && run_id.len() <= 128
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        run_id.to_owned()
    } else {
        let hex: String = run_id.bytes().map(|b| format!("{b:02x}")).collect();
        format!("~{hex}")
    }
}

/// The run id a file of `inputs/` is named after ([`file_name`]).
fn run_of(name: &str) -> Option<String> {
    match name.strip_prefix('~') {
        Some(hex) => {
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(name.to_owned()),
    }
}

impl SledStore {
    fn input_path(&self, run_id: &str) -> PathBuf {
        self.dir.join(INPUTS_DIR).join(file_name(run_id))
    }

    /// Writes the file of `run`'s input (at `place`) unless it is there
    /// already, whole: an insert writes it before taking its lock, and again
    /// under the lock only if it is missing.
    pub(super) fn write_input_file(&self, run: &RunRecord, place: Input) -> Result<()> {
        let Input::File(len) = place else {
            return Ok(());
        };
        let path = self.input_path(&run.id);
        if fs::metadata(&path).is_ok_and(|m| m.len() == len) {
            return Ok(());
        }
        let n = self
            .tmp_counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".tmp-{}-{n}", std::process::id()));
        write_atomically(&path, &tmp, &encode(&run.input)?)?;
        Ok(())
    }

    /// Stores the input of `run` at `place`: its chunks added to `batch`, or
    /// its file written; its bytes added to `weight`.
    pub(super) fn put_input(
        &self,
        batch: &mut Batch,
        weight: &mut Weight,
        run: &RunRecord,
        place: Input,
    ) -> Result<()> {
        match place {
            Input::Inline => {}
            Input::Chunks(_) => {
                for (n, chunk) in chunks(&run.input)?.into_iter().enumerate() {
                    weight.add(&run.tenant, signed(chunk.len()));
                    batch.insert(chunk_key(&run.id, n), chunk);
                }
            }
            Input::File(len) => {
                self.write_input_file(run, place)?;
                weight.add(&run.tenant, len as i64);
            }
        }
        Ok(())
    }

    /// Removes the input of run `run_id`, stored at `place`, in `batch` and
    /// `weight`. A file is only uncounted: [`Self::remove_input_file`]
    /// removes it once the batch is applied.
    pub(super) fn remove_input(
        &self,
        batch: &mut Batch,
        weight: &mut Weight,
        tenant: &str,
        run_id: &str,
        place: Input,
    ) -> Result<()> {
        match place {
            Input::Inline => {}
            Input::Chunks(_) => {
                for item in self.scan(&key("inp", &[run_id])) {
                    let (k, v) = item?;
                    weight.add(tenant, -signed(v.len()));
                    batch.remove(k);
                }
            }
            Input::File(len) => weight.add(tenant, -(len as i64)),
        }
        Ok(())
    }

    /// Removes the file of run `run_id`'s input, if there is one.
    pub(super) fn remove_input_file(&self, run_id: &str) -> Result<()> {
        remove_file_if_present(&self.input_path(run_id))
    }

    /// The input of run `run_id` (at `run_key`) stored apart at `place`;
    /// `None` when the run was deleted meanwhile.
    pub(super) fn read_input(
        &self,
        run_key: &[u8],
        run_id: &str,
        place: Input,
    ) -> Result<Option<Value>> {
        let bytes = match place {
            Input::Inline => return Ok(None),
            Input::Chunks(parts) => {
                let mut bytes = Vec::new();
                let mut found = 0;
                for item in self.scan(&key("inp", &[run_id])) {
                    bytes.extend_from_slice(&item?.1);
                    found += 1;
                }
                if found != parts {
                    return self.input_gone(
                        run_key,
                        format!("its input is in {parts} parts; {found} are stored"),
                    );
                }
                bytes
            }
            Input::File(len) => match fs::read(self.input_path(run_id)) {
                Ok(bytes) if bytes.len() as u64 == len => bytes,
                Ok(bytes) => {
                    return self.input_gone(
                        run_key,
                        format!(
                            "its input file {INPUTS_DIR}/{} holds {} bytes, not {len}",
                            file_name(run_id),
                            bytes.len()
                        ),
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return self.input_gone(
                        run_key,
                        format!(
                            "its input file {INPUTS_DIR}/{} is missing",
                            file_name(run_id)
                        ),
                    );
                }
                Err(e) => return Err(e.into()),
            },
        };
        decode(run_key, &bytes).map(Some)
    }

    /// `None` when the run at `run_key` was deleted since its record was
    /// read (its input went with it), else the input is damaged: `reason`.
    fn input_gone(&self, run_key: &[u8], reason: String) -> Result<Option<Value>> {
        if !self.db.contains_key(run_key).map_err(engine_error)? {
            return Ok(None);
        }
        Err(Error::Corrupt {
            key: show_key(run_key),
            reason,
        })
    }
}

/// At open, before anything else writes: removes the files of `inputs/`
/// that no run record names (a crash between a file and its batch, or
/// between a delete and its file's removal), and temporary files. Creates
/// the folder when it is missing.
pub(super) fn remove_orphan_inputs(store: &SledStore) -> Result<()> {
    let dir = store.dir.join(INPUTS_DIR);
    fs::create_dir_all(&dir)?;
    for entry in fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_named(store, &name)? {
            remove_file_if_present(&entry.path())?;
        }
    }
    Ok(())
}

/// Whether a stored run record names the file `name` of `inputs/`.
fn is_named(store: &SledStore, name: &str) -> Result<bool> {
    if name.starts_with(".tmp-") {
        return Ok(false);
    }
    let Some(run_id) = run_of(name) else {
        return Ok(false);
    };
    if file_name(&run_id) != name {
        return Ok(false);
    }
    let record = store.db.get(key("run", &[&run_id])).map_err(engine_error)?;
    Ok(record.is_some_and(|r| head(&r).is_some_and(|h| matches!(h.input, Input::File(_)))))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{files_under, new_run, run};
    use super::super::keys::key;
    use super::*;
    use crate::model::RunStatus;
    use crate::store::Insert;
    use crate::store::prelude::*;

    /// The record of run `id` as stored.
    fn record(store: &SledStore, id: &str) -> super::super::engine::Value {
        store.db.get(key("run", &[id])).unwrap().unwrap()
    }

    /// A large input is stored in chunks no larger than [`CHUNK`], not in
    /// the record; a record of an earlier format holding one gets its
    /// chunks at its next write.
    #[test]
    fn a_large_input_is_kept_in_small_chunks_out_of_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let mut r = run("r1", RunStatus::Queued);
        r.input = json!({"blob": "x".repeat(40_000)});
        store.insert_run(&r, false, None, &[]).unwrap();
        let stored = record(&store, "r1");
        assert!(stored.len() < 2_000, "{} bytes in the record", stored.len());
        let chunks: Vec<usize> = store
            .scan(&key("inp", &["r1"]))
            .map(|item| item.unwrap().1.len())
            .collect();
        assert_eq!(chunks.len(), 40_012_usize.div_ceil(CHUNK), "{chunks:?}");
        assert!(chunks.iter().all(|len| *len <= CHUNK));
        assert_eq!(store.get_run("r1").unwrap(), Some(r.clone()));

        // As a record of format 4 held it: inline, no chunks.
        let mut batch = Batch::default();
        for item in store.scan(&key("inp", &["r1"])) {
            batch.remove(item.unwrap().0);
        }
        let digest = head(&stored).and_then(|h| h.def).unwrap().into_owned();
        let inline =
            super::super::definitions::json::encode_run(&r, &digest, Default::default()).unwrap();
        batch.insert(key("run", &["r1"]), inline);
        store.db.apply_batch(batch).unwrap();
        assert_eq!(store.get_run("r1").unwrap(), Some(r.clone()));
        r.status = RunStatus::Running;
        store.update_run(&mut r, &[]).unwrap();
        assert_eq!(store.scan(&key("inp", &["r1"])).count(), chunks.len());
        assert!(record(&store, "r1").len() < 2_000);
        assert_eq!(store.get_run("r1").unwrap(), Some(r));
    }

    /// An input over [`FILE_INPUT`] is a file of `inputs/` named after its
    /// run, counted in the tenant's run bytes, read back whole, and removed
    /// with its run; a damaged or missing file is reported, not a panic.
    #[test]
    fn the_largest_inputs_are_files_removed_with_their_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let inputs = dir.path().join(INPUTS_DIR);
        let mut r = run("r1", RunStatus::Queued);
        r.input = json!({"blob": "y".repeat(300_000)});
        let before = store.run_bytes("t1").unwrap();
        store.insert_run(&r, false, None, &[]).unwrap();
        assert!(record(&store, "r1").len() < 2_000);
        assert_eq!(store.scan(&key("inp", &["r1"])).count(), 0, "no chunks");
        assert_eq!(files_under(&inputs), vec![inputs.join("r1")]);
        let len = fs::metadata(inputs.join("r1")).unwrap().len();
        assert_eq!(len, 300_012, "a format byte and the JSON");
        assert!(store.run_bytes("t1").unwrap() >= before + len);
        assert_eq!(store.get_run("r1").unwrap(), Some(r.clone()));

        // Writes leave the file as it is.
        r.status = RunStatus::Running;
        store.update_run(&mut r, &[]).unwrap();
        assert_eq!(store.get_run("r1").unwrap(), Some(r.clone()));

        fs::write(inputs.join("r1"), b"short").unwrap();
        let err = store.get_run("r1").unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("holds 5 bytes"), "{err}");
        fs::remove_file(inputs.join("r1")).unwrap();
        let err = store.get_run("r1").unwrap_err();
        assert!(err.to_string().contains("is missing"), "{err}");
        fs::write(inputs.join("r1"), encode(&r.input).unwrap()).unwrap();

        r.status = RunStatus::Succeeded;
        store.update_run(&mut r, &[]).unwrap();
        assert!(store.delete_run("r1").unwrap());
        assert!(files_under(&inputs).is_empty());
        assert_eq!(store.run_bytes("t1").unwrap(), before);
    }

    /// A run whose insert is refused (its idempotency key is taken) leaves
    /// no file; files no record names (a crash between a file and its
    /// batch) and temporary files are removed at the next open; ids that
    /// are not plain names are stored under their hex.
    #[test]
    fn files_no_run_names_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = dir.path().join(INPUTS_DIR);
        let big = json!({"blob": "z".repeat(100_000)});
        {
            let store = SledStore::open(dir.path()).unwrap();
            let mut first = run("a/b", RunStatus::Queued);
            first.input = big.clone();
            first.idempotency_key = Some("k".to_owned());
            let mut second = first.clone();
            second.id = "r2".to_owned().into();
            let outcomes = store
                .insert_runs(&[new_run(first.clone()), new_run(second)])
                .unwrap();
            assert_eq!(outcomes[0], Insert::Created);
            assert!(matches!(outcomes[1], Insert::Existing(_)));
            let name = file_name("a/b");
            assert_eq!(name, "~612f62");
            assert_eq!(run_of(&name).as_deref(), Some("a/b"));
            assert_eq!(files_under(&inputs), vec![inputs.join(&name)]);
            assert_eq!(store.get_run("a/b").unwrap(), Some(first));
        }
        for stray in ["r9", ".tmp-1-2", "~zz", "~612f62"] {
            if stray != "~612f62" {
                fs::write(inputs.join(stray), b"x").unwrap();
            }
        }
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(files_under(&inputs), vec![inputs.join("~612f62")]);
        assert_eq!(store.get_run("a/b").unwrap().unwrap().input, big);
    }

    /// A store of format 6 kept inputs of any size in chunks: a run with
    /// chunks over [`FILE_INPUT`] moves them to a file at its next write.
    #[test]
    fn chunks_of_an_earlier_format_move_to_a_file_at_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let inputs = dir.path().join(INPUTS_DIR);
        let mut r = run("r1", RunStatus::Queued);
        r.input = json!({"blob": "w".repeat(200_000)});
        store.insert_run(&r, false, None, &[]).unwrap();
        // As format 6 stored it: chunks, no file.
        let digest = head(&record(&store, "r1"))
            .and_then(|h| h.def)
            .unwrap()
            .into_owned();
        let parts = 200_012_usize.div_ceil(CHUNK);
        let shape = super::super::definitions::Shape {
            steps_apart: false,
            input: Input::Chunks(parts),
        };
        let mut batch = Batch::default();
        let mut weight = Weight::default();
        store
            .put_input(&mut batch, &mut weight, &r, Input::Chunks(parts))
            .unwrap();
        batch.insert(
            key("run", &["r1"]),
            super::super::definitions::json::encode_run(&r, &digest, shape).unwrap(),
        );
        store.db.apply_batch(batch).unwrap();
        fs::remove_file(inputs.join("r1")).unwrap();
        assert_eq!(store.get_run("r1").unwrap(), Some(r.clone()));

        r.status = RunStatus::Running;
        store.update_run(&mut r, &[]).unwrap();
        assert_eq!(store.scan(&key("inp", &["r1"])).count(), 0);
        assert_eq!(files_under(&inputs), vec![inputs.join("r1")]);
        assert_eq!(store.get_run("r1").unwrap(), Some(r));
    }
}
