//! A real `ax serve` on a PostgreSQL server of its own that goes away and
//! comes back under load, ax never restarted: while triggers keep coming,
//! the server is stopped (`pg_ctl stop -m fast`, as an operator would) and
//! later started again, then restarted (`pg_ctl restart -m fast`).
//! Meanwhile every trigger is answered either 2xx or 503
//! `store_unavailable` with `Retry-After`, `/readyz` is 503 while
//! `/healthz` stays 200, and no fire is stored; afterwards ax resumes by
//! itself, every run acknowledged before, during or after reaches
//! `succeeded`, and the cron task's missed fires are run per `catch_up:
//! all`, none missing, none twice.
//!
//! The server is started for this test alone (`scripts/postgres`), not the
//! one the other tests share: stopping it would break them. Like the other
//! PostgreSQL tests it runs when `AX_TEST_POSTGRES` is set (scripts/test
//! sets it) and fails without it under `AX_CI=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::crash::{AxProcess, call, new_agent};
use crate::full_disk::{all_succeed, every_second_across, status_of, trigger};

/// A throwaway PostgreSQL cluster in a temporary directory, stopped and
/// removed on drop.
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    pub(crate) url: String,
}

impl Cluster {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres")
    }

    /// `scripts/postgres ACTION DIR`; its stdout.
    fn run(dir: &Path, action: &str) -> String {
        Self::run_with(dir, action, &[])
    }

    /// [`Cluster::run`] with `env` set for the script.
    fn run_with(dir: &Path, action: &str, env: &[(&str, &str)]) -> String {
        let out = Command::new(Self::script())
            .arg(action)
            .arg(dir)
            .envs(env.iter().copied())
            .output()
            .expect("running scripts/postgres");
        assert!(
            out.status.success(),
            "scripts/postgres {action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn start() -> Self {
        let dir = tempfile::tempdir().expect("a directory for the cluster");
        let url = Self::run(dir.path(), "start");
        Self { dir, url }
    }

    /// A cluster that serves TLS only (`AX_POSTGRES_SSL=on`): its CA is
    /// [`Cluster::tls_file`] `ca.pem`, and `other-ca.pem` signed nothing.
    pub(crate) fn start_tls() -> Self {
        let dir = tempfile::tempdir().expect("a directory for the cluster");
        let url = Self::run_with(dir.path(), "start", &[("AX_POSTGRES_SSL", "on")]);
        Self { dir, url }
    }

    /// A file of the TLS cluster's `tls/` directory.
    pub(crate) fn tls_file(&self, name: &str) -> PathBuf {
        self.dir.path().join("tls").join(name)
    }

    fn act(&self, action: &str) {
        Self::run(self.dir.path(), action);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

/// What the load's triggers were answered: the runs acknowledged, and any
/// answer that is neither 2xx nor 503 `store_unavailable` with
/// `Retry-After`.
#[derive(Default)]
struct Answers {
    acknowledged: Vec<String>,
    refused: usize,
    wrong: Vec<String>,
}

#[test]
fn a_database_that_goes_away_and_restarts_under_load_is_survived_without_restarting_ax() {
    if !crate::common::postgres_server_named() {
        return;
    }
    let cluster = Cluster::start();
    let data = tempfile::tempdir().expect("a data directory");
    let store = std::ffi::OsString::from(&cluster.url);
    let ax = AxProcess::start_with(
        data.path(),
        &[std::ffi::OsStr::new("--store"), store.as_os_str()],
    );
    let url = ax.url.clone();
    let agent = new_agent();
    ax.upload(&agent, "echo");
    for (name, yaml) in [
        (
            "ticker",
            "name: ticker\ntrigger: { every: 1s }\noverlap: allow\ncatch_up: all\nretention: { keep_runs: 1000000 }\nplugin: echo@1.0.0\n",
        ),
        (
            "manual",
            "name: manual\nretention: { keep_runs: 1000000 }\nplugin: echo@1.0.0\n",
        ),
    ] {
        let (status, body) = call(
            &agent,
            "PUT",
            &format!("{url}/v1/tasks/{name}"),
            Some(yaml.as_bytes()),
            "application/yaml",
        )
        .unwrap();
        assert_eq!(status, 201, "{body}");
    }

    // The load: triggers one after another, each with a key of its own.
    let answers = Arc::new(Mutex::new(Answers::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (answers, stop, url, agent) =
            (answers.clone(), stop.clone(), url.clone(), agent.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let answer = trigger(&agent, &url, "manual", &format!("load-{i}"));
                let mut answers = answers.lock().unwrap();
                match answer {
                    Ok((200 | 201, _, run)) => answers
                        .acknowledged
                        .push(run["id"].as_str().unwrap().to_string()),
                    Ok((503, Some(_), body)) if body["error"]["code"] == "store_unavailable" => {
                        answers.refused += 1;
                    }
                    Ok((status, retry, body)) => answers
                        .wrong
                        .push(format!("{status} (Retry-After {retry:?}): {body}")),
                    Err(e) => answers.wrong.push(format!("no answer: {e}")),
                }
                drop(answers);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let refused = || answers.lock().unwrap().refused;
    let acknowledged = || answers.lock().unwrap().acknowledged.len();

    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(status_of(&agent, &format!("{url}/readyz")), 200);
    assert!(acknowledged() > 0, "no trigger succeeded before the stop");

    // The database goes away: triggers are refused, ax stays up.
    cluster.act("down");
    let away = chrono::Utc::now().timestamp_millis();
    let deadline = Instant::now() + Duration::from_secs(30);
    while refused() == 0 {
        assert!(
            Instant::now() < deadline,
            "no trigger was refused with the database away"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while status_of(&agent, &format!("{url}/readyz")) != 503 {
        assert!(
            Instant::now() < deadline,
            "/readyz stayed ready with the database away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status_of(&agent, &format!("{url}/healthz")), 200);
    std::thread::sleep(Duration::from_secs(4));
    let before_up = acknowledged();

    // It comes back: ax resumes by itself.
    cluster.act("up");
    let back = Instant::now();
    let deadline = back + Duration::from_secs(30);
    while status_of(&agent, &format!("{url}/readyz")) != 200 || acknowledged() == before_up {
        assert!(
            Instant::now() < deadline,
            "ax did not resume within 30 s of the database's return"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let resumed_in = back.elapsed();

    // A restart under load.
    std::thread::sleep(Duration::from_secs(2));
    cluster.act("restart");
    let before_restart = acknowledged();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acknowledged() < before_restart + 20 {
        assert!(
            Instant::now() < deadline,
            "triggers did not succeed again after a restart of the database"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    load.join().expect("the load thread");
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    assert!(
        answers.wrong.is_empty(),
        "answers neither 2xx nor 503 store_unavailable with Retry-After: {:?}",
        answers.wrong
    );

    // Every acknowledged run reaches `succeeded`; the fires missed while
    // the database was away were run, none twice.
    all_succeed(
        &agent,
        &url,
        &answers.acknowledged,
        Duration::from_secs(120),
    );
    std::thread::sleep(Duration::from_secs(2));
    let instants = every_second_across(&agent, &url, "ticker", away);
    eprintln!(
        "database away and restarted: resumed {:.1}s after it came back; {} acknowledged runs succeeded, {} triggers refused with 503; {} fire instants, none missing",
        resumed_in.as_secs_f64(),
        answers.acknowledged.len(),
        answers.refused,
        instants.len()
    );
    drop(ax);
}
