//! A whole store as a streaming, versioned logical dump (`ax store export`
//! / `ax store import`): what moves a deployment between sled and
//! PostgreSQL, in either direction, and what backs up a sled store. It goes
//! through the [`Store`] seam only, so every backend reads and writes it.
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
//! A file without the end line, with a damaged gzip stream, or whose counts
//! differ from its lines is refused before anything is written; so is a
//! newer format version. Readers of version 1 ignore fields they do not
//! know inside a record only as far as the record's own type does.
//!
//! Runs are read a page at a time ([`Runs::run_summaries_page`]), so an
//! export holds one page of runs however many the store keeps; an import
//! writes them in batches ([`Runs::restore_runs`]: each run whole, with
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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use super::{AlertQuery, KeyEntry, OutboxAlert, Store, StoreExt, Tree, WholeRun};
use crate::model::{DeadLetter, Millis, PluginRecord, PluginTag, ScheduleState, TaskRecord};
use crate::tenant::{DEFAULT_TENANT, TenantRecord, TokenRecord, UsageBucket};
use fires::{Holders, Order};
use writers::Writers;

mod fires;
mod spans;
mod writers;

/// The format version this ax writes, and the newest it reads.
pub const VERSION: u32 = 2;
/// The header's `format`.
const FORMAT: &str = "ax-dump";
/// Runs read (export) or written (import) per batch: large enough that a
/// batch's fixed cost vanishes, small enough that a batch stays in memory.
const RUN_BATCH: usize = 512;
/// Map entries read per page.
const MAP_PAGE: usize = 1024;
/// Idempotency keys read (export) or restored (import) per page.
const KEY_PAGE: usize = 1024;
/// Alerts read per page.
const ALERT_PAGE: usize = 1000;
/// The metadata a dump carries: the admin token's hash (`server.rs`), so a
/// moved deployment keeps its admin token.
const CARRIED_META: &[&str] = &["admin_token_sha256"];

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
}

/// How to export.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    /// Write secrets' values, in plain text (otherwise they are counted and
    /// left out).
    pub include_secrets: bool,
    /// The header's `created_at`.
    pub now: Millis,
}

/// What an export wrote.
#[derive(Clone, Debug, Default)]
pub struct Exported {
    /// Objects written, per kind.
    pub counts: Counts,
    /// Secrets not written (`include_secrets` off).
    pub secrets_left_out: u64,
}

/// A secret as the secret store keeps it (`store::secrets`).
#[derive(Serialize, Deserialize)]
struct StoredSecret {
    value: String,
    updated_at: Millis,
}

/// Writes the dump's lines, counting them.
///
/// The encoder is written through a buffer: serde_json writes each key and
/// string on its own, and flate2's encoder zero-fills its output buffer's
/// spare room on every write it is given, which was half of an export's
/// time (docs/PERFORMANCE.md, *Export and import*).
struct Writer<W: Write> {
    out: BufWriter<GzEncoder<W>>,
    counts: Counts,
}

