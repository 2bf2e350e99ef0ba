//! `when` conditions evaluated off the actor: a few threads of their own,
//! with the stack CEL needs, evaluate them, and each result comes back to
//! the actor as an event.
//!
//! Why: an evaluation is bounded by [`crate::cond::Budget`] (steps, bytes,
//! a deadline) but can still take a good fraction of a second; on the actor
//! it would hold up every fire, trigger and finished attempt of every
//! tenant meanwhile.
//!
//! Steps waiting for their condition queue here by tenant, holding nothing
//! but their ids, and tenants take turns: one tenant queueing many
//! expensive conditions delays another tenant's by at most one evaluation
//! per tenant ahead of it, not by its whole backlog. A step's data is copied
//! out of the run only when a thread is free to take it
//! ([`CondPool::next`]), so at most [`COND_WORKERS`] copies (each bounded by
//! the budget) exist at once, however many steps wait.
//!
//! The actor keeps a step `pending` while its condition waits or runs, and
//! takes a result only if the step still waits for that very evaluation (a
//! token per request). Nothing about an evaluation is stored: a host
//! stopping meanwhile leaves the step pending, and recovery asks for it
//! again. The deadline is the budget's, counted from when a thread takes
//! the evaluation up (time in the queue is not the condition's doing).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::cond::{Budget, CondError, Condition, EVAL_STACK, Extract};

/// Threads evaluating conditions, per scheduler. Two: the budget keeps each
/// evaluation short, so more would mostly take cores from attempts.
pub const COND_WORKERS: usize = 2;

/// A step waiting for its condition to be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub(super) run_id: String,
    pub(super) step: usize,
    /// Tells this evaluation apart from an earlier one of the same step.
    pub(super) token: u64,
    pub(super) tenant: String,
}

/// One evaluation to run.
pub(super) struct CondJob {
    pub(super) request: Request,
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

/// Queues by tenant, taken in turns.
struct Turns<T> {
    by_tenant: HashMap<String, VecDeque<T>>,
    /// Tenants with something waiting, next first; each appears once.
    order: VecDeque<String>,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self {
            by_tenant: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<T> Turns<T> {
    fn push(&mut self, tenant: &str, item: T) {
        let queue = self.by_tenant.entry(tenant.to_owned()).or_default();
        queue.push_back(item);
        if queue.len() == 1 {
            self.order.push_back(tenant.to_owned());
        }
    }

    /// The next tenant's oldest item; the tenant goes to the back.
    fn pop(&mut self) -> Option<T> {
        let tenant = self.order.pop_front()?;
        let queue = self.by_tenant.get_mut(&tenant)?;
        let item = queue.pop_front();
        if queue.is_empty() {
            self.by_tenant.remove(&tenant);
        } else {
            self.order.push_back(tenant);
        }
        item
    }
}

/// The jobs handed to the threads (at most one per thread).
#[derive(Default)]
struct Jobs {
    ready: VecDeque<CondJob>,
    /// Set when the pool is dropped: threads finish their job and stop.
    closed: bool,
}

struct Shared {
    jobs: Mutex<Jobs>,
    wake: Condvar,
}

impl Shared {
    /// The jobs; a thread that panicked holding the lock left them
    /// consistent (every change is one push or pop), so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The evaluation threads of one scheduler and the steps waiting for them;
/// used from the actor only. Threads start with the first job and stop when
/// the pool is dropped.
pub(super) struct CondPool {
    shared: Arc<Shared>,
    waiting: Turns<Request>,
    /// Jobs handed out whose result the actor has not taken yet.
    running: usize,
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
                jobs: Mutex::new(Jobs::default()),
                wake: Condvar::new(),
            }),
            waiting: Turns::default(),
            running: 0,
            workers: workers.max(1),
            started: 0,
            budget,
            done,
        }
    }

    /// Queues a step behind its tenant's earlier ones.
    pub(super) fn request(&mut self, request: Request) {
        let tenant = request.tenant.clone();
        self.waiting.push(&tenant, request);
    }

