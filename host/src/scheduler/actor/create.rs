//! Creating runs: manual triggers and their limits (queue bounds, quotas,
//! shedding), `after` triggers, and storing the runs of one loop turn together.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::active::ActiveRun;
use super::{Actor, Origin, TriggerReply};
use crate::model::ids::{RunId, TaskKey};
use crate::model::{
    Millis, RECORD_FORMAT, RunRecord, RunStatus, StepRunRecord, StepStatus, TriggerKind,
};
use crate::scheduler::core::run::{event, set_run, set_step};
use crate::scheduler::{Error, Result, TriggerRequest, admission, core as decide};
use crate::store::rules::FIRST_REVISION;
use crate::store::{Insert, NewRun, new_id};
use crate::task::TaskSpec;

/// A run created but not yet stored. The runs created in one turn of the
/// loop (triggers drained together, fires due together) are inserted in one
/// store write: each write costs sled two log-buffer writes, which made a
/// write per run the largest cost of a manual trigger.
pub(super) struct PendingRun {
    pub(super) new: NewRun,
    pub(super) spec: Arc<TaskSpec>,
    pub(super) actor: String,
    /// Why the run is recorded as cancelled instead of queued (shed).
    pub(super) shed: Option<String>,
    pub(super) reply: Option<TriggerReply>,
}

/// What a pending run needs once stored, besides its record.
pub(super) type PendingRest = (Arc<TaskSpec>, String, Option<String>, Option<TriggerReply>);

/// A store write of new runs under way on a blocking thread, so the actor
/// keeps firing, releasing and taking up finished attempts meanwhile
/// (`begin_insert`). Each write took 0.3 ms in the median and 2 ms at p99
/// under the fire benchmark, during which nothing else moved.
pub(super) struct Inserting {
    pub(super) rest: Vec<PendingRest>,
    pub(super) done: std::sync::mpsc::Receiver<(Vec<NewRun>, crate::store::Result<Vec<Insert>>)>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

pub(super) fn split_pending(pending: Vec<PendingRun>) -> (Vec<NewRun>, Vec<PendingRest>) {
    pending
        .into_iter()
        .map(|p| (p.new, (p.spec, p.actor, p.shed, p.reply)))
        .unzip()
}

impl Actor {
    pub(super) fn new_run(
        &self,
        task: &crate::model::TaskRecord,
        spec: &TaskSpec,
        origin: Origin,
        now: Millis,
    ) -> RunRecord {
        let Origin {
            trigger,
            scheduled_for,
            input,
            idempotency_key: key,
            upstream_run,
            priority,
        } = origin;
        // A task saved before its tenant's ceiling was lowered runs at the
        // ceiling, and its record says so (shedding reads it too).
        let priority = self
            .quotas
            .get(&task.tenant)
            .map_or(priority, |q| priority.min(q.max_priority));
        RunRecord {
            format: RECORD_FORMAT,
            revision: FIRST_REVISION,
            id: new_id("r", now).into(),
            tenant: task.tenant.clone().into(),
            task: task.name.clone().into(),
            spec: task.spec.clone(),
            status: RunStatus::Queued,
            reason: None,
            priority,
            trigger,
            scheduled_for,
            created_at: now,
            started_at: None,
            finished_at: None,
            input,
            idempotency_key: key,
            upstream_run: upstream_run.map(RunId::from),
            steps: spec
                .steps
                .iter()
                .map(|s| StepRunRecord::pending(&s.name))
                .collect(),
        }
    }

    pub(super) fn total_queued_runs(&self) -> usize {
        self.queued_runs.values().sum()
    }

    /// Whether a new run of `priority` must be shed (recorded, not run):
    /// [`admission::shed`] against the runs waiting now.
    pub(super) fn shed_reason(&self, priority: u8) -> Option<String> {
        admission::shed(
            self.total_queued_runs(),
            self.config.high_water,
            self.config.shed_below_priority,
            priority,
        )
    }

