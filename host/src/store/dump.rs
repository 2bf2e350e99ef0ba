//! A whole store as a streaming, versioned logical dump (`ax store export`
//! / `ax store import`): what moves a deployment between sled and
//! PostgreSQL, in either direction, and what backs up a sled store. It goes
//! through the [`Store`](super::Store) seam only, so every backend reads
//! and writes it.
//!
//! # Format (version 2)
//! A gzip stream of JSON lines:
//! - first, the header: `{"format":"ax-dump","version":2,"ax":"<crate
//!   version>","created_at":<ms>,"secrets":<bool>}`;
//! - then one line per object, `{"kind":"<kind>", ...}` — the object's
//!   stored record, whole (ids, revisions and instants kept):
//!   `meta` (`key`, `value`: the admin token's hash only), `tenant`,
//!   `token` (its hash, never the token), `task` (`task`, `schedule`),
//!   `run` (`run`, with its `events`, attempt `logs` and attempt `records`
//!   on the same line), `plugin`, `blob` (`digest`, `bytes` in hex: each
//!   digest once, before the first plugin naming it), `tag`,
//!   `dead_letter`, `alert`, `usage` (an hourly bucket), `key` (an
//!   idempotency key whose run retention deleted: `tenant`, `task`, `key`,
//!   `run_id`, `expires_at`; new in version 2), `kv` (`key`,
//!   `value` in hex: the KV store's own entries and usage counters,
//!   verbatim) and, only when asked for, `secret` (`tenant`, `name`,
//!   `value` in plain text, `updated_at`);
//! - last, `{"kind":"end","counts":{<kind>: n, ...},"secrets_left_out":n}`
//!   with one count per object kind (`event`, `log` and `record` counted
//!   apart from `run`).
//!
//! A file without the end line, with a damaged gzip stream, with a line
//! the write pass could not read (a blob whose bytes are not hex or not of
//! its digest, a KV value that is not hex), or whose counts differ from its
//! lines is refused before anything is written; so is a newer format
//! version. Readers of version 1 ignore fields they do not know inside a
//! record only as far as the record's own type does.
//!
//! Runs are read a page at a time ([`Runs::run_summaries_page`](super::Runs::run_summaries_page)), so an
//! export holds one page of runs however many the store keeps; an import
//! writes them in batches ([`Runs::restore_runs`](super::Runs::restore_runs): each run whole, with
//! its revision, claiming its idempotency key and fire again; PostgreSQL
//! copies each part in bulk).
//!
//! # What is not carried
//! - Secrets, unless `include_secrets` (docs/SECURITY.md): the export says
//!   how many it left out.
//! - The instant a kept run's idempotency key expires: the key comes back
//!   with its run and is remembered for [`ImportOptions::key_ttl`] from the
//!   run's creation (sled indexes a key's expiry apart from the key, so an
//!   import could not move it without a scan). The keys of runs retention
//!   deleted are carried (`key` lines) with their own expiry, so a retried
//!   request still answers with the deleted run's id after a move. Fire
//!   keys (one run per task and instant) come back with their runs, so a
//!   restored scheduler does not fire twice.
//! - Leases (they lapse by themselves) and metadata other than the admin
//!   token's hash (format markers belong to the target store).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use serde::{Deserialize, Serialize};

use super::{KeyEntry, OutboxAlert, WholeRun};
use crate::model::{DeadLetter, Millis, PluginRecord, PluginTag, ScheduleState, TaskRecord};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};
use fires::Holders;

pub use export::{ExportOptions, Exported, create_file, export};
#[cfg(any(test, feature = "conformance"))]
pub(crate) use import::import_in_batches;
pub use import::{ImportOptions, contents, import};

mod export;
mod fires;
mod import;
mod payload;
mod proof;
mod spans;
mod writers;

