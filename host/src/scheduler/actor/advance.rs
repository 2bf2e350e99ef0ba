//! Moving a run on: deciding the steps whose upstreams ended, `when`
//! conditions, finishing a run and releasing the next held run of its task.

use super::*;

impl Actor {
    pub(super) fn entry_for(&self, run_id: &str, step: usize, now: Millis) -> Entry {
        let run = &self.runs[run_id];
        Entry {
            run_id: run_id.to_string(),
            step,
            tenant: run.rec.tenant.clone(),
            pool: self.queue.pool_for(run.spec.steps[step].pool.as_deref()),
            priority: run.rec.priority,
            enqueued_at: now,
        }
    }

    /// Counts steps that ended since the last call, decides the steps whose
    /// upstreams have all ended (queue, skip or cancel them per trigger rule
    /// and `when`), finishes the run when every step is terminal, and marks
    /// the run for the next write with `events`.
    pub(super) fn advance(
        &mut self,
        id: &str,
        now: Millis,
        actor: &str,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let Some(run) = self.runs.get_mut(id) else {
            return Ok(());
        };
        let mut ready = Vec::new();
        let mut decidable = std::mem::take(&mut run.candidates);
        for i in 0..run.rec.steps.len() {
            let status = run.rec.steps[i].status;
            if status.is_terminal() && !run.readiness.is_settled(i) {
                run.readiness.settle(&run.graph, i, status, &mut decidable);
            }
        }
        // A run created ahead of its instant waits for it (`fire`). Only for
        // as long as the lead: a run further ahead means the clock stepped
        // back, and its runs (manual ones too) must not wait for that.
        let ahead = run.rec.scheduled_for - now;
        let early = ahead > 0 && ahead <= self.config.fire_ahead_ms;
        if early && !run.cancelled {
            self.timers.insert((
                run.rec.scheduled_for,
                Timer::Release {
                    run_id: id.to_string(),
                },
            ));
        }
        if run.held || run.cancelled || early {
            run.candidates = decidable;
        } else {
            while let Some(i) = decidable.pop() {
                if run.rec.steps[i].status != StepStatus::Pending {
                    continue;
                }
                // A condition out for evaluation decides the step when it is back.
                if run.evaluating.contains_key(&i) {
                    continue;
                }
                let settle_as = match run.readiness.decide(&run.graph, i) {
                    Decision::Run if run.spec.steps[i].when.is_some() => {
                        // Parsed when the run was loaded; one that did not
                        // parse then is tried again, and fails its step now.
                        let parsed = match &run.conds[i] {
                            Some(_) => Ok(()),
                            None => Condition::parse_cached(
                                run.spec.steps[i].when.as_deref().unwrap_or_default(),
                            )
                            .map(|c| run.conds[i] = Some(c)),
                        };
                        match parsed {
                            Ok(()) => {
                                self.cond_token += 1;
                                run.evaluating.insert(i, self.cond_token);
                                self.cond_pool.request(CondRequest {
                                    run_id: id.to_string(),
                                    step: i,
                                    token: self.cond_token,
                                    tenant: run.rec.tenant.clone(),
                                });
                                None
                            }
                            Err(e) => Some(condition_failed(&e)),
                        }
                    }
                    Decision::Run => {
                        set_step(
                            &mut run.rec,
                            i,
                            StepStatus::Queued,
                            now,
                            "ready",
                            actor,
                            events,
                        );
                        ready.push(i);
                        None
                    }
                    Decision::Settle(status, reason) => Some((status, reason.to_string())),
                };
                if let Some((status, reason)) = settle_as {
                    run.rec.steps[i].error = Some(reason.clone());
                    set_step(&mut run.rec, i, status, now, reason, actor, events);
                    run.readiness.settle(&run.graph, i, status, &mut decidable);
                }
            }
        }
        let finished = run.rec.steps.iter().all(|s| s.status.is_terminal());
        // Steps of a cancelled run are terminal before their attempts end:
        // the run is forgotten only once those have reported (`on_done`).
        let attempts_out = !run.cancels.is_empty();
        if finished && !run.rec.status.is_terminal() {
            // Like Airflow: the run's result is its leaf steps' results. A
            // failure handled downstream (`one_success`, `all_done`) does not
            // fail the run; an unhandled one reaches a leaf as `cancelled`.
            let graph = &run.graph;
            let failed = run
                .rec
                .steps
                .iter()
                .enumerate()
                .find(|(i, s)| {
                    graph.is_leaf(*i)
                        && matches!(
                            s.status,
                            StepStatus::Failed | StepStatus::Dead | StepStatus::Cancelled
                        )
                })
                .map(|(_, s)| s);
            let (status, reason) = if run.cancelled {
                (
                    RunStatus::Cancelled,
                    run.rec.reason.clone().unwrap_or_else(|| "cancelled".into()),
                )
            } else if let Some(step) = failed {
                (
                    RunStatus::Failed,
                    format!("step `{}` {}", step.name, step_status_name(step.status)),
                )
            } else {
                (RunStatus::Succeeded, String::new())
            };
            if run.rec.status == RunStatus::Queued {
                self.queued_runs
                    .entry(run.rec.tenant.clone())
                    .and_modify(|n| *n = n.saturating_sub(1));
            }
            set_run(&mut run.rec, status, now, reason, actor, events);
        }
        self.dirty.add(id, run.rec.steps.len(), events);
        for i in ready {
            let entry = self.entry_for(id, i, now);
            self.queue.push(entry);
        }
        if finished && !attempts_out {
            self.finish_run(id, now)?;
        }
        self.start_conditions();
        Ok(())
    }

