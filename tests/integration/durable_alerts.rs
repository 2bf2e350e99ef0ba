//! Durable alerts across SIGKILL: a real `ax serve` (the binary), a real
//! webhook receiver on a loopback port, and the outbox in the store. An
//! alert raised while the receiver is down survives a kill and a restart
//! and is delivered, byte for byte as stored, once the receiver is up; one
//! the receiver keeps refusing is dead-lettered, listed by `GET /v1/alerts`,
//! and delivered after `POST /v1/alerts/{id}/retry`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::plugin_bytes;
use crate::crash::{AxProcess, call, new_agent};

/// What a receiver got, and the status it answers with.
#[derive(Default)]
struct Receiver {
    bodies: Mutex<Vec<Value>>,
    answer: AtomicU16,
}

/// Serves webhook POSTs on `listener` from a thread, answering each with
/// the receiver's current status.
fn serve(listener: TcpListener, status: u16) -> Arc<Receiver> {
    let receiver = Arc::new(Receiver::default());
    receiver.answer.store(status, Ordering::SeqCst);
    let r = receiver.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let status = r.answer.load(Ordering::SeqCst);
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            r.bodies
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        }
    });
    receiver
}

/// A config with the default tenant's failures alerted to `hook` (set by
/// the admin, so the literal loopback address grants itself).
fn write_config(dir: &Path, hook: &str, max_attempts: u32) -> std::path::PathBuf {
    let config = dir.join("ax.yaml");
    let text = format!(
        "alerts:\n  max_attempts: {max_attempts}\n  initial_backoff: 50ms\n  max_backoff: 200ms\n  \
         timeout: 2s\n  tenants:\n    default: {{ webhook: \"{hook}\", on: [failed] }}\n"
    );
    std::fs::write(&config, text).unwrap();
    config
}

fn get(url: &str) -> Value {
    let (status, body) = call(&new_agent(), "GET", url, None, "").unwrap();
    assert_eq!(status, 200, "GET {url}: {body}");
    body
}

fn post(url: &str, body: &[u8], content_type: &str) -> (u16, Value) {
    call(&new_agent(), "POST", url, Some(body), content_type).unwrap()
}

/// Uploads `fail` and `echo` and saves a failing task and a working one.
fn tasks(url: &str) {
    for plugin in ["fail", "echo"] {
        let (status, body) = post(
            &format!("{url}/v1/plugins?name={plugin}&version=1.0.0"),
            &plugin_bytes(plugin),
            "application/wasm",
        );
        assert_eq!(status, 201, "{body}");
    }
    for task in [
        "name: broken\nplugin: fail@1.0.0\ninput: { kind: fatal, message: boom }\n",
        "name: fine\nplugin: echo@1.0.0\n",
    ] {
        let name = task[6..].lines().next().unwrap();
        let (status, body) = call(
            &new_agent(),
            "PUT",
            &format!("{url}/v1/tasks/{name}"),
            Some(task.as_bytes()),
            "application/yaml",
        )
        .unwrap();
        assert_eq!(status, 201, "{body}");
    }
}