/// The format version this ax writes, and the newest it reads.
pub const VERSION: u32 = 2;
/// The header's `format`.
const FORMAT: &str = "ax-dump";
/// Runs an export reads per page: large enough that a page's fixed cost
/// vanishes, small enough that a page stays in memory (an import's batches:
/// `import.rs`, `IMPORT_BATCH`).
const RUN_BATCH: usize = 512;
/// Map entries read per page.
const MAP_PAGE: usize = 1024;
/// Idempotency keys read (export) or restored (import) per page.
const KEY_PAGE: usize = 1024;
/// Lines parsed per chunk, by the check and by an import (which also
/// bounds a chunk's bytes and how many are parsed ahead: `import.rs`).
const CHUNK: usize = 256;

/// What exporting or importing can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store refused a read or a write.
    #[error(transparent)]
    Store(#[from] super::Error),
    /// The file could not be read or written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not an ax dump at all.
    #[error("not an ax dump: {0}")]
    NotADump(String),
    /// A format this ax does not know yet.
    #[error(
        "the dump has format version {found}, newer than this ax reads ({VERSION}): import it with a newer ax"
    )]
    Newer {
        /// The dump's version.
        found: u32,
    },
    /// The file ends early or does not hold what its end line counts.
    #[error("the dump is truncated or damaged ({0}); nothing was imported")]
    Damaged(String),
    /// The dump holds a run twice (by id or by idempotency key), which a
    /// store cannot: found while writing, after the runs before it.
    #[error(
        "the dump holds run {0} twice (the same id or idempotency key as another run of it); the runs before it were imported, and perhaps some after it: empty the store before importing a corrected dump"
    )]
    Twice(String),
    /// Import only fills an empty store.
    #[error(
        "the target store is not empty (it holds {0}); import only into an empty store: nothing was imported, nothing is merged"
    )]
    NotEmpty(String),
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Objects counted per kind, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts(pub BTreeMap<String, u64>);

impl Counts {
    fn add(&mut self, kind: &str, n: u64) {
        if n > 0 {
            *self.0.entry(kind.to_owned()).or_default() += n;
        }
    }

    /// How many objects of `kind`.
    pub fn get(&self, kind: &str) -> u64 {
        self.0.get(kind).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("nothing");
        }
        let parts: Vec<String> = self.0.iter().map(|(k, n)| format!("{n} {k}")).collect();
        f.write_str(&parts.join(", "))
    }
}

/// The first line.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    ax: String,
    created_at: Millis,
    #[serde(default)]
    secrets: bool,
}

/// A line after the header.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Meta {
        key: String,
        value: String,
    },
    Tenant(TenantRecord),
    Token(TokenRecord),
    Task {
        task: TaskRecord,
        schedule: Option<ScheduleState>,
    },
    Run(Box<WholeRun>),
    Blob {
        digest: String,
        bytes: String,
    },
    Plugin(PluginRecord),
    Tag(PluginTag),
    DeadLetter(DeadLetter),
    Alert(OutboxAlert),
    Usage(UsageBucket),
    Key(KeyEntry),
    Kv {
        key: String,
        value: String,
    },
    Secret {
        tenant: String,
        name: String,
        value: String,
        updated_at: Millis,
    },
    End {
        counts: Counts,
        #[serde(default)]
        secrets_left_out: u64,
    },
}

impl Line {
    /// The kinds a line counts as.
    fn count(&self, counts: &mut Counts) {
        match self {
            Line::Meta { .. } => counts.add("meta", 1),
            Line::Tenant(_) => counts.add("tenant", 1),
            Line::Token(_) => counts.add("token", 1),
            Line::Task { .. } => counts.add("task", 1),
            Line::Run(whole) => {
                let WholeRun {
                    events,
                    logs,
                    records,
                    ..
                } = &**whole;
                counts.add("run", 1);
                counts.add("event", events.len() as u64);
                counts.add("log", logs.len() as u64);
                counts.add("record", records.len() as u64);
            }
            Line::Blob { .. } => counts.add("blob", 1),
            Line::Plugin(_) => counts.add("plugin", 1),
            Line::Tag(_) => counts.add("tag", 1),
            Line::DeadLetter(_) => counts.add("dead_letter", 1),
            Line::Alert(_) => counts.add("alert", 1),
            Line::Usage(_) => counts.add("usage", 1),
            Line::Key(_) => counts.add("key", 1),
            Line::Kv { .. } => counts.add("kv", 1),
            Line::Secret { .. } => counts.add("secret", 1),
            Line::End { .. } => {}
        }
    }