    /// Hands waiting conditions to free evaluation threads, tenants in
    /// turn, copying each one's data out of its run now; drops those whose
    /// step no longer waits (the run ended or was cancelled).
    pub(super) fn start_conditions(&mut self) {
        let budget = self.config.cond_budget;
        while let Some(request) = self.cond_pool.next() {
            let Some(run) = self.runs.get(&request.run_id) else {
                continue;
            };
            let i = request.step;
            let waits = !run.cancelled
                && run.evaluating.get(&i) == Some(&request.token)
                && run.rec.steps.get(i).map(|s| s.status) == Some(StepStatus::Pending);
            if let Some((cond, data)) = waits.then(|| run.condition_job(i, &budget)).flatten() {
                self.cond_pool.start(CondJob {
                    request,
                    cond,
                    data,
                });
            }
        }
    }

    /// Takes up an evaluated condition: runs, skips or fails its step, then
    /// decides what follows. A result nobody waits for any more (the run
    /// ended or was cancelled, the step was decided otherwise) is dropped.
    pub(super) fn on_condition(&mut self, done: CondDone) -> Result<()> {
        self.cond_pool.finished();
        let taken = self.take_condition(done);
        self.start_conditions();
        taken
    }

    pub(super) fn take_condition(&mut self, done: CondDone) -> Result<()> {
        let now = self.clock.now_ms();
        let Some(run) = self.runs.get_mut(&done.run_id) else {
            return Ok(());
        };
        let i = done.step;
        if run.evaluating.get(&i) != Some(&done.token) {
            return Ok(());
        }
        run.evaluating.remove(&i);
        if run.cancelled || run.rec.steps.get(i).map(|s| s.status) != Some(StepStatus::Pending) {
            return Ok(());
        }
        let mut events = Vec::new();
        let settle_as = match done.result {
            Ok(true) => None,
            Ok(false) => Some((
                StepStatus::Skipped,
                format!(
                    "condition is false: {}",
                    run.spec.steps[i].when.as_deref().unwrap_or_default()
                ),
            )),
            Err(e) => Some(condition_failed(&e)),
        };
        match settle_as {
            None => {
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Queued,
                    now,
                    "ready",
                    "scheduler",
                    &mut events,
                );
                let entry = self.entry_for(&done.run_id, i, now);
                self.queue.push(entry);
            }
            Some((status, reason)) => {
                run.rec.steps[i].error = Some(reason.clone());
                set_step(
                    &mut run.rec,
                    i,
                    status,
                    now,
                    reason,
                    "scheduler",
                    &mut events,
                );
            }
        }
        // Settles the step for its downstream steps and marks the run dirty.
        self.advance(&done.run_id, now, "scheduler", &mut events)
    }

    /// Counts a run as active for its task (and queues it behind the others when held).
    pub(super) fn track(&mut self, key: (String, String), id: &str, held: bool) {
        let t = self.by_task.entry(key).or_default();
        t.active += 1;
        if held {
            t.held.push_back(id.to_string());
        }
    }

    /// Forgets a terminal run and lets the next held run of its task go.
    pub(super) fn finish_run(&mut self, id: &str, now: Millis) -> Result<()> {
        let Some(run) = self.runs.remove(id) else {
            return Ok(());
        };
        let key = (run.rec.tenant.clone(), run.rec.task.clone());
        self.tenant_metrics
            .of(&run.rec.tenant)
            .run_finished(run.rec.status);
        self.config.alerts.run_ended(&run.rec, &run.spec, now);
        let r = &run.rec;
        if r.status == RunStatus::Succeeded {
            tracing::debug!(run = %r.id, tenant = %r.tenant, task = %r.task, "run succeeded");
        } else {
            tracing::info!(run = %r.id, tenant = %r.tenant, task = %r.task, status = r.status.as_str(),
                reason = r.reason.as_deref().unwrap_or(""), "run ended without success");
        }
        self.fire_after(&run.rec, now);
        let was_held = run.held;
        self.finished.insert(id.to_string(), run.rec);
        let mut next_held = None;
        if let Some(t) = self.by_task.get_mut(&key) {
            t.active = t.active.saturating_sub(1);
            if was_held {
                // A held run that ended (cancelled) frees no slot.
                t.held.retain(|r| r != id);
            } else {
                next_held = t.held.pop_front();
            }
            if t.active == 0 {
                self.by_task.remove(&key);
            }
        }
        if let Some(next) = next_held {
            if let Some(r) = self.runs.get_mut(&next) {
                r.held = false;
            }
            let mut events = Vec::new();
            self.advance(&next, now, "scheduler", &mut events)?;
        }
        Ok(())
    }
}
