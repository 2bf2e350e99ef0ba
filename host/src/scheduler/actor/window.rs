//! The fire window: the tasks whose next fire falls at or before its end
//! (`horizon`), held armed in memory with their definition, compiled
//! trigger and schedule state, so that a fire costs no parsing and no
//! store read. Every other schedule stays in the store's next-fire index
//! until the window reaches it (`fire::refill` moves it on).
//!
//! The window's rules, in one place:
//! - it holds at most `max_armed` tasks: past that it ends before its last
//!   instant and lets go of the tasks due then; the tasks of one instant
//!   stay together (an instant is never split, whatever their number);
//! - a task that left it (fired past the horizon, or let go) is kept
//!   *beyond* with its schedule until the window reaches it again, since
//!   the write that moves its index entry may still be under way: the
//!   index's copy of such a task is older than this one and is ignored.
//!
//! Timers are not its business: it answers which tasks it let go, and the
//! actor disarms them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::ids::TaskKey;
use crate::model::{Millis, ScheduleState};
use crate::schedule::Trigger;
use crate::task::TaskSpec;

/// A task whose trigger is armed.
pub(super) struct Armed {
    pub(super) task: Arc<crate::model::TaskRecord>,
    pub(super) spec: Arc<TaskSpec>,
    pub(super) trigger: Arc<Trigger>,
    pub(super) schedule: ScheduleState,
}

pub(super) struct FireWindow {
    max_armed: usize,
    armed: HashMap<TaskKey, Armed>,
    /// The armed tasks by next fire (to end the window early).
    by_next: BTreeSet<(Millis, TaskKey)>,
    /// Every unpaused schedule with a next fire at or before this instant
    /// is armed (or beyond, with newer progress than the index's).
    horizon: Millis,
    /// Tasks that left the window, by next fire, with their progress; and
    /// the next fire of each.
    beyond: BTreeMap<(Millis, TaskKey), ScheduleState>,
    beyond_at: HashMap<TaskKey, Millis>,
}

impl FireWindow {
    /// An empty window that reaches nothing yet.
    pub(super) fn new(max_armed: usize) -> Self {
        Self {
            max_armed,
            armed: HashMap::new(),
            by_next: BTreeSet::new(),
            horizon: Millis::MIN,
            beyond: BTreeMap::new(),
            beyond_at: HashMap::new(),
        }
    }

    /// The window's end.
    pub(super) fn horizon(&self) -> Millis {
        self.horizon
    }

    /// Moves the window's end (a refill read the index up to `horizon`).
    pub(super) fn set_horizon(&mut self, horizon: Millis) {
        self.horizon = horizon;
    }

    /// Whether a fire at `at` is within the window.
    pub(super) fn reaches(&self, at: Millis) -> bool {
        at <= self.horizon
    }

    /// How many more tasks it can arm (at least one: a refill always reads).
    pub(super) fn room(&self) -> usize {
        self.max_armed.saturating_sub(self.armed.len()).max(1)
    }

    pub(super) fn len(&self) -> usize {
        self.armed.len()
    }

    pub(super) fn get(&self, key: &TaskKey) -> Option<&Armed> {
        self.armed.get(key)
    }

    pub(super) fn is_armed(&self, key: &TaskKey) -> bool {
        self.armed.contains_key(key)
    }

    /// Whether memory knows newer than the index about `key`: armed, or
    /// beyond with progress not yet stored.
    pub(super) fn knows(&self, key: &TaskKey) -> bool {
        self.armed.contains_key(key) || self.beyond_at.contains_key(key)
    }

    /// Arms `key`, replacing what was armed for it. Answers the tasks let go
    /// to stay within `max_armed` (`key` among them when its instant is the
    /// one cut), which the caller disarms.
    pub(super) fn insert(&mut self, key: TaskKey, armed: Armed) -> Vec<TaskKey> {
        self.remove(&key);
        if let Some(next) = armed.schedule.next_fire {
            self.by_next.insert((next, key.clone()));
        }
        self.armed.insert(key, armed);
        self.shrink()
    }

    pub(super) fn remove(&mut self, key: &TaskKey) -> Option<Armed> {
        let armed = self.armed.remove(key)?;
        if let Some(next) = armed.schedule.next_fire {
            self.by_next.remove(&(next, key.clone()));
        }
        Some(armed)
    }

    /// Forgets `key` altogether: armed or beyond (its schedule changed, or
    /// the task was deleted).
    pub(super) fn forget(&mut self, key: &TaskKey) {
        self.remove(key);
        self.clear_beyond(key);
    }

    /// Keeps a task that left the window, with its progress.
    pub(super) fn set_beyond(&mut self, key: TaskKey, schedule: ScheduleState) {
        self.clear_beyond(&key);
        if let Some(next) = schedule.next_fire {
            self.beyond_at.insert(key.clone(), next);
            self.beyond.insert((next, key), schedule);
        }
    }

