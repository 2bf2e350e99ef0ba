//! `ax exec` and the runtime benchmarks: everything that runs a plugin
//! locally, without a server.
//!
//! `ax exec` takes the same capability grants a step can declare, so authors
//! try them without a server: `--allow-http` (repeatable), `--config`,
//! `--secret` (redacted from the report like on a server) and `--kv-dir`, a
//! local key-value store (a sled database in that directory) that persists
//! between invocations. The tenant is `local`, the task the file's name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;

use super::term::{Layout, safe};
use super::{LimitArgs, default_cache_dir};
use crate::bench;
use crate::capability::{Grants, HttpLimits, KvGrant, KvLimits, KvNamespace, KvScope};
use crate::model::record::AttemptRecord;
use crate::model::{AttemptContext, AttemptReport, Outcome, TriggerKind};
use crate::runtime::{LoadSource, Plugin, ReplayReport, Runtime, RuntimeConfig, Tier, Tiering};
use crate::store::kv::SledKv;

#[derive(Debug, Args)]
pub(super) struct ExecArgs {
    /// The plugin component (`.wasm`, built for wasm32-wasip2).
    plugin: PathBuf,
    /// The input, as JSON text.
    #[arg(long, default_value = "{}")]
    input: String,
    #[command(flatten)]
    limits: LimitArgs,
    /// Print one JSON object instead of a human summary.
    #[arg(long)]
    json: bool,
    /// Where compiled artifacts are cached.
    #[arg(long, env = "AX_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile with Cranelift whatever the size (what a server runs once its
    /// tier-up ended), instead of Winch's fast tier for components of 1 MiB
    /// or more: to measure the speed or fuel the plugin will have.
    #[arg(long)]
    optimized: bool,
    #[command(flatten)]
    grants: GrantArgs,
}

/// The capabilities a local run is granted (deny by default, like a step).
#[derive(Debug, Args)]
struct GrantArgs {
    /// Allow outbound HTTP to `scheme://host[:port|:*]` (repeatable), e.g.
    /// `--allow-http http://127.0.0.1:*`.
    #[arg(long = "allow-http", value_name = "PATTERN")]
    allow_http: Vec<String>,
    /// A config value the plugin reads with `config.get` (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// A secret the plugin may read (repeatable); `NAME` alone takes the value
    /// of the environment variable NAME, keeping it out of shell history.
    #[arg(long = "secret", value_name = "NAME=VALUE")]
    secrets: Vec<String>,
    /// A local key-value store for the plugin (created if missing; kept
    /// between runs). Without it the plugin has no KV.
    #[arg(long, value_name = "DIR")]
    kv_dir: Option<PathBuf>,
    /// Key-value quota of the local store, KiB.
    #[arg(long, default_value_t = crate::capability::kv::DEFAULT_QUOTA_BYTES >> 10)]
    kv_quota_kb: u64,
}

