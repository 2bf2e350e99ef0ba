//! The PostgreSQL store's schema, as versioned migrations embedded in the
//! binary.
//!
//! Each migration is one SQL file (`migrations/NNNN_name.sql`), applied
//! once, in order, in one transaction with the row that records it in
//! `ax_schema_migrations`. [`migrate`] takes a transaction-scoped advisory
//! lock first, so hosts starting together on one database apply each
//! migration once: the second waits for the first, then finds nothing to
//! do. A database whose schema is newer than this binary's is refused
//! before anything is written: an older ax would misread it.
//!
//! Decisions (written down here, as the issue leaves them open):
//! - A migration is never edited once released; a change is a new file.
//!   Migration 1 is the schema the store is first released with.
//! - The tables live in the connection's current schema (`search_path`).

use tokio_postgres::Client;

use super::pool::{block, error};
use crate::store::{Error, Result};

/// One schema change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// Its place in the order (1, 2, …).
    pub version: i32,
    /// What it does, in a word or two.
    pub name: &'static str,
    /// The SQL it runs.
    pub sql: &'static str,
}

/// Every migration this binary knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "schema",
        sql: include_str!("migrations/0001_schema.sql"),
    },
    Migration {
        version: 2,
        name: "one-statement writes",
        sql: include_str!("migrations/0002_one_statement_writes.sql"),
    },
];

/// The advisory lock that serialises migrations (`ax_migrate` in ASCII).
const LOCK: i64 = 0x61_785f_6d69_6772;

/// The schema version this binary writes.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Where a database's schema stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The newest migration applied (0: none, an empty database).
    pub current: i32,
    /// What [`migrate`] would apply, in order.
    pub pending: Vec<Migration>,
}

/// What the database holds and what would run, without writing anything
/// (`ax store migrate --dry-run`). Refuses a schema newer than this binary.
pub(super) fn plan(client: &Client, shown: &str) -> Result<Plan> {
    let current = current(client, shown)?;
    refuse_newer(current, shown)?;
    Ok(Plan {
        current,
        pending: pending(current),
    })
}

/// Applies every pending migration up to version `until` under the
/// migration lock; returns what it applied (nothing when the schema is
/// there). [`latest`] is what a store runs on; tests stop earlier to write
/// data in an older schema and migrate it.
pub(super) fn migrate(client: &mut Client, shown: &str, until: i32) -> Result<Vec<Migration>> {
    let fail = |e: tokio_postgres::Error| error(shown, &e);
    block(async {
        let tx = client.transaction().await.map_err(fail)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
            .await
            .map_err(fail)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS ax_schema_migrations (
                 version    integer PRIMARY KEY,
                 name       text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(fail)?;
        let row = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM ax_schema_migrations",
                &[],
            )
            .await
            .map_err(fail)?;
        let current: i32 = row.get(0);
        refuse_newer(current, shown)?;
        let mut pending = pending(current);
        pending.retain(|m| m.version <= until);
        for m in &pending {
            tx.batch_execute(m.sql).await.map_err(|e| {
                Error::Backend(format!(
                    "migration {} ({}) failed: {}",
                    m.version,
                    m.name,
                    error(shown, &e)
                ))
            })?;
            tx.execute(
                "INSERT INTO ax_schema_migrations (version, name) VALUES ($1, $2)",
                &[&m.version, &m.name],
            )
            .await
            .map_err(fail)?;
        }
        tx.commit().await.map_err(fail)?;
        Ok(pending)
    })
}

/// The newest applied migration, read without writing (0 before the first).
fn current(client: &Client, shown: &str) -> Result<i32> {
    let fail = |e: tokio_postgres::Error| error(shown, &e);
    block(async {
        let exists = client
            .query_one(
                "SELECT to_regclass('ax_schema_migrations') IS NOT NULL",
                &[],
            )
            .await
            .map_err(fail)?;
        if !exists.get::<_, bool>(0) {
            return Ok(0);
        }
        let row = client
            .query_one(
                "SELECT coalesce(max(version), 0) FROM ax_schema_migrations",
                &[],
            )
            .await
            .map_err(fail)?;
        Ok(row.get(0))
    })
}

fn pending(current: i32) -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .filter(|m| m.version > current)
        .copied()
        .collect()
}

fn refuse_newer(current: i32, shown: &str) -> Result<()> {
    if current > latest() {
        return Err(Error::Unusable {
            path: shown.to_string(),
            reason: format!(
                "its schema is version {current}, newer than this ax's (version {})",
                latest()
            ),
            hint: "run the ax that migrated it, or a newer one; nothing was changed".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_one_by_one_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "{}", m.name);
            assert!(!m.sql.trim().is_empty(), "{}", m.name);
        }
    }
}
