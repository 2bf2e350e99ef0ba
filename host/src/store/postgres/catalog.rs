//! [`Catalog`] on PostgreSQL: plugin blobs (`ax_blobs`), plugin versions
//! (`ax_plugins`) and tags (`ax_plugin_tags`), tasks (`ax_tasks`) with the
//! `after` index (`ax_task_upstreams`), and schedule states
//! (`ax_schedules`, whose `next_fire` column is the next-fire index).
//!
//! Every task write keeps its indexes in the same transaction: the
//! upstream rows are rewritten from [`TaskRecord::upstreams`], and a
//! schedule's `next_fire` is its next fire while unpaused, NULL otherwise
//! (what [`Catalog::due_schedules`] reads, through a partial index).

use super::rows::{execute, record, records, sql_limit};
use super::{PgResult, PgStore, Tx, encode, key, name};
use crate::model::{Millis, PluginRecord, PluginTag, ScheduleState, TaskRecord};
use crate::store::rules::digest_of;
use crate::store::{Catalog, Result};

/// The next-fire window (`$1..=$2`, `$3` schedules at most): the partial
/// index `ax_schedules_next_fire`, in its order (`plans_tests.rs` checks
/// the plan).
pub(super) const DUE_SCHEDULES: &str = "SELECT record FROM ax_schedules
     WHERE next_fire IS NOT NULL AND next_fire >= $1 AND next_fire <= $2
     ORDER BY next_fire, tenant, task LIMIT $3";

/// Writes a schedule state with its next-fire index entry (inside a
/// transaction that may write other things: `put_tasks`, a fire's run).
pub(super) async fn write_schedule(tx: &Tx<'_>, schedule: &ScheduleState) -> PgResult<()> {
    // The next-fire index holds unpaused schedules only.
    let next_fire: Option<Millis> = if schedule.paused {
        None
    } else {
        schedule.next_fire
    };
    tx.execute(
        "INSERT INTO ax_schedules (tenant, task, next_fire, record) VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant, task) DO UPDATE
         SET next_fire = excluded.next_fire, record = excluded.record",
        &[
            &key(&schedule.tenant),
            &key(&schedule.task),
            &next_fire,
            &encode(schedule)?,
        ],
    )
    .await?;
    Ok(())
}

/// Writes a task with its `after` index rows (replacing the old ones).
async fn write_task(tx: &Tx<'_>, task: &TaskRecord) -> PgResult<()> {
    let (tenant, task_name) = (key(&task.tenant), key(&task.name));
    tx.execute(
        "INSERT INTO ax_tasks (tenant, name, record) VALUES ($1, $2, $3)
         ON CONFLICT (tenant, name) DO UPDATE SET record = excluded.record",
        &[&tenant, &task_name, &encode(task)?],
    )
    .await?;
    tx.execute(
        "DELETE FROM ax_task_upstreams WHERE tenant = $1 AND task = $2",
        &[&tenant, &task_name],
    )
    .await?;
    for upstream in task.upstreams() {
        tx.execute(
            "INSERT INTO ax_task_upstreams (tenant, upstream, task) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            &[&tenant, &key(&upstream), &task_name],
        )
        .await?;
    }
    Ok(())
}