impl GrantArgs {
    /// Parses the flags into the grants of one attempt.
    fn grants(&self, ctx: &AttemptContext) -> anyhow::Result<Grants> {
        let allow_http = crate::capability::http::parse_list(&self.allow_http)
            .map_err(|(i, e)| anyhow::anyhow!("--allow-http {}: {e}", self.allow_http[i]))?;
        let mut config = BTreeMap::new();
        for entry in &self.config {
            let (k, v) = entry
                .split_once('=')
                .with_context(|| format!("--config `{entry}`: write KEY=VALUE"))?;
            anyhow::ensure!(
                crate::capability::valid_name(k),
                "--config `{k}`: a key is letters, digits, `_`, `.`, `-` (at most 64)"
            );
            config.insert(k.to_owned(), v.to_owned());
        }
        let mut secrets = BTreeMap::new();
        for entry in &self.secrets {
            let (name, value) = match entry.split_once('=') {
                Some((n, v)) => (n, v.to_owned()),
                None => (
                    entry.as_str(),
                    std::env::var(entry).with_context(|| {
                        format!("--secret {entry}: no `=VALUE` and no environment variable {entry}")
                    })?,
                ),
            };
            anyhow::ensure!(
                crate::capability::valid_name(name),
                "--secret `{name}`: a name is letters, digits, `_`, `.`, `-` (at most 64)"
            );
            secrets.insert(name.to_owned(), Some(value));
        }
        let kv = match &self.kv_dir {
            None => None,
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating --kv-dir {}", dir.display()))?;
                let store = SledKv::open_dir(dir)
                    .with_context(|| format!("opening --kv-dir {}", dir.display()))?;
                Some(KvGrant {
                    store: Arc::new(store),
                    namespace: KvNamespace::new(&ctx.tenant, &ctx.task, KvScope::Tenant),
                    limits: KvLimits {
                        quota_bytes: self.kv_quota_kb.saturating_mul(1 << 10),
                        ..KvLimits::default()
                    },
                })
            }
        };
        Ok(Grants {
            allow_http,
            http_limits: HttpLimits::default(),
            config,
            secrets,
            kv,
        })
    }
}

/// The runtime of a local run: a component of 1 MiB or more (a Python or
/// JavaScript one) is compiled with Winch, the server's first tier, and
/// keeps Winch's code ([`Tiering::BaselineOnly`]): a local run is one
/// process, which would exit before a tier-up behind it ended. Smaller ones
/// get Cranelift, as on the server. Artifacts go to the same cache, named as
/// the server names them (`runtime::cache`), so the next run loads them.
/// `optimized`: Cranelift for every size (`ax exec --optimized`).
pub(super) fn open_runtime(cache_dir: Option<PathBuf>, optimized: bool) -> anyhow::Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir.unwrap_or_else(default_cache_dir)),
        compiler: crate::runtime::CompilerConfig {
            tiering: if optimized {
                Tiering::Off
            } else {
                Tiering::BaselineOnly {
                    min_bytes: crate::runtime::DEFAULT_BASELINE_MIN_BYTES,
                }
            },
            ..Default::default()
        },
        ..RuntimeConfig::default()
    })?)
}

/// Loads `bytes` on a blocking thread and says on stderr how (compiled or
/// from the artifact cache, which code, how long), so a slow first run is
/// explained and a fast second one shows it came from the cache.
pub(super) async fn load_plugin(
    runtime: &Runtime,
    bytes: Vec<u8>,
    what: &str,
) -> anyhow::Result<Plugin> {
    let started = std::time::Instant::now();
    let (plugin, source) = {
        let runtime = runtime.clone();
        tokio::task::spawn_blocking(move || runtime.load_traced(&bytes)).await?
    }
    .with_context(|| format!("loading {what}"))?;
    let how = match source {
        LoadSource::Compiled => "compiled",
        LoadSource::DiskCache | LoadSource::Memory => "loaded from the artifact cache",
    };
    let code = match plugin.tier() {
        Tier::Baseline => "Winch's code, the fast tier",
        Tier::Optimized => "Cranelift's code",
    };
    eprintln!(
        "ax: {what}: {how} ({code}) in {:.2}s",
        started.elapsed().as_secs_f64()
    );
    Ok(plugin)
}

