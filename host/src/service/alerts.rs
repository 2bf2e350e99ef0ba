//! Alert outbox operations of the facade ([`Ax`]): list a tenant's alerts,
//! retry a dead one. The outbox and its worker are the scheduler's
//! (`scheduler/alerts`).

use crate::scheduler::alerts::RetryError;
use crate::service::{Ax, Error, Result};
use crate::store::{AlertQuery, OutboxAlert};

impl Ax {
    /// A tenant's outbox alerts, newest first, with the cursor of the next
    /// page.
    pub fn list_alerts(&self, query: &AlertQuery) -> Result<(Vec<OutboxAlert>, Option<String>)> {
        Ok(self.scheduler.stats().alerts.list(query)?)
    }

    /// Puts a tenant's dead alert back to `pending` (attempts reset).
    pub async fn retry_alert(&self, tenant: &str, id: &str) -> Result<OutboxAlert> {
        let alert = self
            .scheduler
            .stats()
            .alerts
            .retry(tenant, id)
            .map_err(|e| match e {
                RetryError::NotFound(id) => Error::NotFound(format!("alert `{id}`")),
                e @ RetryError::NotDead(..) => Error::Conflict(e.to_string()),
                RetryError::Store(e) => Error::from(e),
            })?;
        self.sync().await?;
        Ok(alert)
    }
}
