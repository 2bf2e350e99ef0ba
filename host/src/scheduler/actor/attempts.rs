//! Attempts: dispatching queued steps, starting an attempt (limits, quota,
//! input, plugin), taking up its result, and failure, retry and dead letters.

use tokio_util::sync::CancellationToken;

use super::{Actor, AttemptDone, Timer, dead_letter_id};
use crate::model::PluginRecord;
use crate::model::{
    AttemptContext, AttemptReport, ErrorKind, Millis, Outcome, PluginStatus, StepStatus,
};
use crate::scheduler::clock::{from_ms, rfc3339};
use crate::scheduler::core::{Ctx, Effect};
use crate::scheduler::queue::Entry;
use crate::scheduler::quota::{Admit, Grant, WindowUse, duration_ms};
use crate::scheduler::runner::AttemptRequest;
use crate::scheduler::{Error, Result, core as decide};
use crate::store::{AttemptLogs, Unresolved, resolve_plugin};
use crate::task::PluginRef;
use crate::tenant::UsageBucket;
use crate::{schedule, template};

/// How long a step whose start could not read the store waits before it
/// goes back in line ([`Timer::Requeue`]).
const REQUEUE_AFTER: Millis = 1_000;

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
        // Resolve the input and the plugin. The version a range or a tag
        // means is decided here, at the start of each attempt, and recorded
        // on it.
        let unspilled = self.unspill(&entry.run_id);
        let plugin = self.resolve_plugin(&entry.tenant, &spec.plugin);
        if let Some(e) = [unspilled.as_ref().err(), plugin.as_ref().err()]
            .into_iter()
            .flatten()
            .find(|e| matches!(e, Error::Store(e) if e.is_unavailable()))
        {
            // The store cannot be read now (a database away): the step
            // loses nothing — not charged, not failed, not dropped from
            // the queue — and is tried again shortly, keeping its place.
            tracing::warn!(run = %entry.run_id, step = i, error = %e, "an attempt cannot start: the store cannot be read now; trying again in a second");
            if let Some(q) = self.quotas.get_mut(&entry.tenant) {
                q.settle(grant, WindowUse::default(), now);
            }
            self.queue.finish(&entry.tenant, &entry.pool);
            self.timers
                .insert((now + REQUEUE_AFTER, Timer::Requeue(entry.clone())));
            return Ok(());
        }
        // Any other failure fails the step for good.
        let input = match unspilled {
            Ok(()) => self.resolve_input(&entry.run_id, i, number),
            Err(e) => Err(format!("cannot read the run's input from the store: {e}")),
        };
        let plugin = plugin.unwrap_or_else(|e| {
            Err(Unresolved(format!(
                "cannot read plugin `{}` from the store: {e}",
                spec.plugin
            )))
        });
        let run = self.runs.get_mut(&entry.run_id).expect("present");
        let prepared = match (input, plugin) {
            // A version still compiling is handed to the runner, which waits
            // for its compilation.
            (Ok(input), Ok(plugin)) if plugin.status != PluginStatus::Failed => Ok((input, plugin)),
            (Err(e), _) => Err(format!("input: {e}")),
            (_, Err(unresolved)) => Err(unresolved.0),
            (_, Ok(failed)) => Err(format!(
                "plugin `{}@{}` failed to compile: {}",
                failed.name,
                failed.version,
                failed.error.as_deref().unwrap_or("no reason recorded")
            )),
        };
        let mut effects = Vec::new();
        let late = decide::attempt::run_started(&mut run.rec, now, &mut effects, &mut events);
        // Leaving the queue is the only effect of a start.
        if effects.contains(&Effect::LeftQueue) {
            self.queued_runs
                .entry(run.rec.tenant.clone().into())
                .and_modify(|n| *n = n.saturating_sub(1));
        }
        if let Some(late) = late {
            self.stats.record_lateness(late as f64);
            let alerts = self
                .config
                .alerts
                .started_late(&run.rec, &run.spec, late, now);
            self.dirty.alerts.extend(alerts);
            self.tenant_metrics
                .of(&run.rec.tenant)
                .fire_late(late as f64);
        }
        let (input, plugin) = match prepared {
            Ok(p) => p,
            Err(reason) => {
                if let Some(q) = self.quotas.get_mut(&entry.tenant) {
                    q.settle(grant, WindowUse::default(), now);
                }
                let run = self.runs.get_mut(&entry.run_id).expect("present");
                decide::attempt::start_failed(&mut run.rec, i, reason, now, &mut events);
                self.queue.finish(&entry.tenant, &entry.pool);
                return self.advance(&entry.run_id, now, "scheduler", &mut events);
            }
        };
        decide::attempt::attempt_begun(
            &mut run.rec,
            i,
            number,
            input.clone(),
            &plugin,
            now,
            &mut events,
        );
        self.dirty.add(&entry.run_id, &mut events);
        let cancel = CancellationToken::new();
        run.cancels.insert(i, cancel.clone());
        let request = AttemptRequest {
            digest: plugin.digest,
            ctx: AttemptContext {
                run_id: run.rec.id.clone().into(),
                tenant: run.rec.tenant.clone().into(),
                task: run.rec.task.clone().into(),
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
                    task: task.into(),
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

    /// The stored version `plugin` means now ([`crate::store::resolve_plugin`]),
    /// or why none. An exact version's record is kept in memory once read
    /// `ready` (a ready version does not change until it is deleted, which
    /// evicts it; one compiling is read again until its compilation has
    /// ended); a range or a tag is read from the store at every start, since
    /// an upload or a tag move changes what it means.
    pub(super) fn resolve_plugin(
        &mut self,
        tenant: &str,
        plugin: &PluginRef,
    ) -> Result<std::result::Result<PluginRecord, Unresolved>> {
        let key = plugin
            .version
            .exact()
            .map(|v| (tenant.to_string(), plugin.name.clone(), v.to_string()));
        if let Some(record) = key.as_ref().and_then(|k| self.plugins.get(k)) {
            return Ok(Ok(record.clone()));
        }
        let resolved = resolve_plugin(&*self.store, tenant, plugin)?;
        if let (Some(key), Ok(record)) = (key, &resolved)
            && record.status == PluginStatus::Ready
        {
            self.plugins.insert(key, record.clone());
        }
        Ok(resolved)
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
        let step = &mut run.state.rec.steps[i];
        decide::attempt::record_report(step, done.attempt, &report, now);
        // An attempt that printed and logged nothing has no log entry.
        let quiet = report.stdout.is_empty()
            && report.stderr.is_empty()
            && report.logs.is_empty()
            && report.progress.is_none();
        // Stored with the next write-behind, before the run (`write::put_logs`).
        if !quiet {
            self.dirty.logs.push(crate::store::RunLogs {
                tenant: done.tenant.clone(),
                run_id: done.run_id.clone(),
                logs: AttemptLogs {
                    step: step.name.clone(),
                    attempt: done.attempt,
                    stdout: report.stdout,
                    stderr: report.stderr,
                    logs: report.logs,
                    progress: report.progress,
                },
            });
        }
        if report.outcome != Outcome::Succeeded {
            tracing::info!(run = %done.run_id, tenant = %done.tenant, task = %run.rec.task,
                step = %run.rec.steps[i].name, attempt = done.attempt, outcome = %report.outcome,
                error = report.error.as_deref().unwrap_or(""), "attempt did not succeed");
        }
        let ended = decide::attempt::Ended {
            attempt: done.attempt,
            outcome: report.outcome,
            kind: report.error_kind,
            output: report.output,
            error: report.error,
        };
        let (mut effects, mut events) = (Vec::new(), Vec::new());
        let mut retries = decide::attempt::Retries {
            max_lost: self.config.max_lost_attempts,
            rng: &mut self.rng,
            dead_letter_id,
        };
        let ctx = Ctx {
            now,
            actor: "scheduler",
        };
        decide::attempt::attempt_finished(
            &mut run.state,
            i,
            ended,
            ctx,
            &mut retries,
            &mut effects,
            &mut events,
        );
        self.apply(&done.run_id, effects, now)?;
        self.advance(&done.run_id, now, "scheduler", &mut events)
    }

    /// Puts back in line a step whose start could not read the store
    /// ([`Timer::Requeue`]), unless it has moved on meanwhile (cancelled,
    /// or its run gone).
    pub(super) fn requeue(&mut self, entry: Entry) {
        let Some(run) = self.runs.get(&entry.run_id) else {
            return;
        };
        if run.cancelled || run.rec.steps[entry.step].status != StepStatus::Queued {
            return;
        }
        self.queue.push(entry);
    }

    pub(super) fn retry_due(&mut self, run_id: &str, i: usize, now: Millis) -> Result<()> {
        let Some(run) = self.runs.get_mut(run_id) else {
            return Ok(());
        };
        let (mut effects, mut events) = (Vec::new(), Vec::new());
        if !decide::attempt::retry_due(&mut run.rec, i, now, &mut effects, &mut events) {
            return Ok(());
        }
        self.dirty.add(run_id, &mut events);
        self.apply(run_id, effects, now)
    }
}
