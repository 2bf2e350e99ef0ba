//! History retention (SPEC §5 "history retention is bounded"): how many
//! finished runs of a task are kept, and for how long, and the sweeper that
//! deletes the rest — each run with its step runs, attempts, events, logs
//! and index entries — so the store stays bounded under a long soak.
//!
//! # Policy
//!
//! A task may say `retention: {keep_runs: N, keep_for: 30d}`; a field it
//! leaves out takes the server default (`retention:` in the config file,
//! defaults [`DEFAULT_KEEP_RUNS`] and [`DEFAULT_KEEP_FOR`]). A finished run
//! (succeeded, failed, cancelled) is deleted when it is not among its task's
//! newest `keep_runs` finished runs, or when it was created more than
//! `keep_for` ago (its id carries its creation instant, so the sweep reads
//! no record to decide). Runs of deleted tasks follow the defaults.
//!
//! The sweep walks the store's run index a page at a time
//! ([`Runs::run_summaries_page`](crate::store::Runs::run_summaries_page): descending (tenant, task, id), so newest
//! first within a task) with a [`Chooser`] that holds only the task it is in
//! and a count; each task's definition is read once, when the walk reaches
//! its runs. So a sweep holds one page, not every run and task definition
//! (issue 14: with a million tasks, reading every definition per sweep was
//! gigabytes every minute).
//!
//! Never deleted:
//! - an active run (queued or running) — the store refuses it, and the
//!   scheduler filters out runs it holds in memory or has not written yet;
//! - a run an **open** dead letter refers to: a person still has to look at
//!   it (resolve or requeue). Once resolved it ages out like any other run;
//!   the dead letter record itself stays (it is small: the audit trail).
//!
//! # Why deletion goes through the scheduler
//!
//! The scheduler actor is the only writer of runs and writes them behind.
//! The sweeper decides from the store (in `spawn_blocking`), then hands the
//! ids to the actor ([`Scheduler::purge`]), which drops any run it holds or
//! still has to write and queues the deletion on its run writer, after every
//! write already queued. So a deletion can never be followed by a stale
//! write-behind of the same run. One race is left: a `retry` or `rerun` of
//! the very run being deleted, read back by the actor while the writer
//! deletes it. The store then refuses the reopened run's writes (updating an
//! unknown run fails), so the client gets an error instead of a run and
//! nothing half-deleted is stored; the run would have to be old enough to be
//! deleted and retried in the same few milliseconds. A deleted run's fire key
//! is freed with it; its idempotency key is not: keys are remembered for
//! `idempotency_ttl` from their run's creation (7 days by default, a task's
//! `retention.idempotency_ttl` replaces it) whether or not the run is kept,
//! and a replayed key whose run is gone answers `410 run_deleted` with the
//! run's id. Each sweep frees the keys that expired ([`Runs::expire_keys`](crate::store::Runs::expire_keys),
//! read in expiry order, so only the due ones are read).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::model::Millis;
use crate::model::ids::TaskKey;
use crate::scheduler::{Clock, Scheduler};
use crate::store::{RunSummary, Store, id_millis};
use crate::task::TaskSpec;
pub use crate::task::retention::{
    DEFAULT_IDEMPOTENCY_TTL, DEFAULT_KEEP_FOR, DEFAULT_KEEP_RUNS, MAX_KEEP_RUNS, MIN_KEEP_FOR,
    RetentionSpec,
};

/// How often the sweeper runs by default.
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Runs handed to the scheduler per deletion batch: the deletions run on the
/// run writer, so a batch must stay short (a few ms) to not delay writes.
pub const PURGE_BATCH: usize = 256;

/// The server's defaults and sweep interval (`retention:` in the config file).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Finished runs kept per task.
    pub keep_runs: u64,
    /// Finished runs older than this are deleted.
    #[serde(with = "humantime_text")]
    pub keep_for: Duration,
    /// How often the sweeper runs.
    #[serde(with = "humantime_text")]
    pub sweep_every: Duration,
    /// How long idempotency keys are remembered (a task's own
    /// `retention.idempotency_ttl` replaces it).
    #[serde(with = "humantime_text")]
    pub idempotency_ttl: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            keep_runs: DEFAULT_KEEP_RUNS,
            keep_for: DEFAULT_KEEP_FOR,
            sweep_every: DEFAULT_SWEEP_EVERY,
            idempotency_ttl: DEFAULT_IDEMPOTENCY_TTL,
        }
    }
}

