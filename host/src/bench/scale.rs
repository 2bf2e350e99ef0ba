//! `ax bench scale`: what a real `ax serve` costs as its tasks and queue grow,
//! driven over HTTP as an operator would (issue 14).
//!
//! The benchmark starts the `ax` binary (`ax serve`, the current executable)
//! as a child process on a fresh data directory and a loopback port, then:
//!
//! 1. applies `tasks - every_second` cron tasks (`PUT /v1/tasks/{name}`) from
//!    `clients` keep-alive clients. Their instants are spread over four hours
//!    starting an hour from now, so none fires during the benchmark: they
//!    cost memory, store and recovery, not runtime;
//! 2. queues `queued` runs (`POST /v1/tasks/held/runs`) from the same clients,
//!    in a tenant `held` whose fuel quota (1 per window, `out_of_fuel: hold`)
//!    holds its runs queued after the first: the queue stays at `queued`
//!    whatever the runtime's speed, which a one-slot pool would not (it
//!    drains at the echo plugin's rate);
//! 3. kills the server with SIGKILL and starts a new one on the same
//!    directory, timing until `/readyz` answers ready and until a manual
//!    trigger's run (tenant `default`) has been dispatched and finished —
//!    "ready" as the issue defines it; then checks that every accepted
//!    queued run is still there (queued, or ended if it was let through: the
//!    first run starts while the quota is not used up, gets its 1 unit of
//!    fuel and fails);
//! 4. applies `every_second` tasks firing every second (`every: 1s`, so the
//!    fires spread over the second) and measures their fire lateness for
//!    `seconds` from the run records: the run's `started_at` minus its
//!    `scheduled_for` (ms precision, as the API answers them). A run of the
//!    window that has not started when it is read counts with the lateness
//!    it has so far, a lower bound, and is reported as unstarted.
//!
//! Memory is the server's `VmRSS` and `VmHWM` (`/proc/PID/status`); the
//! store's size is what `du` counts (allocated blocks) under the data
//! directory. The data directory is deleted at the end, also on an error.

use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::{Value, json};

use super::percentile;

/// The admin token of the benchmark's server.
const TOKEN: &str = "bench";
/// The tenant whose runs are held queued.
const HELD: &str = "held";
/// How long any single wait of the benchmark may take before it gives up.
const PATIENCE: Duration = Duration::from_secs(600);

/// What to build and measure.
#[derive(Clone, Debug)]
pub struct ScaleConfig {
    /// The `ax` binary started as `ax serve`.
    pub exe: PathBuf,
    /// Task definitions in all; `every_second` of them fire every second.
    pub tasks: usize,
    /// Runs queued (held) in the tenant `held`.
    pub queued: usize,
    /// Of the tasks, how many fire every second (lateness is measured on them).
    pub every_second: usize,
    /// Seconds of fire lateness measured.
    pub seconds: u64,
    /// HTTP clients at once, each one keep-alive connection.
    pub clients: usize,
    /// Tasks and queued runs per request (1: one request each; more: through
    /// `tasks:apply` and `runs:batch`, whose trigger latency is then a
    /// request's).
    pub batch: usize,
    /// `store.cache_mb` of the server (else its default).
    pub cache_mb: Option<u64>,
    /// Where the scratch data directory is made (else the temp directory).
    pub dir: Option<PathBuf>,
    /// A PostgreSQL server: the server runs on a new database of it
    /// (dropped after) instead of sled, and the store's size is the
    /// database's (`pg_database_size`).
    pub store: Option<String>,
}

impl ScaleConfig {
    /// The checks a command line needs: every count in range.
    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.every_second <= self.tasks,
            "--every-second {} is more than --tasks {}",
            self.every_second,
            self.tasks
        );
        anyhow::ensure!(self.clients >= 1, "--clients must be 1 or more");
        anyhow::ensure!(
            (1..=1000).contains(&self.batch),
            "--batch must be 1 to 1000 (the bulk routes' limit)"
        );
        anyhow::ensure!(
            self.every_second == 0 || self.seconds >= 1,
            "--seconds must be 1 or more"
        );
        Ok(())
    }
}

