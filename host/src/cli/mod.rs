//! The `ax` command line. `ax exec` runs a plugin locally in the sandbox (no
//! server); `ax bench` measures the runtime.

mod exec;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::model::Limits;

/// ax: a task execution host running sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "ax", version, about, propagate_version = true)]
pub struct Cli {
    /// Log as JSON lines instead of human-readable text (logs go to stderr).
    #[arg(long, global = true, env = "AX_LOG_JSON")]
    pub log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one plugin locally in the sandbox and print how it ended.
    Exec(exec::ExecArgs),
    /// Measure the runtime.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Per-attempt cost of a plugin: new store + instantiate + call + teardown.
    Exec(exec::BenchExecArgs),
    /// Loading a plugin: compiling it vs loading the cached artifact.
    Load(exec::BenchLoadArgs),
}

/// Sandbox limits as command-line flags (shared by `exec` and `bench`).
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Fuel (instruction budget) for the attempt.
    #[arg(long, default_value_t = crate::model::DEFAULT_FUEL)]
    pub fuel: u64,
    /// Memory cap in MiB.
    #[arg(long, default_value_t = crate::model::DEFAULT_MEMORY_BYTES >> 20)]
    pub memory_mb: u64,
    /// Wall-clock timeout, e.g. `30s`, `500ms`, `2m`.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl LimitArgs {
    /// The limits these flags describe, other caps at their defaults.
    pub fn limits(&self) -> Limits {
        Limits {
            fuel: self.fuel,
            memory_bytes: self.memory_mb << 20,
            timeout: self.timeout,
            ..Limits::default()
        }
    }
}

/// Parses `30s`, `1m30s`, `250ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration ({e}); try 30s, 500ms, 2m"))
}

/// Where `ax exec` keeps compiled artifacts unless told otherwise.
fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ax")
        .join("artifacts")
}

/// Sets up `tracing` to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,ax=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Runs a parsed command line; the exit code says how it went.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.command {
            Command::Exec(args) => exec::exec(args).await,
            Command::Bench(BenchCommand::Exec(args)) => exec::bench_exec(args).await,
            Command::Bench(BenchCommand::Load(args)) => exec::bench_load(args).await,
        }
    })
}
