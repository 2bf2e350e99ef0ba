//! The alert outbox: [`OutboxAlert`] records and their two indexes.
//!
//! | key | value |
//! |---|---|
//! | `al/{id}` | [`OutboxAlert`] |
//! | `alt/{tenant}/{status}/{id}` | empty: a tenant's alerts by state (listing, trimming, counting) |
//! | `ald/{next_try:020}/{id}` | empty: pending alerts by next try (the worker's queue) |
//!
//! Every change of an alert rewrites its record and moves its index entries
//! in the same batch, under the run lock (a change reads the old record to
//! know which entries to move).

use super::engine::Batch;
use super::keys::{corrupt_key, decode_part, encode, instant_part, key, split_parts};
use super::{SledStore, engine_error, lock};
use crate::model::Millis;
use crate::store::{AlertQuery, AlertStatus, OutboxAlert, Result};

fn record_key(id: &str) -> Vec<u8> {
    key("al", &[id])
}

fn tenant_key(a: &OutboxAlert) -> Vec<u8> {
    key("alt", &[&a.tenant, a.status.as_str(), &a.id])
}

fn due_key(a: &OutboxAlert) -> Vec<u8> {
    key("ald", &[&instant_part(a.next_try), &a.id])
}

impl SledStore {
    /// Adds the writes of storing `alert` (replacing what is stored under
    /// its id) to `batch`. The caller holds `run_lock`.
    pub(super) fn alert_changes(&self, batch: &mut Batch, alert: &OutboxAlert) -> Result<()> {
        let k = record_key(&alert.id);
        if let Some(old) = self.get::<OutboxAlert>(&k)? {
            batch.remove(tenant_key(&old));
            batch.remove(due_key(&old));
        }
        batch.insert(tenant_key(alert), Vec::new());
        if alert.status == AlertStatus::Pending {
            batch.insert(due_key(alert), Vec::new());
        }
        batch.insert(k, encode(alert)?);
        Ok(())
    }
}

/// [`Outbox::put_alerts`](crate::store::Outbox::put_alerts).
pub(super) fn put(store: &SledStore, alerts: &[OutboxAlert]) -> Result<()> {
    if alerts.is_empty() {
        return Ok(());
    }
    let _serial = lock(&store.run_lock);
    let mut batch = Batch::default();
    for a in alerts {
        store.alert_changes(&mut batch, a)?;
    }
    store.apply(batch)
}

/// [`Outbox::get_alert`](crate::store::Outbox::get_alert).
pub(super) fn get(store: &SledStore, id: &str) -> Result<Option<OutboxAlert>> {
    store.get(&record_key(id))
}

/// The parts of an index key after `prefix_len` bytes.
fn parts(k: &[u8], prefix_len: usize) -> Result<Vec<String>> {
    split_parts(&k[prefix_len..]).ok_or_else(|| corrupt_key(k))
}

/// [`Outbox::due_alerts`](crate::store::Outbox::due_alerts).
pub(super) fn due(store: &SledStore, until: Millis, limit: usize) -> Result<Vec<OutboxAlert>> {
    let start = key("ald", &[]);
    let end = key("ald", &[&instant_part(until.saturating_add(1))]);
    let mut out = Vec::new();
    for item in store.db.range(start.clone()..end) {
        if out.len() >= limit {
            break;
        }
        let (k, _) = item.map_err(engine_error)?;
        let Some(id) = parts(&k, start.len())?.pop() else {
            return Err(corrupt_key(&k));
        };
        // An index entry without its record would be a bug; skip it.
        if let Some(a) = get(store, &id)? {
            out.push(a);
        }
    }
    Ok(out)
}

/// [`Outbox::list_alerts`](crate::store::Outbox::list_alerts): one status is
/// one index range; every status merges the three ranges by id.
pub(super) fn list(
    store: &SledStore,
    query: &AlertQuery,
) -> Result<(Vec<OutboxAlert>, Option<String>)> {
    let limit = query.limit.max(1);
    let cursor = query.cursor.as_deref().filter(|c| !c.is_empty());
    let statuses: Vec<AlertStatus> = match query.status {
        Some(s) => vec![s],
        None => AlertStatus::ALL.to_vec(),
    };
    // The newest `limit + 1` ids below the cursor of each status, merged.
    let mut ids: Vec<String> = Vec::new();
    for status in statuses {
        let prefix = key("alt", &[&query.tenant, status.as_str()]);
        let entries = match cursor {
            Some(c) => {
                let mut end = prefix.clone();
                super::keys::push_part(&mut end, c);
                store.db.range(prefix.clone()..end)
            }
            None => store.db.scan_prefix(&prefix),
        };
        for item in entries.rev().take(limit + 1) {
            let (k, _) = item.map_err(engine_error)?;
            let id = decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
            ids.push(id);
        }
    }
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let more = ids.len() > limit;
    ids.truncate(limit);
    let mut page = Vec::with_capacity(ids.len());
    for id in &ids {
        if let Some(a) = get(store, id)? {
            page.push(a);
        }
    }
    let next = more.then(|| ids.last().cloned()).flatten();
    Ok((page, next))
}

/// [`Outbox::trim_alerts`](crate::store::Outbox::trim_alerts).
pub(super) fn trim(
    store: &SledStore,
    tenant: &str,
    status: AlertStatus,
    keep: usize,
) -> Result<usize> {
    let prefix = key("alt", &[tenant, status.as_str()]);
    let _serial = lock(&store.run_lock);
    let mut batch = Batch::default();
    let mut removed = 0;
    for item in store.db.scan_prefix(&prefix).rev().skip(keep) {
        let (k, _) = item.map_err(engine_error)?;
        let id = decode_part(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        batch.remove(k);
        if let Some(old) = get(store, &id)? {
            batch.remove(due_key(&old));
        }
        batch.remove(record_key(&id));
        removed += 1;
    }
    if removed > 0 {
        store.apply(batch)?;
    }
    Ok(removed)
}

/// [`Outbox::alert_counts`](crate::store::Outbox::alert_counts).
pub(super) fn counts(store: &SledStore) -> Result<Vec<(String, AlertStatus, usize)>> {
    let prefix = key("alt", &[]);
    let mut counts: std::collections::BTreeMap<(String, AlertStatus), usize> = Default::default();
    for item in store.db.scan_prefix(&prefix) {
        let (k, _) = item.map_err(engine_error)?;
        let p = parts(&k, prefix.len())?;
        let (Some(tenant), Some(status)) =
            (p.first(), p.get(1).and_then(|s| AlertStatus::parse(s)))
        else {
            return Err(corrupt_key(&k));
        };
        let tenant = tenant.clone();
        *counts.entry((tenant, status)).or_default() += 1;
    }
    Ok(counts.into_iter().map(|((t, s), n)| (t, s, n)).collect())
}
