//! [`Runs`] on PostgreSQL: one row per run in `ax_runs` (its record, with
//! the columns its indexes need: status, queue position, revision), the
//! idempotency keys and unique fires in tables whose primary keys are the
//! guarantees, events, logs and records beside them (`outputs.rs`).
//!
//! Decisions:
//! - **An insert is one statement** (`insert_simple`): the idempotency
//!   keys and fires of its runs are inserted `ON CONFLICT DO NOTHING`, and
//!   a run is created only where its key and fire were new; what a run
//!   that was not created is answered with is read after. The primary keys
//!   are the guarantees, and a key or fire another writer is inserting is
//!   waited for by the database itself, so no lock is taken. Triggers of
//!   one tenant commit side by side (a lock per tenant held through the
//!   commit's flush once made them one at a time: ~360 runs/s with fsync
//!   on, docs/PERFORMANCE.md).
//! - **Except a run with both a key and a fire** (`insert_batch`): one
//!   statement cannot make the two inserts depend on each other both ways,
//!   so a batch holding one checks ids, keys and fires under an advisory
//!   lock per key and per fire instant (taken in name order, so two batches
//!   cannot deadlock), then inserts, in a transaction of a few statements
//!   whatever the batch's size.
//! - **A write is one statement and a compare-and-set.**
//!   `write_runs_with_alerts` updates a run only where its stored revision
//!   is the one the write follows; a stale writer is refused with nothing
//!   stored, as on sled (`writes.rs`).
//! - A run's record is stored whole (JSON, definition included) and its
//!   definition's digest beside it, so a write that changes the definition
//!   is refused without reading the stored record. Keeping definitions and
//!   step runs in rows of their own is the next step (issue 35).

use std::collections::{BTreeSet, HashMap, HashSet};

use tokio_postgres::GenericClient;

use super::statements::Cached;
use super::{Cx, PgResult, PgStore, Tx, decode, encode, key, name, outputs};

/// The queue head of a tenant (`$1`), `$2` runs at most: the partial index
/// `ax_runs_queue`, in its order (`plans_tests.rs` checks the plan).
pub(super) const QUEUED_RUNS: &str =
    "SELECT record FROM ax_runs WHERE tenant = $1 AND status = 'queued'
     ORDER BY queue_position, id LIMIT $2";

/// [`QUEUED_RUNS`], the ids only.
pub(super) const QUEUED_IDS: &str = "SELECT id FROM ax_runs WHERE tenant = $1 AND status = 'queued'
     ORDER BY queue_position, id LIMIT $2";
use crate::model::ids::{RunId, TaskName, TenantId};
use crate::model::record::AttemptRecord;
use crate::model::{DeadLetter, Event, Millis, RunRecord, RunStatus, ScheduleState};
use crate::store::rules::{
    digest_of, list_floor, list_start, missing_run, queue_position, select_page,
};
use crate::store::{
    AttemptLogs, Insert, KeyEntry, NewRun, OutboxAlert, Result, RunLogs, RunPage, RunQuery,
    RunSummary, RunWrite, Runs, WholeRun,
};
use crate::tenant::UsageBucket;

/// Index rows a `list_runs` reads per query while it fills a page.
const LIST_CHUNK: usize = 256;

/// A run as written: its record's bytes and its definition's digest,
/// computed before the transaction starts.
struct Encoded {
    record: Vec<u8>,
    spec: String,
}

fn encoded(run: &RunRecord) -> PgResult<Encoded> {
    Ok(Encoded {
        record: encode(run)?,
        spec: digest_of(&encode(&*run.spec)?),
    })
}

