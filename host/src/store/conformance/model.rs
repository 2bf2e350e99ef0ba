//! Seeded random operation sequences applied to a store and to a
//! deliberately naive model, comparing every observable result (no
//! property-testing crate: a seeded `StdRng`).

use std::collections::{BTreeMap, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Make, SCAN, all_pages, attempt_logs, dead, event, ids, run, run_id, schedule, task};
use crate::model::ids::{RunId, TaskName, TenantId};
use crate::model::{DeadLetter, Event, Millis, RunRecord, RunStatus, ScheduleState, TaskRecord};
use crate::store::prelude::*;
use crate::store::{AttemptLogs, Insert, NewRun, RunQuery, id_millis};

/// The reference: what a store must show, kept the simplest way possible.
#[derive(Default)]
struct Model {
    runs: Vec<RunRecord>,
    idempotency: HashMap<(TenantId, TaskName, String), RunId>,
    /// (expires at, (tenant, task, key)) → run id.
    key_expiry: BTreeMap<(Millis, (TenantId, TaskName, String)), RunId>,
    fires: HashMap<(TenantId, TaskName, Millis), RunId>,
    events: HashMap<String, Vec<Event>>,
    schedules: BTreeMap<(String, String), ScheduleState>,
    tasks: BTreeMap<(String, String), TaskRecord>,
    dead: BTreeMap<String, DeadLetter>,
    logs: HashMap<String, BTreeMap<(String, u32), AttemptLogs>>,
    /// Ids of deleted runs, to probe that nothing of them is left.
    deleted: Vec<String>,
}

impl Model {
    fn run(&self, id: &str) -> Option<&RunRecord> {
        self.runs.iter().find(|r| r.id == id)
    }

    fn insert(
        &mut self,
        run: &RunRecord,
        unique_fire: bool,
        sched: Option<&ScheduleState>,
        events: &[Event],
        key_expires_at: Millis,
    ) -> Insert {
        let idem = run
            .idempotency_key
            .as_ref()
            .map(|k| (run.tenant.clone(), run.task.clone(), k.clone()));
        let fire = (run.tenant.clone(), run.task.clone(), run.scheduled_for);
        if let Some(holder) = self.run(&run.id) {
            return Insert::Existing(Box::new(holder.clone()));
        }
        // A key outlives its run until it expires.
        if let Some(owner) = idem.as_ref().and_then(|k| self.idempotency.get(k)) {
            return match self.run(owner) {
                Some(holder) => Insert::Existing(Box::new(holder.clone())),
                None => Insert::Forgotten(owner.clone()),
            };
        }
        let fire_holder = unique_fire
            .then(|| self.fires.get(&fire))
            .flatten()
            .and_then(|owner| self.run(owner));
        if let Some(holder) = fire_holder {
            return Insert::Existing(Box::new(holder.clone()));
        }
        self.runs.push(run.clone());
        if let Some(idem) = idem {
            self.idempotency.insert(idem.clone(), run.id.clone());
            self.key_expiry
                .insert((key_expires_at, idem), run.id.clone());
        }
        if unique_fire {
            self.fires.insert(fire, run.id.clone());
        }
        if let Some(s) = sched {
            self.schedules
                .insert((s.tenant.clone(), s.task.clone()), s.clone());
        }
        self.events
            .entry(run.id.clone().into())
            .or_default()
            .extend_from_slice(events);
        Insert::Created
    }

    fn update(&mut self, run: &RunRecord, events: &[Event]) -> bool {
        let Some(slot) = self.runs.iter_mut().find(|r| r.id == run.id) else {
            return false;
        };
        *slot = run.clone();
        self.events
            .entry(run.id.clone().into())
            .or_default()
            .extend_from_slice(events);
        true
    }

    fn delete(&mut self, id: &str) -> bool {
        let Some(pos) = self.runs.iter().position(|r| r.id == id) else {
            return false;
        };
        if !self.runs[pos].status.is_terminal() {
            return false;
        }
        self.runs.remove(pos);
        self.fires.retain(|_, owner| owner != id);
        self.events.remove(id);
        self.logs.remove(id);
        self.deleted.push(id.to_owned());
        true
    }

