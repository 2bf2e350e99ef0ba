//! Structured logs and request ids, end to end: the real `ax` binary with
//! `--log-format json`, a failing run, and the JSON lines it wrote; request
//! ids on answers and in error bodies.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::plugin_bytes;
use crate::crash::{TOKEN, new_agent};

fn send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, Vec<u8>)>,
) -> (u16, ureq::http::HeaderMap, Value) {
    let mut b = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {TOKEN}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let bytes = match body {
        Some((ct, bytes)) => {
            b = b.header("content-type", ct);
            bytes
        }
        None => Vec::new(),
    };
    let mut r = agent.run(b.body(bytes).unwrap()).expect("answer");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[test]
fn json_logs_carry_request_and_run_ids() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .env("AX_ADMIN_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("ax serve");
    let Some(url) = crate::crash::listening_url(&mut child) else {
        let _ = child.wait();
        panic!(
            "ax serve exited before listening: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    };
    let agent = new_agent();

    let (status, ..) = send(
        &agent,
        "POST",
        &format!("{url}/v1/plugins?name=fail&version=1.0.0"),
        &[],
        Some(("application/wasm", plugin_bytes("fail"))),
    );
    assert_eq!(status, 201);
    let task = "name: broken\nplugin: fail@1.0.0\ninput: { kind: fatal, message: boom }\n";
    let (status, headers, _) = send(
        &agent,
        "PUT",
        &format!("{url}/v1/tasks/broken"),
        &[],
        Some(("application/yaml", task.as_bytes().to_vec())),
    );
    assert_eq!(status, 201);
    let generated = headers["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(generated.len(), 24, "a generated id: {generated}");

    let (status, headers, run) = send(
        &agent,
        "POST",
        &format!("{url}/v1/tasks/broken/runs"),
        &[("x-request-id", "trace-abc-123")],
        Some(("application/json", b"{}".to_vec())),
    );
    assert_eq!(status, 201);
    assert_eq!(
        headers["x-request-id"], "trace-abc-123",
        "a sane id is echoed"
    );
    let run_id = run["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, _, run) = send(&agent, "GET", &format!("{url}/v1/runs/{run_id}"), &[], None);
        if run["status"] == "failed" {
            break;
        }
        assert!(Instant::now() < deadline, "the run did not fail: {run}");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Errors carry the id in the body too; an insane incoming id is replaced.
    let (status, headers, body) = send(
        &agent,
        "GET",
        &format!("{url}/v1/runs/r-nope"),
        &[("x-request-id", "bad id with spaces")],
        None,
    );
    assert_eq!(status, 404);
    let replaced = headers["x-request-id"].to_str().unwrap();
    assert_ne!(replaced, "bad id with spaces");
    assert_eq!(body["error"]["request_id"], replaced, "{body}");

    // Let the log lines reach the file, then stop.
    std::thread::sleep(Duration::from_millis(200));
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log_path).unwrap();
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let request = records
        .iter()
        .find(|r| {
            r["fields"]["message"] == "request" && r["fields"]["request_id"] == "trace-abc-123"
        })
        .unwrap_or_else(|| panic!("no request line with the id in\n{text}"));
    assert_eq!(request["fields"]["status"], 201);
    // The handler's own line sits in the request's span.
    assert!(
        records
            .iter()
            .any(|r| r["fields"]["message"] == "run triggered"
                && r["span"]["request_id"] == "trace-abc-123"
                && r["fields"]["run"] == run_id.as_str()),
        "no `run triggered` line in the request span:\n{text}"
    );
    let attempt = records
        .iter()
        .find(|r| r["fields"]["message"] == "attempt did not succeed")
        .unwrap_or_else(|| panic!("no attempt line in\n{text}"));
    let f = &attempt["fields"];
    assert_eq!(f["run"], run_id.as_str());
    assert_eq!(f["tenant"], "default");
    assert_eq!(f["task"], "broken");
    assert_eq!(f["step"], "broken");
    assert_eq!(f["attempt"], 1);
    assert_eq!(f["outcome"], "failed");
    let ended = records
        .iter()
        .find(|r| r["fields"]["message"] == "run ended without success")
        .unwrap_or_else(|| panic!("no run line in\n{text}"));
    assert_eq!(ended["fields"]["run"], run_id.as_str());
    assert_eq!(ended["fields"]["status"], "failed");
}