impl<W: Write> Writer<W> {
    fn line<T: Serialize>(&mut self, line: &T) -> Result<()> {
        serde_json::to_writer(&mut self.out, line).map_err(std::io::Error::from)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    fn object(&mut self, line: Line) -> Result<()> {
        line.count(&mut self.counts);
        self.line(&line)
    }
}

/// Writes every object of `store` to `out` as a dump (gzip-compressed; `out`
/// is best buffered). Reads runs a page at a time.
pub fn export(store: &dyn Store, out: impl Write, options: &ExportOptions) -> Result<Exported> {
    // Fast compression: the dump is mostly JSON, which level 1 already
    // shrinks several times, at a fraction of the default level's time.
    let mut w = Writer {
        out: BufWriter::with_capacity(1 << 16, GzEncoder::new(out, Compression::fast())),
        counts: Counts::default(),
    };
    w.line(&Header {
        format: FORMAT.into(),
        version: VERSION,
        ax: env!("CARGO_PKG_VERSION").into(),
        created_at: options.now,
        secrets: options.include_secrets,
    })?;
    for key in CARRIED_META {
        if let Some(value) = store.get_meta(key)? {
            w.object(Line::Meta {
                key: (*key).into(),
                value,
            })?;
        }
    }
    // Every tenant that owns something: the stored ones, the default one
    // (used without a record) and those named by tasks and runs.
    let mut tenants: BTreeSet<String> = BTreeSet::from([DEFAULT_TENANT.to_owned()]);
    for tenant in store.list_tenants()? {
        tenants.insert(tenant.name.clone());
        w.object(Line::Tenant(tenant))?;
    }
    for token in store.list_tokens()? {
        w.object(Line::Token(token))?;
    }
    for task in store.list_tasks(None)? {
        tenants.insert(task.tenant.clone());
        let schedule = store.get_schedule(&task.tenant, &task.name)?;
        w.object(Line::Task { task, schedule })?;
    }
    export_runs(store, &mut w, &mut tenants)?;
    let mut after: Option<KeyEntry> = None;
    loop {
        let page = store.forgotten_keys(after.as_ref(), KEY_PAGE)?;
        let full = page.len() == KEY_PAGE;
        after = page.last().cloned();
        for key in page {
            w.object(Line::Key(key))?;
        }
        if !full {
            break;
        }
    }
    let mut blobs: HashSet<String> = HashSet::new();
    for tenant in &tenants {
        for plugin in store.list_plugins(tenant)? {
            if blobs.insert(plugin.digest.clone())
                && let Some(bytes) = store.get_blob(&plugin.digest)?
            {
                w.object(Line::Blob {
                    digest: plugin.digest.clone(),
                    bytes: hex::encode(bytes),
                })?;
            }
            w.object(Line::Plugin(plugin))?;
        }
        for tag in store.list_plugin_tags(tenant)? {
            w.object(Line::Tag(tag))?;
        }
        for dead in store.list_dead_letters(tenant, false)? {
            w.object(Line::DeadLetter(dead))?;
        }
        let mut cursor = None;
        loop {
            let (alerts, next) = store.list_alerts(&AlertQuery {
                tenant: tenant.clone(),
                status: None,
                limit: ALERT_PAGE,
                cursor: cursor.take(),
            })?;
            for alert in alerts {
                w.object(Line::Alert(alert))?;
            }
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        for bucket in store.usage(tenant, Millis::MIN, Millis::MAX)? {
            w.object(Line::Usage(bucket))?;
        }
    }
    for_each_entry(store, Tree::Kv, |key, value| {
        let key = String::from_utf8(key).map_err(|_| super::Error::Corrupt {
            key: "kv".into(),
            reason: "a key that is not UTF-8".into(),
        })?;
        w.object(Line::Kv {
            key,
            value: hex::encode(value),
        })
    })?;
    let mut left_out = 0;
    for_each_entry(store, Tree::Secrets, |key, value| {
        if !options.include_secrets {
            left_out += 1;
            return Ok(());
        }
        let (tenant, name) = split_secret_key(&key)?;
        let stored: StoredSecret = serde_json::from_slice(&value).map_err(|_| {
            // The error's text could quote the value: only the key is named.
            super::Error::Corrupt {
                key: format!("secrets/{tenant}/{name}"),
                reason: "unreadable secret record".into(),
            }
        })?;
        w.object(Line::Secret {
            tenant,
            name,
            value: stored.value,
            updated_at: stored.updated_at,
        })
    })?;
    let counts = w.counts.clone();
    w.line(&Line::End {
        counts: counts.clone(),
        secrets_left_out: left_out,
    })?;
    w.out
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?
        .finish()?
        .flush()?;
    Ok(Exported {
        counts,
        secrets_left_out: left_out,
    })
}

/// Writes every run, a page of summaries at a time, each with its events,
/// logs and attempt records; adds their tenants to `tenants`.
///
/// Reading a page whole (a database's round trips and the decoding of its
/// rows, or sled's lookups) took longer than encoding it, so [`READERS`]
/// threads read pages while this one encodes and compresses
/// (docs/PERFORMANCE.md, *Export: reading while writing*): a pager walks
/// the summaries (keyset paging is sequential, and cheap) and deals page
/// `n` to reader `n % READERS`; this thread takes the readers' pages in
/// the same turn, so runs are written in order. Each reader holds a page
/// or two, so memory stays a few pages.
fn export_runs<W: Write>(
    store: &dyn Store,
    w: &mut Writer<W>,
    tenants: &mut BTreeSet<String>,
) -> Result<()> {
    use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
    std::thread::scope(|scope| {
        let mut deal: Vec<SyncSender<Result<Vec<String>>>> = Vec::new();
        let mut read: Vec<Receiver<Result<Vec<WholeRun>>>> = Vec::new();
        for _ in 0..READERS {
            let (ids_in, ids) = sync_channel::<Result<Vec<String>>>(1);
            let (runs, runs_out) = sync_channel::<Result<Vec<WholeRun>>>(1);
            deal.push(ids_in);
            read.push(runs_out);
            scope.spawn(move || {
                for page in ids {
                    let whole = page.and_then(|ids| {
                        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                        Ok(store.whole_runs(&ids)?)
                    });
                    // The writer stopped (it failed): nothing more to read.
                    if runs.send(whole).is_err() {
                        return;
                    }
                }
            });
        }
        scope.spawn(move || {
            let mut after: Option<super::RunSummary> = None;
            for n in 0.. {
                let to = &deal[n % READERS];
                let page = match store.run_summaries_page(after.as_ref(), RUN_BATCH) {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = to.send(Err(e.into()));
                        return;
                    }
                };
                let full = page.len() == RUN_BATCH;
                let ids = page.iter().map(|s| s.id.to_string()).collect();
                after = page.into_iter().last();
                if to.send(Ok(ids)).is_err() || !full {
                    return;
                }
            }
        });
        // A reader's channel ends after its last page: every page before
        // it in the turn was written.
        for n in 0.. {
            let Ok(page) = read[n % READERS].recv() else {
                return Ok(());
            };
            for whole in page? {
                if !tenants.contains(whole.run.tenant.as_str()) {
                    tenants.insert(whole.run.tenant.to_string());
                }
                w.object(Line::Run(Box::new(whole)))?;
            }
        }
        Ok(())
    })
}

/// Threads reading pages of runs whole for an export ([`export_runs`]).
const READERS: usize = 2;

/// Calls `f` with every entry of `tree`, a page at a time.
fn for_each_entry(
    store: &dyn Store,
    tree: Tree,
    mut f: impl FnMut(Vec<u8>, Vec<u8>) -> Result<()>,
) -> Result<()> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = store.map_page(tree, after.as_deref(), MAP_PAGE)?;
        let done = page.len() < MAP_PAGE;
        for (key, value) in page {
            after = Some(key.clone());
            f(key, value)?;
        }
        if done {
            return Ok(());
        }
    }
}