impl Runs for PgStore {
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>> {
        let rows: Vec<Encoded> = runs
            .iter()
            .map(|n| encoded(&n.run))
            .collect::<PgResult<_>>()
            .map_err(|e| self.db.fail(e))?;
        if one_statement(runs) {
            return self.db.with(async |c| insert_simple(c, runs, &rows).await);
        }
        let guarded: Vec<String> = guarded_by(runs).into_iter().collect();
        self.db.transaction(async |tx| {
            if !guarded.is_empty() {
                // In the order of the array (sorted): two batches cannot
                // deadlock on these.
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(k, 35))
                     FROM unnest($1::text[]) WITH ORDINALITY AS l(k, n) ORDER BY n",
                    &[&guarded],
                )
                .await?;
            }
            insert_batch(tx, runs, &rows).await
        })
    }

    fn write_runs_with_alerts(
        &self,
        runs: &[RunWrite],
        usage: &[UsageBucket],
        alerts: &[OutboxAlert],
    ) -> Result<()> {
        let missing = self
            .db
            .with(async |c| super::writes::write(c, runs, usage, alerts).await)?;
        missing.first().map_or(Ok(()), |id| Err(missing_run(id)))
    }

    fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        self.db.with(async |c| read_run(c, id).await)
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage> {
        let scope = match (&query.tenant, &query.task) {
            (Some(tenant), Some(task)) => {
                Scope::Task(key(tenant).into_owned(), key(task).into_owned())
            }
            (Some(tenant), None) => Scope::Tenant(key(tenant).into_owned()),
            (None, _) => Scope::All,
        };
        let task_filter = if query.tenant.is_none() {
            query.task.as_deref()
        } else {
            None
        };
        // The index in scope, newest first, read a chunk at a time as
        // select_page consumes it (a page usually needs one chunk).
        let chunk = LIST_CHUNK.max(query.limit.saturating_add(1));
        let mut below = list_start(query).map(|c| key(&c).into_owned());
        let mut buffered = std::collections::VecDeque::new();
        let mut exhausted = false;
        let entries = std::iter::from_fn(|| {
            if buffered.is_empty() && !exhausted {
                match self.index_chunk(&scope, below.as_deref(), chunk) {
                    Ok(rows) => {
                        exhausted = rows.len() < chunk;
                        below = rows
                            .last()
                            .map(|(id, _, _): &(String, RunStatus, String)| key(id).into_owned());
                        buffered.extend(rows.into_iter().map(Ok));
                    }
                    Err(e) => {
                        exhausted = true;
                        return Some(Err(e));
                    }
                }
            }
            buffered.pop_front()
        });
        let (ids, next) = select_page(
            entries,
            task_filter,
            query.status,
            list_floor(query).as_deref(),
            query.limit,
            self.scan_limit(),
        )?;
        let keys: Vec<String> = ids.iter().map(|id| key(id).into_owned()).collect();
        let mut runs = self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT id, record FROM ax_runs WHERE id = ANY($1)",
                    &[&keys],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let id = name(r.get(0));
                    let run: RunRecord = decode(&format!("run {id}"), r.get(1))?;
                    Ok((id, run))
                })
                .collect::<PgResult<HashMap<String, RunRecord>>>()
        })?;
        // Deleted between the index read and this one: left out, as the
        // other stores do.
        let runs = ids.iter().filter_map(|id| runs.remove(id)).collect();
        Ok(RunPage { runs, next })
    }

    fn running_runs(&self) -> Result<Vec<RunRecord>> {
        super::rows::records(
            &self.db,
            "running run",
            "SELECT record FROM ax_runs WHERE status = 'running' ORDER BY id",
            &[],
        )
    }

    fn queued_runs(&self, tenant: &str, limit: usize) -> Result<Vec<RunRecord>> {
        super::rows::records(
            &self.db,
            "queued run",
            QUEUED_RUNS,
            &[&key(tenant), &super::rows::sql_limit(limit)],
        )
    }

    fn queued_ids(&self, tenant: &str, limit: usize) -> Result<Vec<RunId>> {
        self.db.with(async |c| {
            let rows = c
                .query(QUEUED_IDS, &[&key(tenant), &super::rows::sql_limit(limit)])
                .await?;
            Ok(rows.iter().map(|r| name(r.get(0)).into()).collect())
        })
    }

    fn queued_counts(&self) -> Result<Vec<(TenantId, TaskName, usize)>> {
        self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT tenant, task, count(*) FROM ax_runs WHERE status = 'queued'
                     GROUP BY tenant, task ORDER BY tenant, task",
                    &[],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| {
                    let n = usize::try_from(r.get::<_, i64>(2)).unwrap_or(0);
                    (name(r.get(0)).into(), name(r.get(1)).into(), n)
                })
                .collect())
        })
    }

    fn delete_run(&self, id: &str) -> Result<bool> {
        self.db.transaction(async |tx| {
            let Some(row) = tx
                .query_opt(
                    "SELECT tenant, status, bytes FROM ax_runs WHERE id = $1 FOR UPDATE",
                    &[&key(id)],
                )
                .await?
            else {
                return Ok(false);
            };
            let status: RunStatus = parse_status(id, row.get(1))?;
            if !status.is_terminal() {
                return Ok(false);
            }
            let tenant = name(row.get(0));
            let events: i64 = tx
                .query_one(
                    "WITH gone AS (DELETE FROM ax_events WHERE run_id = $1 RETURNING bytes)
                     SELECT coalesce(sum(bytes), 0)::bigint FROM gone",
                    &[&key(id)],
                )
                .await?
                .get(0);
            // Its fire goes with it (foreign key); its idempotency key stays
            // until it expires (`expire_keys`).
            tx.execute("DELETE FROM ax_runs WHERE id = $1", &[&key(id)])
                .await?;
            outputs::delete_outputs(tx, id).await?;
            outputs::charge(tx, &tenant, -(row.get::<_, i64>(2) + events)).await?;
            Ok(true)
        })
    }

    fn forgotten_keys(&self, after: Option<&KeyEntry>, limit: usize) -> Result<Vec<KeyEntry>> {
        let (at, tenant, task, idempotency) = match after {
            Some(a) => (
                Some(a.expires_at),
                key(&a.tenant).into_owned(),
                key(&a.task).into_owned(),
                key(&a.key).into_owned(),
            ),
            None => (None, String::new(), String::new(), String::new()),
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT k.tenant, k.task, k.key, k.run_id, k.expires_at
                     FROM ax_idempotency_keys AS k
                     WHERE ($1::int8 IS NULL
                            OR (k.expires_at, k.tenant, k.task, k.key) > ($1, $2, $3, $4))
                         AND NOT EXISTS (SELECT 1 FROM ax_runs AS r WHERE r.id = k.run_id)
                     ORDER BY k.expires_at, k.tenant, k.task, k.key
                     LIMIT $5",
                    &[&at, &tenant, &task, &idempotency, &limit],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| KeyEntry {
                    tenant: name(r.get(0)).into(),
                    task: name(r.get(1)).into(),
                    key: name(r.get(2)),
                    run_id: name(r.get(3)).into(),
                    expires_at: r.get(4),
                })
                .collect())
        })
    }

    fn restore_keys(&self, keys: &[KeyEntry]) -> Result<()> {
        let column = |f: &dyn Fn(&KeyEntry) -> &str| -> Vec<String> {
            keys.iter().map(|k| key(f(k)).into_owned()).collect()
        };
        let (tenants, tasks, names, runs) = (
            column(&|k| k.tenant.as_str()),
            column(&|k| k.task.as_str()),
            column(&|k| k.key.as_str()),
            column(&|k| k.run_id.as_str()),
        );
        let expiries: Vec<Millis> = keys.iter().map(|k| k.expires_at).collect();
        self.db.with(async |c| {
            c.execute(
                "INSERT INTO ax_idempotency_keys (tenant, task, key, run_id, expires_at)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[])
                 ORDER BY 1, 2, 3
                 ON CONFLICT DO NOTHING",
                &[&tenants, &tasks, &names, &runs, &expiries],
            )
            .await?;
            Ok(())
        })
    }

    fn expire_keys(&self, now: Millis, limit: usize) -> Result<usize> {
        self.db.with(async |c| {
            let n = c
                .execute(
                    "DELETE FROM ax_idempotency_keys WHERE ctid IN (
                         SELECT ctid FROM ax_idempotency_keys WHERE expires_at <= $1
                         ORDER BY expires_at, tenant, task, key LIMIT $2)",
                    &[&now, &super::rows::sql_limit(limit)],
                )
                .await?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn run_summaries_page(
        &self,
        after: Option<&RunSummary>,
        limit: usize,
    ) -> Result<Vec<RunSummary>> {
        self.db.with(async |c| {
            let rows = match after {
                Some(a) => {
                    c.query(
                        "SELECT tenant, task, id, status FROM ax_runs
                         WHERE (tenant, task, id) < ($1, $2, $3)
                         ORDER BY tenant DESC, task DESC, id DESC LIMIT $4",
                        &[
                            &key(&a.tenant),
                            &key(&a.task),
                            &key(&a.id),
                            &super::rows::sql_limit(limit),
                        ],
                    )
                    .await?
                }
                None => {
                    c.query(
                        "SELECT tenant, task, id, status FROM ax_runs
                         ORDER BY tenant DESC, task DESC, id DESC LIMIT $1",
                        &[&super::rows::sql_limit(limit)],
                    )
                    .await?
                }
            };
            rows.iter()
                .map(|r| {
                    let id = name(r.get(2));
                    Ok(RunSummary {
                        tenant: name(r.get(0)).into(),
                        task: name(r.get(1)).into(),
                        status: parse_status(&id, r.get(3))?,
                        id: id.into(),
                    })
                })
                .collect()
        })
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event>> {
        outputs::events(&self.db, run_id)
    }

    fn run_bytes(&self, tenant: &str) -> Result<u64> {
        outputs::run_bytes(&self.db, tenant)
    }

    fn put_logs(&self, tenant: &str, run_id: &str, logs: &AttemptLogs) -> Result<()> {
        self.put_logs_batch(&[RunLogs {
            tenant: tenant.to_string(),
            run_id: run_id.to_string(),
            logs: logs.clone(),
        }])
    }

    fn put_logs_batch(&self, logs: &[RunLogs]) -> Result<()> {
        outputs::put_logs(&self.db, logs)
    }

    fn logs(&self, run_id: &str) -> Result<Vec<AttemptLogs>> {
        outputs::logs(&self.db, run_id)
    }

    fn put_record(&self, record: &AttemptRecord) -> Result<()> {
        outputs::put_records(&self.db, std::slice::from_ref(record))
    }

    fn put_records(&self, records: &[AttemptRecord]) -> Result<()> {
        outputs::put_records(&self.db, records)
    }

    fn whole_runs(&self, ids: &[&str]) -> Result<Vec<WholeRun>> {
        let keys: Vec<String> = ids.iter().map(|id| key(id).into_owned()).collect();
        self.db.with(async |c| whole_runs(c, &keys).await)
    }

    fn get_record(&self, run_id: &str, step: &str, attempt: u32) -> Result<Option<AttemptRecord>> {
        outputs::get_record(&self.db, run_id, step, attempt)
    }

    fn put_dead_letter(&self, dead: &DeadLetter) -> Result<()> {
        outputs::put_dead_letter(&self.db, dead)
    }

    fn get_dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        outputs::get_dead_letter(&self.db, id)
    }

    fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>> {
        outputs::list_dead_letters(&self.db, tenant, open_only)
    }
}

/// Which runs a listing reads.
enum Scope {
    Task(String, String),
    Tenant(String),
    All,
}

impl PgStore {
    /// Up to `n` index entries `(id, status, task)` of `scope` below `below`
    /// (exclusive), newest first.
    fn index_chunk(
        &self,
        scope: &Scope,
        below: Option<&str>,
        n: usize,
    ) -> Result<Vec<(String, RunStatus, String)>> {
        let n = super::rows::sql_limit(n);
        self.db.with(async |c| {
            let rows = match scope {
                Scope::Task(tenant, task) => {
                    c.query(
                        "SELECT id, status, task FROM ax_runs
                         WHERE tenant = $1 AND task = $2 AND ($3::text IS NULL OR id < $3)
                         ORDER BY id DESC LIMIT $4",
                        &[tenant, task, &below, &n],
                    )
                    .await?
                }
                Scope::Tenant(tenant) => {
                    c.query(
                        "SELECT id, status, task FROM ax_runs
                         WHERE tenant = $1 AND ($2::text IS NULL OR id < $2)
                         ORDER BY id DESC LIMIT $3",
                        &[tenant, &below, &n],
                    )
                    .await?
                }
                Scope::All => {
                    c.query(
                        "SELECT id, status, task FROM ax_runs
                         WHERE ($1::text IS NULL OR id < $1)
                         ORDER BY id DESC LIMIT $2",
                        &[&below, &n],
                    )
                    .await?
                }
            };
            rows.iter()
                .map(|r| {
                    let id = name(r.get(0));
                    let status = parse_status(&id, r.get(1))?;
                    Ok((id, status, name(r.get(2))))
                })
                .collect()
        })
    }
}

/// The stored runs of `ids` (escaped) in that order, each with its events,
/// logs and records: one statement per part, whatever their number.
async fn whole_runs(
    c: &Cached<'_, impl GenericClient + Sync>,
    ids: &[String],
) -> PgResult<Vec<WholeRun>> {
    /// The rows of `sql` (its run id first, its record last) by run id,
    /// in the order the statement gives.
    async fn by_run(
        c: &Cached<'_, impl GenericClient + Sync>,
        sql: &str,
        ids: &[String],
    ) -> PgResult<HashMap<String, Vec<tokio_postgres::Row>>> {
        let mut by_run: HashMap<String, Vec<tokio_postgres::Row>> = HashMap::new();
        for row in c.query(sql, &[&ids]).await? {
            by_run.entry(row.get(0)).or_default().push(row);
        }
        Ok(by_run)
    }
    let mut runs = by_run(c, "SELECT id, record FROM ax_runs WHERE id = ANY($1)", ids).await?;
    let mut events = by_run(
        c,
        "SELECT run_id, record FROM ax_events WHERE run_id = ANY($1) ORDER BY run_id, seq",
        ids,
    )
    .await?;
    let mut logs = by_run(
        c,
        "SELECT run_id, record FROM ax_logs WHERE run_id = ANY($1)
         ORDER BY run_id, step, attempt",
        ids,
    )
    .await?;
    let mut records = by_run(
        c,
        "SELECT run_id, step, attempt, record FROM ax_attempt_records WHERE run_id = ANY($1)",
        ids,
    )
    .await?;
    let mut whole = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(row) = runs.remove(id).and_then(|rows| rows.into_iter().next()) else {
            continue;
        };
        let what = format!("run {}", name(id));
        let run: RunRecord = decode(&what, row.get(1))?;
        fn decode_all<T: serde::de::DeserializeOwned>(
            what: &str,
            rows: Option<Vec<tokio_postgres::Row>>,
        ) -> PgResult<Vec<T>> {
            let rows = rows.unwrap_or_default();
            rows.iter().map(|r| decode(what, r.get(1))).collect()
        }
        let events = decode_all(&what, events.remove(id))?;
        let logs = decode_all(&what, logs.remove(id))?;
        // In the order of the run's steps and their attempts, those only.
        let mut kept: HashMap<(String, i64), AttemptRecord> = HashMap::new();
        for r in records.remove(id).unwrap_or_default() {
            kept.insert((name(r.get(1)), r.get(2)), decode(&what, r.get(3))?);
        }
        let records = run
            .steps
            .iter()
            .flat_map(|step| {
                step.attempts
                    .iter()
                    .map(move |a| (step.name.clone(), a.number))
            })
            .filter_map(|(step, number)| kept.remove(&(step, i64::from(number))))
            .collect();
        whole.push(WholeRun {
            run,
            events,
            logs,
            records,
        });
    }
    Ok(whole)
}

