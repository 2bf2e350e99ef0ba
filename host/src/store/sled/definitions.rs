//! Task definitions stored once, apart from the runs made from them (store
//! format 4).
//!
//! A run record used to carry the whole task definition it was started from
//! (its largest part), so every run stored it again and every write of a
//! run encoded it again. Now:
//!
//! | key | value |
//! |---|---|
//! | `def/{digest}` | a definition's JSON; `digest` the sha256 of that JSON |
//! | `dref/{digest}` | how many stored runs name it |
//!
//! and a stored run names its definition instead of holding it: the
//! record's head holds the revision and the digest and it has no `spec`
//! ([`encode_run`]; compact since format 8, `compact.rs`; in formats 4 to 7
//! JSON starting `{"format":F,"revision":R,"def":"<digest>",…`, still read). Inserts add a reference (writing the definition when
//! it is new), deletes remove one (and the definition with the last), both
//! under `claim_lock`, so the count is exact. A run's definition is fixed
//! when it is inserted ([`Runs::write_runs_with_alerts`] refuses another),
//! so updates never touch either key.
//!
//! Reading a run joins its definition back, shared: one [`Definition`] per digest
//! while any record read holds it ([`Definitions`]), as the records made from
//! one task record share its definition in memory.
//!
//! A store of format 3 is upgraded at open ([`upgrade`]), a batch of runs at
//! a time, each batch atomic and the upgraded records recognisable, so a
//! crash anywhere leaves a store the next open finishes upgrading.
//!
//! [`Runs::write_runs_with_alerts`]: crate::store::Runs::write_runs_with_alerts

use std::borrow::Cow;
use std::collections::HashMap;

use super::compact;
use super::engine::Batch;
use super::inputs::Input;
use super::keys::{VALUE_FORMAT, decode, encode, key};
use super::{SledStore, engine_error, lock};
use crate::model::RunRecord;
use crate::model::definition::{Definition, WeakDefinition};
use crate::store::{Error, Result};

/// Entries [`Definitions`] keeps before it drops those no record holds any
/// more.
const CACHE_BOUND: usize = 4096;

/// The definitions records in memory hold, by digest: a read shares one
/// [`Definition`] among the records of a definition (and so its digest and
/// its parsed form, `model::definition`), the one of the task record the
/// runs were made from while it is held.
#[derive(Default)]
pub(super) struct Definitions {
    by_digest: HashMap<String, WeakDefinition>,
}

impl Definitions {
    fn bound(&mut self) {
        if self.by_digest.len() > CACHE_BOUND {
            self.by_digest.retain(|_, held| !held.is_dropped());
        }
    }

    /// The definition of `digest` held in memory, or `def` from now on.
    fn share(&mut self, digest: &str, def: Definition) -> Definition {
        if let Some(held) = self.by_digest.get(digest).and_then(WeakDefinition::upgrade) {
            return held;
        }
        self.bound();
        self.by_digest.insert(digest.to_owned(), def.downgrade());
        def
    }
}

impl SledStore {
    /// Makes `def` (of a run being inserted) the one reads of its digest
    /// share, unless one is held already.
    pub(super) fn remember(&self, def: &Definition) {
        lock(&self.definitions).share(def.digest(), def.clone());
    }

    /// The stored definition `digest` (of the run at `run_key`), shared;
    /// `None` when the run was deleted since its record was read (and its
    /// definition with it, if it was the last to name it).
    pub(super) fn load_definition(
        &self,
        run_key: &[u8],
        digest: &str,
    ) -> Result<Option<Definition>> {
        if let Some(held) = lock(&self.definitions)
            .by_digest
            .get(digest)
            .and_then(WeakDefinition::upgrade)
        {
            return Ok(Some(held));
        }
        let def_key = key("def", &[digest]);
        let Some(bytes) = self.db.get(&def_key).map_err(engine_error)? else {
            if !self.db.contains_key(run_key).map_err(engine_error)? {
                return Ok(None);
            }
            return Err(Error::Corrupt {
                key: super::keys::show_key(run_key),
                reason: format!("its task definition {digest} is not stored"),
            });
        };
        let read = Definition::new(decode(&def_key, &bytes)?);
        Ok(Some(lock(&self.definitions).share(digest, read)))
    }

    /// Decodes the stored run `bytes` (at `run_key`), its definition and
    /// (when stored apart) its steps joined; `None` when the run was deleted
    /// since `bytes` were read.
    pub(super) fn decode_run(&self, run_key: &[u8], bytes: &[u8]) -> Result<Option<RunRecord>> {
        match head(bytes).and_then(|h| h.step_count) {
            Some(count) => self.decode_apart(run_key, bytes, count),
            None => self.decode_record(run_key, bytes),
        }
    }

