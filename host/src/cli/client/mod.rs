//! The client subcommands (`ax plugin`, `ax deploy`, `ax task`, `ax graph`, `ax trigger`,
//! `ax runs`, `ax run` (with `ax run replay`, which re-executes an attempt
//! locally), `ax logs`, `ax events`, `ax dead-letters`, `ax cron`,
//! `ax status`, `ax tenant`, `ax secret`): thin wrappers over the HTTP API (docs/API.md) that print aligned tables, or the
//! server's JSON with `--json`. They block on plain HTTP calls (ureq) and
//! need no async runtime. `ax cron next` computes locally, without a server,
//! and `ax task run --local` runs a task in the process
//! ([`crate::cli::local`]), printing it as `ax logs` and `ax run show` do.
//!
//! Exit codes: 0 done, 1 a waited-for run did not succeed (failed or
//! cancelled), 2 an error (printed as `error: CODE: message`), 124 a wait
//! that reached its `--timeout` first (as `timeout(1)` exits; the run goes on).
//!
//! What people read is made terminal-safe by [`crate::cli::term::safe`]: every
//! string from the server goes through [`output::cell`] (one line) or, for text
//! that is lines by nature (captured stdout/stderr, a task's source, a
//! drawing), through `safe(.., Layout::Block)`; tables escape every cell
//! again. `--json` prints the server's JSON as it came.
//!
//! One file per command group (`plugins`, `deploy`, `tasks`, `graph`, `trigger`,
//! `runs`, `dead_letters`, `alerts`, `cron`, `status`, `tenant`); what they share is
//! here (the connection flags, the failure type, the dispatch), in `http`
//! (the HTTP client) and in `output` (printing). `dev_server` is `ax dev
//! --url`'s side on a server ([`crate::cli::dev`] builds and watches).

mod alerts;
mod cron;
mod dead_letters;
mod deploy;
mod dev_server;
mod graph;
mod http;
mod manifest;
mod output;
mod plugins;
mod replay;
mod runs;
mod secrets;
mod status;
mod task_check;
mod tasks;
mod tenant;
mod trigger;

use std::process::ExitCode;

use clap::{Args, Subcommand};

pub(super) use dev_server::Remote;
pub(super) use tasks::{LocalFlags, print_local};

use crate::cli::term::{Layout, safe};

/// Where the server is and who we are: a flag, else its environment variable
/// (`AX_URL`, `AX_TOKEN`, `AX_TENANT`), else the default.
///
/// The variables are read here, not through clap's `env`: clap counts a value
/// taken from the environment as typed, and its error usage then showed
/// `ax trigger --url <URL> --token <TOKEN> <TASK>` as if both were required
/// (issue 34). The help still names each variable.
#[derive(Debug, Clone, Args)]
pub(super) struct Conn {
    /// Base URL of the ax server [env: AX_URL] [default: http://127.0.0.1:8641].
    /// `--url` alone: AX_URL's, else the default (for `ax dev`, whose
    /// `--url` is what sends its runs to a server).
    #[arg(long, global = true, num_args = 0..=1, default_missing_value = "")]
    url: Option<String>,
    /// Bearer token (the admin token printed by `ax serve`) [env: AX_TOKEN].
    #[arg(long, global = true)]
    token: Option<String>,
    /// Tenant to act on (sent as `X-Ax-Tenant`; the server defaults to
    /// `default`) [env: AX_TENANT].
    #[arg(long, global = true)]
    tenant: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

/// The server a client talks to when neither `--url` nor `AX_URL` says.
const DEFAULT_URL: &str = "http://127.0.0.1:8641";

impl Conn {
    /// `--url`, else `AX_URL`, else [`DEFAULT_URL`].
    fn url(&self) -> String {
        flag_or_env(&self.url, "AX_URL").unwrap_or_else(|| DEFAULT_URL.to_string())
    }

    /// Whether `--url` was given (with a value or without).
    pub(super) fn url_given(&self) -> bool {
        self.url.is_some()
    }

    /// `--json`.
    pub(super) fn json(&self) -> bool {
        self.json
    }

    /// `--token`, else `AX_TOKEN`; none when both are unset or empty.
    fn token(&self) -> Option<String> {
        flag_or_env(&self.token, "AX_TOKEN")
    }

    /// `--tenant`, else `AX_TENANT`; none when both are unset or empty.
    fn tenant(&self) -> Option<String> {
        flag_or_env(&self.tenant, "AX_TENANT")
    }
}

/// A flag's value, else the environment variable's; an empty value is none
/// (as clap's `env` treated it), so an empty flag (`--url` alone) is the
/// variable's.
fn flag_or_env(flag: &Option<String>, var: &str) -> Option<String> {
    flag.clone()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var(var).ok())
        .filter(|v| !v.is_empty())
}

/// The version of the project in `dir` whose component is `wasm`, as `ax
/// plugin push` reads it ([`manifest::find_version`]); none when no
/// manifest there names one.
pub(super) fn project_version(wasm: &std::path::Path, dir: &std::path::Path) -> Option<String> {
    manifest::find_version(wasm, dir).ok().map(|f| f.version)
}