    /// Proves readable what line `number` holds inside its strings, as
    /// the write pass reads it ([`payload`]): a blob's hex and its digest,
    /// a KV value's hex. A secret's value is stored as written.
    fn prove_payload(&self, number: usize) -> Result<()> {
        match self {
            Line::Blob { digest, bytes } => payload::blob(number, digest, bytes, |_| {}),
            Line::Kv { value, .. } => payload::kv_value(number, value, |_| {}),
            _ => Ok(()),
        }
    }
}

/// What a dump's header says.
#[derive(Clone, Debug)]
pub struct Described {
    /// The ax version that wrote it.
    pub ax: String,
    /// When it was written.
    pub created_at: Millis,
    /// Its end line's counts.
    pub counts: Counts,
    /// Secrets its export left out.
    pub secrets_left_out: u64,
}

/// The dump's lines: the header read and checked, then the objects.
/// Each object comes with its line's number and size.
fn open(path: &Path) -> Result<(Header, impl Iterator<Item = Result<Object>>)> {
    let (header, lines) = open_lines(path)?;
    // A run's JSON text is kept only from a dump of this version (`spans`).
    let keep = header.ax == env!("CARGO_PKG_VERSION");
    Ok((
        header,
        lines.map(move |line| line.and_then(|l| read_object(l, keep))),
    ))
}

/// A line after the header, with its number in the file.
type NumberedLine = (usize, Vec<u8>);

/// [`open`]'s lines, not parsed yet.
fn open_lines(path: &Path) -> Result<(Header, impl Iterator<Item = Result<NumberedLine>>)> {
    let (header, mut reader) = open_reader(path)?;
    let lines = std::iter::from_fn(move || {
        let mut line = Vec::new();
        Some(reader.append(&mut line)?.map(|number| (number, line)))
    });
    Ok((header, lines))
}

/// A dump's lines after its header, read into a caller's buffer (the check
/// reads a chunk's lines into one buffer: `check`).
struct LineReader {
    reader: BufReader<MultiGzDecoder<BufReader<File>>>,
    /// The last line's number (the header is line 1).
    number: usize,
}

impl LineReader {
    /// Appends the next line, without its end, to `buffer`; its number, or
    /// `None` at the end of the file.
    fn append(&mut self, buffer: &mut Vec<u8>) -> Option<Result<usize>> {
        let start = buffer.len();
        match self.reader.read_until(b'\n', buffer) {
            Ok(0) => None,
            Ok(_) => {
                if buffer.last() == Some(&b'\n') {
                    buffer.pop();
                    if buffer.len() > start && buffer.last() == Some(&b'\r') {
                        buffer.pop();
                    }
                }
                self.number += 1;
                Some(Ok(self.number))
            }
            Err(e) => Some(Err(read_error(e))),
        }
    }
}

/// The dump's header, read and checked, and a reader of the lines after it.
fn open_reader(path: &Path) -> Result<(Header, LineReader)> {
    let file = File::open(path)?;
    let mut reader = LineReader {
        reader: BufReader::with_capacity(1 << 16, MultiGzDecoder::new(BufReader::new(file))),
        number: 0,
    };
    let mut first = Vec::new();
    match reader.append(&mut first) {
        Some(line) => line?,
        None => return Err(Error::NotADump("the file is empty".into())),
    };
    let header: Header = serde_json::from_slice(&first)
        .ok()
        .filter(|h: &Header| h.format == FORMAT)
        .ok_or_else(|| Error::NotADump("its first line is not an ax-dump header".into()))?;
    if header.version > VERSION {
        return Err(Error::Newer {
            found: header.version,
        });
    }
    Ok((header, reader))
}

