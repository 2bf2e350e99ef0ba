//! The whole-file check's reading of a run line: the line proved readable
//! without building the run.
//!
//! An import checks the whole file before it writes anything, so that a
//! damaged file changes nothing, then reads it again to write it. The check
//! only has to prove that the write pass's reading of each line cannot
//! fail, and to count; building every run's strings, maps and vectors only
//! to drop them was most of its time (docs/PERFORMANCE.md, *Import: one
//! parse*). The types here mirror [`WholeRun`](crate::store::WholeRun)'s,
//! field for field with the same serde attributes, but a string is only
//! checked ([`Str`]), a JSON value is only checked ([`AnyJson`]) and a list
//! is only counted ([`Many`]): serde_json runs the same reading code
//! (`deserialize_str`, `deserialize_any`, `deserialize_seq`: UTF-8,
//! escapes, number ranges, depth), only nothing is kept.
//!
//! What keeps it sound: a line these types refuse is read again the full
//! way ([`super::read_object`]), which decides; so only accepting too much
//! would be a fault, and the unit test
//! `what_the_proof_accepts_the_full_reading_accepts` mutates every field of
//! a whole run at every depth (removed, and replaced by values of each JSON
//! type, out-of-range numbers and a lone surrogate) and checks that the full
//! reading accepts every line the proof accepts. A field added to the run's
//! types appears in that test's run by itself, so a mirror left behind
//! fails it. Attempt records (rare, and with an internally tagged enum)
//! are read by their own type.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::model::{ErrorKind, LogLevel, Millis, Outcome, RunStatus, StepStatus, TriggerKind};

/// What the check needs of a run line: its counts and its fire's parts.
#[derive(Debug, Deserialize)]
pub(super) struct RunProof<'a> {
    #[serde(borrow)]
    pub(super) run: RunMirror<'a>,
    pub(super) events: Many<EventMirror>,
    pub(super) logs: Many<LogsMirror>,
    pub(super) records: Many<crate::model::record::AttemptRecord>,
}

/// [`RunRecord`](crate::model::RunRecord)'s mirror: only what the fires
/// need is kept.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Read to be checked, not kept (the module's doc).
pub(super) struct RunMirror<'a> {
    format: u32,
    #[serde(default)]
    revision: u64,
    #[serde(borrow)]
    pub(super) id: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) tenant: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) task: Cow<'a, str>,
    #[serde(default)]
    spec: AnyJson,
    status: RunStatus,
    reason: Option<Str>,
    priority: u8,
    pub(super) trigger: TriggerKind,
    pub(super) scheduled_for: Millis,
    created_at: Millis,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    #[serde(default)]
    input: AnyJson,
    idempotency_key: Option<Str>,
    #[serde(default)]
    upstream_run: Option<Str>,
    #[serde(default)]
    steps: Many<StepMirror>,
}

/// [`StepRunRecord`](crate::model::StepRunRecord)'s mirror.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Read to be checked, not kept.
pub(super) struct StepMirror {
    name: Str,
    status: StepStatus,
    input: Option<AnyJson>,
    output: Option<AnyJson>,
    error: Option<Str>,
    attempts: Many<AttemptMirror>,
    next_attempt_at: Option<Millis>,
    #[serde(default)]
    lost_attempts: u32,
    #[serde(default)]
    round_start: u32,
}

/// [`model::AttemptRecord`](crate::model::AttemptRecord)'s mirror.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Read to be checked, not kept.
pub(super) struct AttemptMirror {
    number: u32,
    outcome: Option<Outcome>,
    started_at: Millis,
    finished_at: Option<Millis>,
    fuel_consumed: u64,
    memory_peak_bytes: u64,
    duration_ms: f64,
    error: Option<Str>,
    error_kind: Option<ErrorKind>,
    #[serde(default)]
    plugin_version: Option<Str>,
    #[serde(default)]
    plugin_digest: Option<Str>,
}

/// [`Event`](crate::model::Event)'s mirror.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Read to be checked, not kept.
pub(super) struct EventMirror {
    run_id: Str,
    step: Option<Str>,
    attempt: Option<u32>,
    from: Option<Str>,
    to: Str,
    at: Millis,
    reason: Str,
    actor: Str,
}

/// [`AttemptLogs`](crate::store::AttemptLogs)'s mirror.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Read to be checked, not kept.
pub(super) struct LogsMirror {
    step: Str,
    attempt: u32,
    stdout: Str,
    stderr: Str,
    logs: Many<LogRecordMirror>,
    progress: Option<ProgressMirror>,
}

/// [`LogRecord`](crate::model::LogRecord)'s mirror.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Read to be checked, not kept.
pub(super) struct LogRecordMirror {
    at_ms: u64,
    level: LogLevel,
    message: Str,
    #[serde(default)]
    fields: Many<(Str, Str)>,
}

/// [`Progress`](crate::model::Progress)'s mirror.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Read to be checked, not kept.
pub(super) struct ProgressMirror {
    percent: u8,
    note: Str,
    at_ms: u64,
}

