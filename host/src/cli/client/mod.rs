//! The client subcommands (`ax plugin`, `ax task`, `ax graph`, `ax trigger`,
//! `ax runs`, `ax run`, `ax logs`, `ax events`, `ax dead-letters`, `ax cron`,
//! `ax status`, `ax tenant`): thin wrappers over the HTTP API (docs/API.md) that print aligned tables, or the
//! server's JSON with `--json`. They block on plain HTTP calls (ureq) and
//! need no async runtime. `ax cron next` computes locally, without a server.
//!
//! Exit codes: 0 done, 1 a waited-for run did not succeed, 2 an error
//! (printed as `error: CODE: message`).
//!
//! What people read is made terminal-safe by [`super::term::safe`]: every
//! string from the server goes through [`cell`] (one line) or, for text
//! that is lines by nature (captured stdout/stderr, a task's source, a
//! drawing), through `safe(.., Layout::Block)`; tables escape every cell
//! again. `--json` prints the server's JSON as it came.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod status;
mod tenant;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::term::{Layout, safe};

/// The elements of a JSON array (none for anything else).
fn items(v: &Value) -> std::slice::Iter<'_, Value> {
    v.as_array().map(Vec::as_slice).unwrap_or_default().iter()
}

/// Where the server is and who we are (flags or environment).
#[derive(Debug, Clone, Args)]
pub(super) struct Conn {
    /// Base URL of the ax server.
    #[arg(
        long,
        env = "AX_URL",
        default_value = "http://127.0.0.1:8641",
        global = true
    )]
    url: String,
    /// Bearer token (the admin token printed by `ax serve`).
    #[arg(long, env = "AX_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Tenant to act on (sent as `X-Ax-Tenant`; the server defaults to `default`).
    #[arg(long, env = "AX_TENANT", global = true)]
    tenant: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

/// Client subcommands, flattened into the top-level `ax` command.
#[derive(Debug, Subcommand)]
pub(super) enum ClientCommand {
    /// Upload and list plugins.
    Plugin(PluginArgs),
    /// Apply, list, show, pause, resume and delete tasks.
    Task(TaskArgs),
    /// Draw a task's DAG (text, dot, mermaid or json), with a run's step states.
    Graph(GraphArgs),
    /// Start a run of a task now.
    Trigger(TriggerArgs),
    /// List runs, newest first.
    Runs(RunsArgs),
    /// Show, cancel or retry one run.
    Run(RunArgs),
    /// Show what a run's attempts printed and logged.
    Logs(RunIdArgs),
    /// Show a run's state changes.
    Events(RunIdArgs),
    /// List, resolve and requeue dead letters (open ones unless --all).
    DeadLetters(DeadLettersArgs),
    /// Preview cron expressions (computed locally, no server needed).
    #[command(subcommand)]
    Cron(CronCommand),
    /// Summarise a server's health: readiness, backlog, running, success rate, dead letters, next fires.
    Status(status::StatusArgs),
    /// Tenants, their quotas, tokens and usage (admin token).
    Tenant(tenant::TenantArgs),
}

#[derive(Debug, Args)]
pub(super) struct PluginArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Upload a plugin component (`.wasm`).
    // `--version` names the plugin's version here, not ax's.
    #[command(disable_version_flag = true)]
    Push {
        /// The component file.
        file: PathBuf,
        /// Plugin name (default: the file name without `.wasm`, `_` read as `-`).
        #[arg(long)]
        name: Option<String>,
        /// Semver version, e.g. 1.0.0.
        #[arg(long = "version", id = "plugin_version", value_name = "VERSION")]
        version: String,
    },
    /// List the tenant's plugins.
    List,
}

#[derive(Debug, Args)]
pub(super) struct TaskArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(Debug, Subcommand)]
enum TaskCommand {
    /// Create or replace a task from a YAML or JSON file (`-` reads stdin).
    Apply {
        /// The definition file.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// List tasks.
    List,
    /// Show one task and its definition.
    Show {
        /// Task name.
        name: String,
    },
    /// Pause a task's trigger.
    Pause {
        /// Task name.
        name: String,
    },
    /// Resume a task's trigger.
    Resume {
        /// Task name.
        name: String,
    },
    /// Delete a task (its runs stay).
    Delete {
        /// Task name.
        name: String,
    },
    /// The next fire instants of a task.
    Next {
        /// Task name.
        name: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 5)]
        count: usize,
    },
}