/// A stored run read back.
async fn read_run(
    c: &Cached<'_, impl GenericClient + Sync>,
    id: &str,
) -> PgResult<Option<RunRecord>> {
    let row = c
        .query_opt("SELECT record FROM ax_runs WHERE id = $1", &[&key(id)])
        .await?;
    row.map(|r| decode(&format!("run {id}"), r.get(0)))
        .transpose()
}

/// Inserts runs in one statement, committed on its own, when none of them
/// has both an idempotency key and a fire ([`one_statement`]): manual
/// triggers with or without keys, `after` runs, bulk batches, and the
/// scheduler's fires with their schedules' progress. The keys and the
/// fires are inserted first (`ON CONFLICT DO NOTHING`, in key and fire
/// order, so two writers wait for each other rather than deadlock, and a
/// key or fire another writer is inserting is waited for), then the runs
/// whose key or fire was new and whose id is not stored, their events,
/// their tenants' bytes and the progress of the schedules of the fires
/// created (the last of each schedule's). A run that was not created is
/// answered by what holds its id, else its key, else its fire, read after
/// (the only further statements, for a retried trigger or a fire already
/// made). A run whose id, key or fire an earlier run of `runs` has is
/// answered as that run was.
async fn insert_simple(c: &Cx<'_>, runs: &[NewRun], rows: &[Encoded]) -> PgResult<Vec<Insert>> {
    // The first run of each id, key and fire; the later ones are not sent,
    // and answered as it is.
    let mut first_id: HashMap<&str, usize> = HashMap::new();
    let mut first_key: HashMap<(&str, &str, &str), usize> = HashMap::new();
    let mut first_fire: HashMap<(&str, &str, Millis), usize> = HashMap::new();
    let mut earlier: Vec<Option<usize>> = vec![None; runs.len()];
    let (mut columns, mut events, mut added) =
        (Rows::default(), outputs::Events::default(), Vec::new());
    let (mut keys, mut expiries, mut fires, mut instants) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut schedules = Schedules::default();
    for (i, (new, row)) in runs.iter().zip(rows).enumerate() {
        let run = &new.run;
        let (tenant, task) = (run.tenant.as_str(), run.task.as_str());
        let idempotency = run.idempotency_key.as_deref().map(|k| (tenant, task, k));
        let fire = new.unique_fire.then_some((tenant, task, run.scheduled_for));
        let before = first_id
            .get(run.id.as_str())
            .or_else(|| idempotency.and_then(|k| first_key.get(&k)))
            .or_else(|| fire.and_then(|f| first_fire.get(&f)));
        if let Some(&j) = before {
            earlier[i] = Some(j);
            continue;
        }
        first_id.insert(&run.id, i);
        if let Some(k) = idempotency {
            first_key.insert(k, i);
        }
        if let Some(f) = fire {
            first_fire.insert(f, i);
        }
        columns.push(run, row.record.len() as i64, row);
        keys.push(idempotency.map(|k| key(k.2).into_owned()));
        expiries.push(new.key_expires_at);
        fires.push(new.unique_fire);
        instants.push(run.scheduled_for);
        added.push(events.push(&run.id, &new.events)?);
        if let Some(schedule) = &new.schedule {
            schedules.push(&run.id, schedule)?;
        }
    }
    let (event_runs, event_bytes, event_records) = events.columns();
    let inserted = c
        .query(
            r#"WITH v AS (
                   SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
                                        $5::int8[], $6::text[], $7::int8[], $8::int8[],
                                        $9::bytea[], $10::int8[], $11::text[], $12::int8[],
                                        $13::bool[], $14::int8[])
                       WITH ORDINALITY
                       AS v(id, tenant, task, status, revision, spec, position, bytes,
                            record, added, key, expires_at, fire, at, n)
               ), fresh AS (
                   -- A run whose id is stored is answered by it: its key
                   -- and fire are not claimed.
                   SELECT * FROM v
                   WHERE NOT EXISTS (SELECT 1 FROM ax_runs AS r WHERE r.id = v.id COLLATE "C")
               ), keys AS (
                   INSERT INTO ax_idempotency_keys (tenant, task, key, run_id, expires_at)
                   SELECT tenant, task, key, id, expires_at FROM fresh
                   WHERE key IS NOT NULL
                   ORDER BY tenant, task, key
                   ON CONFLICT DO NOTHING
                   RETURNING run_id
               ), fires AS (
                   INSERT INTO ax_fires (tenant, task, scheduled_for, run_id)
                   SELECT tenant, task, at, id FROM fresh
                   WHERE fire
                   ORDER BY tenant, task, at
                   ON CONFLICT DO NOTHING
                   RETURNING run_id
               ), inserted AS (
                   INSERT INTO ax_runs (id, tenant, task, status, revision, spec_digest,
                                        queue_position, bytes, record)
                   SELECT id, tenant, task, status, revision, spec, position, bytes, record
                   FROM fresh AS v
                   WHERE (v.key IS NULL OR v.id IN (SELECT run_id FROM keys))
                       AND (NOT v.fire OR v.id IN (SELECT run_id FROM fires))
                   ORDER BY n
                   ON CONFLICT (id) DO NOTHING
                   RETURNING id, tenant
               ), events AS (
                   INSERT INTO ax_events (run_id, bytes, record)
                   SELECT e.run_id, e.bytes, e.record
                   FROM unnest($15::text[], $16::int8[], $17::bytea[]) WITH ORDINALITY
                       AS e(run_id, bytes, record, n)
                   WHERE e.run_id IN (SELECT id FROM inserted)
                   ORDER BY e.n
               ), charged AS (
                   INSERT INTO ax_tenant_bytes (tenant, bytes)
                   SELECT i.tenant, sum(v.bytes + v.added)
                   FROM inserted AS i JOIN v ON v.id = i.id COLLATE "C"
                   GROUP BY i.tenant
                   ORDER BY i.tenant
                   ON CONFLICT (tenant) DO UPDATE SET bytes = ax_tenant_bytes.bytes + excluded.bytes
               ), progressed AS (
                   INSERT INTO ax_schedules (tenant, task, next_fire, record)
                   SELECT DISTINCT ON (s.tenant, s.task) s.tenant, s.task, s.next_fire, s.record
                   FROM unnest($18::text[], $19::text[], $20::int8[], $21::bytea[], $22::text[])
                       WITH ORDINALITY AS s(tenant, task, next_fire, record, run_id, n)
                   WHERE s.run_id IN (SELECT id FROM inserted)
                   ORDER BY s.tenant, s.task, s.n DESC
                   ON CONFLICT (tenant, task) DO UPDATE
                   SET next_fire = excluded.next_fire, record = excluded.record
               )
               SELECT id FROM inserted"#,
            &[
                &columns.ids,
                &columns.tenants,
                &columns.tasks,
                &columns.statuses,
                &columns.revisions,
                &columns.specs,
                &columns.positions,
                &columns.bytes,
                &columns.records,
                &added,
                &keys,
                &expiries,
                &fires,
                &instants,
                event_runs,
                event_bytes,
                event_records,
                &schedules.tenants,
                &schedules.tasks,
                &schedules.next_fires,
                &schedules.records,
                &schedules.runs,
            ],
        )
        .await?;
    let inserted: HashSet<String> = inserted.iter().map(|r| name(r.get(0))).collect();
    // The runs sent and not created, answered by what holds their id, key
    // or fire.
    let held: Vec<usize> = (0..runs.len())
        .filter(|&i| earlier[i].is_none() && !inserted.contains(runs[i].run.id.as_str()))
        .collect();
    let mut answers: HashMap<usize, Insert> = HashMap::new();
    if !held.is_empty() {
        let sent: Vec<NewRun> = held.iter().map(|&i| runs[i].clone()).collect();
        let by_id = stored_by_id(c, &sent).await?;
        let by_key = stored_by_key(c, &sent).await?;
        let by_fire = stored_by_fire(c, &sent).await?;
        for (n, &i) in held.iter().enumerate() {
            let answer = if let Some(run) = by_id.get(runs[i].run.id.as_str()) {
                Insert::Existing(Box::new(run.clone()))
            } else if let Some(found) = by_key.get(&n) {
                found.clone()
            } else if let Some(run) = by_fire.get(&n) {
                Insert::Existing(Box::new(run.clone()))
            } else {
                // What held it was deleted since: it was there, so this
                // one was not created.
                Insert::Existing(Box::new(runs[i].run.clone()))
            };
            answers.insert(i, answer);
        }
    }
    let mut outcomes: Vec<Insert> = Vec::with_capacity(runs.len());
    for (i, before) in earlier.iter().enumerate() {
        let outcome = match *before {
            Some(j) => match &outcomes[j] {
                Insert::Created => Insert::Existing(Box::new(runs[j].run.clone())),
                answer => answer.clone(),
            },
            None => answers.remove(&i).unwrap_or(Insert::Created),
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Whether [`insert_simple`] can insert `runs`: none has both an
/// idempotency key and a fire, whose two inserts one statement cannot make
/// depend on each other both ways (a key inserted for a run whose fire was
/// taken would answer for a run never created). Those take
/// [`insert_batch`]'s transaction, with its locks.
fn one_statement(runs: &[NewRun]) -> bool {
    runs.iter()
        .all(|n| n.run.idempotency_key.is_none() || !n.unique_fire)
}

/// Schedules' progress as columns, each with the run whose creation
/// writes it.
#[derive(Default)]
struct Schedules {
    tenants: Vec<String>,
    tasks: Vec<String>,
    next_fires: Vec<Option<Millis>>,
    records: Vec<Vec<u8>>,
    runs: Vec<String>,
}

impl Schedules {
    fn push(&mut self, run_id: &str, schedule: &ScheduleState) -> PgResult<()> {
        self.tenants.push(key(&schedule.tenant).into_owned());
        self.tasks.push(key(&schedule.task).into_owned());
        // The next-fire index holds unpaused schedules only.
        self.next_fires.push(if schedule.paused {
            None
        } else {
            schedule.next_fire
        });
        self.records.push(encode(schedule)?);
        self.runs.push(key(run_id).into_owned());
        Ok(())
    }
}

/// Inserts `runs` in a few statements whatever their number: one read of
/// their ids, one of their idempotency keys, one of their fires; one insert
/// each of the runs, their keys, their fires and their events, one charge
/// per tenant, and one of the fires' schedule progress. A run is answered
/// by what already holds its id, then its key, then its fire — stored, or
/// earlier in the same batch (the first of two stores it) — and is
/// created otherwise. Before, a keyed run cost six statements of its own:
/// a batch of 16 triggers took ~100 round trips inside one transaction,
/// the serial time that held triggers on PostgreSQL near 350 runs/s
/// (docs/PERFORMANCE.md).
async fn insert_batch(tx: &Tx<'_>, runs: &[NewRun], rows: &[Encoded]) -> PgResult<Vec<Insert>> {
    let by_id = stored_by_id(tx, runs).await?;
    let by_key = stored_by_key(tx, runs).await?;
    let by_fire = stored_by_fire(tx, runs).await?;
    let (mut inserted, mut keys, mut fires, mut events, mut charges) = (
        Rows::default(),
        Keys::default(),
        Fires::default(),
        outputs::Events::default(),
        outputs::Charges::default(),
    );
    // The runs created so far in this batch, by id, key and fire.
    let mut first_id: HashMap<&str, usize> = HashMap::new();
    let mut first_key: HashMap<(&str, &str, &str), usize> = HashMap::new();
    let mut first_fire: HashMap<(&str, &str, Millis), usize> = HashMap::new();
    let mut outcomes = Vec::with_capacity(runs.len());
    let earlier = |j: usize| Insert::Existing(Box::new(runs[j].run.clone()));
    for (i, (new, row)) in runs.iter().zip(rows).enumerate() {
        let run = &new.run;
        let (id, tenant, task) = (run.id.as_str(), run.tenant.as_str(), run.task.as_str());
        let fire = new.unique_fire.then_some((tenant, task, run.scheduled_for));
        let idempotency = run.idempotency_key.as_deref().map(|k| (tenant, task, k));
        let answer = if let Some(found) = by_id.get(id) {
            Some(Insert::Existing(Box::new(found.clone())))
        } else if let Some(&j) = first_id.get(id) {
            Some(earlier(j))
        } else if let Some(found) = by_key.get(&i) {
            Some(found.clone())
        } else if let Some(&j) = idempotency.and_then(|k| first_key.get(&k)) {
            Some(earlier(j))
        } else if let Some(found) = by_fire.get(&i) {
            Some(Insert::Existing(Box::new(found.clone())))
        } else {
            fire.and_then(|f| first_fire.get(&f)).map(|&j| earlier(j))
        };
        if let Some(answer) = answer {
            outcomes.push(answer);
            continue;
        }
        first_id.insert(id, i);
        let bytes = row.record.len() as i64;
        inserted.push(run, bytes, row);
        if let Some(k) = idempotency {
            first_key.insert(k, i);
            keys.push(run, k.2, new.key_expires_at);
        }
        if let Some(f) = fire {
            first_fire.insert(f, i);
            fires.push(run);
        }
        let added = events.push(id, &new.events)?;
        charges.add(&run.tenant, bytes + added);
        outcomes.push(Insert::Created);
    }
    inserted.insert(tx).await?;
    keys.insert(tx).await?;
    fires.insert(tx).await?;
    events.write(tx).await?;
    charges.write(tx).await?;
    let schedules: Vec<&ScheduleState> = runs
        .iter()
        .zip(&outcomes)
        .filter_map(|(new, outcome)| match (&new.schedule, outcome) {
            (Some(schedule), Insert::Created) => Some(schedule),
            _ => None,
        })
        .collect();
    super::catalog::write_schedules(tx, &schedules).await?;
    Ok(outcomes)
}

/// The stored runs among `runs`' ids.
async fn stored_by_id<C: GenericClient + Sync>(
    tx: &Cached<'_, C>,
    runs: &[NewRun],
) -> PgResult<HashMap<String, RunRecord>> {
    let ids: Vec<String> = runs.iter().map(|n| key(&n.run.id).into_owned()).collect();
    let stored = tx
        .query("SELECT id, record FROM ax_runs WHERE id = ANY($1)", &[&ids])
        .await?;
    stored
        .iter()
        .map(|r| {
            let id = name(r.get(0));
            let run = decode(&format!("run {id}"), r.get(1))?;
            Ok((id, run))
        })
        .collect()
}

/// What answers for the idempotency keys of `runs` that are stored, by the
/// run's place in `runs`: its run, or [`Insert::Forgotten`] for a key that
/// outlives its run until it expires.
async fn stored_by_key<C: GenericClient + Sync>(
    tx: &Cached<'_, C>,
    runs: &[NewRun],
) -> PgResult<HashMap<usize, Insert>> {
    let keyed: Vec<usize> = (0..runs.len())
        .filter(|&i| runs[i].run.idempotency_key.is_some())
        .collect();
    if keyed.is_empty() {
        return Ok(HashMap::new());
    }
    let column = |f: &dyn Fn(&RunRecord) -> &str| -> Vec<String> {
        keyed
            .iter()
            .map(|&i| key(f(&runs[i].run)).into_owned())
            .collect()
    };
    let (tenants, tasks, idempotency) = (
        column(&|r| r.tenant.as_str()),
        column(&|r| r.task.as_str()),
        column(&|r| r.idempotency_key.as_deref().unwrap_or_default()),
    );
    let found = tx
        .query(
            "SELECT u.n, k.run_id, r.record
             FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(tenant, task, key, n)
             JOIN ax_idempotency_keys k ON k.tenant = u.tenant COLLATE \"C\"
                 AND k.task = u.task COLLATE \"C\" AND k.key = u.key COLLATE \"C\"
             LEFT JOIN ax_runs r ON r.id = k.run_id",
            &[&tenants, &tasks, &idempotency],
        )
        .await?;
    found
        .iter()
        .map(|r| {
            let i = keyed[r.get::<_, i64>(0) as usize - 1];
            let owner = name(r.get(1));
            let answer = match r.get::<_, Option<&[u8]>>(2) {
                Some(record) => {
                    Insert::Existing(Box::new(decode(&format!("run {owner}"), record)?))
                }
                None => Insert::Forgotten(owner.into()),
            };
            Ok((i, answer))
        })
        .collect()
}

/// The stored runs that hold the fires of `runs` inserted with
/// `unique_fire`, by the run's place in `runs`.
async fn stored_by_fire<C: GenericClient + Sync>(
    tx: &Cached<'_, C>,
    runs: &[NewRun],
) -> PgResult<HashMap<usize, RunRecord>> {
    let unique: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].unique_fire).collect();
    if unique.is_empty() {
        return Ok(HashMap::new());
    }
    let tenants: Vec<String> = unique
        .iter()
        .map(|&i| key(&runs[i].run.tenant).into_owned())
        .collect();
    let tasks: Vec<String> = unique
        .iter()
        .map(|&i| key(&runs[i].run.task).into_owned())
        .collect();
    let instants: Vec<Millis> = unique.iter().map(|&i| runs[i].run.scheduled_for).collect();
    let found = tx
        .query(
            "SELECT u.n, r.record
             FROM unnest($1::text[], $2::text[], $3::int8[]) WITH ORDINALITY AS u(tenant, task, at, n)
             JOIN ax_fires f ON f.tenant = u.tenant COLLATE \"C\"
                 AND f.task = u.task COLLATE \"C\" AND f.scheduled_for = u.at
             JOIN ax_runs r ON r.id = f.run_id",
            &[&tenants, &tasks, &instants],
        )
        .await?;
    found
        .iter()
        .map(|r| {
            let i = unique[r.get::<_, i64>(0) as usize - 1];
            let run = decode(&format!("fire of {}", runs[i].run.id), r.get(1))?;
            Ok((i, run))
        })
        .collect()
}

