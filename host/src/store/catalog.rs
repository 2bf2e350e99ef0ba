//! [`Catalog`]: what tenants define — plugin blobs and versions, plugin
//! tags, tasks and their schedule states, with the indexes the scheduler
//! reads them by (next fire, downstream tasks).

use super::Result;
use crate::model::{Millis, PluginRecord, PluginTag, ScheduleState, TaskRecord};

/// Plugins, tags, tasks and schedules.
pub trait Catalog {
    /// Stores component bytes as a content-addressed blob; returns its
    /// sha256 (hex, [`super::rules::digest_of`]).
    fn put_blob(&self, bytes: &[u8]) -> Result<String>;
    /// Reads a blob by digest.
    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>>;
    /// Deletes a blob (when no plugin record names it any more).
    fn delete_blob(&self, digest: &str) -> Result<()>;
    /// Creates or replaces a plugin record.
    fn put_plugin(&self, plugin: &PluginRecord) -> Result<()>;
    /// One plugin version.
    fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<Option<PluginRecord>>;
    /// A tenant's plugins, by name then version.
    fn list_plugins(&self, tenant: &str) -> Result<Vec<PluginRecord>>;
    /// Deletes a plugin version; true if it existed.
    fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool>;
    /// Creates or moves a plugin tag (keyed by tenant, plugin name and tag).
    fn put_plugin_tag(&self, tag: &PluginTag) -> Result<()>;
    /// One plugin tag.
    fn get_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<Option<PluginTag>>;
    /// A tenant's plugin tags, by plugin name then tag.
    fn list_plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>>;
    /// Deletes a plugin tag; whether it existed.
    fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<bool>;

    /// Creates or replaces tasks, each with its schedule state, in one
    /// atomic write: all are stored or none (bulk apply; one task is
    /// [`super::StoreExt::put_task`]).
    fn put_tasks(&self, tasks: &[(TaskRecord, ScheduleState)]) -> Result<()>;
    /// One task.
    fn get_task(&self, tenant: &str, name: &str) -> Result<Option<TaskRecord>>;
    /// A tenant's tasks by name (`None`: every tenant's).
    fn list_tasks(&self, tenant: Option<&str>) -> Result<Vec<TaskRecord>>;
    /// One page of a tenant's tasks by name: at most `limit` named after
    /// `after` (exclusive), read as a range (a page costs its size, not the
    /// tenant's task count).
    fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>>;
    /// Deletes a task and its schedule state; true if it existed.
    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool>;

    /// Writes a task's schedule state.
    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()>;
    /// A task's schedule state.
    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>>;
    /// The next-fire index: unpaused schedules whose next fire is in
    /// `from..=until`, earliest first (ties by tenant, then task), at most
    /// `limit`. Every write of a schedule keeps the index in step with it in
    /// the same atomic write, so the scheduler can hold only the fires due
    /// within its window and read the rest as time moves.
    fn due_schedules(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>>;
    /// The tenant's tasks whose `trigger.after` names `upstream`, by name
    /// (an index kept with every task write; see [`TaskRecord::upstreams`]).
    fn downstream_tasks(&self, tenant: &str, upstream: &str) -> Result<Vec<String>>;
}
