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

/// Writes schedule states with their next-fire index entries (inside a
/// transaction that may write other things: `put_tasks`, a fire's runs),
/// in one statement whatever their number; of two for one task the last
/// wins, as two writes in a row would leave it.
pub(super) async fn write_schedules(tx: &Tx<'_>, schedules: &[&ScheduleState]) -> PgResult<()> {
    let schedules = last_of_each(schedules, |s| (s.tenant.as_str(), s.task.as_str()));
    if schedules.is_empty() {
        return Ok(());
    }
    let tenants: Vec<String> = schedules
        .iter()
        .map(|s| key(&s.tenant).into_owned())
        .collect();
    let tasks: Vec<String> = schedules
        .iter()
        .map(|s| key(&s.task).into_owned())
        .collect();
    // The next-fire index holds unpaused schedules only.
    let next_fires: Vec<Option<Millis>> = schedules
        .iter()
        .map(|s| if s.paused { None } else { s.next_fire })
        .collect();
    let records = schedules
        .iter()
        .map(|s| encode(*s))
        .collect::<PgResult<Vec<_>>>()?;
    tx.execute(
        "INSERT INTO ax_schedules (tenant, task, next_fire, record)
         SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::bytea[])
         ON CONFLICT (tenant, task) DO UPDATE
         SET next_fire = excluded.next_fire, record = excluded.record",
        &[&tenants, &tasks, &next_fires, &records],
    )
    .await?;
    Ok(())
}

/// Writes tasks with their `after` index rows (replacing their old ones),
/// in three statements whatever their number (the last of two for one
/// task wins).
async fn write_tasks(tx: &Tx<'_>, tasks: &[&TaskRecord]) -> PgResult<()> {
    let tasks = last_of_each(tasks, |t| (t.tenant.as_str(), t.name.as_str()));
    if tasks.is_empty() {
        return Ok(());
    }
    let tenants: Vec<String> = tasks.iter().map(|t| key(&t.tenant).into_owned()).collect();
    let names: Vec<String> = tasks.iter().map(|t| key(&t.name).into_owned()).collect();
    let records = tasks
        .iter()
        .map(|t| encode(*t))
        .collect::<PgResult<Vec<_>>>()?;
    tx.execute(
        "INSERT INTO ax_tasks (tenant, name, record)
         SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])
         ON CONFLICT (tenant, name) DO UPDATE SET record = excluded.record",
        &[&tenants, &names, &records],
    )
    .await?;
    tx.execute(
        "DELETE FROM ax_task_upstreams u
         USING unnest($1::text[], $2::text[]) AS v(tenant, task)
         WHERE u.tenant = v.tenant COLLATE \"C\" AND u.task = v.task COLLATE \"C\"",
        &[&tenants, &names],
    )
    .await?;
    let (mut up_tenants, mut upstreams, mut downstreams) = (Vec::new(), Vec::new(), Vec::new());
    for task in &tasks {
        for upstream in task.upstreams() {
            up_tenants.push(key(&task.tenant).into_owned());
            upstreams.push(key(&upstream).into_owned());
            downstreams.push(key(&task.name).into_owned());
        }
    }
    if !upstreams.is_empty() {
        tx.execute(
            "INSERT INTO ax_task_upstreams (tenant, upstream, task)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
             ON CONFLICT DO NOTHING",
            &[&up_tenants, &upstreams, &downstreams],
        )
        .await?;
    }
    Ok(())
}

/// Of `items`, the last one of each name (`name_of`), in the order of
/// those last ones: what a row-at-a-time write would have left.
fn last_of_each<'a, T>(items: &[&'a T], name_of: impl Fn(&T) -> (&str, &str)) -> Vec<&'a T> {
    let mut last = std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate() {
        last.insert(name_of(item), i);
    }
    items
        .iter()
        .enumerate()
        .filter(|(i, item)| last[&name_of(item)] == *i)
        .map(|(_, item)| *item)
        .collect()
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
        let records: Vec<&TaskRecord> = tasks.iter().map(|(t, _)| t).collect();
        let schedules: Vec<&ScheduleState> = tasks.iter().map(|(_, s)| s).collect();
        self.db.transaction(async |tx| {
            write_tasks(tx, &records).await?;
            write_schedules(tx, &schedules).await
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
            .transaction(async |tx| write_schedules(tx, &[schedule]).await)
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
