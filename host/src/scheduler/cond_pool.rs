//! `when` conditions evaluated off the actor: a few threads of their own,
//! with the stack CEL needs, take evaluations from per-tenant queues in
//! turn and send each result back to the actor as an event.
//!
//! Why: an evaluation is bounded by [`crate::cond::Budget`] (steps, bytes,
//! a deadline) but can still take tens of milliseconds; on the actor it
//! would hold up every fire, trigger and finished attempt of every tenant
//! meanwhile. Why turns by tenant: one tenant queueing many expensive
//! conditions then delays another tenant's by at most one evaluation per
//! tenant ahead of it, not by its whole backlog.
//!
//! The actor keeps the step `pending` while its condition is out, and takes
//! the result only if the step still waits for that very evaluation (a
//! token per dispatch). Nothing is stored about an evaluation in flight: a
//! host stopping meanwhile leaves the step pending, and recovery evaluates
//! it again. The deadline is the budget's, counted from when a thread takes
//! the evaluation up (time in the queue is not the condition's doing).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::cond::{Budget, CondError, Condition, EVAL_STACK, Extract};

/// Threads evaluating conditions, per scheduler. Two: the budget keeps each
/// evaluation short, so more would mostly take cores from attempts.
pub const COND_WORKERS: usize = 2;

/// One evaluation to run.
pub(super) struct CondJob {
    pub(super) run_id: String,
    pub(super) step: usize,
    /// Tells this evaluation apart from an earlier one of the same step.
    pub(super) token: u64,
    pub(super) tenant: String,
    pub(super) cond: Condition,
    /// The run's data it reads, copied out of the actor's state.
    pub(super) data: Extract,
}

/// The result of a [`CondJob`], for the actor.
#[derive(Debug)]
pub(super) struct CondDone {
    pub(super) run_id: String,
    pub(super) step: usize,
    pub(super) token: u64,
    pub(super) result: Result<bool, CondError>,
}

/// Jobs waiting, by tenant, and the order tenants take turns in.
#[derive(Default)]
struct Queues {
    by_tenant: HashMap<String, VecDeque<CondJob>>,
    /// Tenants with jobs waiting, next first; each appears once.
    turns: VecDeque<String>,
    /// Set when the pool is dropped: threads finish their job and stop.
    closed: bool,
}

impl Queues {
    /// The next tenant's oldest job; the tenant goes to the back of the turns.
    fn next(&mut self) -> Option<CondJob> {
        let tenant = self.turns.pop_front()?;
        let queue = self.by_tenant.get_mut(&tenant)?;
        let job = queue.pop_front();
        if queue.is_empty() {
            self.by_tenant.remove(&tenant);
        } else {
            self.turns.push_back(tenant);
        }
        job
    }
}

struct Shared {
    queues: Mutex<Queues>,
    wake: Condvar,
}

impl Shared {
    /// The queues; a thread that panicked holding the lock left them
    /// consistent (every change is one push or pop), so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The evaluation threads of one scheduler; started on the first job,
/// stopped when dropped.
pub(super) struct CondPool {
    shared: Arc<Shared>,
    workers: usize,
    started: usize,
    budget: Budget,
    done: mpsc::UnboundedSender<CondDone>,
}

impl CondPool {
    /// A pool of `workers` threads (at least one) evaluating under `budget`
    /// and reporting to `done`.
    pub(super) fn new(
        workers: usize,
        budget: Budget,
        done: mpsc::UnboundedSender<CondDone>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                queues: Mutex::new(Queues::default()),
                wake: Condvar::new(),
            }),
            workers: workers.max(1),
            started: 0,
            budget,
            done,
        }
    }

    /// Queues `job` behind the tenant's earlier ones; never blocks.
    pub(super) fn submit(&mut self, job: CondJob) {
        while self.started < self.workers {
            if let Err(e) = self.spawn() {
                tracing::error!(error = %e, "cannot start a condition thread");
                break;
            }
            self.started += 1;
        }
        if self.started == 0 {
            let _ = self.done.send(CondDone {
                run_id: job.run_id,
                step: job.step,
                token: job.token,
                result: Err(CondError::Internal(
                    "no thread could be started to evaluate it".to_owned(),
                )),
            });
            return;
        }
        let mut queues = self.shared.lock();
        let tenant = job.tenant.clone();
        let queue = queues.by_tenant.entry(tenant.clone()).or_default();
        queue.push_back(job);
        if queue.len() == 1 {
            queues.turns.push_back(tenant);
        }
        drop(queues);
        self.shared.wake.notify_one();
    }

    fn spawn(&self) -> std::io::Result<()> {
        let shared = Arc::clone(&self.shared);
        let done = self.done.clone();
        let budget = self.budget;
        std::thread::Builder::new()
            .name(format!("ax-cond-{}", self.started))
            .stack_size(EVAL_STACK)
            .spawn(move || work(&shared, &budget, &done))
            .map(drop)
    }
}

impl Drop for CondPool {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
    }
}

/// A thread's loop: take the next job, evaluate, report; until closed.
fn work(shared: &Shared, budget: &Budget, done: &mpsc::UnboundedSender<CondDone>) {
    loop {
        let job = {
            let mut queues = shared.lock();
            loop {
                if queues.closed {
                    return;
                }
                if let Some(job) = queues.next() {
                    break job;
                }
                queues = shared.wake.wait(queues).unwrap_or_else(|e| e.into_inner());
            }
        };
        let result = job.cond.eval_extract(&job.data, budget);
        let report = CondDone {
            run_id: job.run_id,
            step: job.step,
            token: job.token,
            result,
        };
        if done.send(report).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(tenant: &str, n: usize, when: &str) -> CondJob {
        let cond = Condition::parse(when).unwrap();
        let input = serde_json::json!({ "n": n });
        let vars = crate::cond::CondVars {
            steps: &[],
            input: &input,
            run_id: "r",
            scheduled_for: "",
            biz_date: "",
            trigger: "manual",
        };
        CondJob {
            run_id: format!("{tenant}-{n}"),
            step: n,
            token: n as u64,
            tenant: tenant.to_owned(),
            data: cond.extract(&vars, &Budget::default()),
            cond,
        }
    }

    #[test]
    fn tenants_take_turns() {
        let mut queues = Queues::default();
        for (tenant, n) in [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("c", 4), ("b", 5)] {
            let job = job(tenant, n, "true");
            let queue = queues.by_tenant.entry(tenant.to_owned()).or_default();
            queue.push_back(job);
            if queue.len() == 1 {
                queues.turns.push_back(tenant.to_owned());
            }
        }
        let order: Vec<usize> = std::iter::from_fn(|| queues.next().map(|j| j.step)).collect();
        assert_eq!(order, [0, 3, 4, 1, 5, 2]);
        assert!(queues.by_tenant.is_empty() && queues.turns.is_empty());
    }

    #[tokio::test]
    async fn results_come_back_as_events_with_their_token() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pool = CondPool::new(2, Budget::default(), tx);
        pool.submit(job("a", 1, "input.n == 1"));
        pool.submit(job("b", 2, "input.n == 1"));
        pool.submit(job("b", 3, "input.nope"));
        let mut got = Vec::new();
        for _ in 0..3 {
            let d = rx.recv().await.unwrap();
            got.push((d.token, d.result.map_err(|e| e.to_string())));
        }
        got.sort_by_key(|g| g.0);
        assert_eq!(got[0], (1, Ok(true)));
        assert_eq!(got[1], (2, Ok(false)));
        assert!(
            got[2].1.as_ref().unwrap_err().contains("No such key"),
            "{got:?}"
        );
    }
}