/// `tenant\0name`, as the secret store keys a secret.
fn split_secret_key(key: &[u8]) -> Result<(String, String)> {
    let text = std::str::from_utf8(key).ok();
    match text.and_then(|t| t.split_once('\0')) {
        Some((tenant, name)) => Ok((tenant.to_owned(), name.to_owned())),
        None => Err(super::Error::Corrupt {
            key: "secrets".into(),
            reason: "a key that is not tenant\\0name".into(),
        }
        .into()),
    }
}

/// How to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// How long, from its run's creation, an imported run's idempotency key
    /// is remembered (the dump does not hold each key's own expiry).
    pub key_ttl: Millis,
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
    let file = File::open(path)?;
    let mut reader = BufReader::with_capacity(1 << 16, MultiGzDecoder::new(BufReader::new(file)));
    let mut buffer = Vec::new();
    let mut next_line = move || -> Option<Result<Vec<u8>>> {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer) {
            Ok(0) => None,
            Ok(_) => {
                if buffer.last() == Some(&b'\n') {
                    buffer.pop();
                    if buffer.last() == Some(&b'\r') {
                        buffer.pop();
                    }
                }
                Some(Ok(std::mem::take(&mut buffer)))
            }
            Err(e) => Some(Err(read_error(e))),
        }
    };
    let first = match next_line() {
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
    let mut number = 1;
    let lines = std::iter::from_fn(move || {
        number += 1;
        Some(next_line()?.map(|line| (number, line)))
    });
    Ok((header, lines))
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
/// readable, an end line whose counts match the lines. Writes nothing.
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
    let (header, lines) = open_lines(path)?;
    std::thread::scope(|scope| {
        let (chunks, read) = std::sync::mpsc::sync_channel::<Vec<Result<NumberedLine>>>(4);
        scope.spawn(move || {
            let mut chunk = Vec::with_capacity(CHUNK);
            for line in lines {
                chunk.push(line);
                if chunk.len() == CHUNK {
                    // The check stopped (it failed): nothing more to read.
                    if chunks.send(std::mem::take(&mut chunk)).is_err() {
                        return;
                    }
                }
            }
            let _ = chunks.send(chunk);
        });
        check_objects(
            header,
            read.into_iter()
                .flatten()
                .map(|l| l.and_then(|l| read_object(l, false))),
        )
    })
}

