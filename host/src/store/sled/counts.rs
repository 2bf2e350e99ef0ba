//! How many runs each task has in the queue index, kept beside it: recovery
//! reads these counters (one pair of keys per task with queued runs), not
//! the `q` index itself, which holds one key per queued run (a million keys
//! took most of a restart, issue 14).
//!
//! Each counter is two keys, one per lock that changes `q` entries, so that
//! neither path waits for the other (inserts must not wait behind a large
//! batch of updates, see [`SledStore`]'s locks):
//!
//! | key | changed by | value |
//! |---|---|---|
//! | `qn/{tenant}/{task}/c` | inserts, under `claim_lock` | queued runs added |
//! | `qn/{tenant}/{task}/r` | updates and deletes, under `run_lock` | runs added less runs removed (negative as runs leave the queue) |
//!
//! The count is their sum, and each changes in the same sled batch as the
//! `q` entries it counts, so a crash leaves both or neither. Holding both
//! locks, [`fold`] moves the `c` key into the `r` key and removes the pair
//! once it sums to zero, so the keys stay about as many as the tasks with
//! queued runs: after updates (when the insert lock is free, a few tasks at
//! a time, those inserts touched since), and at open.
//!
//! A store written before the counters gets them at open, counted from the
//! `q` index once (the marker `sys/queue-counts`).

use std::collections::{BTreeMap, HashSet};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use super::engine::Batch;
use super::keys::{corrupt_key, decode, encode, key, split_parts};
use super::{SledStore, engine_error, lock};
use crate::model::ids::{TaskName, TenantId};
use crate::model::{RunRecord, RunStatus};
use crate::store::Result;

/// Queue changes of one call, by (tenant, task): runs added less runs removed.
#[derive(Default)]
pub(super) struct QueueDelta(BTreeMap<(String, String), i64>);

impl QueueDelta {
    /// Counts `run` leaving (`-1`) or entering (`+1`) the queue, if queued.
    pub(super) fn add(&mut self, tenant: &str, task: &str, status: RunStatus, sign: i64) {
        if status == RunStatus::Queued {
            *self
                .0
                .entry((tenant.to_owned(), task.to_owned()))
                .or_default() += sign;
        }
    }

    /// A run written: `old` its stored (tenant, task, status), if stored.
    pub(super) fn replace(&mut self, old: (&str, &str, RunStatus), new: &RunRecord) {
        self.add(old.0, old.1, old.2, -1);
        self.add(&new.tenant, &new.task, new.status, 1);
    }
}

/// Which of a counter's two keys a caller changes (by the lock it holds).
#[derive(Clone, Copy)]
pub(super) enum Side {
    /// Inserts, under `claim_lock`.
    Claims,
    /// Updates and deletes, under `run_lock`.
    Runs,
}

fn counter_key(tenant: &str, task: &str, side: Side) -> Vec<u8> {
    let side = match side {
        Side::Claims => "c",
        Side::Runs => "r",
    };
    key("qn", &[tenant, task, side])
}

impl SledStore {
    /// Adds the counter changes of `delta` on `side` to `batch`; the caller
    /// holds that side's lock.
    pub(super) fn count_changes(
        &self,
        batch: &mut Batch,
        delta: &QueueDelta,
        side: Side,
    ) -> Result<()> {
        let mut touched = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        for ((tenant, task), &change) in &delta.0 {
            if change == 0 {
                continue;
            }
            let k = counter_key(tenant, task, side);
            let now: i64 = self.get(&k)?.unwrap_or(0);
            match now + change {
                0 => batch.remove(k),
                n => batch.insert(k, encode(&n)?),
            }
            if let Side::Claims = side {
                touched.insert((tenant.clone(), task.clone()));
            }
        }
        Ok(())
    }

    /// [`fold`]s the counters of some of the tasks inserts touched (at most
    /// [`FOLD_CHUNK`], at most every [`FOLD_EVERY`]), if the insert lock is
    /// free. The caller holds `run_lock`.
    ///
    /// In chunks because inserts wait while it runs: a fold of the 1,000
    /// tasks a second of `ax bench fire` touches held them for milliseconds
    /// (fire lateness p99 1-3 ms became 6-9 ms).
    pub(super) fn fold_soon(&self) -> Result<()> {
        let mut folded_at = self
            .folded_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if folded_at.elapsed() < FOLD_EVERY {
            return Ok(());
        }
        let Ok(_claims) = self.claim_lock.try_lock() else {
            return Ok(());
        };
        *folded_at = Instant::now();
        let chunk: HashSet<(String, String)> = {
            let mut touched = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
            let chunk: HashSet<_> = touched.iter().take(FOLD_CHUNK).cloned().collect();
            touched.retain(|task| !chunk.contains(task));
            chunk
        };
        fold(self, chunk)
    }
}

