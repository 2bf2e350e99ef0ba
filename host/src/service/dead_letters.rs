//! Dead-letter operations of the facade ([`Ax`]): list a tenant's dead
//! letters, record a person's resolution, requeue the step.

use crate::model::{DeadLetter, RunRecord};
use crate::service::{Ax, Error, Result};

impl Ax {
    /// A tenant's dead letters, newest first.
    pub fn list_dead_letters(&self, tenant: &str, open_only: bool) -> Result<Vec<DeadLetter>> {
        Ok(self.store.list_dead_letters(tenant, open_only)?)
    }

    fn dead_letter(&self, tenant: &str, id: &str) -> Result<DeadLetter> {
        match self.store.get_dead_letter(id)? {
            Some(d) if d.tenant == tenant => Ok(d),
            _ => Err(Error::NotFound(format!("dead letter `{id}`"))),
        }
    }

    /// Records a person's resolution of a dead letter.
    pub async fn resolve_dead_letter(
        &self,
        tenant: &str,
        id: &str,
        resolution: &str,
    ) -> Result<DeadLetter> {
        let mut dead = self.dead_letter(tenant, id)?;
        if resolution.trim().is_empty() {
            return Err(Error::BadRequest("resolution must not be empty".into()));
        }
        if dead.resolution.is_some() {
            return Err(Error::Conflict(format!(
                "dead letter `{id}` is already resolved"
            )));
        }
        dead.resolution = Some(resolution.to_string());
        dead.resolved_at = Some(self.clock.now_ms());
        self.store.put_dead_letter(&dead)?;
        self.sync().await?;
        Ok(dead)
    }

    /// Requeues a dead-lettered step.
    pub async fn requeue_dead_letter(
        &self,
        tenant: &str,
        id: &str,
        actor: &str,
    ) -> Result<RunRecord> {
        self.dead_letter(tenant, id)?;
        let run = self.scheduler.requeue(id, actor).await?;
        self.sync().await?;
        Ok(run)
    }
}