#[derive(Debug, Args)]
pub(super) struct GraphArgs {
    #[command(flatten)]
    conn: Conn,
    /// Task name.
    task: String,
    /// Colour the steps by their states in this run (drawn from the run's own definition).
    #[arg(long)]
    run: Option<String>,
    /// Output format (default text; json with --json).
    #[arg(long, value_parser = ["text", "dot", "mermaid", "json"])]
    format: Option<String>,
}

#[derive(Debug, Args)]
pub(super) struct TriggerArgs {
    #[command(flatten)]
    conn: Conn,
    /// Task name.
    task: String,
    /// Trigger input (JSON), available to steps as `${input.*}`.
    #[arg(long)]
    input: Option<String>,
    /// A key already used for this task returns the existing run instead of a new one.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Priority 0..=9 (higher first); default: the task's.
    #[arg(long)]
    priority: Option<u8>,
    /// Wait for the run to end; exit 0 if it succeeded, 1 otherwise.
    #[arg(long)]
    wait: bool,
    /// With --wait: give up after this long.
    #[arg(long, default_value = "60s", value_parser = super::parse_duration, requires = "wait")]
    timeout: Duration,
}

#[derive(Debug, Args)]
pub(super) struct RunsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Only this task's runs.
    #[arg(long)]
    task: Option<String>,
    /// Only runs in this state (queued, running, succeeded, failed, cancelled).
    #[arg(long)]
    status: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Continue from a previous page's cursor.
    #[arg(long)]
    cursor: Option<String>,
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: RunCommand,
}

#[derive(Debug, Subcommand)]
enum RunCommand {
    /// Show a run with its steps and attempts.
    Show {
        /// Run id.
        id: String,
    },
    /// Cancel a run.
    Cancel {
        /// Run id.
        id: String,
    },
    /// Retry a failed or cancelled run from its unsuccessful steps.
    Retry {
        /// Run id.
        id: String,
    },
    /// Run one step of a finished run again, with every step downstream of it.
    Rerun {
        /// Run id.
        id: String,
        /// Step name.
        step: String,
    },
}

#[derive(Debug, Args)]
pub(super) struct RunIdArgs {
    #[command(flatten)]
    conn: Conn,
    /// Run id.
    run: String,
}

#[derive(Debug, Args)]
pub(super) struct DeadLettersArgs {
    #[command(flatten)]
    conn: Conn,
    /// Also list resolved dead letters.
    #[arg(long)]
    all: bool,
    #[command(subcommand)]
    command: Option<DeadLetterCommand>,
}

