//! [`Tenancy`] on PostgreSQL: tenants (`ax_tenants`), token records
//! (`ax_tokens`) and hourly usage buckets (`ax_usage`, keyed by tenant,
//! hour and task, so a range of hours is a range of the primary key).
//!
//! Usage is written with the runs that used it, in the statement of
//! `write_runs_with_alerts` (`writes.rs`), which adds to a bucket's
//! counters in place.

use super::rows::{execute, records};
use super::{PgStore, decode, encode, key, name};
use crate::model::Millis;
use crate::store::{Result, Tenancy};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

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
        self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT task, hour, fuel, attempts, wall_ms, outcomes::text FROM ax_usage
                     WHERE tenant = $1 AND hour >= $2 AND hour < $3 ORDER BY hour, task",
                    &[&key(tenant), &from, &to],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let task = name(r.get(0));
                    let hour: Millis = r.get(1);
                    let what = format!("usage of {tenant}/{task}@{hour}");
                    Ok(UsageBucket {
                        tenant: tenant.to_string(),
                        fuel: r.get::<_, i64>(2).max(0) as u64,
                        attempts: r.get::<_, i64>(3).max(0) as u64,
                        wall_ms: r.get(4),
                        outcomes: decode(&what, r.get::<_, &str>(5).as_bytes())?,
                        task,
                        hour,
                    })
                })
                .collect()
        })
    }
}
