//! `cargo bench --bench store`: what one state change of a run costs the
//! sled store, by the run's size, when the write names the step that
//! changed (`Changed::Steps`, what the scheduler's run writer sends) and
//! when it does not (`Changed::All`: every step written, as a run record
//! holding its steps was before store format 5). Each row: `WRITES` writes
//! of one run, each finishing one more of its steps; µs per write, median
//! of interleaved rounds. Figures go to docs/PERFORMANCE.md.

use std::time::Instant;

use ax::model::{
    AttemptRecord, Outcome, RECORD_FORMAT, RunRecord, RunStatus, StepRunRecord, StepStatus,
    TriggerKind,
};
use ax::store::prelude::*;
use ax::store::{Changed, NewRun, RunWrite, SledStore};
use serde_json::json;

const ROUNDS: usize = 5;

fn run(id: &str, steps: usize) -> RunRecord {
    let spec = json!({"steps": (0..steps).map(|i| json!({"name": format!("s{i}"), "plugin": "echo@1.0.0"})).collect::<Vec<_>>()});
    RunRecord {
        format: RECORD_FORMAT,
        revision: 1,
        id: id.into(),
        tenant: "default".into(),
        task: "fan".into(),
        spec: spec.into(),
        status: RunStatus::Running,
        reason: None,
        priority: 5,
        trigger: TriggerKind::Manual,
        scheduled_for: 1_000,
        created_at: 1_000,
        started_at: Some(1_001),
        finished_at: None,
        input: json!({"name": "bench"}),
        idempotency_key: None,
        upstream_run: None,
        steps: (0..steps)
            .map(|i| StepRunRecord {
                input: Some(json!({"name": "bench"})),
                ..StepRunRecord::pending(format!("s{i}"))
            })
            .collect(),
    }
}

/// µs per write of `writes` writes of a run of `steps` steps, each
/// finishing one step; `named`: the write names it.
fn writes(store: &SledStore, id: &str, steps: usize, named: bool) -> f64 {
    let mut rec = run(id, steps);
    store
        .insert_runs(&[NewRun {
            run: rec.clone(),
            unique_fire: false,
            schedule: None,
            events: Vec::new(),
            key_expires_at: i64::MAX,
        }])
        .unwrap();
    let started = Instant::now();
    for i in 0..steps {
        rec.next_revision();
        let step = &mut rec.steps[i];
        step.status = StepStatus::Succeeded;
        step.output = Some(json!({"greeting": "hello, bench"}));
        step.attempts.push(AttemptRecord {
            number: 1,
            outcome: Some(Outcome::Succeeded),
            started_at: 2_000,
            finished_at: Some(2_001),
            fuel_consumed: 4_800,
            memory_peak_bytes: 1 << 16,
            duration_ms: 0.02,
            error: None,
            error_kind: None,
            plugin_version: Some("1.0.0".to_owned()),
            plugin_digest: Some("ab".repeat(32)),
        });
        let changed = if named {
            Changed::Steps(vec![i])
        } else {
            Changed::All
        };
        let write = RunWrite {
            run: rec.clone(),
            events: Vec::new(),
            changed,
        };
        store.write_runs_with_alerts(&[write], &[], &[]).unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / steps as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    println!(
        "| steps | µs per write, every step written | µs per write, the changed step named | ratio |"
    );
    println!("|---|---|---|---|");
    for steps in [4, 16, 64, 256] {
        let (mut all, mut named) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            all.push(writes(
                &store,
                &format!("all-{steps}-{round}"),
                steps,
                false,
            ));
            named.push(writes(
                &store,
                &format!("named-{steps}-{round}"),
                steps,
                true,
            ));
        }
        let (all, named) = (median(all), median(named));
        println!("| {steps} | {all:.1} | {named:.1} | {:.2} |", named / all);
    }
}
