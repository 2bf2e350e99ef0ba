//! The whole-store dump (`store::dump`): a store holding one of every kind
//! exports, imports into an empty store of the same backend and into the
//! memory store, and each exports the same objects again.

use std::io::Read;
use std::path::Path;

use serde_json::json;

use super::outbox::alert;
use super::runs::attempt_record;
use super::{Make, SCAN, attempt_logs, created, dead, event, plugin, run, run_id, schedule, task};
use crate::capability::kv::{KvNamespace, KvScope};
use crate::model::{Millis, Outcome, PluginTag, RunStatus, TriggerKind};
use crate::store::dump::{self, ExportOptions, ImportOptions};
use crate::store::memory::MemoryStore;
use crate::store::prelude::*;
use crate::store::{Insert, NewRun, Tree, WholeRun};
use crate::tenant::{HOUR_MS, Quota, TenantRecord, UsageBucket, new_token};

/// Kinds [`fill`] stores one (or more) of.
const KINDS: &[&str] = &[
    "key",
    "meta",
    "tenant",
    "token",
    "task",
    "run",
    "event",
    "log",
    "record",
    "blob",
    "plugin",
    "tag",
    "dead_letter",
    "alert",
    "usage",
    "kv",
    "secret",
];

/// Stores one of everything a dump carries.
fn fill(store: &dyn Store) {
    store
        .put_meta("admin_token_sha256", &"ab".repeat(32))
        .unwrap();
    store
        .put_tenant(&TenantRecord::new("t1", Quota::default(), 1))
        .unwrap();
    store
        .put_token(&new_token("t1", Some("ci".into()), 3).1)
        .unwrap();
    let digest = store.put_blob(b"\0asm component bytes").unwrap();
    store
        .put_plugin(&crate::model::PluginRecord {
            digest,
            ..plugin("t1", "echo", "1.0.0")
        })
        .unwrap();
    store
        .put_plugin_tag(&PluginTag {
            tenant: "t1".into(),
            name: "echo".into(),
            tag: "stable".into(),
            version: "1.0.0".into(),
            updated_at: 4,
        })
        .unwrap();
    store
        .put_task(&task("t1", "a", 1), &schedule("t1", "a", Some(60_000)))
        .unwrap();

    let mut done = run(&run_id(1_000, 1), "t1", "a", RunStatus::Succeeded);
    done.idempotency_key = Some("k1".into());
    done.revision = 3;
    let events = [
        event(&done.id, "queued", 1_000),
        event(&done.id, "succeeded", 1_002),
    ];
    created(store.insert_run(&done, false, None, &events).unwrap());
    store
        .put_logs("t1", &done.id, &attempt_logs("s1", 1, "out\n".into()))
        .unwrap();
    store
        .put_record(&attempt_record(&done.id, "s1", 1, "x"))
        .unwrap();
    let mut fired = run(&run_id(60_000, 2), "t1", "a", RunStatus::Queued);
    fired.trigger = TriggerKind::Cron;
    fired.scheduled_for = 60_000;
    created(store.insert_run(&fired, true, None, &[]).unwrap());
    // A run retention deleted: its idempotency key stays until it expires.
    let mut gone = run(&run_id(1_500, 4), "t1", "a", RunStatus::Succeeded);
    gone.idempotency_key = Some("k-gone".into());
    store
        .insert_runs(&[NewRun {
            run: gone.clone(),
            unique_fire: false,
            schedule: None,
            events: Vec::new(),
            key_expires_at: 777_000,
        }])
        .unwrap();
    assert!(store.delete_run(&gone.id).unwrap());
    // A tenant with runs and no record (as `default` is used).
    let other = run(&run_id(2_000, 3), "t2", "b", RunStatus::Failed);
    created(store.insert_run(&other, false, None, &[]).unwrap());

    store.put_dead_letter(&dead("d1", "t1", None)).unwrap();
    store.put_alerts(&[alert("a1", "t1", 5_000)]).unwrap();
    store
        .add_usage(&[UsageBucket::attempt(
            "t1",
            "a",
            HOUR_MS,
            10,
            1.0,
            Outcome::Succeeded,
        )])
        .unwrap();
    let ns = KvNamespace::new("t1", "a", KvScope::Tenant);
    store
        .kv()
        .set(&ns, "key", b"value", None, u64::MAX, 0)
        .unwrap();
    store
        .secrets()
        .put_secret("t1", "api", "s3cret", 7)
        .unwrap();
}

/// A directory of its own under the system's, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "ax-dump-{}-{}",
            std::process::id(),
            crate::store::new_id("d", 0)
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The dump's lines after the header (which holds the instant it was made).
fn objects(path: &Path) -> Vec<String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text.lines().skip(1).map(str::to_owned).collect()
}

