//! Run operations of the facade ([`Ax`]): trigger (checked against the
//! priority bounds, the idempotency key rule and a disabled tenant), show,
//! list, logs, events, and run control (cancel, retry, rerun a step).

use crate::model::ids::RunId;
use crate::model::priority::MAX_PRIORITY;
use crate::model::{Event, RunRecord};
use crate::scheduler::TriggerRequest;
use crate::service::{Ax, Error, Result};
use crate::store::{AttemptLogs, RunPage, RunQuery};

impl Ax {
    /// Triggers a run; answers once it is durable. `false`: an existing run
    /// was returned for a known idempotency key.
    pub async fn trigger(&self, request: TriggerRequest) -> Result<(RunRecord, bool)> {
        if let Some(p) = request.priority
            && p > MAX_PRIORITY
        {
            return Err(Error::BadRequest(format!(
                "priority {p} is not in 0..={MAX_PRIORITY}"
            )));
        }
        if let Some(p) = request.priority {
            self.check_priority(&request.tenant, p)?;
        }
        // Characters, as the API document's `maxLength` counts them.
        if let Some(key) = &request.idempotency_key
            && (key.is_empty() || key.chars().count() > 256)
        {
            return Err(Error::BadRequest(
                "idempotency_key must be 1 to 256 characters".into(),
            ));
        }
        if self
            .tenants
            .tenant(&request.tenant)
            .is_some_and(|t| t.disabled)
        {
            return Err(Error::Forbidden(format!(
                "tenant `{}` is disabled; enable it to trigger runs",
                request.tenant
            )));
        }
        let result = self.scheduler.trigger(request).await?;
        self.sync().await?;
        Ok(result)
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

    /// Cancels a run.
    pub async fn cancel_run(&self, tenant: &str, id: &RunId, actor: &str) -> Result<RunRecord> {
        self.get_run(tenant, id)?;
        let run = self.scheduler.cancel(id, actor).await?;
        self.sync().await?;
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