    fn expire_keys(&mut self, now: Millis, limit: usize) -> usize {
        let due: Vec<_> = self
            .key_expiry
            .iter()
            .filter(|((at, _), _)| *at <= now)
            .take(limit)
            .map(|(k, run)| (k.clone(), run.clone()))
            .collect();
        for (entry, run) in &due {
            self.key_expiry.remove(entry);
            if self.idempotency.get(&entry.1) == Some(run) {
                self.idempotency.remove(&entry.1);
            }
        }
        due.len()
    }

    fn list(&self, query: &RunQuery) -> Vec<RunRecord> {
        let mut runs: Vec<RunRecord> = self
            .runs
            .iter()
            .filter(|r| query.tenant.as_ref().is_none_or(|t| *t == r.tenant))
            .filter(|r| query.task.as_ref().is_none_or(|t| *t == r.task))
            .filter(|r| query.status.is_none_or(|s| s == r.status))
            // The instant written in the id: the suite's runs all carry
            // one `created_at`, a real run's is its id's.
            .filter(|r| in_range(query, id_millis(&r.id).unwrap_or(0)))
            .cloned()
            .collect();
        runs.sort_by(|a, b| b.id.cmp(&a.id));
        runs
    }

    fn active(&self) -> Vec<RunRecord> {
        let mut runs: Vec<RunRecord> = self
            .runs
            .iter()
            .filter(|r| !r.status.is_terminal())
            .cloned()
            .collect();
        runs.sort_by(|a, b| a.id.cmp(&b.id));
        runs
    }
}

const TENANTS: [&str; 3] = ["t1", "t2", "t/x"];
const TASKS: [&str; 4] = ["a", "a.b", "b", "a\0"];
const STATUSES: [RunStatus; 5] = [
    RunStatus::Queued,
    RunStatus::Running,
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::Cancelled,
];

/// Whether a run made at `at` is in `query`'s time range.
fn in_range(query: &RunQuery, at: i64) -> bool {
    query.since.is_none_or(|s| at >= s) && query.until.is_none_or(|u| at < u)
}

fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())].clone()
}

/// An existing run id most of the time, a deleted or unknown one sometimes.
fn some_run_id(rng: &mut StdRng, model: &Model) -> String {
    if !model.deleted.is_empty() && rng.random_bool(0.15) {
        return pick(rng, &model.deleted);
    }
    if model.runs.is_empty() || rng.random_bool(0.1) {
        return run_id(rng.random_range(0..1_000), rng.random());
    }
    pick(rng, &model.runs).id.into()
}

fn random_events(rng: &mut StdRng, run_id: &str, clock: i64) -> Vec<Event> {
    let n = rng.random_range(0..3);
    (0..n)
        .map(|i| {
            let mut e = event(run_id, pick(rng, &["queued", "running", "done"]), clock + i);
            e.step = rng.random_bool(0.5).then(|| "s1".to_owned());
            e.attempt = e.step.as_ref().map(|_| rng.random_range(1..4));
            e
        })
        .collect()
}

fn random_query(rng: &mut StdRng) -> RunQuery {
    RunQuery {
        tenant: rng
            .random_bool(0.6)
            .then(|| pick(rng, &TENANTS).to_string()),
        task: rng.random_bool(0.4).then(|| pick(rng, &TASKS).to_string()),
        status: rng.random_bool(0.5).then(|| pick(rng, &STATUSES)),
        limit: rng.random_range(0..6),
        cursor: None,
        // Ids are made at the model's clock, 1000 and on by 0..3 a step.
        since: rng.random_bool(0.3).then(|| rng.random_range(900..1_600)),
        until: rng.random_bool(0.3).then(|| rng.random_range(900..1_600)),
    }
}