#[derive(Debug, Subcommand)]
enum DeadLetterCommand {
    /// Record what was decided about a dead letter.
    Resolve {
        /// Dead letter id.
        id: String,
        /// What was decided.
        #[arg(long)]
        resolution: String,
    },
    /// Queue the dead step again for another round of attempts.
    Requeue {
        /// Dead letter id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum CronCommand {
    /// The next fire instants of a cron expression, with weekday names.
    Next(CronNextArgs),
}

#[derive(Debug, Args)]
pub(super) struct CronNextArgs {
    /// Quartz-style expression, seconds first (`0 30 1 * * ?`).
    expr: String,
    /// IANA time zone.
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// How many instants.
    #[arg(short = 'n', long = "count", default_value_t = 5)]
    count: usize,
    /// Start after this instant (RFC 3339; default now).
    #[arg(long)]
    from: Option<String>,
    /// Print JSON (`{"next": [...], "described": [...]}`).
    #[arg(long)]
    json: bool,
}

/// A failed command: what `error: CODE: message` prints.
#[derive(Debug)]
struct Failure {
    code: String,
    message: String,
}

impl Failure {
    fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

type Outcome = Result<ExitCode, Failure>;

/// Runs a client subcommand and prints its result; the exit code says how it went.
pub(super) fn run(command: ClientCommand) -> ExitCode {
    let result = match command {
        ClientCommand::Plugin(args) => plugin(args),
        ClientCommand::Task(args) => task(args),
        ClientCommand::Graph(args) => graph(args),
        ClientCommand::Trigger(args) => trigger(args),
        ClientCommand::Runs(args) => runs(args),
        ClientCommand::Run(args) => run_command(args),
        ClientCommand::Logs(args) => logs(args),
        ClientCommand::Events(args) => events(args),
        ClientCommand::DeadLetters(args) => dead_letters(args),
        ClientCommand::Cron(CronCommand::Next(args)) => cron_next(args),
        ClientCommand::Status(args) => status::status(args),
        ClientCommand::Tenant(args) => tenant::tenant(args),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!(
                "error: {}: {}",
                safe(&f.code, Layout::Line),
                safe(&f.message, Layout::Line)
            );
            ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

/// A connection to one server.
struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
    tenant: Option<String>,
}

/// A request body.
enum Body {
    None,
    Json(Value),
    Raw {
        content_type: &'static str,
        bytes: Vec<u8>,
    },
    /// Raw bytes sent through a reader that moves an upload progress bar.
    Upload {
        content_type: &'static str,
        bytes: Vec<u8>,
        progress: super::term::UploadProgress,
    },
}

/// Compiling an uploaded plugin can take a while on a busy host.
const HTTP_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest answer read (logs of many attempts can be large).
const MAX_RESPONSE_BYTES: u64 = 256 << 20;

impl Client {
    fn new(conn: &Conn) -> Self {
        let config = ureq::Agent::config_builder()
            // 4xx/5xx answers carry the API's error body: read them, do not turn them into Err.
            .http_status_as_error(false)
            .timeout_global(Some(HTTP_TIMEOUT))
            .build();
        Self {
            agent: ureq::Agent::new_with_config(config),
            base: conn.url.trim_end_matches('/').to_string(),
            token: conn.token.clone().filter(|t| !t.is_empty()),
            tenant: conn.tenant.clone().filter(|t| !t.is_empty()),
        }
    }

    /// Sends a request; 2xx answers give `(status, JSON or null)`, others a [`Failure`].
    fn call(&self, method: &str, path: &str, body: Body) -> Result<(u16, Value), Failure> {
        let url = format!("{}{path}", self.base);
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("accept", "application/json");
        if let Some(token) = &self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        if let Some(tenant) = &self.tenant {
            builder = builder.header("x-ax-tenant", tenant);
        }
        let unreachable = |e: ureq::Error| {
            Failure::new(
                "connection",
                format!("cannot reach the ax server at {}: {e}", self.base),
            )
        };
        let bad_url = |e: ureq::http::Error| Failure::new("bad_url", format!("`{url}`: {e}"));
        let (content_type, bytes) = match body {
            Body::None => (None, Vec::new()),
            Body::Json(v) => (Some("application/json"), v.to_string().into_bytes()),
            Body::Raw {
                content_type,
                bytes,
            } => (Some(content_type), bytes),
            Body::Upload {
                content_type,
                bytes,
                progress,
            } => {
                // An explicit length keeps the upload a plain (not chunked) body.
                let request = builder
                    .header("content-type", content_type)
                    .header("content-length", bytes.len())
                    .body(ureq::SendBody::from_owned_reader(progress.reader(bytes)))
                    .map_err(bad_url)?;
                let response = self.agent.run(request);
                progress.finish();
                return self.answer(method, path, response.map_err(unreachable)?);
            }
        };
        if let Some(ct) = content_type {
            builder = builder.header("content-type", ct);
        }
        let request = builder.body(bytes).map_err(bad_url)?;
        let response = self.agent.run(request).map_err(unreachable)?;
        self.answer(method, path, response)
    }

    /// Reads an answer: 2xx gives `(status, JSON or null)`, others a [`Failure`].
    fn answer(
        &self,
        method: &str,
        path: &str,
        mut response: ureq::http::Response<ureq::Body>,
    ) -> Result<(u16, Value), Failure> {
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| {
                Failure::new(
                    "connection",
                    format!("reading the answer of {method} {path}: {e}"),
                )
            })?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if (200..300).contains(&status) {
            return Ok((status, value));
        }
        let error = &value["error"];
        let code = error["code"].as_str().unwrap_or("http_error").to_string();
        let mut message = match error["message"].as_str() {
            Some(m) => m.to_string(),
            None => format!("{method} {path} answered {status}: {value}"),
        };
        if status == 401 && self.token.is_none() {
            message.push_str(" (set AX_TOKEN or pass --token)");
        }
        Err(Failure { code, message })
    }

    fn get(&self, path: &str) -> Result<Value, Failure> {
        self.call("GET", path, Body::None).map(|(_, v)| v)
    }

    fn post(&self, path: &str, body: Body) -> Result<(u16, Value), Failure> {
        self.call("POST", path, body)
    }
}

/// Percent-encodes a path segment or query value.
fn enc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", enc(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Items a page of a listing holds when the client follows every page (the
/// API's largest page).
const FULL_PAGE: usize = 1000;

/// Every item of a paged listing (`{KEY: [...], "next_cursor": ...}` at
/// `path`, which has no query string): follows the cursor to the end.
fn all_pages(client: &Client, path: &str, key: &str) -> Result<Vec<Value>, Failure> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client.get(&format!(
            "{path}{}",
            query(&[
                ("limit", Some(FULL_PAGE.to_string())),
                ("cursor", cursor.clone())
            ])
        ))?;
        all.extend(items(&page[key]).cloned());
        match page["next_cursor"].as_str() {
            // A cursor that does not move would loop for ever.
            Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_string()),
            _ => return Ok(all),
        }
    }
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