impl Catalog for PgStore {
    fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        let digest = digest_of(bytes);
        execute(
            &self.db,
            "INSERT INTO ax_blobs (digest, bytes) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&key(&digest), &bytes],
        )?;
        Ok(digest)
    }

    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        self.db.with(async |c| {
            let row = c
                .query_opt(
                    "SELECT bytes FROM ax_blobs WHERE digest = $1",
                    &[&key(digest)],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn delete_blob(&self, digest: &str) -> Result<()> {
        execute(
            &self.db,
            "DELETE FROM ax_blobs WHERE digest = $1",
            &[&key(digest)],
        )?;
        Ok(())
    }

    fn put_plugin(&self, plugin: &PluginRecord) -> Result<()> {
        let record = encode(plugin).map_err(|e| self.db.fail(e))?;
        execute(
            &self.db,
            "INSERT INTO ax_plugins (tenant, name, version, digest, record)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant, name, version) DO UPDATE
             SET digest = excluded.digest, record = excluded.record",
            &[
                &key(&plugin.tenant),
                &key(&plugin.name),
                &key(&plugin.version),
                &key(&plugin.digest),
                &record,
            ],
        )?;
        Ok(())
    }

    fn get_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<Option<PluginRecord>> {
        record(
            &self.db,
            &format!("plugin {tenant}/{name}@{version}"),
            "SELECT record FROM ax_plugins WHERE tenant = $1 AND name = $2 AND version = $3",
            &[&key(tenant), &key(name), &key(version)],
        )
    }

    fn list_plugins(&self, tenant: &str) -> Result<Vec<PluginRecord>> {
        records(
            &self.db,
            &format!("plugin of {tenant}"),
            "SELECT record FROM ax_plugins WHERE tenant = $1 ORDER BY name, version",
            &[&key(tenant)],
        )
    }

    fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool> {
        let deleted = execute(
            &self.db,
            "DELETE FROM ax_plugins WHERE tenant = $1 AND name = $2 AND version = $3",
            &[&key(tenant), &key(name), &key(version)],
        )?;
        Ok(deleted > 0)
    }

    fn put_plugin_tag(&self, tag: &PluginTag) -> Result<()> {
        let record = encode(tag).map_err(|e| self.db.fail(e))?;
        execute(
            &self.db,
            "INSERT INTO ax_plugin_tags (tenant, name, tag, record) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, name, tag) DO UPDATE SET record = excluded.record",
            &[&key(&tag.tenant), &key(&tag.name), &key(&tag.tag), &record],
        )?;
        Ok(())
    }

    fn get_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<Option<PluginTag>> {
        record(
            &self.db,
            &format!("plugin tag {tenant}/{name}:{tag}"),
            "SELECT record FROM ax_plugin_tags WHERE tenant = $1 AND name = $2 AND tag = $3",
            &[&key(tenant), &key(name), &key(tag)],
        )
    }

    fn list_plugin_tags(&self, tenant: &str) -> Result<Vec<PluginTag>> {
        records(
            &self.db,
            &format!("plugin tag of {tenant}"),
            "SELECT record FROM ax_plugin_tags WHERE tenant = $1 ORDER BY name, tag",
            &[&key(tenant)],
        )
    }

    fn delete_plugin_tag(&self, tenant: &str, name: &str, tag: &str) -> Result<bool> {
        let deleted = execute(
            &self.db,
            "DELETE FROM ax_plugin_tags WHERE tenant = $1 AND name = $2 AND tag = $3",
            &[&key(tenant), &key(name), &key(tag)],
        )?;
        Ok(deleted > 0)
    }

    fn put_tasks(&self, tasks: &[(TaskRecord, ScheduleState)]) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        // One transaction: a reader sees all of them or none.
        self.db.transaction(async |tx| {
            for (task, schedule) in tasks {
                write_task(tx, task).await?;
                write_schedule(tx, schedule).await?;
            }
            Ok(())
        })
    }

    fn get_task(&self, tenant: &str, name: &str) -> Result<Option<TaskRecord>> {
        record(
            &self.db,
            &format!("task {tenant}/{name}"),
            "SELECT record FROM ax_tasks WHERE tenant = $1 AND name = $2",
            &[&key(tenant), &key(name)],
        )
    }

    fn list_tasks(&self, tenant: Option<&str>) -> Result<Vec<TaskRecord>> {
        match tenant {
            Some(tenant) => records(
                &self.db,
                &format!("task of {tenant}"),
                "SELECT record FROM ax_tasks WHERE tenant = $1 ORDER BY name",
                &[&key(tenant)],
            ),
            None => records(
                &self.db,
                "task",
                "SELECT record FROM ax_tasks ORDER BY tenant, name",
                &[],
            ),
        }
    }

    fn list_tasks_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        let what = format!("task of {tenant}");
        let limit = sql_limit(limit);
        // A range of the primary key (tenant, name): a page costs its size.
        match after {
            Some(after) => records(
                &self.db,
                &what,
                "SELECT record FROM ax_tasks WHERE tenant = $1 AND name > $2
                 ORDER BY name LIMIT $3",
                &[&key(tenant), &key(after), &limit],
            ),
            None => records(
                &self.db,
                &what,
                "SELECT record FROM ax_tasks WHERE tenant = $1 ORDER BY name LIMIT $2",
                &[&key(tenant), &limit],
            ),
        }
    }

    fn delete_task(&self, tenant: &str, name: &str) -> Result<bool> {
        let (tenant, name) = (key(tenant), key(name));
        self.db.transaction(async |tx| {
            tx.execute(
                "DELETE FROM ax_schedules WHERE tenant = $1 AND task = $2",
                &[&tenant, &name],
            )
            .await?;
            tx.execute(
                "DELETE FROM ax_task_upstreams WHERE tenant = $1 AND task = $2",
                &[&tenant, &name],
            )
            .await?;
            let deleted = tx
                .execute(
                    "DELETE FROM ax_tasks WHERE tenant = $1 AND name = $2",
                    &[&tenant, &name],
                )
                .await?;
            Ok(deleted > 0)
        })
    }

    fn put_schedule(&self, schedule: &ScheduleState) -> Result<()> {
        self.db
            .transaction(async |tx| write_schedule(tx, schedule).await)
    }

    fn get_schedule(&self, tenant: &str, task: &str) -> Result<Option<ScheduleState>> {
        record(
            &self.db,
            &format!("schedule of {tenant}/{task}"),
            "SELECT record FROM ax_schedules WHERE tenant = $1 AND task = $2",
            &[&key(tenant), &key(task)],
        )
    }

    fn due_schedules(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleState>> {
        records(
            &self.db,
            "schedule",
            DUE_SCHEDULES,
            &[&from, &until, &sql_limit(limit)],
        )
    }

    fn downstream_tasks(&self, tenant: &str, upstream: &str) -> Result<Vec<String>> {
        self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT task FROM ax_task_upstreams WHERE tenant = $1 AND upstream = $2
                     ORDER BY task",
                    &[&key(tenant), &key(upstream)],
                )
                .await?;
            Ok(rows.iter().map(|r| name(r.get(0))).collect())
        })
    }
}
