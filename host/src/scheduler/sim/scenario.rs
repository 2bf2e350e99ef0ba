//! One simulated scenario: the world is built from the seed, operations and
//! faults are drawn step by step, and after every step the invariants are
//! checked (`check`). The driver plays the service: it validates what the
//! service validates, writes tenant records, and waits for a sync ticket
//! before it counts a trigger as accepted.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use super::check;
use super::runner::{RunnerLog, SimClock, SimRunner};
use super::store::SimStore;
use super::{Clock, SchedulerConfig};
use crate::model::ids::RunId;
use crate::model::{Millis, PluginRecord, RECORD_FORMAT, RunRecord, RunStatus, TaskRecord};
use crate::schedule::Trigger;
use crate::scheduler::{QueueConfig, Scheduler, TriggerRequest};
use crate::store::prelude::*;
use crate::tenant::{Quota, TenantRecord};

/// What a scenario did.
pub(in crate::scheduler) struct Report {
    /// Hash of the trace.
    pub(in crate::scheduler) hash: u64,
    /// The trace (only when asked for).
    pub(in crate::scheduler) trace: Vec<String>,
    /// Broken invariants, first first.
    pub(in crate::scheduler) violations: Vec<String>,
    /// Steps run (fewer than asked when a violation stopped it).
    pub(in crate::scheduler) steps_run: usize,
}

pub(super) fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap()
}

/// A task the scenario made, as it is now.
#[derive(Clone)]
pub(super) struct SimTask {
    pub(super) tenant: String,
    pub(super) name: String,
    pub(super) exists: bool,
    pub(super) paused: bool,
    pub(super) timed: bool,
}

/// A trigger the service answered `Ok`.
#[derive(Clone, Debug)]
pub(super) struct Accepted {
    pub(super) id: String,
    pub(super) tenant: String,
    pub(super) task: String,
    pub(super) key: Option<String>,
}

/// The driver's own record of the world, for the checks.
pub(super) struct World {
    pub(super) tasks: Vec<SimTask>,
    pub(super) tenants: BTreeMap<String, TenantRecord>,
    pub(super) accepted: Vec<Accepted>,
    /// (tenant, task, key) → the run the key answered with.
    pub(super) keys: BTreeMap<(String, String, String), String>,
    /// (tenant, hour) → the largest fuel budget in force in it (`None`:
    /// unlimited at some point).
    pub(super) budgets: HashMap<(String, Millis), Option<u64>>,
    /// Hours in which a crash or a clock jump happened.
    pub(super) disturbed: std::collections::HashSet<Millis>,
    /// Hours a clock set back across an hour boundary re-entered (see
    /// `check`: the quota forgets a window it left and comes back to).
    pub(super) rewound: std::collections::HashSet<Millis>,
    /// Rounds (1 + retries and requeues) per run id.
    pub(super) rounds: HashMap<String, u32>,
    /// (tenant, upstream, downstream): `downstream` runs `after` each
    /// success of `upstream`. Operations leave `downstream` alone (it is not
    /// in `tasks`), so every stored success of `upstream` must have started
    /// one (invariant 7).
    pub(super) after: Option<(String, String, String)>,
    pub(super) epoch: u64,
}

struct Incarnation {
    scheduler: Scheduler,
    actor: tokio::task::JoinHandle<()>,
    crashed: CancellationToken,
    // Dropped with the incarnation; the actor stops by being aborted.
    _shutdown: CancellationToken,
}

struct Sim {
    seed: u64,
    rng: StdRng,
    clock: Arc<SimClock>,
    store: SimStore,
    log: Arc<Mutex<RunnerLog>>,
    live: Option<Incarnation>,
    world: World,
    hasher: std::hash::DefaultHasher,
    trace: Option<Vec<String>>,
    violations: Vec<String>,
    triggers: u64,
    faults_on: bool,
}

const TENANTS: [&str; 2] = ["a", "b"];
const HOUR: Millis = crate::tenant::HOUR_MS;

