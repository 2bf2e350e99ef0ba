//! Run records and step runs in a compact encoding (store format 8).
//!
//! A one-step run's record was ~990 B of JSON, written three times over its
//! life (created, running, finished): every field name spelled out, every
//! instant and count as text, the definition's and the plugin's sha256 as
//! 64 hex characters each, and the run id that its key already holds.
//! Since store format 8 a record is the format byte [`COMPACT`], then
//! postcard (integers and lengths as varints, no field names):
//!
//! - first the head ([`Head`]: the record format, the revision, the
//!   definition's digest and where the steps and input are), which
//!   [`head`] reads without decoding the rest, as the write's
//!   compare-and-set and deletes need;
//! - then the run, without its id (the key `run/{id}` holds it);
//! - sha256 digests as their 32 bytes (any other text as text);
//! - free-form JSON values (the run's input, each step's input and
//!   output) as their JSON text: postcard cannot read a
//!   `serde_json::Value` back, since it does not say what type comes next.
//!
//! A step run stored apart (`steps.rs`) is the same byte and the step in
//! the same encoding. docs/PERFORMANCE.md (*The run record in postcard*)
//! has the bytes and the speed measured against JSON.
//!
//! Records of format 7 and before are JSON and are read as they are: the
//! upgrade to format 8 rewrites nothing, and a run becomes compact at its
//! next write (retention deletes the rest in time).
//!
//! The encoding has no field names, so a field added to [`RunRecord`],
//! [`StepRunRecord`] or [`AttemptRecord`] is a compile error in the encoders
//! below until it is stored, and storing it needs a new format byte
//! (postcard cannot tell a record of the old shape from the new). The
//! enums are stored by their variant's index: `tests::enum_codes_are_fixed`
//! holds every index, so reordering a variant fails a test instead of
//! reading old records wrongly.

use std::borrow::Cow;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::inputs::Input;
use super::keys::{VALUE_FORMAT, decode_part, key, show_key};
use crate::model::Definition;
use crate::model::ids::RunId;
use crate::model::{
    AttemptRecord, ErrorKind, Millis, Outcome, RunRecord, RunStatus, StepRunRecord, StepStatus,
    TriggerKind,
};
use crate::store::{Error, Result};

/// First byte of a compact run record, step run or inline logs
/// (`logs.rs`). JSON values start with [`super::keys::VALUE_FORMAT`],
/// compact event lists with [`super::events::COMPACT_EVENTS`] (formats 6
/// and 7) or [`super::events::EVENTS_NAMED`].
pub(super) const COMPACT: u8 = 3;

/// A sha256 digest as stored: its 32 bytes when it is 64 lowercase hex
/// characters (every digest ax makes), else its text.
#[derive(Serialize)]
enum Digest<'a> {
    Raw([u8; 32]),
    Text(&'a str),
}

impl<'a> Digest<'a> {
    fn of(text: &'a str) -> Self {
        let mut raw = [0u8; 32];
        let lower = text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        match lower && hex::decode_to_slice(text, &mut raw).is_ok() {
            true => Digest::Raw(raw),
            false => Digest::Text(text),
        }
    }
}

/// [`Digest`], read back (the same variants in the same order).
#[derive(Deserialize)]
enum ReadDigest {
    Raw([u8; 32]),
    Text(String),
}

impl ReadDigest {
    fn text(self) -> String {
        match self {
            ReadDigest::Raw(raw) => hex::encode(raw),
            ReadDigest::Text(text) => text,
        }
    }
}

/// A JSON value, stored as its JSON text.
struct JsonText<'a>(&'a Value);

impl Serialize for JsonText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let text = serde_json::to_string(self.0).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }
}

/// What a compact record says first (see the module docs).
#[derive(Serialize)]
struct Head<'a> {
    format: u32,
    revision: u64,
    def: Digest<'a>,
    step_count: Option<u64>,
    input_parts: Option<u64>,
    input_bytes: Option<u64>,
}

/// [`Head`], read back.
#[derive(Deserialize)]
struct ReadHead {
    format: u32,
    revision: u64,
    def: ReadDigest,
    step_count: Option<u64>,
    input_parts: Option<u64>,
    input_bytes: Option<u64>,
}

