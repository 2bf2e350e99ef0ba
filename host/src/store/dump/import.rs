//! An import: a dump read into an empty store, the whole file checked
//! first ([`verify`](super::verify)), then written, runs in batches two at
//! a time ([`writers`](super::writers)), each fire claimed by more than one
//! run going to the run created first ([`fires`](super::fires)).

use std::path::Path;

use super::fires::Order;
use super::writers::Writers;
use super::{CHUNK, Counts, Error, KEY_PAGE, Line, MAP_PAGE, Object, Result, check, open, payload};
use crate::model::{Millis, ScheduleState};
use crate::store::{KeyEntry, Store, StoreExt, Tree, WholeRun};
use crate::tenant::DEFAULT_TENANT;

/// How to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// How long, from its run's creation, an imported run's idempotency key
    /// is remembered (the dump does not hold each key's own expiry).
    pub key_ttl: Millis,
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
/// file is checked first ([`verify`](super::verify)), then written. Returns what was
/// imported, per kind.
///
/// A thread reads and parses the file ahead of the writes, a chunk of
/// lines at a time: a batch of runs is written while the next is parsed,
/// and two batches are written at a time ([`writers`](super::writers)).
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
/// A chunk's most bytes (and [`CHUNK`] lines at most), and the chunks
/// parsed ahead of the writes (a batch's worth).
const CHUNK_BYTES: usize = 4 << 20;
const CHUNKS_AHEAD: usize = IMPORT_BATCH / CHUNK;

/// Writes a dump's objects into a store, runs and map entries in batches.
struct Importer<'a, 'scope> {
    store: &'a dyn Store,
    imported: Counts,
    /// Runs per batch at most ([`IMPORT_BATCH`]).
    batch: usize,
    runs: Vec<WholeRun>,
    /// The order runs are written in ([`fires`](super::fires)).
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
            Line::Blob { digest, bytes: hex } => {
                let mut bytes = Vec::with_capacity(hex.len() / 2);
                payload::blob(number, &digest, &hex, |p| bytes.extend_from_slice(p))?;
                store.put_blob(&bytes)?;
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
                let mut bytes = Vec::with_capacity(value.len() / 2);
                payload::kv_value(number, &value, |p| bytes.extend_from_slice(p))?;
                self.kv.push((key.into_bytes(), bytes));
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

    /// Starts storing the batch of runs ([`Runs::restore_runs`](crate::store::Runs::restore_runs),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dump::tests::{IMPORT, dumped, lines, write};
    use crate::store::dump::{ExportOptions, create_file, export};
    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::tenant::{Quota, TenantRecord};

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
}