mod humantime_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{text}` is not a duration ({e}); try 30s, 5m, 30d"
            ))
        })
    }
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Runs looked at.
    pub scanned: usize,
    /// Runs the policies chose for deletion.
    pub candidates: usize,
    /// Of those, kept because an open dead letter refers to them.
    pub kept_for_dead_letters: usize,
    /// Runs deleted.
    pub deleted: u64,
    /// Idempotency keys that expired and were freed.
    pub keys_expired: u64,
}

/// The effective limits of one task.
fn policy(spec: Option<&RetentionSpec>, defaults: &RetentionConfig) -> (u64, Duration) {
    let spec = spec.cloned().unwrap_or_default();
    (
        spec.keep_runs.unwrap_or(defaults.keep_runs),
        spec.keep_for.unwrap_or(defaults.keep_for),
    )
}

/// Walks runs in [`Runs::run_summaries_page`](crate::store::Runs::run_summaries_page) order (newest first within a
/// task) and chooses those to delete: per (tenant, task), the finished runs
/// past the newest `keep_runs`, or created before `now - keep_for`. It holds
/// the policy of the task it is in and a count, nothing per run, so a sweep
/// over any number of runs and tasks holds one page. Pure: the policy comes
/// from `policy_of`, asked once per task.
pub struct Chooser {
    defaults: RetentionConfig,
    now: Millis,
    /// The task being walked, its limits and its finished runs seen so far.
    task: Option<(TaskKey, u64, Duration)>,
    kept: u64,
}

impl Chooser {
    /// A walk at `now` under the server's `defaults`.
    pub fn new(defaults: RetentionConfig, now: Millis) -> Self {
        Self {
            defaults,
            now,
            task: None,
            kept: 0,
        }
    }

    /// Whether `run` (the next in the walk's order) is to be deleted.
    pub fn delete<E>(
        &mut self,
        run: &RunSummary,
        policy_of: impl FnOnce(&TaskKey) -> Result<Option<RetentionSpec>, E>,
    ) -> Result<bool, E> {
        let same_task = self.task.as_ref().is_some_and(|(key, ..)| {
            key.tenant.as_str() == run.tenant && key.task.as_str() == run.task
        });
        if !same_task {
            let key = TaskKey::new(run.tenant.as_str(), run.task.as_str());
            let (keep_runs, keep_for) = policy(policy_of(&key)?.as_ref(), &self.defaults);
            self.task = Some((key, keep_runs, keep_for));
            self.kept = 0;
        }
        if !run.status.is_terminal() {
            return Ok(false);
        }
        let (_, keep_runs, keep_for) = self.task.as_ref().expect("set above");
        self.kept += 1;
        let too_old = id_millis(&run.id).is_some_and(|created| {
            self.now.saturating_sub(created) > keep_for.as_millis() as Millis
        });
        Ok(self.kept > *keep_runs || too_old)
    }
}

/// Runs read from the store per page of a sweep.
pub const SWEEP_PAGE: usize = 4096;

/// One sweep: walks the run indexes a page at a time, reading each task's
/// policy once and the open dead letters of a tenant once, and has the
/// scheduler delete what the policies allow as it goes. It holds a page and
/// the open dead letters of the tenants it met, not every run or task.
pub async fn sweep(
    store: &Arc<dyn Store>,
    scheduler: &Scheduler,
    clock: &Arc<dyn Clock>,
    defaults: &RetentionConfig,
) -> Result<SweepReport, SweepError> {
    let now = clock.now_ms();
    let mut report = SweepReport::default();
    let mut walk = Walk {
        chooser: Chooser::new(defaults.clone(), now),
        after: None,
        open: HashMap::new(),
    };
    loop {
        let store2 = store.clone();
        let (back, page) = tokio::task::spawn_blocking(move || {
            let page = walk.page(&*store2);
            (walk, page)
        })
        .await?;
        walk = back;
        let page = page?;
        report.scanned += page.scanned;
        report.candidates += page.chosen.len() + page.kept_for_dead_letters;
        report.kept_for_dead_letters += page.kept_for_dead_letters;
        for batch in page.chosen.chunks(PURGE_BATCH) {
            report.deleted += scheduler.purge(batch.to_vec()).await?;
        }
        if page.scanned < SWEEP_PAGE {
            break;
        }
    }
    // Expired keys, a batch at a time (each holds the store's claim lock,
    // which new runs' inserts wait for).
    loop {
        let store = store.clone();
        let freed =
            tokio::task::spawn_blocking(move || store.expire_keys(now, PURGE_BATCH)).await??;
        report.keys_expired += freed as u64;
        if freed < PURGE_BATCH {
            break;
        }
    }
    Ok(report)
}

/// Why a sweep stopped (it is tried again at the next tick).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// Reading what to delete failed.
    #[error("retention: reading the store failed")]
    Store(#[from] crate::store::Error),
    /// The scheduler refused or stopped before deleting.
    #[error("retention: the scheduler could not delete")]
    Scheduler(#[from] crate::scheduler::Error),
    /// The blocking thread that reads the store panicked or was cancelled.
    #[error("retention: the reading thread failed")]
    Join(#[from] tokio::task::JoinError),
}

/// A sweep's place in the runs, carried from page to page.
struct Walk {
    chooser: Chooser,
    /// The last run of the previous page.
    after: Option<RunSummary>,
    /// Runs an open dead letter refers to, per tenant met so far.
    open: HashMap<String, HashSet<String>>,
}

/// What one page of a sweep chose.
struct Page {
    scanned: usize,
    chosen: Vec<String>,
    kept_for_dead_letters: usize,
}

impl Walk {
    fn page(&mut self, store: &dyn Store) -> Result<Page, crate::store::Error> {
        let runs = store.run_summaries_page(self.after.as_ref(), SWEEP_PAGE)?;
        let mut page = Page {
            scanned: runs.len(),
            chosen: Vec::new(),
            kept_for_dead_letters: 0,
        };
        for run in &runs {
            let policy_of = |key: &TaskKey| -> Result<_, crate::store::Error> {
                let task = store.get_task(key.tenant.as_str(), key.task.as_str())?;
                Ok(task
                    .and_then(|t| TaskSpec::stored(&t.spec).ok())
                    .and_then(|spec| spec.retention.clone()))
            };
            if !self.chooser.delete(run, policy_of)? {
                continue;
            }
            if !self.open.contains_key(run.tenant.as_str()) {
                let open = store
                    .list_dead_letters(&run.tenant, true)?
                    .into_iter()
                    .map(|d| d.run_id)
                    .collect();
                self.open.insert(run.tenant.clone().into(), open);
            }
            if self.open[run.tenant.as_str()].contains(run.id.as_str()) {
                page.kept_for_dead_letters += 1;
            } else {
                page.chosen.push(run.id.clone().into());
            }
        }
        self.after = runs.into_iter().last();
        Ok(page)
    }
}

/// Runs [`sweep`] every `defaults.sweep_every` until `shutdown` fires, each
/// under the [`RETENTION_LEASE`] (a tick whose lease another process holds
/// sweeps nothing). A failed sweep is logged and tried again at the next
/// tick.
pub fn spawn_sweeper(
    store: Arc<dyn Store>,
    scheduler: Scheduler,
    clock: Arc<dyn Clock>,
    defaults: RetentionConfig,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(defaults.sweep_every.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Held from one tick to well past the next, so a sweep longer than
        // a tick keeps it (another process takes over after a crash).
        let hold = defaults
            .sweep_every
            .saturating_mul(3)
            .max(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            match super::lease::hold(store.as_ref(), RETENTION_LEASE, clock.now_ms(), hold) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "retention: cannot take the sweep's lease; trying at the next tick");
                    continue;
                }
            }
            match sweep(&store, &scheduler, &clock, &defaults).await {
                Ok(r) if r.deleted > 0 => tracing::info!(
                    deleted = r.deleted,
                    scanned = r.scanned,
                    kept_for_dead_letters = r.kept_for_dead_letters,
                    "retention sweep"
                ),
                Ok(r) => tracing::debug!(scanned = r.scanned, "retention sweep: nothing to delete"),
                Err(e) => {
                    tracing::warn!(error = %e, cause = ?std::error::Error::source(&e), "retention sweep failed")
                }
            }
        }
        super::lease::release(store.as_ref(), RETENTION_LEASE, clock.now_ms());
    })
}

/// The lease a process sweeps under ([`super::lease`]).
pub const RETENTION_LEASE: &str = "retention";

/// The deletion the scheduler queues on its run writer (see the module
/// docs): deletes `ids` (the store refuses active runs), counts them, answers.
pub(crate) fn purge_job(
    store: Arc<dyn Store>,
    stats: Arc<crate::scheduler::Stats>,
    ids: Vec<String>,
    reply: tokio::sync::oneshot::Sender<crate::scheduler::Result<u64>>,
) -> Box<dyn FnOnce(crate::scheduler::Result<()>) + Send> {
    Box::new(move |_written| {
        let mut deleted = 0u64;
        for id in &ids {
            match store.delete_run(id) {
                Ok(true) => deleted += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(run = %id, error = %e, "retention: deleting a run failed"),
            }
        }
        stats
            .runs_deleted
            .fetch_add(deleted, std::sync::atomic::Ordering::Relaxed);
        let _ = reply.send(Ok(deleted));
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunStatus;

    /// The runs a walk over `runs` (in the store's order) chooses.
    fn choose(
        mut runs: Vec<RunSummary>,
        policies: &HashMap<TaskKey, Option<RetentionSpec>>,
        defaults: &RetentionConfig,
        now: Millis,
    ) -> Vec<RunSummary> {
        runs.sort_by(|a, b| (&b.tenant, &b.task, &b.id).cmp(&(&a.tenant, &a.task, &a.id)));
        let mut chooser = Chooser::new(defaults.clone(), now);
        runs.into_iter()
            .filter(|run| {
                chooser
                    .delete(run, |key| Ok::<_, ()>(policies.get(key).cloned().flatten()))
                    .unwrap()
            })
            .collect()
    }

    fn run(task: &str, ms: i64, n: u32, status: RunStatus) -> RunSummary {
        RunSummary {
            tenant: "t".into(),
            task: task.into(),
            id: format!("r{ms:012x}{n:06x}0000").into(),
            status,
        }
    }

    #[test]
    fn keep_runs_keeps_the_newest_finished_runs_and_never_active_ones() {
        let runs = vec![
            run("a", 1_000, 1, RunStatus::Succeeded),
            run("a", 2_000, 2, RunStatus::Failed),
            run("a", 3_000, 3, RunStatus::Running),
            run("a", 4_000, 4, RunStatus::Succeeded),
            run("a", 500, 5, RunStatus::Queued),
            run("b", 1_000, 6, RunStatus::Succeeded),
        ];
        let mut policies = HashMap::new();
        policies.insert(
            TaskKey::new("t", "a"),
            Some(RetentionSpec {
                keep_runs: Some(1),
                keep_for: None,
                idempotency_ttl: None,
            }),
        );
        let chosen = choose(runs, &policies, &RetentionConfig::default(), 5_000);
        let ids: Vec<(String, i64)> = chosen
            .iter()
            .map(|r| (r.task.to_string(), id_millis(&r.id).unwrap()))
            .collect();
        // Task a keeps its newest finished run (4 000); b keeps its one run (default 1000).
        assert_eq!(ids, vec![("a".into(), 2_000), ("a".into(), 1_000)]);
    }

    #[test]
    fn keep_for_deletes_finished_runs_created_too_long_ago() {
        let runs = vec![
            run("a", 1_000, 1, RunStatus::Succeeded),
            run("a", 9_000, 2, RunStatus::Succeeded),
            run("a", 1_000, 3, RunStatus::Running),
        ];
        let defaults = RetentionConfig {
            keep_for: Duration::from_secs(5),
            ..RetentionConfig::default()
        };
        let chosen = choose(runs, &HashMap::new(), &defaults, 10_000);
        assert_eq!(chosen.len(), 1);
        assert_eq!(id_millis(&chosen[0].id), Some(1_000));
    }

    #[test]
    fn bad_retention_is_refused_with_the_field() {
        let e = RetentionSpec::from_value(&serde_json::json!({"keep_runs": 0}), "retention")
            .unwrap_err();
        assert_eq!(e.path, "retention.keep_runs");
        let e = RetentionSpec::from_value(&serde_json::json!({"keep_for": "10ms"}), "retention")
            .unwrap_err();
        assert_eq!(e.path, "retention.keep_for");
        let e =
            RetentionSpec::from_value(&serde_json::json!({"keep": 3}), "retention").unwrap_err();
        assert!(e.message.contains("unknown field"), "{}", e.message);
        let ok = RetentionSpec::from_value(
            &serde_json::json!({"keep_runs": 5, "keep_for": "30d"}),
            "retention",
        )
        .unwrap();
        assert_eq!(ok.keep_for, Some(Duration::from_secs(30 * 86400)));
    }
}