/// What inserting `runs` must hold alone between its check and its write:
/// each idempotency key and each unique fire, named as text (a collision
/// of two names' hashes only makes two inserts wait for each other). A run
/// with neither is checked by its id alone, which only its own caller
/// makes, so it waits for no one: plain triggers of one tenant commit side
/// by side (and PostgreSQL flushes their commits together).
fn guarded_by(runs: &[NewRun]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for new in runs {
        let run = &new.run;
        let (tenant, task) = (key(&run.tenant), key(&run.task));
        if let Some(idempotency) = &run.idempotency_key {
            names.insert(format!(
                "key\u{1f}{tenant}\u{1f}{task}\u{1f}{}",
                key(idempotency)
            ));
        }
        if new.unique_fire {
            names.insert(format!(
                "fire\u{1f}{tenant}\u{1f}{task}\u{1f}{}",
                run.scheduled_for
            ));
        }
    }
    names
}

/// New runs' idempotency keys, inserted by one statement.
#[derive(Default)]
struct Keys {
    tenants: Vec<String>,
    tasks: Vec<String>,
    keys: Vec<String>,
    runs: Vec<String>,
    expires: Vec<Millis>,
}

impl Keys {
    fn push(&mut self, run: &RunRecord, idempotency: &str, expires_at: Millis) {
        self.tenants.push(key(&run.tenant).into_owned());
        self.tasks.push(key(&run.task).into_owned());
        self.keys.push(key(idempotency).into_owned());
        self.runs.push(key(&run.id).into_owned());
        self.expires.push(expires_at);
    }

