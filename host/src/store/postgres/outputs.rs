//! What attempts leave behind, on PostgreSQL: a run's events, captured
//! logs, attempt records and dead letters, and the bytes of run data each
//! tenant is charged for ([`Runs::run_bytes`](crate::store::Runs::run_bytes)).
//! The `Runs` implementation (`runs.rs`) calls these.
//!
//! Logs and records may be written before their run is (the seam allows
//! it); each row keeps the tenant it was charged to and its size, so
//! deleting it settles exactly what writing it charged.

use std::collections::BTreeMap;

use tokio_postgres::Transaction;

use super::{Database, PgResult, decode, encode, key};
use crate::model::record::AttemptRecord;
use crate::model::{DeadLetter, Event};
use crate::store::{AttemptLogs, Result};

/// Adds `delta` bytes (negative: settles) to `tenant`'s run data.
pub(super) async fn charge(tx: &Transaction<'_>, tenant: &str, delta: i64) -> PgResult<()> {
    let mut charges = Charges::default();
    charges.add(tenant, delta);
    charges.write(tx).await
}

/// Bytes to add to (or settle from) tenants' run data, summed per tenant
/// and written in one statement, in tenant order (so two writers lock the
/// counter rows in the same order).
#[derive(Default)]
pub(super) struct Charges(BTreeMap<String, i64>);

impl Charges {
    /// Adds `delta` bytes to `tenant`.
    pub(super) fn add(&mut self, tenant: &str, delta: i64) {
        *self.0.entry(key(tenant).into_owned()).or_default() += delta;
    }

    /// Writes the sums that are not zero.
    pub(super) async fn write(self, tx: &Transaction<'_>) -> PgResult<()> {
        let (tenants, deltas): (Vec<String>, Vec<i64>) =
            self.0.into_iter().filter(|(_, delta)| *delta != 0).unzip();
        if tenants.is_empty() {
            return Ok(());
        }
        tx.execute(
            "INSERT INTO ax_tenant_bytes (tenant, bytes)
             SELECT * FROM unnest($1::text[], $2::int8[])
             ON CONFLICT (tenant) DO UPDATE SET bytes = ax_tenant_bytes.bytes + excluded.bytes",
            &[&tenants, &deltas],
        )
        .await?;
        Ok(())
    }
}

/// Events of one write (any number of runs), appended in one statement in
/// the order they were pushed.
#[derive(Default)]
pub(super) struct Events {
    run_ids: Vec<String>,
    bytes: Vec<i64>,
    records: Vec<Vec<u8>>,
}

impl Events {
    /// Adds `events` of run `run_id`; returns the bytes they add.
    pub(super) fn push(&mut self, run_id: &str, events: &[Event]) -> PgResult<i64> {
        let mut added = 0;
        for event in events {
            let record = encode(event)?;
            added += record.len() as i64;
            self.run_ids.push(key(run_id).into_owned());
            self.bytes.push(record.len() as i64);
            self.records.push(record);
        }
        Ok(added)
    }

    /// Appends them (`seq` follows the order: the rows are inserted in it).
    pub(super) async fn write(self, tx: &Transaction<'_>) -> PgResult<()> {
        if self.run_ids.is_empty() {
            return Ok(());
        }
        tx.execute(
            "INSERT INTO ax_events (run_id, bytes, record)
             SELECT run_id, bytes, record
             FROM unnest($1::text[], $2::int8[], $3::bytea[]) WITH ORDINALITY
                 AS e(run_id, bytes, record, n)
             ORDER BY n",
            &[&self.run_ids, &self.bytes, &self.records],
        )
        .await?;
        Ok(())
    }
}

