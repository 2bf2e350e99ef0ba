//! Attempts: dispatching queued steps, starting an attempt (limits, quota,
//! input, plugin), taking up its result, and failure, retry and dead letters.

use super::*;

impl Actor {
    pub(super) fn dispatch(&mut self) {
        let now = self.clock.now_ms();
        while let Some(entry) = self.queue.pop(now) {
            if let Err(e) = self.start(&entry, now) {
                tracing::error!(run = %entry.run_id, error = %e, "starting an attempt failed");
                self.queue.finish(&entry.tenant, &entry.pool);
            }
        }
    }

    pub(super) fn start(&mut self, entry: &Entry, now: Millis) -> Result<()> {
        let Some(run) = self.runs.get_mut(&entry.run_id) else {
            self.queue.finish(&entry.tenant, &entry.pool);
            return Ok(());
        };
        let i = entry.step;
        if run.rec.steps[i].status != StepStatus::Queued || run.cancelled {
            self.queue.finish(&entry.tenant, &entry.pool);
            return Ok(());
        }
        let spec = run.spec.steps[i].clone();
        let caps = match self.quotas.get(&entry.tenant) {
            Some(q) => q.quota.caps(&self.config.caps),
            None => self.config.caps.clone(),
        };
        let mut limits = spec.limits_capped(&caps);
        let mut grant = Grant::default();
        let mut wall_cut = false;
        if let Some(q) = self.quotas.get_mut(&entry.tenant) {
            q.roll(now);
            match q.admit(&limits) {
                Admit::Go(g) => {
                    let asked = limits.timeout;
                    limits = q.granted(limits, g);
                    wall_cut = limits.timeout < asked;
                    grant = g;
                }
                Admit::Wait | Admit::Exhausted => {
                    // Back in line, behind nothing: it keeps its place.
                    self.queue.finish(&entry.tenant, &entry.pool);
                    self.queue.push(entry.clone());
                    self.apply_quota(&entry.tenant);
                    return Ok(());
                }
            }
            if q.held() {
                self.apply_quota(&entry.tenant);
            }
        }
        let run = self.runs.get_mut(&entry.run_id).expect("checked above");
        let mut events = Vec::new();
        let number = run.rec.steps[i].attempts.len() as u32 + 1;
        let grants = run.spec.step_grants(i);
        // Resolve the input and the plugin; either failing fails the step for good.
        let input = self.resolve_input(&entry.run_id, i, number);
        let plugin = self.plugin(&entry.tenant, &spec.plugin.name, &spec.plugin.version)?;
        let run = self.runs.get_mut(&entry.run_id).expect("present");
        let prepared = match (input, plugin) {
            (Ok(input), Some(plugin)) => Ok((input, plugin)),
            (Err(e), _) => Err(format!("input: {e}")),
            (_, None) => Err(format!("plugin `{}` is not uploaded", spec.plugin)),
        };
        if run.rec.status == RunStatus::Queued {
            self.queued_runs
                .entry(run.rec.tenant.clone())
                .and_modify(|n| *n = n.saturating_sub(1));
            run.rec.started_at = Some(now);
            set_run(
                &mut run.rec,
                RunStatus::Running,
                now,
                "first step started",
                "scheduler",
                &mut events,
            );
            if run.rec.trigger != TriggerKind::Manual {
                let late = (now - run.rec.scheduled_for).max(0) as f64;
                self.stats.record_lateness(late);
                self.config
                    .alerts
                    .started_late(&run.rec, &run.spec, late as i64, now);
                self.tenant_metrics.of(&run.rec.tenant).fire_late(late);
            }
        }
        let (input, plugin) = match prepared {
            Ok(p) => p,
            Err(reason) => {
                if let Some(q) = self.quotas.get_mut(&entry.tenant) {
                    q.settle(grant, WindowUse::default(), now);
                }
                let run = self.runs.get_mut(&entry.run_id).expect("present");
                run.rec.steps[i].error = Some(reason.clone());
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Failed,
                    now,
                    reason,
                    "scheduler",
                    &mut events,
                );
                self.queue.finish(&entry.tenant, &entry.pool);
                return self.advance(&entry.run_id, now, "scheduler", &mut events);
            }
        };
        run.rec.steps[i].input = Some(input.clone());
        run.rec.steps[i].attempts.push(AttemptRecord {
            number,
            outcome: None,
            started_at: now,
            finished_at: None,
            fuel_consumed: 0,
            memory_peak_bytes: 0,
            duration_ms: 0.0,
            error: None,
            error_kind: None,
        });
        set_step(
            &mut run.rec,
            i,
            StepStatus::Running,
            now,
            format!("attempt {number} started"),
            "scheduler",
            &mut events,
        );
        self.dirty
            .add(&entry.run_id, run.rec.steps.len(), &mut events);
        let cancel = CancellationToken::new();
        run.cancels.insert(i, cancel.clone());
        let request = AttemptRequest {
            digest: plugin.digest,
            ctx: AttemptContext {
                run_id: run.rec.id.clone(),
                tenant: run.rec.tenant.clone(),
                task: run.rec.task.clone(),
                step: spec.name.clone(),
                attempt: number,
                scheduled_for: rfc3339(run.rec.scheduled_for),
                trigger: run.rec.trigger,
            },
            input: input.to_string(),
            limits,
            grants,
            cancel,
        };
        let fut = self.runner.run(request);
        let done_tx = self.done_tx.clone();
        let (run_id, tenant, task, pool) = (
            entry.run_id.clone(),
            entry.tenant.clone(),
            run.rec.task.clone(),
            entry.pool.clone(),
        );
        // Log lines of the attempt (runtime, plugin loading) carry its ids.
        let span = tracing::info_span!("attempt", run = %run.rec.id, tenant = %run.rec.tenant,
            task = %run.rec.task, step = %spec.name, attempt = number);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let result = fut.await;
                match &result {
                    Ok(r) => {
                        tracing::debug!(outcome = %r.outcome, duration_ms = r.duration_ms, fuel = r.fuel_consumed, "attempt finished")
                    }
                    Err(e) => tracing::warn!(error = %e, "attempt could not run (host fault)"),
                }
                let _ = done_tx.send(AttemptDone {
                    run_id,
                    step: i,
                    attempt: number,
                    tenant,
                    task,
                    pool,
                    grant,
                    wall_cut,
                    result,
                });
            },
            span,
        ));
        Ok(())
    }

    /// A plugin version's record, from memory once read.
    pub(super) fn plugin(
        &mut self,
        tenant: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<crate::model::PluginRecord>> {
        let key = (tenant.to_string(), name.to_string(), version.to_string());
        if let Some(record) = self.plugins.get(&key) {
            return Ok(Some(record.clone()));
        }
        let record = self.store.get_plugin(tenant, name, version)?;
        if let Some(record) = &record {
            self.plugins.insert(key, record.clone());
        }
        Ok(record)
    }

    pub(super) fn resolve_input(
        &self,
        run_id: &str,
        i: usize,
        attempt: u32,
    ) -> std::result::Result<serde_json::Value, String> {
        let run = &self.runs[run_id];
        let biz_date = schedule::biz_date(from_ms(run.rec.scheduled_for), run.tz);
        let scheduled_for = rfc3339(run.rec.scheduled_for);
        let trigger_time = rfc3339(run.rec.created_at);
        let steps = &run.rec.steps;
        let outputs = |name: &str| {
            steps
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.output.as_ref())
        };
        let vars = template::Vars {
            biz_date: &biz_date,
            scheduled_for: &scheduled_for,
            trigger_time: &trigger_time,
            run_id: &run.rec.id,
            attempt,
            input: &run.rec.input,
            step_outputs: &outputs,
        };
        template::render(&run.spec.steps[i].input, &vars).map_err(|e| e.to_string())
    }

    /// An attempt ended: charge it (metrics, usage, the tenant's window
    /// budgets) whatever ended it and whatever became of its run, then
    /// record it in its run and move the run on.
    pub(super) fn on_done(&mut self, done: AttemptDone) -> Result<()> {
        self.queue.finish(&done.tenant, &done.pool);
        let now = self.clock.now_ms();
        let i = done.step;
        let mut report = done.result.unwrap_or_else(|e| AttemptReport {
            outcome: Outcome::Failed,
            output: None,
            error: Some(format!("host fault: {e}")),
            error_kind: Some(ErrorKind::Fatal),
            fuel_consumed: 0,
            memory_peak_bytes: 0,
            duration_ms: 0.0,
            stdout: String::new(),
            stderr: String::new(),
            logs: Vec::new(),
            progress: None,
        });
        if done.wall_cut
            && report.outcome == Outcome::TimedOut
            && let Some(e) = &mut report.error
        {
            e.push_str(" (its timeout was cut to what was left of the tenant's wall-time budget)");
        }
        self.stats.count_attempt(report.outcome);
        self.tenant_metrics.of(&done.tenant).attempt_done(
            report.outcome,
            report.fuel_consumed,
            report.duration_ms,
        );
        let usage = UsageBucket::attempt(
            &done.tenant,
            &done.task,
            now,
            report.fuel_consumed,
            report.duration_ms,
            report.outcome,
        );
        self.usage
            .entry((usage.tenant.clone(), usage.task.clone(), usage.hour))
            .and_modify(|b| b.add(&usage))
            .or_insert(usage);
        if let Some(q) = self.quotas.get_mut(&done.tenant) {
            let used = WindowUse {
                fuel: report.fuel_consumed,
                wall_ms: duration_ms(std::time::Duration::from_secs_f64(
                    report.duration_ms.max(0.0) / 1e3,
                )),
            };
            q.settle(done.grant, used, now);
            self.apply_quota(&done.tenant);
        }
        // A cancelled run stays in memory until its attempts have reported
        // (`on_cancel`), so this finds it.
        let Some(run) = self.runs.get_mut(&done.run_id) else {
            return Ok(());
        };
        run.cancels.remove(&done.step);
        let step = &mut run.rec.steps[i];
        if let Some(a) = step.attempts.iter_mut().find(|a| a.number == done.attempt) {
            a.outcome = Some(report.outcome);
            a.finished_at = Some(now);
            a.fuel_consumed = report.fuel_consumed;
            a.memory_peak_bytes = report.memory_peak_bytes;
            a.duration_ms = report.duration_ms;
            a.error = report.error.clone();
            a.error_kind = report.error_kind;
        }
        // An attempt that printed and logged nothing has no log entry.
        let quiet = report.stdout.is_empty()
            && report.stderr.is_empty()
            && report.logs.is_empty()
            && report.progress.is_none();
        if !quiet {
            self.store.put_logs(
                &done.run_id,
                &AttemptLogs {
                    step: step.name.clone(),
                    attempt: done.attempt,
                    stdout: report.stdout,
                    stderr: report.stderr,
                    logs: report.logs,
                    progress: report.progress,
                },
            )?;
        }
        let mut events = Vec::new();
        let outcome_reason = match &report.error {
            Some(e) => format!("attempt {}: {} ({e})", done.attempt, report.outcome),
            None => format!("attempt {}: {}", done.attempt, report.outcome),
        };
        if report.outcome != Outcome::Succeeded {
            tracing::info!(run = %done.run_id, tenant = %done.tenant, task = %run.rec.task,
                step = %step.name, attempt = done.attempt, outcome = %report.outcome,
                error = report.error.as_deref().unwrap_or(""), "attempt did not succeed");
        }
        if step.status != StepStatus::Running {
            // Cancelled while running: the step was already settled.
            return self.advance(&done.run_id, now, "scheduler", &mut events);
        }
        match report.outcome {
            Outcome::Succeeded => {
                step.output = report.output;
                step.error = None;
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Succeeded,
                    now,
                    outcome_reason,
                    "scheduler",
                    &mut events,
                );
            }
            Outcome::Cancelled => {
                step.error = report.error;
                set_step(
                    &mut run.rec,
                    i,
                    StepStatus::Cancelled,
                    now,
                    outcome_reason,
                    "scheduler",
                    &mut events,
                );
            }
            outcome => {
                step.error = report.error.clone();
                let kind = report.error_kind;
                self.after_failure(
                    &done.run_id,
                    i,
                    (outcome, kind),
                    now,
                    "scheduler",
                    &mut events,
                );
            }
        }
        self.advance(&done.run_id, now, "scheduler", &mut events)
    }

    /// A failed attempt: wait and retry, or fail the step (dead-lettering it
    /// when its retries ran out).
    pub(super) fn after_failure(
        &mut self,
        run_id: &str,
        i: usize,
        (outcome, kind): (Outcome, Option<ErrorKind>),
        now: Millis,
        actor: &str,
        events: &mut Vec<Event>,
    ) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        let policy = run.spec.steps[i].retry.clone();
        let step = &run.rec.steps[i];
        // Attempts lost to host crashes (up to the bound) do not use up retries.
        let counted = (step.attempts.len() as u32)
            .saturating_sub(step.round_start)
            .saturating_sub(step.lost_attempts.min(self.config.max_lost_attempts));
        let error = step.error.clone().unwrap_or_else(|| outcome.to_string());
        if policy.should_retry(counted, outcome, kind) && !run.cancelled {
            let delay = policy.delay(counted, &mut self.rng);
            let at = now + delay.as_millis() as Millis;
            run.rec.steps[i].next_attempt_at = Some(at);
            set_step(
                &mut run.rec,
                i,
                StepStatus::RetryWait,
                now,
                format!(
                    "{outcome}; retrying in {}",
                    humantime::format_duration(delay)
                ),
                actor,
                events,
            );
            self.timers.insert((
                at,
                Timer::Retry {
                    run_id: run_id.to_string(),
                    step: i,
                },
            ));
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let exhausted = policy.max_attempts > 1 && policy.should_retry(0, outcome, kind);
        if exhausted {
            let dead = DeadLetter {
                id: new_id("d", now),
                tenant: run.rec.tenant.clone(),
                task: run.rec.task.clone(),
                run_id: run_id.to_string(),
                step: run.rec.steps[i].name.clone(),
                input: run.rec.steps[i].input.clone(),
                error: Some(error.clone()),
                outcome: Some(outcome),
                attempts: run.rec.steps[i].attempts.len() as u32,
                created_at: now,
                resolution: None,
                resolved_at: None,
            };
            if let Err(e) = self.store.put_dead_letter(&dead) {
                tracing::error!(error = %e, "recording a dead letter failed");
            }
            self.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
            self.config.alerts.dead_letter(&run.rec, &run.spec, &dead);
            tracing::warn!(run = %run_id, tenant = %dead.tenant, task = %dead.task, step = %dead.step,
                attempts = dead.attempts, dead_letter = %dead.id, %outcome, "step dead-lettered");
            set_step(
                &mut run.rec,
                i,
                StepStatus::Dead,
                now,
                format!(
                    "{outcome} after {} attempts; dead letter {}",
                    dead.attempts, dead.id
                ),
                actor,
                events,
            );
        } else {
            set_step(
                &mut run.rec,
                i,
                StepStatus::Failed,
                now,
                format!("{outcome}: {error}"),
                actor,
                events,
            );
        }
    }

    pub(super) fn retry_due(&mut self, run_id: &str, i: usize, now: Millis) -> Result<()> {
        let Some(run) = self.runs.get_mut(run_id) else {
            return Ok(());
        };
        if run.rec.steps[i].status != StepStatus::RetryWait {
            return Ok(());
        }
        let mut events = Vec::new();
        run.rec.steps[i].next_attempt_at = None;
        set_step(
            &mut run.rec,
            i,
            StepStatus::Queued,
            now,
            "backoff elapsed",
            "scheduler",
            &mut events,
        );
        self.dirty.add(run_id, run.rec.steps.len(), &mut events);
        let entry = self.entry_for(run_id, i, now);
        self.queue.push(entry);
        Ok(())
    }
}