/// [`check`] of the objects after `header`.
fn check_objects(
    header: Header,
    objects: impl Iterator<Item = Result<Object>>,
) -> Result<(Described, Holders)> {
    let mut seen = Counts::default();
    let mut holders = Holders::new();
    let mut end = None;
    for object in objects {
        let Object { number, line, .. } = object?;
        if end.is_some() {
            return Err(Error::Damaged(format!(
                "line {number} follows the end line"
            )));
        }
        match line {
            Line::End {
                counts,
                secrets_left_out,
            } => end = Some((counts, secrets_left_out)),
            line => {
                if let Line::Run(whole) = &line {
                    holders.read(&whole.run);
                }
                line.count(&mut seen);
            }
        }
    }
    let Some((counts, secrets_left_out)) = end else {
        return Err(Error::Damaged("no end line".into()));
    };
    if counts != seen {
        return Err(Error::Damaged(format!(
            "the end line counts {counts}, the file holds {seen}"
        )));
    }
    let described = Described {
        ax: header.ax,
        created_at: header.created_at,
        counts,
        secrets_left_out,
    };
    Ok((described, holders.contested()))
}

/// What makes a store non-empty, if anything (named for the error).
pub fn contents(store: &dyn Store) -> Result<Option<String>> {
    let mut found = Vec::new();
    if !store.list_tenants()?.is_empty() {
        found.push("tenants");
    }
    if !store.list_tokens()?.is_empty() {
        found.push("tokens");
    }
    if !store.list_tasks(None)?.is_empty() {
        found.push("tasks");
    }
    if !store.run_summaries_page(None, 1)?.is_empty() {
        found.push("runs");
    }
    if !store.list_plugins(DEFAULT_TENANT)?.is_empty() {
        found.push("plugins");
    }
    if !store.map_page(Tree::Kv, None, 1)?.is_empty() {
        found.push("KV entries");
    }
    if !store.map_page(Tree::Secrets, None, 1)?.is_empty() {
        found.push("secrets");
    }
    Ok((!found.is_empty()).then(|| found.join(", ")))
}

/// Imports the dump at `path` into `store`, which must be empty: the whole
/// file is checked first ([`verify`]), then written. Returns what was
/// imported, per kind.
///
/// A thread reads and parses the file ahead of the writes, a chunk of
/// lines at a time: a batch of runs is written while the next is parsed,
/// and two batches are written at a time ([`writers`]).
/// Chunks and batches are bounded by lines and by bytes
/// ([`CHUNK_BYTES`], [`BATCH_BYTES`]), so memory stays a few batches
/// however large a run's logs are.
pub fn import(store: &dyn Store, path: &Path, options: &ImportOptions) -> Result<Counts> {
    import_in_batches(store, path, options, IMPORT_BATCH)
}