/// Runs the scenario of `seed` with `steps` operations (see the module doc).
pub(in crate::scheduler) fn simulate(seed: u64, steps: usize, verbose: bool) -> Report {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(async move {
        let mut sim = Sim::new(seed, verbose).await;
        let mut steps_run = 0;
        for _ in 0..steps {
            sim.step().await;
            steps_run += 1;
            if !sim.violations.is_empty() {
                break;
            }
        }
        if sim.violations.is_empty() {
            sim.finish().await;
        }
        if let Some(live) = sim.live.take() {
            live.crashed.cancel();
            live.actor.abort();
            let _ = live.actor.await;
        }
        Report {
            hash: sim.hasher.finish(),
            trace: sim.trace.take().unwrap_or_default(),
            violations: std::mem::take(&mut sim.violations),
            steps_run,
        }
    })
}

impl Sim {
    async fn new(seed: u64, verbose: bool) -> Self {
        let clock = Arc::new(SimClock::starting_at(t0()));
        let store = SimStore::new(seed);
        let mut sim = Self {
            seed,
            rng: StdRng::seed_from_u64(seed),
            clock,
            store,
            log: Arc::default(),
            live: None,
            world: World {
                tasks: Vec::new(),
                tenants: BTreeMap::new(),
                accepted: Vec::new(),
                keys: BTreeMap::new(),
                budgets: HashMap::new(),
                disturbed: Default::default(),
                rewound: Default::default(),
                rounds: HashMap::new(),
                after: None,
                epoch: 0,
            },
            hasher: std::hash::DefaultHasher::new(),
            trace: verbose.then(Vec::new),
            violations: Vec::new(),
            triggers: 0,
            faults_on: false,
        };
        for tenant in TENANTS {
            sim.store
                .put_plugin(&PluginRecord {
                    tenant: tenant.into(),
                    name: "sim".into(),
                    version: "1.0.0".into(),
                    digest: "sim".into(),
                    size: 1,
                    created_at: 0,
                    status: crate::model::PluginStatus::Ready,
                    error: None,
                })
                .expect("no faults yet");
            let quota = sim.random_quota();
            let record = TenantRecord::new(tenant, quota, sim.clock.now_ms());
            sim.store.put_tenant(&record).expect("no faults yet");
            sim.note_budget(&record);
            sim.world.tenants.insert(tenant.into(), record);
        }
        sim.store.flush_all();
        sim.start().await;
        let n = sim.rng.random_range(2..=5);
        for i in 0..n {
            let tenant = TENANTS[i % 2].to_string();
            let task = SimTask {
                tenant,
                name: format!("t{i}"),
                exists: false,
                paused: false,
                timed: false,
            };
            sim.world.tasks.push(task);
            sim.put_task(i).await;
        }
        sim.put_after_task().await;
        sim
    }

    /// The task started `after` each success of the first task (see
    /// [`World::after`]).
    async fn put_after_task(&mut self) {
        let upstream = self.world.tasks[0].clone();
        let yaml = format!(
            "name: down\ntrigger: {{ after: [{}], on: success }}\nsteps:\n  - name: s0\n    plugin: sim@1.0.0\n    limits: {{ timeout: 5s, fuel: 5000 }}\n    retry: {{ max_attempts: 2, backoff: [100ms] }}\n",
            upstream.name
        );
        let spec = crate::task::parse(&yaml).expect("the after task parses");
        let now = self.clock.now().timestamp_millis();
        let record = TaskRecord {
            format: RECORD_FORMAT,
            tenant: upstream.tenant.clone(),
            name: "down".into(),
            spec: serde_json::to_value(&spec)
                .expect("a spec serializes")
                .into(),
            source: yaml,
            created_at: now,
            updated_at: now,
            version: 1,
        };
        let r = self.ask(self.scheduler().put_task(record)).await;
        assert!(
            r.as_ref().is_some_and(Result::is_ok),
            "the after task is stored before any fault"
        );
        self.world.after = Some((upstream.tenant, upstream.name, "down".into()));
    }