/// Parses line `number`; a run keeps its JSON text when `keep_json` and
/// the line has the layout ax writes ([`spans`]).
fn read_object((number, line): NumberedLine, keep_json: bool) -> Result<Object> {
    let bytes = line.len();
    let mut line = match keep_json {
        true => match spans::read_run(line) {
            Ok(whole) => {
                return Ok(Object {
                    number,
                    bytes,
                    line: Line::Run(Box::new(whole)),
                });
            }
            Err(line) => line,
        },
        false => line,
    };
    let parsed =
        parse_line(&mut line).map_err(|e| Error::Damaged(format!("line {number}: {e}")))?;
    Ok(Object {
        number,
        bytes,
        line: parsed,
    })
}

/// An object of a dump, read.
struct Object {
    /// Its line's number in the file (the header is line 1).
    number: usize,
    /// Its line's size.
    bytes: usize,
    line: Line,
}

/// What ax writes before a line's object: its kind, first.
const KIND: &[u8] = b"{\"kind\":\"";

/// Reads a line after the header. A line as ax writes it starts with its
/// kind (`{"kind":"run",…`): the rest is read straight into the kind's
/// type. Serde's reading of an internally tagged enum first copies the
/// whole line into a tree of values (the tag could come anywhere), which
/// was half of an import's time (docs/PERFORMANCE.md, *Export and
/// import*); any other line is still read that way, and so is one the
/// direct reading refuses, for serde's own error.
fn parse_line(line: &mut [u8]) -> serde_json::Result<Line> {
    type Read = fn(&[u8]) -> serde_json::Result<Line>;
    let lead = line.strip_prefix(KIND).and_then(|rest| {
        let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
        (rest[end] == b'"' && rest.get(end + 1) == Some(&b',')).then_some(end)
    });
    if let Some(end) = lead {
        let read: Option<Read> = match &line[KIND.len()..KIND.len() + end] {
            b"run" => Some(|b| serde_json::from_slice(b).map(Line::Run)),
            b"key" => Some(|b| serde_json::from_slice(b).map(Line::Key)),
            b"usage" => Some(|b| serde_json::from_slice(b).map(Line::Usage)),
            b"alert" => Some(|b| serde_json::from_slice(b).map(Line::Alert)),
            b"dead_letter" => Some(|b| serde_json::from_slice(b).map(Line::DeadLetter)),
            b"plugin" => Some(|b| serde_json::from_slice(b).map(Line::Plugin)),
            b"tag" => Some(|b| serde_json::from_slice(b).map(Line::Tag)),
            b"tenant" => Some(|b| serde_json::from_slice(b).map(Line::Tenant)),
            b"token" => Some(|b| serde_json::from_slice(b).map(Line::Token)),
            _ => None,
        };
        if let Some(read) = read {
            // `{"kind":"run",REST` read as `{REST`: the comma becomes the
            // object's brace for the time of the read.
            let comma = KIND.len() + end + 1;
            line[comma] = b'{';
            let read = read(&line[comma..]);
            line[comma] = b',';
            if read.is_ok() {
                return read;
            }
        }
    }
    serde_json::from_slice(line)
}

/// What ax writes before a run's fields.
const RUN_LEAD: &[u8] = b"{\"kind\":\"run\",";

/// Proves a run line as ax writes it readable ([`proof`]), counting it and
/// noting the fire it claims; false (nothing counted) for any other line
/// and for one the proof refuses.
fn prove_run(line: &mut [u8], seen: &mut Counts, holders: &mut Holders) -> bool {
    if !line.starts_with(RUN_LEAD) {
        return false;
    }
    // `{"kind":"run",REST` read as `{REST`, as `parse_line` reads it.
    let comma = RUN_LEAD.len() - 1;
    line[comma] = b'{';
    let proved = match serde_json::from_slice::<proof::RunProof<'_>>(&line[comma..]) {
        Ok(proof) => {
            let run = &proof.run;
            holders.read(
                &run.id,
                run.trigger,
                (&run.tenant, &run.task, run.scheduled_for),
            );
            seen.add("run", 1);
            seen.add("event", proof.events.0);
            seen.add("log", proof.logs.0);
            seen.add("record", proof.records.0);
            true
        }
        Err(_) => false,
    };
    line[comma] = b',';
    proved
}