fn export(store: &dyn Store, path: &Path) {
    let out = dump::create_file(path, true).unwrap();
    let options = ExportOptions {
        include_secrets: true,
        now: 1,
    };
    dump::export(store, out, &options).unwrap();
}

const IMPORT: ImportOptions = ImportOptions {
    key_ttl: 86_400_000,
};

pub fn a_dump_carries_every_kind_into_an_empty_store<S: Store>(make: Make<S>) {
    // Not `tempfile` (a dev-dependency): the suite also builds for
    // backends outside this crate (`conformance` feature).
    let dir = Scratch::new();
    let (source, _a) = make(SCAN);
    fill(&source);
    let first = dir.path().join("first.ax-dump");
    export(&source, &first);
    let described = dump::verify(&first).unwrap();
    for kind in KINDS {
        assert!(
            described.counts.get(kind) > 0,
            "{kind} in {}",
            described.counts
        );
    }
    assert_eq!(described.counts.get("run"), 3);

    let (target, _b) = make(SCAN);
    let memory = MemoryStore::new();
    for (name, store) in [("same", &target as &dyn Store), ("memory", &memory)] {
        let imported = dump::import(store, &first, &IMPORT).unwrap();
        assert_eq!(imported, described.counts);
        let again = dir.path().join(format!("{name}.ax-dump"));
        export(store, &again);
        assert_eq!(objects(&again), objects(&first), "{name}: the same objects");

        // What the objects mean came along: revisions, keys, fires, maps.
        let done = store.get_run(&run_id(1_000, 1)).unwrap().unwrap();
        assert_eq!(done.revision, 3);
        let mut same_key = run(&run_id(3_000, 9), "t1", "a", RunStatus::Queued);
        same_key.idempotency_key = Some("k1".into());
        assert!(matches!(
            store.insert_run(&same_key, false, None, &[]).unwrap(),
            Insert::Existing(r) if r.id == done.id
        ));
        let mut same_gone = run(&run_id(3_000, 10), "t1", "a", RunStatus::Queued);
        same_gone.idempotency_key = Some("k-gone".into());
        assert_eq!(
            store.insert_run(&same_gone, false, None, &[]).unwrap(),
            Insert::Forgotten(run_id(1_500, 4).into())
        );
        let mut same_fire = run(&run_id(60_001, 9), "t1", "a", RunStatus::Queued);
        same_fire.scheduled_for = 60_000;
        let outcome = store.insert_runs(&[NewRun {
            run: same_fire,
            unique_fire: true,
            schedule: None,
            events: Vec::new(),
            key_expires_at: i64::MAX,
        }]);
        assert!(matches!(&outcome.unwrap()[0], Insert::Existing(r) if r.id == run_id(60_000, 2)));
        let ns = KvNamespace::new("t1", "a", KvScope::Tenant);
        assert_eq!(
            store.kv().get(&ns, "key", 0).unwrap().as_deref(),
            Some(&b"value"[..])
        );
        assert_eq!(
            store.kv().usage("t1").unwrap(),
            source.kv().usage("t1").unwrap()
        );
        assert_eq!(
            store.secrets().get_secret("t1", "api").unwrap().as_deref(),
            Some("s3cret")
        );
        assert!(store.run_bytes("t1").unwrap() > 0);

        // A store that holds something is refused, and left as it was.
        let refused = dump::import(store, &first, &IMPORT).unwrap_err();
        assert!(matches!(refused, dump::Error::NotEmpty(_)), "{refused}");
    }
    assert!(!source.map_page(Tree::Kv, None, 10).unwrap().is_empty());
}

