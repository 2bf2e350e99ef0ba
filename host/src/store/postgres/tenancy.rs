//! [`Tenancy`] on PostgreSQL: tenants (`ax_tenants`), token records
//! (`ax_tokens`) and hourly usage buckets (`ax_usage`, keyed by tenant,
//! hour and task, so a range of hours is a range of the primary key).
//!
//! Usage is written with the runs that used it: the `Runs` implementation
//! calls [`add_usage`] inside `write_runs_with_alerts`' transaction.

use super::rows::{execute, records};
use super::{PgResult, PgStore, Tx, decode, encode, key};
use crate::model::Millis;
use crate::store::{Result, Tenancy};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// Merges `usage` into the stored buckets as the memory store does: a new
/// bucket is stored as it is, a known one adds the new counters
/// ([`UsageBucket::add`]) under a row lock, so concurrent writers add up.
pub(super) async fn add_usage(tx: &Tx<'_>, usage: &[UsageBucket]) -> PgResult<()> {
    for bucket in usage {
        let (tenant, task) = (key(&bucket.tenant), key(&bucket.task));
        // Absent: stored as it is. Present (a conflict): locked, added to.
        let inserted = tx
            .execute(
                "INSERT INTO ax_usage (tenant, hour, task, record) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING",
                &[&tenant, &bucket.hour, &task, &encode(bucket)?],
            )
            .await?;
        if inserted > 0 {
            continue;
        }
        let row = tx
            .query_one(
                "SELECT record FROM ax_usage WHERE tenant = $1 AND hour = $2 AND task = $3
                 FOR UPDATE",
                &[&tenant, &bucket.hour, &task],
            )
            .await?;
        let what = format!("usage of {}/{}@{}", bucket.tenant, bucket.task, bucket.hour);
        let mut stored: UsageBucket = decode(&what, row.get(0))?;
        stored.add(bucket);
        tx.execute(
            "UPDATE ax_usage SET record = $4 WHERE tenant = $1 AND hour = $2 AND task = $3",
            &[&tenant, &bucket.hour, &task, &encode(&stored)?],
        )
        .await?;
    }
    Ok(())
}

impl Tenancy for PgStore {
    fn put_tenant(&self, tenant: &TenantRecord) -> Result<()> {
        let record = encode(tenant).map_err(|e| self.db.fail(e))?;
        execute(
            &self.db,
            "INSERT INTO ax_tenants (name, record) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET record = excluded.record",
            &[&key(&tenant.name), &record],
        )?;
        Ok(())
    }

    fn list_tenants(&self) -> Result<Vec<TenantRecord>> {
        records(
            &self.db,
            "tenant",
            "SELECT record FROM ax_tenants ORDER BY name",
            &[],
        )
    }

    fn put_token(&self, token: &TokenRecord) -> Result<()> {
        let record = encode(token).map_err(|e| self.db.fail(e))?;
        execute(
            &self.db,
            "INSERT INTO ax_tokens (id, record) VALUES ($1, $2)
             ON CONFLICT (id) DO UPDATE SET record = excluded.record",
            &[&key(&token.id), &record],
        )?;
        Ok(())
    }

    fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        records(
            &self.db,
            "token",
            "SELECT record FROM ax_tokens ORDER BY id",
            &[],
        )
    }

    fn usage(&self, tenant: &str, from: Millis, to: Millis) -> Result<Vec<UsageBucket>> {
        records(
            &self.db,
            &format!("usage of {tenant}"),
            "SELECT record FROM ax_usage WHERE tenant = $1 AND hour >= $2 AND hour < $3
             ORDER BY hour, task",
            &[&key(tenant), &from, &to],
        )
    }
}