// ---------------------------------------------------------------------------
// Output helpers
// ---------------------------------------------------------------------------

/// A value for people, on one line: strings as they are, null as `-`,
/// other JSON compactly; made terminal-safe ([`super::term::safe`]).
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => safe(s, Layout::Line).into_owned(),
        // JSON text escapes C0 controls but not DEL, C1 or bidi characters.
        other => safe(&other.to_string(), Layout::Line).into_owned(),
    }
}

/// Columns padded to their widest cell, two spaces apart, cut to the
/// terminal's width (see [`super::term`]).
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    super::term::table(headers, rows, super::term::table_width())
}

fn instant(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// `1.25s`, `340ms`, `2m05s`, `8h38m`.
fn human_ms(ms: f64) -> String {
    let secs = (ms / 1000.0).round() as u64;
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else if ms < 60_000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

fn elapsed(start: &Value, end: &Value) -> String {
    match (instant(start), instant(end)) {
        (Some(a), Some(b)) => human_ms((b - a).num_milliseconds() as f64),
        _ => "-".into(),
    }
}

fn short_digest(d: &Value) -> String {
    d.as_str()
        .map_or_else(|| "-".into(), |d| d.chars().take(12).collect())
}

fn done() -> Outcome {
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

fn plugin(args: PluginArgs) -> Outcome {
    let client = Client::new(&args.conn);
    match args.command {
        PluginCommand::Push {
            file,
            name,
            version,
        } => {
            let bytes = std::fs::read(&file)
                .map_err(|e| Failure::new("io", format!("reading {}: {e}", file.display())))?;
            let name = match name {
                Some(n) => n,
                None => file
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .map(|s| s.replace('_', "-"))
                    .ok_or_else(|| {
                        Failure::new(
                            "usage",
                            "cannot take a plugin name from the file name; pass --name",
                        )
                    })?,
            };
            let progress =
                super::term::UploadProgress::new(&format!("{name}@{version}"), bytes.len() as u64);
            let path = format!(
                "/v1/plugins{}",
                query(&[("name", Some(name)), ("version", Some(version))])
            );
            let (status, v) = client.post(
                &path,
                Body::Upload {
                    content_type: "application/wasm",
                    bytes,
                    progress,
                },
            )?;
            if args.conn.json {
                print_json(&v);
            } else {
                let what = if status == 201 {
                    "uploaded"
                } else {
                    "already uploaded (same bytes)"
                };
                println!(
                    "{what}: {}@{}  sha256:{}  {} bytes",
                    cell(&v["name"]),
                    cell(&v["version"]),
                    short_digest(&v["digest"]),
                    cell(&v["size"])
                );
            }
        }
        PluginCommand::List => {
            let v = client.get("/v1/plugins")?;
            if args.conn.json {
                print_json(&v);
            } else {
                let rows: Vec<Vec<String>> = items(&v["plugins"])
                    .map(|p| {
                        vec![
                            cell(&p["name"]),
                            cell(&p["version"]),
                            short_digest(&p["digest"]),
                            cell(&p["size"]),
                            cell(&p["created_at"]),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(&["NAME", "VERSION", "DIGEST", "SIZE", "CREATED"], &rows)
                );
            }
        }
    }
    done()
}

fn read_definition(file: &PathBuf) -> Result<String, Failure> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::new("io", format!("reading stdin: {e}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(file)
        .map_err(|e| Failure::new("io", format!("reading {}: {e}", file.display())))
}

fn task_row(t: &Value) -> Vec<String> {
    vec![
        cell(&t["name"]),
        cell(&t["version"]),
        if t["paused"].as_bool().unwrap_or(false) {
            "yes".into()
        } else {
            "no".into()
        },
        cell(&t["next_fire"]),
        cell(&t["updated_at"]),
    ]
}

const TASK_HEADERS: [&str; 5] = ["NAME", "VERSION", "PAUSED", "NEXT FIRE", "UPDATED"];

fn task(args: TaskArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let json = args.conn.json;
    let show = |v: &Value, what: &str| {
        if json {
            print_json(v);
        } else {
            println!(
                "task {} {what} (version {}); next fire: {}",
                cell(&v["name"]),
                cell(&v["version"]),
                cell(&v["next_fire"])
            );
        }
    };
    match args.command {
        TaskCommand::Apply { file } => {
            let text = read_definition(&file)?;
            // The URL names the task: read the name with the server's own parser.
            let spec = crate::task::parse(&text).map_err(|e| {
                let at = if e.path.is_empty() {
                    String::new()
                } else {
                    format!("{}: ", e.path)
                };
                Failure::new("invalid", format!("{}: {at}{}", file.display(), e.message))
            })?;
            let content_type = if text.trim_start().starts_with('{') {
                "application/json"
            } else {
                "application/yaml"
            };
            let (status, v) = client.call(
                "PUT",
                &format!("/v1/tasks/{}", enc(&spec.name)),
                Body::Raw {
                    content_type,
                    bytes: text.into_bytes(),
                },
            )?;
            show(&v, if status == 201 { "created" } else { "replaced" });
        }
        TaskCommand::List => {
            // Every page: a listing of tasks is short enough to read whole.
            let tasks = all_pages(&client, "/v1/tasks", "tasks")?;
            if json {
                print_json(&json!({ "tasks": tasks, "next_cursor": null }));
            } else {
                let rows: Vec<Vec<String>> = tasks.iter().map(task_row).collect();
                print!("{}", table(&TASK_HEADERS, &rows));
            }
        }
        TaskCommand::Show { name } => {
            let v = client.get(&format!("/v1/tasks/{}", enc(&name)))?;
            if json {
                print_json(&v);
            } else {
                print!("{}", table(&TASK_HEADERS, &[task_row(&v)]));
                println!("created   {}", cell(&v["created_at"]));
                println!("---");
                let source = v["source"].as_str().unwrap_or_default();
                print!("{}", safe(source, Layout::Block));
                if !source.ends_with('\n') {
                    println!();
                }
            }
        }
        TaskCommand::Pause { name } => {
            let (_, v) = client.post(&format!("/v1/tasks/{}/pause", enc(&name)), Body::None)?;
            show(&v, "paused");
        }
        TaskCommand::Resume { name } => {
            let (_, v) = client.post(&format!("/v1/tasks/{}/resume", enc(&name)), Body::None)?;
            show(&v, "resumed");
        }
        TaskCommand::Delete { name } => {
            client.call("DELETE", &format!("/v1/tasks/{}", enc(&name)), Body::None)?;
            if json {
                print_json(&json!({ "deleted": name }));
            } else {
                println!("task {name} deleted");
            }
        }
        TaskCommand::Next { name, count } => {
            let v = client.get(&format!("/v1/tasks/{}/next?count={count}", enc(&name)))?;
            if json {
                print_json(&v);
            } else {
                for at in v["next"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    println!("{}", cell(at));
                }
            }
        }
    }
    done()
}

/// Prints the server's drawing as it is (JSON pretty-printed).
fn graph(args: GraphArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let format = args
        .format
        .unwrap_or_else(|| if args.conn.json { "json" } else { "text" }.into());
    let path = format!(
        "/v1/tasks/{}/graph{}",
        enc(&args.task),
        query(&[("format", Some(format)), ("run", args.run)])
    );
    match client.get(&path)? {
        // Text, DOT and Mermaid never parse as JSON (a name or keyword, then more).
        Value::String(text) => print!("{}", safe(&text, Layout::Block)),
        other => print_json(&other),
    }
    done()
}

fn trigger(args: TriggerArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let mut body = serde_json::Map::new();
    if let Some(input) = &args.input {
        let value: Value = serde_json::from_str(input)
            .map_err(|e| Failure::new("usage", format!("--input is not JSON: {e}")))?;
        body.insert("input".into(), value);
    }
    if let Some(key) = &args.idempotency_key {
        body.insert("idempotency_key".into(), key.clone().into());
    }
    if let Some(p) = args.priority {
        body.insert("priority".into(), p.into());
    }
    let (status, run) = client.post(
        &format!("/v1/tasks/{}/runs", enc(&args.task)),
        Body::Json(Value::Object(body)),
    )?;
    if !args.wait {
        if args.conn.json {
            print_json(&run);
        } else {
            let what = if status == 201 {
                "created"
            } else {
                "already exists (same idempotency key)"
            };
            println!("run {} {what}: {}", cell(&run["id"]), cell(&run["status"]));
        }
        return done();
    }
    let id = cell(&run["id"]);
    let run = wait_for(&client, &id, run, args.timeout)?;
    if args.conn.json {
        print_json(&run);
    } else {
        print_run(&run);
    }
    Ok(if run["status"] == "succeeded" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn is_terminal(status: &Value) -> bool {
    matches!(status.as_str(), Some("succeeded" | "failed" | "cancelled"))
}

/// Steps that ended (succeeded, skipped, failed, dead, cancelled) and all steps.
fn steps_done(run: &Value) -> (u64, u64) {
    let steps = run["steps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let done = steps
        .iter()
        .filter(|s| {
            matches!(
                s["status"].as_str(),
                Some("succeeded" | "skipped" | "failed" | "dead" | "cancelled")
            )
        })
        .count();
    (done as u64, steps.len() as u64)
}

/// `running · step extract running (attempt 2)`: the run's state and the
/// first step at work.
fn run_state(run: &Value) -> String {
    let at_work = items(&run["steps"]).find(|s| {
        matches!(
            s["status"].as_str(),
            Some("queued" | "running" | "retry_wait")
        )
    });
    match at_work {
        None => cell(&run["status"]),
        Some(s) => {
            let attempts = s["attempts"].as_array().map_or(0, Vec::len);
            let attempt = match (s["status"].as_str(), attempts) {
                (Some("retry_wait"), n) => format!(" after attempt {n}"),
                (Some("running"), n) if n > 1 => format!(" (attempt {n})"),
                (Some("queued"), n) if n > 0 => format!(" (attempt {})", n + 1),
                _ => String::new(),
            };
            format!(
                "{} · step {} {}{attempt}",
                cell(&run["status"]),
                cell(&s["name"]),
                cell(&s["status"])
            )
        }
    }
}

/// Polls a run until it ends, with a progress bar (steps done of all, the
/// current state) on a terminal's stderr.
fn wait_for(
    client: &Client,
    id: &str,
    mut run: Value,
    timeout: Duration,
) -> Result<Value, Failure> {
    let progress = super::term::RunProgress::new(id, steps_done(&run).1);
    let started = Instant::now();
    let mut delay = Duration::from_millis(50);
    while !is_terminal(&run["status"]) {
        let (done, total) = steps_done(&run);
        progress.update(done, total, &run_state(&run));
        if started.elapsed() >= timeout {
            progress.finish();
            return Err(Failure::new(
                "timeout",
                format!(
                    "run {id} is still {} after {}",
                    cell(&run["status"]),
                    humantime::format_duration(timeout)
                ),
            ));
        }
        std::thread::sleep(delay);
        // Quick runs answer quickly; long ones are polled about once a second.
        delay = (delay * 2).min(Duration::from_millis(1000));
        run = match client.get(&format!("/v1/runs/{}", enc(id))) {
            Ok(run) => run,
            Err(e) => {
                progress.finish();
                return Err(e);
            }
        };
    }
    progress.finish();
    Ok(run)
}

fn run_row(r: &Value) -> Vec<String> {
    vec![
        cell(&r["id"]),
        cell(&r["task"]),
        cell(&r["status"]),
        cell(&r["trigger"]),
        cell(&r["scheduled_for"]),
        elapsed(&r["started_at"], &r["finished_at"]),
    ]
}

fn runs(args: RunsArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let path = format!(
        "/v1/runs{}",
        query(&[
            ("task", args.task),
            ("status", args.status),
            ("limit", Some(args.limit.to_string())),
            ("cursor", args.cursor)
        ])
    );
    let v = client.get(&path)?;
    if args.conn.json {
        print_json(&v);
        return done();
    }
    let rows: Vec<Vec<String>> = items(&v["runs"]).map(run_row).collect();
    print!(
        "{}",
        table(
            &[
                "ID",
                "TASK",
                "STATUS",
                "TRIGGER",
                "SCHEDULED FOR",
                "DURATION"
            ],
            &rows
        )
    );
    if !v["next_cursor"].is_null() {
        println!("more: --cursor {}", cell(&v["next_cursor"]));
    }
    done()
}

/// A run for people: its fields, a table of steps, then outputs and errors.
fn print_run(r: &Value) {
    let fields = [
        ("id", cell(&r["id"])),
        ("task", cell(&r["task"])),
        ("status", cell(&r["status"])),
        ("reason", cell(&r["reason"])),
        ("trigger", cell(&r["trigger"])),
        ("priority", cell(&r["priority"])),
        ("scheduled", cell(&r["scheduled_for"])),
        ("created", cell(&r["created_at"])),
        ("started", cell(&r["started_at"])),
        ("finished", cell(&r["finished_at"])),
        ("duration", elapsed(&r["started_at"], &r["finished_at"])),
    ];
    for (k, v) in fields {
        if v != "-" || matches!(k, "id" | "task" | "status") {
            println!("{k:<10}{v}");
        }
    }
    let steps = r["steps"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut rows = Vec::new();
    for s in steps {
        let attempts = s["attempts"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let last = attempts.last().unwrap_or(&Value::Null);
        rows.push(vec![
            cell(&s["name"]),
            cell(&s["status"]),
            attempts.len().to_string(),
            cell(&last["outcome"]),
            cell(&last["fuel_consumed"]),
            last["memory_peak_bytes"]
                .as_u64()
                .map_or_else(|| "-".into(), |b| format!("{:.1}MiB", b as f64 / 1048576.0)),
            last["duration_ms"]
                .as_f64()
                .map_or_else(|| "-".into(), human_ms),
        ]);
    }
    println!();
    print!(
        "{}",
        table(
            &[
                "STEP",
                "STATUS",
                "ATTEMPTS",
                "LAST OUTCOME",
                "FUEL",
                "MEMORY",
                "TIME"
            ],
            &rows
        )
    );
    for s in steps {
        if !s["output"].is_null() {
            // As JSON (a string output keeps its quotes), made terminal-safe.
            let output = safe(&s["output"].to_string(), Layout::Line).into_owned();
            println!("{} output: {output}", cell(&s["name"]));
        }
        if !s["error"].is_null() {
            println!("{} error: {}", cell(&s["name"]), cell(&s["error"]));
        }
    }
}

fn run_command(args: RunArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let run = match &args.command {
        RunCommand::Show { id } => client.get(&format!("/v1/runs/{}", enc(id)))?,
        RunCommand::Cancel { id } => {
            client
                .post(&format!("/v1/runs/{}/cancel", enc(id)), Body::None)?
                .1
        }
        RunCommand::Retry { id } => {
            client
                .post(&format!("/v1/runs/{}/retry", enc(id)), Body::None)?
                .1
        }
        RunCommand::Rerun { id, step } => {
            client
                .post(
                    &format!("/v1/runs/{}/steps/{}/rerun", enc(id), enc(step)),
                    Body::None,
                )?
                .1
        }
    };
    if args.conn.json {
        print_json(&run);
    } else {
        match args.command {
            RunCommand::Show { .. } => print_run(&run),
            RunCommand::Cancel { .. } | RunCommand::Retry { .. } | RunCommand::Rerun { .. } => {
                println!("run {}: {}", cell(&run["id"]), cell(&run["status"]))
            }
        }
    }
    done()
}

fn logs(args: RunIdArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let v = client.get(&format!("/v1/runs/{}/logs", enc(&args.run)))?;
    if args.conn.json {
        print_json(&v);
        return done();
    }
    for a in v["attempts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        println!(
            "== step {} attempt {} ==",
            cell(&a["step"]),
            cell(&a["attempt"])
        );
        for l in a["logs"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let fields: Vec<String> = items(&l["fields"])
                .map(|kv| format!("{}={}", cell(&kv[0]), cell(&kv[1])))
                .collect();
            let line = format!(
                "{:>7}ms {:<5} {} {}",
                cell(&l["at_ms"]),
                cell(&l["level"]),
                cell(&l["message"]),
                fields.join(" ")
            );
            println!("{}", line.trim_end());
        }
        for stream in ["stdout", "stderr"] {
            let text = a[stream].as_str().unwrap_or_default();
            if !text.is_empty() {
                println!("-- {stream} --");
                print!("{}", safe(text, Layout::Block));
                if !text.ends_with('\n') {
                    println!();
                }
            }
        }
    }
    done()
}

fn events(args: RunIdArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let v = client.get(&format!("/v1/runs/{}/events", enc(&args.run)))?;
    if args.conn.json {
        print_json(&v);
        return done();
    }
    let rows: Vec<Vec<String>> = items(&v["events"])
        .map(|e| {
            vec![
                cell(&e["at"]),
                if e["step"].is_null() {
                    "(run)".into()
                } else {
                    cell(&e["step"])
                },
                cell(&e["attempt"]),
                cell(&e["from"]),
                cell(&e["to"]),
                cell(&e["actor"]),
                cell(&e["reason"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["AT", "STEP", "ATTEMPT", "FROM", "TO", "ACTOR", "REASON"],
            &rows
        )
    );
    done()
}

fn dead_letters(args: DeadLettersArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let json = args.conn.json;
    match args.command {
        None => {
            let open = if args.all { "false" } else { "true" };
            let v = client.get(&format!("/v1/dead-letters?open={open}"))?;
            if json {
                print_json(&v);
            } else {
                let rows: Vec<Vec<String>> = items(&v["dead_letters"])
                    .map(|d| {
                        vec![
                            cell(&d["id"]),
                            cell(&d["task"]),
                            cell(&d["run_id"]),
                            cell(&d["step"]),
                            cell(&d["attempts"]),
                            cell(&d["outcome"]),
                            cell(&d["created_at"]),
                            if d["resolution"].is_null() {
                                cell(&d["error"])
                            } else {
                                format!("resolved: {}", cell(&d["resolution"]))
                            },
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(
                        &[
                            "ID",
                            "TASK",
                            "RUN",
                            "STEP",
                            "ATTEMPTS",
                            "OUTCOME",
                            "CREATED",
                            "ERROR / RESOLUTION"
                        ],
                        &rows
                    )
                );
            }
        }
        Some(DeadLetterCommand::Resolve { id, resolution }) => {
            let (_, v) = client.post(
                &format!("/v1/dead-letters/{}/resolve", enc(&id)),
                Body::Json(json!({ "resolution": resolution })),
            )?;
            if json {
                print_json(&v);
            } else {
                println!(
                    "dead letter {} resolved: {}",
                    cell(&v["id"]),
                    cell(&v["resolution"])
                );
            }
        }
        Some(DeadLetterCommand::Requeue { id }) => {
            let (_, v) = client.post(
                &format!("/v1/dead-letters/{}/requeue", enc(&id)),
                Body::None,
            )?;
            if json {
                print_json(&v);
            } else {
                println!(
                    "dead letter {id} requeued: run {} is {}",
                    cell(&v["id"]),
                    cell(&v["status"])
                );
            }
        }
    }
    done()
}

fn cron_next(args: CronNextArgs) -> Outcome {
    let cron = crate::schedule::CronSchedule::parse(&args.expr, &args.tz)
        .map_err(|e| Failure::new("invalid", e.to_string()))?;
    let from = match &args.from {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                Failure::new(
                    "usage",
                    format!("--from `{text}` is not an RFC 3339 instant ({e})"),
                )
            })?,
        None => Utc::now(),
    };
    let instants = cron.upcoming(from, args.count.max(1));
    let zone = cron.timezone();
    let described: Vec<String> = instants
        .iter()
        .map(|at| crate::schedule::describe(*at, zone))
        .collect();
    if args.json {
        let next: Vec<String> = instants
            .iter()
            .map(|at| crate::scheduler::clock::rfc3339(at.timestamp_millis()))
            .collect();
        print_json(&json!({ "next": next, "described": described }));
    } else {
        if described.is_empty() {
            println!("(no more fire instants)");
        }
        for line in described {
            println!("{line}");
        }
    }
    done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        super::super::Cli::command().debug_assert();
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            query(&[("a", Some("x y/z".into())), ("b", None)]),
            "?a=x%20y%2Fz"
        );
        assert_eq!(query(&[("b", None)]), "");
        assert_eq!(enc("hello-1.0_x~"), "hello-1.0_x~");
    }

    #[test]
    fn the_wait_bar_counts_ended_steps_and_names_the_one_at_work() {
        let run = json!({"status": "running", "steps": [
            {"name": "extract", "status": "succeeded", "attempts": [{}]},
            {"name": "full", "status": "skipped", "attempts": []},
            {"name": "incremental", "status": "retry_wait", "attempts": [{}, {}]},
            {"name": "notify", "status": "pending", "attempts": []},
        ]});
        assert_eq!(steps_done(&run), (2, 4));
        assert_eq!(
            run_state(&run),
            "running · step incremental retry_wait after attempt 2"
        );
        let queued = json!({"status": "queued", "steps": [
            {"name": "a", "status": "queued", "attempts": [{}]},
        ]});
        assert_eq!(run_state(&queued), "queued · step a queued (attempt 2)");
        assert_eq!(
            run_state(&json!({"status": "queued", "steps": []})),
            "queued"
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_ms(340.0), "340ms");
        assert_eq!(human_ms(1250.0), "1.25s");
        assert_eq!(human_ms(125_000.0), "2m05s");
        assert_eq!(human_ms(31_125_000.0), "8h38m");
    }
}