/// A read error of the compressed stream: a file cut short or damaged.
fn read_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidInput => {
            Error::Damaged(format!("the compressed stream ends early: {e}"))
        }
        std::io::ErrorKind::InvalidData => Error::Damaged(e.to_string()),
        _ => Error::Io(e),
    }
}

/// Reads the whole dump at `path` and checks it: a known format, every line
/// readable (a blob's bytes hex and of its digest, a KV value hex:
/// [`payload`]), an end line whose counts match the lines. Writes nothing.
pub fn verify(path: &Path) -> Result<Described> {
    check(path).map(|(described, _)| described)
}

/// [`verify`], and the holders of the fires more than one run claims
/// ([`fires`]).
///
/// A thread decompresses the file and cuts it into lines while this one
/// parses them: nothing else runs during the check (the store waits for
/// it), so the second core was idle (docs/PERFORMANCE.md, *Import: the
/// dump's JSON kept, the check on two threads*).
fn check(path: &Path) -> Result<(Described, Holders)> {
    let (header, mut reader) = open_reader(path)?;
    std::thread::scope(|scope| {
        let (chunks, read) = std::sync::mpsc::sync_channel::<Result<Chunk>>(4);
        // Chunks given back once checked, to be filled again: a line is not
        // allocated on one thread and freed on the other, which made the
        // two wait on malloc's lock.
        let (give_back, given_back) = std::sync::mpsc::channel::<Chunk>();
        scope.spawn(move || {
            loop {
                let mut chunk = given_back.try_recv().unwrap_or_default();
                chunk.text.clear();
                chunk.lines.clear();
                while chunk.lines.len() < CHUNK && chunk.text.len() < CHUNK_TEXT {
                    let start = chunk.text.len();
                    match reader.append(&mut chunk.text) {
                        Some(Ok(number)) => chunk.lines.push((number, start..chunk.text.len())),
                        Some(Err(e)) => {
                            let _ = chunks.send(Ok(chunk));
                            let _ = chunks.send(Err(e));
                            return;
                        }
                        None => {
                            let _ = chunks.send(Ok(chunk));
                            return;
                        }
                    }
                }
                // The check stopped (it failed): nothing more to read.
                if chunks.send(Ok(chunk)).is_err() {
                    return;
                }
            }
        });
        let mut checker = Checker::default();
        for chunk in read {
            let mut chunk = chunk?;
            for (number, span) in &chunk.lines {
                checker.line(*number, &mut chunk.text[span.clone()])?;
            }
            let _ = give_back.send(chunk);
        }
        checker.finish(header)
    })
}

/// Lines of a dump in one buffer, as the check reads them.
#[derive(Default)]
struct Chunk {
    text: Vec<u8>,
    /// Each line's number and where it is in `text`.
    lines: Vec<(usize, std::ops::Range<usize>)>,
}

/// A chunk's bytes, about (a line is not cut).
const CHUNK_TEXT: usize = 1 << 20;

/// What [`check`] has seen of the lines read so far. A run line is proved
/// readable without building the run ([`proof`]); any other line, and a
/// run line the proof refuses, is read whole, which decides.
#[derive(Default)]
struct Checker {
    seen: Counts,
    holders: Holders,
    end: Option<(Counts, u64)>,
}

