//! Runs restored from a dump on PostgreSQL
//! ([`Runs::restore_runs`](crate::store::Runs::restore_runs), what `ax
//! store import` writes).
//!
//! A batch is one transaction: one statement checks that none of its ids
//! or idempotency keys is held (an import fills an empty store, so one that
//! is held means the dump holds a run twice: the batch writes nothing);
//! then the runs, their events, logs and attempt records are each copied in
//! by one binary `COPY`, and the keys, the fires and the tenants' bytes
//! written by one statement each. What is stored and charged is what
//! [`restore_by_inserts`](crate::store::restore_by_inserts) stores through
//! `insert_runs`, `put_logs_batch` and `put_records` (the conformance suite
//! compares them); `COPY` only skips what an insert of arrays costs per
//! row (decoding them, the statement's conflict checks and ordering), most
//! of an import's time (docs/PERFORMANCE.md, *Export and import*).

use std::collections::HashSet;
use std::pin::pin;

use tokio_postgres::types::Type;

use super::inserts::Keys;
use super::outputs::{Charges, Events};
use super::{Database, PgResult, Tx, encode, key};
use crate::model::ids::RunId;
use crate::model::{Millis, RunRecord};
use crate::store::rules::{digest_of, queue_position};
use crate::store::{Result, WholeRun, claims_fire};

/// Restores `runs` ([`Runs::restore_runs`](crate::store::Runs::restore_runs)).
pub(super) fn restore(db: &Database, runs: &[WholeRun], key_ttl: Millis) -> Result<Option<RunId>> {
    if let Some(twice) = repeated(runs) {
        return Ok(Some(twice.clone()));
    }
    let batch = Batch::encode(runs, key_ttl).map_err(|e| db.fail(e))?;
    db.transaction(async |tx| {
        if let Some(held) = batch.held(tx).await? {
            return Ok(Some(runs[held].run.id.clone()));
        }
        batch.copy(tx).await?;
        Ok(None)
    })
}

/// The first run of `runs` whose id or idempotency key an earlier one has.
fn repeated(runs: &[WholeRun]) -> Option<&RunId> {
    let mut ids = HashSet::new();
    let mut keys = HashSet::new();
    runs.iter().map(|w| &w.run).find_map(|run| {
        let key = run.idempotency_key.as_deref();
        let again = !ids.insert(run.id.as_str())
            || key.is_some_and(|k| !keys.insert((run.tenant.as_str(), run.task.as_str(), k)));
        again.then_some(&run.id)
    })
}

/// A batch's rows, encoded before its transaction starts.
#[derive(Default)]
struct Batch {
    runs: Vec<RunRow>,
    events: Events,
    /// `ax_logs` then `ax_attempt_records` rows.
    logs: Vec<OutputRow>,
    records: Vec<OutputRow>,
    keys: Keys,
    fires: Fires,
    charges: Charges,
}

/// One `ax_runs` row.
struct RunRow {
    id: String,
    tenant: String,
    task: String,
    status: &'static str,
    revision: i64,
    spec: String,
    position: Millis,
    record: Vec<u8>,
}

/// One `ax_logs` or `ax_attempt_records` row (the run's tenant is charged).
struct OutputRow {
    run_id: String,
    step: String,
    attempt: i64,
    tenant: String,
    record: Vec<u8>,
}

/// The fires of a batch, as arrays for one statement.
#[derive(Default)]
struct Fires {
    tenants: Vec<String>,
    tasks: Vec<String>,
    at: Vec<Millis>,
    runs: Vec<String>,
}

impl Fires {
    fn push(&mut self, run: &RunRecord) {
        self.tenants.push(key(&run.tenant).into_owned());
        self.tasks.push(key(&run.task).into_owned());
        self.at.push(run.scheduled_for);
        self.runs.push(key(&run.id).into_owned());
    }
}

impl Batch {
    fn encode(runs: &[WholeRun], key_ttl: Millis) -> PgResult<Batch> {
        let mut batch = Batch::default();
        for whole in runs {
            let run = &whole.run;
            let record = encode(run)?;
            let added = batch.events.push(&run.id, &whole.events)?;
            batch.charges.add(&run.tenant, record.len() as i64 + added);
            for logs in &whole.logs {
                let row = batch.output(run, &logs.step, logs.attempt, encode(logs)?);
                batch.logs.push(row);
            }
            for kept in &whole.records {
                let ctx = &kept.context;
                let row = batch.output(run, &ctx.step, ctx.attempt, encode(kept)?);
                batch.records.push(row);
            }
            if let Some(k) = &run.idempotency_key {
                let expires_at = run.created_at.saturating_add(key_ttl);
                batch.keys.push(run, k, expires_at);
            }
            if claims_fire(run) {
                batch.fires.push(run);
            }
            batch.runs.push(RunRow {
                id: key(&run.id).into_owned(),
                tenant: key(&run.tenant).into_owned(),
                task: key(&run.task).into_owned(),
                status: run.status.as_str(),
                revision: run.revision as i64,
                spec: digest_of(&encode(&*run.spec)?),
                position: queue_position(run),
                record,
            });
        }
        Ok(batch)
    }