    async fn insert(self, tx: &Tx<'_>) -> PgResult<()> {
        if self.runs.is_empty() {
            return Ok(());
        }
        tx.execute(
            "INSERT INTO ax_idempotency_keys (tenant, task, key, run_id, expires_at)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[])",
            &[
                &self.tenants,
                &self.tasks,
                &self.keys,
                &self.runs,
                &self.expires,
            ],
        )
        .await?;
        Ok(())
    }
}

/// New runs' unique fires, inserted by one statement.
#[derive(Default)]
struct Fires {
    tenants: Vec<String>,
    tasks: Vec<String>,
    instants: Vec<Millis>,
    runs: Vec<String>,
}

impl Fires {
    fn push(&mut self, run: &RunRecord) {
        self.tenants.push(key(&run.tenant).into_owned());
        self.tasks.push(key(&run.task).into_owned());
        self.instants.push(run.scheduled_for);
        self.runs.push(key(&run.id).into_owned());
    }

    async fn insert(self, tx: &Tx<'_>) -> PgResult<()> {
        if self.runs.is_empty() {
            return Ok(());
        }
        tx.execute(
            "INSERT INTO ax_fires (tenant, task, scheduled_for, run_id)
             SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[])",
            &[&self.tenants, &self.tasks, &self.instants, &self.runs],
        )
        .await?;
        Ok(())
    }
}

