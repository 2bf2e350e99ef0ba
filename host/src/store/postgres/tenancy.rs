//! [`Tenancy`] on PostgreSQL: tenants (`ax_tenants`), token records
//! (`ax_tokens`) and hourly usage buckets (`ax_usage`, keyed by tenant,
//! hour and task, so a range of hours is a range of the primary key).
//!
//! Usage is written with the runs that used it: the `Runs` implementation
//! calls [`add_usage`] inside `write_runs_with_alerts`' transaction.

use std::collections::{HashMap, HashSet};

use super::rows::{execute, records};
use super::{PgResult, PgStore, Tx, decode, encode, key};
use crate::model::Millis;
use crate::store::{Result, Tenancy};
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// Merges `usage` into the stored buckets as the memory store does: a new
/// bucket is stored as it is, a known one adds the new counters
/// ([`UsageBucket::add`]) under a row lock, so concurrent writers add up.
///
/// In three statements whatever the number of buckets (a flush of runs of
/// many tasks holds one per task and hour): the stored ones are read and
/// locked, added to and written back by one `UPDATE … FROM unnest`, the new
/// ones inserted by one `INSERT … ON CONFLICT DO NOTHING`. A bucket another
/// writer inserted in between (its insert did nothing) is added to one by
/// one, as all were before.
pub(super) async fn add_usage(tx: &Tx<'_>, usage: &[UsageBucket]) -> PgResult<()> {
    // Two buckets for one key in the batch: added together first.
    let mut merged: Vec<UsageBucket> = Vec::new();
    let mut at: HashMap<(String, Millis, String), usize> = HashMap::new();
    for bucket in usage {
        let id = (bucket.tenant.clone(), bucket.hour, bucket.task.clone());
        match at.get(&id) {
            Some(&i) => merged[i].add(bucket),
            None => {
                at.insert(id, merged.len());
                merged.push(bucket.clone());
            }
        }
    }
    if merged.is_empty() {
        return Ok(());
    }
    let tenants: Vec<String> = merged.iter().map(|b| key(&b.tenant).into_owned()).collect();
    let hours: Vec<Millis> = merged.iter().map(|b| b.hour).collect();
    let tasks: Vec<String> = merged.iter().map(|b| key(&b.task).into_owned()).collect();
    let stored = tx
        .query(
            "SELECT u.n, s.record FROM ax_usage s
             JOIN unnest($1::text[], $2::int8[], $3::text[]) WITH ORDINALITY AS u(tenant, hour, task, n)
                 ON s.tenant = u.tenant COLLATE \"C\" AND s.hour = u.hour
                 AND s.task = u.task COLLATE \"C\"
             ORDER BY s.tenant, s.hour, s.task
             FOR UPDATE OF s",
            &[&tenants, &hours, &tasks],
        )
        .await?;
    let mut known = vec![false; merged.len()];
    let (mut update, mut records) = (Vec::new(), Vec::new());
    for row in stored {
        let i = row.get::<_, i64>(0) as usize - 1;
        let bucket = &merged[i];
        let what = format!("usage of {}/{}@{}", bucket.tenant, bucket.task, bucket.hour);
        let mut total: UsageBucket = decode(&what, row.get(1))?;
        total.add(bucket);
        known[i] = true;
        update.push(i);
        records.push(encode(&total)?);
    }
    if !update.is_empty() {
        let pick = |column: &[String]| -> Vec<String> {
            update.iter().map(|&i| column[i].clone()).collect()
        };
        let (t, k): (Vec<String>, Vec<String>) = (pick(&tenants), pick(&tasks));
        let h: Vec<Millis> = update.iter().map(|&i| hours[i]).collect();
        tx.execute(
            "UPDATE ax_usage AS s SET record = v.record
             FROM unnest($1::text[], $2::int8[], $3::text[], $4::bytea[]) AS v(tenant, hour, task, record)
             WHERE s.tenant = v.tenant COLLATE \"C\" AND s.hour = v.hour
                 AND s.task = v.task COLLATE \"C\"",
            &[&t, &h, &k, &records],
        )
        .await?;
    }
    let new: Vec<usize> = (0..merged.len()).filter(|&i| !known[i]).collect();
    if new.is_empty() {
        return Ok(());
    }
    let pick =
        |column: &[String]| -> Vec<String> { new.iter().map(|&i| column[i].clone()).collect() };
    let (t, k): (Vec<String>, Vec<String>) = (pick(&tenants), pick(&tasks));
    let h: Vec<Millis> = new.iter().map(|&i| hours[i]).collect();
    let records = new
        .iter()
        .map(|&i| encode(&merged[i]))
        .collect::<PgResult<Vec<_>>>()?;
    let inserted = tx
        .query(
            "INSERT INTO ax_usage (tenant, hour, task, record)
             SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::bytea[])
             ON CONFLICT DO NOTHING
             RETURNING tenant, hour, task",
            &[&t, &h, &k, &records],
        )
        .await?;
    let inserted: HashSet<(String, Millis, String)> = inserted
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    for &i in &new {
        if !inserted.contains(&(tenants[i].clone(), hours[i], tasks[i].clone())) {
            add_one(tx, &merged[i]).await?;
        }
    }
    Ok(())
}

/// Adds `bucket` to its stored row, locked (another writer inserted it
/// after [`add_usage`] looked).
async fn add_one(tx: &Tx<'_>, bucket: &UsageBucket) -> PgResult<()> {
    let (tenant, task) = (key(&bucket.tenant), key(&bucket.task));
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