/// [`import`], `batch` runs at most per batch (tests use small ones).
pub(crate) fn import_in_batches(
    store: &dyn Store,
    path: &Path,
    options: &ImportOptions,
    batch: usize,
) -> Result<Counts> {
    let (_, holders) = check(path)?;
    if let Some(found) = contents(store)? {
        return Err(Error::NotEmpty(found));
    }
    let (_, objects) = open(path)?;
    std::thread::scope(|scope| {
        let (chunks, read) = std::sync::mpsc::sync_channel::<Result<Vec<Object>>>(CHUNKS_AHEAD);
        scope.spawn(move || {
            let (mut chunk, mut bytes) = (Vec::with_capacity(CHUNK), 0);
            for object in objects {
                let object = match object {
                    Ok(object) => object,
                    Err(e) => {
                        let _ = chunks.send(Err(e));
                        return;
                    }
                };
                bytes += object.bytes;
                chunk.push(object);
                if chunk.len() == CHUNK || bytes >= CHUNK_BYTES {
                    bytes = 0;
                    // The writer stopped (it failed): nothing more to read.
                    if chunks.send(Ok(std::mem::take(&mut chunk))).is_err() {
                        return;
                    }
                }
            }
            let _ = chunks.send(Ok(chunk));
        });
        let writers = Writers::new(scope, store, options.key_ttl);
        let mut writer = Importer::new(store, writers, Order::new(holders));
        writer.batch = batch;
        for chunk in read {
            for object in chunk? {
                writer.object(object)?;
            }
        }
        writer.finish()
    })
}

/// Runs an import writes per batch, and the most bytes of their lines: a
/// larger batch costs fewer commits (a PostgreSQL commit waits for its
/// flush to disk; 512 runs per batch spent a fifth of an import there).
const IMPORT_BATCH: usize = 2048;
const BATCH_BYTES: usize = 32 << 20;
/// Lines parsed per chunk, their most bytes, and the chunks parsed ahead
/// of the writes (a batch's worth).
const CHUNK: usize = 256;
const CHUNK_BYTES: usize = 4 << 20;
const CHUNKS_AHEAD: usize = IMPORT_BATCH / CHUNK;

/// Writes a dump's objects into a store, runs and map entries in batches.
struct Importer<'a, 'scope> {
    store: &'a dyn Store,
    imported: Counts,
    /// Runs per batch at most ([`IMPORT_BATCH`]).
    batch: usize,
    runs: Vec<WholeRun>,
    /// The order runs are written in ([`fires`]).
    order: Order,
    writers: Writers<'scope, 'a>,
    /// The bytes of the batched runs' lines.
    run_bytes: usize,
    kv: Vec<(Vec<u8>, Vec<u8>)>,
    keys: Vec<KeyEntry>,
}

impl<'a, 'scope> Importer<'a, 'scope> {
    fn new(store: &'a dyn Store, writers: Writers<'scope, 'a>, order: Order) -> Self {
        Importer {
            store,
            imported: Counts::default(),
            batch: IMPORT_BATCH,
            runs: Vec::with_capacity(IMPORT_BATCH),
            order,
            writers,
            run_bytes: 0,
            kv: Vec::new(),
            keys: Vec::new(),
        }
    }

