//! `cargo bench --bench codec`: what a finished one-step run's record costs
//! to encode and decode, and its size, in JSON (what sled and PostgreSQL
//! store today) against two binary encodings: MessagePack with field names
//! (`rmp-serde`'s `to_vec_named`, which reads `serde_json::Value` back) and
//! postcard (no field names; it cannot read a `Value` back, so a record
//! stored that way would need its inputs and outputs as JSON text inside,
//! as store format 6 does not need for events). The record is the one a
//! one-step run of `hello` ends with (the definition named by its digest,
//! as sled stores it). Each row: the median of `ROUNDS` rounds of `N`
//! encodes or decodes. Figures go to docs/PERFORMANCE.md ("The run record:
//! JSON against binary").

use std::hint::black_box;
use std::time::Instant;

use ax::model::{
    AttemptRecord, Outcome, RECORD_FORMAT, RunRecord, RunStatus, StepRunRecord, StepStatus,
    TriggerKind,
};
use serde_json::json;

const N: usize = 50_000;
const ROUNDS: usize = 7;

/// A finished one-step run, as it is written at its end.
fn finished_run() -> RunRecord {
    RunRecord {
        format: RECORD_FORMAT,
        revision: 4,
        id: "r0193c5a1e2f40000001a3f".into(),
        tenant: "default".into(),
        task: "hello".into(),
        // sled stores the definition's digest in the record's place.
        spec: json!("9f".repeat(32)).into(),
        status: RunStatus::Succeeded,
        reason: None,
        priority: 5,
        trigger: TriggerKind::Manual,
        scheduled_for: 1_765_000_000_000,
        created_at: 1_765_000_000_000,
        started_at: Some(1_765_000_000_002),
        finished_at: Some(1_765_000_000_004),
        input: json!({"name": "n1234"}),
        idempotency_key: None,
        upstream_run: None,
        steps: vec![StepRunRecord {
            status: StepStatus::Succeeded,
            input: Some(json!({"name": "n1234"})),
            output: Some(json!({"greeting": "hello, n1234"})),
            attempts: vec![AttemptRecord {
                number: 1,
                outcome: Some(Outcome::Succeeded),
                started_at: 1_765_000_000_002,
                finished_at: Some(1_765_000_000_003),
                fuel_consumed: 48_213,
                memory_peak_bytes: 1_179_648,
                duration_ms: 0.5,
                error: None,
                error_kind: None,
                plugin_version: Some("1.0.0".to_owned()),
                plugin_digest: Some("ab".repeat(32)),
            }],
            ..StepRunRecord::pending("greet")
        }],
    }
}

/// Nanoseconds per call of `f`, median of `ROUNDS` rounds of `N` calls.
fn ns_per(mut f: impl FnMut()) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..N {
                f();
            }
            started.elapsed().as_secs_f64() * 1e9 / N as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn main() {
    let run = finished_run();
    let json = serde_json::to_vec(&run).unwrap();
    let msgpack = rmp_serde::to_vec_named(&run).unwrap();
    let postcard = postcard::to_allocvec(&run).unwrap();
    assert_eq!(serde_json::from_slice::<RunRecord>(&json).unwrap(), run);
    assert_eq!(rmp_serde::from_slice::<RunRecord>(&msgpack).unwrap(), run);

    let json_encode = ns_per(|| {
        black_box(serde_json::to_vec(black_box(&run)).unwrap());
    });
    let json_decode = ns_per(|| {
        black_box(serde_json::from_slice::<RunRecord>(black_box(&json)).unwrap());
    });
    let msgpack_encode = ns_per(|| {
        black_box(rmp_serde::to_vec_named(black_box(&run)).unwrap());
    });
    let msgpack_decode = ns_per(|| {
        black_box(rmp_serde::from_slice::<RunRecord>(black_box(&msgpack)).unwrap());
    });
    let postcard_encode = ns_per(|| {
        black_box(postcard::to_allocvec(black_box(&run)).unwrap());
    });

    println!("| encoding | bytes | encode ns | decode ns |");
    println!("|---|---|---|---|");
    println!(
        "| JSON | {} | {json_encode:.0} | {json_decode:.0} |",
        json.len()
    );
    println!(
        "| MessagePack, named fields | {} | {msgpack_encode:.0} | {msgpack_decode:.0} |",
        msgpack.len()
    );
    println!(
        "| postcard | {} | {postcard_encode:.0} | cannot read a `Value` back |",
        postcard.len()
    );
}