/// Tasks whose counters one fold at runtime folds.
const FOLD_CHUNK: usize = 64;

/// The least time between two folds at runtime.
const FOLD_EVERY: Duration = Duration::from_millis(10);

/// Folds each of `tasks`' counters into its `r` key (removing both when
/// they sum to zero). The caller holds both locks.
fn fold(store: &SledStore, tasks: HashSet<(String, String)>) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let mut batch = Batch::default();
    for (tenant, task) in tasks {
        let claims = counter_key(&tenant, &task, Side::Claims);
        let Some(added) = store.get::<i64>(&claims)? else {
            continue;
        };
        let runs = counter_key(&tenant, &task, Side::Runs);
        let rest: i64 = store.get(&runs)?.unwrap_or(0);
        batch.remove(claims);
        match added + rest {
            0 => batch.remove(runs),
            n => batch.insert(runs, encode(&n)?),
        }
    }
    store.apply(batch)
}

/// [`Runs::queued_counts`](crate::store::Runs::queued_counts): the
/// counters, not the queue.
pub(super) fn queued_counts(store: &SledStore) -> Result<Vec<(TenantId, TaskName, usize)>> {
    let prefix = key("qn", &[]);
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    for item in store.scan(&prefix) {
        let (k, v) = item?;
        let parts = split_parts(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        let [tenant, task, _side] = <[String; 3]>::try_from(parts).map_err(|_| corrupt_key(&k))?;
        *counts.entry((tenant, task)).or_default() += decode::<i64>(&k, &v)?;
    }
    Ok(counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|((tenant, task), n)| (tenant.into(), task.into(), n as usize))
        .collect())
}

/// The `q` index counted, one key at a time.
fn count_queue(store: &SledStore) -> Result<QueueDelta> {
    let mut delta = QueueDelta::default();
    let prefix = key("q", &[]);
    for item in store.scan(&prefix) {
        let (k, v) = item?;
        let tenant = split_parts(&k[prefix.len()..])
            .and_then(|parts| parts.into_iter().next())
            .ok_or_else(|| corrupt_key(&k))?;
        let task = String::from_utf8(v.to_vec()).map_err(|_| corrupt_key(&k))?;
        delta.add(&tenant, &task, RunStatus::Queued, 1);
    }
    Ok(delta)
}