impl Checker {
    /// Checks line `number`.
    fn line(&mut self, number: usize, line: &mut [u8]) -> Result<()> {
        if self.end.is_none() && prove_run(line, &mut self.seen, &mut self.holders) {
            return Ok(());
        }
        let Object { number, line, .. } = read_object((number, line.to_vec()), false)?;
        if self.end.is_some() {
            return Err(Error::Damaged(format!(
                "line {number} follows the end line"
            )));
        }
        match line {
            Line::End {
                counts,
                secrets_left_out,
            } => self.end = Some((counts, secrets_left_out)),
            line => {
                line.prove_payload(number)?;
                if let Line::Run(whole) = &line {
                    let run = &whole.run;
                    self.holders.read(
                        &run.id,
                        run.trigger,
                        (&run.tenant, &run.task, run.scheduled_for),
                    );
                }
                line.count(&mut self.seen);
            }
        }
        Ok(())
    }

    /// What the dump holds, once every line after `header` is checked.
    fn finish(self, header: Header) -> Result<(Described, Holders)> {
        let Some((counts, secrets_left_out)) = self.end else {
            return Err(Error::Damaged("no end line".into()));
        };
        if counts != self.seen {
            return Err(Error::Damaged(format!(
                "the end line counts {counts}, the file holds {}",
                self.seen
            )));
        }
        let described = Described {
            ax: header.ax,
            created_at: header.created_at,
            counts,
            secrets_left_out,
        };
        Ok((described, self.holders.contested()))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::tenant::Quota;

    pub(super) const IMPORT: ImportOptions = ImportOptions { key_ttl: 1_000 };

    /// A store with a tenant and a secret, exported to `dir/name`.
    pub(super) fn dumped(dir: &Path, name: &str, include_secrets: bool) -> std::path::PathBuf {
        let store = MemoryStore::new();
        store
            .put_tenant(&TenantRecord::new("t1", Quota::default(), 1))
            .unwrap();
        store.secrets().put_secret("t1", "api", "v", 2).unwrap();
        let path = dir.join(name);
        let options = ExportOptions {
            include_secrets,
            now: 5,
        };
        let out = create_file(&path, include_secrets).unwrap();
        let exported = export(&store, out, &options).unwrap();
        assert_eq!(exported.secrets_left_out, u64::from(!include_secrets));
        path
    }

    pub(super) fn lines(path: &Path) -> Vec<String> {
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut MultiGzDecoder::new(File::open(path).unwrap()),
            &mut text,
        )
        .unwrap();
        text.lines().map(str::to_owned).collect()
    }

    pub(super) fn write(path: &Path, lines: &[String]) {
        let mut out = GzEncoder::new(File::create(path).unwrap(), Compression::fast());
        for line in lines {
            writeln!(out, "{line}").unwrap();
        }
        out.finish().unwrap();
    }

    /// A run's JSON text (record, events, logs) kept from a dump of this
    /// version is what encoding the parsed values gives, byte for byte
    /// (what a store stores in its place: `spans`).
    #[test]
    fn a_runs_json_text_is_what_encoding_it_gives() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::new();
        let mut run = crate::store::conformance::run(
            "r00000000000100000001",
            "t1",
            "a\"b",
            crate::model::RunStatus::Succeeded,
        );
        run.input = serde_json::json!({"z": 0.1, "a": [1.5e300, -0.0, "é\u{1}\"}]\\"], "m": {}});
        run.reason = Some("tab\tquote\"brace}".into());
        let mut event = crate::store::conformance::event(&run.id, "running", 1_001);
        event.reason = "quote\" brace} \u{1} é".into();
        store.insert_run(&run, false, None, &[event]).unwrap();
        let logs = crate::store::AttemptLogs {
            step: "s1".into(),
            attempt: 1,
            stdout: "out {\"]}\n\u{0}".into(),
            ..Default::default()
        };
        store.put_logs("t1", &run.id, &logs).unwrap();
        store
            .put_logs(
                "t1",
                &run.id,
                &crate::store::AttemptLogs { attempt: 2, ..logs },
            )
            .unwrap();
        let path = dir.path().join("json.ax-dump");
        export(
            &store,
            create_file(&path, false).unwrap(),
            &ExportOptions::default(),
        )
        .unwrap();