/// Memory of the server process, bytes.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Memory {
    /// Resident now (`VmRSS`).
    pub rss: u64,
    /// Highest resident so far (`VmHWM`).
    pub peak: u64,
}

/// What `ax bench scale` measured.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleStats {
    /// Task definitions in all.
    pub tasks: usize,
    /// Of them, firing every second.
    pub every_second: usize,
    /// Queued runs asked for.
    pub queued: usize,
    /// HTTP clients at once.
    pub clients: usize,
    /// Tasks and runs per request (1: single `PUT`s and `POST`s).
    pub batch: usize,
    /// sled's cache of the server, MiB (`store.cache_mb`).
    pub cache_mb: u64,
    /// The server ran on PostgreSQL (else sled).
    pub postgres: bool,
    /// The server with nothing loaded (plugins uploaded).
    pub idle: Memory,
    /// Cron tasks applied (`tasks - every_second`).
    pub applied: usize,
    /// Of them per second.
    pub apply_per_sec: f64,
    /// After applying them.
    pub after_tasks: Memory,
    /// The store on disk after applying them, bytes.
    pub store_after_tasks: u64,
    /// Runs accepted (`201`).
    pub triggered: usize,
    /// Of them per second.
    pub trigger_per_sec: f64,
    /// Median trigger latency, ms.
    pub trigger_p50_ms: f64,
    /// 99th percentile trigger latency, ms.
    pub trigger_p99_ms: f64,
    /// After queueing them.
    pub after_queue: Memory,
    /// The store on disk after queueing, bytes.
    pub store_after_queue: u64,
    /// SIGKILL → the new server's `/readyz` answers ready, s.
    pub restart_ready_secs: f64,
    /// SIGKILL → a manual trigger's run on the new server finished, s.
    pub restart_serving_secs: f64,
    /// The new server once serving.
    pub after_restart: Memory,
    /// Accepted queued runs still queued after the restart.
    pub still_queued: usize,
    /// Accepted queued runs that ended (let through before the hold took
    /// hold: the first gets the quota's 1 unit of fuel and fails).
    pub finished: usize,
    /// Accepted queued runs missing after the restart (must be 0).
    pub lost: usize,
    /// Fires of the every-second tasks measured.
    pub lateness_samples: usize,
    /// Of them, not started when read (counted with their lateness so far).
    pub lateness_unstarted: usize,
    /// Median fire lateness, ms.
    pub lateness_p50_ms: f64,
    /// 99th percentile fire lateness, ms.
    pub lateness_p99_ms: f64,
    /// Worst fire lateness, ms.
    pub lateness_max_ms: f64,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// `(b - a) / n` in KiB, for "per task" and "per run" figures.
fn kib_each(a: u64, b: u64, n: usize) -> String {
    if n == 0 {
        return "–".into();
    }
    format!("{:.1} KiB", b.saturating_sub(a) as f64 / 1024.0 / n as f64)
}