    fn object(&mut self, object: Object) -> Result<()> {
        let Object {
            number,
            bytes,
            line,
        } = object;
        let store = self.store;
        line.count(&mut self.imported);
        match line {
            Line::Meta { key, value } => store.put_meta(&key, &value)?,
            Line::Tenant(tenant) => store.put_tenant(&tenant)?,
            Line::Token(token) => store.put_token(&token)?,
            Line::Task { task, schedule } => {
                let schedule = schedule.unwrap_or_else(|| ScheduleState {
                    tenant: task.tenant.clone(),
                    task: task.name.clone(),
                    next_fire: None,
                    last_fired: None,
                    paused: false,
                });
                store.put_task(&task, &schedule)?;
            }
            Line::Run(whole) => {
                for (whole, bytes) in self.order.next(*whole, bytes) {
                    self.push_run(whole, bytes)?;
                }
            }
            Line::Blob { digest, bytes } => {
                let bytes = hex::decode(&bytes)
                    .map_err(|e| Error::Damaged(format!("line {number}: blob bytes: {e}")))?;
                let stored = store.put_blob(&bytes)?;
                if stored != digest {
                    return Err(Error::Damaged(format!(
                        "line {number}: blob {digest} holds bytes of digest {stored}"
                    )));
                }
            }
            Line::Plugin(plugin) => store.put_plugin(&plugin)?,
            Line::Tag(tag) => store.put_plugin_tag(&tag)?,
            Line::DeadLetter(dead) => store.put_dead_letter(&dead)?,
            Line::Alert(alert) => store.put_alerts(std::slice::from_ref(&alert))?,
            Line::Usage(bucket) => store.add_usage(std::slice::from_ref(&bucket))?,
            Line::Key(key) => {
                self.keys.push(key);
                if self.keys.len() >= KEY_PAGE {
                    self.restore_keys()?;
                }
            }
            Line::Kv { key, value } => {
                let value = hex::decode(&value)
                    .map_err(|e| Error::Damaged(format!("line {number}: KV value: {e}")))?;
                self.kv.push((key.into_bytes(), value));
                if self.kv.len() >= MAP_PAGE {
                    store.restore_map(Tree::Kv, &self.kv)?;
                    self.kv.clear();
                }
            }
            Line::Secret {
                tenant,
                name,
                value,
                updated_at,
            } => {
                store
                    .secrets()
                    .put_secret(&tenant, &name, &value, updated_at)?;
            }
            Line::End { .. } => {}
        }
        Ok(())
    }

    /// Writes what is still batched; returns what was imported.
    fn finish(mut self) -> Result<Counts> {
        for (whole, bytes) in self.order.rest() {
            self.push_run(whole, bytes)?;
        }
        self.restore_runs()?;
        self.writers.land()?;
        self.restore_keys()?;
        self.store.restore_map(Tree::Kv, &self.kv)?;
        Ok(self.imported)
    }

    /// Adds a run to the batch, and starts storing the batch once full.
    fn push_run(&mut self, whole: WholeRun, bytes: usize) -> Result<()> {
        self.runs.push(whole);
        self.run_bytes += bytes;
        if self.runs.len() >= self.batch || self.run_bytes >= BATCH_BYTES {
            self.restore_runs()?;
        }
        Ok(())
    }

    /// Starts storing the batch of runs ([`Runs::restore_runs`](super::Runs::restore_runs),
    /// through [`Writers`]); empties it.
    fn restore_runs(&mut self) -> Result<()> {
        if self.runs.is_empty() {
            return Ok(());
        }
        let runs = std::mem::replace(&mut self.runs, Vec::with_capacity(self.batch));
        self.run_bytes = 0;
        self.writers.write(runs)
    }

    /// Stores the page of forgotten keys, after the runs read so far (a
    /// key never holds back a run of the dump); empties it.
    fn restore_keys(&mut self) -> Result<()> {
        if self.keys.is_empty() {
            return Ok(());
        }
        self.restore_runs()?;
        self.writers.land()?;
        self.store.restore_keys(&self.keys)?;
        self.keys.clear();
        Ok(())
    }
}

