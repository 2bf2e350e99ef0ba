//! Statements prepared once per connection ([`Statements`]) and the client
//! the store's queries go through ([`Cached`]).
//!
//! tokio-postgres prepares an unnamed statement for every call given SQL
//! text: two round trips per statement (parse and describe, then bind and
//! execute) and a parse and analysis on the server every time. Through
//! [`Cached`], a statement is prepared the first time a connection runs
//! its text and kept with the connection (named statements live as long as
//! their connection), so every later call is one round trip. The texts are
//! the store's own constants and a few `format!`s of table names, so each
//! connection keeps a few dozen.
//!
//! Decision: named prepared statements need a session of their own; a
//! pooler in transaction mode in front of PostgreSQL must pass them through
//! (PgBouncer ≥ 1.21 with `max_prepared_statements`), as docs/POSTGRES.md
//! says.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{CopyInSink, Error, GenericClient, Row, Statement, Transaction};

/// The statements prepared on one connection, by their text, and the
/// count of statements run that the pool's connections share.
pub struct Statements {
    prepared: Mutex<HashMap<String, Statement>>,
    run: Arc<AtomicU64>,
}

impl Statements {
    /// None prepared yet; statements run are counted in `run`.
    pub fn counting(run: Arc<AtomicU64>) -> Self {
        Statements {
            prepared: Mutex::default(),
            run,
        }
    }

    /// Counts `n` statements run (a transaction's `BEGIN` and `COMMIT` are
    /// counted by [`super::Database::transaction`]).
    pub fn ran(&self, n: u64) {
        self.run.fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self, sql: &str) -> Option<Statement> {
        self.lock().get(sql).cloned()
    }

    fn insert(&self, sql: &str, statement: Statement) {
        self.lock().insert(sql.to_owned(), statement);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Statement>> {
        self.prepared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A client or transaction (`C`) whose `query`, `query_opt`, `query_one`
/// and `execute` use the statements its connection prepared; everything
/// else is the client's own (it derefs to it).
pub struct Cached<'a, C> {
    client: &'a C,
    statements: &'a Statements,
}

impl<'a, C> Cached<'a, C> {
    /// `client`, with the statements of its connection.
    pub fn new(client: &'a C, statements: &'a Statements) -> Self {
        Self { client, statements }
    }
}

impl<C> Deref for Cached<'_, C> {
    type Target = C;

    fn deref(&self) -> &C {
        self.client
    }
}

impl<C: GenericClient + Sync> Cached<'_, C> {
    /// The statement for `sql`, prepared now if this connection has not yet.
    async fn statement(&self, sql: &str) -> Result<Statement, Error> {
        self.statements.ran(1);
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement);
        }
        let statement = self.client.prepare(sql).await?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Like [`tokio_postgres::Client::query`].
    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        let statement = self.statement(sql).await?;
        self.client.query(&statement, params).await
    }

    /// Like [`tokio_postgres::Client::query_opt`].
    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        let statement = self.statement(sql).await?;
        self.client.query_opt(&statement, params).await
    }

    /// Like [`tokio_postgres::Client::query_one`].
    pub async fn query_one(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error> {
        let statement = self.statement(sql).await?;
        self.client.query_one(&statement, params).await
    }

    /// Like [`tokio_postgres::Client::execute`].
    pub async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        let statement = self.statement(sql).await?;
        self.client.execute(&statement, params).await
    }
}

impl Cached<'_, Transaction<'_>> {
    /// Starts `sql`, a `COPY … FROM STDIN (FORMAT binary)` of columns of
    /// `types`: the caller writes the rows into the writer and finishes it.
    pub async fn copy_in(&self, sql: &str, types: &[Type]) -> Result<BinaryCopyInWriter, Error> {
        let statement = self.statement(sql).await?;
        let sink = self.client.copy_in(&statement).await?;
        Ok(BinaryCopyInWriter::new(sink, types))
    }

    /// Starts `sql`, a `COPY … FROM STDIN` whose rows the caller sends
    /// already encoded (`copy.rs`), then finishes.
    pub async fn copy_in_raw(&self, sql: &str) -> Result<CopyInSink<bytes::Bytes>, Error> {
        let statement = self.statement(sql).await?;
        self.client.copy_in(&statement).await
    }
}
