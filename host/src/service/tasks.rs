//! Task operations of the facade ([`Ax`]): save a definition (parsed,
//! validated against the caps, the tenant's ceilings, its plugins and the
//! `after` graph), many at once all or nothing (bulk apply), show, list by
//! page, delete, pause and resume.

use std::collections::{HashMap, HashSet};

use crate::dag;
use crate::model::{RECORD_FORMAT, ScheduleState, TaskRecord};
use crate::schedule::Trigger;
use crate::scheduler::clock::from_ms;
use crate::service::{Ax, Error, ItemError, MAX_BATCH_TASKS, Result, check_batch_len, record_of};
use crate::store;
use crate::task::{self, TaskSpec};

impl Ax {
    pub(super) fn list_specs(
        &self,
        tenant: &str,
    ) -> Result<Vec<(TaskRecord, std::sync::Arc<TaskSpec>)>> {
        self.store
            .list_tasks(Some(tenant))?
            .into_iter()
            .map(|t| {
                let spec = TaskSpec::stored(&t.spec).map_err(|e| record_of(&t.name, e))?;
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
        let prepared = self.prepare_task(tenant, Some(name), body).await?;
        self.check_after_cycles(tenant, &[&prepared])
            .map_err(|(_, e)| e)?;
        self.scheduler.put_task(prepared.record.clone()).await?;
        self.sync().await?;
        Ok((prepared.record, prepared.created))
    }

    /// Applies many definitions (YAML or JSON text, each with the name the
    /// client knows it by, e.g. its file) all or nothing: each is checked as
    /// [`Ax::put_task`] checks one, and the `after` triggers of the whole set
    /// together with the saved tasks; if any fails nothing is stored and
    /// [`Error::Items`] lists every bad one. Otherwise all are stored in one
    /// store write (through the scheduler, which arms their triggers) and
    /// are durable when this returns. Returns the records with their
    /// schedule states, in order, and whether each was created.
    pub async fn put_tasks(
        &self,
        tenant: &str,
        items: &[(Option<String>, String)],
    ) -> Result<Vec<(TaskRecord, ScheduleState, bool)>> {
        check_batch_len(items.len(), MAX_BATCH_TASKS, "tasks")?;
        let mut prepared = Vec::with_capacity(items.len());
        let mut errors = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::with_capacity(items.len());
        for (index, (file, body)) in items.iter().enumerate() {
            match self.prepare_task(tenant, None, body).await {
                Ok(p) => {
                    if let Some(first) = seen.insert(p.record.name.clone(), index) {
                        let other = items[first]
                            .0
                            .clone()
                            .unwrap_or_else(|| format!("tasks[{first}]"));
                        errors.push(ItemError::new(
                            index,
                            file.clone(),
                            Error::Invalid {
                                path: Some("name".into()),
                                message: format!(
                                    "task `{}` is defined twice in this batch (also in {other})",
                                    p.record.name
                                ),
                            },
                        ));
                    }
                    prepared.push(p);
                }
                Err(e) => errors.push(ItemError::new(index, file.clone(), e)),
            }
        }
        if errors.is_empty() {
            let all: Vec<&Prepared> = prepared.iter().collect();
            if let Err((index, e)) = self.check_after_cycles(tenant, &all) {
                errors.push(ItemError::new(index, items[index].0.clone(), e));
            }
        }
        if !errors.is_empty() {
            return Err(Error::Items {
                what: "tasks",
                total: items.len(),
                errors,
            });
        }
        let records = prepared
            .iter()
            .map(|p| (p.record.clone(), Some(p.parsed.clone())))
            .collect();
        let schedules = self.scheduler.put_tasks(records).await?;
        self.sync().await?;
        Ok(prepared
            .into_iter()
            .zip(schedules)
            .map(|(p, s)| (p.record, s, p.created))
            .collect())
    }

    /// Parses and checks one definition and makes the record saving it
    /// would store (its version and creation time from the saved one, if
    /// any). `name`: the name it was sent to, which the definition's must
    /// match. The `after` graph is checked apart, for all definitions saved
    /// together ([`Ax::check_after_cycles`]).
    async fn prepare_task(&self, tenant: &str, name: Option<&str>, body: &str) -> Result<Prepared> {
        let spec = task::parse(body)?;
        // Well-formed, but not this resource: an invalid document (422 with
        // its path), like any other field that disagrees with its context.
        if let Some(name) = name
            && spec.name != name
        {
            return Err(Error::Invalid {
                path: Some("name".into()),
                message: format!(
                    "the definition is named `{}` but was sent to `{name}`",
                    spec.name
                ),
            });
        }
        let name = spec.name.as_str();
        task::validate(&spec, &self.caps_for(tenant))?;
        self.check_priority(tenant, spec.priority)?;
        self.check_http_ceiling(tenant, &spec)?;
        self.check_alert_webhook(tenant, &spec).await?;
        // An exact version must exist; a range or a tag must select one now
        // (which one an attempt runs is decided when it starts).
        for (i, step) in spec.steps.iter().enumerate() {
            // A version still compiling may be named (its runs wait for it);
            // one that failed to compile cannot run.
            match store::resolve_plugin(&*self.store, tenant, &step.plugin)? {
                Err(unresolved) => {
                    let mut message = unresolved.0;
                    if step.plugin.version.exact().is_some() {
                        message.push_str(&self.uploaded_versions(tenant, &step.plugin.name)?);
                    }
                    return Err(Error::Invalid {
                        path: Some(format!("steps[{i}].plugin")),
                        message,
                    });
                }
                Ok(p) if p.status == crate::model::PluginStatus::Failed => {
                    return Err(Error::Invalid {
                        path: Some(format!("steps[{i}].plugin")),
                        message: format!(
                            "plugin {}@{} failed to compile ({}); upload a version that compiles",
                            p.name,
                            p.version,
                            p.error.as_deref().unwrap_or("no reason recorded")
                        ),
                    });
                }
                Ok(_) => {}
            }
        }
        let now = self.clock.now();
        let existing = self.store.get_task(tenant, name)?;
        let created_at = existing
            .as_ref()
            .map_or(now.timestamp_millis(), |t| t.created_at);
        let trigger =
            Trigger::compile(spec.trigger.as_ref(), from_ms(created_at)).map_err(|e| {
                Error::Invalid {
                    path: Some("trigger".into()),
                    message: e.to_string(),
                }
            })?;
        let record = TaskRecord {
            format: RECORD_FORMAT,
            tenant: tenant.to_string(),
            name: name.to_string(),
            spec: serde_json::to_value(&spec)
                .map_err(|source| Error::Record {
                    what: format!("the definition of task `{name}`"),
                    source,
                })?
                .into(),
            source: body.to_string(),
            created_at,
            updated_at: now.timestamp_millis(),
            version: existing.as_ref().map_or(1, |t| t.version + 1),
        };
        Ok(Prepared {
            record,
            after: spec
                .trigger
                .as_ref()
                .map(|t| t.after.clone())
                .unwrap_or_default(),
            parsed: crate::scheduler::ParsedTask {
                spec: std::sync::Arc::new(spec),
                trigger: std::sync::Arc::new(trigger),
            },
            created: existing.is_none(),
        })
    }

    /// What a missing exact version's error adds: the versions of `name`
    /// that are uploaded, oldest first (`; uploaded versions of …: 0.1.0,
    /// 0.2.0`), or that none is.
    fn uploaded_versions(&self, tenant: &str, name: &str) -> Result<String> {
        let mut versions: Vec<semver::Version> = Vec::new();
        let mut other: Vec<String> = Vec::new();
        for p in self.store.list_plugins(tenant)? {
            if p.name == name {
                match semver::Version::parse(&p.version) {
                    Ok(v) => versions.push(v),
                    Err(_) => other.push(p.version),
                }
            }
        }
        versions.sort();
        let mut all: Vec<String> = versions.iter().map(ToString::to_string).collect();
        all.extend(other);
        Ok(if all.is_empty() {
            format!("; no version of `{name}` is uploaded (`ax plugin push`)")
        } else {
            format!("; uploaded versions of `{name}`: {}", all.join(", "))
        })
    }

    /// Refuses `after` triggers that would close a cycle across tasks, with
    /// `records` saved (replacing the saved tasks of their names) together:
    /// the index in `records` of a task on the cycle, and the error naming it.
    fn check_after_cycles(
        &self,
        tenant: &str,
        new: &[&Prepared],
    ) -> std::result::Result<(), (usize, Error)> {
        let new: Vec<(&str, &[String])> = new
            .iter()
            .map(|p| (p.record.name.as_str(), p.after.as_slice()))
            .collect();
        // A cycle passes through a new task with `after` edges: the saved
        // tasks have none among themselves, and a task without edges closes none.
        if new.iter().all(|(_, a)| a.is_empty()) {
            return Ok(());
        }
        let names: HashSet<&str> = new.iter().map(|(n, _)| *n).collect();
        let saved: Vec<(String, Vec<String>)> = self
            .list_specs(tenant)
            .map_err(|e| (0, e))?
            .into_iter()
            .filter(|(t, _)| !names.contains(t.name.as_str()))
            .map(|(t, s)| {
                (
                    t.name,
                    s.trigger
                        .as_ref()
                        .map(|t| t.after.clone())
                        .unwrap_or_default(),
                )
            })
            .collect();
        // The new tasks first, so the cycle (which passes through one) is
        // named from the first of them on it.
        let mut nodes: Vec<(&str, &[String])> = Vec::with_capacity(new.len() + saved.len());
        nodes.extend(new.iter().copied());
        nodes.extend(saved.iter().map(|(n, a)| (n.as_str(), a.as_slice())));
        match dag::find_named_cycle(&nodes) {
            None => Ok(()),
            Some(cycle) => {
                let index = new
                    .iter()
                    .position(|(n, _)| cycle.iter().any(|c| c == n))
                    .unwrap_or(0);
                Err((
                    index,
                    Error::Invalid {
                        path: Some("trigger.after".into()),
                        message: format!(
                            "`after` triggers would form a cycle: {} (each task runs after the next)",
                            cycle.join(" -> ")
                        ),
                    },
                ))
            }
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

/// A checked definition, ready to store.
struct Prepared {
    record: TaskRecord,
    /// Its definition parsed and trigger compiled by the check (anchored at
    /// `record.created_at`), handed to the scheduler with a bulk apply.
    parsed: crate::scheduler::ParsedTask,
    /// Its `after` trigger's upstream tasks (for the cycle check).
    after: Vec<String>,
    /// No task of this name was saved.
    created: bool,
}

/// A page of tasks with their schedules, and the cursor of the next page.
pub type TaskPage = (Vec<(TaskRecord, Option<ScheduleState>)>, Option<String>);