    /// Why a new run of `tenant` is recorded as cancelled instead of queued
    /// ([`admission::recorded_refusal`]): the tenant is disabled, or out of
    /// fuel and set to refuse.
    pub(super) fn tenant_refusal(&mut self, tenant: &str, now: Millis) -> Option<String> {
        let q = self.quotas.get_mut(tenant)?;
        admission::recorded_refusal(tenant, q.disabled, || q.refusing(now))
    }

    /// Checks a trigger and creates its run (answered once stored), or
    /// answers the refusal at once.
    pub(super) fn on_trigger(&mut self, req: TriggerRequest, reply: TriggerReply) {
        match self.check_trigger(&req) {
            Ok((rec, spec)) => {
                let now = self.clock.now_ms();
                self.create_run(rec, spec, false, &req.actor, now, Some(reply));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The run a manual trigger creates, unless a limit refuses it.
    pub(super) fn check_trigger(
        &mut self,
        req: &TriggerRequest,
    ) -> Result<(RunRecord, Arc<TaskSpec>)> {
        let now = self.clock.now_ms();
        let loaded = self.load_task(&req.tenant, &req.task)?;
        let (task, spec) = (&*loaded.record, Arc::clone(&loaded.spec));
        // Before the limits, so a refused input takes no trigger token.
        let input = spec.manual_input(req.input.as_ref(), req.params.as_ref())?;
        let queued = self
            .queued_runs
            .get(req.tenant.as_str())
            .copied()
            .unwrap_or(0);
        let quota = self.quotas.get(req.tenant.as_str());
        admission::check_queue(
            &req.tenant,
            queued,
            self.config.max_queued_per_tenant,
            quota.and_then(|q| q.quota.max_queued_runs),
        )?;
        self.check_run_bytes(&req.tenant, &input)?;
        if let Some(q) = self.quotas.get_mut(req.tenant.as_str()) {
            admission::check_budget(&req.tenant, q.refusing(now), now)?;
            if let Err(retry_after) = q.take_trigger(now) {
                return Err(admission::LimitRefusal::TriggerRate {
                    tenant: req.tenant.to_string(),
                    rate: q.quota.trigger_rate_per_sec.unwrap_or_default(),
                    retry_after,
                }
                .into());
            }
        }
        let priority = req
            .priority
            .unwrap_or(spec.priority)
            .min(crate::model::priority::MAX_PRIORITY);
        let origin = Origin {
            trigger: TriggerKind::Manual,
            scheduled_for: now,
            input,
            idempotency_key: req.idempotency_key.clone(),
            upstream_run: None,
            priority,
        };
        let rec = self.new_run(task, &spec, origin, now);
        Ok((rec, spec))
    }

    /// Refuses a manual run whose input would take its tenant's run data
    /// over `run_bytes`: what the store counts, plus the runs created but
    /// not yet stored, plus this one. Only manual triggers are refused: they
    /// are the runs a client can make without bound (fires and `after` runs
    /// follow the task definitions, which have their own bounds), and only
    /// they have a caller to answer.
    ///
    /// Far from the limit, a recent reading of the store's count (taken off
    /// this task) admits the run without a store read; near it, and for
    /// every refusal, the store is read here, exactly as before
    /// (`run_bytes.rs` says why and how far the estimate can be off).
    fn check_run_bytes(&mut self, tenant: &str, input: &serde_json::Value) -> Result<()> {
        let limit = self
            .quotas
            .get(tenant)
            .map_or(crate::tenant::DEFAULT_RUN_BYTES, |q| {
                q.quota.run_bytes_limit()
            });
        let new = run_weight(input);
        let now = self.clock.now_ms();
        if let Some(estimate) = self.run_bytes.estimate(tenant, now)
            && admission::run_bytes_clear(estimate, new, limit)
        {
            self.refresh_run_bytes(tenant, now);
            return Ok(());
        }
        let stored = self.store.run_bytes(tenant)?;
        self.run_bytes.settle(tenant, stored, now);
        let unstored = self.run_bytes.unstored(tenant);
        admission::check_run_bytes(tenant, stored.saturating_add(unstored), new, limit)?;
        Ok(())
    }

    /// Reads `tenant`'s run bytes off this task if its reading is due for a
    /// refresh; the result comes back as an event (`run_bytes`).
    fn refresh_run_bytes(&mut self, tenant: &str, now: Millis) {
        let Some(id) = self.run_bytes.start_reading(tenant, now) else {
            return;
        };
        let (store, tx, tenant) = (
            self.store.clone(),
            self.reads_tx.clone(),
            tenant.to_string(),
        );
        // Detached: a reading nobody takes up any more is dropped.
        drop(super::off_actor(self.config.inline_store, move || {
            let bytes = store.run_bytes(&tenant);
            let _ = tx.send(super::run_bytes::ReadDone {
                tenant,
                id,
                started_at: now,
                bytes,
            });
        }));
    }

    /// Creates a run, to be stored with the others of this turn of the loop
    /// (unless its key or fire exists); returns its place in `pending`.
    /// `reply` is answered once it is stored.
    pub(super) fn create_run(
        &mut self,
        mut rec: RunRecord,
        spec: Arc<TaskSpec>,
        unique_fire: bool,
        actor: &str,
        now: Millis,
        reply: Option<TriggerReply>,
    ) -> usize {
        let shed = self
            .tenant_refusal(&rec.tenant, now)
            .or_else(|| self.shed_reason(rec.priority));
        let mut events = vec![event(
            &rec,
            None,
            None,
            "queued",
            now,
            format!("triggered ({:?})", rec.trigger).to_lowercase(),
            actor,
        )];
        match &shed {
            Some(reason) => {
                set_run(
                    &mut rec,
                    RunStatus::Cancelled,
                    now,
                    reason.clone(),
                    "scheduler",
                    &mut events,
                );
                for i in 0..rec.steps.len() {
                    set_step(
                        &mut rec,
                        i,
                        StepStatus::Cancelled,
                        now,
                        reason.clone(),
                        "scheduler",
                        &mut events,
                    );
                }
            }
            // Counted at once, so the triggers of one turn see each other
            // against the queue bounds; undone if the run is not created.
            None => {
                *self
                    .queued_runs
                    .entry(rec.tenant.clone().into())
                    .or_default() += 1
            }
        }
        self.run_bytes.created(&rec.tenant, run_weight(&rec.input));
        // The key is remembered from the run's creation for the task's
        // `idempotency_ttl`, or the server's.
        let ttl = spec
            .retention
            .as_ref()
            .and_then(|r| r.idempotency_ttl)
            .unwrap_or(self.config.idempotency_ttl);
        let key_expires_at = rec
            .created_at
            .saturating_add(Millis::try_from(ttl.as_millis()).unwrap_or(Millis::MAX));
        self.pending.push(PendingRun {
            new: NewRun {
                run: rec,
                unique_fire,
                schedule: None,
                events,
                key_expires_at,
            },
            spec,
            actor: actor.to_string(),
            shed,
            reply,
        });
        self.pending.len() - 1
    }

    /// Stores the runs created so far, waiting for a write under way first:
    /// what follows sees them stored. Runs created meanwhile (an `after` task
    /// of a run that ended at once) follow in another write.
    pub(super) fn insert_pending(&mut self) {
        self.complete_insert();
        while !self.pending.is_empty() {
            let (news, rest) = split_pending(std::mem::take(&mut self.pending));
            let outcomes = self.store.insert_runs(&news);
            self.take_up(news, rest, outcomes);
        }
    }

    /// Starts storing the pending runs in one write on a blocking thread
    /// (inline under the simulator), unless a write is under way (they go in
    /// the next).
    pub(super) fn begin_insert(&mut self) {
        if self.inserting.is_some() || self.pending.is_empty() {
            return;
        }
        let (news, rest) = split_pending(std::mem::take(&mut self.pending));
        let store = self.store.clone();
        let (tx, done) = std::sync::mpsc::channel();
        let task = super::off_actor(self.config.inline_store, move || {
            let outcomes =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.insert_runs(&news)))
                    .unwrap_or_else(|_| {
                        Err(crate::store::Error::Backend(
                            "storing new runs panicked".into(),
                        ))
                    });
            let _ = tx.send((news, outcomes));
        });
        self.inserting = Some(Inserting { rest, done, task });
    }

    /// Takes up the runs of the write under way, waiting for it if needed.
    pub(super) fn complete_insert(&mut self) {
        let Some(inserting) = self.inserting.take() else {
            return;
        };
        match inserting.done.recv() {
            Ok((news, outcomes)) => self.take_up(news, inserting.rest, outcomes),
            // The blocking pool shut down under the write: nothing was stored.
            Err(_) => {
                for (_, _, _, reply) in inserting.rest {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(Error::Stopped));
                    }
                }
            }
        }
    }

