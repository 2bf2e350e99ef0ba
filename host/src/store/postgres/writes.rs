//! A write of runs (`Runs::write_runs_with_alerts`) as one statement.
//!
//! The scheduler writes each run two or three times (`running`, then its
//! final state; more for DAGs and retries), so this write is most of what
//! a run costs the database. It was a transaction of six to nine
//! statements: `BEGIN`, a `SELECT … FOR UPDATE` of the runs' revisions,
//! the update, the events, the tenants' bytes, the usage buckets (three),
//! `COMMIT`. It is now one statement of data-modifying CTEs ([`WRITE`]),
//! committed on its own:
//! - `written` updates each run whose stored revision is the one the write
//!   follows and whose definition is the run's: the compare-and-set is the
//!   update's own condition, checked again on the newest row version if
//!   another writer changed it meanwhile;
//! - `events`, `charged` (tenants' bytes, from the stored sizes the
//!   statement read) and the alerts follow the runs written;
//! - `used` adds the usage buckets in place (migration 2 made them
//!   counters);
//! - the final `SELECT` names the runs that were not written: a run that
//!   is stored there was refused (stale revision, or another definition),
//!   and `ax_refuse` raises an error, which undoes the whole statement, so
//!   a refused write stores nothing, as the seam says; a run that is not
//!   stored is returned and reported once the others are written.
//!
//! Decision: a write stays atomic with its usage and alerts, so they are
//! in the same statement rather than in statements after it.

use std::collections::HashMap;

use super::{Cx, Fail, PgResult, encode, key, outputs};
use crate::model::{Millis, RunRecord};
use crate::store::rules::{check_revisions, definition_changed, queue_position};
use crate::store::{Error, OutboxAlert, RunWrite};
use crate::tenant::UsageBucket;

/// The write: runs `$1`–`$11`, events `$12`–`$14`, usage `$15`–`$21`,
/// alerts `$22`–`$26` ([`Write::params`]); answers the ids of the runs
/// that are not stored.
const WRITE: &str = r#"
WITH v AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[],
                         $7::text[], $8::int8[], $9::int8[], $10::bytea[], $11::int8[])
        AS v(id, tenant, task, status, revision, prev, spec, position, bytes, record, added)
), stored AS (
    SELECT r.id, r.tenant, r.revision, r.spec_digest, r.bytes
    FROM ax_runs AS r JOIN v ON r.id = v.id COLLATE "C"
), written AS (
    UPDATE ax_runs AS r SET tenant = v.tenant, task = v.task, status = v.status,
        revision = v.revision, queue_position = v.position, bytes = v.bytes, record = v.record
    FROM v
    WHERE r.id = v.id COLLATE "C" AND r.revision = v.prev AND r.spec_digest = v.spec COLLATE "C"
    RETURNING r.id
), events AS (
    INSERT INTO ax_events (run_id, bytes, record)
    SELECT e.run_id, e.bytes, e.record
    FROM unnest($12::text[], $13::int8[], $14::bytea[]) WITH ORDINALITY AS e(run_id, bytes, record, n)
    WHERE e.run_id IN (SELECT id FROM written)
    ORDER BY e.n
), charged AS (
    INSERT INTO ax_tenant_bytes (tenant, bytes)
    SELECT d.tenant, sum(d.delta)
    FROM (SELECT s.tenant, -s.bytes AS delta FROM stored AS s JOIN written AS w ON w.id = s.id
          UNION ALL
          SELECT v.tenant, v.bytes + v.added FROM v JOIN written AS w ON w.id = v.id COLLATE "C")
        AS d
    GROUP BY d.tenant
    HAVING sum(d.delta) <> 0
    ORDER BY d.tenant
    ON CONFLICT (tenant) DO UPDATE SET bytes = ax_tenant_bytes.bytes + excluded.bytes
), used AS (
    INSERT INTO ax_usage (tenant, hour, task, fuel, attempts, wall_ms, outcomes)
    SELECT u.tenant, u.hour, u.task, u.fuel, u.attempts, u.wall_ms, u.outcomes::jsonb
    FROM unnest($15::text[], $16::int8[], $17::text[], $18::int8[], $19::int8[],
                $20::float8[], $21::text[])
        AS u(tenant, hour, task, fuel, attempts, wall_ms, outcomes)
    ORDER BY u.tenant, u.hour, u.task
    ON CONFLICT (tenant, hour, task) DO UPDATE SET
        fuel = LEAST(ax_usage.fuel::numeric + excluded.fuel, 9223372036854775807)::bigint,
        attempts = ax_usage.attempts + excluded.attempts,
        wall_ms = ax_usage.wall_ms + excluded.wall_ms,
        outcomes = ax_add_counts(ax_usage.outcomes, excluded.outcomes)
), alerted AS (
    INSERT INTO ax_alerts (id, tenant, status, next_try, record)
    SELECT * FROM unnest($22::text[], $23::text[], $24::text[], $25::int8[], $26::bytea[])
    ON CONFLICT (id) DO UPDATE
    SET tenant = excluded.tenant, status = excluded.status,
        next_try = excluded.next_try, record = excluded.record
)
SELECT v.id,
       CASE WHEN s.id IS NULL THEN false
            WHEN s.revision = v.prev AND s.spec_digest <> v.spec COLLATE "C"
                THEN ax_refuse('AX422', v.id, s.revision)
            ELSE ax_refuse('AX409', v.id, s.revision)
       END
