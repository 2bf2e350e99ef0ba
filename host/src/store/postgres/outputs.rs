//! What attempts leave behind, on PostgreSQL: a run's events, captured
//! logs, attempt records and dead letters, and the bytes of run data each
//! tenant is charged for ([`Runs::run_bytes`](crate::store::Runs::run_bytes)).
//! The `Runs` implementation (`runs.rs`) calls these.
//!
//! Logs and records may be written before their run is (the seam allows
//! it); each row keeps the tenant it was charged to and its size, so
//! deleting it settles exactly what writing it charged.

use std::collections::BTreeMap;

use super::{Database, PgResult, Tx, decode, encode, key};
use crate::model::record::AttemptRecord;
use crate::model::{DeadLetter, Event};
use crate::store::{AttemptLogs, Result, RunLogs};

/// Adds `delta` bytes (negative: settles) to `tenant`'s run data.
pub(super) async fn charge(tx: &Tx<'_>, tenant: &str, delta: i64) -> PgResult<()> {
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
    pub(super) async fn write(self, tx: &Tx<'_>) -> PgResult<()> {
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
    /// Adds `events` of run `run_id` (one write's: one row, [`encode_events`]);
    /// returns the bytes they add.
    pub(super) fn push(&mut self, run_id: &str, events: &[Event]) -> PgResult<i64> {
        let Some(record) = encode_events(events)? else {
            return Ok(0);
        };
        let added = record.len() as i64;
        self.run_ids.push(key(run_id).into_owned());
        self.bytes.push(added);
        self.records.push(record);
        Ok(added)
    }

    /// Their columns (run ids, sizes, records), for a statement that
    /// inserts them itself.
    pub(super) fn columns(&self) -> (&Vec<String>, &Vec<i64>, &Vec<Vec<u8>>) {
        (&self.run_ids, &self.bytes, &self.records)
    }

    /// Appends them (`seq` follows the order: the rows are inserted in it).
    pub(super) async fn write(self, tx: &Tx<'_>) -> PgResult<()> {
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
        let what = format!("events of {run_id}");
        let mut events = Vec::new();
        for row in &rows {
            events.extend(decode_events(&what, row.get(0))?);
        }
        Ok(events)
    })
}

/// The row of one write's `events` (`ax_events.record`): a JSON list of
/// them, so a write of a run adds one row however many events it appends
/// (one row per event cost a row, its index entry and its foreign key's
/// check each: most of an import's time in the database); none without
/// events. A row an earlier ax wrote holds one event, which
/// [`decode_events`] reads too, so the rows need no migration.
pub(super) fn encode_events(events: &[Event]) -> PgResult<Option<Vec<u8>>> {
    match events {
        [] => Ok(None),
        events => encode(&events).map(Some),
    }
}

/// The events of one `ax_events` row: a list ([`encode_events`]), or one
/// event (a row written before lists).
pub(super) fn decode_events(what: &str, bytes: &[u8]) -> PgResult<Vec<Event>> {
    if bytes.first() == Some(&b'[') {
        decode(what, bytes)
    } else {
        decode(what, bytes).map(|event| vec![event])
    }
}