    fn note(&mut self, line: String) {
        self.hasher.write(line.as_bytes());
        self.hasher.write_u8(b'\n');
        if let Some(trace) = &mut self.trace {
            trace.push(line);
        }
    }

    fn now_rel(&self) -> Millis {
        self.clock.now_ms() - t0().timestamp_millis()
    }

    fn config(&self) -> SchedulerConfig {
        SchedulerConfig {
            queue: QueueConfig::for_cores(2),
            cond_workers: 1,
            rng_seed: Some(super::mix(self.seed, self.world.epoch)),
            inline_store: true,
            ..SchedulerConfig::default()
        }
    }

    /// Starts an incarnation on the store; a start whose recovery cannot
    /// write (faults) is a crash again, retried a second later, as a
    /// supervisor would.
    async fn start(&mut self) {
        for _ in 0..1000 {
            let crashed = CancellationToken::new();
            let runner = Arc::new(SimRunner {
                seed: self.seed,
                epoch: self.world.epoch,
                crashed: crashed.clone(),
                store: self.store.clone(),
                clock: self.clock.clone(),
                log: self.log.clone(),
            });
            let shutdown = CancellationToken::new();
            let started = Scheduler::start(
                Arc::new(self.store.clone()),
                runner,
                self.clock.clone(),
                self.config(),
                shutdown.clone(),
            )
            .await;
            match started {
                Ok((scheduler, actor)) => {
                    self.live = Some(Incarnation {
                        scheduler,
                        actor,
                        crashed,
                        _shutdown: shutdown,
                    });
                    return;
                }
                Err(e) => {
                    self.note(format!("{} start failed: {e}", self.now_rel()));
                    let (next, _) = self.store.crash(None);
                    self.store = next;
                    self.world.epoch += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if self.rng.random_bool(0.3) {
                        self.store.set_faults(0);
                        self.faults_on = false;
                    }
                }
            }
        }
        panic!("the scheduler never started");
    }

    fn scheduler(&self) -> Scheduler {
        self.live
            .as_ref()
            .expect("a live incarnation")
            .scheduler
            .clone()
    }

    fn random_quota(&mut self) -> Quota {
        Quota {
            fuel_per_window: [None, Some(3_000), Some(10_000), Some(40_000)]
                [self.rng.random_range(0..4)],
            window: Duration::from_secs(3600),
            weight: self.rng.random_range(1..=4),
            max_concurrent_attempts: [None, Some(1), Some(2)][self.rng.random_range(0..3)],
            ..Quota::default()
        }
    }

    /// Records the budget `record` puts in force from now in this hour.
    fn note_budget(&mut self, record: &TenantRecord) {
        let hour = self.clock.now_ms().div_euclid(HOUR) * HOUR;
        let budget = record.quota.fuel_per_window;
        let key = (record.name.clone(), hour);
        let entry = self.world.budgets.entry(key).or_insert(budget);
        *entry = match (*entry, budget) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }

    fn task_yaml(&mut self, name: &str) -> (String, bool) {
        let mut y = format!("name: {name}\n");
        let timed = self.rng.random_bool(0.5);
        if timed {
            match self.rng.random_range(0..3) {
                0 => y += &format!("trigger: {{ every: {}s }}\n", self.rng.random_range(5..=30)),
                1 => y += "trigger: { cron: \"*/5 * * * * ?\" }\n",
                _ => y += "trigger: { cron: \"0 * * * * ?\" }\n",
            }
            y += &format!(
                "catch_up: {}\n",
                ["latest", "none", "all"][self.rng.random_range(0..3)]
            );
            y += &format!(
                "overlap: {}\n",
                ["skip", "queue_one", "allow"][self.rng.random_range(0..3)]
            );
        }
        y += &format!("priority: {}\n", self.rng.random_range(0..=5));
        y += "steps:\n";
        let steps = self.rng.random_range(1..=3);
        for s in 0..steps {
            y += &format!("  - name: s{s}\n    plugin: sim@1.0.0\n");
            if s > 0 {
                y += &format!("    needs: [s{}]\n", s - 1);
                if self.rng.random_bool(0.2) {
                    y += "    trigger_rule: all_done\n";
                }
            }
            y += &format!(
                "    limits: {{ timeout: {}s, fuel: {} }}\n",
                self.rng.random_range(1..=15),
                [1_000, 5_000, 20_000][self.rng.random_range(0..3)]
            );
            let attempts = self.rng.random_range(1..=4);
            if self.rng.random_bool(0.5) {
                y += &format!(
                    "    retry: {{ max_attempts: {attempts}, backoff: [{}ms, {}s] }}\n",
                    self.rng.random_range(1..2000),
                    self.rng.random_range(1..10)
                );
            } else {
                y += &format!(
                    "    retry: {{ max_attempts: {attempts}, backoff: {{ exponential: {{ initial: 500ms, max: 20s, factor: 2, jitter: true }} }} }}\n"
                );
            }
        }
        (y, timed)
    }