FROM v LEFT JOIN stored AS s ON s.id = v.id COLLATE "C"
WHERE v.id NOT IN (SELECT id FROM written)
"#;

/// Writes `runs`, `usage` and `alerts` in one statement on `c` (the module
/// comment says how); returns the ids of the runs that are not stored.
pub(super) async fn write(
    c: &Cx<'_>,
    runs: &[RunWrite],
    usage: &[UsageBucket],
    alerts: &[OutboxAlert],
) -> PgResult<Vec<String>> {
    let write = Write::of(runs, usage, alerts)?;
    let rows = c
        .query(WRITE, &write.params())
        .await
        .map_err(|e| refused(e, &write))?;
    Ok(rows
        .iter()
        .map(|r| super::name(r.get::<_, &str>(0)))
        .collect())
}

/// A refusal raised by `ax_refuse` (for a run of `write`) as the store's
/// error; anything else as it is.
fn refused(e: tokio_postgres::Error, write: &Write) -> Fail {
    let Some(db) = e.as_db_error() else {
        return Fail::Pg(e);
    };
    let id = super::name(db.message());
    let stored = db.detail().and_then(|d| d.parse().ok()).unwrap_or(0);
    let given = write
        .ids
        .iter()
        .position(|i| *i == db.message())
        .map_or(0, |i| write.prevs[i] as u64 + 1);
    match db.code().code() {
        "AX409" => Fail::Store(Error::Conflict { id, stored, given }),
        "AX422" => Fail::Store(definition_changed(&id)),
        _ => Fail::Pg(e),
    }
}

/// The statement's parameters, one array per column.
#[derive(Default)]
struct Write {
    ids: Vec<String>,
    tenants: Vec<String>,
    tasks: Vec<String>,
    statuses: Vec<&'static str>,
    revisions: Vec<i64>,
    prevs: Vec<i64>,
    specs: Vec<String>,
    positions: Vec<Millis>,
    bytes: Vec<i64>,
    records: Vec<Vec<u8>>,
    added: Vec<i64>,
    event_runs: Vec<String>,
    event_bytes: Vec<i64>,
    event_records: Vec<Vec<u8>>,
    usage: Usage,
    alerts: Alerts,
}

impl Write {
    /// The columns of a write: each run once, as its last record, after
    /// the revision its first record follows (a run given twice must give
    /// revisions that follow each other: checked here, before the
    /// database), with the bytes all its events add.
    fn of(runs: &[RunWrite], usage: &[UsageBucket], alerts: &[OutboxAlert]) -> PgResult<Write> {
        let mut first: HashMap<&str, u64> = HashMap::new();
        for w in runs {
            first.entry(w.run.id.as_str()).or_insert(w.run.revision);
        }
        check_revisions(runs.iter().map(|w| &w.run), |id| {
            Ok(first.get(id).map(|r| r.saturating_sub(1)))
        })?;
        let mut write = Write::default();
        let mut at: HashMap<&str, usize> = HashMap::new();
        for w in runs {
            let run = &w.run;
            let mut added = 0;
            if let Some(record) = outputs::encode_events(&w.events)? {
                added = record.len() as i64;
                write.event_runs.push(key(&run.id).into_owned());
                write.event_bytes.push(added);
                write.event_records.push(record);
            }
            let i = match at.get(run.id.as_str()) {
                Some(&i) => i,
                None => {
                    at.insert(&run.id, write.ids.len());
                    write.push_run(run, first[run.id.as_str()])?;
                    write.ids.len() - 1
                }
            };
            write.set_record(i, run)?;
            write.added[i] += added;
        }
        write.usage = Usage::of(usage);
        write.alerts = Alerts::of(alerts)?;
        Ok(write)
    }

