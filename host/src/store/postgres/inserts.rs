//! Inserts of runs on PostgreSQL (`Runs::insert_runs`): one statement
//! for a batch of triggers or fires (`insert_simple`), a locked
//! transaction for a batch holding a run with both an idempotency key and
//! a fire (`insert_batch`). `runs.rs` says why (its module comment).

use std::collections::{BTreeSet, HashMap, HashSet};

use tokio_postgres::GenericClient;

use super::statements::Cached;
use super::{Cx, Database, PgResult, Tx, decode, encode, key, name, outputs};
use crate::model::{Millis, RunRecord, ScheduleState};
use crate::store::rules::queue_position;
use crate::store::{Insert, NewRun, Result};

/// Inserts `runs` ([`Runs::insert_runs`](crate::store::Runs::insert_runs)).
pub(super) fn insert(db: &Database, runs: &[NewRun]) -> Result<Vec<Insert>> {
    let rows: Vec<Encoded> = runs
        .iter()
        .map(|n| encoded(&n.run))
        .collect::<PgResult<_>>()
        .map_err(|e| db.fail(e))?;
    if one_statement(runs) {
        return db.with(async |c| insert_simple(c, runs, &rows).await);
    }
    let guarded: Vec<String> = guarded_by(runs).into_iter().collect();
    db.transaction(async |tx| {
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

/// A run as written: its record's bytes and its definition's digest,
/// computed before the transaction starts.
struct Encoded {
    record: Vec<u8>,
    spec: String,
}

fn encoded(run: &RunRecord) -> PgResult<Encoded> {
    Ok(Encoded {
        record: encode(run)?,
        spec: run.spec.digest().to_owned(),
    })
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

/// New runs' idempotency keys, inserted by one statement (also by an
/// import's batch, `restore.rs`).
#[derive(Default)]
pub(super) struct Keys {
    pub(super) tenants: Vec<String>,
    pub(super) tasks: Vec<String>,
    pub(super) keys: Vec<String>,
    pub(super) runs: Vec<String>,
    pub(super) expires: Vec<Millis>,
}

impl Keys {
    pub(super) fn push(&mut self, run: &RunRecord, idempotency: &str, expires_at: Millis) {
        self.tenants.push(key(&run.tenant).into_owned());
        self.tasks.push(key(&run.task).into_owned());
        self.keys.push(key(idempotency).into_owned());
        self.runs.push(key(&run.id).into_owned());
        self.expires.push(expires_at);
    }

    pub(super) async fn insert(self, tx: &Tx<'_>) -> PgResult<()> {
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

/// Runs' unique fires, inserted by one statement (new runs: [`Fires::insert`];
/// a restore: [`Fires::claim_in_order`]).
#[derive(Default)]
pub(super) struct Fires {
    tenants: Vec<String>,
    tasks: Vec<String>,
    instants: Vec<Millis>,
    runs: Vec<String>,
}

impl Fires {
    pub(super) fn push(&mut self, run: &RunRecord) {
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

    /// A restore's fires, in the order pushed: of two runs for one fire the
    /// first claims it, as in the store the dump came from; the other keeps
    /// no fire.
    pub(super) async fn claim_in_order(&self, tx: &Tx<'_>) -> PgResult<()> {
        if self.runs.is_empty() {
            return Ok(());
        }
        tx.execute(
            "INSERT INTO ax_fires (tenant, task, scheduled_for, run_id)
             SELECT tenant, task, at, run_id
             FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[]) WITH ORDINALITY
                 AS f(tenant, task, at, run_id, n)
             ORDER BY n
             ON CONFLICT DO NOTHING",
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
