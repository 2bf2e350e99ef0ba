//! Crash recovery: rebuilding memory from the store at start (tenants'
//! usage, active runs with their lost attempts, schedules).

use super::*;

impl Actor {
    /// Rebuilds memory from the store after a start: attempts that were
    /// running are marked `lost` and retried per policy, queued and waiting
    /// steps resume, schedules are re-armed (missed fires follow `catch_up`
    /// when their timers fire, immediately).
    pub(in crate::scheduler) fn recover(&mut self) -> Result<()> {
        let now = self.clock.now_ms();
        let slots = self.config.queue.global_limit;
        for tenant in self.store.list_tenants()? {
            let start = tenant.quota.window_start(now);
            let used = self
                .store
                .usage(&tenant.name, start, now + HOUR_MS)?
                .iter()
                .fold(WindowUse::default(), |used, b| WindowUse {
                    fuel: used.fuel.saturating_add(b.fuel),
                    wall_ms: used
                        .wall_ms
                        .saturating_add(b.wall_ms.max(0.0).ceil() as u64),
                });
            self.quotas.insert(
                tenant.name.clone(),
                TenantQuota::new(&tenant, used, slots, now),
            );
            self.apply_quota(&tenant.name);
        }
        let mut active = self.store.active_runs()?;
        active.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        for rec in active {
            let spec: TaskSpec = match serde_json::from_value(rec.spec.clone()) {
                Ok(spec) => spec,
                Err(e) => {
                    tracing::error!(run = %rec.id, error = %e, "cannot read the task snapshot of an active run; failing it");
                    let mut rec = rec;
                    let mut events = Vec::new();
                    set_run(
                        &mut rec,
                        RunStatus::Failed,
                        now,
                        format!("unreadable task snapshot: {e}"),
                        "recovery",
                        &mut events,
                    );
                    self.store.update_run(&rec, &events)?;
                    continue;
                }
            };
            let key = (rec.tenant.clone(), rec.task.clone());
            let held = rec.status == RunStatus::Queued
                && rec.trigger != TriggerKind::Manual
                && spec.overlap == Overlap::QueueOne
                && self.by_task.get(&key).is_some_and(|t| t.active > 0);
            if rec.status == RunStatus::Queued {
                *self.queued_runs.entry(rec.tenant.clone()).or_default() += 1;
            }
            self.track(key, &rec.id, held);
            let id = rec.id.clone();
            self.runs
                .insert(id.clone(), ActiveRun::new(rec, spec, held));
            self.recover_run(&id, now)?;
        }
        for task in self.store.list_tasks(None)? {
            self.index_after(&task);
        }
        for sched in self.store.list_schedules()? {
            if let Err(e) = self.on_task_changed(&sched.tenant, &sched.task) {
                tracing::error!(tenant = %sched.tenant, task = %sched.task, error = %e, "cannot arm the trigger");
            }
        }
        self.flush()
    }

    pub(super) fn recover_run(&mut self, id: &str, now: Millis) -> Result<()> {
        let max_lost = self.config.max_lost_attempts;
        let Some(run) = self.runs.get_mut(id) else {
            return Ok(());
        };
        let mut events = Vec::new();
        let (mut queued, mut lost) = (Vec::new(), Vec::new());
        for i in 0..run.rec.steps.len() {
            match run.rec.steps[i].status {
                StepStatus::Running => {
                    if let Some(a) = run.rec.steps[i].attempts.last_mut()
                        && a.outcome.is_none()
                    {
                        a.outcome = Some(Outcome::Lost);
                        a.finished_at = Some(now);
                        a.error = Some("the host stopped while this attempt was running".into());
                    }
                    run.rec.steps[i].lost_attempts += 1;
                    lost.push(i);
                }
                StepStatus::Queued => queued.push(i),
                StepStatus::RetryWait => {
                    let at = run.rec.steps[i].next_attempt_at.unwrap_or(now);
                    self.timers.insert((
                        at,
                        Timer::Retry {
                            run_id: id.to_string(),
                            step: i,
                        },
                    ));
                }
                _ => {}
            }
        }
        for i in lost {
            self.stats.count_attempt(Outcome::Lost);
            let run = self.runs.get_mut(id).expect("present");
            self.tenant_metrics.of(&run.rec.tenant).count(Outcome::Lost);
            let step = &run.rec.steps[i];
            let attempt = step.attempts.last().map_or(0, |a| a.number);
            if step.lost_attempts <= max_lost {
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Queued,
                    now,
                    format!("attempt {attempt} lost in a host crash; running it again"),
                    "recovery",
                    &mut events,
                );
                queued.push(i);
            } else {
                run.rec.steps[i].error = Some("attempts keep getting lost in host crashes".into());
                self.after_failure(id, i, (Outcome::Lost, None), now, "recovery", &mut events);
            }
        }
        for i in queued {
            let entry = self.entry_for(id, i, now);
            self.queue.push(entry);
        }
        self.advance(id, now, "recovery", &mut events)
    }
}