    /// Decodes the stored run `bytes` (at `run_key`) as they are, its
    /// definition and input joined (its steps, when stored apart, not).
    pub(super) fn decode_record(&self, run_key: &[u8], bytes: &[u8]) -> Result<Option<RunRecord>> {
        let mut run: RunRecord = match compact::is_compact(bytes) {
            true => compact::decode_run(run_key, bytes)?,
            false => decode(run_key, bytes)?,
        };
        let head = head(bytes);
        if let Some(digest) = head.as_ref().and_then(|h| h.def.as_deref()) {
            match self.load_definition(run_key, digest)? {
                Some(spec) => run.spec = spec,
                None => return Ok(None),
            }
        }
        if let Some(apart) = head.map(|h| h.input).filter(|i| *i != Input::Inline) {
            match self.read_input(run_key, &run.id, apart)? {
                Some(input) => run.input = input,
                None => return Ok(None),
            }
        }
        Ok(Some(run))
    }

    /// Adds a reference to `def` (a run inserted) to `batch`, and the
    /// definition itself when no stored run names it yet. `counts`: the
    /// references this batch made so far. The caller holds `claim_lock`.
    pub(super) fn refer(
        &self,
        batch: &mut Batch,
        def: &Definition,
        counts: &mut HashMap<String, u64>,
    ) -> Result<()> {
        let digest = def.digest();
        let count = match counts.get(digest) {
            Some(&n) => n,
            None => self.references(digest)?,
        };
        if count == 0 {
            batch.insert(key("def", &[digest]), encode(def.json())?);
        }
        batch.insert(key("dref", &[digest]), encode(&(count + 1))?);
        counts.insert(digest.to_owned(), count + 1);
        Ok(())
    }

    /// Removes a reference to `digest` (a run deleted) in `batch`, and the
    /// definition with its last. The caller holds `claim_lock`.
    pub(super) fn release(&self, batch: &mut Batch, digest: &str) -> Result<()> {
        match self.references(digest)? {
            0 | 1 => {
                batch.remove(key("def", &[digest]));
                batch.remove(key("dref", &[digest]));
            }
            n => batch.insert(key("dref", &[digest]), encode(&(n - 1))?),
        }
        Ok(())
    }

    fn references(&self, digest: &str) -> Result<u64> {
        Ok(self.get(&key("dref", &[digest]))?.unwrap_or(0))
    }
}

/// What a stored run record holds of its run and what it keeps apart.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Shape {
    /// Its steps are under their own keys ([`super::steps`]).
    pub(super) steps_apart: bool,
    /// Where its input is ([`super::inputs`]).
    pub(super) input: Input,
}

/// `run` as stored: its definition named by `def`, not held; its steps and
/// its input held, or only counted when they are stored apart (`shape`).
/// Compact since store format 8 (`compact.rs`).
pub(super) fn encode_run(run: &RunRecord, def: &str, shape: Shape) -> Result<Vec<u8>> {
    compact::encode_run(run, def, shape.steps_apart, shape.input)
}

/// Run records as stores of formats 4 to 7 hold them (JSON): tests write
/// them to stand for a store of those formats.
#[cfg(test)]
pub(super) mod json {
    use serde::Serialize;
    use serde_json::Value;

    use super::super::inputs::Input;
    use super::super::keys::encode;
    use super::Shape;
    use crate::model::ids::RunId;
    use crate::model::{Millis, RunRecord, RunStatus, StepRunRecord, TriggerKind};
    use crate::store::Result;

    /// `run` as stores of formats 4 to 7 hold it: JSON, otherwise as
    /// [`super::encode_run`]. Tests write it to stand for a store of those formats.
    pub(in crate::store::sled) fn encode_run(
        run: &RunRecord,
        def: &str,
        shape: Shape,
    ) -> Result<Vec<u8>> {
        // Every field named, so that a field added to `RunRecord` is a compile
        // error here until it is stored.
        let RunRecord {
            format,
            revision,
            id,
            tenant,
            task,
            spec: _,
            status,
            reason,
            priority,
            trigger,
            scheduled_for,
            created_at,
            started_at,
            finished_at,
            input,
            idempotency_key,
            upstream_run,
            steps,
        } = run;
        encode(&StoredRun {
            format: *format,
            revision: *revision,
            def,
            step_count: shape.steps_apart.then_some(steps.len()),
            input_parts: match shape.input {
                Input::Chunks(n) => Some(n),
                _ => None,
            },
            input_bytes: match shape.input {
                Input::File(n) => Some(n),
                _ => None,
            },
            id,
            tenant,
            task,
            status: *status,
            reason,
            priority: *priority,
            trigger,
            scheduled_for: *scheduled_for,
            created_at: *created_at,
            started_at: *started_at,
            finished_at: *finished_at,
            input: (shape.input == Input::Inline).then_some(input),
            idempotency_key,
            upstream_run,
            steps: (!shape.steps_apart).then_some(steps.as_slice()),
        })
    }

    /// A run record as stores of formats 4 to 7 hold it (see the module docs): `RunRecord`'s fields in
    /// its order, `def` in place of `spec`, after the revision; a run whose
    /// steps are stored apart has `step_count` after `def` and no `steps`.
    #[derive(Serialize)]
    struct StoredRun<'a> {
        format: u32,
        revision: u64,
        def: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        step_count: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        input_parts: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        input_bytes: Option<u64>,
        id: &'a str,
        tenant: &'a str,
        task: &'a str,
        status: RunStatus,
        reason: &'a Option<String>,
        priority: u8,
        trigger: &'a TriggerKind,
        scheduled_for: Millis,
        created_at: Millis,
        started_at: Option<Millis>,
        finished_at: Option<Millis>,
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<&'a Value>,
        idempotency_key: &'a Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        upstream_run: &'a Option<RunId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        steps: Option<&'a [StepRunRecord]>,
    }
}

