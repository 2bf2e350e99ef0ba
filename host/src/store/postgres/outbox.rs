//! [`Outbox`] on PostgreSQL: one row per alert in `ax_alerts`, with the
//! columns its indexes read — `(tenant, status, id)` for listings, trims
//! and counts, and the partial index `(next_try, id)` of pending alerts for
//! the delivery worker.
//!
//! Alerts are written with the run change that raised them: the `Runs`
//! implementation calls [`write_alerts`] inside `write_runs_with_alerts`'
//! transaction.

use super::rows::{execute, record, records, sql_limit};
use super::{PgResult, PgStore, Tx, encode, key, name};
use crate::model::Millis;
use crate::store::{AlertQuery, AlertStatus, Error, Outbox, OutboxAlert, Result};

/// Creates or replaces `alerts` (by id) with their index columns, inside a
/// transaction that may write other things.
pub(super) async fn write_alerts(tx: &Tx<'_>, alerts: &[OutboxAlert]) -> PgResult<()> {
    for alert in alerts {
        tx.execute(
            "INSERT INTO ax_alerts (id, tenant, status, next_try, record)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE
             SET tenant = excluded.tenant, status = excluded.status,
                 next_try = excluded.next_try, record = excluded.record",
            &[
                &key(&alert.id),
                &key(&alert.tenant),
                &alert.status.as_str(),
                &alert.next_try,
                &encode(alert)?,
            ],
        )
        .await?;
    }
    Ok(())
}

impl Outbox for PgStore {
    fn put_alerts(&self, alerts: &[OutboxAlert]) -> Result<()> {
        if alerts.is_empty() {
            return Ok(());
        }
        self.db
            .transaction(async |tx| write_alerts(tx, alerts).await)
    }

    fn get_alert(&self, id: &str) -> Result<Option<OutboxAlert>> {
        record(
            &self.db,
            &format!("alert {id}"),
            "SELECT record FROM ax_alerts WHERE id = $1",
            &[&key(id)],
        )
    }

    fn due_alerts(&self, until: Millis, limit: usize) -> Result<Vec<OutboxAlert>> {
        // The partial index ax_alerts_due, in its order.
        records(
            &self.db,
            "alert",
            "SELECT record FROM ax_alerts WHERE status = 'pending' AND next_try <= $1
             ORDER BY next_try, id LIMIT $2",
            &[&until, &sql_limit(limit)],
        )
    }

    fn list_alerts(&self, query: &AlertQuery) -> Result<(Vec<OutboxAlert>, Option<String>)> {
        let cursor = query.cursor.as_deref().filter(|c| !c.is_empty()).map(key);
        let status = query.status.map(AlertStatus::as_str);
        let limit = query.limit.max(1);
        // One more than the page: whether there is a next one.
        let mut page: Vec<OutboxAlert> = records(
            &self.db,
            &format!("alert of {}", query.tenant),
            "SELECT record FROM ax_alerts
             WHERE tenant = $1 AND ($2::text IS NULL OR status = $2)
               AND ($3::text IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4",
            &[
                &key(&query.tenant),
                &status,
                &cursor,
                &sql_limit(limit.saturating_add(1)),
            ],
        )?;
        let more = page.len() > limit;
        page.truncate(limit);
        let next = more.then(|| page.last().map(|a| a.id.clone())).flatten();
        Ok((page, next))
    }

    fn trim_alerts(&self, tenant: &str, status: AlertStatus, keep: usize) -> Result<usize> {
        let deleted = execute(
            &self.db,
            "DELETE FROM ax_alerts WHERE id IN (
                 SELECT id FROM ax_alerts WHERE tenant = $1 AND status = $2
                 ORDER BY id DESC OFFSET $3)",
            &[&key(tenant), &status.as_str(), &sql_limit(keep)],
        )?;
        Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
    }

    fn alert_counts(&self) -> Result<Vec<(String, AlertStatus, usize)>> {
        let mut counts = self.db.with(async |c| {
            let rows = c
                .query(
                    "SELECT tenant, status, count(*) FROM ax_alerts GROUP BY tenant, status",
                    &[],
                )
                .await?;
            rows.iter()
                .map(|r| -> PgResult<(String, AlertStatus, usize)> {
                    let text: &str = r.get(1);
                    let status = AlertStatus::parse(text).ok_or_else(|| Error::Corrupt {
                        key: format!("alerts of {}", name(r.get(0))),
                        reason: format!("unknown alert status {text:?}"),
                    })?;
                    let n = usize::try_from(r.get::<_, i64>(2)).unwrap_or(0);
                    Ok((name(r.get(0)), status, n))
                })
                .collect::<PgResult<Vec<_>>>()
        })?;
        // The memory store's order: by tenant, then status as the enum orders it.
        counts.sort();
        Ok(counts)
    }
}