/// The run after its head, as stored.
#[derive(Serialize)]
struct Body<'a> {
    tenant: &'a str,
    task: &'a str,
    status: RunStatus,
    reason: Option<&'a str>,
    priority: u8,
    trigger: TriggerKind,
    scheduled_for: Millis,
    created_at: Millis,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    input: Option<JsonText<'a>>,
    idempotency_key: Option<&'a str>,
    upstream_run: Option<&'a str>,
    steps: Option<Vec<Step<'a>>>,
}

/// [`Body`], read back.
#[derive(Deserialize)]
struct ReadBody {
    tenant: String,
    task: String,
    status: RunStatus,
    reason: Option<String>,
    priority: u8,
    trigger: TriggerKind,
    scheduled_for: Millis,
    created_at: Millis,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    input: Option<String>,
    idempotency_key: Option<String>,
    upstream_run: Option<String>,
    steps: Option<Vec<ReadStep>>,
}

/// A step run as stored.
#[derive(Serialize)]
struct Step<'a> {
    name: &'a str,
    status: StepStatus,
    input: Option<JsonText<'a>>,
    output: Option<JsonText<'a>>,
    error: Option<&'a str>,
    attempts: Vec<Attempt<'a>>,
    next_attempt_at: Option<Millis>,
    lost_attempts: u32,
    round_start: u32,
}

/// [`Step`], read back.
#[derive(Deserialize)]
struct ReadStep {
    name: String,
    status: StepStatus,
    input: Option<String>,
    output: Option<String>,
    error: Option<String>,
    attempts: Vec<ReadAttempt>,
    next_attempt_at: Option<Millis>,
    lost_attempts: u32,
    round_start: u32,
}

/// An attempt as stored.
#[derive(Serialize)]
struct Attempt<'a> {
    number: u32,
    outcome: Option<Outcome>,
    started_at: Millis,
    finished_at: Option<Millis>,
    fuel_consumed: u64,
    memory_peak_bytes: u64,
    duration_ms: f64,
    error: Option<&'a str>,
    error_kind: Option<ErrorKind>,
    plugin_version: Option<&'a str>,
    plugin_digest: Option<Digest<'a>>,
}

/// [`Attempt`], read back.
#[derive(Deserialize)]
struct ReadAttempt {
    number: u32,
    outcome: Option<Outcome>,
    started_at: Millis,
    finished_at: Option<Millis>,
    fuel_consumed: u64,
    memory_peak_bytes: u64,
    duration_ms: f64,
    error: Option<String>,
    error_kind: Option<ErrorKind>,
    plugin_version: Option<String>,
    plugin_digest: Option<ReadDigest>,
}

/// What a compact record's head says (see [`super::definitions::Head`]).
pub(super) struct RecordHead {
    pub(super) revision: u64,
    pub(super) def: String,
    pub(super) step_count: Option<usize>,
    pub(super) input: Input,
}

fn backend(e: postcard::Error) -> Error {
    Error::Backend(e.to_string())
}

fn corrupt(key: &[u8], what: &str, e: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        key: show_key(key),
        reason: format!("unreadable {what}: {e}"),
    }
}

fn size(n: u64) -> Option<usize> {
    usize::try_from(n).ok()
}

