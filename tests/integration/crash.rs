//! Crash safety of a real `ax serve`: under a mixed load — a task firing
//! every second, manual triggers with and without idempotency keys (keys
//! retried across restarts), a three-step DAG, and a DAG whose middle step
//! fails twice and is retried — the process is killed with SIGKILL at random
//! moments and restarted on the same data directory, `AX_CRASH_KILLS` times
//! (100 by default, as in CI; `scripts/crash --kills 1000` for long runs).
//! Afterwards every run that was accepted (2xx) reaches a terminal state and
//! succeeds, no (task, scheduled_for) has two runs, no succeeded step ran
//! again, and no step made more attempts than `max_attempts` plus the
//! attempts a kill cut short (`lost`, as docs/RELIABILITY.md says).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::plugin_bytes;

pub(crate) const TOKEN: &str = "crash-test-token";

/// A child `ax serve` and its base URL. Its stderr goes to a temporary
/// file whose last lines a failing test prints (see `Drop`), so that a
/// server-side cause (a panic, a warning) shows in CI's output.
pub(crate) struct AxProcess {
    child: Child,
    pub(crate) url: String,
    log: tempfile::NamedTempFile,
    /// Under `AX_TEST_STORE=postgres`, the database it runs on (dropped
    /// after the process is killed).
    _scratch: Option<ax::store::postgres::testing::TestDatabase>,
}

impl AxProcess {
    /// Starts `ax serve` on a free loopback port with `data_dir`.
    pub(crate) fn start(data_dir: &Path) -> Self {
        Self::start_with(data_dir, &[])
    }

