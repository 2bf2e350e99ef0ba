//! Instantiate and call: one attempt in a fresh `Store` with its fuel
//! budget (handed out in slices), a memory limiter that records denials, an
//! epoch deadline, an outer timeout for time blocked in host calls, bounded
//! capture and the capabilities it is granted; then the report (see
//! [`outcome`](super::outcome) for how an ending is told apart).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;

use super::capture::{self, CapturePipe, LogSink};
use super::host::{HostState, MemoryLimiter};
use super::http::HttpHooks;
use super::outcome::{classify_trap, set_timed_out, settle_output};
use super::record::Tape;
use super::{Error, Plugin, Result, Runtime, bindings};
use crate::capability::{self, Grants};
use crate::model::{AttemptContext, AttemptReport, ErrorKind, Limits, Outcome, TriggerKind};

/// Fuel handed to the guest at a time (see `run_with`): the most by which the
/// fuel reported for an attempt stopped by a timeout or a cancel can fall short
/// of what it burned. About 0.5 ms of a busy guest (~2e9 units/s), so a spinning
/// guest also yields ~2,000 times a second — a fiber switch each, negligible
/// beside the work of the slice.
pub const FUEL_SLICE: u64 = 1_000_000;

impl Runtime {
    ///
    /// Returns `Err` only for host faults and invalid limits; everything the
    /// plugin does, however hostile, ends in an [`AttemptReport`]. When `cancel`
    /// fires the guest is stopped and the outcome is `cancelled`.
    pub async fn run(
        &self,
        plugin: &Plugin,
        ctx: &AttemptContext,
        input: &str,
        limits: &Limits,
        cancel: Option<&CancellationToken>,
    ) -> Result<AttemptReport> {
        self.run_with(plugin, ctx, input, limits, &Grants::default(), cancel)
            .await
    }

    /// Runs one attempt with the capabilities in `grants`: HTTP to its
    /// allow-list, its config, secrets and key-value store. Every secret value
    /// in `grants` is redacted from the report.
    pub async fn run_with(
        &self,
        plugin: &Plugin,
        ctx: &AttemptContext,
        input: &str,
        limits: &Limits,
        grants: &Grants,
        cancel: Option<&CancellationToken>,
    ) -> Result<AttemptReport> {
        self.run_taped(plugin, ctx, input, limits, grants, cancel, None)
            .await
    }

