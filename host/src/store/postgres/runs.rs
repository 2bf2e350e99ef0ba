//! [`Runs`] on PostgreSQL: one row per run in `ax_runs` (its record, with
//! the columns its indexes need: status, queue position, revision), the
//! idempotency keys and unique fires in tables whose primary keys are the
//! guarantees, events, logs and records beside them (`outputs.rs`).
//!
//! Decisions:
//! - **An insert is one statement** (`inserts.rs`, `insert_simple`): the idempotency
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

use std::collections::HashMap;

use tokio_postgres::GenericClient;

use super::statements::Cached;
use super::{PgResult, PgStore, decode, key, name, outputs};

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
use crate::model::{DeadLetter, Event, Millis, RunRecord, RunStatus};
use crate::store::rules::{list_floor, list_start, missing_run, select_page};
use crate::store::{
    AttemptLogs, Insert, KeyEntry, NewRun, OutboxAlert, Result, RunLogs, RunPage, RunQuery,
    RunSummary, RunWrite, Runs, WholeRun,
};
use crate::tenant::UsageBucket;

/// Index rows a `list_runs` reads per query while it fills a page.
const LIST_CHUNK: usize = 256;

impl Runs for PgStore {
    fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<Insert>> {
        super::inserts::insert(&self.db, runs)
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

    fn restore_runs(&self, runs: Vec<WholeRun>, key_ttl: Millis) -> Result<Option<RunId>> {
        super::restore::restore(&self.db, &runs, key_ttl)
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
        let mut all_events = Vec::new();
        for row in events.remove(id).unwrap_or_default() {
            all_events.extend(outputs::decode_events(&what, row.get(1))?);
        }
        let events = all_events;
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
            json: Default::default(),
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

fn parse_status(id: &str, text: &str) -> PgResult<RunStatus> {
    text.parse().map_err(|e: String| {
        crate::store::Error::Corrupt {
            key: format!("run {id}"),
            reason: e,
        }
        .into()
    })
}
