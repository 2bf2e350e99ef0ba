//! [`PgMap`]: an ordered byte map in `ax_maps`, one per `tree`, which the
//! KV store and the secret store run their algorithms over
//! ([`OrderedMap`]), as they run over a sled tree. Trees are named as
//! sled's are (`kv`, `secrets`).

use std::sync::Arc;

use super::Database;
use super::rows::sql_limit;
use crate::store::Result;
use crate::store::kv::OrderedMap;

/// One tree of `ax_maps`.
pub struct PgMap {
    db: Arc<Database>,
    tree: &'static str,
}

impl PgMap {
    /// The tree `tree` of the store's database.
    pub fn new(db: Arc<Database>, tree: &'static str) -> Self {
        Self { db, tree }
    }
}

/// The least key greater than every key starting with `prefix`, or `None`
/// when there is none (the prefix is empty or all `0xff`).
fn upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut bound = prefix.to_vec();
    while let Some(last) = bound.pop() {
        if last < u8::MAX {
            bound.push(last + 1);
            return Some(bound);
        }
    }
    None
}

impl OrderedMap for PgMap {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.with(async |c| {
            let row = c
                .query_opt(
                    "SELECT value FROM ax_maps WHERE tree = $1 AND key = $2",
                    &[&self.tree, &key],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.with(async |c| {
            c.execute(
                "INSERT INTO ax_maps (tree, key, value) VALUES ($1, $2, $3)
                 ON CONFLICT (tree, key) DO UPDATE SET value = excluded.value",
                &[&self.tree, &key, &value],
            )
            .await?;
            Ok(())
        })
    }

    fn remove(&self, key: &[u8]) -> Result<()> {
        self.db.with(async |c| {
            c.execute(
                "DELETE FROM ax_maps WHERE tree = $1 AND key = $2",
                &[&self.tree, &key],
            )
            .await?;
            Ok(())
        })
    }

    fn scan(&self, prefix: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        // bytea compares as bytes: the prefix's keys are one range.
        let upper = upper_bound(prefix);
        self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT key, value FROM ax_maps
                     WHERE tree = $1 AND key >= $2 AND ($3::bytea IS NULL OR key < $3)
                     ORDER BY key LIMIT $4",
                    &[&self.tree, &prefix, &upper, &sql_limit(limit)],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn range(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT key, value FROM ax_maps
                     WHERE tree = $1 AND ($2::bytea IS NULL OR key > $2)
                     ORDER BY key LIMIT $3",
                    &[&self.tree, &after, &sql_limit(limit)],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn flush(&self) -> Result<()> {
        // Each write above is its own committed transaction: durable already.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::upper_bound;

    #[test]
    fn the_upper_bound_of_a_prefix_is_its_last_byte_below_ff_plus_one() {
        assert_eq!(upper_bound(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(upper_bound(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(upper_bound(b"\xff"), None);
        assert_eq!(upper_bound(b""), None);
    }
}