/// Runs' rows, written by one `UPDATE … FROM unnest(…)` or one `INSERT …
/// SELECT FROM unnest(…)` whatever their number.
#[derive(Default)]
struct Rows<'a> {
    ids: Vec<String>,
    tenants: Vec<String>,
    tasks: Vec<String>,
    statuses: Vec<&'static str>,
    revisions: Vec<i64>,
    positions: Vec<Millis>,
    bytes: Vec<i64>,
    records: Vec<&'a [u8]>,
    specs: Vec<&'a str>,
}

impl<'a> Rows<'a> {
    /// Adds `run`'s row (at most once per run: an update changes a row
    /// once whatever number of times it is named).
    fn push(&mut self, run: &RunRecord, bytes: i64, row: &'a Encoded) {
        self.ids.push(key(&run.id).into_owned());
        self.tenants.push(key(&run.tenant).into_owned());
        self.tasks.push(key(&run.task).into_owned());
        self.statuses.push(run.status.as_str());
        self.revisions.push(run.revision as i64);
        self.positions.push(queue_position(run));
        self.bytes.push(bytes);
        self.records.push(&row.record);
        self.specs.push(&row.spec);
    }

    /// Inserts them (new runs).
    async fn insert(self, tx: &Tx<'_>) -> PgResult<()> {
        if self.ids.is_empty() {
            return Ok(());
        }
        tx.execute(
            "INSERT INTO ax_runs (id, tenant, task, status, revision, spec_digest,
                 queue_position, bytes, record)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[],
                                  $6::text[], $7::int8[], $8::int8[], $9::bytea[])",
            &[
                &self.ids,
                &self.tenants,
                &self.tasks,
                &self.statuses,
                &self.revisions,
                &self.specs,
                &self.positions,
                &self.bytes,
                &self.records,
            ],
        )
        .await?;
        Ok(())
    }
}

fn parse_status(id: &str, text: &str) -> PgResult<RunStatus> {
    text.parse().map_err(|e: String| {
        crate::store::Error::Corrupt {
            key: format!("run {id}"),
            reason: e,
        }
        .into()
    })
}