    /// [`Runtime::run_with`], with the boundary values on `tape` when one is
    /// given (recorded or replayed: [`super::record`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_taped(
        &self,
        plugin: &Plugin,
        ctx: &AttemptContext,
        input: &str,
        limits: &Limits,
        grants: &Grants,
        cancel: Option<&CancellationToken>,
        tape: Option<Tape>,
    ) -> Result<AttemptReport> {
        self.check_limits(limits)?;
        // Winch's code runs in its own, smaller pool (`engine::baseline_slots`).
        // Taken first, so attempts waiting for one of its slots hold none of
        // the host's `slots`, which other plugins' attempts need.
        let _baseline_slot = if plugin.inner.first_tier {
            Some(
                self.inner
                    .baseline_slots
                    .acquire()
                    .await
                    .map_err(|_| Error::Host("runtime is shutting down".into()))?,
            )
        } else {
            None
        };
        let _slot = self
            .inner
            .slots
            .acquire()
            .await
            .map_err(|_| Error::Host("runtime is shutting down".into()))?;

        let started = Instant::now();
        let deadline = started + limits.timeout;
        let stdout = CapturePipe::new(limits.max_stdio_bytes);
        let stderr = CapturePipe::new(limits.max_stdio_bytes);
        // Deny by default: no preopened directories, no environment, no
        // arguments, no stdin, no network (WASI sockets exist but every use is refused).
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(tape) = &tape {
            tape.install(&mut wasi);
        }
        let wasi = wasi.build();
        let logs = Arc::new(Mutex::new(LogSink::new(limits.max_log_bytes)));
        let state = HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(limits.memory_bytes),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            hooks: HttpHooks::new(
                &grants.allow_http,
                grants.http_limits,
                logs.clone(),
                started,
            )
            .with_tape(tape.clone()),
            logs,
            config: grants.config.clone(),
            secrets: grants.secrets.clone(),
            kv: grants.kv.clone(),
            progress: None,
            started,
            deadline,
            timed_out: false,
            tape,
        };
        // The engine that compiled the plugin: Winch's or Cranelift's.
        let mut store = Store::new(&plugin.inner.engine, state);
        store.limiter(|state| &mut state.limiter);
        store
            .set_fuel(limits.fuel)
            .map_err(|e| Error::Host(format!("setting fuel: {e}")))?;
        // Compiled code keeps the fuel counter in a register and writes it
        // back to the store only at calls, returns and out-of-fuel checks, not
        // at epoch checks: a guest spinning in a call-free loop and stopped by
        // the deadline (or by the outer timeout or a cancel at an epoch yield)
        // would report only what it used before the loop. Handing the fuel
        // out in slices makes the guest reach the out-of-fuel check, which
        // saves the counter, every slice: what is read below is then at most
        // one slice short of what the guest burned.
        store
            .fuel_async_yield_interval(Some(FUEL_SLICE))
            .map_err(|e| Error::Host(format!("setting the fuel slice: {e}")))?;
        // Check the clock at every tick: yield to the executor so other attempts
        // make progress, and interrupt the guest once its deadline has passed.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut cx| {
            if Instant::now() >= cx.data().deadline {
                cx.data_mut().timed_out = true;
                Ok(UpdateDeadline::Interrupt)
            } else if cx.data().tape.as_ref().is_some_and(Tape::diverged) {
                // A replay past its divergence has nothing more to learn.
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });

        let wit_ctx = to_wit_context(ctx);
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        let ended = {
            let call = async {
                let task = plugin.inner.pre.instantiate_async(&mut store).await?;
                task.call_run(&mut store, &wit_ctx, input).await
            };
            // The outer timeout covers time blocked in async host calls (a WASI
            // sleep, a poll), where epochs do not interrupt. Dropping `call`
            // drops the guest's fiber: nothing of it runs afterwards.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Ended::Cancelled,
                res = tokio::time::timeout_at(deadline.into(), call) => match res {
                    Ok(res) => Ended::Returned(res),
                    Err(_) => Ended::OuterTimeout,
                },
            }
        };
        let duration = started.elapsed();
        let fuel_left = store.get_fuel().unwrap_or(0);
        let state = store.into_data();
        let at_ms = duration.as_millis() as u64;

        let mut report = AttemptReport {
            outcome: Outcome::Succeeded,
            output: None,
            error: None,
            error_kind: None,
            fuel_consumed: limits.fuel.saturating_sub(fuel_left),
            memory_peak_bytes: state.limiter.peak(),
            duration_ms: duration.as_secs_f64() * 1000.0,
            stdout: stdout.contents(),
            stderr: stderr.contents(),
            logs: Vec::new(),
            progress: state.progress.clone(),
        };
        match ended {
            Ended::Cancelled => {
                report.outcome = Outcome::Cancelled;
                report.error = Some("attempt cancelled".into());
            }
            Ended::OuterTimeout => set_timed_out(&mut report, limits),
            Ended::Returned(Ok(Ok(output))) => settle_output(&mut report, output, limits),
            Ended::Returned(Ok(Err(err))) => {
                report.outcome = Outcome::Failed;
                report.error_kind = Some(match err.kind {
                    bindings::ax::plugin::types::ErrorKind::Retryable => ErrorKind::Retryable,
                    bindings::ax::plugin::types::ErrorKind::Fatal => ErrorKind::Fatal,
                });
                let mut message = err.message;
                capture::truncate_utf8(&mut message, 4 << 10);
                report.error = Some(message);
            }
            Ended::Returned(Err(err)) => {
                if err.is::<wasmtime::PoolConcurrencyLimitError>() {
                    return Err(Error::Host(format!("no instance slot free: {err}")));
                }
                if state.timed_out {
                    set_timed_out(&mut report, limits);
                } else {
                    classify_trap(&mut report, &err, &state.limiter, limits);
                }
            }
        }
        // Request futures may still hold the sink; take its contents.
        let sink = std::mem::replace(
            &mut *state.logs.lock().unwrap_or_else(PoisonError::into_inner),
            LogSink::new(0),
        );
        report.logs = sink.finish(at_ms);
        capability::redact(&mut report, &grants.secret_values());
        Ok(report)
    }

    fn check_limits(&self, limits: &Limits) -> Result<()> {
        let max = self.inner.config.max_memory_bytes;
        if limits.memory_bytes > max {
            return Err(Error::Limits(format!(
                "memory cap of {} bytes is above this host's maximum of {max} bytes",
                limits.memory_bytes
            )));
        }
        if limits.timeout.is_zero() {
            return Err(Error::Limits("timeout must be above zero".into()));
        }
        if limits.fuel == 0 {
            return Err(Error::Limits("fuel must be above zero".into()));
        }
        Ok(())
    }
}

/// How the call ended, before it is told apart in the report.
enum Ended {
    Cancelled,
    OuterTimeout,
    Returned(wasmtime::Result<std::result::Result<String, bindings::ax::plugin::types::TaskError>>),
}

/// The attempt context as the WIT `context` record the guest receives.
fn to_wit_context(ctx: &AttemptContext) -> bindings::ax::plugin::types::Context {
    use bindings::ax::plugin::types::TriggerKind as W;
    bindings::ax::plugin::types::Context {
        run_id: ctx.run_id.clone(),
        tenant: ctx.tenant.clone(),
        task: ctx.task.clone(),
        step: ctx.step.clone(),
        attempt: ctx.attempt,
        scheduled_for: ctx.scheduled_for.clone(),
        trigger: match ctx.trigger {
            TriggerKind::Manual => W::Manual,
            TriggerKind::Cron => W::Cron,
            TriggerKind::At => W::At,
            TriggerKind::Delay => W::Delay,
            TriggerKind::Every => W::Every,
            TriggerKind::After => W::After,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{DEFAULT_MAX_MEMORY_BYTES, RuntimeConfig};

    #[test]
    fn limits_above_the_host_maximum_are_refused() {
        let runtime = Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let limits = Limits {
            memory_bytes: DEFAULT_MAX_MEMORY_BYTES + 1,
            ..Limits::default()
        };
        let err = runtime.check_limits(&limits).unwrap_err();
        assert!(
            err.to_string().contains("above this host's maximum"),
            "{err}"
        );
    }
}