impl fmt::Display for ScaleStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "ax bench scale: {} tasks ({} every second), {} queued runs, {} HTTP clients, {} per request, {}",
            self.tasks,
            self.every_second,
            self.queued,
            self.clients,
            self.batch,
            if self.postgres {
                "PostgreSQL".to_string()
            } else {
                format!("sled cache {} MiB", self.cache_mb)
            }
        )?;
        let (apply_route, trigger_route, per) = if self.batch == 1 {
            ("PUT /v1/tasks/{name}", "POST /v1/tasks/held/runs", "")
        } else {
            (
                "POST /v1/tasks:apply",
                "POST /v1/tasks/held/runs:batch",
                " per request",
            )
        };
        writeln!(f, "| measure | value |")?;
        writeln!(f, "|---|---|")?;
        let mem = |m: &Memory| format!("{} (peak {})", mib(m.rss), mib(m.peak));
        writeln!(f, "| RSS, idle server | {} |", mem(&self.idle))?;
        writeln!(
            f,
            "| apply, `{apply_route}` | {} cron tasks, {:.0} tasks/s |",
            self.applied, self.apply_per_sec
        )?;
        writeln!(
            f,
            "| RSS with the tasks | {}, {} per task |",
            mem(&self.after_tasks),
            kib_each(self.idle.rss, self.after_tasks.rss, self.applied)
        )?;
        writeln!(
            f,
            "| store on disk with the tasks | {} |",
            mib(self.store_after_tasks)
        )?;
        writeln!(
            f,
            "| triggers, `{trigger_route}` | {} accepted, {:.0} runs/s, p50 {:.2} ms, p99 {:.2} ms{per} |",
            self.triggered, self.trigger_per_sec, self.trigger_p50_ms, self.trigger_p99_ms
        )?;
        writeln!(
            f,
            "| RSS with the queue | {}, {} per run |",
            mem(&self.after_queue),
            kib_each(self.after_tasks.rss, self.after_queue.rss, self.triggered)
        )?;
        writeln!(
            f,
            "| store on disk with the queue | {} |",
            mib(self.store_after_queue)
        )?;
        writeln!(
            f,
            "| SIGKILL → `/readyz` ready | {:.2} s |",
            self.restart_ready_secs
        )?;
        writeln!(
            f,
            "| SIGKILL → a triggered run finished | {:.2} s |",
            self.restart_serving_secs
        )?;
        writeln!(
            f,
            "| RSS after the restart | {} |",
            mem(&self.after_restart)
        )?;
        writeln!(
            f,
            "| queued runs after the restart | {} queued, {} finished, {} lost |",
            self.still_queued, self.finished, self.lost
        )?;
        write!(
            f,
            "| fire lateness, {} tasks every second | {} fires ({} unstarted): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms |",
            self.every_second,
            self.lateness_samples,
            self.lateness_unstarted,
            self.lateness_p50_ms,
            self.lateness_p99_ms,
            self.lateness_max_ms
        )
    }
}

