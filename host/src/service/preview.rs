//! Previews of the facade ([`Ax`]): when a task's trigger fires next, and
//! when a cron expression would fire in a zone. Nothing is written.

use chrono::{DateTime, Utc};

use crate::schedule::{CronSchedule, Trigger};
use crate::scheduler::clock::from_ms;
use crate::service::{Ax, Error, Result, record_of};
use crate::task::TaskSpec;

/// Re-exported for the API: formats an instant in a zone with its weekday.
pub use crate::schedule::describe;

/// Most fire instants a preview returns.
pub const MAX_PREVIEW: usize = 100;

impl Ax {
    /// The next `count` fire instants of a task's trigger.
    pub fn next_fires(&self, tenant: &str, name: &str, count: usize) -> Result<Vec<DateTime<Utc>>> {
        let (task, schedule) = self.get_task(tenant, name)?;
        let spec = TaskSpec::stored(&task.spec).map_err(|e| record_of(name, e))?;
        let trigger = Trigger::compile(spec.trigger.as_ref(), from_ms(task.created_at)).map_err(
            |source| Error::Trigger {
                task: name.to_string(),
                source,
            },
        )?;
        let Some(first) = schedule.and_then(|s| if s.paused { None } else { s.next_fire }) else {
            return Ok(Vec::new());
        };
        let mut out = vec![from_ms(first)];
        while out.len() < count.min(MAX_PREVIEW) {
            match trigger.next_after(*out.last().expect("non-empty")) {
                Some(next) => out.push(next),
                None => break,
            }
        }
        Ok(out)
    }

    /// The next `count` instants of a cron expression in a zone, after `from` (default now).
    pub fn cron_next(
        &self,
        expr: &str,
        tz: &str,
        from: Option<DateTime<Utc>>,
        count: usize,
    ) -> Result<Vec<DateTime<Utc>>> {
        let cron = CronSchedule::parse(expr, tz).map_err(|e| Error::Invalid {
            path: Some("expr".into()),
            message: e.to_string(),
        })?;
        Ok(cron.upcoming(
            from.unwrap_or_else(|| self.clock.now()),
            count.clamp(1, MAX_PREVIEW),
        ))
    }
}
