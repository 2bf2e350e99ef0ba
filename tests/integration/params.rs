//! `params:` on a real `ax serve` with the real `echo` plugin: a task on a
//! cron trigger fires with its params' defaults, and `ax trigger -p` runs it
//! with overrides, typed by the declarations; a wrong value is refused by
//! the CLI or, for an unknown name, by the server, and creates nothing.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::crash::{AxProcess, TOKEN, call, new_agent};

const NIGHTLY: &str = r#"name: nightly
trigger: { cron: "* * * * * ?" }
overlap: allow
params:
  - { name: day, type: string, default: "2026-01-01" }
  - { name: limit, type: integer, default: 10 }
  - { name: ratio, type: number, default: 0.5 }
  - { name: mode, type: enum, values: [full, incremental], default: full }
  - { name: dry_run, type: boolean, default: false }
plugin: echo@1.0.0
input: { params: "${input}", label: "day ${input.day}, limit ${input.limit}" }
"#;

fn ax(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .env("AX_URL", url)
        .env("AX_TOKEN", TOKEN)
        .env_remove("AX_TENANT")
        .output()
        .expect("running ax")
}

/// Runs of `nightly`, newest first.
fn runs(url: &str) -> Vec<Value> {
    let (status, body) = call(
        &new_agent(),
        "GET",
        &format!("{url}/v1/runs?task=nightly&limit=1000"),
        None,
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().cloned().unwrap_or_default()
}

fn run(url: &str, id: &str) -> Value {
    let (status, body) = call(
        &new_agent(),
        "GET",
        &format!("{url}/v1/runs/{id}"),
        None,
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn a_cron_fire_takes_the_defaults_and_ax_trigger_p_overrides_them() {
    let data = tempfile::tempdir().unwrap();
    let server = AxProcess::start(data.path());
    let url = server.url.clone();
    let agent = new_agent();
    server.upload(&agent, "echo");
    let (status, body) = call(
        &agent,
        "PUT",
        &format!("{url}/v1/tasks/nightly"),
        Some(NIGHTLY.as_bytes()),
        "application/yaml",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let defaults =
        json!({"day": "2026-01-01", "limit": 10, "ratio": 0.5, "mode": "full", "dry_run": false});

    // The cron fire: the defaults, rendered into the step's input.
    let started = Instant::now();
    let fired = loop {
        let done = runs(&url)
            .into_iter()
            .find(|r| r["trigger"] == "cron" && r["status"] == "succeeded");
        if let Some(r) = done {
            break run(&url, r["id"].as_str().unwrap());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no cron run succeeded: {:#?}",
            runs(&url)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(fired["input"], defaults, "{fired:#}");
    let output = &fired["steps"][0]["output"]["input"];
    assert_eq!(output["params"], defaults);
    assert_eq!(output["label"], "day 2026-01-01, limit 10");
    // Pause it, so the manual runs below are the only new ones.
    let (status, body) = call(
        &agent,
        "POST",
        &format!("{url}/v1/tasks/nightly/pause"),
        None,
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");

    // `ax trigger -p`: each value read as its param's type.
    let out = ax(
        &url,
        &[
            "trigger",
            "nightly",
            "-p",
            "limit=7",
            "-p",
            "mode=incremental",
            "--param",
            "ratio=2.25",
            "-p",
            "dry_run=true",
            "-p",
            "day=2026-12-01",
            "--wait",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manual: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = json!({"day": "2026-12-01", "limit": 7, "ratio": 2.25, "mode": "incremental", "dry_run": true});
    assert_eq!(manual["trigger"], "manual");
    assert_eq!(manual["status"], "succeeded", "{manual:#}");
    assert_eq!(manual["input"], want);
    assert_eq!(manual["steps"][0]["output"]["input"]["params"], want);
    assert_eq!(
        manual["steps"][0]["output"]["input"]["label"],
        "day 2026-12-01, limit 7"
    );

    // `--from-file`: each line's `params`, all in one batch.
    let file = data.path().join("runs.jsonl");
    std::fs::write(
        &file,
        "{\"params\": {\"limit\": 1}}\n{\"params\": {\"mode\": \"incremental\"}, \"input\": {\"limit\": 2}}\n",
    )
    .unwrap();
    let out = ax(
        &url,
        &[
            "trigger",
            "nightly",
            "--from-file",
            file.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batch: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(batch["created"], 2, "{batch:#}");
    let second = run(&url, batch["results"][1]["id"].as_str().unwrap());
    assert_eq!(second["input"]["limit"], 2);
    assert_eq!(second["input"]["mode"], "incremental");

    // Refusals: nothing is created.
    let before = runs(&url).len();
    std::fs::write(
        &file,
        "{\"params\": {\"limit\": 1}}\n{\"params\": {\"limit\": true}}\n",
    )
    .unwrap();
    let out = ax(
        &url,
        &["trigger", "nightly", "--from-file", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("line 2: error bad_request: params.limit: param `limit` is an integer"),
        "{stdout}"
    );
    let out = ax(&url, &["trigger", "nightly", "-p", "limit=ten"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-p limit=ten: param `limit` is an integer (like 42)"),
        "{stderr}"
    );
    let out = ax(&url, &["trigger", "nightly", "-p", "mode=partial"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("param `mode` is an enum of `full`, `incremental`"),
        "{stderr}"
    );
    let out = ax(&url, &["trigger", "nightly", "-p", "limt=3"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("task `nightly` has no param `limt`; did you mean `limit`?"),
        "{stderr}"
    );
    assert_eq!(runs(&url).len(), before, "a refused trigger creates no run");
}