    /// Creates or replaces task `i` with a fresh random definition.
    async fn put_task(&mut self, i: usize) {
        let (tenant, name) = (
            self.world.tasks[i].tenant.clone(),
            self.world.tasks[i].name.clone(),
        );
        let (yaml, timed) = self.task_yaml(&name);
        let spec = match crate::task::parse(&yaml) {
            Ok(spec) => spec,
            Err(e) => panic!("the simulator wrote a bad task: {e}\n{yaml}"),
        };
        let now = self.clock.now();
        Trigger::compile(spec.trigger.as_ref(), now).expect("a valid trigger");
        let record = TaskRecord {
            format: RECORD_FORMAT,
            tenant: tenant.clone(),
            name: name.clone(),
            spec: serde_json::to_value(&spec)
                .expect("a spec serializes")
                .into(),
            source: yaml,
            created_at: now.timestamp_millis(),
            updated_at: now.timestamp_millis(),
            version: 1,
        };
        let r = self.ask(self.scheduler().put_task(record)).await;
        let ok = r.as_ref().is_some_and(Result::is_ok);
        if ok {
            let t = &mut self.world.tasks[i];
            t.exists = true;
            t.paused = false;
            t.timed = timed;
        }
        let at = self.now_rel();
        let line = format!("{at} put {tenant}/{name} timed={timed}: {}", short(&r));
        self.note(line);
    }

    /// Waits for a reply, at most a minute of virtual time.
    async fn ask<T>(
        &mut self,
        fut: impl std::future::Future<Output = crate::scheduler::Result<T>>,
    ) -> Option<crate::scheduler::Result<T>> {
        match tokio::time::timeout(Duration::from_secs(60), fut).await {
            // The service waits for the store's sync ticket before it
            // answers a change (a task saved or deleted, a run cancelled).
            Ok(Ok(r)) => {
                let _ = self.store.sync_ticket().wait().await;
                Some(Ok(r))
            }
            Ok(Err(e)) => Some(Err(e)),
            // While the store refuses writes a command that must store its
            // change waits for it (the writer retries); past the faults, an
            // unanswered command is a violation.
            Err(_) if self.faults_on => None,
            Err(_) => {
                self.violations
                    .push("a command got no answer within a minute".to_string());
                None
            }
        }
    }