pub fn random_operations_match_the_model<S: Store>(make: Make<S>, seeds: u64) {
    for seed in 0..seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let scan_limit = pick(&mut rng, &[1, 2, 3, 7, SCAN]);
        let (store, _dir) = make(scan_limit);
        let mut model = Model::default();
        let mut clock: i64 = 1_000;
        let ops = if seeds > 100 { 250 } else { 150 };
        for step in 0..ops {
            let context = format!("seed {seed}, op {step}");
            clock += rng.random_range(0..3);
            match rng.random_range(0..100) {
                0..30 => {
                    let mut r = if model.runs.is_empty() || rng.random_bool(0.95) {
                        run(
                            &run_id(clock, rng.random()),
                            pick(&mut rng, &TENANTS),
                            pick(&mut rng, &TASKS),
                            pick(
                                &mut rng,
                                &[RunStatus::Queued, RunStatus::Queued, RunStatus::Succeeded],
                            ),
                        )
                    } else {
                        let mut r = pick(&mut rng, &model.runs);
                        r.priority = 1;
                        r
                    };
                    r.idempotency_key = rng
                        .random_bool(0.4)
                        .then(|| pick(&mut rng, &["k1", "k2", "k3"]).to_string());
                    r.scheduled_for = pick(&mut rng, &[1_000, 2_000, 3_000]);
                    let unique_fire = rng.random_bool(0.5);
                    let sched = rng
                        .random_bool(0.3)
                        .then(|| schedule(&r.tenant, &r.task, Some(clock)));
                    let events = random_events(&mut rng, &r.id, clock);
                    let key_expires_at = pick(&mut rng, &[100, 200, Millis::MAX]);
                    let new = NewRun {
                        run: r.clone(),
                        unique_fire,
                        schedule: sched.clone(),
                        events: events.clone(),
                        key_expires_at,
                    };
                    let got = store.insert_runs(&[new]).unwrap().pop().unwrap();
                    let want =
                        model.insert(&r, unique_fire, sched.as_ref(), &events, key_expires_at);
                    assert_eq!(got, want, "{context}: insert_run");
                }
                30..55 => {
                    let id = some_run_id(&mut rng, &model);
                    let mut r = model
                        .run(&id)
                        .cloned()
                        .unwrap_or_else(|| run(&id, "t1", "a", RunStatus::Queued));
                    r.status = pick(&mut rng, &STATUSES);
                    r.reason = Some(format!("op {step}"));
                    r.steps[0].attempts[0].fuel_consumed = rng.random();
                    let events = random_events(&mut rng, &r.id, clock);
                    // Now and then a writer that missed a write: refused.
                    let stale = r.revision > 1 && rng.random_ratio(1, 6);
                    if stale {
                        r.revision -= 1;
                    }
                    let got = store.update_run(&mut r, &events).is_ok();
                    let want = !stale && model.update(&r, &events);
                    assert_eq!(got, want, "{context}: update_run (stale: {stale})");
                }
                55..60 => {
                    let id = some_run_id(&mut rng, &model);
                    let got = store.delete_run(&id).unwrap();
                    assert_eq!(got, model.delete(&id), "{context}: delete_run {id}");
                }
                60..63 => {
                    let (now, limit) = (pick(&mut rng, &[150, 250]), pick(&mut rng, &[1, 10]));
                    let got = store.expire_keys(now, limit).unwrap();
                    let want = model.expire_keys(now, limit);
                    assert_eq!(got, want, "{context}: expire_keys({now}, {limit})");
                }
                63..75 => {
                    let query = random_query(&mut rng);
                    let got = all_pages(&store, &query);
                    assert_eq!(ids(&got), ids(&model.list(&query)), "{context}: {query:?}");
                    assert_eq!(got, model.list(&query), "{context}: {query:?}");
                }
                75..80 => {
                    let id = some_run_id(&mut rng, &model);
                    assert_eq!(
                        store.get_run(&id).unwrap().as_ref(),
                        model.run(&id),
                        "{context}"
                    );
                    let want = model.events.get(&id).cloned().unwrap_or_default();
                    assert_eq!(store.events(&id).unwrap(), want, "{context}: events");
                    assert_eq!(
                        store.active_runs().unwrap(),
                        model.active(),
                        "{context}: active"
                    );
                }
                80..86 => {
                    let (tenant, name) = (pick(&mut rng, &TENANTS), pick(&mut rng, &TASKS));
                    if rng.random_bool(0.7) {
                        let t = task(tenant, name, rng.random_range(1..100));
                        let s = schedule(tenant, name, Some(clock));
                        store.put_task(&t, &s).unwrap();
                        model.tasks.insert((t.tenant.clone(), t.name.clone()), t);
                        model
                            .schedules
                            .insert((s.tenant.clone(), s.task.clone()), s);
                    } else {
                        let key = (tenant.to_string(), name.to_string());
                        model.schedules.remove(&key);
                        let want = model.tasks.remove(&key).is_some();
                        assert_eq!(store.delete_task(tenant, name).unwrap(), want, "{context}");
                    }
                    let tenant = rng.random_bool(0.5).then(|| pick(&mut rng, &TENANTS));
                    let want: Vec<_> = model
                        .tasks
                        .values()
                        .filter(|t| tenant.is_none_or(|tenant| t.tenant == tenant))
                        .cloned()
                        .collect();
                    assert_eq!(store.list_tasks(tenant).unwrap(), want, "{context}: tasks");
                }
                86..91 => {
                    let id = format!("d{:04}", rng.random_range(0..40));
                    let tenant = pick(&mut rng, &TENANTS);
                    let resolution = rng.random_bool(0.3).then_some("resolved");
                    let d = dead(&id, tenant, resolution);
                    store.put_dead_letter(&d).unwrap();
                    model.dead.insert(id, d);
                    let open_only = rng.random_bool(0.5);
                    let tenant = pick(&mut rng, &TENANTS);
                    let want: Vec<_> = model
                        .dead
                        .values()
                        .rev()
                        .filter(|d| d.tenant == *tenant && (!open_only || d.resolution.is_none()))
                        .cloned()
                        .collect();
                    let got = store.list_dead_letters(tenant, open_only).unwrap();
                    assert_eq!(got, want, "{context}: dead letters");
                }
                91..96 => {
                    let id = some_run_id(&mut rng, &model);
                    let step_name = pick(&mut rng, &["s1", "s2", "s1.x"]);
                    let attempt = rng.random_range(1..4);
                    // Large logs repeat one of a few texts, so blobs are shared.
                    let stdout = if rng.random_bool(0.3) {
                        format!("{}", rng.random_range(0..3)).repeat(20_000)
                    } else {
                        format!("out {step}")
                    };
                    let logs = attempt_logs(step_name, attempt, stdout);
                    store.put_logs("t1", &id, &logs).unwrap();
                    let by_attempt = model.logs.entry(id.clone()).or_default();
                    by_attempt.insert((step_name.to_string(), attempt), logs);
                    let want: Vec<_> = by_attempt.values().cloned().collect();
                    assert_eq!(store.logs(&id).unwrap(), want, "{context}: logs");
                }
                _ => {
                    let s = schedule(
                        pick(&mut rng, &TENANTS),
                        pick(&mut rng, &TASKS),
                        Some(clock),
                    );
                    store.put_schedule(&s).unwrap();
                    model
                        .schedules
                        .insert((s.tenant.clone(), s.task.clone()), s);
                    for ((tenant, task), want) in &model.schedules {
                        assert_eq!(
                            store.get_schedule(tenant, task).unwrap().as_ref(),
                            Some(want),
                            "{context}: schedule {tenant}/{task}"
                        );
                    }
                }
            }
        }
        // Everything, at the end.
        let context = format!("seed {seed}, final");
        let everything = RunQuery {
            limit: 7,
            ..RunQuery::default()
        };
        assert_eq!(
            all_pages(&store, &everything),
            model.list(&everything),
            "{context}"
        );
        assert_eq!(store.active_runs().unwrap(), model.active(), "{context}");
        for r in &model.runs {
            assert_eq!(store.get_run(&r.id).unwrap().as_ref(), Some(r), "{context}");
            let want = model.events.get(r.id.as_str()).cloned().unwrap_or_default();
            assert_eq!(store.events(&r.id).unwrap(), want, "{context}: events");
        }
        for (id, by_attempt) in &model.logs {
            let want: Vec<_> = by_attempt.values().cloned().collect();
            assert_eq!(store.logs(id).unwrap(), want, "{context}: logs of {id}");
        }
        assert_eq!(
            store.list_tasks(None).unwrap(),
            model.tasks.values().cloned().collect::<Vec<_>>()
        );
    }
}