    /// [`AxProcess::start`] with more arguments for `ax serve`. Under
    /// `AX_TEST_STORE=postgres` (and without `--store` in `args`) it runs
    /// on a scratch PostgreSQL database of its own.
    pub(crate) fn start_with(data_dir: &Path, args: &[&std::ffi::OsStr]) -> Self {
        let log = tempfile::NamedTempFile::new().expect("a log file for ax serve");
        let stderr = log.reopen().expect("the log file, for writing");
        let scratch = if args.iter().any(|a| *a == "--store") {
            None
        } else {
            crate::common::scratch_database()
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_ax"));
        child
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args);
        if let Some(db) = &scratch {
            child.args(["--store", db.url()]);
        }
        let mut child = child
            .env("AX_ADMIN_TOKEN", TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("starting ax serve");
        let url = listening_url(&mut child).expect("ax serve exited before listening");
        Self {
            child,
            url,
            log,
            _scratch: scratch,
        }
    }

    /// Uploads the test plugin `name` (from `plugins/`) as version 1.0.0
    /// and waits until it is compiled. A test that kills the process must
    /// not start before: an attempt waiting for its plugin's compilation is
    /// running, a kill restarts the compilation, and on a loaded machine a
    /// compilation longer than the time between kills loses the same
    /// attempt at every kill until the step fails (`max_lost_attempts`, as
    /// docs/RELIABILITY.md says).
    pub(crate) fn upload(&self, agent: &ureq::Agent, name: &str) {
        let (status, body) = call(
            agent,
            "POST",
            &format!("{}/v1/plugins?name={name}&version=1.0.0", self.url),
            Some(&plugin_bytes(name)),
            "application/wasm",
        )
        .unwrap();
        assert_eq!(status, 201, "uploading {name}: {body}");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, plugin) = call(
                agent,
                "GET",
                &format!("{}/v1/plugins/{name}/1.0.0", self.url),
                None,
                "",
            )
            .unwrap();
            assert_eq!(status, 200, "{plugin}");
            if plugin["status"] != "compiling" {
                assert_eq!(
                    plugin["status"], "ready",
                    "{name} did not compile: {plugin}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} still compiling: {plugin}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id (to read its memory from `/proc`).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, no chance to clean up.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads the stdout (piped) of a spawned `ax serve` until it says where it
/// listens, then keeps draining it so the child never blocks on a full pipe.
/// `None` if it exited first.
pub(crate) fn listening_url(child: &mut Child) -> Option<String> {
    let mut lines = BufReader::new(child.stdout.take().expect("stdout piped")).lines();
    let url = loop {
        let line = lines.next()?.ok()?;
        if let Some(url) = line.strip_prefix("ax listening on ") {
            break url.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Some(url)
}

impl Drop for AxProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!(
                "-- the last lines ax serve wrote to stderr:\n{}",
                tail.join("\n")
            );
        }
    }
}

/// A client for the tests' servers. The timeout is generous: on a loaded
/// two-core machine a debug-build server can take seconds to answer, and a
/// killed server resets its connections at once anyway.
pub(crate) fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into()
}

pub(crate) fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    body: Option<&[u8]>,
    content_type: &str,
) -> Result<(u16, Value), String> {
    let auth = format!("Bearer {TOKEN}");
    let response = match (method, body) {
        ("GET", _) => agent.get(url).header("Authorization", &auth).call(),
        ("PUT", Some(b)) => agent
            .put(url)
            .header("Authorization", &auth)
            .header("Content-Type", content_type)
            .send(b),
        (_, Some(b)) => agent
            .post(url)
            .header("Authorization", &auth)
            .header("Content-Type", content_type)
            .send(b),
        (_, None) => agent.post(url).header("Authorization", &auth).send_empty(),
    };
    let mut response = response.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

#[test]
fn accepted_runs_survive_repeated_sigkill() {
    survive_repeated_sigkill(None);
}

/// The same on the embedded store's second engine: the data directory is
/// made on fjall first, and every restart keeps the engine it finds.
#[test]
fn accepted_runs_survive_repeated_sigkill_on_fjall() {
    survive_repeated_sigkill(Some(ax::store::EngineKind::Fjall));
}

fn survive_repeated_sigkill(engine: Option<ax::store::EngineKind>) {
    let dir = tempfile::tempdir().unwrap();
    if let Some(engine) = engine {
        drop(ax::store::SledStore::open_as(dir.path(), engine).unwrap());
    }
    let agent = new_agent();
    let ax = AxProcess::start(dir.path());
    ax.upload(&agent, "echo");
    ax.upload(&agent, "fail");
    // The tasks keep every run: retention's default (1,000 finished runs
    // per task) would otherwise delete accepted runs once the load passes it.
    let ticker = "name: ticker\ntrigger: { every: 1s }\noverlap: allow\ncatch_up: all\nretention: { keep_runs: 1000000 }\nplugin: echo@1.0.0\n";
    assert_eq!(
        call(
            &agent,
            "PUT",
            &format!("{}/v1/tasks/ticker", ax.url),
            Some(ticker.as_bytes()),
            "application/yaml"
        )
        .unwrap()
        .0,
        201
    );
    let retrying = "name: retrying\nretention: { keep_runs: 1000000 }\nsteps:\n  - name: a\n    plugin: echo@1.0.0\n  - name: flaky\n    needs: [a]\n    plugin: fail@1.0.0\n    input: { succeed_on_attempt: 3 }\n    retry: { max_attempts: 4, backoff: [50ms] }\n  - name: c\n    needs: [flaky]\n    plugin: echo@1.0.0\n";
    assert_eq!(
        call(
            &agent,
            "PUT",
            &format!("{}/v1/tasks/retrying", ax.url),
            Some(retrying.as_bytes()),
            "application/yaml"
        )
        .unwrap()
        .0,
        201
    );
    // A chain of 10 steps: more than a sled run record keeps, so its step
    // runs are stored under their own keys, a few per write.
    let mut pipeline =
        "name: pipeline\nretention: { keep_runs: 1000000 }\nsteps:\n  - name: s0\n    plugin: echo@1.0.0\n"
            .to_owned();
    for i in 1..10 {
        pipeline.push_str(&format!(
            "  - name: s{i}\n    needs: [s{}]\n    plugin: echo@1.0.0\n",
            i - 1
        ));
    }
    assert_eq!(
        call(
            &agent,
            "PUT",
            &format!("{}/v1/tasks/pipeline", ax.url),
            Some(pipeline.as_bytes()),
            "application/yaml"
        )
        .unwrap()
        .0,
        201
    );

    // Triggers from a client thread; the runs it was told about are recorded.
    let accepted: Arc<Mutex<Vec<String>>> = Arc::default();
    let url: Arc<Mutex<String>> = Arc::new(Mutex::new(ax.url.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (accepted, url, stop) = (accepted.clone(), url.clone(), stop.clone());
        std::thread::spawn(move || {
            let agent = new_agent();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let base = url.lock().unwrap().clone();
                // One trigger in three has no key: a failed request is then
                // not retried (it may or may not have been stored), the next
                // one is a new run.
                let keyed = !i.is_multiple_of(3);
                let body = if keyed {
                    json!({ "idempotency_key": format!("k{i}"), "input": { "i": i } })
                } else {
                    json!({ "input": { "i": i } })
                }
                .to_string();
                let task = ["ticker", "pipeline", "retrying"][(i % 3) as usize];
                match call(
                    &agent,
                    "POST",
                    &format!("{base}/v1/tasks/{task}/runs"),
                    Some(body.as_bytes()),
                    "application/json",
                ) {
                    Ok((200 | 201, run)) => {
                        accepted
                            .lock()
                            .unwrap()
                            .push(run["id"].as_str().unwrap().to_string());
                        i += 1;
                    }
                    // The server is down or restarting: retry the same key.
                    _ if keyed => std::thread::sleep(Duration::from_millis(20)),
                    _ => {
                        i += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        })
    };

    let mut ax = Some(ax);
    let kills: usize = std::env::var("AX_CRASH_KILLS")
        .ok()
        .map(|v| v.parse().expect("AX_CRASH_KILLS is a number"))
        .unwrap_or(100);
    let mut rng_state = 0x2545_f491_4f6c_dd1du64;
    let started = Instant::now();
    for _ in 0..kills {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        std::thread::sleep(Duration::from_millis(150 + rng_state % 700));
        ax.take().unwrap().kill();
        let next = AxProcess::start(dir.path());
        *url.lock().unwrap() = next.url.clone();
        ax = Some(next);
    }
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    let ax = ax.unwrap();

    // Every accepted run reaches a terminal state.
    let accepted = accepted.lock().unwrap().clone();
    assert!(
        accepted.len() > 2 * kills,
        "too little load: {}",
        accepted.len()
    );
    // Two minutes without one more run finishing is a stall (reading tens of
    // thousands of runs back takes longer than that by itself).
    let mut deadline = Instant::now() + Duration::from_secs(120);
    let mut pending: HashSet<String> = accepted.iter().cloned().collect();
    while !pending.is_empty() {
        assert!(
            Instant::now() < deadline,
            "runs never finished: {pending:?}"
        );
        let before = pending.len();
        pending.retain(|id| {
            let (status, run) =
                call(&agent, "GET", &format!("{}/v1/runs/{id}", ax.url), None, "").unwrap();
            assert_eq!(status, 200, "accepted run {id} is gone: {run}");
            !matches!(
                run["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            )
        });
        if pending.len() < before {
            deadline = Instant::now() + Duration::from_secs(120);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in &accepted {
        let (_, run) = call(&agent, "GET", &format!("{}/v1/runs/{id}", ax.url), None, "").unwrap();
        assert_eq!(run["status"], "succeeded", "{run}");
        // No succeeded step ran again: a success is its step's last attempt.
        // No step made more attempts than it may: one for a step without
        // retry, four for `flaky`, plus those a kill cut short.
        for step in run["steps"].as_array().unwrap() {
            let attempts = step["attempts"].as_array().unwrap();
            let lost = attempts.iter().filter(|a| a["outcome"] == "lost").count();
            let allowed = if step["name"] == "flaky" { 4 } else { 1 };
            assert!(
                attempts.len() <= allowed + lost,
                "step made {} attempts, {lost} lost: {step}",
                attempts.len()
            );
            let first_success = attempts.iter().position(|a| a["outcome"] == "succeeded");
            if let Some(p) = first_success {
                assert_eq!(p + 1, attempts.len(), "a succeeded step ran again: {step}");
            }
        }
    }

    // No fire instant has two runs.
    let mut by_instant: BTreeMap<String, usize> = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/v1/runs?task=ticker&limit=1000", ax.url);
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let (_, page) = call(&agent, "GET", &url, None, "").unwrap();
        for run in page["runs"].as_array().unwrap() {
            if run["trigger"] != "manual" {
                *by_instant
                    .entry(run["scheduled_for"].as_str().unwrap().to_string())
                    .or_default() += 1;
            }
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert!(!by_instant.is_empty(), "the ticker never fired");
    let twice: Vec<_> = by_instant.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "instants fired twice: {twice:?}");
    // The line `scripts/crash` reports.
    eprintln!(
        "crash: {kills} SIGKILLs in {:.0}s; {} accepted runs all succeeded; {} fire instants, none twice",
        started.elapsed().as_secs_f64(),
        accepted.len(),
        by_instant.len()
    );
}

/// An idempotency key outlives its run across a SIGKILL: retention (sweeping
/// every second) deletes the key's run, the server is killed and restarted,
/// and a replay of the key still answers 410 `run_deleted` with the run's id
/// instead of starting a second run.
#[test]
fn a_deleted_runs_key_is_remembered_across_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ax.yaml");
    std::fs::write(&config, "retention: { sweep_every: 1s }\n").unwrap();
    let data = dir.path().join("data");
    let args = [std::ffi::OsStr::new("--config"), config.as_os_str()];
    let agent = new_agent();
    let ax = AxProcess::start_with(&data, &args);
    let post = |url: &str, path: &str, body: &[u8], ct: &str| {
        call(&agent, "POST", &format!("{url}{path}"), Some(body), ct).unwrap()
    };
    let (status, _) = post(
        &ax.url,
        "/v1/plugins?name=echo&version=1.0.0",
        &plugin_bytes("echo"),
        "application/wasm",
    );
    assert_eq!(status, 201);
    let task = "name: keyed\nplugin: echo@1.0.0\nretention: { keep_runs: 1 }\n";
    let (status, _) = call(
        &agent,
        "PUT",
        &format!("{}/v1/tasks/keyed", ax.url),
        Some(task.as_bytes()),
        "application/yaml",
    )
    .unwrap();
    assert_eq!(status, 201);
    let keyed = |url: &str, key: &str| {
        post(
            url,
            "/v1/tasks/keyed/runs",
            json!({ "idempotency_key": key }).to_string().as_bytes(),
            "application/json",
        )
    };
    let (status, first) = keyed(&ax.url, "k1");
    assert_eq!(status, 201, "{first}");
    let first = first["id"].as_str().unwrap().to_string();
    // Each run finishes before the next: then keep_runs 1 deletes `first`.
    let finished = |url: &str, id: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, run) = call(&agent, "GET", &format!("{url}/v1/runs/{id}"), None, "").unwrap();
            if run["status"] == "succeeded" {
                break;
            }
            assert!(Instant::now() < deadline, "run {id} never finished: {run}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    finished(&ax.url, &first);
    let (status, second) = keyed(&ax.url, "k2");
    assert_eq!(status, 201, "{second}");
    finished(&ax.url, second["id"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while call(
        &agent,
        "GET",
        &format!("{}/v1/runs/{first}", ax.url),
        None,
        "",
    )
    .unwrap()
    .0 != 404
    {
        assert!(Instant::now() < deadline, "retention never deleted {first}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A deletion is not waited for; a trigger's answer waits until every
    // write before it is on disk, the deletion included.
    let (status, third) = keyed(&ax.url, "k3");
    assert_eq!(status, 201, "{third}");
    ax.kill();

    let ax = AxProcess::start_with(&data, &args);
    let (status, answer) = keyed(&ax.url, "k1");
    assert_eq!(status, 410, "{answer}");
    assert_eq!(answer["error"]["code"], "run_deleted", "{answer}");
    assert_eq!(
        answer["error"]["details"]["run_id"],
        first.as_str(),
        "{answer}"
    );
    let (_, page) = call(
        &agent,
        "GET",
        &format!("{}/v1/runs?task=keyed", ax.url),
        None,
        "",
    )
    .unwrap();
    let ids: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    // Only k2's and k3's runs (retention may have deleted k2's by now): no
    // new run for k1.
    let (second, third) = (
        second["id"].as_str().unwrap(),
        third["id"].as_str().unwrap(),
    );
    assert!(ids.iter().all(|id| *id == second || *id == third), "{page}");
}