/// What a stored run record says first: its revision, the digest of its
/// definition (`None` in a record of format 3, which holds the definition),
/// when its steps are stored apart how many there are, and where its input
/// is.
pub(super) struct Head<'a> {
    pub(super) revision: u64,
    pub(super) def: Option<Cow<'a, str>>,
    pub(super) step_count: Option<usize>,
    pub(super) input: Input,
}

/// The [`Head`] of stored run `bytes`, read from the first bytes without
/// decoding the record (all its steps): `None` when the record does not
/// start as [`encode_run`] (or serde, for `RunRecord`) writes it.
pub(super) fn head(bytes: &[u8]) -> Option<Head<'_>> {
    if compact::is_compact(bytes) {
        let head = compact::head(bytes)?;
        return Some(Head {
            revision: head.revision,
            def: Some(Cow::Owned(head.def)),
            step_count: head.step_count,
            input: head.input,
        });
    }
    let (&format, json) = bytes.split_first()?;
    if format != VALUE_FORMAT {
        return None;
    }
    let rest = json.strip_prefix(b"{\"format\":")?;
    let (_, rest) = digits(rest)?;
    let rest = rest.strip_prefix(b",\"revision\":")?;
    let (revision, rest) = digits(rest)?;
    let revision = std::str::from_utf8(revision).ok()?.parse().ok()?;
    let (def, rest) = match rest.strip_prefix(b",\"def\":\"") {
        Some(rest) => {
            let end = rest.iter().position(|b| *b == b'"')?;
            (
                Some(Cow::Borrowed(std::str::from_utf8(&rest[..end]).ok()?)),
                &rest[end + 1..],
            )
        }
        None => (None, rest),
    };
    let (step_count, rest) = count(rest, b",\"step_count\":")?;
    let (input_parts, rest) = count(rest, b",\"input_parts\":")?;
    let (input_bytes, _) = count(rest, b",\"input_bytes\":")?;
    let input = match (input_parts, input_bytes) {
        (Some(n), _) => Input::Chunks(n),
        (None, Some(n)) => Input::File(n as u64),
        (None, None) => Input::Inline,
    };
    Some(Head {
        revision,
        def,
        step_count,
        input,
    })
}

/// The number after `field` if `bytes` start with it (`Some(None)` if they
/// do not), and the rest; `None` when the number is unreadable.
fn count<'a>(bytes: &'a [u8], field: &[u8]) -> Option<(Option<usize>, &'a [u8])> {
    match bytes.strip_prefix(field) {
        Some(rest) => {
            let (n, rest) = digits(rest)?;
            Some((Some(std::str::from_utf8(n).ok()?.parse().ok()?), rest))
        }
        None => Some((None, bytes)),
    }
}

/// The leading ASCII digits of `bytes` (at least one), and the rest.
fn digits(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    (n > 0).then(|| bytes.split_at(n))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{check_references, new_run, run};
    use super::*;
    use crate::model::RunStatus;
    use crate::store::prelude::*;

    /// Runs of one definition store it once, read it back shared, and the
    /// last one deleted takes it along; a write may not change it.
    #[test]
    fn a_definition_is_stored_once_and_removed_with_its_last_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let shared = json!({"steps": [{"name": "s1", "plugin": "p@1"}]});
        let runs: Vec<RunRecord> = (0..3)
            .map(|i| {
                let mut r = run(&format!("r{i}"), RunStatus::Succeeded);
                r.spec = if i == 2 {
                    Definition::new(json!({"steps": [{"name": "other"}]}))
                } else {
                    // An equal definition in another allocation is the same one.
                    Definition::new(shared.clone())
                };
                r
            })
            .collect();
        store
            .insert_runs(&runs.iter().cloned().map(new_run).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(check_references(&store), 2);
        let raw = store.db.get(key("run", &["r0"])).unwrap().unwrap();
        assert!(!String::from_utf8_lossy(&raw).contains("\"plugin\""));
        let (a, b) = (
            store.get_run("r0").unwrap().unwrap(),
            store.get_run("r1").unwrap().unwrap(),
        );
        assert_eq!(a, runs[0]);
        assert!(Definition::same(&a.spec, &b.spec), "read back shared");

        let mut changed = a.clone();
        changed.spec = Definition::new(json!({"steps": []}));
        changed.next_revision();
        let refused = store.write_runs(&[(changed, Vec::new())], &[]);
        assert!(refused.unwrap_err().to_string().contains("fixed"));

        assert!(store.delete_run("r0").unwrap());
        assert_eq!(check_references(&store), 2);
        assert!(store.delete_run("r1").unwrap());
        assert_eq!(check_references(&store), 1);
        assert!(store.delete_run("r2").unwrap());
        assert_eq!(check_references(&store), 0);
    }
}
