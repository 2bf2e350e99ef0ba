//! The `ax` command line. `ax exec` runs a plugin locally in the sandbox (no
//! server), `ax task run --local` a whole task ([`local`]); `ax bench`
//! measures the runtime; the client commands (`ax plugin`,
//! `ax task`, `ax trigger`, `ax runs`, …, see [`client`]) talk to a server
//! over HTTP and need no async runtime; `ax completions SHELL` prints a
//! completion script (clap_complete), `ax status` a health summary; `ax plugin
//! new` writes a plugin project ([`scaffold`]) and `ax build` builds one with
//! the command its `ax.yaml` names ([`build`]); `ax dev` builds, runs the
//! project's task locally (or on a server with `--url`) and does it again
//! on every change ([`dev`], watching with [`watch`]).

// Every command below prints through these two: a closed stdout (`ax runs |
// head -1`) ends the command quietly with exit 0 instead of std's panic
// ("failed printing to stdout: Broken pipe", exit 101). They shadow std's
// macros of the same name for the modules declared after them.
macro_rules! println {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

macro_rules! print {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

mod build;
mod client;
mod dev;
mod dump;
mod exec;
mod local;
mod scaffold;
mod term;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::model::Limits;

/// ax: a task execution host running sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "ax", version, about, propagate_version = true)]
pub struct Cli {
    /// Log as JSON lines instead of human-readable text (logs go to stderr);
    /// the same as `--log-format json`.
    #[arg(long, global = true, env = "AX_LOG_JSON")]
    pub log_json: bool,
    /// Log format on stderr: `text` (default) or `json` (one object per line,
    /// with the fields of the enclosing spans: request id, run, task, step,
    /// attempt, tenant).
    #[arg(long, global = true, env = "AX_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Cli {
    /// Whether logs are JSON lines (`--log-format json` or `--log-json`).
    pub fn json_logs(&self) -> bool {
        self.log_format == Some(LogFormat::Json) || (self.log_json && self.log_format.is_none())
    }

    /// The log filter unless `RUST_LOG` says: ax's own `info` lines, but
    /// only warnings for `ax task run --local`, whose output already says
    /// what its scheduler's `info` lines would (each attempt's end, the run's).
    pub fn log_filter(&self) -> &'static str {
        match &self.command {
            Command::Client(c) if c.runs_locally() => "warn",
            Command::Dev(_) => "warn",
            _ => "warn,ax=info",
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run ax: the embedded store, the scheduler and the HTTP API.
    Serve(ServeArgs),
    /// Run one plugin locally in the sandbox and print how it ended.
    Exec(exec::ExecArgs),
    /// Build the plugin project in this folder (or --dir) with the command
    /// its `ax.yaml` names, and print where the component is.
    Build(build::BuildArgs),
    /// Build the project in this folder (or --dir), run its task.yaml in
    /// this process (as `ax task run --local`) and print the result; then
    /// watch the sources and build and run again on every change.
    ///
    /// With --url, each build runs on that server instead: pushed as a
    /// development version (the project's version with `-dev.<unix ms>`),
    /// the task applied naming it (without its time trigger), triggered and
    /// waited for; the development version it replaced is then deleted.
    #[command(
        after_help = "Examples:\n  ax dev                      # build, run, watch; Ctrl-C stops\n  ax dev -p name=you          # the task's params, as ax trigger takes them\n  ax dev --once               # build and run once; exit 0 when the run succeeded\n  ax dev --url                # run each build on the server of AX_URL (AX_TOKEN)"
    )]
    Dev(dev::DevArgs),
    /// Measure the runtime.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Client commands talking to a server (`AX_URL`, `AX_TOKEN`).
    #[command(flatten)]
    Client(client::ClientCommand),
    /// The data directory, offline.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Print a shell completion script (e.g. `ax completions bash > /etc/bash_completion.d/ax`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Check a data directory that no `ax serve` is using: its store format
    /// (a newer one is refused, an older one reported: the next `ax serve`
    /// upgrades it) and, for a current one, every entry read. Exit 1 when it
    /// is unusable.
    Check {
        /// The data directory.
        #[arg(long, default_value = crate::config::DEFAULT_DATA_DIR)]
        data_dir: std::path::PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bring a PostgreSQL database's schema to this ax's version (the
    /// embedded, versioned migrations, each applied once under a lock, so
    /// hosts starting together do not race), or with `--dry-run` print what
    /// would run and change nothing. A schema newer than this ax's is
    /// refused.
    Migrate {
        /// The database: postgres://USER:PASSWORD@HOST:PORT/DATABASE.
        #[arg(long, env = "AX_STORE")]
        store: String,
        /// Print the pending migrations and their SQL; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write the whole store (sled, or PostgreSQL with --store) to a dump
    /// file: gzip-compressed JSON lines, versioned (docs/OPERATIONS.md,
    /// *Backups*). Secrets are left out unless --include-secrets. No
    /// `ax serve` may be using a sled store.
    Export(dump::ExportArgs),
    /// Fill an empty store from a dump file (`ax store export`): the whole
    /// file is checked first (format version, truncation), then written;
    /// prints what it imported.
    Import(dump::ImportArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Per-attempt cost of a plugin: new store + instantiate + call + teardown.
    Exec(exec::BenchExecArgs),
    /// Loading a plugin: compiling it vs loading the cached artifact.
    Load(exec::BenchLoadArgs),
    /// Fire lateness: many tasks firing every second through the real scheduler.
    Fire(BenchFireArgs),
    /// Manual-trigger throughput: accepted durably → succeeded.
    Trigger(BenchTriggerArgs),
    /// Scheduling overhead per step of a large fan-out/fan-in DAG.
    Dag(BenchDagArgs),
    /// "One hour compressed": many tasks firing every second with retention
    /// on; shows the store size on disk over time.
    Soak(BenchSoakArgs),
    /// Cost of tenant tokens and quotas per trigger, against the same path without tenants.
    Tenants(BenchTenantsArgs),
    /// Key-value get/set round trips from a plugin (the `bench-caps` plugin).
    Kv(BenchKvArgs),
    /// Allowed HTTP requests from a plugin to a loopback server (`bench-caps`).
    Http(BenchHttpArgs),
    /// Many tasks and queued runs on a real `ax serve` child over HTTP: apply
    /// and trigger rates, RSS, store size, restart after SIGKILL, fire lateness.
    Scale(BenchScaleArgs),
    /// `ax store export` and `import` speed: runs per second from sled to a
    /// file, into PostgreSQL (`--store`, an empty database), back out of it
    /// and into a fresh sled store.
    Dump(BenchDumpArgs),
}

#[derive(Debug, Args)]
struct BenchDumpArgs {
    /// Finished runs in the store.
    #[arg(long, default_value_t = 20_000)]
    runs: usize,
    /// An empty PostgreSQL database for the PostgreSQL legs.
    #[arg(long)]
    store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct BenchScaleArgs {
    /// Task definitions in all (cron tasks spread over the next hours, plus
    /// the `--every-second` ones).
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// Runs queued (held by a tenant's fuel quota, so the queue stays full).
    #[arg(long, default_value_t = 10_000)]
    queued: usize,
    /// Of the tasks, how many fire every second (fire lateness is measured on them).
    #[arg(long, default_value_t = 100)]
    every_second: usize,
    /// Seconds of fire lateness measured.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// HTTP clients at once, each a keep-alive connection.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Tasks and queued runs per request, through `POST /v1/tasks:apply` and
    /// `POST /v1/tasks/{name}/runs:batch` (1..=1000); 1 (the default) sends
    /// one `PUT` or `POST` each. A million of each takes minutes this way.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// The server's `store.cache_mb` (else its default).
    #[arg(long)]
    cache_mb: Option<u64>,
    /// Where the scratch data directory is made (else the temp directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Run the server on a new database of this PostgreSQL server (a URL
    /// whose user may create databases; dropped after) instead of sled.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct BenchSoakArgs {
    /// Tasks, each firing every second.
    #[arg(long, default_value_t = 200)]
    tasks: usize,
    /// How long to run, e.g. `3m`, `1h`.
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    duration: Duration,
    /// Finished runs each task keeps (`retention.keep_runs`).
    #[arg(long, default_value_t = 20)]
    keep_runs: u64,
    /// How often the retention sweeper runs.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    sweep_every: Duration,
    /// How often the store size is sampled.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    sample_every: Duration,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct BenchTenantsArgs {
    /// Runs per round.
    #[arg(long, default_value_t = 2000)]
    runs: usize,
    /// HTTP clients triggering at once.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Rounds per mode (interleaved).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct BenchKvArgs {
    /// The `bench-caps` plugin (built from plugins/bench-caps).
    #[arg(long)]
    plugin: PathBuf,
    /// KV calls per measured attempt.
    #[arg(long, default_value_t = 10_000)]
    ops: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Attempts per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Use the in-memory store instead of sled on disk.
    #[arg(long)]
    memory: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct BenchHttpArgs {
    /// The `bench-caps` plugin (built from plugins/bench-caps).
    #[arg(long)]
    plugin: PathBuf,
    /// Requests per measured attempt.
    #[arg(long, default_value_t = 1_000)]
    requests: usize,
    /// Attempts per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct BenchDagArgs {
    /// Steps in the DAG (at most a task's limit, 256).
    #[arg(long, default_value_t = crate::task::MAX_STEPS)]
    steps: usize,
    /// Run on a new database of this PostgreSQL server (a URL whose user
    /// may create databases; dropped after) instead of sled.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address of the HTTP API.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Data directory (store, plugin blobs, compiled artifacts).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A PostgreSQL database to keep everything in instead of the embedded
    /// store (postgres://USER:PASSWORD@HOST:PORT/DATABASE; also `store.url`
    /// in the config file and `AX_STORE`). The data directory still holds
    /// the compiled-artifact cache.
    #[arg(long)]
    store: Option<String>,
    /// Config file (YAML or JSON); flags and `AX_*` variables override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Load the example plugins and tasks (tenant `default`) so runs happen at once.
    #[arg(long)]
    demo: bool,
}

#[derive(Debug, Args)]
struct BenchFireArgs {
    /// Tasks, each firing every second (`every: 1s`, so fires spread over the second).
    #[arg(long, default_value_t = 1000)]
    tasks: usize,
    /// Seconds to measure.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// All tasks fire at the same instant (cron `* * * * * ?`) instead of spread over the second.
    #[arg(long)]
    aligned: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct BenchTriggerArgs {
    /// Runs to trigger.
    #[arg(long, default_value_t = 20_000)]
    runs: usize,
    /// Clients triggering at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Trigger through the HTTP API over loopback (keep-alive clients)
    /// instead of calling the service in-process.
    #[arg(long)]
    http: bool,
    /// Run on a new database of this PostgreSQL server (a URL whose user
    /// may create databases; dropped after) instead of sled.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn print_stats(
    stats: &(impl serde::Serialize + std::fmt::Display),
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(stats)?);
    } else {
        println!("{stats}");
    }
    Ok(ExitCode::SUCCESS)
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
/// `ax store migrate`: applies the pending migrations of a PostgreSQL
/// store, or prints them (`--dry-run`).
fn store_migrate(url: &str, dry_run: bool) -> anyhow::Result<()> {
    let db = crate::store::postgres::Database::connect(url, 1)?;
    let shown = db.pool().shown().to_string();
    let latest = crate::store::postgres::latest();
    if !dry_run {
        let applied = db.migrate()?;
        for m in &applied {
            println!("applied migration {} ({})", m.version, m.name);
        }
        println!("{shown}: schema version {latest}, current");
        return Ok(());
    }
    let plan = db.plan()?;
    if plan.pending.is_empty() {
        println!(
            "{shown}: schema version {}, current: nothing would run",
            plan.current
        );
        return Ok(());
    }
    println!(
        "{shown}: schema version {}, this ax's is {latest}; {} migration(s) would run (dry run: nothing applied)",
        plan.current,
        plan.pending.len()
    );
    for m in &plan.pending {
        println!(
            "\n-- migration {}: {}\n{}",
            m.version,
            m.name,
            m.sql.trim_end()
        );
    }
    Ok(())
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ax")
        .join("artifacts")
}

/// Sets up `tracing` to stderr, filtered by `RUST_LOG` (default
/// `default_filter`, see [`Cli::log_filter`]). Colours only when stderr is
/// a terminal: a log written to a file or a pipe keeps no ANSI escapes.
/// Libraries that log through the `log` crate (fjall, the embedded store's
/// second engine, among them: its write stalls, at `info`) reach the same
/// log by `tracing-log`, under their crate's name (`RUST_LOG=fjall=info`).
pub fn init_tracing(json: bool, default_filter: &str) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        // Span fields (request id; run, tenant, task, step, attempt) go with every line.
        builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init();
    } else {
        builder.init();
    }
}

/// Runs a parsed command line; the exit code says how it went.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => block_on(async move {
            let mut config = crate::config::Config::load(args.config.as_deref())?;
            if let Some(listen) = args.listen {
                config.listen = listen;
            }
            if let Some(dir) = args.data_dir {
                config.data_dir = dir;
            }
            if let Some(url) = args.store {
                config.store.url = Some(url);
            }
            crate::server::serve(config, args.demo).await?;
            Ok(ExitCode::SUCCESS)
        }),
        Command::Bench(BenchCommand::Fire(args)) => block_on(async move {
            print_stats(
                &crate::bench::fire_lateness(args.tasks, args.seconds, args.aligned).await?,
                args.json,
            )
        }),
        Command::Bench(BenchCommand::Soak(args)) => block_on(async move {
            let config = crate::bench::SoakConfig {
                tasks: args.tasks,
                duration: args.duration,
                keep_runs: args.keep_runs,
                sweep_every: args.sweep_every,
                sample_every: args.sample_every,
            };
            print_stats(&crate::bench::soak(config).await?, args.json)
        }),
        Command::Bench(BenchCommand::Dag(args)) => block_on(async move {
            print_stats(
                &crate::bench::dag_overhead(args.steps, args.store.as_deref()).await?,
                args.json,
            )
        }),
        Command::Bench(BenchCommand::Trigger(args)) => block_on(async move {
            print_stats(
                &crate::bench::trigger_throughput(
                    args.runs,
                    args.concurrency,
                    args.http,
                    args.store.as_deref(),
                )
                .await?,
                args.json,
            )
        }),
        Command::Bench(BenchCommand::Tenants(args)) => block_on(async move {
            print_stats(
                &crate::bench::tenant_overhead(args.runs, args.clients, args.rounds).await?,
                args.json,
            )
        }),
        Command::Bench(BenchCommand::Kv(args)) => block_on(async move {
            let bytes = std::fs::read(&args.plugin)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", args.plugin.display()))?;
            print_stats(
                &crate::bench::kv_round_trips(
                    &bytes,
                    args.ops,
                    args.value_bytes,
                    args.repeat,
                    args.memory,
                )
                .await?,
                args.json,
            )
        }),
        Command::Bench(BenchCommand::Http(args)) => block_on(async move {
            let bytes = std::fs::read(&args.plugin)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", args.plugin.display()))?;
            print_stats(
                &crate::bench::http_requests(&bytes, args.requests, args.repeat).await?,
                args.json,
            )
        }),
        Command::Bench(BenchCommand::Scale(args)) => {
            let config = crate::bench::ScaleConfig {
                exe: std::env::current_exe()?,
                tasks: args.tasks,
                queued: args.queued,
                every_second: args.every_second,
                seconds: args.seconds,
                clients: args.clients,
                batch: args.batch,
                cache_mb: args.cache_mb,
                dir: args.dir,
                store: args.store,
            };
            print_stats(&crate::bench::scale(config)?, args.json)
        }
        Command::Bench(BenchCommand::Dump(args)) => print_stats(
            &crate::bench::dump_speed(args.runs, args.store.as_deref())?,
            args.json,
        ),
        Command::Store(StoreCommand::Migrate { store, dry_run }) => {
            store_migrate(&store, dry_run)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Store(StoreCommand::Export(args)) => dump::export(&args),
        Command::Store(StoreCommand::Import(args)) => dump::import(&args),
        Command::Store(StoreCommand::Check { data_dir, json }) => {
            let checked = crate::store::SledStore::check(&data_dir)?;
            if json {
                println!("{}", serde_json::to_string(&checked)?);
            } else if checked.format < checked.current {
                println!(
                    "{}: store format {} (this ax writes {}): the next `ax serve` upgrades it (docs/OPERATIONS.md); not opened",
                    data_dir.display(),
                    checked.format,
                    checked.current
                );
            } else {
                println!(
                    "{}: store format {}, {} entries read, no damage; {} runs, {} task definitions",
                    data_dir.display(),
                    checked.format,
                    checked.entries,
                    checked.runs,
                    checked.definitions
                );
                if checked.json_values > 0 {
                    println!(
                        "{} records, step runs and logs still in an older format's JSON \
                         (each compact at its next write)",
                        checked.json_values
                    );
                }
                println!(
                    "{:<8} {:>10} {:>12} {:>9}",
                    "kind", "entries", "bytes", "per run"
                );
                let runs = checked.runs.max(1) as f64;
                let files = ("inputs/".to_owned(), &checked.input_files);
                let kinds = checked.kinds.iter().map(|(k, s)| (k.clone(), s));
                for (kind, size) in kinds.chain((files.1.entries > 0).then_some(files)) {
                    println!(
                        "{kind:<8} {:>10} {:>12} {:>9.0}",
                        size.entries,
                        size.bytes,
                        size.bytes as f64 / runs
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Exec(args) => block_on(exec::exec(args)),
        Command::Build(args) => Ok(build::run(&args)),
        Command::Dev(args) => Ok(dev::run(args)),
        Command::Bench(BenchCommand::Exec(args)) => block_on(exec::bench_exec(args)),
        Command::Bench(BenchCommand::Load(args)) => block_on(exec::bench_load(args)),
        // Blocking HTTP: no runtime needed.
        Command::Client(command) => Ok(client::run(command)),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            use std::io::Write as _;
            // Generated into memory: clap_complete panics on a write error,
            // and `ax completions bash | head` is a closed pipe, not a bug.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "ax", &mut script);
            match std::io::stdout().write_all(&script) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(ExitCode::SUCCESS),
            }
        }
    }
}

/// Writes to stdout for `print!`/`println!` in this module. A reader that
/// went away (a closed pipe) ends the process at once with exit 0, as
/// `head` expects of its writers; any other write error ends it with exit 2.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: io: writing to stdout: {e}");
        std::process::exit(2);
    }
}

/// Runs an async command on a multi-threaded tokio runtime.
fn block_on(
    command: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(command)
}