    /// Takes up a write's runs: makes the stored ones' first steps ready and
    /// answers their triggers (with the existing run for a known key).
    pub(super) fn take_up(
        &mut self,
        news: Vec<NewRun>,
        rest: Vec<PendingRest>,
        outcomes: crate::store::Result<Vec<Insert>>,
    ) {
        let now = self.clock.now_ms();
        for (i, (new, (spec, actor, shed, reply))) in news.into_iter().zip(rest).enumerate() {
            let rec = new.run;
            let outcome = match &outcomes {
                Ok(outcomes) => Ok(outcomes[i].clone()),
                Err(e) => Err(Error::Store(e.duplicate())),
            };
            // No longer unstored; counted as landed if it was created, or
            // may have been (a failed write: over-counted until the next
            // reading rather than under-counted).
            self.run_bytes.landed(
                &rec.tenant,
                run_weight(&rec.input),
                matches!(outcome, Ok(Insert::Created) | Err(_)),
            );
            // A fire's runs refused for now: its schedule's progress went
            // with them, so the task fires again from its stored schedule
            // once the store writes (missed instants per `catch_up`).
            if let Err(e) = &outcomes
                && e.is_unavailable()
                && new.schedule.is_some()
            {
                self.hold_fire(TaskKey::new(&rec.tenant, &rec.task));
            }
            self.after_stored(&rec, matches!(&outcomes, Err(e) if e.is_unavailable()));
            let created = matches!(outcome, Ok(Insert::Created));
            if !created && shed.is_none() {
                self.queued_runs
                    .entry(rec.tenant.clone().into())
                    .and_modify(|n| *n = n.saturating_sub(1));
            }
            let answer = match outcome {
                Err(e) => {
                    tracing::error!(tenant = %rec.tenant, task = %rec.task, error = %e, "storing a new run failed");
                    Err(e)
                }
                Ok(Insert::Existing(existing)) => Ok((*existing, false)),
                Ok(Insert::Forgotten(run)) => Err(Error::RunDeleted {
                    task: rec.task.clone().into(),
                    key: rec.idempotency_key.clone().unwrap_or_default(),
                    run: run.into(),
                }),
                Ok(Insert::Created) => self.on_created(rec, spec, shed.is_some(), &actor, now),
            };
            if let Some(reply) = reply {
                let _ = reply.send(answer);
            }
        }
    }