    /// The next step to evaluate, tenants in turn, if a thread is free for
    /// it: the caller copies its data and hands it to [`CondPool::start`],
    /// or drops it if the step no longer waits.
    pub(super) fn next(&mut self) -> Option<Request> {
        if self.running >= self.workers {
            return None;
        }
        self.waiting.pop()
    }

    /// Hands `job` to a thread; its result comes as a [`CondDone`].
    pub(super) fn start(&mut self, job: CondJob) {
        self.running += 1;
        while self.started < self.workers {
            if let Err(e) = self.spawn() {
                tracing::error!(error = %e, "cannot start a condition thread");
                break;
            }
            self.started += 1;
        }
        if self.started == 0 {
            let _ = self.done.send(CondDone {
                run_id: job.request.run_id,
                step: job.request.step,
                token: job.request.token,
                result: Err(CondError::Internal(
                    "no thread could be started to evaluate it".to_owned(),
                )),
            });
            return;
        }
        self.shared.lock().ready.push_back(job);
        self.shared.wake.notify_one();
    }

    /// Takes note that the actor received a result: a thread is free.
    pub(super) fn finished(&mut self) {
        self.running = self.running.saturating_sub(1);
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
            let mut jobs = shared.lock();
            loop {
                if jobs.closed {
                    return;
                }
                if let Some(job) = jobs.ready.pop_front() {
                    break job;
                }
                jobs = shared.wake.wait(jobs).unwrap_or_else(|e| e.into_inner());
            }
        };
        let result = job.cond.eval_extract(&job.data, budget);
        let report = CondDone {
            run_id: job.request.run_id,
            step: job.request.step,
            token: job.request.token,
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

    fn request(tenant: &str, n: usize) -> Request {
        Request {
            run_id: format!("{tenant}-{n}"),
            step: n,
            token: n as u64,
            tenant: tenant.to_owned(),
        }
    }

    fn job(request: Request, when: &str) -> CondJob {
        let cond = Condition::parse(when).unwrap();
        let input = serde_json::json!({ "n": request.step });
        let vars = crate::cond::CondVars {
            steps: &[],
            input: &input,
            run_id: "r",
            scheduled_for: "",
            biz_date: "",
            trigger: "manual",
        };
        CondJob {
            request,
            data: cond.extract(&vars, &Budget::default()),
            cond,
        }
    }

    #[test]
    fn tenants_take_turns_and_only_free_threads_take_work() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut pool = CondPool::new(2, Budget::default(), tx);
        for (tenant, n) in [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("c", 4), ("b", 5)] {
            pool.request(request(tenant, n));
        }
        // Two threads: two requests out, then none until one is finished.
        pool.running = 0;
        let first = pool.next().unwrap();
        pool.running += 1;
        let second = pool.next().unwrap();
        pool.running += 1;
        assert_eq!((first.step, second.step), (0, 3));
        assert_eq!(pool.next(), None);
        pool.finished();
        let mut order = Vec::new();
        while let Some(r) = pool.next() {
            order.push(r.step);
        }
        assert_eq!(order, [4, 1, 5, 2]);
    }

    #[tokio::test]
    async fn results_come_back_as_events_with_their_token() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pool = CondPool::new(2, Budget::default(), tx);
        pool.start(job(request("a", 1), "input.n == 1"));
        pool.start(job(request("b", 2), "input.n == 1"));
        pool.start(job(request("b", 3), "input.nope"));
        let mut got = Vec::new();
        for _ in 0..3 {
            let d = rx.recv().await.unwrap();
            pool.finished();
            got.push((d.token, d.result.map_err(|e| e.to_string())));
        }
        got.sort_by_key(|g| g.0);
        assert_eq!(got[0], (1, Ok(true)));
        assert_eq!(got[1], (2, Ok(false)));
        assert!(
            got[2].1.as_ref().unwrap_err().contains("No such key"),
            "{got:?}"
        );
        assert_eq!(pool.running, 0);
    }
}
