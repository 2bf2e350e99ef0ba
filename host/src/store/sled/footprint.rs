//! What each tenant's run data weighs in the store, counted as it is written
//! and deleted ([`Runs::run_bytes`](crate::store::Runs::run_bytes)): the
//! scheduler reads it at every manual trigger against the tenant's
//! `run_bytes` quota, so it must never cost a scan.
//!
//! What counts is the stored size of every value a run owns: its record
//! (`run/{id}`), its events (`ev/{id}/…`), its attempts' logs (`log/…`, plus
//! the blob file of logs kept apart) and attempt records (`rec/…`). Indexes,
//! claims and counters are a few dozen bytes per run and are left out: they
//! are bounded by the number of runs, which the queue bounds already cap.
//!
//! A counter is three keys per tenant, one per lock under which its writes
//! happen, so no write waits on another path's lock to count:
//!
//! | key | changed by | under |
//! |---|---|---|
//! | `tb/{tenant}/c` | inserts | `claim_lock` |
//! | `tb/{tenant}/r` | run writes and deletes | `run_lock` |
//! | `tb/{tenant}/l` | logs and attempt records | `blob_lock` |
//!
//! Each holds bytes added less bytes removed by its path (a side may be
//! negative: deletes subtract what inserts added); the tenant's bytes are
//! their sum. Each changes in the same sled batch as the values it counts,
//! so a crash keeps both or neither. A store written before the counters
//! (format 2) is counted once at open (marker `sys/run-bytes`).

use std::collections::BTreeMap;

use super::definitions::head;
use super::engine::Batch;
use super::inputs::Input;
use super::keys::{corrupt_key, decode, encode, key, split_parts};
use super::{SledStore, engine_error, lock};
use crate::store::Result;

/// Which of a tenant's counter keys a write changes (by the lock it holds).
#[derive(Clone, Copy)]
pub(super) enum Side {
    /// Inserts, under `claim_lock`.
    Claims,
    /// Run writes and deletes, under `run_lock`.
    Runs,
    /// Logs and attempt records, under `blob_lock`.
    Logs,
}

fn counter_key(tenant: &str, side: Side) -> Vec<u8> {
    let side = match side {
        Side::Claims => "c",
        Side::Runs => "r",
        Side::Logs => "l",
    };
    key("tb", &[tenant, side])
}

/// Byte changes of one call, by tenant.
#[derive(Default)]
pub(super) struct Weight(BTreeMap<String, i64>);

impl Weight {
    /// The change for `tenant` (its bytes, for [`weigh_all`]).
    #[cfg(test)]
    pub(super) fn of(&self, tenant: &str) -> i64 {
        self.0.get(tenant).copied().unwrap_or(0)
    }

    pub(super) fn add(&mut self, tenant: &str, bytes: i64) {
        if bytes != 0 {
            *self.0.entry(tenant.to_owned()).or_default() += bytes;
        }
    }
}