    /// An output row of `run`, charged to its tenant.
    fn output(&mut self, run: &RunRecord, step: &str, attempt: u32, record: Vec<u8>) -> OutputRow {
        self.charges.add(&run.tenant, record.len() as i64);
        OutputRow {
            run_id: key(&run.id).into_owned(),
            step: key(step).into_owned(),
            attempt: i64::from(attempt),
            tenant: key(&run.tenant).into_owned(),
            record,
        }
    }

    /// The index in the batch of the first run whose id or key is held.
    async fn held(&self, tx: &Tx<'_>) -> PgResult<Option<usize>> {
        let ids: Vec<&str> = self.runs.iter().map(|r| r.id.as_str()).collect();
        let keys = &self.keys;
        let rows = tx
            .query(
                "SELECT r.id FROM ax_runs AS r WHERE r.id = ANY($1)
                 UNION ALL
                 SELECT u.run_id
                 FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS u(tenant, task, key, run_id)
                 JOIN ax_idempotency_keys AS k
                     ON k.tenant = u.tenant COLLATE \"C\" AND k.task = u.task COLLATE \"C\"
                     AND k.key = u.key COLLATE \"C\"",
                &[&ids, &keys.tenants, &keys.tasks, &keys.keys, &keys.runs],
            )
            .await?;
        let held: HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
        Ok(ids.iter().position(|id| held.contains(*id)))
    }

    /// Writes the batch (none of it is held).
    async fn copy(self, tx: &Tx<'_>) -> PgResult<()> {
        let mut runs = pin!(
            tx.copy_in(
                "COPY ax_runs (id, tenant, task, status, revision, spec_digest, queue_position,
                               bytes, record)
                 FROM STDIN (FORMAT binary)",
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::TEXT,
                    Type::INT8,
                    Type::INT8,
                    Type::BYTEA,
                ],
            )
            .await?
        );
        for r in &self.runs {
            let bytes = r.record.len() as i64;
            runs.as_mut()
                .write(&[
                    &r.id,
                    &r.tenant,
                    &r.task,
                    &r.status,
                    &r.revision,
                    &r.spec,
                    &r.position,
                    &bytes,
                    &r.record,
                ])
                .await?;
        }
        runs.finish().await?;
        let (event_runs, event_bytes, event_records) = self.events.columns();
        let mut events = pin!(
            tx.copy_in(
                "COPY ax_events (run_id, bytes, record) FROM STDIN (FORMAT binary)",
                &[Type::TEXT, Type::INT8, Type::BYTEA],
            )
            .await?
        );
        for ((run_id, bytes), record) in event_runs.iter().zip(event_bytes).zip(event_records) {
            events.as_mut().write(&[run_id, bytes, record]).await?;
        }
        events.finish().await?;
        copy_outputs(tx, "ax_logs", &self.logs).await?;
        copy_outputs(tx, "ax_attempt_records", &self.records).await?;
        self.keys.insert(tx).await?;
        let fires = &self.fires;
        if !fires.runs.is_empty() {
            // In the batch's order: of two runs for one fire the first
            // claims it, as in the store the dump came from.
            tx.execute(
                "INSERT INTO ax_fires (tenant, task, scheduled_for, run_id)
                 SELECT tenant, task, at, run_id
                 FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[]) WITH ORDINALITY
                     AS f(tenant, task, at, run_id, n)
                 ORDER BY n
                 ON CONFLICT DO NOTHING",
                &[&fires.tenants, &fires.tasks, &fires.at, &fires.runs],
            )
            .await?;
        }
        self.charges.write(tx).await
    }
}

/// Copies `rows` into `table` (`ax_logs` or `ax_attempt_records`).
async fn copy_outputs(tx: &Tx<'_>, table: &str, rows: &[OutputRow]) -> PgResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut writer = pin!(
        tx.copy_in(
            &format!(
                "COPY {table} (run_id, step, attempt, tenant, bytes, record)
                 FROM STDIN (FORMAT binary)"
            ),
            &[
                Type::TEXT,
                Type::TEXT,
                Type::INT8,
                Type::TEXT,
                Type::INT8,
                Type::BYTEA,
            ],
        )
        .await?
    );
    for row in rows {
        let bytes = row.record.len() as i64;
        writer
            .as_mut()
            .write(&[
                &row.run_id,
                &row.step,
                &row.attempt,
                &row.tenant,
                &bytes,
                &row.record,
            ])
            .await?;
    }
    writer.finish().await?;
    Ok(())
}