    /// Takes up a run just stored: tracks it and makes its first steps ready.
    pub(super) fn on_created(
        &mut self,
        rec: RunRecord,
        spec: Arc<TaskSpec>,
        shed: bool,
        actor: &str,
        now: Millis,
    ) -> Result<(RunRecord, bool)> {
        self.stats.runs_created.fetch_add(1, Ordering::Relaxed);
        if shed {
            self.stats.shed.fetch_add(1, Ordering::Relaxed);
            self.tenant_metrics.of(&rec.tenant).run_finished(rec.status);
            return Ok((rec, true));
        }
        if self.parks(&rec) {
            // Stored and counted; taken up when its tenant's head has room.
            self.park(&rec);
            return Ok((rec, true));
        }
        let key = TaskKey::new(&rec.tenant, &rec.task);
        let active = self.task_active(&key);
        let held = decide::fire::held_on_create(rec.trigger, spec.overlap, active);
        self.track(key, &rec.id, held);
        let id = rec.id.clone();
        self.runs
            .insert(id.clone().into(), ActiveRun::new(rec, spec, held));
        let mut events = Vec::new();
        self.advance_new(&id, now, actor, &mut events)?;
        // Stored whole by the insert, with nothing to write yet: a large
        // input need not stay resident while the run waits (`spill`).
        self.spill(&id);
        let rec = self
            .runs
            .get(id.as_str())
            .map(|r| r.rec.clone())
            .or_else(|| self.finished.get(id.as_str()).cloned());
        rec.map(|rec| (rec, true))
            .ok_or_else(|| Error::NotFound(format!("run `{id}`")))
    }

