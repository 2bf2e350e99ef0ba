//! Records the disk-only tests of the sled store build on.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::model::{
    Event, RECORD_FORMAT, RunRecord, RunStatus, StepRunRecord, StepStatus, TriggerKind,
};
use crate::store::AttemptLogs;

pub(super) fn run(id: &str, status: RunStatus) -> RunRecord {
    RunRecord {
        format: RECORD_FORMAT,
        revision: 1,
        id: id.to_owned(),
        tenant: "t1".to_owned(),
        task: "a".to_owned(),
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
            name: "s1".to_owned(),
            status: StepStatus::Queued,
            input: Some(json!({"payload": "x".repeat(100)})),
            output: None,
            error: None,
            attempts: Vec::new(),
            next_attempt_at: None,
            lost_attempts: 0,
            round_start: 0,
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
