//! [`Operations`] on PostgreSQL: metadata values (`ax_meta`), the size of
//! the database, and the KV and secret stores over `ax_maps`
//! ([`super::maps::PgMap`]), built when the store opens.

use std::sync::Arc;

use super::rows::execute;
use super::{PgStore, key, name};
use crate::store::kv::KvStore;
use crate::store::secrets::SecretStore;
use crate::store::{Operations, Result, StoreHealth, StoreKind, SyncTicket};

impl Operations for PgStore {
    fn sync_ticket(&self) -> SyncTicket {
        // Every write here is a transaction committed before the call that
        // made it returned, and a committed transaction is durable (the
        // server flushed its WAL, under the default `synchronous_commit`):
        // there is nothing left to wait for.
        SyncTicket::ready()
    }

    fn get_meta(&self, meta_key: &str) -> Result<Option<String>> {
        self.db.with(async |c| {
            let row = c
                .query_opt(
                    "SELECT value FROM ax_meta WHERE key = $1",
                    &[&key(meta_key)],
                )
                .await?;
            Ok(row.map(|r| name(r.get(0))))
        })
    }

    fn put_meta(&self, meta_key: &str, value: &str) -> Result<()> {
        execute(
            &self.db,
            "INSERT INTO ax_meta (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&key(meta_key), &key(value)],
        )?;
        Ok(())
    }

    fn kv(&self) -> Arc<dyn KvStore> {
        self.kv.clone()
    }

    fn secrets(&self) -> Arc<dyn SecretStore> {
        self.secrets.clone()
    }

    fn size_on_disk(&self) -> u64 {
        self.db
            .with(async |c| {
                let row = c
                    .query_one("SELECT pg_database_size(current_database())", &[])
                    .await?;
                Ok(row.get::<_, i64>(0))
            })
            .ok()
            .and_then(|bytes| u64::try_from(bytes).ok())
            .unwrap_or(0)
    }

    fn health(&self) -> StoreHealth {
        let pool = self.db.pool();
        StoreHealth {
            pool: Some(pool.health()),
            ..StoreHealth::new(StoreKind::Postgres, pool.shown())
        }
    }
}

impl crate::store::Backup for PgStore {
    fn map_page(
        &self,
        tree: crate::store::Tree,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.maps().page(tree, after, limit)
    }

    fn restore_map(&self, tree: crate::store::Tree, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        self.maps().restore(tree, entries)
    }
}

impl PgStore {
    fn maps(&self) -> crate::store::backup::Maps<'_, super::maps::PgMap> {
        crate::store::backup::Maps {
            kv: &self.kv,
            secrets: &self.secrets,
        }
    }
}