    /// Records the `after` edges of a task (replacing its old ones).
    /// Starts the tasks that wait for `rec`'s task to finish (`after`), with
    /// the upstream run's outputs as input. The idempotency key
    /// `after:<run id>` makes a repeated finish (after a crash) start nothing twice.
    pub(super) fn fire_after(&mut self, rec: &RunRecord, now: Millis) {
        // The store's `after` index (cached by upstream, `tasks`), not a map
        // of every task in memory.
        let downs = match self.downstream_tasks(&rec.tenant, &rec.task) {
            Ok(downs) => downs,
            Err(e) => {
                tracing::error!(upstream = %rec.task, error = %e, "cannot read the tasks started `after` it");
                return;
            }
        };
        for down in downs.iter() {
            let loaded = match self.load_task(&rec.tenant, down) {
                Ok(loaded) => loaded,
                Err(e) => {
                    tracing::error!(upstream = %rec.task, task = %down, error = %e, "starting an `after` task failed");
                    continue;
                }
            };
            let on = loaded
                .spec
                .trigger
                .as_ref()
                .filter(|t| t.after.iter().any(|a| *a == rec.task))
                .map(|t| t.on.unwrap_or_default());
            if !on.is_some_and(|on| decide::fire::after_fires(on, rec.status)) {
                continue;
            }
            let outputs: serde_json::Map<String, serde_json::Value> = rec
                .steps
                .iter()
                .filter_map(|s| s.output.clone().map(|o| (s.name.clone(), o)))
                .collect();
            let input = loaded.spec.after_input(serde_json::json!({
                "task": rec.task, "run_id": rec.id, "status": rec.status.as_str(), "outputs": outputs,
            }));
            let origin = Origin {
                trigger: TriggerKind::After,
                scheduled_for: now,
                input,
                idempotency_key: Some(format!("after:{}", rec.id)),
                upstream_run: Some(rec.id.clone().into()),
                priority: loaded.spec.priority,
            };
            let new = self.new_run(&loaded.record, &loaded.spec, origin, now);
            self.create_run(new, Arc::clone(&loaded.spec), false, "scheduler", now, None);
            *self.after_holds.entry(rec.id.clone().into()).or_default() += 1;
        }
    }

    /// Whether run `id`'s write waits for the `after` runs it started.
    pub(super) fn after_held(&self, id: &str) -> bool {
        self.after_holds.contains_key(id) || self.after_refire.contains(id)
    }

    /// An `after` run's insert came back: the run that started it is written
    /// once all its `after` runs are stored; one the store refused for now is
    /// started again when it writes.
    fn after_stored(&mut self, rec: &RunRecord, refused: bool) {
        let Some(upstream) = rec.upstream_run.as_deref() else {
            return;
        };
        if let Some(n) = self.after_holds.get_mut(upstream) {
            *n -= 1;
            if *n == 0 {
                self.after_holds.remove(upstream);
            }
        }
        if refused {
            self.hold_after(upstream.to_string());
        }
    }
}

/// What a new run is expected to weigh in the store before it is written:
/// its input and a record's usual overhead (its definition, step states
/// and events: some KiB). The store counts the real size once written.
fn run_weight(input: &serde_json::Value) -> u64 {
    const RECORD_OVERHEAD: u64 = 2 << 10;
    crate::model::json_len(input) + RECORD_OVERHEAD
}