/// Client subcommands, flattened into the top-level `ax` command.
#[derive(Debug, Subcommand)]
pub(super) enum ClientCommand {
    /// Upload, list and delete plugins.
    Plugin(plugins::PluginArgs),
    /// Build the project in this folder (or --dir) as `ax build`, push the
    /// component with the version its Cargo.toml, package.json or
    /// pyproject.toml carries (as `ax plugin push`), wait for the server to
    /// compile it, and apply its task.yaml (as `ax task apply`).
    ///
    /// A line per stage (build, push, apply), then `ax trigger NAME --wait`.
    /// The build runs only when a source is newer than the component
    /// (`build: up to date` otherwise). The same version again with the
    /// same bytes is kept and the deploy goes on; with other bytes the
    /// server refuses it (versions are immutable): bump the version in the
    /// project's manifest. A failed stage stops the deploy and is named
    /// (`deploy: stopped at push`). Exit 0 deployed, 1 the build or the
    /// server's compilation failed, 2 any other error, 124 the compilation
    /// outlasted --timeout.
    #[command(
        after_help = "Examples:\n  ax deploy && ax trigger greet --wait   # build, push, apply; then run it\n  ax deploy --dir greet --no-build       # push what ax build built last\n  AX_URL=https://ax.example.com AX_TOKEN=... ax deploy"
    )]
    Deploy(deploy::DeployArgs),
    /// Apply (or --dry-run), validate, run locally, list, show, pause, resume and delete tasks.
    Task(tasks::TaskArgs),
    /// Draw a task's DAG (text, dot, mermaid or json), with a run's step states.
    Graph(graph::GraphArgs),
    /// Start a run of a task now.
    Trigger(trigger::TriggerArgs),
    /// List runs, newest first.
    Runs(runs::RunsArgs),
    /// Show, cancel or retry one run.
    Run(runs::RunArgs),
    /// Show what a run's attempts printed and logged, in step order (-f follows a running run).
    Logs(runs::LogsArgs),
    /// Show a run's state changes.
    Events(runs::RunIdArgs),
    /// List, resolve and requeue dead letters (open ones unless --all).
    DeadLetters(dead_letters::DeadLettersArgs),
    /// List webhook alerts (pending, dead, delivered) and retry dead ones.
    Alerts(alerts::AlertsArgs),
    /// Preview cron expressions (computed locally, no server needed).
    #[command(subcommand)]
    Cron(cron::CronCommand),
    /// Summarise a server's health: readiness, backlog, running, success rate, dead letters, next fires.
    Status(status::StatusArgs),
    /// Tenants, their quotas, tokens and usage (admin token).
    Tenant(tenant::TenantArgs),
    /// Set, list and delete the tenant's secrets (values are write-only).
    Secret(secrets::SecretArgs),
}

impl ClientCommand {
    /// Whether the command runs a task in this process (`ax task run
    /// --local`) rather than asking a server.
    pub(super) fn runs_locally(&self) -> bool {
        matches!(self, ClientCommand::Task(args) if args.runs_locally())
    }
}

/// A failed command: what `error: CODE: message` prints.
#[derive(Debug)]
pub(super) struct Failure {
    code: String,
    message: String,
    /// The `details` of the server's error body (`null` otherwise): a
    /// refused batch lists its bad items there.
    details: serde_json::Value,
}

impl Failure {
    pub(super) fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_string(),
            message: message.into(),
            details: serde_json::Value::Null,
        }
    }
}

type Outcome = Result<ExitCode, Failure>;

/// Runs a client subcommand and prints its result; the exit code says how it went.
pub(super) fn run(command: ClientCommand) -> ExitCode {
    let result = match command {
        ClientCommand::Plugin(args) => plugins::plugin(args),
        ClientCommand::Deploy(args) => deploy::deploy(args),
        ClientCommand::Task(args) => tasks::task(args),
        ClientCommand::Graph(args) => graph::graph(args),
        ClientCommand::Trigger(args) => trigger::trigger(args),
        ClientCommand::Runs(args) => runs::runs(args),
        ClientCommand::Run(args) => runs::run_command(args),
        ClientCommand::Logs(args) => runs::logs(args),
        ClientCommand::Events(args) => runs::events(args),
        ClientCommand::DeadLetters(args) => dead_letters::dead_letters(args),
        ClientCommand::Alerts(args) => alerts::alerts(args),
        ClientCommand::Cron(cron::CronCommand::Next(args)) => cron::cron_next(args),
        ClientCommand::Status(args) => status::status(args),
        ClientCommand::Tenant(args) => tenant::tenant(args),
        ClientCommand::Secret(args) => secrets::secret(args),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            report(&f);
            ExitCode::from(2)
        }
    }
}

/// Prints a failure on stderr as `error: CODE: message`.
pub(super) fn report(f: &Failure) {
    eprintln!(
        "error: {}: {}",
        safe(&f.code, Layout::Line),
        safe(&f.message, Layout::Line)
    );
}

/// Exit code of a wait that reached its `--timeout` while the run goes on.
const EXIT_WAIT_TIMED_OUT: u8 = 124;

fn done() -> Outcome {
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        crate::cli::Cli::command().debug_assert();
    }
}