fn read_plugin(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// A context for a local run: named after the file, scheduled now.
fn local_context(plugin: &std::path::Path) -> AttemptContext {
    let name = plugin
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    let now = std::time::SystemTime::now();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    AttemptContext {
        run_id: format!("exec-{nanos:x}"),
        tenant: "local".into(),
        task: name.clone(),
        step: name,
        attempt: 1,
        scheduled_for: humantime::format_rfc3339_millis(now).to_string(),
        trigger: TriggerKind::Manual,
    }
}

pub(super) async fn exec(args: ExecArgs) -> anyhow::Result<ExitCode> {
    serde_json::from_str::<serde_json::Value>(&args.input)
        .with_context(|| format!("--input is not JSON: {}", args.input))?;
    let bytes = read_plugin(&args.plugin)?;
    let runtime = open_runtime(args.cache_dir, args.optimized)?;
    let plugin = load_plugin(&runtime, bytes, &args.plugin.display().to_string()).await?;
    let ctx = local_context(&args.plugin);
    let grants = args.grants.grants(&ctx)?;
    let report = runtime
        .run_with(
            &plugin,
            &ctx,
            &args.input,
            &args.limits.limits(),
            &grants,
            None,
        )
        .await?;
    if let Some(kv) = &grants.kv {
        kv.store
            .flush()
            .context("saving the local key-value store")?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if report.outcome == Outcome::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Re-executes a recorded attempt with `component` in a local runtime (the
/// one `ax exec` uses): `ax run replay`.
pub(super) fn replay_locally(
    component: Vec<u8>,
    record: AttemptRecord,
    secrets: BTreeMap<String, String>,
    cache_dir: Option<PathBuf>,
) -> anyhow::Result<ReplayReport> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let runtime = open_runtime(cache_dir, false)?;
            let plugin = load_plugin(&runtime, component, "the component").await?;
            Ok(runtime.replay(&plugin, &record, &secrets).await?)
        })
}

/// The report for people. Everything the plugin wrote is made
/// terminal-safe ([`super::term::safe`]); `--json` prints it exactly.
fn print_report(r: &AttemptReport) {
    let line = |text: &str| safe(text, Layout::Line).into_owned();
    println!("outcome   {}", r.outcome);
    if let Some(output) = &r.output {
        println!("output    {}", line(&output.to_string()));
    }
    if let Some(error) = &r.error {
        let kind = r
            .error_kind
            .map(|k| format!(" ({k:?})").to_lowercase())
            .unwrap_or_default();
        println!("error     {}{kind}", line(error));
    }
    println!("fuel      {}", r.fuel_consumed);
    println!(
        "memory    {:.1} MiB peak",
        r.memory_peak_bytes as f64 / (1 << 20) as f64
    );
    println!("duration  {:.2} ms", r.duration_ms);
    if let Some(p) = &r.progress {
        println!("progress  {}% {}", p.percent, line(&p.note));
    }
    for (name, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        if !text.is_empty() {
            println!("--- {name}");
            print!("{}", safe(text, Layout::Block));
            if !text.ends_with('\n') {
                println!();
            }
        }
    }
    if !r.logs.is_empty() {
        println!("--- logs");
        for l in &r.logs {
            let fields: String = l
                .fields
                .iter()
                .map(|(k, v)| format!(" {}={}", line(k), line(v)))
                .collect();
            println!(
                "{:>6}ms {:5} {}{fields}",
                l.at_ms,
                format!("{:?}", l.level).to_uppercase(),
                line(&l.message)
            );
        }
    }
}

#[derive(Debug, Args)]
pub(super) struct BenchExecArgs {
    /// The plugin to run (a trivial one measures the runtime's own cost).
    #[arg(long)]
    plugin: PathBuf,
    /// Attempts in total (after a warm-up of 1/10 as many).
    #[arg(long, default_value_t = 20_000)]
    iterations: usize,
    /// Attempts in flight at once; several values give one row each, e.g. `1,2`.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    concurrency: Vec<usize>,
    /// The input, as JSON text.
    #[arg(long, default_value = "{}")]
    input: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// KiB of each pooled linear memory kept resident between instances.
    #[arg(long, default_value_t = crate::runtime::DEFAULT_MEMORY_KEEP_RESIDENT >> 10)]
    keep_resident_kib: usize,
    /// Reset whole resident memories instead of only dirtied pages.
    #[arg(long)]
    no_pagemap_scan: bool,
    /// KiB of each pooled table kept resident between instances.
    #[arg(long, default_value_t = crate::runtime::DEFAULT_TABLE_KEEP_RESIDENT >> 10)]
    table_keep_resident_kib: usize,
    /// Cache the compiled plugin in this folder (a rerun skips compiling).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    compiler: CompilerArgs,
}

/// The compiler settings to measure with (`ax bench exec|load`).
#[derive(Debug, Args)]
pub(super) struct CompilerArgs {
    /// The compiler (`winch` needs a build with the `winch` cargo feature).
    /// `tiered`: Winch first for components of at least
    /// `--baseline-min-kib`, replaced by Cranelift's code compiled behind it,
    /// as `ax serve` does.
    #[arg(long, value_enum, default_value_t = CompilerChoice::Cranelift)]
    compiler: CompilerChoice,
    /// With `--compiler tiered`: the smallest component, in KiB, that gets
    /// Winch code first.
    #[arg(long, default_value_t = crate::runtime::DEFAULT_BASELINE_MIN_BYTES >> 10)]
    baseline_min_kib: usize,
    /// Cranelift's optimisation level.
    #[arg(long, value_enum, default_value_t = OptChoice::Speed)]
    opt_level: OptChoice,
    /// Compile on one thread instead of all cores.
    #[arg(long)]
    serial_compilation: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CompilerChoice {
    Cranelift,
    Winch,
    Tiered,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum OptChoice {
    None,
    Speed,
    SpeedAndSize,
}

impl CompilerArgs {
    fn config(&self) -> crate::runtime::CompilerConfig {
        use crate::runtime::{CompilerConfig, CompilerOptLevel, CompilerStrategy, Tiering};
        CompilerConfig {
            strategy: match self.compiler {
                CompilerChoice::Cranelift | CompilerChoice::Tiered => CompilerStrategy::Cranelift,
                CompilerChoice::Winch => CompilerStrategy::Winch,
            },
            tiering: match self.compiler {
                CompilerChoice::Tiered => Tiering::Tiered {
                    min_bytes: self.baseline_min_kib << 10,
                },
                CompilerChoice::Cranelift | CompilerChoice::Winch => Tiering::Off,
            },
            opt_level: match self.opt_level {
                OptChoice::None => CompilerOptLevel::None,
                OptChoice::Speed => CompilerOptLevel::Speed,
                OptChoice::SpeedAndSize => CompilerOptLevel::SpeedAndSize,
            },
            serial: self.serial_compilation,
        }
    }
}

pub(super) async fn bench_exec(args: BenchExecArgs) -> anyhow::Result<ExitCode> {
    let bytes = read_plugin(&args.plugin)?;
    let runtime = Runtime::new(RuntimeConfig {
        memory_keep_resident: args.keep_resident_kib << 10,
        table_keep_resident: args.table_keep_resident_kib << 10,
        pagemap_scan: !args.no_pagemap_scan,
        compiler: args.compiler.config(),
        cache_dir: args.cache_dir,
        ..RuntimeConfig::default()
    })?;
    let plugin = runtime.load(&bytes)?;
    let mut rows = Vec::new();
    for &c in &args.concurrency {
        rows.push(bench::exec(&runtime, &plugin, &args.input, args.iterations, c).await?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{}", bench::ExecStats::header());
        for row in &rows {
            println!("{row}");
        }
        if let Some((a, b, ratio)) = bench::speed_up(&rows) {
            println!("speed-up c{b} vs c{a} (medians over repeated rows): {ratio:.2}x");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub(super) struct BenchLoadArgs {
    /// The plugin to load.
    #[arg(long)]
    plugin: PathBuf,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    compiler: CompilerArgs,
}

pub(super) async fn bench_load(args: BenchLoadArgs) -> anyhow::Result<ExitCode> {
    let bytes = read_plugin(&args.plugin)?;
    let compiler = args.compiler.config();
    let stats =
        tokio::task::spawn_blocking(move || bench::load(&bytes, args.repeat, compiler)).await??;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        println!("{stats}");
    }
    Ok(ExitCode::SUCCESS)
}
