//! Task operations of the facade ([`Ax`]): save a definition (parsed,
//! validated against the caps, the tenant's ceilings, its plugins and the
//! `after` graph), show, list by page, delete, pause and resume.

use crate::dag;
use crate::model::{RECORD_FORMAT, ScheduleState, TaskRecord};
use crate::schedule::Trigger;
use crate::scheduler::clock::from_ms;
use crate::service::{Ax, Error, Result, record_of};
use crate::task::{self, TaskSpec};

impl Ax {
    pub(super) fn list_specs(&self, tenant: &str) -> Result<Vec<(TaskRecord, TaskSpec)>> {
        self.store
            .list_tasks(Some(tenant))?
            .into_iter()
            .map(|t| {
                let spec =
                    serde_json::from_value(t.spec.clone()).map_err(|e| record_of(&t.name, e))?;
                Ok((t, spec))
            })
            .collect()
    }

    /// Parses, validates and stores a task definition (YAML or JSON), and
    /// (re)arms its trigger. Returns the record and whether it was created.
    pub async fn put_task(
        &self,
        tenant: &str,
        name: &str,
        body: &str,
    ) -> Result<(TaskRecord, bool)> {
        let spec = task::parse(body)?;
        // Well-formed, but not this resource: an invalid document (422 with
        // its path), like any other field that disagrees with its context.
        if spec.name != name {
            return Err(Error::Invalid {
                path: Some("name".into()),
                message: format!(
                    "the definition is named `{}` but was sent to `{name}`",
                    spec.name
                ),
            });
        }
        task::validate(&spec, &self.caps_for(tenant))?;
        self.check_priority(tenant, spec.priority)?;
        self.check_http_ceiling(tenant, &spec)?;
        self.check_alert_webhook(tenant, &spec).await?;
        for (i, step) in spec.steps.iter().enumerate() {
            if self
                .store
                .get_plugin(tenant, &step.plugin.name, &step.plugin.version)?
                .is_none()
            {
                return Err(Error::Invalid {
                    path: Some(format!("steps[{i}].plugin")),
                    message: format!("plugin {} is not uploaded for this tenant", step.plugin),
                });
            }
        }
        let now = self.clock.now();
        let existing = self.store.get_task(tenant, name)?;
        let created_at = existing
            .as_ref()
            .map_or(now.timestamp_millis(), |t| t.created_at);
        Trigger::compile(spec.trigger.as_ref(), from_ms(created_at)).map_err(|e| {
            Error::Invalid {
                path: Some("trigger".into()),
                message: e.to_string(),
            }
        })?;
        self.check_after_cycle(tenant, &spec)?;
        let record = TaskRecord {
            format: RECORD_FORMAT,
            tenant: tenant.to_string(),
            name: name.to_string(),
            spec: serde_json::to_value(&spec).map_err(|source| Error::Record {
                what: format!("the definition of task `{name}`"),
                source,
            })?,
            source: body.to_string(),
            created_at,
            updated_at: now.timestamp_millis(),
            version: existing.as_ref().map_or(1, |t| t.version + 1),
        };
        self.scheduler.put_task(record.clone()).await?;
        self.sync().await?;
        Ok((record, existing.is_none()))
    }

    /// Refuses an `after` trigger that would close a cycle across tasks.
    fn check_after_cycle(&self, tenant: &str, spec: &TaskSpec) -> Result<()> {
        let Some(after) = spec
            .trigger
            .as_ref()
            .map(|t| t.after.clone())
            .filter(|a| !a.is_empty())
        else {
            return Ok(());
        };
        // The new task first, so the cycle (which must pass through it: the
        // saved tasks have none) is named from it.
        let saved: Vec<(String, Vec<String>)> = self
            .list_specs(tenant)?
            .into_iter()
            .filter(|(t, _)| t.name != spec.name)
            .map(|(t, s)| (t.name, s.trigger.map(|t| t.after).unwrap_or_default()))
            .collect();
        let mut nodes: Vec<(&str, &[String])> = Vec::with_capacity(saved.len() + 1);
        nodes.push((&spec.name, &after));
        nodes.extend(saved.iter().map(|(n, a)| (n.as_str(), a.as_slice())));
        match dag::find_named_cycle(&nodes) {
            None => Ok(()),
            Some(cycle) => Err(Error::Invalid {
                path: Some("trigger.after".into()),
                message: format!(
                    "`after` triggers would form a cycle: {} (each task runs after the next)",
                    cycle.join(" -> ")
                ),
            }),
        }
    }

    /// One task.
    pub fn get_task(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<(TaskRecord, Option<ScheduleState>)> {
        let task = self
            .store
            .get_task(tenant, name)?
            .ok_or_else(|| Error::NotFound(format!("task `{name}`")))?;
        Ok((task, self.store.get_schedule(tenant, name)?))
    }

    /// A tenant's tasks with their schedule states.
    pub fn list_tasks(&self, tenant: &str) -> Result<Vec<(TaskRecord, Option<ScheduleState>)>> {
        self.store
            .list_tasks(Some(tenant))?
            .into_iter()
            .map(|t| {
                let s = self.store.get_schedule(tenant, &t.name)?;
                Ok((t, s))
            })
            .collect()
    }

    /// One page of the tenant's tasks, by name: at most `limit` named after
    /// `after` (a cursor: the last name of the previous page), and the
    /// cursor of the next page when more follow. The store reads the page's
    /// range only (one task more, to know whether another page follows).
    pub fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage> {
        // A page holds at least one task, or it could never move on.
        let limit = limit.max(1);
        let mut tasks = self
            .store
            .list_tasks_page(tenant, after, limit.saturating_add(1))?;
        let next = (tasks.len() > limit).then(|| tasks[limit - 1].name.clone());
        tasks.truncate(limit);
        let page = tasks
            .into_iter()
            .map(|t| {
                let s = self.store.get_schedule(tenant, &t.name)?;
                Ok((t, s))
            })
            .collect::<Result<_>>()?;
        Ok((page, next))
    }

    /// Deletes a task (its runs stay until retention removes them).
    pub async fn delete_task(&self, tenant: &str, name: &str) -> Result<()> {
        if !self.scheduler.delete_task(tenant, name).await? {
            return Err(Error::NotFound(format!("task `{name}`")));
        }
        self.sync().await
    }

    /// Pauses or resumes a task's trigger.
    pub async fn set_paused(
        &self,
        tenant: &str,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleState> {
        self.get_task(tenant, name)?;
        let schedule = self.scheduler.set_paused(tenant, name, paused).await?;
        self.sync().await?;
        Ok(schedule)
    }
}

/// A page of tasks with their schedules, and the cursor of the next page.
pub type TaskPage = (Vec<(TaskRecord, Option<ScheduleState>)>, Option<String>);