    /// Adds `run`'s row, following the stored revision `first - 1`.
    fn push_run(&mut self, run: &RunRecord, first: u64) -> PgResult<()> {
        self.ids.push(key(&run.id).into_owned());
        self.tenants.push(String::new());
        self.tasks.push(String::new());
        self.statuses.push(run.status.as_str());
        self.revisions.push(0);
        self.prevs.push(first as i64 - 1);
        self.specs.push(run.spec.digest().to_owned());
        self.positions.push(0);
        self.bytes.push(0);
        self.records.push(Vec::new());
        self.added.push(0);
        Ok(())
    }

    /// Makes row `i` hold `run` (a later record of a run replaces the
    /// earlier one).
    fn set_record(&mut self, i: usize, run: &RunRecord) -> PgResult<()> {
        let record = encode(run)?;
        self.tenants[i] = key(&run.tenant).into_owned();
        self.tasks[i] = key(&run.task).into_owned();
        self.statuses[i] = run.status.as_str();
        self.revisions[i] = run.revision as i64;
        self.positions[i] = queue_position(run);
        self.bytes[i] = record.len() as i64;
        self.records[i] = record;
        Ok(())
    }

    fn params(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        let (u, a) = (&self.usage, &self.alerts);
        vec![
            &self.ids,
            &self.tenants,
            &self.tasks,
            &self.statuses,
            &self.revisions,
            &self.prevs,
            &self.specs,
            &self.positions,
            &self.bytes,
            &self.records,
            &self.added,
            &self.event_runs,
            &self.event_bytes,
            &self.event_records,
            &u.tenants,
            &u.hours,
            &u.tasks,
            &u.fuel,
            &u.attempts,
            &u.wall_ms,
            &u.outcomes,
            &a.ids,
            &a.tenants,
            &a.statuses,
            &a.next_tries,
            &a.records,
        ]
    }
}

/// Usage buckets as columns, two of one key added together first (one
/// statement may not change a row twice).
#[derive(Default)]
struct Usage {
    tenants: Vec<String>,
    hours: Vec<Millis>,
    tasks: Vec<String>,
    fuel: Vec<i64>,
    attempts: Vec<i64>,
    wall_ms: Vec<f64>,
    outcomes: Vec<String>,
}

impl Usage {
    fn of(usage: &[UsageBucket]) -> Usage {
        let mut merged: Vec<UsageBucket> = Vec::new();
        let mut at: HashMap<(&str, Millis, &str), usize> = HashMap::new();
        for bucket in usage {
            let id = (bucket.tenant.as_str(), bucket.hour, bucket.task.as_str());
            match at.get(&id) {
                Some(&i) => merged[i].add(bucket),
                None => {
                    at.insert(id, merged.len());
                    merged.push(bucket.clone());
                }
            }
        }
        let mut columns = Usage::default();
        for b in merged {
            columns.tenants.push(key(&b.tenant).into_owned());
            columns.hours.push(b.hour);
            columns.tasks.push(key(&b.task).into_owned());
            columns.fuel.push(i64::try_from(b.fuel).unwrap_or(i64::MAX));
            columns
                .attempts
                .push(i64::try_from(b.attempts).unwrap_or(i64::MAX));
            columns.wall_ms.push(b.wall_ms);
            columns
                .outcomes
                .push(serde_json::to_string(&b.outcomes).expect("a map of counts is JSON"));
        }
        columns
    }
}

/// Outbox alerts as columns, the last of two with one id kept.
#[derive(Default)]
struct Alerts {
    ids: Vec<String>,
    tenants: Vec<String>,
    statuses: Vec<&'static str>,
    next_tries: Vec<Millis>,
    records: Vec<Vec<u8>>,
}

impl Alerts {
    fn of(alerts: &[OutboxAlert]) -> PgResult<Alerts> {
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, alert) in alerts.iter().enumerate() {
            last.insert(&alert.id, i);
        }
        let mut columns = Alerts::default();
        for (i, alert) in alerts.iter().enumerate() {
            if last[alert.id.as_str()] != i {
                continue;
            }
            columns.ids.push(key(&alert.id).into_owned());
            columns.tenants.push(key(&alert.tenant).into_owned());
            columns.statuses.push(alert.status.as_str());
            columns.next_tries.push(alert.next_try);
            columns.records.push(encode(alert)?);
        }
        Ok(columns)
    }
}