    /// One random operation or fault, time passing, the checks.
    async fn step(&mut self) {
        let roll = self.rng.random_range(0..100);
        let at = self.now_rel();
        match roll {
            0..20 => self.trigger(None).await,
            20..30 => {
                let key = format!("k{}", self.rng.random_range(0..1_000_000));
                self.trigger(Some(key)).await;
            }
            30..38 => self.replay().await,
            38..43 => {
                let i = self.rng.random_range(0..self.world.tasks.len());
                self.put_task(i).await;
            }
            43..47 => self.pause().await,
            47..49 => self.delete().await,
            49..55 => self.cancel().await,
            55..60 => self.retry().await,
            60..63 => self.requeue().await,
            63..67 => self.quota().await,
            67..70 => self.disable().await,
            70..74 => {
                self.faults_on = !self.faults_on;
                let rate = if self.faults_on {
                    self.rng.random_range(100..=1000)
                } else {
                    0
                };
                self.store.set_faults(rate);
                self.note(format!("{at} store faults {rate}/1000"));
            }
            74..80 => {
                let lost = self.rng.random_bool(0.5).then(|| self.rng.random::<f64>());
                self.crash(lost).await;
            }
            80..83 => self.crash_mid_trigger().await,
            83..86 => {
                let ms = self.rng.random_range(1..120_000);
                self.jump(ms);
            }
            86..88 => {
                let ms = self.rng.random_range(1..60_000);
                self.jump(-ms);
            }
            88..92 => {
                self.store.flush_all();
                self.note(format!("{at} flushed"));
            }
            _ => {}
        }
        let wait = match self.rng.random_range(0..10) {
            0..6 => self.rng.random_range(0..300),
            6..9 => self.rng.random_range(300..5_000),
            _ => self.rng.random_range(5_000..60_000),
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if self.rng.random_bool(0.3) {
            self.store.flush_all();
        }
        self.check().await;
    }

    fn jump(&mut self, ms: i64) {
        let before = self.clock.now_ms();
        self.clock.jump(ms);
        let after = self.clock.now_ms();
        for t in [before, after] {
            self.world.disturbed.insert(t.div_euclid(HOUR) * HOUR);
        }
        let (from, to) = (
            after.div_euclid(HOUR) * HOUR,
            before.div_euclid(HOUR) * HOUR,
        );
        let mut hour = from;
        while hour <= to && from < to {
            self.world.rewound.insert(hour);
            hour += HOUR;
        }
        let at = self.now_rel();
        self.note(format!("{at} clock jumps {ms} ms"));
    }

    fn pick_task(&mut self) -> usize {
        self.rng.random_range(0..self.world.tasks.len())
    }

    fn request(&mut self, i: usize, key: Option<String>) -> TriggerRequest {
        self.triggers += 1;
        let t = &self.world.tasks[i];
        TriggerRequest {
            tenant: t.tenant.as_str().into(),
            task: t.name.as_str().into(),
            input: Some(serde_json::json!({ "n": self.triggers })),
            params: None,
            idempotency_key: key,
            priority: None,
            actor: "sim".into(),
        }
    }

    /// A manual trigger, as `POST /v1/tasks/{name}/runs` makes it.
    async fn trigger(&mut self, key: Option<String>) {
        let i = self.pick_task();
        self.trigger_task(i, key).await;
    }

    async fn trigger_task(&mut self, i: usize, key: Option<String>) {
        let t = self.world.tasks[i].clone();
        let at = self.now_rel();
        if self.world.tenants[&t.tenant].disabled {
            // The service refuses it (403) before the scheduler sees it.
            self.note(format!(
                "{at} trigger {}/{}: tenant disabled",
                t.tenant, t.name
            ));
            return;
        }
        let req = self.request(i, key.clone());
        let n = self.triggers;
        let r = self.ask(self.scheduler().trigger(req)).await;
        self.accept(&t, key, n, r).await;
    }

    /// Counts an `Ok` answer as accepted once its sync ticket is waited on
    /// (what the API does before it answers `201`/`200`).
    async fn accept(
        &mut self,
        t: &SimTask,
        key: Option<String>,
        n: u64,
        r: Option<crate::scheduler::Result<(RunRecord, bool)>>,
    ) {
        let at = self.now_rel();
        let Some(r) = r else { return };
        match r {
            Ok((run, created)) => {
                if self.store.sync_ticket().wait().await.is_err() {
                    return;
                }
                if let Some(key) = &key {
                    let k = (t.tenant.clone(), t.name.clone(), key.clone());
                    if let Some(first) = self.world.keys.get(&k)
                        && *first != run.id
                    {
                        self.violations.push(format!(
                            "idempotency key {key} of {}/{} answered a second run (first {first}, now {})",
                            t.tenant, t.name, run.id
                        ));
                    }
                    self.world.keys.entry(k).or_insert(run.id.clone().into());
                }
                self.world.rounds.entry(run.id.clone().into()).or_insert(1);
                self.world.accepted.push(Accepted {
                    id: run.id.clone().into(),
                    tenant: t.tenant.clone(),
                    task: t.name.clone(),
                    key: key.clone(),
                });
                self.note(format!(
                    "{at} trigger #{n} {}/{} key={key:?}: {} {}",
                    t.tenant,
                    t.name,
                    if created { "created" } else { "existing" },
                    check::name(&run)
                ));
            }
            Err(e) => self.note(format!(
                "{at} trigger #{n} {}/{} key={key:?}: {}",
                t.tenant,
                t.name,
                kind(&e)
            )),
        }
    }

    /// A client retries a trigger with a key it used before.
    async fn replay(&mut self) {
        let keys: Vec<_> = self.world.keys.keys().cloned().collect();
        if keys.is_empty() {
            return self.trigger(Some("k-first".into())).await;
        }
        let (tenant, task, key) = keys[self.rng.random_range(0..keys.len())].clone();
        let Some(i) = self
            .world
            .tasks
            .iter()
            .position(|t| t.tenant == tenant && t.name == task)
        else {
            return;
        };
        self.trigger_task(i, Some(key)).await;
    }

    /// A trigger in flight when the process dies: its answer counts only
    /// if it came before the crash.
    async fn crash_mid_trigger(&mut self) {
        let i = self.pick_task();
        let t = self.world.tasks[i].clone();
        if self.world.tenants[&t.tenant].disabled {
            return;
        }
        let key = self
            .rng
            .random_bool(0.5)
            .then(|| format!("k{}", self.rng.random_range(0..1_000_000)));
        let req = self.request(i, key.clone());
        let n = self.triggers;
        let scheduler = self.scheduler();
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let store = self.store.clone();
        tokio::spawn(async move {
            let r = scheduler.trigger(req).await;
            // The ticket is taken and waited on in the same poll as the answer.
            if r.is_ok() {
                let _ = store.sync_ticket().wait().await;
            }
            let _ = tx.send(r);
        });
        let after = self.rng.random_range(0..4);
        tokio::time::sleep(Duration::from_millis(after)).await;
        let answered = rx.try_recv().ok();
        let lost = self.rng.random_bool(0.5).then(|| self.rng.random::<f64>());
        self.crash(lost).await;
        match answered {
            Some(r) => self.accept(&t, key, n, Some(r)).await,
            None => {
                let at = self.now_rel();
                self.note(format!("{at} trigger #{n}: no answer before the crash"));
            }
        }
    }

    async fn pause(&mut self) {
        let i = self.pick_task();
        let t = self.world.tasks[i].clone();
        let paused = !t.paused;
        let r = self
            .ask(self.scheduler().set_paused(&t.tenant, &t.name, paused))
            .await;
        if r.as_ref().is_some_and(Result::is_ok) {
            self.world.tasks[i].paused = paused;
        }
        let at = self.now_rel();
        self.note(format!(
            "{at} pause {}/{} {paused}: {}",
            t.tenant,
            t.name,
            short(&r)
        ));
    }

    async fn delete(&mut self) {
        let i = self.pick_task();
        let t = self.world.tasks[i].clone();
        if !t.exists {
            return self.put_task(i).await;
        }
        let r = self
            .ask(self.scheduler().delete_task(&t.tenant, &t.name))
            .await;
        if r.as_ref().is_some_and(Result::is_ok) {
            self.world.tasks[i].exists = false;
        }
        let at = self.now_rel();
        self.note(format!(
            "{at} delete {}/{}: {}",
            t.tenant,
            t.name,
            short(&r)
        ));
    }

    /// A run the store holds, picked at random (creation order).
    fn pick_run(&mut self, want: impl Fn(&RunRecord) -> bool) -> Option<RunRecord> {
        let mut runs: Vec<RunRecord> = self
            .store
            .list_runs(&crate::store::RunQuery {
                limit: 10_000,
                ..Default::default()
            })
            .ok()?
            .runs
            .into_iter()
            .filter(|r| want(r))
            .collect();
        runs.sort_by_key(check::name);
        (!runs.is_empty()).then(|| runs.swap_remove(self.rng.random_range(0..runs.len())))
    }

    async fn cancel(&mut self) {
        let Some(run) = self.pick_run(|r| !r.status.is_terminal()) else {
            return;
        };
        let epoch = self.world.epoch;
        self.log
            .lock()
            .expect("runner log")
            .cancelled
            .insert(run.id.clone().into(), epoch);
        let r = self
            .ask(self.scheduler().cancel(&RunId::new(run.id.as_str()), "sim"))
            .await;
        let at = self.now_rel();
        self.note(format!("{at} cancel {}: {}", check::name(&run), short(&r)));
    }

    async fn retry(&mut self) {
        let Some(run) =
            self.pick_run(|r| matches!(r.status, RunStatus::Failed | RunStatus::Cancelled))
        else {
            return;
        };
        let r = self
            .ask(self.scheduler().retry(&RunId::new(run.id.as_str()), "sim"))
            .await;
        if r.as_ref().is_some_and(Result::is_ok) {
            *self.world.rounds.entry(run.id.clone().into()).or_insert(1) += 1;
        }
        let at = self.now_rel();
        self.note(format!("{at} retry {}: {}", check::name(&run), short(&r)));
    }

    async fn requeue(&mut self) {
        let tenant = TENANTS[self.rng.random_range(0..2)];
        let Ok(dead) = self.store.list_dead_letters(tenant, true) else {
            return;
        };
        if dead.is_empty() {
            return;
        }
        let d = dead[self.rng.random_range(0..dead.len())].clone();
        let r = self.ask(self.scheduler().requeue(&d.id, "sim")).await;
        if r.as_ref().is_some_and(Result::is_ok) {
            *self.world.rounds.entry(d.run_id.clone()).or_insert(1) += 1;
        }
        let at = self.now_rel();
        self.note(format!("{at} requeue {tenant}/{}: {}", d.task, short(&r)));
    }

    /// Changes a tenant's quota the way `PUT /v1/tenants/{name}` does:
    /// the record is stored, then the scheduler is told.
    async fn quota(&mut self) {
        let tenant = TENANTS[self.rng.random_range(0..2)];
        let mut record = self.world.tenants[tenant].clone();
        record.quota = self.random_quota();
        self.put_tenant(record).await;
    }

    async fn disable(&mut self) {
        let tenant = TENANTS[self.rng.random_range(0..2)];
        let mut record = self.world.tenants[tenant].clone();
        record.disabled = !record.disabled;
        self.put_tenant(record).await;
    }

    async fn put_tenant(&mut self, record: TenantRecord) {
        let at = self.now_rel();
        if let Err(e) = self.store.put_tenant(&record) {
            self.note(format!("{at} tenant {}: {e}", record.name));
            return;
        }
        // In force from now; the hour's budget is the larger of the two.
        self.note_budget(&record);
        let r = self
            .ask(self.scheduler().tenant_changed(record.clone()))
            .await;
        self.note(format!(
            "{at} tenant {} fuel={:?} weight={} running={:?} disabled={}: {}",
            record.name,
            record.quota.fuel_per_window,
            record.quota.weight,
            record.quota.max_concurrent_attempts,
            record.disabled,
            short(&r)
        ));
        self.world.tenants.insert(record.name.clone(), record);
    }

    /// The process dies: the actor's task is dropped with all it held, the
    /// runner's attempts stop, the store keeps what was durable (and, with
    /// `lost`, only that share of the rest); a new incarnation recovers.
    async fn crash(&mut self, lost: Option<f64>) {
        self.settle().await;
        let Some(live) = self.live.take() else {
            return;
        };
        let before = self.clock.now_ms();
        self.world.disturbed.insert(before.div_euclid(HOUR) * HOUR);
        // The store first: nothing the dying actor does after this lands.
        let (next, dropped) = self.store.crash(lost);
        live.crashed.cancel();
        live.actor.abort();
        let _ = live.actor.await;
        drop(live.scheduler);
        self.store = next;
        self.world.epoch += 1;
        let at = self.now_rel();
        self.note(format!(
            "{at} crash, lost flush {lost:?}: {dropped} writes lost"
        ));
        let down = self.rng.random_range(0..3_000);
        tokio::time::sleep(Duration::from_millis(down)).await;
        self.start().await;
    }

    /// Lets the actor, its writer and the runner work through what is ready
    /// at this instant before the store is read: the store calls run inline
    /// ([`SchedulerConfig::inline_store`]), so yielding until the store has
    /// seen no write for a few rounds is enough, and takes the same number of
    /// rounds in every run of a seed. Paused time does not advance meanwhile.
    async fn settle(&self) {
        let mut last = None;
        let mut quiet = 0;
        for _ in 0..10_000 {
            tokio::task::yield_now().await;
            let now = self.store.progress();
            if Some(now) == last {
                quiet += 1;
                if quiet == 4 {
                    return;
                }
            } else {
                quiet = 0;
                last = Some(now);
            }
        }
    }

    /// The stored runs in one line, and the invariants they break (`last`:
    /// at the end), from one reading of the store.
    fn look(&self, last: bool) -> (String, Vec<String>) {
        let usage = check::usage(&self.store, &self.world);
        let log = self.log.lock().expect("runner log");
        self.store.with_runs(|runs| {
            (
                check::summary(runs),
                check::all(runs, &usage, &self.world, &log, last),
            )
        })
    }

    async fn check(&mut self) {
        self.settle().await;
        let at = self.now_rel();
        let (summary, found) = self.look(false);
        self.note(format!("{at} state {summary}"));
        self.violations.extend(found);
    }

    /// Faults stop: tenants enabled with no fuel budget (a tight budget
    /// may hold a backlog for many hours, by design), timed tasks paused,
    /// two hours pass; then every run must be terminal.
    async fn finish(&mut self) {
        self.store.set_faults(0);
        self.faults_on = false;
        self.note("faults stop".into());
        let tenants: Vec<TenantRecord> = self.world.tenants.values().cloned().collect();
        for mut record in tenants {
            if record.disabled || record.quota.fuel_per_window.is_some() {
                record.disabled = false;
                record.quota.fuel_per_window = None;
                self.put_tenant(record).await;
            }
        }
        for i in 0..self.world.tasks.len() {
            let t = self.world.tasks[i].clone();
            if t.exists && t.timed && !t.paused {
                let r = self
                    .ask(self.scheduler().set_paused(&t.tenant, &t.name, true))
                    .await;
                if r.as_ref().is_some_and(Result::is_ok) {
                    self.world.tasks[i].paused = true;
                }
            }
        }
        for _ in 0..240 {
            tokio::time::sleep(Duration::from_secs(30)).await;
            if self.store.active_runs().is_ok_and(|a| a.is_empty()) {
                break;
            }
        }
        self.settle().await;
        let (summary, found) = self.look(true);
        let at = self.now_rel();
        let refused = self.store.refused();
        self.note(format!("{at} final ({refused} writes refused) {summary}"));
        self.violations.extend(found);
    }
}

/// `ok` or the error's kind, for the trace.
fn short<T>(r: &Option<crate::scheduler::Result<T>>) -> String {
    match r {
        None => "no answer".into(),
        Some(Ok(_)) => "ok".into(),
        Some(Err(e)) => kind(e),
    }
}

fn kind(e: &crate::scheduler::Error) -> String {
    use crate::scheduler::Error as E;
    match e {
        E::NotFound(_) => "not found",
        E::QueueFull { .. } => "queue full",
        E::Quota { .. } => "quota",
        E::RunBytesQuota(_) => "run bytes quota",
        E::Conflict(_) => "conflict",
        E::RunDeleted { .. } => "run deleted",
        E::Params(_) => "bad params",
        E::Store(_) => "store error",
        E::Stopped => "stopped",
    }
    .into()
}