/// Bytes of run data `tenant` keeps.
pub(super) fn run_bytes(db: &Database, tenant: &str) -> Result<u64> {
    db.with(async |c| {
        let row = c
            .query_opt(
                "SELECT bytes FROM ax_tenant_bytes WHERE tenant = $1",
                &[&key(tenant)],
            )
            .await?;
        Ok(row.map_or(0, |r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
    })
}

/// A run's events, oldest first.
pub(super) fn events(db: &Database, run_id: &str) -> Result<Vec<Event>> {
    db.with(async |c| {
        let rows = c
            .query(
                "SELECT record FROM ax_events WHERE run_id = $1 ORDER BY seq",
                &[&key(run_id)],
            )
            .await?;
        rows.iter()
            .map(|r| decode(&format!("event of {run_id}"), r.get(0)))
            .collect()
    })
}

/// Stores (or replaces) one attempt's captured output, charged to the
/// run's tenant when the run is stored, else to `tenant`.
pub(super) fn put_logs(
    db: &Database,
    tenant: &str,
    run_id: &str,
    logs: &AttemptLogs,
) -> Result<()> {
    let record = encode(logs).map_err(|e| db.fail(e))?;
    let attempt = i64::from(logs.attempt);
    db.transaction(async |tx| {
        let tenant = charged_tenant(tx, run_id, tenant).await?;
        let old = tx
            .query_opt(
                "SELECT tenant, bytes FROM ax_logs WHERE run_id = $1 AND step = $2 AND attempt = $3",
                &[&key(run_id), &key(&logs.step), &attempt],
            )
            .await?;
        if let Some(old) = old {
            charge(tx, &super::name(old.get(0)), -old.get::<_, i64>(1)).await?;
        }
        let bytes = record.len() as i64;
        tx.execute(
            "INSERT INTO ax_logs (run_id, step, attempt, tenant, bytes, record)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (run_id, step, attempt) DO UPDATE
             SET tenant = excluded.tenant, bytes = excluded.bytes, record = excluded.record",
            &[&key(run_id), &key(&logs.step), &attempt, &key(&tenant), &bytes, &record],
        )
        .await?;
        charge(tx, &tenant, bytes).await
    })
}

/// A run's captured output, by step then attempt.
pub(super) fn logs(db: &Database, run_id: &str) -> Result<Vec<AttemptLogs>> {
    db.with(async |c| {
        let rows = c
            .query(
                "SELECT record FROM ax_logs WHERE run_id = $1 ORDER BY step, attempt",
                &[&key(run_id)],
            )
            .await?;
        rows.iter()
            .map(|r| decode(&format!("logs of {run_id}"), r.get(0)))
            .collect()
    })
}

/// Keeps the record of one attempt, replacing one kept before.
pub(super) fn put_record(db: &Database, record: &AttemptRecord) -> Result<()> {
    let ctx = &record.context;
    let bytes_of = encode(record).map_err(|e| db.fail(e))?;
    let attempt = i64::from(ctx.attempt);
    db.transaction(async |tx| {
        let tenant = charged_tenant(tx, &ctx.run_id, &ctx.tenant).await?;
        let old = tx
            .query_opt(
                "SELECT tenant, bytes FROM ax_attempt_records
                 WHERE run_id = $1 AND step = $2 AND attempt = $3",
                &[&key(&ctx.run_id), &key(&ctx.step), &attempt],
            )
            .await?;
        if let Some(old) = old {
            charge(tx, &super::name(old.get(0)), -old.get::<_, i64>(1)).await?;
        }
        let bytes = bytes_of.len() as i64;
        tx.execute(
            "INSERT INTO ax_attempt_records (run_id, step, attempt, tenant, bytes, record)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (run_id, step, attempt) DO UPDATE
             SET tenant = excluded.tenant, bytes = excluded.bytes, record = excluded.record",
            &[
                &key(&ctx.run_id),
                &key(&ctx.step),
                &attempt,
                &key(&tenant),
                &bytes,
                &bytes_of,
            ],
        )
        .await?;
        charge(tx, &tenant, bytes).await
    })
}

/// The record of one attempt, if kept.
pub(super) fn get_record(
    db: &Database,
    run_id: &str,
    step: &str,
    attempt: u32,
) -> Result<Option<AttemptRecord>> {
    db.with(async |c| {
        let row = c
            .query_opt(
                "SELECT record FROM ax_attempt_records
                 WHERE run_id = $1 AND step = $2 AND attempt = $3",
                &[&key(run_id), &key(step), &i64::from(attempt)],
            )
            .await?;
        row.map(|r| decode(&format!("record of {run_id}/{step}/{attempt}"), r.get(0)))
            .transpose()
    })
}

/// Removes what a deleted run left behind (its logs and records: events and
/// fire keys go with the run row), settling their bytes.
pub(super) async fn delete_outputs(tx: &Transaction<'_>, run_id: &str) -> PgResult<()> {
    for table in ["ax_logs", "ax_attempt_records"] {
        let rows = tx
            .query(
                &format!("DELETE FROM {table} WHERE run_id = $1 RETURNING tenant, bytes"),
                &[&key(run_id)],
            )
            .await?;
        for row in rows {
            charge(tx, &super::name(row.get(0)), -row.get::<_, i64>(1)).await?;
        }
    }
    Ok(())
}

/// Creates or replaces a dead letter.
pub(super) fn put_dead_letter(db: &Database, dead: &DeadLetter) -> Result<()> {
    let record = encode(dead).map_err(|e| db.fail(e))?;
    db.with(async |c| {
        c.execute(
            "INSERT INTO ax_dead_letters (id, tenant, open, record) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE
             SET tenant = excluded.tenant, open = excluded.open, record = excluded.record",
            &[
                &key(&dead.id),
                &key(&dead.tenant),
                &dead.resolution.is_none(),
                &record,
            ],
        )
        .await?;
        Ok(())
    })
}

/// One dead letter.
pub(super) fn get_dead_letter(db: &Database, id: &str) -> Result<Option<DeadLetter>> {
    db.with(async |c| {
        let row = c
            .query_opt(
                "SELECT record FROM ax_dead_letters WHERE id = $1",
                &[&key(id)],
            )
            .await?;
        row.map(|r| decode(&format!("dead letter {id}"), r.get(0)))
            .transpose()
    })
}

/// A tenant's dead letters, newest first (`open_only`: unresolved ones).
pub(super) fn list_dead_letters(
    db: &Database,
    tenant: &str,
    open_only: bool,
) -> Result<Vec<DeadLetter>> {
    db.with(async |c| {
        let rows = c
            .query(
                "SELECT record FROM ax_dead_letters
                 WHERE tenant = $1 AND (open OR NOT $2) ORDER BY id DESC",
                &[&key(tenant), &open_only],
            )
            .await?;
        rows.iter()
            .map(|r| decode("dead letter", r.get(0)))
            .collect()
    })
}

/// Who bytes written for `run_id` are charged to: its tenant when the run
/// is stored, else `tenant`.
async fn charged_tenant(tx: &Transaction<'_>, run_id: &str, tenant: &str) -> PgResult<String> {
    let row = tx
        .query_opt("SELECT tenant FROM ax_runs WHERE id = $1", &[&key(run_id)])
        .await?;
    Ok(row.map_or_else(|| tenant.to_string(), |r| super::name(r.get(0))))
}