        let (_, objects) = open(&path).unwrap();
        let runs: Vec<WholeRun> = objects
            .filter_map(|o| match o.unwrap().line {
                Line::Run(whole) => Some(*whole),
                _ => None,
            })
            .collect();
        assert_eq!(runs.len(), 1);
        let whole = &runs[0];
        assert_eq!(whole.logs.len(), 2);
        let encoded = serde_json::to_vec(&whole.run).unwrap();
        assert_eq!(whole.json.run(), Some(&encoded[..]));
        assert_eq!(whole.events.len(), 1);
        let encoded = serde_json::to_vec(&whole.events).unwrap();
        assert_eq!(whole.json.events(), Some(&encoded[..]));
        for (i, logs) in whole.logs.iter().enumerate() {
            let encoded = serde_json::to_vec(logs).unwrap();
            assert_eq!(whole.json.logs(i), Some(&encoded[..]));
        }
    }

    #[test]
    fn secrets_are_left_out_unless_asked_for_and_then_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let without = dumped(dir.path(), "without", false);
        let described = verify(&without).unwrap();
        assert_eq!(described.counts.get("secret"), 0);
        assert_eq!(described.secrets_left_out, 1);
        assert!(!lines(&without).iter().any(|l| l.contains("\"v\"")));
        let with = dumped(dir.path(), "with", true);
        assert_eq!(verify(&with).unwrap().counts.get("secret"), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&with).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let target = MemoryStore::new();
        import(&target, &with, &IMPORT).unwrap();
        assert_eq!(
            target.secrets().get_secret("t1", "api").unwrap().as_deref(),
            Some("v")
        );
    }

    #[test]
    fn a_newer_format_is_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dumped(dir.path(), "d", false);
        let mut all = lines(&path);
        let this = format!("\"version\":{VERSION}");
        assert!(all[0].contains(&this), "{}", all[0]);
        all[0] = all[0].replace(&this, "\"version\":999");
        write(&path, &all);
        let e = import(&MemoryStore::new(), &path, &IMPORT).unwrap_err();
        assert!(matches!(e, Error::Newer { found: 999 }), "{e}");
        assert!(!e.to_string().contains('\n'));
    }

    /// Version 1 had no `key` lines; its dumps are read as they are.
    #[test]
    fn a_dump_of_version_1_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dumped(dir.path(), "d", false);
        let mut all = lines(&path);
        assert!(!all.iter().any(|l| l.contains("\"kind\":\"key\"")));
        all[0] = all[0].replace(&format!("\"version\":{VERSION}"), "\"version\":1");
        write(&path, &all);
        import(&MemoryStore::new(), &path, &IMPORT).unwrap();
    }

    #[test]
    fn a_truncated_dump_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dumped(dir.path(), "d", false);
        // Without its end line.
        let mut all = lines(&path);
        all.pop();
        write(&path, &all);
        let target = MemoryStore::new();
        let e = import(&target, &path, &IMPORT).unwrap_err();
        assert!(matches!(e, Error::Damaged(_)), "{e}");
        assert!(target.list_tenants().unwrap().is_empty());
        // Cut inside the compressed stream.
        let path = dumped(dir.path(), "cut", false);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 12]).unwrap();
        let e = import(&target, &path, &IMPORT).unwrap_err();
        assert!(matches!(e, Error::Damaged(_)), "{e}");
        // An end line that counts more than the file holds.
        let path = dumped(dir.path(), "miscounted", false);
        let mut all = lines(&path);
        all.remove(1);
        write(&path, &all);
        assert!(matches!(verify(&path), Err(Error::Damaged(_))));
    }

    #[test]
    fn a_file_that_is_not_a_dump_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain");
        std::fs::write(&path, b"hello").unwrap();
        assert!(verify(&path).is_err());
        write(&path, &["{\"kind\":\"tenant\"}".to_owned()]);
        assert!(matches!(verify(&path), Err(Error::NotADump(_))));
    }
}
