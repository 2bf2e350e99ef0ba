//! ax on PostgreSQL (issue 35, in steps; docs/ARCHITECTURE.md, "The
//! PostgreSQL store"): `ax serve --store postgres://…`.
//!
//! Every concept of the [`Store`](super::Store) seam, each in a file of its
//! own (`catalog`, `runs` with `outputs`, `outbox`, `tenancy`, `leases`,
//! `operations`, the KV and secret maps in `maps`), over one [`Database`]:
//! the connection pool behind the synchronous seam (`pool.rs`) and the
//! schema as embedded, versioned migrations applied under a lock
//! (`migrate.rs`, `ax store migrate`). It passes the same conformance suite
//! as memory and sled (`conformance_tests.rs`, on a scratch database per
//! test: [`testing`]).

mod catalog;
#[cfg(test)]
mod conformance_tests;
mod copy;
mod inserts;
mod leases;
mod maps;
mod migrate;
mod operations;
mod outbox;
mod outputs;
#[cfg(test)]
mod plans_tests;
pub mod pool;
mod restore;
mod rows;
mod runs;
mod statements;
mod tenancy;
pub mod testing;
mod tls;
mod writes;

pub use self::maps::PgMap;
pub use self::migrate::{MIGRATIONS, Migration, Plan, latest};
pub use self::pool::Pool;

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::{Client, Transaction};

use self::statements::Cached;

/// A connection of the pool inside [`Database::with`].
pub type Cx<'a> = Cached<'a, Client>;
/// A transaction inside [`Database::transaction`].
pub type Tx<'a> = Cached<'a, Transaction<'a>>;

use super::{Error, Result};

/// A PostgreSQL database holding an ax store.
pub struct Database {
    pool: Pool,
}

impl Database {
    /// Connects to `url` with at most `connections` connections; nothing is
    /// written (see [`Database::migrate`]).
    pub fn connect(url: &str, connections: usize) -> Result<Database> {
        Ok(Database {
            pool: Pool::connect(url, connections)?,
        })
    }

    /// The connections.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Where the schema stands and what [`Database::migrate`] would apply;
    /// writes nothing. A schema newer than this binary's is an error.
    pub fn plan(&self) -> Result<Plan> {
        let conn = self.pool.get()?;
        migrate::plan(&conn, self.pool.shown())
    }

    /// Applies the pending migrations (each once, whoever else migrates the
    /// same database at the same time); returns what it applied.
    pub fn migrate(&self) -> Result<Vec<Migration>> {
        self.migrate_until(migrate::latest())
    }

    /// [`Database::migrate`], stopping after version `until` (tests write
    /// data in an older schema this way, then migrate it).
    pub fn migrate_until(&self, until: i32) -> Result<Vec<Migration>> {
        let mut conn = self.pool.get()?;
        migrate::migrate(&mut conn, self.pool.shown(), until)
    }
}

/// The store on PostgreSQL: the concepts of the [`Store`](super::Store)
/// seam, each in a file of its own here, over one [`Database`].
pub struct PgStore {
    /// Shared with the maps of the KV and secret stores.
    db: Arc<Database>,
    /// Index rows one `list_runs` examines at most (`rules::MAX_SCAN`).
    scan_limit: usize,
    /// The plugins' key-value store, over the map `kv`.
    kv: Arc<super::kv::KvEngine<PgMap>>,
    /// Tenants' secrets, over the map `secrets`.
    secrets: Arc<super::secrets::SecretEngine<PgMap>>,
}

impl PgStore {
    /// Connects to `url` and brings its schema to this binary's version
    /// ([`Database::migrate`]).
    pub fn open(url: &str, connections: usize) -> Result<PgStore> {
        let db = Arc::new(Database::connect(url, connections)?);
        db.migrate()?;
        Ok(PgStore {
            kv: Arc::new(super::kv::KvEngine::with_map(PgMap::new(db.clone(), "kv"))),
            secrets: Arc::new(super::secrets::SecretEngine::with_map(PgMap::new(
                db.clone(),
                "secrets",
            ))),
            db,
            scan_limit: super::rules::MAX_SCAN,
        })
    }

    /// Statements its calls ran so far (docs/POSTGRES.md counts them per
    /// run with this).
    pub fn statements_run(&self) -> u64 {
        self.db.pool().statements_run()
    }