/// Whether `value`, of the key kind `kind`, is a run record, step run or
/// inline logs stored as JSON by a store of format 7 or before (a log blob's
/// reference stays JSON: it is not counted).
pub(super) fn older_json(kind: &str, value: &[u8]) -> bool {
    match kind {
        "run" | "step" => value.first() == Some(&VALUE_FORMAT),
        "log" => value.split_first().is_some_and(|(&format, json)| {
            format == VALUE_FORMAT && json.starts_with(br#"{"inline""#)
        }),
        _ => false,
    }
}

/// The error for a compact record whose head [`head`] cannot read.
pub(super) fn unreadable_head(key: &[u8]) -> Error {
    corrupt(key, "run record", "its head is damaged")
}

/// Whether `bytes` are a compact record, step run or inline logs.
pub(super) fn is_compact(bytes: &[u8]) -> bool {
    bytes.first() == Some(&COMPACT)
}

/// `run` as stored: its definition named by `def`, its steps and input
/// held unless they are stored apart (`steps_apart`, `input`).
pub(super) fn encode_run(
    run: &RunRecord,
    def: &str,
    steps_apart: bool,
    input_at: Input,
) -> Result<Vec<u8>> {
    // Every field named, so that a field added to `RunRecord` is a compile
    // error here until it is stored.
    let RunRecord {
        format,
        revision,
        id: _,
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
    let head = Head {
        format: *format,
        revision: *revision,
        def: Digest::of(def),
        step_count: steps_apart.then_some(steps.len() as u64),
        input_parts: match input_at {
            Input::Chunks(n) => Some(n as u64),
            _ => None,
        },
        input_bytes: match input_at {
            Input::File(n) => Some(n),
            _ => None,
        },
    };
    let body = Body {
        tenant,
        task,
        status: *status,
        reason: reason.as_deref(),
        priority: *priority,
        trigger: *trigger,
        scheduled_for: *scheduled_for,
        created_at: *created_at,
        started_at: *started_at,
        finished_at: *finished_at,
        input: (input_at == Input::Inline).then_some(JsonText(input)),
        idempotency_key: idempotency_key.as_deref(),
        upstream_run: upstream_run.as_deref(),
        steps: (!steps_apart).then(|| steps.iter().map(step).collect()),
    };
    let out = postcard::to_extend(&head, vec![COMPACT]).map_err(backend)?;
    postcard::to_extend(&body, out).map_err(backend)
}

/// The head of compact record `bytes`; `None` when they are not one or it
/// is unreadable.
pub(super) fn head(bytes: &[u8]) -> Option<RecordHead> {
    read_head(bytes).and_then(|(head, _)| record_head(head))
}

/// The head of compact record `bytes`, and the bytes after it.
fn read_head(bytes: &[u8]) -> Option<(ReadHead, &[u8])> {
    let (&COMPACT, rest) = bytes.split_first()? else {
        return None;
    };
    postcard::take_from_bytes::<ReadHead>(rest).ok()
}

/// What a stored run's index entries are made of (`keys.rs`,
/// `indexes_of`): the first fields of its body, read without the rest.
#[derive(Debug, Deserialize)]
pub(super) struct Indexed<'a> {
    #[serde(borrow)]
    pub(super) tenant: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) task: Cow<'a, str>,
    pub(super) status: RunStatus,
    /// Between the status and the priority; read to reach the priority.
    _reason: Option<&'a str>,
    pub(super) priority: u8,
}

impl Indexed<'_> {
    /// The fields of `run`, for a record that is not compact.
    pub(super) fn of(run: &RunRecord) -> Indexed<'static> {
        Indexed {
            tenant: Cow::Owned(run.tenant.to_string()),
            task: Cow::Owned(run.task.to_string()),
            status: run.status,
            _reason: None,
            priority: run.priority,
        }
    }
}

/// The head of compact record `bytes` and what its indexes are made of;
/// `None` when they are not one or it is unreadable. A write reads these
/// from the stored record it replaces, instead of reading its index entries
/// (one read of the store, not three).
pub(super) fn head_and_indexed(bytes: &[u8]) -> Option<(RecordHead, Indexed<'_>)> {
    let (head, rest) = read_head(bytes)?;
    let (indexed, _) = postcard::take_from_bytes::<Indexed<'_>>(rest).ok()?;
    Some((record_head(head)?, indexed))
}

fn record_head(head: ReadHead) -> Option<RecordHead> {
    let input = match (head.input_parts, head.input_bytes) {
        (Some(n), _) => Input::Chunks(size(n)?),
        (None, Some(n)) => Input::File(n),
        (None, None) => Input::Inline,
    };
    Some(RecordHead {
        revision: head.revision,
        def: head.def.text(),
        step_count: match head.step_count {
            Some(n) => Some(size(n)?),
            None => None,
        },
        input,
    })
}

