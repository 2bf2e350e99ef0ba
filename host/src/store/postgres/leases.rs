//! [`Leases`] on PostgreSQL: one row per lease in `ax_leases`.
//!
//! A take is one transaction: a lease nobody has held yet is inserted
//! (`ON CONFLICT DO NOTHING`: of two first takers, the second waits on the
//! first's row and then finds it); a known one is read `FOR UPDATE`, so
//! takers of one lease decide one after the other, each seeing what the
//! previous one wrote. The decision is [`rules::take_lease`].

use tokio_postgres::Row;

use super::{PgResult, PgStore, key, name};
use crate::model::Millis;
use crate::store::{Error, Lease, Leases, Result, rules};

/// A lease row (`holder, until, token`) read back.
fn lease(lease_name: &str, row: &Row) -> PgResult<Lease> {
    let token: i64 = row.get(2);
    let token = u64::try_from(token).map_err(|_| Error::Corrupt {
        key: format!("lease {lease_name}"),
        reason: format!("a negative fencing token ({token})"),
    })?;
    Ok(Lease {
        name: lease_name.to_owned(),
        holder: name(row.get(0)),
        until: row.get(1),
        token,
    })
}

/// A fencing token as the `token` column holds it.
fn token_column(lease: &Lease) -> PgResult<i64> {
    i64::try_from(lease.token).map_err(|_| {
        Error::Backend(format!(
            "lease {}: fencing token {} beyond a bigint",
            lease.name, lease.token
        ))
        .into()
    })
}

impl Leases for PgStore {
    fn take_lease(&self, name: &str, holder: &str, now: Millis, until: Millis) -> Result<Lease> {
        let lease_key = key(name);
        self.db.transaction(async |tx| {
            // Nobody held it: the first lease, if no other taker inserts it first.
            if let Some(first) = rules::take_lease(None, name, holder, now, until) {
                let inserted = tx
                    .execute(
                        "INSERT INTO ax_leases (name, holder, until, token) VALUES ($1, $2, $3, $4)
                         ON CONFLICT DO NOTHING",
                        &[
                            &lease_key,
                            &key(holder),
                            &first.until,
                            &token_column(&first)?,
                        ],
                    )
                    .await?;
                if inserted > 0 {
                    return Ok(first);
                }
            }
            let row = tx
                .query_one(
                    "SELECT holder, until, token FROM ax_leases WHERE name = $1 FOR UPDATE",
                    &[&lease_key],
                )
                .await?;
            let current = lease(name, &row)?;
            let Some(taken) = rules::take_lease(Some(&current), name, holder, now, until) else {
                return Ok(current);
            };
            tx.execute(
                "UPDATE ax_leases SET holder = $2, until = $3, token = $4 WHERE name = $1",
                &[
                    &lease_key,
                    &key(&taken.holder),
                    &taken.until,
                    &token_column(&taken)?,
                ],
            )
            .await?;
            Ok(taken)
        })
    }

    fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<bool> {
        // One statement: the row is locked while it is compared and written.
        let released = self.db.with(async |c| {
            Ok(c.execute(
                "UPDATE ax_leases SET until = $3 WHERE name = $1 AND holder = $2 AND until > $3",
                &[&key(name), &key(holder), &now],
            )
            .await?)
        })?;
        Ok(released > 0)
    }
}