/// At open, before anything else writes: folds every counter (the `c` keys
/// left by inserts since the last fold) and, once, counts the `q` index of a
/// store written before the counters.
pub(super) fn build_counts(store: &SledStore) -> Result<()> {
    let marker = key("sys", &["queue-counts"]);
    if !store.db.contains_key(&marker).map_err(engine_error)? {
        let _claims = lock(&store.claim_lock);
        let _serial = lock(&store.run_lock);
        let mut batch = Batch::default();
        for item in store.scan(&key("qn", &[])) {
            batch.remove(item?.0);
        }
        for ((tenant, task), n) in count_queue(store)?.0 {
            batch.insert(counter_key(&tenant, &task, Side::Runs), encode(&n)?);
        }
        batch.insert(marker, encode("1")?);
        return store.apply(batch);
    }
    let prefix = key("qn", &[]);
    let mut tasks = HashSet::new();
    for item in store.scan(&prefix) {
        let (k, _) = item?;
        let parts = split_parts(&k[prefix.len()..]).ok_or_else(|| corrupt_key(&k))?;
        if let [tenant, task, side] = parts.as_slice()
            && side == "c"
        {
            tasks.insert((tenant.clone(), task.clone()));
        }
    }
    let _claims = lock(&store.claim_lock);
    let _serial = lock(&store.run_lock);
    fold(store, tasks)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::run;
    use super::super::open::STORE_FORMAT;
    use super::*;
    use crate::store::NewRun;
    use crate::store::prelude::*;

    /// The counters, as `queued_counts` answers, against the `q` index
    /// counted key by key.
    fn check(store: &SledStore) {
        let recounted: Vec<(TenantId, TaskName, usize)> = count_queue(store)
            .unwrap()
            .0
            .into_iter()
            .map(|((tenant, task), n)| (tenant.into(), task.into(), n as usize))
            .collect();
        assert_eq!(queued_counts(store).unwrap(), recounted);
    }

    fn counter_keys(store: &SledStore) -> Vec<Vec<String>> {
        let prefix = key("qn", &[]);
        store
            .scan(&prefix)
            .map(|item| split_parts(&item.unwrap().0[prefix.len()..]).unwrap())
            .collect()
    }

    /// Runs of six tasks inserted, started, ended, queued again and moved
    /// between tenants in a pseudo-random order, folded now and then: after
    /// every call the counters say what the queue holds; reopened (folded),
    /// one key per task with queued runs is left.
    #[test]
    fn the_counters_follow_the_queue_and_fold_to_a_key_per_queued_task() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let statuses = [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Succeeded,
            RunStatus::Queued,
            RunStatus::Cancelled,
        ];
        let mut runs: Vec<RunRecord> = Vec::new();
        let mut seed: u64 = 7;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        for step in 0..400 {
            if step % 25 == 0 {
                // The next update folds (its time bound passed).
                *store.folded_at.lock().unwrap() = Instant::now() - Duration::from_secs(2);
            }
            if runs.len() < 40 && next(3) == 0 {
                // A batch of new runs, some not queued.
                let batch: Vec<NewRun> = (0..1 + next(4))
                    .map(|i| {
                        let mut r = run(&format!("r{step:05}{i}"), statuses[next(2)]);
                        r.tenant = format!("t{}", next(2)).into();
                        r.task = format!("k{}", next(3)).into();
                        NewRun {
                            run: r,
                            unique_fire: false,
                            schedule: None,
                            events: Vec::new(),
                            key_expires_at: crate::model::Millis::MAX,
                        }
                    })
                    .collect();
                store.insert_runs(&batch).unwrap();
                runs.extend(batch.into_iter().map(|n| n.run));
            } else if !runs.is_empty() {
                // Some runs change state together, one maybe twice.
                let mut writes = Vec::new();
                for _ in 0..1 + next(3) {
                    let at = next(runs.len());
                    let r = &mut runs[at];
                    r.status = statuses[next(statuses.len())];
                    r.next_revision();
                    if next(10) == 0 {
                        r.tenant = format!("t{}", next(2)).into();
                    }
                    writes.push((r.clone(), Vec::new()));
                }
                store.write_runs(&writes, &[]).unwrap();
            }
            check(&store);
        }
        // An update folds what inserts counted.
        *store.folded_at.lock().unwrap() = Instant::now() - Duration::from_secs(2);
        runs[0].next_revision();
        store
            .write_runs(&[(runs[0].clone(), Vec::new())], &[])
            .unwrap();
        check(&store);
        let keys = counter_keys(&store);
        assert!(keys.iter().all(|k| k[2] == "r"), "{keys:?}");
        drop(store);
        let store = SledStore::open(dir.path()).unwrap();
        check(&store);
        let keys = counter_keys(&store);
        assert!(keys.iter().all(|k| k[2] == "r"), "{keys:?}");
        assert_eq!(keys.len(), queued_counts(&store).unwrap().len(), "{keys:?}");
    }

    /// A store of format 1 (no counters) gets them at open, counted from
    /// its queue, and is marked with the new format.
    #[test]
    fn a_store_written_before_the_counters_gets_them_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path()).unwrap();
            for (i, status) in [RunStatus::Queued, RunStatus::Queued, RunStatus::Running]
                .into_iter()
                .enumerate()
            {
                store
                    .insert_run(&run(&format!("r{i}"), status), false, None, &[])
                    .unwrap();
            }
            // As ax with format 1 left it.
            for item in store.scan(&key("qn", &[])) {
                store.db.remove(item.unwrap().0).unwrap();
            }
            store.db.remove(key("sys", &["queue-counts"])).unwrap();
            store
                .db
                .insert(key("sys", &["format"]), encode("1").unwrap())
                .unwrap();
            store.db.flush().unwrap();
            std::fs::write(dir.path().join("store-format"), "1\n").unwrap();
            assert!(queued_counts(&store).unwrap().is_empty());
        }
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(
            queued_counts(&store).unwrap(),
            [("t1".into(), "a".into(), 2)]
        );
        check(&store);
        let format: String = store.get(&key("sys", &["format"])).unwrap().unwrap();
        assert_eq!(format, STORE_FORMAT.to_string());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("store-format")).unwrap(),
            format!("{STORE_FORMAT}\n")
        );
    }
}