/// The compact record `bytes` stored at `run_key` (`run/{id}`), without
/// its definition (`spec` null: the caller joins it by the head's digest);
/// its input `null` and its steps empty when they are stored apart.
pub(super) fn decode_run(run_key: &[u8], bytes: &[u8]) -> Result<RunRecord> {
    let id = decode_part(&run_key[key("run", &[]).len()..])
        .ok_or_else(|| corrupt(run_key, "run key", "not a run key"))?;
    let rest = bytes
        .strip_prefix(&[COMPACT])
        .ok_or_else(|| corrupt(run_key, "run record", "not compact"))?;
    let (head, rest) =
        postcard::take_from_bytes::<ReadHead>(rest).map_err(|e| corrupt(run_key, "head", e))?;
    let format = head.format;
    let revision = head.revision;
    let body: ReadBody =
        postcard::from_bytes(rest).map_err(|e| corrupt(run_key, "run record", e))?;
    let json = |text: String| -> Result<Value> {
        serde_json::from_str(&text).map_err(|e| corrupt(run_key, "JSON value", e))
    };
    Ok(RunRecord {
        format,
        revision,
        id: RunId::from(id),
        tenant: body.tenant.into(),
        task: body.task.into(),
        spec: Definition::default(),
        status: body.status,
        reason: body.reason,
        priority: body.priority,
        trigger: body.trigger,
        scheduled_for: body.scheduled_for,
        created_at: body.created_at,
        started_at: body.started_at,
        finished_at: body.finished_at,
        input: body.input.map(json).transpose()?.unwrap_or(Value::Null),
        idempotency_key: body.idempotency_key,
        upstream_run: body.upstream_run.map(RunId::from),
        steps: body
            .steps
            .unwrap_or_default()
            .into_iter()
            .map(|s| read_step(run_key, s))
            .collect::<Result<_>>()?,
    })
}

/// A step run stored apart (`steps.rs`), compact.
pub(super) fn encode_step(s: &StepRunRecord) -> Result<Vec<u8>> {
    postcard::to_extend(&step(s), vec![COMPACT]).map_err(backend)
}

/// The compact step run `bytes` stored at `step_key`.
pub(super) fn decode_step(step_key: &[u8], bytes: &[u8]) -> Result<StepRunRecord> {
    let rest = bytes
        .strip_prefix(&[COMPACT])
        .ok_or_else(|| corrupt(step_key, "step run", "not compact"))?;
    let read: ReadStep =
        postcard::from_bytes(rest).map_err(|e| corrupt(step_key, "step run", e))?;
    read_step(step_key, read)
}

fn step(s: &StepRunRecord) -> Step<'_> {
    let StepRunRecord {
        name,
        status,
        input,
        output,
        error,
        attempts,
        next_attempt_at,
        lost_attempts,
        round_start,
    } = s;
    Step {
        name,
        status: *status,
        input: input.as_ref().map(JsonText),
        output: output.as_ref().map(JsonText),
        error: error.as_deref(),
        attempts: attempts.iter().map(attempt).collect(),
        next_attempt_at: *next_attempt_at,
        lost_attempts: *lost_attempts,
        round_start: *round_start,
    }
}

fn attempt(a: &AttemptRecord) -> Attempt<'_> {
    let AttemptRecord {
        number,
        outcome,
        started_at,
        finished_at,
        fuel_consumed,
        memory_peak_bytes,
        duration_ms,
        error,
        error_kind,
        plugin_version,
        plugin_digest,
    } = a;
    Attempt {
        number: *number,
        outcome: *outcome,
        started_at: *started_at,
        finished_at: *finished_at,
        fuel_consumed: *fuel_consumed,
        memory_peak_bytes: *memory_peak_bytes,
        duration_ms: *duration_ms,
        error: error.as_deref(),
        error_kind: *error_kind,
        plugin_version: plugin_version.as_deref(),
        plugin_digest: plugin_digest.as_deref().map(Digest::of),
    }
}