    pub(super) fn clear_beyond(&mut self, key: &TaskKey) {
        if let Some(next) = self.beyond_at.remove(key) {
            self.beyond.remove(&(next, key.clone()));
        }
    }

    /// Takes the tasks kept beyond that the window now reaches, in order of
    /// next fire, to be armed again.
    pub(super) fn take_reached(&mut self) -> Vec<ScheduleState> {
        let mut reached = Vec::new();
        while let Some(entry) = self.beyond.first_entry() {
            if entry.key().0 > self.horizon {
                break;
            }
            let ((_, key), schedule) = entry.remove_entry();
            self.beyond_at.remove(&key);
            reached.push(schedule);
        }
        reached
    }

    /// Past `max_armed` tasks, ends the window before its last instant and
    /// lets go of the tasks due then (kept beyond; the index has them too).
    fn shrink(&mut self) -> Vec<TaskKey> {
        let mut let_go = Vec::new();
        while self.armed.len() > self.max_armed {
            let (Some((first, _)), Some((last, _))) = (self.by_next.first(), self.by_next.last())
            else {
                break;
            };
            let last = *last;
            if *first == last {
                break;
            }
            while let Some((at, key)) = self.by_next.last().cloned()
                && at == last
            {
                self.by_next.pop_last();
                if let Some(armed) = self.armed.remove(&key) {
                    self.set_beyond(key.clone(), armed.schedule);
                }
                let_go.push(key);
            }
            self.horizon = self.horizon.min(last - 1);
        }
        let_go
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn armed(task: &str, next: Millis) -> (TaskKey, Armed) {
        let spec: TaskSpec = serde_json::from_value(serde_json::json!({
            "name": task, "steps": [{"name": "s", "plugin": "echo@1.0.0"}],
        }))
        .unwrap();
        let record = crate::model::TaskRecord {
            format: crate::model::RECORD_FORMAT,
            tenant: "t".into(),
            name: task.into(),
            spec: serde_json::to_value(&spec).unwrap().into(),
            source: String::new(),
            created_at: 0,
            updated_at: 0,
            version: 1,
        };
        let trigger = Trigger::compile(None, chrono::DateTime::UNIX_EPOCH).unwrap();
        let schedule = ScheduleState {
            tenant: "t".into(),
            task: task.into(),
            next_fire: Some(next),
            last_fired: None,
            paused: false,
        };
        let armed = Armed {
            task: Arc::new(record),
            spec: Arc::new(spec),
            trigger: Arc::new(trigger),
            schedule,
        };
        (TaskKey::new("t", task), armed)
    }

    #[test]
    fn past_max_armed_the_window_ends_before_its_last_instant() {
        let mut window = FireWindow::new(2);
        window.set_horizon(100);
        for (task, next) in [("a", 10), ("b", 20)] {
            let (key, armed) = armed(task, next);
            assert!(window.insert(key, armed).is_empty());
        }
        assert_eq!(window.room(), 1, "a refill always reads");
        let (key, c) = armed("c", 30);
        assert_eq!(window.insert(key.clone(), c), vec![key.clone()]);
        assert_eq!(window.horizon(), 29);
        assert!(!window.is_armed(&key) && window.knows(&key), "kept beyond");
        assert_eq!(window.len(), 2);
        // Reached again once the window extends past its instant.
        assert!(window.take_reached().is_empty());
        window.set_horizon(30);
        let reached = window.take_reached();
        assert_eq!(reached.len(), 1);
        assert_eq!(reached[0].task, "c");
        assert!(!window.knows(&key));
    }

    #[test]
    fn the_tasks_of_one_instant_are_never_split() {
        let mut window = FireWindow::new(2);
        window.set_horizon(100);
        for task in ["a", "b", "c", "d"] {
            let (key, armed) = armed(task, 50);
            assert!(window.insert(key, armed).is_empty());
        }
        assert_eq!(window.len(), 4, "one instant, held whole past max_armed");
        assert_eq!(window.horizon(), 100);
        // An earlier instant comes: the whole later instant is let go.
        let (key, armed) = armed("e", 40);
        let mut let_go = window.insert(key, armed);
        let_go.sort();
        assert_eq!(let_go.len(), 4);
        assert_eq!(window.horizon(), 49);
        assert_eq!(window.len(), 1);
    }

    #[test]
    fn forgetting_a_task_drops_it_armed_and_beyond() {
        let mut window = FireWindow::new(10);
        window.set_horizon(100);
        let (key, a) = armed("a", 10);
        window.insert(key.clone(), a);
        let (_, b) = armed("a", 500);
        window.set_beyond(key.clone(), b.schedule);
        assert!(window.knows(&key));
        window.forget(&key);
        assert!(!window.knows(&key) && window.get(&key).is_none());
        window.set_horizon(1000);
        assert!(window.take_reached().is_empty());
    }
}