/// Opens `path` for a dump: created new (never over an existing file), and
/// readable by its owner only when it holds secrets.
pub fn create_file(path: &Path, secrets: bool) -> Result<BufWriter<File>> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secrets {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secrets;
    Ok(BufWriter::with_capacity(1 << 16, options.open(path)?))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::tenant::Quota;

    const IMPORT: ImportOptions = ImportOptions { key_ttl: 1_000 };

    /// A store with a tenant and a secret, exported to `dir/name`.
    fn dumped(dir: &Path, name: &str, include_secrets: bool) -> std::path::PathBuf {
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

    fn lines(path: &Path) -> Vec<String> {
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut MultiGzDecoder::new(File::open(path).unwrap()),
            &mut text,
        )
        .unwrap();
        text.lines().map(str::to_owned).collect()
    }

    fn write(path: &Path, lines: &[String]) {
        let mut out = GzEncoder::new(File::create(path).unwrap(), Compression::fast());
        for line in lines {
            writeln!(out, "{line}").unwrap();
        }
        out.finish().unwrap();
    }

    /// Runs of several pages, read by several readers, are written in the
    /// order of the store's summaries, and read back whole.
    #[test]
    fn runs_of_many_pages_are_written_in_order_and_imported_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::new();
        let runs: Vec<crate::store::NewRun> = (0..RUN_BATCH * READERS + 7)
            .map(|i| {
                let id = format!("r{:012x}{i:08x}", 1_000 + i);
                let task = format!("t{}", i % 3);
                crate::store::NewRun {
                    run: crate::store::conformance::run(
                        &id,
                        "default",
                        &task,
                        crate::model::RunStatus::Succeeded,
                    ),
                    unique_fire: false,
                    schedule: None,
                    events: Vec::new(),
                    key_expires_at: Millis::MAX,
                }
            })
            .collect();
        store.insert_runs(&runs).unwrap();
        let path = dir.path().join("runs.ax-dump");
        export(
            &store,
            create_file(&path, false).unwrap(),
            &ExportOptions::default(),
        )
        .unwrap();

        let mut walked = Vec::new();
        let mut after = None;
        loop {
            let page = store.run_summaries_page(after.as_ref(), 100).unwrap();
            walked.extend(page.iter().map(|s| s.id.to_string()));
            if page.len() < 100 {
                break;
            }
            after = page.into_iter().last();
        }
        let written: Vec<String> = lines(&path)
            .iter()
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["kind"] == "run").then(|| v["run"]["id"].as_str().unwrap().to_owned())
            })
            .collect();
        assert_eq!(written.len(), runs.len());
        assert_eq!(written, walked, "in the order of the summaries");

        let target = MemoryStore::new();
        import(&target, &path, &IMPORT).unwrap();
        let ids: Vec<&str> = walked.iter().map(String::as_str).collect();
        assert_eq!(
            target.whole_runs(&ids).unwrap(),
            store.whole_runs(&ids).unwrap()
        );
    }

    /// A run's JSON text kept from a dump of this version is what encoding
    /// the parsed values gives, byte for byte (what a store stores in its
    /// place: `spans`).
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
        store.insert_run(&run, false, None, &[]).unwrap();
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

    /// A dump that holds a run twice is refused naming it, and says that
    /// what came before it was written.
    #[test]
    fn a_run_held_twice_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twice.ax-dump");
        let store = MemoryStore::new();
        let run = crate::store::conformance::run(
            "r000000001000000000001",
            "default",
            "a",
            crate::model::RunStatus::Succeeded,
        );
        store.insert_run(&run, false, None, &[]).unwrap();
        export(
            &store,
            create_file(&path, false).unwrap(),
            &ExportOptions::default(),
        )
        .unwrap();
        let mut all = lines(&path);
        let at = all
            .iter()
            .position(|l| l.starts_with(r#"{"kind":"run""#))
            .unwrap();
        all.insert(at, all[at].clone());
        let end = all.len() - 1;
        all[end] = all[end].replace(r#""run":1"#, r#""run":2"#);
        write(&path, &all);
        let e = import(&MemoryStore::new(), &path, &IMPORT).unwrap_err();
        assert!(
            matches!(&e, Error::Twice(id) if id == run.id.as_str()),
            "{e}"
        );
        assert!(
            e.to_string().contains("the runs before it were imported"),
            "{e}"
        );
    }

    #[test]
    fn a_store_that_is_not_empty_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dumped(dir.path(), "d", false);
        let target = MemoryStore::new();
        target
            .put_tenant(&TenantRecord::new("x", Quota::default(), 1))
            .unwrap();
        let e = import(&target, &path, &IMPORT).unwrap_err();
        assert!(
            matches!(e, Error::NotEmpty(ref what) if what == "tenants"),
            "{e}"
        );
        assert_eq!(target.list_tenants().unwrap().len(), 1);
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