fn read_step(key: &[u8], s: ReadStep) -> Result<StepRunRecord> {
    let json = |text: String| -> Result<Value> {
        serde_json::from_str(&text).map_err(|e| corrupt(key, "JSON value", e))
    };
    Ok(StepRunRecord {
        name: s.name,
        status: s.status,
        input: s.input.map(json).transpose()?,
        output: s.output.map(json).transpose()?,
        error: s.error,
        attempts: s
            .attempts
            .into_iter()
            .map(|a| AttemptRecord {
                number: a.number,
                outcome: a.outcome,
                started_at: a.started_at,
                finished_at: a.finished_at,
                fuel_consumed: a.fuel_consumed,
                memory_peak_bytes: a.memory_peak_bytes,
                duration_ms: a.duration_ms,
                error: a.error,
                error_kind: a.error_kind,
                plugin_version: a.plugin_version,
                plugin_digest: a.plugin_digest.map(ReadDigest::text),
            })
            .collect(),
        next_attempt_at: s.next_attempt_at,
        lost_attempts: s.lost_attempts,
        round_start: s.round_start,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::definitions::{Shape, json as json_record};
    use super::super::fixtures::run;
    use super::*;
    use crate::store::prelude::*;

    const DIGEST: &str = "5f0c8a9e3b1d2c4f6a7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a";

    /// A finished run of two steps with everything a record can hold set.
    fn full() -> RunRecord {
        let mut r = run("r0190abc", RunStatus::Succeeded);
        r.reason = Some("done".into());
        r.started_at = Some(60_002);
        r.finished_at = Some(60_090);
        r.input = json!({"name": "n\u{0}ul", "n": 1.5, "list": [1, null, true]});
        r.idempotency_key = Some("k-1".into());
        r.upstream_run = Some("r0190aaa".to_owned().into());
        r.steps[0].status = StepStatus::Succeeded;
        r.steps[0].output = Some(json!({"greeting": "hi", "big": u64::MAX}));
        r.steps[0].attempts = vec![AttemptRecord {
            number: 1,
            outcome: Some(Outcome::Succeeded),
            started_at: 60_002,
            finished_at: Some(60_010),
            fuel_consumed: 123_456,
            memory_peak_bytes: 1 << 20,
            duration_ms: 7.25,
            error: None,
            error_kind: None,
            plugin_version: Some("1.0.0".into()),
            plugin_digest: Some(DIGEST.into()),
        }];
        let mut second = StepRunRecord::pending("s2");
        second.status = StepStatus::Failed;
        second.error = Some("boom".into());
        second.next_attempt_at = Some(61_000);
        second.lost_attempts = 1;
        second.round_start = 2;
        second.attempts = vec![AttemptRecord {
            error: Some("boom".into()),
            error_kind: Some(ErrorKind::Retryable),
            outcome: Some(Outcome::Failed),
            plugin_digest: Some("not-a-digest".into()),
            plugin_version: None,
            ..r.steps[0].attempts[0].clone()
        }];
        r.steps.push(second);
        r
    }

    fn without_spec(mut r: RunRecord) -> RunRecord {
        r.spec = Definition::default();
        r
    }

    #[test]
    fn a_record_reads_back_whole_with_the_id_of_its_key_and_its_head() {
        let r = full();
        let bytes = encode_run(&r, DIGEST, false, Input::Inline).unwrap();
        assert_eq!(bytes[0], COMPACT);
        let run_key = key("run", &[&r.id]);
        assert_eq!(
            decode_run(&run_key, &bytes).unwrap(),
            without_spec(r.clone())
        );
        let h = head(&bytes).unwrap();
        assert_eq!((h.revision, h.def.as_str()), (r.revision, DIGEST));
        assert_eq!((h.step_count, h.input), (None, Input::Inline));
        // What its indexes are made of, read after the head (past a reason).
        let mut r = r;
        r.priority = 7;
        let bytes = encode_run(&r, DIGEST, false, Input::Inline).unwrap();
        let fields = |w: &Indexed<'_>| {
            (
                w.tenant.to_string(),
                w.task.to_string(),
                w.status,
                w.priority,
            )
        };
        let (h, was) = head_and_indexed(&bytes).unwrap();
        assert!(r.reason.is_some(), "the priority is read past a reason");
        assert_eq!(h.revision, r.revision);
        assert_eq!(fields(&was), fields(&Indexed::of(&r)));
        assert_eq!(
            fields(&was),
            (r.tenant.to_string(), r.task.to_string(), r.status, 7)
        );
        // Only the first bytes are read.
        let (_, cut) = head_and_indexed(&bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(fields(&cut), fields(&was));
        assert!(head_and_indexed(b"\x01{}").is_none());
        // A digest that is not lowercase hex is kept as text.
        let upper = DIGEST.to_uppercase();
        let bytes = encode_run(&r, &upper, false, Input::Inline).unwrap();
        assert_eq!(head(&bytes).unwrap().def, upper);
    }

    #[test]
    fn a_record_with_its_steps_and_input_apart_says_so_in_its_head() {
        let r = full();
        for (apart, input) in [(true, Input::Chunks(3)), (false, Input::File(70_000))] {
            let bytes = encode_run(&r, DIGEST, apart, input).unwrap();
            let h = head(&bytes).unwrap();
            assert_eq!(h.step_count, apart.then_some(2));
            assert_eq!(h.input, input);
            let read = decode_run(&key("run", &[&r.id]), &bytes).unwrap();
            assert_eq!(read.input, Value::Null);
            assert_eq!(read.steps.is_empty(), apart);
        }
        let step = &r.steps[1];
        let k = key("step", &[&r.id, "00001"]);
        assert_eq!(&decode_step(&k, &encode_step(step).unwrap()).unwrap(), step);
    }

    #[test]
    fn a_record_takes_under_half_of_its_json() {
        let r = full();
        let shape = Shape::default();
        let json = json_record::encode_run(&r, DIGEST, shape).unwrap();
        let compact = encode_run(&r, DIGEST, false, Input::Inline).unwrap();
        assert!(
            compact.len() * 2 < json.len(),
            "compact {} B, JSON {} B",
            compact.len(),
            json.len()
        );
    }

    #[test]
    fn damaged_records_are_reported_never_a_panic() {
        let r = full();
        let bytes = encode_run(&r, DIGEST, false, Input::Inline).unwrap();
        let run_key = key("run", &[&r.id]);
        for cut in [1, 5, bytes.len() / 2, bytes.len() - 1] {
            assert!(matches!(
                decode_run(&run_key, &bytes[..cut]),
                Err(Error::Corrupt { .. })
            ));
        }
        assert!(head(&[COMPACT]).is_none());
    }

    /// A write over a damaged compact record is refused as corrupt, not
    /// taken for a record of a newer ax, and changes nothing.
    #[test]
    fn a_write_over_a_damaged_record_is_refused_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::SledStore::open(dir.path()).unwrap();
        let mut r = run("r1", RunStatus::Queued);
        store.insert_run(&r, false, None, &[]).unwrap();
        let k = key("run", &["r1"]);
        store.db.insert(&k, &[COMPACT, 0xff][..]).unwrap();
        r.status = RunStatus::Running;
        let refused = store.update_run(&mut r, &[]).unwrap_err();
        assert!(
            matches!(&refused, Error::Corrupt { reason, .. } if reason.contains("head is damaged")),
            "{refused:?}"
        );
        assert_eq!(&store.db.get(&k).unwrap().unwrap()[..], &[COMPACT, 0xff]);
    }

    /// The enums are stored by variant index: these are the indexes every
    /// stored record (and inline logs, `logs.rs`) relies on. A variant may
    /// be added at the end only.
    #[test]
    fn enum_codes_are_fixed() {
        fn code<T: Serialize>(value: T) -> u8 {
            let bytes = postcard::to_allocvec(&value).unwrap();
            assert_eq!(bytes.len(), 1);
            bytes[0]
        }
        use RunStatus as R;
        let runs = [R::Queued, R::Running, R::Succeeded, R::Failed, R::Cancelled];
        assert_eq!(runs.map(code), [0, 1, 2, 3, 4]);
        use StepStatus as S;
        let steps = [
            S::Pending,
            S::Queued,
            S::Running,
            S::RetryWait,
            S::Succeeded,
            S::Failed,
            S::Skipped,
            S::Cancelled,
            S::Dead,
        ];
        assert_eq!(steps.map(code), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
        use TriggerKind as T;
        let triggers = [T::Manual, T::Cron, T::At, T::Delay, T::Every, T::After];
        assert_eq!(triggers.map(code), [0, 1, 2, 3, 4, 5]);
        assert_eq!(Outcome::ALL.map(code), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!([ErrorKind::Retryable, ErrorKind::Fatal].map(code), [0, 1]);
        use crate::model::LogLevel as L;
        let levels = [L::Trace, L::Debug, L::Info, L::Warn, L::Error];
        assert_eq!(levels.map(code), [0, 1, 2, 3, 4], "logs.rs");
    }
}

#[cfg(test)]
mod format_7 {

    use serde_json::json;

    use super::super::definitions::{Shape, head, json as json_record};
    use super::super::fixtures::run;
    use super::super::keys::{VALUE_FORMAT, encode, key};
    use super::super::{STORE_FORMAT, SledStore};
    use super::*;
    use crate::store::prelude::*;

    /// A store of format 7 holds JSON records and step runs: they read as
    /// they are after the upgrade to format 8, and each run becomes
    /// compact at its next write, with its tenant's bytes still counted
    /// exactly.
    #[test]
    fn a_format_7_store_reads_as_it_is_and_each_run_turns_compact_at_its_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Vec::new();
        {
            let store = SledStore::open(dir.path()).unwrap();
            for (i, steps) in [1, 20, 3].into_iter().enumerate() {
                let mut r = run(&format!("r{i}"), RunStatus::Queued);
                let names: Vec<String> = (0..steps).map(|s| format!("s{s}")).collect();
                let specs: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
                r.spec = json!({ "steps": specs }).into();
                r.steps = names.iter().map(StepRunRecord::pending).collect();
                r.input = json!({"i": i});
                store.insert_run(&r, false, None, &[]).unwrap();
                runs.push(r);
            }
            // Rewritten as format 7 stored them: JSON.
            let mut batch = super::super::engine::Batch::default();
            for item in store.scan(&key("run", &[])) {
                let (k, v) = item.unwrap();
                let h = head(&v).unwrap();
                let full = store.decode_run(&k, &v).unwrap().unwrap();
                let shape = Shape {
                    steps_apart: h.step_count.is_some(),
                    input: h.input,
                };
                let json = json_record::encode_run(&full, h.def.as_deref().unwrap(), shape);
                batch.insert(k.to_vec(), json.unwrap());
            }
            for item in store.scan(&key("step", &[])) {
                let (k, v) = item.unwrap();
                let step = decode_step(&k, &v).unwrap();
                batch.insert(k.to_vec(), encode(&step).unwrap());
            }
            batch.insert(key("sys", &["format"]), encode("7").unwrap());
            // Counted again at open, from the records as they are now.
            batch.remove(key("sys", &["run-bytes"]));
            store.db.apply_batch(batch).unwrap();
            store.db.flush().unwrap();
            std::fs::write(dir.path().join("store-format"), "7\n").unwrap();
        }
        let json_values = || SledStore::check(dir.path()).unwrap().json_values;
        drop(SledStore::open(dir.path()).unwrap());
        // 3 records and the 20 steps of r1.
        assert_eq!(json_values(), 23);
        let store = SledStore::open(dir.path()).unwrap();
        let marker: String = store.get(&key("sys", &["format"])).unwrap().unwrap();
        assert_eq!(marker, STORE_FORMAT.to_string());
        let first_byte = |k: Vec<u8>| store.db.get(k).unwrap().unwrap()[0];
        for r in &runs {
            assert_eq!(store.get_run(&r.id).unwrap().as_ref(), Some(r));
            assert_eq!(first_byte(key("run", &[&r.id])), VALUE_FORMAT);
        }
        assert_eq!(first_byte(key("step", &["r1", "00000"])), VALUE_FORMAT);
        for r in &mut runs {
            r.status = RunStatus::Running;
            r.steps[0].status = StepStatus::Running;
            store.update_run(r, &[]).unwrap();
            assert_eq!(store.get_run(&r.id).unwrap().as_ref(), Some(&*r));
            assert_eq!(first_byte(key("run", &[&r.id])), COMPACT);
        }
        assert_eq!(first_byte(key("step", &["r1", "00000"])), COMPACT);
        let weighed = super::super::footprint::weigh_all(&store).unwrap();
        assert_eq!(store.run_bytes("t1").unwrap() as i64, weighed.of("t1"));
        drop(store);
        // Each was written whole (the scheduler names the changed steps
        // only; those it does not name stay as they are until they change).
        assert_eq!(json_values(), 0);
    }

    #[test]
    fn older_json_counts_records_steps_and_inline_logs_not_blob_references() {
        let inline = encode(&super::super::logs::StoredLogs::Inline(Default::default()));
        let blob = encode(&super::super::logs::StoredLogs::Blob { digest: "d".into() });
        assert!(older_json("log", &inline.unwrap()));
        assert!(!older_json("log", &blob.unwrap()));
        assert!(older_json("run", &encode("x").unwrap()));
        assert!(!older_json("run", &[COMPACT, 0]));
        assert!(!older_json("ev", &encode("x").unwrap()));
    }
}
