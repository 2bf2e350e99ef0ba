//! `ax bench dump`: how fast `ax store export` and `ax store import` move
//! runs. Fills a sled store with `runs` finished one-step runs (each with
//! three events and an attempt's logs, as a real run keeps), then times
//! sled → file, file → PostgreSQL, PostgreSQL → file and file → a fresh
//! sled store (the PostgreSQL legs only with `--store`, on an empty
//! database).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use crate::model::{
    AttemptRecord, Event, Outcome, RECORD_FORMAT, RunRecord, RunStatus, StepRunRecord, StepStatus,
    TriggerKind,
};
use crate::store::dump::{self, ExportOptions, ImportOptions};
use crate::store::prelude::*;
use crate::store::{AttemptLogs, NewRun, SledStore};

/// Runs per insert while filling.
const FILL_BATCH: usize = 1_000;

/// One leg: runs moved per second and the file's size.
#[derive(Debug, Serialize)]
pub struct Leg {
    /// What was measured (`sled export`, `postgres import`…).
    pub name: String,
    /// Seconds it took.
    pub seconds: f64,
    /// Runs per second.
    pub runs_per_s: f64,
}

/// What `ax bench dump` measured.
#[derive(Debug, Serialize)]
pub struct DumpStats {
    /// Runs in the store.
    pub runs: usize,
    /// Bytes of the dump file.
    pub file_bytes: u64,
    /// Each leg, in order.
    pub legs: Vec<Leg>,
}

impl std::fmt::Display for DumpStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} runs, dump {:.1} MiB ({} bytes per run)",
            self.runs,
            self.file_bytes as f64 / 1_048_576.0,
            self.file_bytes / self.runs.max(1) as u64
        )?;
        for leg in &self.legs {
            writeln!(
                f,
                "{:<18} {:>8.2} s {:>10.0} runs/s",
                leg.name, leg.seconds, leg.runs_per_s
            )?;
        }
        Ok(())
    }
}

fn run(i: usize) -> (RunRecord, Vec<Event>, AttemptLogs) {
    let at = 1_700_000_000_000 + i as i64;
    let id = format!("r{at:012x}{i:08x}");
    let run = RunRecord {
        format: RECORD_FORMAT,
        revision: 3,
        id: id.clone().into(),
        tenant: "bench".to_owned().into(),
        task: format!("task{}", i % 10).into(),
        spec: json!({"steps": [{"name": "s1", "plugin": "echo@1.0.0"}]}).into(),
        status: RunStatus::Succeeded,
        reason: None,
        priority: 5,
        trigger: TriggerKind::Manual,
        scheduled_for: at,
        created_at: at,
        started_at: Some(at + 1),
        finished_at: Some(at + 3),
        input: json!({"n": i}),
        idempotency_key: None,
        upstream_run: None,
        steps: vec![StepRunRecord {
            name: "s1".to_owned(),
            status: StepStatus::Succeeded,
            input: None,
            output: Some(json!({"n": i})),
            error: None,
            attempts: vec![AttemptRecord {
                number: 1,
                outcome: Some(Outcome::Succeeded),
                started_at: at + 1,
                finished_at: Some(at + 3),
                fuel_consumed: 4_800,
                memory_peak_bytes: 1 << 16,
                duration_ms: 1.5,
                error: None,
                error_kind: None,
                plugin_version: Some("1.0.0".to_owned()),
                plugin_digest: Some("ab".repeat(32)),
            }],
            next_attempt_at: None,
            lost_attempts: 0,
            round_start: 0,
        }],
    };
    let event = |from: Option<&str>, to: &str, at: i64| Event {
        run_id: id.clone(),
        step: None,
        attempt: None,
        from: from.map(str::to_owned),
        to: to.to_owned(),
        at,
        reason: "bench".to_owned(),
        actor: "scheduler".to_owned(),
    };
    let events = vec![
        event(None, "queued", at),
        event(Some("queued"), "running", at + 1),
        event(Some("running"), "succeeded", at + 3),
    ];
    let logs = AttemptLogs {
        step: "s1".to_owned(),
        attempt: 1,
        stdout: "hello\n".to_owned(),
        ..AttemptLogs::default()
    };
    (run, events, logs)
}

fn leg(name: &str, runs: usize, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Leg> {
    let started = Instant::now();
    f()?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Leg {
        name: name.to_owned(),
        seconds,
        runs_per_s: runs as f64 / seconds,
    })
}

fn export_to(store: &dyn Store, path: &Path) -> anyhow::Result<()> {
    let out = dump::create_file(path, false)?;
    dump::export(store, out, &ExportOptions::default())?;
    Ok(())
}

fn import_from(store: &dyn Store, path: &Path) -> anyhow::Result<()> {
    let options = ImportOptions {
        key_ttl: 86_400_000,
    };
    dump::import(store, path, &options)?;
    futures_executor::block_on(store.sync_ticket().wait())?;
    Ok(())
}

/// Measures export and import of `runs` runs (see the module's doc);
/// `postgres`: an empty database for the PostgreSQL legs.
pub fn dump_speed(runs: usize, postgres: Option<&str>) -> anyhow::Result<DumpStats> {
    let dir = std::env::temp_dir().join(format!("ax-bench-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let source = SledStore::open(&dir.join("source"))?;
    let mut batch = Vec::with_capacity(FILL_BATCH);
    let mut logs = Vec::with_capacity(FILL_BATCH);
    for i in 0..runs {
        let (run, events, log) = run(i);
        logs.push((run.id.clone(), log));
        batch.push(NewRun {
            run,
            unique_fire: false,
            schedule: None,
            events,
            key_expires_at: i64::MAX,
        });
        if batch.len() == FILL_BATCH || i + 1 == runs {
            source.insert_runs(&batch)?;
            for (id, log) in logs.drain(..) {
                source.put_logs("bench", &id, &log)?;
            }
            batch.clear();
        }
    }
    futures_executor::block_on(source.sync_ticket().wait())?;
    let first = dir.join("sled.dump");
    let mut legs = vec![leg("sled export", runs, || export_to(&source, &first))?];
    let file_bytes = std::fs::metadata(&first)?.len();
    let mut from = first;
    if let Some(url) = postgres {
        let pg = crate::store::postgres::PgStore::open(url, 2)?;
        legs.push(leg("postgres import", runs, || import_from(&pg, &from))?);
        let second = dir.join("postgres.dump");
        legs.push(leg("postgres export", runs, || export_to(&pg, &second))?);
        from = second;
    }
    let target = SledStore::open(&dir.join("target"))?;
    legs.push(leg("sled import", runs, || import_from(&target, &from))?);
    drop((source, target));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(DumpStats {
        runs,
        file_bytes,
        legs,
    })
}
