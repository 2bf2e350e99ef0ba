//! Bulk apply and bulk triggers on a real `ax serve` (sled store, the wasm
//! runtime, the `hello` plugin) driven by the `ax` client: a directory of
//! definitions applied all or nothing, runs triggered from a JSON Lines file
//! in batches of 1000 with repeated idempotency keys and a bad line, the
//! server killed with SIGKILL as soon as the client has its answers, and
//! every acknowledged run there after the restart and run to its end.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::crash::{AxProcess, TOKEN, call, new_agent};

fn ax(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .env("AX_URL", url)
        .env("AX_TOKEN", TOKEN)
        .env_remove("AX_TENANT")
        .output()
        .expect("running ax")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every run of `task`, all pages.
fn runs_of(agent: &ureq::Agent, url: &str, task: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = call(
            agent,
            "GET",
            &format!("{url}/v1/runs?task={task}&limit=1000{cursor}"),
            None,
            "",
        )
        .unwrap();
        assert_eq!(status, 200, "{page}");
        all.extend(page["runs"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return all,
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn bulk_apply_and_bulk_triggers_on_a_real_server_are_durable_and_run_to_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = AxProcess::start(&data);
    let agent = new_agent();
    let url = server.url.clone();
    server.upload(&agent, "hello");

    // A directory with one bad definition: nothing is applied, the bad
    // file is named with its error.
    let tasks = tmp.path().join("tasks");
    std::fs::create_dir(&tasks).unwrap();
    write(
        &tasks,
        "hello.yaml",
        // All 1,498 runs are counted below: the default history (1,000
        // finished runs a task) would let a retention sweep during the
        // drain (every 60 s; slow on a loaded CI machine) delete the oldest.
        "name: hello\nplugin: hello@1.0.0\ninput: { name: \"${input.name}\" }\nretention: { keep_runs: 10000 }\n",
    );
    write(
        &tasks,
        "tick.json",
        r#"{"name": "tick", "trigger": {"cron": "0 0 * * * ?"}, "plugin": "hello@1.0.0"}"#,
    );
    write(&tasks, "broken.yml", "name: broken\nplugin: nope@1.0.0\n");
    write(&tasks, "notes.txt", "not a definition: ignored");
    let dir = tasks.display().to_string();
    let refused = ax(&url, &["task", "apply", "-f", &dir]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("broken.yml: error invalid_plugin:"),
        "{}",
        text(&refused)
    );
    let (_, listed) = call(&agent, "GET", &format!("{url}/v1/tasks"), None, "").unwrap();
    assert_eq!(listed["tasks"], serde_json::json!([]), "nothing applied");
    std::fs::remove_file(tasks.join("broken.yml")).unwrap();
    let applied = ax(&url, &["task", "apply", "-f", &dir]);
    assert!(applied.status.success(), "{}", text(&applied));
    assert!(
        text(&applied).contains("2 tasks applied: 2 created, 0 replaced"),
        "{}",
        text(&applied)
    );
    assert!(text(&applied).contains("tick.json: task tick created"));

    // A bad line refuses its batch: no run is created.
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"input\": {\"name\": \"a\"}}\n\n{\"priority\": 12}\n",
    )
    .unwrap();
    let out = ax(
        &url,
        &[
            "trigger",
            "hello",
            "--from-file",
            &bad.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("line 3: error bad_request: priority 12 is not in 0..=9"),
        "{}",
        text(&out)
    );
    assert!(runs_of(&agent, &url, "hello").is_empty());

    // 1,500 runs: two batches; a key repeated inside the first batch and
    // again in the second.
    let lines: Vec<String> = (1..=1500)
        .map(|line| match line {
            10 | 20 | 1200 => r#"{"input": {"name": "k"}, "idempotency_key": "k1"}"#.to_string(),
            _ => format!(
                r#"{{"input": {{"name": "n{line}"}}, "priority": {}}}"#,
                line % 7
            ),
        })
        .collect();
    let file = tmp.path().join("runs.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = ax(
        &url,
        &[
            "trigger",
            "hello",
            "--from-file",
            &file.display().to_string(),
            "--json",
        ],
    );
    // Acknowledged, so durable: kill at once, before any write-behind.
    server.kill();
    assert!(out.status.success(), "{}", text(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&answer["created"], &answer["existing"], &answer["failed"]),
        (&1498.into(), &2.into(), &0.into())
    );
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 1500);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["line"], i + 1);
    }
    assert_eq!(results[19]["id"], results[9]["id"]);
    assert_eq!(results[1199]["id"], results[9]["id"]);
    assert_eq!(results[1199]["created"], false);

    let server = AxProcess::start(&data);
    let url = server.url.clone();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let runs = runs_of(&agent, &url, "hello");
        let mut ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
        ids.sort_unstable();
        for r in results {
            assert!(
                ids.binary_search(&r["id"].as_str().unwrap()).is_ok(),
                "an acknowledged run is gone after SIGKILL: {r}"
            );
        }
        assert_eq!(runs.len(), 1498);
        let ended = runs
            .iter()
            .filter(|r| {
                matches!(
                    r["status"].as_str(),
                    Some("succeeded" | "failed" | "cancelled")
                )
            })
            .count();
        if ended == runs.len() {
            assert!(runs.iter().all(|r| r["status"] == "succeeded"));
            break;
        }
        if Instant::now() >= deadline {
            let mut counts = std::collections::BTreeMap::new();
            for r in &runs {
                *counts.entry(r["status"].to_string()).or_insert(0) += 1;
            }
            let stuck = runs.iter().find(|r| r["status"] != "succeeded");
            panic!(
                "{ended} of {} runs ended: {counts:?}; one not ended: {stuck:#?}",
                runs.len()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, run) = call(
        &agent,
        "GET",
        &format!("{url}/v1/runs/{}", results[41]["id"].as_str().unwrap()),
        None,
        "",
    )
    .unwrap();
    assert_eq!(run["steps"][0]["output"]["greeting"], "hello, n42");
    assert_eq!(run["priority"], 0);
    server.kill();
}
