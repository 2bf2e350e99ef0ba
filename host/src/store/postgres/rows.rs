//! Small helpers the concept files here share: one query whose rows are
//! `record` columns, one statement, a `LIMIT` from a `usize`.

use serde::de::DeserializeOwned;
use tokio_postgres::types::ToSql;

use super::{Database, decode};
use crate::store::Result;

/// Parameters of one statement.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// `limit` as a SQL `LIMIT` (a bigint).
pub(super) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Runs one query and decodes the first column of every row as a record;
/// `what` names the rows in a decoding error.
pub(super) fn records<T: DeserializeOwned>(
    db: &Database,
    what: &str,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<T>> {
    db.with(async |c| {
        let rows = c.query(sql, params).await?;
        rows.iter().map(|r| decode(what, r.get(0))).collect()
    })
}

/// Runs one query of at most one row and decodes its first column as a
/// record.
pub(super) fn record<T: DeserializeOwned>(
    db: &Database,
    what: &str,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<T>> {
    db.with(async |c| {
        let row = c.query_opt(sql, params).await?;
        row.map(|r| decode(what, r.get(0))).transpose()
    })
}

/// Runs one statement; how many rows it changed.
pub(super) fn execute(db: &Database, sql: &str, params: Params<'_>) -> Result<u64> {
    db.with(async |c| Ok(c.execute(sql, params).await?))
}
