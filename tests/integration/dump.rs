//! `ax store export` / `ax store import` with the real binary: a sled data
//! directory filled by a real `ax serve` (a tenant, plugins, tasks, finished
//! runs, a KV entry, a secret) goes sled → PostgreSQL → sled (sled → sled
//! when no PostgreSQL is named in `AX_TEST_POSTGRES`), and every export
//! holds the same objects. A newer format, a truncated file and a store
//! that is not empty are refused with one line.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ax::store::postgres::testing::TestDatabase;
use serde_json::Value;

use crate::crash::{AxProcess, call, new_agent};

/// Runs `ax store ARGS…`: (success, stdout and stderr).
fn ax_store(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("store")
        .args(args)
        .env_remove("AX_STORE")
        .output()
        .expect("ax runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The dump's lines after its header (which holds when it was made), and
/// the header's format version.
fn objects(path: &Path) -> Vec<String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["format"], "ax-dump");
    assert_eq!(header["version"], 2);
    lines.map(str::to_owned).collect()
}

/// Fills `data` through a real server, then stops it.
fn fill(data: &Path) {
    let agent = new_agent();
    let ax = AxProcess::start(data);
    ax.upload(&agent, "echo");
    ax.upload(&agent, "cursor");
    let send = |method: &str, path: &str, body: &[u8], ct: &str| {
        let (status, body) = call(&agent, method, &format!("{}{path}", ax.url), Some(body), ct)
            .expect("the server answers");
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {body}"
        );
        body
    };
    send(
        "POST",
        "/v1/tenants",
        br#"{"name": "acme"}"#,
        "application/json",
    );
    send("PUT", "/v1/secrets/api", b"s3cret", "text/plain");
    for (name, yaml) in [
        (
            "greet",
            "name: greet\nplugin: echo@1.0.0\ninput: {\"who\": \"dump\"}\n",
        ),
        (
            "cursor",
            "name: cursor\nplugin: cursor@1.0.0\nkv: tenant\ninput: { batch: 10 }\n",
        ),
    ] {
        send(
            "PUT",
            &format!("/v1/tasks/{name}"),
            yaml.as_bytes(),
            "application/yaml",
        );
    }
    let mut ids = Vec::new();
    for task in ["greet", "greet", "greet", "cursor"] {
        let run = send(
            "POST",
            &format!("/v1/tasks/{task}/runs"),
            b"{}",
            "application/json",
        );
        ids.push(run["id"].as_str().expect("a run id").to_owned());
    }
    for id in &ids {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, run) = call(&agent, "GET", &format!("{}/v1/runs/{id}", ax.url), None, "")
                .expect("the server answers");
            if run["status"] == "succeeded" {
                break;
            }
            assert!(Instant::now() < deadline, "{run}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The runs' last writes reach the disk in the next group commit.
    std::thread::sleep(Duration::from_secs(1));
    ax.kill();
}

#[test]
fn a_sled_store_goes_through_postgres_and_back_with_the_same_objects() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    fill(&dir.path().join("a"));

    let (ok, text) = ax_store(&[
        "export",
        &path("a.dump"),
        "--data-dir",
        &path("a"),
        "--include-secrets",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("plain text"), "a warning: {text}");
    let first = objects(&dir.path().join("a.dump"));
    for kind in ["tenant", "plugin", "blob", "task", "run", "kv", "secret"] {
        let tag = format!("{{\"kind\":\"{kind}\"");
        assert!(
            first.iter().any(|l| l.starts_with(&tag)),
            "{kind} in the dump"
        );
    }
    assert_eq!(
        first
            .iter()
            .filter(|l| l.starts_with("{\"kind\":\"run\""))
            .count(),
        4
    );

    // Through PostgreSQL when there is one, else through a second sled.
    let scratch = TestDatabase::create();
    let middle: Vec<String> = match &scratch {
        Some(db) => vec!["--store".into(), db.url().to_owned()],
        None => vec!["--data-dir".into(), path("b")],
    };
    let middle: Vec<&str> = middle.iter().map(String::as_str).collect();
    let (ok, text) = ax_store(&[&["import", &path("a.dump")], &middle[..]].concat());
    assert!(ok, "{text}");
    assert!(
        text.contains("imported") && text.contains("4 run"),
        "{text}"
    );
    let (ok, text) = ax_store(
        &[
            &["export", &path("b.dump"), "--include-secrets"],
            &middle[..],
        ]
        .concat(),
    );
    assert!(ok, "{text}");
    let (ok, text) = ax_store(&["import", &path("b.dump"), "--data-dir", &path("c")]);
    assert!(ok, "{text}");
    let (ok, text) = ax_store(&["export", &path("c.dump"), "--data-dir", &path("c")]);
    assert!(ok, "{text}");
    assert!(text.contains("1 secrets left out"), "{text}");

    assert_eq!(objects(&dir.path().join("b.dump")), first, "sled → middle");
    let without_secrets: Vec<String> = first
        .iter()
        .filter(|l| !l.starts_with("{\"kind\":\"secret\""))
        .cloned()
        .collect();
    let last = objects(&dir.path().join("c.dump"));
    assert_eq!(
        last[..last.len() - 1],
        without_secrets[..without_secrets.len() - 1],
        "middle → sled, every object but the secret"
    );

    // A store that holds something is refused: nothing is merged.
    let (ok, text) = ax_store(&["import", &path("a.dump"), "--data-dir", &path("c")]);
    assert!(!ok);
    assert!(text.contains("not empty"), "{text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
}

#[test]
fn a_newer_or_truncated_dump_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (ok, text) = ax_store(&["export", &path("empty.dump"), "--data-dir", &path("a")]);
    assert!(ok, "{text}");
    let lines = {
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path("empty.dump")).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        text.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let write = |name: &str, lines: &[String]| {
        let file = std::fs::File::create(path(name)).unwrap();
        let mut out = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        for line in lines {
            writeln!(out, "{line}").unwrap();
        }
        out.finish().unwrap();
    };
    let mut newer = lines.clone();
    newer[0] = newer[0].replace("\"version\":2", "\"version\":999");
    write("newer.dump", &newer);
    let (ok, text) = ax_store(&["import", &path("newer.dump"), "--data-dir", &path("b")]);
    assert!(!ok);
    assert!(text.contains("version 999"), "{text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    assert!(
        !dir.path().join("b").exists(),
        "the store is not even opened"
    );

    write("truncated.dump", &lines[..lines.len() - 1]);
    let (ok, text) = ax_store(&["import", &path("truncated.dump"), "--data-dir", &path("b")]);
    assert!(!ok);
    assert!(text.contains("truncated"), "{text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
}
