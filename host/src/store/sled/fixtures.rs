//! Records the disk-only tests of the sled store build on.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::model::{
    Event, RECORD_FORMAT, RunRecord, RunStatus, StepRunRecord, StepStatus, TriggerKind,
};
use std::collections::HashMap;

use super::SledStore;
use super::definitions::head;
use super::keys::{decode, key};
use crate::model::Millis;
use crate::store::{AttemptLogs, NewRun};

pub(super) fn run(id: &str, status: RunStatus) -> RunRecord {
    RunRecord {
        format: RECORD_FORMAT,
        revision: 1,
        id: id.to_owned().into(),
        tenant: "t1".to_owned().into(),
        task: "a".to_owned().into(),
        spec: json!({"steps": [{"name": "s1"}]}).into(),
        status,
        reason: None,
        priority: 5,
        trigger: TriggerKind::Cron,
        scheduled_for: 60_000,
        created_at: 60_001,
        started_at: None,
        finished_at: None,
        input: json!({}),
        idempotency_key: None,
        upstream_run: None,
        steps: vec![StepRunRecord {
            status: StepStatus::Queued,
            input: Some(json!({"payload": "x".repeat(100)})),
            ..StepRunRecord::pending("s1")
        }],
    }
}

pub(super) fn event(run_id: &str, to: &str) -> Event {
    Event {
        run_id: run_id.to_owned(),
        step: None,
        attempt: None,
        from: None,
        to: to.to_owned(),
        at: 1,
        reason: "test".to_owned(),
        actor: "scheduler".to_owned(),
    }
}

pub(super) fn logs(attempt: u32, stdout: String) -> AttemptLogs {
    AttemptLogs {
        step: "s1".to_owned(),
        attempt,
        stdout,
        ..AttemptLogs::default()
    }
}

pub(super) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

pub(super) fn new_run(run: RunRecord) -> NewRun {
    NewRun {
        run,
        unique_fire: false,
        schedule: None,
        events: Vec::new(),
        key_expires_at: Millis::MAX,
    }
}

/// The `def/…` and `dref/…` entries: digest → (stored, references).
pub(super) fn stored_definitions(store: &SledStore) -> HashMap<String, (bool, u64)> {
    let mut out: HashMap<String, (bool, u64)> = HashMap::new();
    for (kind, is_def) in [("def", true), ("dref", false)] {
        let prefix = key(kind, &[]);
        for item in store.scan(&prefix) {
            let (k, v) = item.unwrap();
            let digest = super::keys::decode_part(&k[prefix.len()..]).unwrap();
            let entry = out.entry(digest).or_default();
            if is_def {
                entry.0 = true;
            } else {
                entry.1 = decode(&k, &v).unwrap();
            }
        }
    }
    out
}

/// Every stored run names a stored definition, and each definition is
/// referenced exactly as often as runs name it.
pub(super) fn check_references(store: &SledStore) -> usize {
    let mut named: HashMap<String, u64> = HashMap::new();
    for item in store.scan(&key("run", &[])) {
        let (k, v) = item.unwrap();
        let def = head(&v).and_then(|h| h.def);
        let def = def.unwrap_or_else(|| panic!("{} holds no digest", super::keys::show_key(&k)));
        *named.entry(def.into_owned()).or_default() += 1;
    }
    let stored = stored_definitions(store);
    let expected: HashMap<String, (bool, u64)> =
        named.iter().map(|(d, n)| (d.clone(), (true, *n))).collect();
    assert_eq!(stored, expected);
    named.len()
}
