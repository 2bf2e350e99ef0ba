//! The pure scheduling core: every decision the scheduler makes about a run,
//! as plain functions of (state, event, now) that change the state and say
//! what must follow, with no I/O, no clock, no tokio and no store.
//!
//! What the core decides:
//! - [`run`]: which steps of a run become ready, skipped or cancelled when
//!   their upstreams end (trigger rules, [`readiness`]), what a `when`
//!   result does to its step, when a run is over and with which status;
//! - [`attempt`]: what a finished attempt means for its step (succeeded,
//!   cancelled, retried after a backoff, failed or dead-lettered), what a
//!   crash did to the attempts that were running, when a run starts;
//! - [`control`]: what cancel, retry, requeue and rerun-step do to a run's
//!   steps and status;
//! - [`fire`]: which instants of a time trigger fire (catch-up), which of
//!   those are skipped or queued behind an active run (overlap), which held
//!   run goes next, where a saved or resumed schedule starts, which `after`
//!   triggers a run's end fires;
//! - [`admission`]: whether a new run is let in (the request's own checks,
//!   the tenant's limits of the moment, shedding), for the service's early
//!   answer and the actor's decision alike.
//!
//! Nothing here reads a clock or a random source of its own: the instant
//! comes in [`Ctx`], the backoff's jitter and dead letters' ids through
//! [`attempt::Retries`], so a seeded simulation replays exactly.
//!
//! The state is a [`RunState`] (the run's record, its DAG counters, its
//! conditions) or a [`fire::Firing`]. A decision changes it in place,
//! appends the events it records to the caller's `Vec<Event>` (written with
//! the run's record: the "write this run" effect) and pushes the rest of
//! what it implies onto a `Vec<Effect>`.
//!
//! What the actor (`scheduler::actor`) does: it owns the state, receives the
//! events (commands, finished attempts, condition results, due timers),
//! calls the core, and applies the [`Effect`]s: it queues steps for
//! dispatch, hands conditions to the evaluation threads, sets timers, stops
//! attempts, stores dead letters, counts metrics, sends alerts and writes
//! runs. It also keeps what is not a decision about a run: tenant quotas,
//! the dispatch queue, plugins, inputs, the store and the runner.

pub(crate) mod admission;
pub(crate) mod attempt;
pub(crate) mod control;
pub(crate) mod fire;
pub(crate) mod readiness;
pub(crate) mod run;

use crate::model::{DeadLetter, Millis};

pub(crate) use self::run::RunState;

/// What a decision of the core asks of the actor, besides writing the run
/// with its new events.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Effect {
    /// Put step `i` in the dispatch queue (it is `queued` now).
    Enqueue(usize),
    /// Evaluate step `i`'s `when` condition and report the result with
    /// [`run::condition_done`]; the step stays `pending` until then.
    Evaluate(usize),
    /// Wake the run at this instant (it was created ahead of its instant and
    /// waits for it): call [`run::advance`] again then.
    ReleaseAt(Millis),
    /// Step `step` waits for a retry: set its timer at `at` and count the retry.
    Retry {
        /// The step.
        step: usize,
        /// When its next attempt is due.
        at: Millis,
    },
    /// Step `step` was waiting for a retry when the host stopped: set its
    /// timer again (not a new retry).
    RetryTimer {
        /// The step.
        step: usize,
        /// When its next attempt is due.
        at: Millis,
    },
    /// Store this dead letter (the step is `dead`), count it and alert.
    DeadLetter(Box<DeadLetter>),
    /// An attempt was lost in a host crash: count it.
    Lost,
    /// Stop step `i`'s running attempt (it reports back as cancelled).
    StopAttempt(usize),
    /// Drop the run's steps from the dispatch queue.
    Unqueue,
    /// The run left the `queued` state: one fewer queued run for its tenant.
    LeftQueue,
    /// The run is over and no attempt of it is out: forget it (metrics,
    /// alerts, `after` triggers, the next held run of its task).
    Finished,
}

/// Who decides and when: the instant of the event and the actor recorded in
/// the events it causes (`scheduler`, `recovery`, a person).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx<'a> {
    /// The instant of the event.
    pub(crate) now: Millis,
    /// Recorded as the events' actor.
    pub(crate) actor: &'a str,
}

#[cfg(test)]
mod tests;
