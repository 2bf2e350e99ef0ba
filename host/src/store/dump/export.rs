//! An export: every object of a store written as a dump (the format:
//! `dump.rs`), gzip-compressed, with runs read a page at a time on threads
//! of their own ([`export_runs`]) and secrets only when asked for; and the
//! file a dump is written to ([`create_file`]).

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use super::{Counts, FORMAT, Header, KEY_PAGE, Line, MAP_PAGE, RUN_BATCH, Result, VERSION};
use crate::model::Millis;
use crate::store::{AlertQuery, KeyEntry, RunSummary, Store, Tree, WholeRun};
use crate::tenant::DEFAULT_TENANT;

/// Alerts read per page.
const ALERT_PAGE: usize = 1000;
/// The metadata a dump carries: the admin token's hash (`server.rs`), so a
/// moved deployment keeps its admin token.
const CARRIED_META: &[&str] = &["admin_token_sha256"];

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
        let key = String::from_utf8(key).map_err(|_| crate::store::Error::Corrupt {
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
            crate::store::Error::Corrupt {
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
            let mut after: Option<RunSummary> = None;
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
        None => Err(crate::store::Error::Corrupt {
            key: "secrets".into(),
            reason: "a key that is not tenant\\0name".into(),
        }
        .into()),
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
    use super::*;
    use crate::store::dump::import;
    use crate::store::dump::tests::{IMPORT, lines};
    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;

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
}