/// Stores (or replaces) attempts' captured output, each charged to its
/// run's tenant when the run is stored, else to the tenant given with it:
/// one transaction of a few statements whatever their number
/// ([`put_outputs`]).
pub(super) fn put_logs(db: &Database, logs: &[RunLogs]) -> Result<()> {
    let rows = logs
        .iter()
        .map(|l| {
            Ok(Output {
                run_id: key(&l.run_id).into_owned(),
                step: key(&l.logs.step).into_owned(),
                attempt: i64::from(l.logs.attempt),
                tenant: l.tenant.clone(),
                record: encode(&l.logs)?,
            })
        })
        .collect::<PgResult<Vec<_>>>()
        .map_err(|e| db.fail(e))?;
    db.transaction(async |tx| put_outputs(tx, "ax_logs", rows.clone()).await)
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

/// Keeps attempts' records, replacing ones kept before (as [`put_logs`]).
pub(super) fn put_records(db: &Database, records: &[AttemptRecord]) -> Result<()> {
    let rows = records
        .iter()
        .map(|r| {
            let ctx = &r.context;
            Ok(Output {
                run_id: key(&ctx.run_id).into_owned(),
                step: key(&ctx.step).into_owned(),
                attempt: i64::from(ctx.attempt),
                tenant: ctx.tenant.to_string(),
                record: encode(r)?,
            })
        })
        .collect::<PgResult<Vec<_>>>()
        .map_err(|e| db.fail(e))?;
    db.transaction(async |tx| put_outputs(tx, "ax_attempt_records", rows.clone()).await)
}

/// One row of `ax_logs` or `ax_attempt_records` to write.
#[derive(Clone)]
struct Output {
    run_id: String,
    step: String,
    attempt: i64,
    /// Charged unless the run is stored (then its tenant is).
    tenant: String,
    record: Vec<u8>,
}

/// Writes `rows` into `table` (`ax_logs` or `ax_attempt_records`, which
/// share their shape), replacing the rows of the same attempts, in four
/// statements whatever their number: who each is charged to (the stored
/// run's tenant), the rows replaced (locked, their bytes settled), one
/// upsert, one charge per tenant. Of two rows for one attempt the last
/// wins, as two calls in a row would leave it.
async fn put_outputs(tx: &Tx<'_>, table: &str, mut rows: Vec<Output>) -> PgResult<()> {
    let mut last = std::collections::HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        last.insert((row.run_id.clone(), row.step.clone(), row.attempt), i);
    }
    let mut i = 0;
    rows.retain(|row| {
        let keep = last[&(row.run_id.clone(), row.step.clone(), row.attempt)] == i;
        i += 1;
        keep
    });
    if rows.is_empty() {
        return Ok(());
    }
    let runs: Vec<&str> = rows.iter().map(|r| r.run_id.as_str()).collect();
    let steps: Vec<&str> = rows.iter().map(|r| r.step.as_str()).collect();
    let attempts: Vec<i64> = rows.iter().map(|r| r.attempt).collect();
    let owners: std::collections::HashMap<String, String> = tx
        .query(
            "SELECT id, tenant FROM ax_runs WHERE id = ANY($1)",
            &[&runs],
        )
        .await?
        .iter()
        .map(|r| (super::name(r.get(0)), super::name(r.get(1))))
        .collect();
    let mut charges = Charges::default();
    let replaced = tx
        .query(
            &format!(
                "SELECT o.tenant, o.bytes FROM {table} o
                 JOIN unnest($1::text[], $2::text[], $3::int8[]) AS u(run_id, step, attempt)
                     ON o.run_id = u.run_id COLLATE \"C\" AND o.step = u.step COLLATE \"C\"
                     AND o.attempt = u.attempt
                 ORDER BY o.run_id, o.step, o.attempt
                 FOR UPDATE OF o"
            ),
            &[&runs, &steps, &attempts],
        )
        .await?;
    for old in replaced {
        charges.add(&super::name(old.get(0)), -old.get::<_, i64>(1));
    }
    let tenants: Vec<String> = rows
        .iter()
        .map(|r| {
            let tenant = owners
                .get(super::name(&r.run_id).as_str())
                .cloned()
                .unwrap_or_else(|| r.tenant.clone());
            key(&tenant).into_owned()
        })
        .collect();
    let bytes: Vec<i64> = rows.iter().map(|r| r.record.len() as i64).collect();
    let records: Vec<&[u8]> = rows.iter().map(|r| r.record.as_slice()).collect();
    for (tenant, bytes) in tenants.iter().zip(&bytes) {
        charges.add(&super::name(tenant), *bytes);
    }
    tx.execute(
        &format!(
            "INSERT INTO {table} (run_id, step, attempt, tenant, bytes, record)
             SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::int8[],
                                  $6::bytea[])
             ON CONFLICT (run_id, step, attempt) DO UPDATE
             SET tenant = excluded.tenant, bytes = excluded.bytes, record = excluded.record"
        ),
        &[&runs, &steps, &attempts, &tenants, &bytes, &records],
    )
    .await?;
    charges.write(tx).await
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
pub(super) async fn delete_outputs(tx: &Tx<'_>, run_id: &str) -> PgResult<()> {
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
