//! Runs restored from a dump on PostgreSQL
//! ([`Runs::restore_runs`](crate::store::Runs::restore_runs), what `ax
//! store import` writes).
//!
//! A batch is one transaction: one statement checks that none of its ids
//! or idempotency keys is held (an import fills an empty store, so one that
//! is held means the dump holds a run twice: the batch writes nothing);
//! then the runs, their events, logs and attempt records are each copied in
//! by one binary `COPY` (rows encoded into one buffer each, [`CopyRows`]),
//! and the keys, the fires and the tenants' bytes
//! written by one statement each. What is stored and charged is what
//! [`restore_by_inserts`](crate::store::restore_by_inserts) stores through
//! `insert_runs`, `put_logs_batch` and `put_records` (the conformance suite
//! compares them); `COPY` only skips what an insert of arrays costs per
//! row (decoding them, the statement's conflict checks and ordering), most
//! of an import's time (docs/PERFORMANCE.md, *Export and import*).

use std::borrow::Cow;
use std::collections::HashSet;

use super::copy::CopyRows;
use super::inserts::{Fires, Keys};
use super::outputs::{Charges, encode_events};
use super::{Database, PgResult, Tx, encode, key};
use crate::model::Millis;
use crate::model::ids::RunId;
use crate::store::rules::queue_position;
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

/// A batch's rows, encoded before its transaction starts: the runs,
/// events, logs and records as their `COPY`s read them ([`CopyRows`]).
#[derive(Default)]
struct Batch {
    /// The runs' ids, for the check that none is held.
    ids: Vec<String>,
    runs: CopyRows,
    events: CopyRows,
    logs: CopyRows,
    records: CopyRows,
    keys: Keys,
    fires: Fires,
    charges: Charges,
}

impl Batch {
    fn encode(runs: &[WholeRun], key_ttl: Millis) -> PgResult<Batch> {
        let mut batch = Batch::default();
        let mut last_spec: Option<(&serde_json::Value, String)> = None;
        for whole in runs {
            let run = &whole.run;
            let id = key(&run.id);
            let tenant = key(&run.tenant);
            // The dump's text when it is what encoding gives (`dump::spans`).
            let record = match whole.json.run() {
                Some(text) => Cow::Borrowed(text),
                None => Cow::Owned(encode(run)?),
            };
            let mut added = record.len() as i64;
            // The dump's text when it is what encoding gives, as the record's.
            let events = match (whole.events.is_empty(), whole.json.events()) {
                (false, Some(text)) => Some(Cow::Borrowed(text)),
                _ => encode_events(&whole.events)?.map(Cow::Owned),
            };
            if let Some(events) = events {
                added += events.len() as i64;
                let bytes = events.len() as i64;
                batch.events.row(3).text(&id).int8(bytes).bytea(&events);
            }
            batch.charges.add(&run.tenant, added);
            for (i, logs) in whole.logs.iter().enumerate() {
                let row = match whole.json.logs(i) {
                    Some(text) => Cow::Borrowed(text),
                    None => Cow::Owned(encode(logs)?),
                };
                batch.charges.add(&run.tenant, row.len() as i64);
                output(
                    &mut batch.logs,
                    &id,
                    &logs.step,
                    logs.attempt,
                    &tenant,
                    &row,
                );
            }
            for kept in &whole.records {
                let ctx = &kept.context;
                let row = encode(kept)?;
                batch.charges.add(&run.tenant, row.len() as i64);
                output(
                    &mut batch.records,
                    &id,
                    &ctx.step,
                    ctx.attempt,
                    &tenant,
                    &row,
                );
            }
            if let Some(k) = &run.idempotency_key {
                let expires_at = run.created_at.saturating_add(key_ttl);
                batch.keys.push(run, k, expires_at);
            }
            if claims_fire(run) {
                batch.fires.push(run);
            }
            // Runs of one task in a row share a definition: its digest is
            // taken once (comparing is cheaper than encoding and hashing;
            // docs/PERFORMANCE.md, *Import: one parse*).
            if last_spec
                .as_ref()
                .is_none_or(|(spec, _)| !encode_alike(spec, &run.spec))
            {
                last_spec = Some((&*run.spec, run.spec.digest().to_owned()));
            }
            let spec = last_spec.as_ref().map_or("", |(_, digest)| digest.as_str());
            batch
                .runs
                .row(9)
                .text(&id)
                .text(&tenant)
                .text(&key(&run.task))
                .text(run.status.as_str())
                .int8(run.revision as i64)
                .text(spec)
                .int8(queue_position(run))
                .int8(record.len() as i64)
                .bytea(&record);
            batch.ids.push(id.into_owned());
        }
        Ok(batch)
    }

    /// The index in the batch of the first run whose id or key is held.
    async fn held(&self, tx: &Tx<'_>) -> PgResult<Option<usize>> {
        let ids = &self.ids;
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
        Ok(ids.iter().position(|id| held.contains(id)))
    }

    /// Writes the batch (none of it is held).
    async fn copy(self, tx: &Tx<'_>) -> PgResult<()> {
        self.runs
            .send(
                tx,
                "COPY ax_runs (id, tenant, task, status, revision, spec_digest, queue_position,
                               bytes, record)
                 FROM STDIN (FORMAT binary)",
            )
            .await?;
        self.events
            .send(
                tx,
                "COPY ax_events (run_id, bytes, record) FROM STDIN (FORMAT binary)",
            )
            .await?;
        for (rows, table) in [(self.logs, "ax_logs"), (self.records, "ax_attempt_records")] {
            let sql = format!(
                "COPY {table} (run_id, step, attempt, tenant, bytes, record)
                 FROM STDIN (FORMAT binary)"
            );
            rows.send(tx, &sql).await?;
        }
        self.keys.insert(tx).await?;
        self.fires.claim_in_order(tx).await?;
        self.charges.write(tx).await
    }
}

/// Whether `a` and `b` encode to the same JSON text (`==` is not enough:
/// `0.0 == -0.0`).
fn encode_alike(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y && x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| encode_alike(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k, x), (l, y))| k == l && encode_alike(x, y))
        }
        _ => a == b,
    }
}

/// An `ax_logs` or `ax_attempt_records` row of run `id` (charged to its
/// `tenant`).
fn output(rows: &mut CopyRows, id: &str, step: &str, attempt: u32, tenant: &str, record: &[u8]) {
    rows.row(6)
        .text(id)
        .text(&key(step))
        .int8(i64::from(attempt))
        .text(tenant)
        .int8(record.len() as i64)
        .bytea(record);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::encode_alike;

    /// The definition's digest is reused only for a definition whose text
    /// is the same.
    #[test]
    fn definitions_alike_are_those_encoded_alike() {
        let pairs = [
            (
                json!({"a": [1, "x"], "b": 0.5}),
                json!({"b": 0.5, "a": [1, "x"]}),
            ),
            (json!(0.0), json!(-0.0)),
            (json!(1), json!(1.0)),
            (json!({"a": 1}), json!({"a": 1, "b": null})),
            (json!([1, 2]), json!([2, 1])),
            (json!("é"), json!("é")),
        ];
        for (a, b) in pairs {
            let same = serde_json::to_vec(&a).unwrap() == serde_json::to_vec(&b).unwrap();
            assert_eq!(encode_alike(&a, &b), same, "{a} {b}");
        }
    }
}