/// Builds the load on a child `ax serve` and measures it (see the module doc).
pub fn scale(config: ScaleConfig) -> anyhow::Result<ScaleStats> {
    config.validate()?;
    let parent = config.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = Scratch(parent.join(format!("ax-bench-scale-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&scratch.0);
    let data = scratch.0.join("data");
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let config_file = scratch.0.join("ax.json");
    let headroom = config.queued.saturating_mul(2).max(10_000) + 10_000;
    let mut server_config = json!({
        "listen": "127.0.0.1:0",
        "data_dir": data,
        "admin_token": TOKEN,
        "max_queued_per_tenant": headroom,
        "high_water": headroom,
    });
    let database = config
        .store
        .as_deref()
        .map(crate::store::postgres::testing::TestDatabase::on)
        .transpose()?;
    if let Some(cache_mb) = config.cache_mb {
        server_config["store"] = json!({ "cache_mb": cache_mb });
    }
    if let Some(database) = &database {
        server_config["store"]["url"] = json!(database.url());
    }
    let store_size = || match &database {
        Some(database) => database_bytes(database.url()),
        None => Ok(du(&data)),
    };
    std::fs::write(&config_file, serde_json::to_vec_pretty(&server_config)?)?;
    let log = scratch.0.join("serve.log");

    let mut server = Server::start(&config.exe, &config_file, &log)?;
    let agent = agent();
    setup(&agent, &server.url)?;
    let idle = memory(server.pid())?;

    // 1. Cron tasks, none firing during the benchmark.
    let applied = config.tasks - config.every_second;
    let start_at = chrono::Utc::now() + chrono::Duration::hours(1);
    let span_ms = 4 * 3_600_000 / applied.max(1) as i64;
    let url = server.url.clone();
    let started = Instant::now();
    let task_body = |i: usize| {
        let at = start_at + chrono::Duration::milliseconds(span_ms * i as i64);
        let cron = at.format("%S %M %H * * ?");
        format!("name: s{i}\ntrigger: {{ cron: \"{cron}\" }}\nplugin: echo@1.0.0\n")
    };
    let batch = config.batch;
    parallel(config.clients, applied.div_ceil(batch), |agent, b| {
        if batch == 1 {
            let (status, text) = call(
                agent,
                "PUT",
                &format!("{url}/v1/tasks/s{b}"),
                None,
                Some(&task_body(b)),
            )?;
            anyhow::ensure!(status == 201, "applying task s{b}: {status} {text}");
            return Ok(());
        }
        let tasks: Vec<Value> = (b * batch..((b + 1) * batch).min(applied))
            .map(|i| json!({ "source": task_body(i) }))
            .collect();
        let body = json!({ "tasks": tasks }).to_string();
        let (status, text) = call(
            agent,
            "POST",
            &format!("{url}/v1/tasks:apply"),
            None,
            Some(&body),
        )?;
        anyhow::ensure!(
            status == 200,
            "applying tasks from s{}: {status} {text}",
            b * batch
        );
        Ok(())
    })?;
    let apply_secs = started.elapsed().as_secs_f64();
    let after_tasks = memory(server.pid())?;
    let store_after_tasks = store_size()?;

    // 2. Queued runs, held.
    let started = Instant::now();
    let triggered = parallel(config.clients, config.queued.div_ceil(batch), |agent, b| {
        let n = batch.min(config.queued - b * batch);
        let t = Instant::now();
        let (path, body) = if batch == 1 {
            (format!("{url}/v1/tasks/{HELD}/runs"), "{}".to_string())
        } else {
            let runs = vec![json!({}); n];
            (
                format!("{url}/v1/tasks/{HELD}/runs:batch"),
                json!({ "runs": runs }).to_string(),
            )
        };
        let (status, text) = call(agent, "POST", &path, Some(HELD), Some(&body))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let answer: Value = serde_json::from_str(&text)?;
        let ids: Vec<String> = if batch == 1 {
            anyhow::ensure!(status == 201, "trigger: {status} {text}");
            vec![answer["id"].as_str().unwrap_or_default().to_string()]
        } else {
            anyhow::ensure!(status == 200, "bulk trigger: {status} {text}");
            let runs = answer["runs"].as_array().cloned().unwrap_or_default();
            runs.iter()
                .map(|r| match r["id"].as_str() {
                    Some(id) => Ok(id.to_string()),
                    None => Err(anyhow::anyhow!("a bulk trigger's item was refused: {r}")),
                })
                .collect::<anyhow::Result<_>>()?
        };
        anyhow::ensure!(ids.len() == n, "{} runs answered of {n}: {text}", ids.len());
        Ok((ids, ms))
    })?;
    let trigger_secs = started.elapsed().as_secs_f64();
    let after_queue = memory(server.pid())?;
    let store_after_queue = store_size()?;
    let (ids, mut latencies): (Vec<Vec<String>>, Vec<f64>) = triggered.into_iter().unzip();
    let ids: Vec<String> = ids.into_iter().flatten().collect();
    latencies.sort_by(f64::total_cmp);

    // 3. SIGKILL and restart on the same directory.
    server.kill();
    let killed = Instant::now();
    let mut server = Server::start(&config.exe, &config_file, &log)?;
    let url = server.url.clone();
    until(killed, "/readyz to answer ready", || {
        Ok(call(&agent, "GET", &format!("{url}/readyz"), None, None)?.0 == 200)
    })?;
    let restart_ready_secs = killed.elapsed().as_secs_f64();
    let (status, text) = call(
        &agent,
        "POST",
        &format!("{url}/v1/tasks/probe/runs"),
        None,
        Some("{}"),
    )?;
    anyhow::ensure!(status == 201, "probe trigger: {status} {text}");
    let probe: Value = serde_json::from_str(&text)?;
    let probe_url = format!("{url}/v1/runs/{}", probe["id"].as_str().unwrap_or_default());
    until(killed, "the probe run to finish", || {
        let (_, text) = call(&agent, "GET", &probe_url, None, None)?;
        let run: Value = serde_json::from_str(&text)?;
        match run["status"].as_str() {
            Some("succeeded") => Ok(true),
            Some("queued" | "running") => Ok(false),
            other => anyhow::bail!("the probe run ended {other:?}: {text}"),
        }
    })?;
    let restart_serving_secs = killed.elapsed().as_secs_f64();
    let after_restart = memory(server.pid())?;
    let statuses = task_runs(&agent, &url, Some(HELD), HELD)?;
    let (mut still_queued, mut finished, mut lost) = (0, 0, 0);
    for id in &ids {
        match statuses.get(id).map(|r| r["status"].as_str()) {
            Some(Some("queued")) => still_queued += 1,
            // The first run starts before the quota is used up; it gets the
            // 1 unit of fuel left and fails (fuel_exhausted), or succeeds.
            Some(Some("succeeded" | "failed")) => finished += 1,
            Some(other) => anyhow::bail!("queued run {id} is {other:?} after the restart"),
            None => lost += 1,
        }
    }

    // 4. Fire lateness of tasks firing every second.
    let mut lateness = Vec::new();
    let mut unstarted = 0;
    if config.every_second > 0 {
        parallel(config.clients, config.every_second, |agent, i| {
            let body = format!("name: tick{i}\ntrigger: {{ every: 1s }}\nplugin: echo@1.0.0\n");
            let (status, text) = call(
                agent,
                "PUT",
                &format!("{url}/v1/tasks/tick{i}"),
                None,
                Some(&body),
            )?;
            anyhow::ensure!(status == 201, "applying task tick{i}: {status} {text}");
            Ok(())
        })?;
        // The first second is left out (tasks were being created).
        std::thread::sleep(Duration::from_secs(1));
        let from = chrono::Utc::now();
        std::thread::sleep(Duration::from_secs(config.seconds));
        let to = chrono::Utc::now();
        // Fires of the window that are late by up to a second have started by now.
        std::thread::sleep(Duration::from_secs(1));
        let per_task = parallel(config.clients, config.every_second, |agent, i| {
            let read_at = chrono::Utc::now();
            let runs = task_runs(agent, &url, None, &format!("tick{i}"))?;
            let mut found = Vec::new();
            for run in runs.values() {
                let Some(due) = instant(&run["scheduled_for"]) else {
                    continue;
                };
                if due < from || due >= to {
                    continue;
                }
                match instant(&run["started_at"]) {
                    Some(started) => found.push(((started - due).num_milliseconds(), true)),
                    None => found.push(((read_at - due).num_milliseconds(), false)),
                }
            }
            Ok(found)
        })?;
        for (ms, started) in per_task.into_iter().flatten() {
            lateness.push(ms.max(0) as f64);
            unstarted += usize::from(!started);
        }
        lateness.sort_by(f64::total_cmp);
    }
    server.kill();
    drop(scratch);

    Ok(ScaleStats {
        tasks: config.tasks,
        every_second: config.every_second,
        queued: config.queued,
        clients: config.clients,
        batch: config.batch,
        cache_mb: config
            .cache_mb
            .unwrap_or_else(|| crate::config::StoreConfig::default().cache_mb),
        postgres: config.store.is_some(),
        idle,
        applied,
        apply_per_sec: applied as f64 / apply_secs,
        after_tasks,
        store_after_tasks,
        triggered: ids.len(),
        trigger_per_sec: ids.len() as f64 / trigger_secs,
        trigger_p50_ms: percentile(&latencies, 0.5),
        trigger_p99_ms: percentile(&latencies, 0.99),
        after_queue,
        store_after_queue,
        restart_ready_secs,
        restart_serving_secs,
        after_restart,
        still_queued,
        finished,
        lost,
        lateness_samples: lateness.len(),
        lateness_unstarted: unstarted,
        lateness_p50_ms: percentile(&lateness, 0.5),
        lateness_p99_ms: percentile(&lateness, 0.99),
        lateness_max_ms: lateness.last().copied().unwrap_or_default(),
    })
}

/// The echo plugin in both tenants, the tenant `held` (its runs held by a
/// fuel quota of 1, and room for a million of them: 1 TiB of `run_bytes`,
/// over the default 1 GiB), its manual task `held`, and the manual task
/// `probe`.
fn setup(agent: &ureq::Agent, url: &str) -> anyhow::Result<()> {
    let (status, text) = call(
        agent,
        "POST",
        &format!("{url}/v1/tenants"),
        None,
        Some(
            &json!({"name": HELD, "quota": {
                "fuel_per_window": 1, "out_of_fuel": "hold", "run_bytes": 1u64 << 40
            }})
            .to_string(),
        ),
    )?;
    anyhow::ensure!(status == 201, "creating tenant {HELD}: {status} {text}");
    let echo = crate::server::demo_plugin("echo")
        .ok_or_else(|| anyhow::anyhow!("echo plugin not embedded"))?;
    for tenant in ["default", HELD] {
        let mut response = agent
            .post(format!("{url}/v1/plugins?name=echo&version=1.0.0"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("x-ax-tenant", tenant)
            .header("content-type", "application/wasm")
            .send(echo)?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string()?;
        anyhow::ensure!(status == 201, "uploading echo to {tenant}: {status} {text}");
    }
    for (tenant, name) in [(HELD, HELD), ("default", "probe")] {
        let body = format!("name: {name}\nplugin: echo@1.0.0\n");
        let (status, text) = call(
            agent,
            "PUT",
            &format!("{url}/v1/tasks/{name}"),
            Some(tenant),
            Some(&body),
        )?;
        anyhow::ensure!(status == 201, "applying task {name}: {status} {text}");
    }
    Ok(())
}

/// A child `ax serve`; killed (SIGKILL) when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// Starts `exe serve --config FILE`, its stderr appended to `log`, and
    /// waits for the line that says where it listens.
    fn start(exe: &Path, config: &Path, log: &Path) -> anyhow::Result<Server> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.strip_prefix("ax listening on ") {
                        break url.to_string();
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(20).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    anyhow::bail!(
                        "ax serve exited before listening; its log ({}):\n{}",
                        log.display(),
                        tail.join("\n")
                    );
                }
            }
        };
        // Keep reading, so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Server { child, url })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and the process reaped.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The scratch directory, deleted when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A keep-alive client that answers every status (the caller checks it).
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// One request with the admin token (acting on `tenant`, else `default`);
/// the status and the body text.
fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    tenant: Option<&str>,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let auth = format!("Bearer {TOKEN}");
    let tenant = tenant.unwrap_or("default");
    let mut response = match (method, body) {
        ("GET", _) => agent
            .get(url)
            .header("authorization", &auth)
            .header("x-ax-tenant", tenant)
            .call()?,
        ("PUT", Some(body)) => agent
            .put(url)
            .header("authorization", &auth)
            .header("x-ax-tenant", tenant)
            .header("content-type", "application/yaml")
            .send(body)?,
        ("POST", Some(body)) => agent
            .post(url)
            .header("authorization", &auth)
            .header("x-ax-tenant", tenant)
            .header("content-type", "application/json")
            .send(body)?,
        _ => anyhow::bail!("no {method} without a body here"),
    };
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()?;
    Ok((status, text))
}

/// `f(agent, i)` for every `i` in `0..n`, from `clients` threads with a
/// keep-alive client each (client `c` takes `c, c + clients, …`); the
/// results in the order of `i`.
fn parallel<T: Send>(
    clients: usize,
    n: usize,
    f: impl Fn(&ureq::Agent, usize) -> anyhow::Result<T> + Sync,
) -> anyhow::Result<Vec<T>> {
    let f = &f;
    let per_client = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients.min(n))
            .map(|c| {
                scope.spawn(move || {
                    let agent = agent();
                    (c..n)
                        .step_by(clients)
                        .map(|i| f(&agent, i))
                        .collect::<anyhow::Result<Vec<T>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a client panicked"))?)
            .collect::<anyhow::Result<Vec<Vec<T>>>>()
    })?;
    // Interleave back: result i came from client i % clients.
    let mut iters: Vec<_> = per_client.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.extend(iters[i % clients].next());
    }
    Ok(out)
}

/// Every run of `task` (in `tenant`, else `default`) by id, read page by page.
fn task_runs(
    agent: &ureq::Agent,
    url: &str,
    tenant: Option<&str>,
    task: &str,
) -> anyhow::Result<std::collections::HashMap<String, Value>> {
    let mut runs = std::collections::HashMap::new();
    let mut cursor = String::new();
    loop {
        let page_url = format!("{url}/v1/runs?task={task}&limit=1000&cursor={cursor}");
        let (status, text) = call(agent, "GET", &page_url, tenant, None)?;
        anyhow::ensure!(status == 200, "listing runs of {task}: {status} {text}");
        let mut page: Value = serde_json::from_str(&text)?;
        if let Value::Array(list) = page["runs"].take() {
            for run in list {
                let id = run["id"].as_str().unwrap_or_default().to_string();
                runs.insert(id, run);
            }
        }
        match page["next_cursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = next.to_string(),
            _ => return Ok(runs),
        }
    }
}

/// An RFC 3339 instant of a run view.
fn instant(value: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = value.as_str()?;
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// Polls `ready` every 5 ms until it says yes; gives up after [`PATIENCE`]
/// from `since`. Errors of `ready` (the server not answering yet) are waited out.
fn until(
    since: Instant,
    what: &str,
    mut ready: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    loop {
        match ready() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if since.elapsed() >= PATIENCE => {
                return Err(e.context(format!("waiting for {what}")));
            }
            Err(_) => {}
        }
        anyhow::ensure!(
            since.elapsed() < PATIENCE,
            "{what} took more than {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `VmRSS` and `VmHWM` of process `pid` (Linux `/proc`).
fn memory(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .ok_or_else(|| anyhow::anyhow!("{path} has no {name}"))?;
        let kb: u64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("{path}: {name}{line}"))?;
        Ok(kb * 1024)
    };
    Ok(Memory {
        rss: field("VmRSS:")?,
        peak: field("VmHWM:")?,
    })
}

/// The size of the PostgreSQL database `url` names, as the server counts
/// it (`pg_database_size`: its tables, indexes and TOAST on disk).
fn database_bytes(url: &str) -> anyhow::Result<u64> {
    let db = crate::store::postgres::Database::connect(url, 1)?;
    let bytes: i64 = db.with(async |c| {
        Ok(
            c.query_one("SELECT pg_database_size(current_database())", &[])
                .await?
                .get(0),
        )
    })?;
    Ok(u64::try_from(bytes).unwrap_or(0))
}

/// Bytes allocated on disk under `dir`, as `du` counts them.
fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => du(&entry.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_of_this_process_is_read_from_proc() {
        let m = memory(std::process::id()).unwrap();
        assert!(m.rss > 1 << 20, "{m:?}");
        assert!(m.peak >= m.rss, "{m:?}");
    }

    #[test]
    fn du_counts_allocated_blocks_recursively() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("f"), vec![1u8; 100_000]).unwrap();
        let size = du(dir.path());
        assert!((100_000..200_000).contains(&size), "{size}");
    }

    #[test]
    fn parallel_returns_results_in_order_of_their_index() {
        let out = parallel(3, 10, |_, i| Ok(i * 2)).unwrap();
        assert_eq!(out, (0..10).map(|i| i * 2).collect::<Vec<_>>());
        let failed = parallel(2, 4, |_, i| {
            anyhow::ensure!(i != 3, "three");
            Ok(i)
        });
        assert_eq!(failed.unwrap_err().to_string(), "three");
    }

    #[test]
    fn counts_out_of_range_are_refused() {
        let config = ScaleConfig {
            exe: PathBuf::from("ax"),
            tasks: 10,
            queued: 0,
            every_second: 11,
            seconds: 1,
            clients: 8,
            batch: 1,
            cache_mb: None,
            dir: None,
            store: None,
        };
        let message = config.validate().unwrap_err().to_string();
        assert!(message.contains("--every-second 11"), "{message}");
        let none = ScaleConfig {
            every_second: 0,
            clients: 0,
            ..config
        };
        assert!(none.validate().is_err());
        let too_big = ScaleConfig {
            every_second: 0,
            clients: 8,
            batch: 1001,
            ..none
        };
        let message = too_big.validate().unwrap_err().to_string();
        assert!(message.contains("--batch"), "{message}");
    }
}
