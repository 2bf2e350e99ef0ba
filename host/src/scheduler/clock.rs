//! Time as the scheduler sees it. Production uses the system clock; tests use
//! [`TokioClock`], whose wall time advances with tokio's (pausable) clock, so
//! firing, backoff and catch-up are tested without real sleeps.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};

use crate::model::Millis;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;

    /// Now, as stored (ms since the epoch).
    fn now_ms(&self) -> Millis {
        self.now().timestamp_millis()
    }

    /// Whether this clock is the system's, so the scheduler may wake on an
    /// [`Alarm`] thread instead of tokio's timer (which only a test clock
    /// needs: tokio's paused time).
    fn is_system(&self) -> bool {
        false
    }
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn is_system(&self) -> bool {
        true
    }
}

/// Wall time = `start` + time elapsed on tokio's clock. Under
/// `tokio::time::pause()` it only moves when the test advances it.
/// Tests may step it like an operator's wall clock ([`TokioClock::shift`]).
#[derive(Clone, Debug)]
pub struct TokioClock {
    start: DateTime<Utc>,
    base: tokio::time::Instant,
    /// Steps of the wall clock so far (ms), shared by clones.
    offset_ms: Arc<std::sync::atomic::AtomicI64>,
}

impl TokioClock {
    /// A clock reading `start` now.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Self {
            start,
            base: tokio::time::Instant::now(),
            offset_ms: Arc::default(),
        }
    }

    /// Steps the wall clock forward or back by `by` (tokio's clock, which
    /// timers sleep on, does not move).
    pub fn shift(&self, by: std::time::Duration, forward: bool) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let ms = if forward { ms } else { -ms };
        self.offset_ms
            .fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = tokio::time::Instant::now() - self.base;
        let offset = self.offset_ms.load(std::sync::atomic::Ordering::Relaxed);
        self.start
            + chrono::Duration::from_std(elapsed).unwrap_or_default()
            + chrono::Duration::milliseconds(offset)
    }
}

pub use crate::model::time::{from_ms, rfc3339};

/// Wakes the scheduler at an instant, to within tens of microseconds.
///
/// tokio's timer counts whole milliseconds and rounds every deadline up, and
/// its driver runs only when a worker thread parks: the scheduler woke
/// 1.3 ms late in the median and 5 ms at p99 (docs/PERFORMANCE.md). A
/// thread blocked on a condition variable with a timeout wakes on time, and
/// a [`Notify`](tokio::sync::Notify) hands the wake-up to the actor.
pub struct Alarm {
    shared: Arc<AlarmShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct AlarmShared {
    state: Mutex<AlarmState>,
    changed: Condvar,
    rang: tokio::sync::Notify,
}

#[derive(Default)]
struct AlarmState {
    deadline: Option<Instant>,
    stop: bool,
}

impl Alarm {
    /// Starts the alarm's thread, with no deadline set.
    pub fn new() -> std::io::Result<Self> {
        let shared = Arc::new(AlarmShared {
            state: Mutex::new(AlarmState::default()),
            changed: Condvar::new(),
            rang: tokio::sync::Notify::new(),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("ax-alarm".to_owned())
                .spawn(move || ring(&shared))?
        };
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Waits until `at`. A deadline that passed while nobody waited (the
    /// actor was busy) ends the next wait at once; the actor then finds
    /// nothing due, or something due, either way correct.
    pub async fn sleep_until(&self, at: Instant) {
        let notified = self.shared.rang.notified();
        {
            let mut state = lock(&self.shared.state);
            let earlier = state.deadline.is_none_or(|d| at < d);
            state.deadline = Some(at);
            // A later deadline is seen when the thread wakes for the old one.
            if earlier {
                self.shared.changed.notify_one();
            }
        }
        notified.await;
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.changed.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(state: &Mutex<AlarmState>) -> std::sync::MutexGuard<'_, AlarmState> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The alarm thread: sleeps until the deadline, then rings once.
fn ring(shared: &AlarmShared) {
    let mut state = lock(&shared.state);
    while !state.stop {
        match state.deadline {
            None => {
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            Some(at) => {
                let now = Instant::now();
                if now >= at {
                    state.deadline = None;
                    shared.rang.notify_one();
                } else {
                    state = shared
                        .changed
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_alarm_never_rings_early() {
        let alarm = Alarm::new().unwrap();
        for wait in [0, 1, 15] {
            let at = Instant::now() + Duration::from_millis(wait);
            alarm.sleep_until(at).await;
            assert!(Instant::now() >= at, "woke before the deadline ({wait} ms)");
        }
    }

    #[tokio::test]
    async fn an_earlier_deadline_replaces_a_later_one() {
        let alarm = Alarm::new().unwrap();
        let far = Instant::now() + Duration::from_secs(3600);
        // The first wait is abandoned (as the actor's is when a command
        // arrives); the thread still sleeps towards `far`.
        let _ = tokio::time::timeout(Duration::from_millis(5), alarm.sleep_until(far)).await;
        let near = Instant::now() + Duration::from_millis(10);
        tokio::time::timeout(Duration::from_secs(30), alarm.sleep_until(near))
            .await
            .expect("the nearer deadline rings");
        assert!(Instant::now() >= near);
    }

    #[test]
    fn dropping_the_alarm_stops_its_thread() {
        let alarm = Alarm::new().unwrap();
        let shared = Arc::downgrade(&alarm.shared);
        drop(alarm);
        // The thread held the other reference; it has been joined.
        assert!(shared.upgrade().is_none());
    }
}