/// A JSON string read as a `String` reads it (`deserialize_string`), not
/// kept.
#[derive(Debug, Default)]
pub(super) struct Str;

impl<'de> Deserialize<'de> for Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Str;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Str, E> {
                Ok(Str)
            }
        }
        d.deserialize_string(V)
    }
}

/// A JSON value read as a `serde_json::Value` reads it (`deserialize_any`,
/// every number, string and key read), not kept.
#[derive(Debug, Default)]
pub(super) struct AnyJson;

impl<'de> Deserialize<'de> for AnyJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<AnyJson, E> {
                Ok(AnyJson)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<AnyJson, E> {
                Ok(AnyJson)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<AnyJson, E> {
                Ok(AnyJson)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<AnyJson, E> {
                Ok(AnyJson)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyJson, E> {
                Ok(AnyJson)
            }
            fn visit_unit<E: de::Error>(self) -> Result<AnyJson, E> {
                Ok(AnyJson)
            }
            fn visit_none<E: de::Error>(self) -> Result<AnyJson, E> {
                Ok(AnyJson)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<AnyJson, D::Error> {
                AnyJson::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyJson, A::Error> {
                while seq.next_element::<AnyJson>()?.is_some() {}
                Ok(AnyJson)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<AnyJson, A::Error> {
                // `Value` reads its keys as strings.
                while map.next_entry::<Str, AnyJson>()?.is_some() {}
                Ok(AnyJson)
            }
        }
        d.deserialize_any(V)
    }
}

/// A JSON array read as a `Vec<T>` reads it, only counted.
pub(super) struct Many<T>(pub(super) u64, PhantomData<T>);

impl<T> Default for Many<T> {
    fn default() -> Self {
        Many(0, PhantomData)
    }
}

impl<T> fmt::Debug for Many<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Many({})", self.0)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Many<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Many<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Many<T>, A::Error> {
                let mut n = 0;
                while seq.next_element::<T>()?.is_some() {
                    n += 1;
                }
                Ok(Many(n, PhantomData))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::fires::Holders;
    use super::super::{Counts, prove_run, read_object};
    use crate::model::{Event, LogLevel, LogRecord, Outcome, Progress, RunStatus, TriggerKind};
    use crate::store::conformance::{self, runs::attempt_record};
    use crate::store::{AttemptLogs, WholeRun};

    /// A run with every optional field set, at every depth.
    fn full_run() -> WholeRun {
        let id = "r00000000000100000001";
        let mut run = conformance::run(id, "t1", "a", RunStatus::Failed);
        run.reason = Some("why \"quoted\"\n".into());
        run.trigger = TriggerKind::Cron;
        run.started_at = Some(1_001);
        run.finished_at = Some(1_009);
        run.idempotency_key = Some("k1".into());
        run.upstream_run = Some("r00000000000000000009".into());
        run.input = json!({"a": [1, -2, 0.5, "é\u{1}", null, true, {}], "b": {"c": []}});
        let step = &mut run.steps[0];
        step.input = Some(json!({"x": 1}));
        step.output = Some(json!(["y"]));
        step.error = Some("e".into());
        step.next_attempt_at = Some(5);
        step.lost_attempts = 1;
        step.round_start = 1;
        let attempt = &mut step.attempts[0];
        attempt.error = Some("boom".into());
        attempt.error_kind = Some(crate::model::ErrorKind::Fatal);
        attempt.outcome = Some(Outcome::Failed);
        let event = Event {
            run_id: id.into(),
            step: Some("s1".into()),
            attempt: Some(1),
            from: Some("pending".into()),
            to: "running".into(),
            at: 1_002,
            reason: "r".into(),
            actor: "scheduler".into(),
        };
        let logs = AttemptLogs {
            step: "s1".into(),
            attempt: 1,
            stdout: "out\n".into(),
            stderr: "err".into(),
            logs: vec![LogRecord {
                at_ms: 3,
                level: LogLevel::Warn,
                message: "m".into(),
                fields: vec![("k".into(), "v".into())],
            }],
            progress: Some(Progress {
                percent: 50,
                note: "half".into(),
                at_ms: 4,
            }),
        };
        WholeRun {
            run,
            events: vec![event],
            logs: vec![logs],
            records: vec![attempt_record(id, "s1", 1, "n")],
            json: Default::default(),
        }
    }

    /// A run line as ax writes it, from the parts of `whole` (its
    /// `run`, `events`, `logs`, `records`; a part left out is not
    /// written).
    fn line(whole: &serde_json::Map<String, Value>) -> Vec<u8> {
        let mut text = String::from(r#"{"kind":"run""#);
        for part in ["run", "events", "logs", "records"] {
            if let Some(value) = whole.get(part) {
                text += &format!(",\"{part}\":{value}");
            }
        }
        text.push('}');
        text.into_bytes()
    }

    /// Every `whole` with one value removed or replaced by `HOLE`, at
    /// every depth.
    fn mutations(value: &Value, out: &mut Vec<Value>, rebuild: &dyn Fn(Value) -> Value) {
        const HOLE: &str = "\u{2}hole";
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let mut without = map.clone();
                    without.remove(key);
                    out.push(rebuild(Value::Object(without)));
                    let mut holed = map.clone();
                    holed.insert(key.clone(), json!(HOLE));
                    out.push(rebuild(Value::Object(holed)));
                    let (map, key) = (map.clone(), key.clone());
                    mutations(child, out, &|v| {
                        let mut map = map.clone();
                        map.insert(key.clone(), v);
                        rebuild(Value::Object(map))
                    });
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    let mut holed = items.clone();
                    holed[i] = json!(HOLE);
                    out.push(rebuild(Value::Array(holed)));
                    let items = items.clone();
                    mutations(child, out, &|v| {
                        let mut items = items.clone();
                        items[i] = v;
                        rebuild(Value::Array(items))
                    });
                }
            }
            _ => {}
        }
    }

    /// What fills a hole: each JSON type, numbers out of each range, a
    /// lone surrogate, bytes that are not UTF-8, a nesting too deep.
    fn fillers() -> Vec<Vec<u8>> {
        let mut fillers: Vec<Vec<u8>> = [
            "null",
            "true",
            "0",
            "-1",
            "1.5",
            "256",
            "4294967296",
            "18446744073709551616",
            "-9223372036854775809",
            "1e400",
            "\"x\"",
            "\"pending\"",
            r#""\ud800""#,
            "[]",
            "[1]",
            r#"["a","b","c"]"#,
            "{}",
            r#"{"a":1e400}"#,
            r#"[{"a":"\udc00"}]"#,
        ]
        .iter()
        .map(|f| f.as_bytes().to_vec())
        .collect();
        fillers.push(b"\"\xff\"".to_vec());
        fillers.push(format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes());
        fillers
    }

    /// The holders and counts of the full reading of `line`, or none when
    /// it refuses it (with and without the dump's JSON kept: the write
    /// pass reads the one, the check the other).
    fn full(line: &[u8]) -> Option<Counts> {
        let kept = read_object((2, line.to_vec()), true).ok()?;
        let read = read_object((2, line.to_vec()), false).ok()?;
        let (mut a, mut b) = (Counts::default(), Counts::default());
        kept.line.count(&mut a);
        read.line.count(&mut b);
        assert_eq!(a, b);
        Some(a)
    }

    fn proved(line: &[u8]) -> Option<Counts> {
        let mut counts = Counts::default();
        let mut line = line.to_vec();
        let before = line.clone();
        let proved = prove_run(&mut line, &mut counts, &mut Holders::new());
        assert_eq!(line, before, "the proof gives the line back as it was");
        proved.then_some(counts)
    }

    /// The soundness of the check: a run line it proves readable is one
    /// the write pass reads, whatever field is missing or of another type.
    #[test]
    fn what_the_proof_accepts_the_full_reading_accepts() {
        let whole = serde_json::to_value(full_run()).unwrap();
        let Value::Object(parts) = &whole else {
            unreachable!()
        };
        let base = line(parts);
        assert!(full(&base).is_some());
        assert_eq!(proved(&base), full(&base), "the run as ax writes it");

        let mut mutated = Vec::new();
        mutations(&whole, &mut mutated, &|v| v);
        assert!(mutated.len() > 200, "{}", mutated.len());
        let (mut lines, mut refused) = (0, 0);
        for value in &mutated {
            let Value::Object(parts) = value else {
                unreachable!()
            };
            let text = line(parts);
            let hole = serde_json::to_vec(&json!("\u{2}hole")).unwrap();
            let at = text.windows(hole.len()).position(|w| w == hole);
            let variants: Vec<Vec<u8>> = match at {
                None => vec![text.clone()],
                Some(at) => fillers()
                    .into_iter()
                    .map(|filler| {
                        let mut v = text[..at].to_vec();
                        v.extend(filler);
                        v.extend(&text[at + hole.len()..]);
                        v
                    })
                    .collect(),
            };
            for variant in variants {
                lines += 1;
                match proved(&variant) {
                    Some(counts) => assert_eq!(
                        full(&variant),
                        Some(counts),
                        "proved but not read: {}",
                        String::from_utf8_lossy(&variant)
                    ),
                    None => refused += 1,
                }
            }
        }
        // Not vacuous: most mutations are refused, some accepted.
        assert!(
            refused > lines / 2 && refused < lines,
            "{refused} of {lines}"
        );
    }

    /// A damaged run line is refused by the check, before anything is
    /// written.
    #[test]
    fn a_damaged_run_line_is_refused_by_the_check() {
        let whole = serde_json::to_value(full_run()).unwrap();
        let Value::Object(parts) = &whole else {
            unreachable!()
        };
        let base = line(parts);
        for cut in [base.len() - 1, base.len() / 2, 20] {
            let damaged = &base[..cut];
            assert!(proved(damaged).is_none());
            assert!(full(damaged).is_none());
        }
    }
}
