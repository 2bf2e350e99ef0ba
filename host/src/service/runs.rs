//! Run operations of the facade ([`Ax`]): trigger (checked against the
//! priority bounds, the idempotency key rule and a disabled tenant), show,
//! list, logs, events, and run control (cancel, retry, rerun a step); and
//! bulk triggers, many runs of one task in one store write.

use super::record_of;
use crate::model::ids::RunId;
use crate::model::{Event, RunRecord, json_len};
use crate::scheduler::{TriggerRequest, admission};
use crate::service::{Ax, Error, ItemError, MAX_BATCH_RUNS, Result, check_batch_len};
use crate::store::{AttemptLogs, RunPage, RunQuery};
use crate::task::TaskSpec;

/// How long a cancel waits for the attempts it stopped to report (see
/// [`Ax::cancel_run`]): a stopped plugin reports within milliseconds (the
/// runtime interrupts it at its next epoch tick), so this bounds a stuck one
/// without keeping the caller long.
const CANCEL_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// How often a cancel reads the stored run back while it waits; the run is
/// written when its last attempt reports.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

impl Ax {
    /// Triggers a run; answers once it is durable. `false`: an existing run
    /// was returned for a known idempotency key.
    pub async fn trigger(&self, request: TriggerRequest) -> Result<(RunRecord, bool)> {
        self.check_trigger(&request)?;
        self.check_tenant_enabled(&request.tenant)?;
        let result = self.scheduler.trigger(request).await?;
        self.sync().await?;
        Ok(result)
    }

    /// Triggers up to [`MAX_BATCH_RUNS`] runs of one task, stored in one
    /// write and answered once durable, like [`Ax::trigger`] for each.
    ///
    /// All or nothing for what is wrong with the request itself: an item
    /// that fails the checks of a single trigger (priority, ceiling,
    /// idempotency key, input and params against the task's `params:`) refuses the whole batch with [`Error::Items`], one
    /// error per bad item, and nothing is created. What depends on the
    /// moment (the tenant's queue bound, its quotas, the task deleted
    /// meanwhile) refuses
    /// only the runs it hits: the answer holds, in request order, each
    /// run and whether it is new, or its own error.
    pub async fn trigger_batch(
        &self,
        requests: Vec<TriggerRequest>,
    ) -> Result<Vec<Result<(RunRecord, bool)>>> {
        check_batch_len(requests.len(), MAX_BATCH_RUNS, "runs")?;
        let errors: Vec<ItemError> = requests
            .iter()
            .enumerate()
            .filter_map(|(index, r)| {
                self.check_trigger(r)
                    .err()
                    .map(|e| ItemError::new(index, None, e))
            })
            .collect();
        if !errors.is_empty() {
            return Err(Error::Items {
                what: "runs",
                total: requests.len(),
                errors,
            });
        }
        if let Some(first) = requests.first() {
            self.check_tenant_enabled(&first.tenant)?;
            // The task is the batch's, not an item's: an unknown one refuses
            // the request (404), as it does a single trigger.
            let Some(record) = self.store.get_task(&first.tenant, &first.task)? else {
                return Err(Error::NotFound(format!("task `{}`", first.task)));
            };
            // An item whose input or params do not fit the task's `params:`
            // refuses the batch, as the checks above do: nothing is created.
            // Without params on either side there is nothing to check, and
            // the definition is not read (a bulk trigger of a big task).
            let declares = record.spec.get("params").is_some_and(|p| !p.is_null());
            if !declares
                && requests
                    .iter()
                    .all(|r| r.params.as_ref().is_none_or(|p| p.is_empty()))
            {
                return self.send_batch(requests).await;
            }
            let spec = TaskSpec::stored(&record.spec).map_err(|e| record_of(&first.task, e))?;
            let errors: Vec<ItemError> = requests
                .iter()
                .enumerate()
                .filter_map(|(index, r)| {
                    let e = spec
                        .manual_input(r.input.as_ref(), r.params.as_ref())
                        .err()?;
                    Some(ItemError::new(
                        index,
                        None,
                        Error::BadRequest(e.to_string()),
                    ))
                })
                .collect();
            if !errors.is_empty() {
                return Err(Error::Items {
                    what: "runs",
                    total: requests.len(),
                    errors,
                });
            }
        }
        self.send_batch(requests).await
    }

    /// Hands a checked batch to the scheduler; answers once durable.
    async fn send_batch(
        &self,
        requests: Vec<TriggerRequest>,
    ) -> Result<Vec<Result<(RunRecord, bool)>>> {
        let answers = self.scheduler.trigger_batch(requests).await?;
        // The batch's runs are one store write: refused for now, it is
        // refused whole (503 `store_unavailable`), not item by item.
        if let Some(e) = answers.iter().find_map(|a| match a {
            Err(crate::scheduler::Error::Store(e)) if e.is_unavailable() => Some(e.duplicate()),
            _ => None,
        }) {
            return Err(Error::Store(e));
        }
        self.sync().await?;
        Ok(answers
            .into_iter()
            .map(|a| a.map_err(Error::from))
            .collect())
    }