/// `len` as a signed byte count.
pub(super) fn signed(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

impl SledStore {
    /// Adds the counter changes of `weight` on `side` to `batch`; the caller
    /// holds that side's lock.
    pub(super) fn weigh(&self, batch: &mut Batch, weight: &Weight, side: Side) -> Result<()> {
        for (tenant, &change) in &weight.0 {
            if change == 0 {
                continue;
            }
            let k = counter_key(tenant, side);
            let now: i64 = self.get(&k)?.unwrap_or(0);
            match now + change {
                0 => batch.remove(k),
                n => batch.insert(k, encode(&n)?),
            }
        }
        Ok(())
    }

    /// What a stored `log/…` value weighs: the value, and its blob file
    /// when the logs are kept apart (a missing file weighs nothing).
    pub(super) fn log_weight(&self, k: &[u8], value: &[u8]) -> Result<i64> {
        let blob = match super::logs::read(k, value)?.blob() {
            Some(digest) => std::fs::metadata(self.blobs.join(format!("{digest}.log")))
                .map_or(0, |m| i64::try_from(m.len()).unwrap_or(i64::MAX)),
            None => 0,
        };
        Ok(signed(value.len()) + blob)
    }
}

/// [`Runs::run_bytes`](crate::store::Runs::run_bytes): the sum of the
/// tenant's counter keys.
pub(super) fn run_bytes(store: &SledStore, tenant: &str) -> Result<u64> {
    let mut total: i64 = 0;
    for item in store.scan(&key("tb", &[tenant])) {
        let (k, v) = item?;
        total += decode::<i64>(&k, &v)?;
    }
    Ok(u64::try_from(total).unwrap_or(0))
}

/// What the runs stored now weigh, by tenant, read value by value.
pub(super) fn weigh_all(store: &SledStore) -> Result<Weight> {
    let mut weight = Weight::default();
    let prefix = key("rt", &[]);
    for item in store.scan(&prefix) {
        let (k, _) = item?;
        let parts = split_parts(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        let [tenant, id] = <[String; 2]>::try_from(parts).map_err(|_| corrupt_key(&k))?;
        let mut bytes = match store.db.get(key("run", &[&id])).map_err(engine_error)? {
            Some(record) => match head(&record).map(|h| h.input) {
                Some(Input::File(len)) => signed(record.len()) + len as i64,
                _ => signed(record.len()),
            },
            None => 0,
        };
        for kind in ["ev", "rec", "step", "inp"] {
            for item in store.scan(&key(kind, &[&id])) {
                bytes += signed(item?.1.len());
            }
        }
        for item in store.scan(&key("log", &[&id])) {
            let (k, v) = item?;
            bytes += store.log_weight(&k, &v)?;
        }
        weight.add(&tenant, bytes);
    }
    Ok(weight)
}

/// At open, before anything else writes: counts the runs of a store written
/// before the counters, once. Reads every run's values (some seconds for a
/// million runs), so only at the upgrade.
pub(super) fn build_run_bytes(store: &SledStore) -> Result<()> {
    let marker = key("sys", &["run-bytes"]);
    if store.db.contains_key(&marker).map_err(engine_error)? {
        return Ok(());
    }
    let _claims = lock(&store.claim_lock);
    let _serial = lock(&store.run_lock);
    let _blobs = lock(&store.blob_lock);
    let mut batch = Batch::default();
    for item in store.scan(&key("tb", &[])) {
        batch.remove(item?.0);
    }
    for (tenant, bytes) in weigh_all(store)?.0 {
        batch.insert(counter_key(&tenant, Side::Runs), encode(&bytes)?);
    }
    batch.insert(marker, encode("1")?);
    store.apply(batch)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{logs, run};
    use super::*;
    use crate::model::RunStatus;
    use crate::store::prelude::*;

    /// What the counters say equals what the values weigh, read one by one,
    /// after inserts, writes, logs (inline and apart) and a delete; and a
    /// store without counters is counted at open to the same figure.
    #[test]
    fn the_counters_match_the_stored_values_and_are_rebuilt_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let counted = |store: &SledStore| {
            (
                run_bytes(store, "t1").unwrap(),
                run_bytes(store, "t2").unwrap(),
            )
        };
        let weighed = |store: &SledStore| {
            let all = weigh_all(store).unwrap().0;
            let get = |t: &str| u64::try_from(all.get(t).copied().unwrap_or(0)).unwrap();
            (get("t1"), get("t2"))
        };
        {
            let store = SledStore::open(dir.path()).unwrap();
            let mut a = run("r00000000000003e8000001", RunStatus::Queued);
            a.tenant = "t1".into();
            let mut b = run("r00000000000003e8000002", RunStatus::Queued);
            b.tenant = "t2".into();
            store.insert_run(&a, false, None, &[]).unwrap();
            store.insert_run(&b, false, None, &[]).unwrap();
            let (t1, t2) = counted(&store);
            assert!(t1 > 0 && t2 > 0);
            a.status = RunStatus::Succeeded;
            a.steps[0].output = Some(serde_json::json!({"rows": "x".repeat(5000)}));
            a.next_revision();
            store.write_runs(&[(a.clone(), Vec::new())], &[]).unwrap();
            assert!(counted(&store).0 > t1 + 5000);
            store
                .put_logs("t1", &a.id, &logs(1, "small".into()))
                .unwrap();
            store
                .put_logs("t1", &a.id, &logs(2, "z".repeat(50_000)))
                .unwrap();
            assert!(counted(&store).0 > t1 + 55_000);
            assert_eq!(counted(&store), weighed(&store));
            assert_eq!(counted(&store).1, t2, "another tenant's writes");

            assert!(store.delete_run(&a.id).unwrap());
            assert_eq!(counted(&store), (0, t2));
            assert_eq!(counted(&store), weighed(&store));
            store.db.flush().unwrap();
        }
        // As a store of format 2 left it: no counters, no marker.
        {
            let store = SledStore::open(dir.path()).unwrap();
            let mut batch = Batch::default();
            for item in store.scan(&key("tb", &[])) {
                batch.remove(item.unwrap().0);
            }
            batch.remove(key("sys", &["run-bytes"]));
            store.db.apply_batch(batch).unwrap();
            assert_eq!(counted(&store), (0, 0));
            store.db.flush().unwrap();
        }
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(counted(&store), weighed(&store));
        assert!(counted(&store).1 > 0);
    }
}