/// Runs restored from a dump are stored whole, as the seam's own inserts
/// and writes would store them (records, events, logs, bytes charged,
/// keys with their expiry, fires with the first run of each claiming it),
/// and a run whose id or idempotency key is held is named and refused.
pub fn restore_runs_stores_what_inserts_would_and_names_a_run_held_twice<S: Store>(make: Make<S>) {
    const TTL: Millis = 50_000;
    let whole = |n: u32, trigger: TriggerKind, key: Option<&str>| {
        let mut r = run(
            &run_id(i64::from(n) * 1_000, n),
            "t1",
            "a",
            RunStatus::Succeeded,
        );
        r.trigger = trigger;
        r.scheduled_for = 60_000;
        r.created_at = i64::from(n) * 1_000;
        r.idempotency_key = key.map(str::to_owned);
        WholeRun {
            events: vec![event(&r.id, "queued", 1), event(&r.id, "succeeded", 2)],
            logs: vec![attempt_logs("s1", 1, format!("run {n}"))],
            records: vec![attempt_record(&r.id, "s1", 1, "kept")],
            run: r,
            json: Default::default(),
        }
    };
    let runs = vec![
        whole(1, TriggerKind::Cron, Some("k1")),
        // A second run for the same instant: stored, the fire stays the
        // first's.
        whole(2, TriggerKind::Cron, None),
        whole(3, TriggerKind::Manual, Some("k3")),
    ];
    let ids: Vec<&str> = runs.iter().map(|w| w.run.id.as_str()).collect();
    let (restored, _a) = make(SCAN);
    let (inserted, _b) = make(SCAN);
    assert_eq!(restored.restore_runs(runs.clone(), TTL).unwrap(), None);
    assert_eq!(
        crate::store::restore_by_inserts(&inserted, runs.clone(), TTL).unwrap(),
        None
    );
    assert_eq!(restored.whole_runs(&ids).unwrap(), runs, "stored whole");
    assert_eq!(
        restored.whole_runs(&ids).unwrap(),
        inserted.whole_runs(&ids).unwrap()
    );
    assert_eq!(
        restored.run_bytes("t1").unwrap(),
        inserted.run_bytes("t1").unwrap(),
        "the same bytes charged"
    );
    for store in [&restored, &inserted] {
        let mut retried = run(&run_id(9_000, 9), "t1", "a", RunStatus::Queued);
        retried.idempotency_key = Some("k1".into());
        assert!(matches!(
            store.insert_run(&retried, false, None, &[]).unwrap(),
            Insert::Existing(r) if r.id.as_str() == ids[0]
        ));
        let mut fire = run(&run_id(60_000, 9), "t1", "a", RunStatus::Queued);
        fire.scheduled_for = 60_000;
        assert!(
            matches!(
                store.insert_run(&fire, true, None, &[]).unwrap(),
                Insert::Existing(r) if r.id.as_str() == ids[0]
            ),
            "the first run claims the fire"
        );
        assert_eq!(store.expire_keys(1_000 + TTL - 1, 10).unwrap(), 0);
        assert_eq!(
            store.expire_keys(3_000 + TTL, 10).unwrap(),
            2,
            "the keys expire at creation + ttl"
        );
    }

    // A dump that holds a run twice: by id in a later batch, by key, and
    // twice in one batch.
    let held = whole(1, TriggerKind::Manual, None);
    assert_eq!(
        restored.restore_runs(vec![held], TTL).unwrap(),
        Some(ids[0].into())
    );
    let (fresh, _c) = make(SCAN);
    fresh
        .restore_runs(vec![whole(5, TriggerKind::Manual, Some("k5"))], TTL)
        .unwrap();
    let same_key = whole(6, TriggerKind::Manual, Some("k5"));
    let new_id = same_key.run.id.clone();
    assert_eq!(
        fresh.restore_runs(vec![same_key], TTL).unwrap(),
        Some(new_id.clone())
    );
    let twice = vec![
        whole(7, TriggerKind::Manual, None),
        whole(7, TriggerKind::Manual, None),
    ];
    assert_eq!(
        fresh.restore_runs(twice, TTL).unwrap(),
        Some(run_id(7_000, 7).into())
    );
    assert!(fresh.get_run(&new_id).unwrap().is_none());
}

/// An import writes two batches at a time (`store::dump`'s writers); one
/// run per batch here, so every run is in flight beside another. What
/// comes out is what one batch at a time gives: of two runs claiming one
/// fire the one that held it in the source store (created first) holds it,
/// and a run held twice, one batch after its first copy, is named.
pub fn batches_in_flight_store_what_one_batch_at_a_time_would<S: Store>(make: Make<S>) {
    let dir = Scratch::new();
    let source = MemoryStore::new();
    for (n, trigger, claims) in [
        (1, TriggerKind::Cron, true),
        (2, TriggerKind::Cron, false),
        (3, TriggerKind::Manual, false),
        (4, TriggerKind::Manual, false),
    ] {
        let mut r = run(
            &run_id(n * 1_000, n as u32),
            "t1",
            "a",
            RunStatus::Succeeded,
        );
        r.trigger = trigger;
        r.scheduled_for = 60_000;
        r.idempotency_key = (n == 3).then(|| "k3".to_owned());
        source.insert_run(&r, claims, None, &[]).unwrap();
    }
    let path = dir.path().join("fires.ax-dump");
    export(&source, &path);
    let owner = |store: &dyn Store| {
        let mut fire = run(&run_id(60_000, 9), "t1", "a", RunStatus::Queued);
        fire.scheduled_for = 60_000;
        match store.insert_run(&fire, true, None, &[]).unwrap() {
            Insert::Existing(r) => r.id,
            other => panic!("the fire is not held: {other:?}"),
        }
    };
    let (target, _a) = make(SCAN);
    dump::import_in_batches(&target, &path, &IMPORT, 1).unwrap();
    let serial = MemoryStore::new();
    dump::import_in_batches(&serial, &path, &IMPORT, 1 << 20).unwrap();
    assert_eq!(
        owner(&target),
        owner(&serial),
        "the same run holds the fire"
    );
    // The export writes run 2 first (newest first): the round trip still
    // leaves the fire with run 1, which held it (`store::dump`'s `fires`).
    assert_eq!(owner(&source), run_id(1_000, 1));
    assert_eq!(owner(&target), run_id(1_000, 1), "the source's holder");

    // A run again, right after its first copy: the two would be in
    // flight together but for the claims' rule, and the second would wait
    // on the first's lock and fail unnamed.
    let mut lines = objects(&path);
    let at = lines.iter().position(|l| l.contains("k3")).unwrap();
    lines.insert(at + 1, lines[at].clone());
    let (target, _b) = make(SCAN);
    let twice = dir.path().join("twice.ax-dump");
    rewrite(&path, &twice, &lines);
    let e = dump::import_in_batches(&target, &twice, &IMPORT, 1).unwrap_err();
    let id = run_id(3_000, 3);
    assert!(
        matches!(&e, dump::Error::Twice(t) if *t == id.as_str()),
        "{e}"
    );
}