    /// The checks of a trigger that depend on the request alone: the
    /// priority's range and the tenant's ceiling, the input's size, the
    /// idempotency key's length (the rules are `scheduler::admission`'s).
    /// [`Ax::trigger`] and [`Ax::trigger_batch`] make them; the API makes
    /// them too while reading a batch, to list every bad item at once.
    pub fn check_trigger(&self, request: &TriggerRequest) -> Result<()> {
        let tenant = self.tenants.tenant(&request.tenant);
        if let Some(p) = request.priority {
            admission::check_priority(p, tenant.as_ref())?;
        }
        let limit = tenant.map_or(crate::tenant::DEFAULT_MAX_INPUT_BYTES, |t| {
            t.quota.input_bytes_limit()
        });
        let size = request.input.as_ref().map_or(0, json_len)
            + request.params.as_ref().map_or(0, json_len);
        admission::check_input_size(&request.tenant, size, limit)?;
        admission::check_idempotency_key(request.idempotency_key.as_deref())?;
        Ok(())
    }

    /// A disabled tenant's triggers are refused here, before the actor
    /// (which records a run of it that gets there anyway as refused).
    fn check_tenant_enabled(&self, tenant: &str) -> Result<()> {
        let disabled = self.tenants.tenant(tenant).is_some_and(|t| t.disabled);
        admission::check_enabled(tenant, disabled).map_err(Error::from)
    }

    /// One run of this tenant.
    pub fn get_run(&self, tenant: &str, id: &str) -> Result<RunRecord> {
        match self.store.get_run(id)? {
            Some(run) if run.tenant == tenant => Ok(run),
            _ => Err(Error::NotFound(format!("run `{id}`"))),
        }
    }

    /// Runs of this tenant, newest first.
    pub fn list_runs(&self, mut query: RunQuery) -> Result<RunPage> {
        query.limit = query.limit.clamp(1, 1000);
        Ok(self.store.list_runs(&query)?)
    }

    /// A run's captured output.
    pub fn run_logs(&self, tenant: &str, id: &str) -> Result<Vec<AttemptLogs>> {
        self.get_run(tenant, id)?;
        Ok(self.store.logs(id)?)
    }

    /// A run's state changes.
    pub fn run_events(&self, tenant: &str, id: &str) -> Result<Vec<Event>> {
        self.get_run(tenant, id)?;
        Ok(self.store.events(id)?)
    }

    /// Cancels a run, and answers the record it settles to when it can.
    ///
    /// The scheduler marks the run and its steps `cancelled` at once, but a
    /// running attempt stops a moment later and only then is recorded
    /// (outcome `cancelled`, end, fuel charged). Answering the record of
    /// the cancel itself would show that attempt with fuel 0 and no outcome
    /// in a run that reads as ended, a state the stored record leaves
    /// moments later. So the cancel waits, at most [`CANCEL_SETTLE`], until
    /// the stopped attempts have reported and answers the stored, settled
    /// record. An attempt that does not report in time is answered as it
    /// is, and the run says so (`attempts_stopping` in the API's view:
    /// [`RunRecord::attempts_stopping`]); a later read shows its outcome.
    pub async fn cancel_run(&self, tenant: &str, id: &RunId, actor: &str) -> Result<RunRecord> {
        self.get_run(tenant, id)?;
        let mut run = self.scheduler.cancel(id, actor).await?;
        self.sync().await?;
        let deadline = tokio::time::Instant::now() + CANCEL_SETTLE;
        while run.attempts_stopping() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(CANCEL_POLL).await;
            if let Some(stored) = self.store.get_run(id)? {
                run = stored;
            }
        }
        Ok(run)
    }

    /// Retries a failed run from its failed steps.
    pub async fn retry_run(&self, tenant: &str, id: &RunId, actor: &str) -> Result<RunRecord> {
        self.get_run(tenant, id)?;
        let run = self.scheduler.retry(id, actor).await?;
        self.sync().await?;
        Ok(run)
    }

    /// Runs one step of a finished run again, with everything downstream of it.
    pub async fn rerun_step(
        &self,
        tenant: &str,
        id: &RunId,
        step: &str,
        actor: &str,
    ) -> Result<RunRecord> {
        self.get_run(tenant, id)?;
        let run = self.scheduler.rerun_step(id, step, actor).await?;
        self.sync().await?;
        Ok(run)
    }
}