    /// The same store examining at most `limit` index rows per `list_runs`
    /// (the conformance suite probes the bound with a small one).
    pub fn with_scan_limit(mut self, limit: usize) -> Self {
        self.scan_limit = limit.max(1);
        self
    }

    /// Index rows one `list_runs` examines at most.
    pub fn scan_limit(&self) -> usize {
        self.scan_limit
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }
}

/// What a query inside [`Database::with`] or [`Database::transaction`]
/// can fail with: the driver's error (mapped to the store's at the end,
/// knowing the database) or the store's own (a conflict, a corrupt record).
#[derive(Debug)]
pub enum Fail {
    /// The driver's.
    Pg(tokio_postgres::Error),
    /// The store's.
    Store(Error),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Fail::Pg(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Store(e)
    }
}

/// Results inside [`Database::with`] and [`Database::transaction`].
pub type PgResult<T> = std::result::Result<T, Fail>;

impl Database {
    /// Runs `f` on a connection of the pool (one statement, or several
    /// that need not be atomic), waiting for it on this thread.
    pub fn with<T>(&self, f: impl AsyncFnOnce(&Cx<'_>) -> PgResult<T>) -> Result<T> {
        let mut conn = self.pool.get()?;
        let statements = conn.statements();
        let result = pool::block(f(&Cached::new(&*conn, &statements)));
        result.map_err(|e| self.fail_on(&mut conn, e))
    }

    /// Runs `f` in one transaction (read committed), committed when `f`
    /// returns `Ok` and rolled back when it fails: all of its writes are
    /// stored or none.
    pub fn transaction<T>(&self, f: impl AsyncFnOnce(&Tx<'_>) -> PgResult<T>) -> Result<T> {
        let mut conn = self.pool.get()?;
        let statements = conn.statements();
        pool::block(async {
            statements.ran(2);
            let tx = conn.transaction().await?;
            let value = f(&Cached::new(&tx, &statements)).await?;
            tx.commit().await?;
            Ok(value)
        })
        .map_err(|e| self.fail_on(&mut conn, e))
    }

    /// [`Database::fail`] of a call on `conn`, which is dropped rather than
    /// given back when the error says its connection ended.
    fn fail_on(&self, conn: &mut pool::Conn<'_>, e: Fail) -> Error {
        if let Fail::Pg(pg) = &e {
            conn.note(pg);
        }
        self.fail(e)
    }

    /// `e` as the store's error (a driver error knowing this database).
    pub fn fail(&self, e: Fail) -> Error {
        match e {
            Fail::Pg(e) => pool::error(self.pool.shown(), &e),
            Fail::Store(e) => e,
        }
    }
}

/// A name (tenant, task, plugin, step, id…) as a text column holds it.
/// PostgreSQL's text cannot hold NUL, which the store's names may (the seam
/// does not forbid it; the API's rules do), so NUL and U+0001 are escaped in
/// a way that keeps byte order: `\0` → `\1\1`, `\1` → `\1\2`. Every
/// other name is stored as it is, readable in `psql`. [`name`] undoes it.
pub fn key(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(['\0', '\u{1}']) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 2);
    for c in name.chars() {
        match c {
            '\0' => out.push_str("\u{1}\u{1}"),
            '\u{1}' => out.push_str("\u{1}\u{2}"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A name read back from a text column ([`key`] undone).
pub fn name(column: &str) -> String {
    if !column.contains('\u{1}') {
        return column.to_string();
    }
    let mut out = String::with_capacity(column.len());
    let mut chars = column.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\u{1}') {
            (_, true) => out.push(if chars.next() == Some('\u{1}') {
                '\0'
            } else {
                '\u{1}'
            }),
            (c, false) => out.push(c),
        }
    }
    out
}

/// A record as stored in a `record` column: its JSON, as the API writes it
/// (sled keeps its hot records compact instead, `store/sled/compact.rs`).
pub fn encode<T: Serialize>(value: &T) -> PgResult<Vec<u8>> {
    serde_json::to_vec(value)
        .map_err(|e| Fail::Store(Error::Backend(format!("encoding a record: {e}"))))
}

/// A `record` column read back; `key` names the row in the error when the
/// bytes are not the record (never a panic).
pub fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> PgResult<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Fail::Store(Error::Corrupt {
            key: key.to_string(),
            reason: e.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::testing::TestDatabase;
    use super::*;
    use crate::store::Error;

    fn tables(db: &Database) -> Vec<String> {
        let conn = db.pool().get().expect("a connection");
        pool::block(conn.query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1",
            &[],
        ))
        .expect("listed")
        .iter()
        .map(|r| r.get(0))
        .collect()
    }

    #[test]
    fn names_with_nul_are_escaped_keeping_their_order() {
        let mut names = [
            "a",
            "a\0b",
            "a\u{1}",
            "a\u{1}\u{1}",
            "a\u{2}",
            "",
            "\0",
            "b",
        ];
        names.sort_unstable();
        let keys: Vec<String> = names.iter().map(|n| key(n).into_owned()).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
        for (n, k) in names.iter().zip(&keys) {
            assert!(!k.contains('\0'), "{k:?}");
            assert_eq!(name(k), *n);
        }
        assert!(matches!(key("plain"), std::borrow::Cow::Borrowed(_)));
    }

    /// A write's events are one row; a row an earlier ax wrote (one event)
    /// is read beside them, in order, by `events` and `whole_runs`.
    #[test]
    fn events_are_one_row_per_write_and_single_event_rows_still_read() {
        use crate::store::{Runs, StoreExt};
        let Some(scratch) = TestDatabase::create() else {
            return;
        };
        let store = PgStore::open(scratch.url(), 2).expect("opens");
        let run = crate::store::conformance::run(
            "r000000001000000000001",
            "t1",
            "a",
            crate::model::RunStatus::Queued,
        );
        let event = |to: &str, at| crate::store::conformance::event(&run.id, to, at);
        let created = [event("queued", 1), event("queued", 2)];
        store
            .insert_run(&run, false, None, &created)
            .expect("inserted");
        // A row as an earlier ax wrote it: one event, not a list.
        let old = encode(&event("running", 3)).expect("encoded");
        store
            .database()
            .with(async |c| {
                c.execute(
                    "INSERT INTO ax_events (run_id, bytes, record) VALUES ($1, $2, $3)",
                    &[&run.id.as_str(), &(old.len() as i64), &old],
                )
                .await?;
                Ok(())
            })
            .expect("an old row");
        let rows: i64 = store
            .database()
            .with(async |c| {
                Ok(c.query_one("SELECT count(*) FROM ax_events", &[])
                    .await?
                    .get(0))
            })
            .expect("counted");
        assert_eq!(
            rows, 2,
            "the insert's two events in one row, and the old row"
        );
        let all = vec![event("queued", 1), event("queued", 2), event("running", 3)];
        assert_eq!(store.events(&run.id).expect("read"), all);
        let whole = store.whole_runs(&[run.id.as_str()]).expect("read whole");
        assert_eq!(whole[0].events, all);
    }

    #[test]
    fn a_dry_run_lists_every_migration_and_writes_nothing() {
        let Some(scratch) = TestDatabase::create() else {
            return;
        };
        let db = Database::connect(scratch.url(), 2).expect("connects");
        let plan = db.plan().expect("planned");
        assert_eq!(plan.current, 0);
        assert_eq!(plan.pending, MIGRATIONS.to_vec());
        assert!(tables(&db).is_empty(), "{:?}", tables(&db));
    }

    #[test]
    fn migrations_apply_once_even_when_hosts_start_together() {
        let Some(scratch) = TestDatabase::create() else {
            return;
        };
        let applied: Vec<usize> = std::thread::scope(|s| {
            let starts: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let db = Database::connect(scratch.url(), 1).expect("connects");
                        db.migrate().expect("migrated").len()
                    })
                })
                .collect();
            starts
                .into_iter()
                .map(|h| h.join().expect("joined"))
                .collect()
        });
        assert_eq!(
            applied.iter().sum::<usize>(),
            MIGRATIONS.len(),
            "{applied:?}"
        );
        let db = Database::connect(scratch.url(), 1).expect("connects");
        let plan = db.plan().expect("planned");
        assert_eq!((plan.current, plan.pending.len()), (latest(), 0));
        assert!(db.migrate().expect("migrated again").is_empty());
        let tables = tables(&db);
        for table in ["ax_runs", "ax_tasks", "ax_fires", "ax_schema_migrations"] {
            assert!(tables.iter().any(|t| t == table), "{table}: {tables:?}");
        }
    }

    #[test]
    fn a_database_at_each_earlier_version_migrates_to_the_latest() {
        for version in 1..latest() {
            let Some(scratch) = TestDatabase::create() else {
                return;
            };
            let db = Database::connect(scratch.url(), 1).expect("connects");
            let applied = db.migrate_until(version).expect("migrated part way");
            assert_eq!(applied.len(), version as usize);
            assert_eq!(db.plan().expect("planned").current, version);
            let rest = db.migrate().expect("migrated the rest");
            assert_eq!(
                rest.iter().map(|m| m.version).collect::<Vec<_>>(),
                ((version + 1)..=latest()).collect::<Vec<_>>()
            );
            PgStore::open(scratch.url(), 1).expect("a migrated store opens");
        }
    }

    /// Version 2 turned usage buckets from JSON records into counters: the
    /// buckets a version-1 database holds are read back the same, a fuel
    /// past the largest bigint saturated, and later writes add to them.
    #[test]
    fn usage_written_at_version_1_is_kept_by_version_2() {
        use crate::model::Outcome;
        use crate::store::{Runs, Tenancy};
        use crate::tenant::{HOUR_MS, UsageBucket};
        let Some(scratch) = TestDatabase::create() else {
            return;
        };
        let db = Database::connect(scratch.url(), 1).expect("connects");
        db.migrate_until(1).expect("at version 1");
        let mut kept = UsageBucket::attempt("t", "a", HOUR_MS, 10, 2.5, Outcome::Succeeded);
        kept.add(&UsageBucket::attempt(
            "t",
            "a",
            HOUR_MS,
            5,
            1.0,
            Outcome::Failed,
        ));
        let huge = UsageBucket::attempt("t", "b", HOUR_MS, u64::MAX, 1.0, Outcome::Succeeded);
        {
            let conn = db.pool().get().expect("a connection");
            for b in [&kept, &huge] {
                pool::block(conn.execute(
                    "INSERT INTO ax_usage (tenant, hour, task, record) VALUES ($1, $2, $3, $4)",
                    &[&b.tenant, &b.hour, &b.task, &serde_json::to_vec(b).unwrap()],
                ))
                .expect("written at version 1");
            }
        }
        let store = PgStore::open(scratch.url(), 1).expect("migrated");
        let mut saturated = huge.clone();
        saturated.fuel = i64::MAX as u64;
        assert_eq!(
            store.usage("t", 0, 2 * HOUR_MS).unwrap(),
            [kept.clone(), saturated]
        );
        let more = UsageBucket::attempt("t", "a", HOUR_MS, 1, 0.5, Outcome::Failed);
        store
            .write_runs_with_alerts(&[], std::slice::from_ref(&more), &[])
            .unwrap();
        kept.add(&more);
        assert_eq!(store.usage("t", 0, 2 * HOUR_MS).unwrap()[0], kept);
    }

    #[test]
    fn a_schema_newer_than_this_ax_is_refused_and_left_alone() {
        let Some(scratch) = TestDatabase::create() else {
            return;
        };
        let db = Database::connect(scratch.url(), 1).expect("connects");
        db.migrate().expect("migrated");
        let newer = latest() + 1;
        {
            let conn = db.pool().get().expect("a connection");
            pool::block(conn.execute(
                "INSERT INTO ax_schema_migrations (version, name) VALUES ($1, 'from the future')",
                &[&newer],
            ))
            .expect("written");
        }
        for result in [db.plan().map(|_| ()), db.migrate().map(|_| ())] {
            let Err(e @ Error::Unusable { .. }) = result else {
                panic!("a newer schema was accepted: {result:?}");
            };
            let text = e.to_string();
            assert!(
                text.contains(&format!("schema is version {newer}, newer than this ax's")),
                "{text}"
            );
        }
    }

    #[test]
    fn a_server_that_does_not_answer_is_one_clear_error() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bound");
            listener.local_addr().expect("an address").port()
        };
        let url = format!("postgres://ax:hunter2@127.0.0.1:{port}/ax");
        let Err(e) = Database::connect(&url, 1) else {
            panic!("connected to a closed port");
        };
        let text = e.to_string();
        assert!(matches!(e, Error::Unusable { .. }), "{text}");
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("check the URL"), "{text}");
    }
}