/// A dump whose blob or KV line the write pass could not read (a blob's
/// bytes not hex, or not the bytes its digest names; a KV value not hex)
/// is refused by the whole-file check, naming the line, and the target
/// store is left empty: the lines before it (tenant, token, task, runs)
/// are not written.
pub fn a_dump_with_a_bad_blob_or_kv_line_is_refused_before_anything_is_written<S: Store>(
    make: Make<S>,
) {
    let dir = Scratch::new();
    let (source, _a) = make(SCAN);
    fill(&source);
    let path = dir.path().join("good.ax-dump");
    export(&source, &path);
    let lines = objects(&path);
    let line_of = |kind: &str| {
        let lead = format!("{{\"kind\":\"{kind}\"");
        lines.iter().position(|l| l.starts_with(&lead)).unwrap()
    };
    let (blob_at, kv_at) = (line_of("blob"), line_of("kv"));
    let blob: serde_json::Value = serde_json::from_str(&lines[blob_at]).unwrap();
    let digest = blob["digest"].as_str().unwrap().to_owned();
    assert!(line_of("tenant") < blob_at.min(kv_at), "lines come before");
    let cases = [
        ("a blob's bytes not hex", blob_at, "bytes", json!("not hex")),
        (
            "a blob's bytes not of its digest",
            blob_at,
            "bytes",
            json!(hex::encode(b"other bytes")),
        ),
        ("a KV value not hex", kv_at, "value", json!("abc")),
    ];
    for (case, at, field, bad) in cases {
        let mut edited = lines.clone();
        let mut value: serde_json::Value = serde_json::from_str(&lines[at]).unwrap();
        value[field] = bad;
        edited[at] = value.to_string();
        let damaged = dir.path().join("damaged.ax-dump");
        rewrite(&path, &damaged, &edited);
        // The header is line 1.
        let named = format!("line {}: ", at + 2);
        let (target, _b) = make(SCAN);
        let e = dump::import(&target, &damaged, &IMPORT).unwrap_err();
        assert_eq!(dump::contents(&target).unwrap(), None, "{case}: {e}");
        assert_eq!(target.get_blob(&digest).unwrap(), None, "{case}: no blob");
        assert!(
            matches!(&e, dump::Error::Damaged(m) if m.contains(&named)),
            "{case}: {e}"
        );
        assert!(e.to_string().contains("nothing was imported"), "{e}");
        let e = dump::verify(&damaged).unwrap_err();
        assert!(
            matches!(&e, dump::Error::Damaged(m) if m.contains(&named)),
            "{case}: {e}"
        );
    }
}

/// `from`'s header, then `objects` with the end line's run count fixed.
fn rewrite(from: &Path, to: &Path, objects: &[String]) {
    use std::io::Write;
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(from).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let runs = objects
        .iter()
        .filter(|l| l.starts_with(r#"{"kind":"run""#))
        .count();
    let mut out = flate2::write::GzEncoder::new(
        std::fs::File::create(to).unwrap(),
        flate2::Compression::fast(),
    );
    writeln!(out, "{}", text.lines().next().unwrap()).unwrap();
    for line in objects {
        let line = if line.starts_with(r#"{"kind":"end""#) {
            with_run_count(line, runs)
        } else {
            line.clone()
        };
        writeln!(out, "{line}").unwrap();
    }
    out.finish().unwrap();
}

/// The end line `line` with its run count set to `runs`.
fn with_run_count(line: &str, runs: usize) -> String {
    let start = line.find(r#""run":"#).unwrap() + r#""run":"#.len();
    let end = start + line[start..].find(|c: char| !c.is_ascii_digit()).unwrap();
    format!("{}{runs}{}", &line[..start], &line[end..])
}