/// Triggers `task` and waits until the run is terminal; returns its id.
fn run_to_end(url: &str, task: &str) -> String {
    let (status, run) = post(
        &format!("{url}/v1/tasks/{task}/runs"),
        b"{}",
        "application/json",
    );
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run = get(&format!("{url}/v1/runs/{id}"));
        if ["failed", "succeeded"].contains(&run["status"].as_str().unwrap_or("")) {
            return id;
        }
        assert!(Instant::now() < deadline, "run {id} never ended: {run}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `GET /v1/alerts?status=…` lists `n` alerts; returns them.
fn alerts(url: &str, status: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = get(&format!("{url}/v1/alerts?status={status}"));
        let got = page["alerts"].as_array().unwrap().clone();
        if got.len() >= n {
            assert_eq!(got.len(), n, "{page}");
            return got;
        }
        assert!(Instant::now() < deadline, "{n} {status} alerts: {page}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn received(receiver: &Receiver, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = receiver.bodies.lock().unwrap().clone();
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{} of {n} bodies", got.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_alert_raised_while_the_receiver_is_down_survives_sigkill_and_is_delivered_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    // A port with nobody listening: the receiver is down.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hook = format!("http://127.0.0.1:{port}/hook");
    let config = write_config(dir.path(), &hook, 1_000);
    let data = dir.path().join("data");
    let args = [std::ffi::OsStr::new("--config"), config.as_os_str()];
    let ax = AxProcess::start_with(&data, &args);
    tasks(&ax.url);
    let failed = run_to_end(&ax.url, "broken");
    let pending = alerts(&ax.url, "pending", 1);
    let stored = pending[0].clone();
    assert_eq!(stored["run_id"], failed.as_str(), "{stored}");
    assert_eq!(stored["payload"]["id"], stored["id"], "{stored}");
    assert_eq!(stored["payload"]["kind"], "run_failed", "{stored}");
    // A trigger's answer waits until every write before it is on disk: the
    // failed run and its alert included.
    run_to_end(&ax.url, "fine");
    ax.kill();

    let ax = AxProcess::start_with(&data, &args);
    // Still pending after the restart, still the same alert.
    let after = alerts(&ax.url, "pending", 1);
    assert_eq!(after[0]["id"], stored["id"]);
    assert_eq!(after[0]["payload"], stored["payload"]);
    // The receiver comes up: the worker, retrying, delivers what it stored.
    let receiver = serve(TcpListener::bind(("127.0.0.1", port)).unwrap(), 200);
    let bodies = received(&receiver, 1);
    assert_eq!(bodies[0], stored["payload"]);
    let delivered = alerts(&ax.url, "delivered", 1);
    assert_eq!(delivered[0]["id"], stored["id"]);
    assert!(
        delivered[0]["attempts"].as_u64().unwrap() >= 2,
        "{}",
        delivered[0]
    );
    assert_eq!(alerts(&ax.url, "pending", 0).len(), 0);
    // Delivered once: nothing more arrives.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(receiver.bodies.lock().unwrap().len(), 1);
    ax.kill();
}

#[test]
fn an_alert_the_receiver_keeps_refusing_is_dead_listed_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    let receiver = serve(listener, 500);
    let config = write_config(dir.path(), &hook, 2);
    let data = dir.path().join("data");
    let args = [std::ffi::OsStr::new("--config"), config.as_os_str()];
    let ax = AxProcess::start_with(&data, &args);
    tasks(&ax.url);
    let failed = run_to_end(&ax.url, "broken");
    let dead = alerts(&ax.url, "dead", 1);
    let alert = &dead[0];
    assert_eq!(alert["run_id"], failed.as_str());
    assert_eq!(alert["attempts"], 2, "{alert}");
    assert_eq!(alert["last_error"], "answered 500", "{alert}");
    assert_eq!(received(&receiver, 2).len(), 2);
    let id = alert["id"].as_str().unwrap();
    assert_eq!(alert["url"], hook.as_str(), "the admin sees the webhook");
    // A tenant token sees its alerts, but not the URL of the admin's webhook.
    let (status, token) = post(&format!("{}/v1/tenants/default/tokens", ax.url), b"", "");
    assert_eq!(status, 201, "{token}");
    let mut r = new_agent()
        .get(&format!("{}/v1/alerts?status=dead", ax.url))
        .header(
            "Authorization",
            format!("Bearer {}", token["token"].as_str().unwrap()),
        )
        .call()
        .unwrap();
    let seen: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(seen["alerts"][0]["id"], id, "{seen}");
    assert_eq!(seen["alerts"][0]["url"], "(set by the admin)", "{seen}");
    assert!(!seen.to_string().contains(&hook), "{seen}");
    // Dead alerts are kept across a restart too.
    ax.kill();
    let ax = AxProcess::start_with(&data, &args);
    assert_eq!(alerts(&ax.url, "dead", 1)[0]["id"], id);
    let metrics = get_text(&format!("{}/metrics", ax.url));
    assert!(metrics.contains("\nax_alerts_dead 1\n"), "{metrics}");
    // The CLI lists it.
    let (ok, out) = ax_cli(&ax.url, &["alerts", "list", "--status", "dead"]);
    assert!(
        ok && out.contains(id) && out.contains("answered 500"),
        "{out}"
    );
    // Unknown ids are 404; a retry of the dead one puts it back.
    let (status, body) = post(&format!("{}/v1/alerts/a0/retry", ax.url), b"", "");
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")));
    receiver.answer.store(204, Ordering::SeqCst);
    let (status, body) = post(&format!("{}/v1/alerts/{id}/retry", ax.url), b"", "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["status"].as_str(), body["attempts"].as_u64()),
        (Some("pending"), Some(0))
    );
    let delivered = alerts(&ax.url, "delivered", 1);
    assert_eq!(delivered[0]["id"], id);
    assert_eq!(delivered[0]["attempts"], 1);
    let bodies = received(&receiver, 3);
    assert_eq!(bodies[2], delivered[0]["payload"]);
    assert_eq!(bodies[2]["id"], id);
    // Only a dead alert is retried.
    let (status, body) = post(&format!("{}/v1/alerts/{id}/retry", ax.url), b"", "");
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("conflict")),
        "{body}"
    );
    let url = format!("{}/v1/alerts?status=nonsense", ax.url);
    let (status, body) = call(&new_agent(), "GET", &url, None, "").unwrap();
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("bad_request")),
        "{body}"
    );
    ax.kill();
}

fn get_text(url: &str) -> String {
    let mut r = new_agent()
        .get(url)
        .header("Authorization", format!("Bearer {}", crate::crash::TOKEN))
        .call()
        .unwrap();
    r.body_mut().read_to_string().unwrap()
}

/// Runs the `ax` CLI against `url`; whether it succeeded, and what it
/// printed (stdout, then stderr).
fn ax_cli(url: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .env("AX_URL", url)
        .env("AX_TOKEN", crate::crash::TOKEN)
        .env("NO_COLOR", "1")
        .output()
        .expect("running ax");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
