//! `ax store export FILE` / `ax store import FILE`: a whole store to a dump
//! file and back (`store::dump` holds the format and the logic; this opens
//! the store the flags name and reports).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use crate::store::Store;
use crate::store::dump::{self, ExportOptions, ImportOptions};

/// Which store: PostgreSQL when `--store` (or `AX_STORE`) is given, else
/// the sled store of the data directory.
#[derive(Debug, Args)]
pub(super) struct StoreArgs {
    /// The sled store's data directory (no `ax serve` may be using it).
    #[arg(long, default_value = crate::config::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// A PostgreSQL store instead: postgres://USER:PASSWORD@HOST:PORT/DATABASE.
    #[arg(long, env = "AX_STORE")]
    store: Option<String>,
}

impl StoreArgs {
    fn open(&self) -> anyhow::Result<(Arc<dyn Store>, String)> {
        if let Some(url) = &self.store {
            // Two connections: a dump is one reader or one writer.
            let pg = crate::store::postgres::PgStore::open(url, 2)?;
            let shown = pg.database().pool().shown().to_string();
            return Ok((Arc::new(pg), shown));
        }
        let sled = crate::store::SledStore::open(&self.data_dir)?;
        Ok((Arc::new(sled), self.data_dir.display().to_string()))
    }
}

/// `ax store export`.
#[derive(Debug, Args)]
pub(super) struct ExportArgs {
    /// The dump file to write (must not exist).
    file: PathBuf,
    #[command(flatten)]
    from: StoreArgs,
    /// Also write the tenants' secrets, in plain text: the file is then
    /// created readable by its owner only (mode 0600). Without it secrets
    /// are left out and counted.
    #[arg(long)]
    include_secrets: bool,
}

/// `ax store import`.
#[derive(Debug, Args)]
pub(super) struct ImportArgs {
    /// The dump file to read.
    file: PathBuf,
    #[command(flatten)]
    into: StoreArgs,
    /// How long an imported run's idempotency key is remembered from the
    /// run's creation (a dump does not hold each key's expiry).
    #[arg(long, value_parser = super::parse_duration, default_value = "24h")]
    idempotency_ttl: Duration,
}

pub(super) fn export(args: &ExportArgs) -> anyhow::Result<ExitCode> {
    let (store, shown) = args.from.open()?;
    if args.include_secrets {
        eprintln!(
            "ax: warning: {} will hold secrets in plain text (created mode 0600); keep it like the credentials it holds",
            args.file.display()
        );
    }
    let out = dump::create_file(&args.file, args.include_secrets)
        .map_err(|e| anyhow::anyhow!("creating {}: {e}", args.file.display()))?;
    let started = Instant::now();
    let options = ExportOptions {
        include_secrets: args.include_secrets,
        now: now_ms(),
    };
    let exported = match dump::export(&*store, out, &options) {
        Ok(exported) => exported,
        Err(e) => {
            // A partial dump would be refused anyway; do not leave it.
            let _ = std::fs::remove_file(&args.file);
            anyhow::bail!("exporting {shown}: {e}");
        }
    };
    println!(
        "exported {shown} to {} in {:.1?}: {}",
        args.file.display(),
        started.elapsed(),
        exported.counts
    );
    if exported.secrets_left_out > 0 {
        println!(
            "{} secrets left out (--include-secrets writes them)",
            exported.secrets_left_out
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn import(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    // The file first: a bad one is refused without opening (or creating)
    // the store.
    let described = dump::verify(&args.file).map_err(|e| refuse(&args.file, e))?;
    let (store, shown) = args.into.open()?;
    let started = Instant::now();
    let options = ImportOptions {
        key_ttl: i64::try_from(args.idempotency_ttl.as_millis()).unwrap_or(i64::MAX),
    };
    let imported =
        dump::import(&*store, &args.file, &options).map_err(|e| refuse(&args.file, e))?;
    // Durable before saying so (sled flushes in groups).
    futures_executor::block_on(store.sync_ticket().wait())?;
    println!(
        "imported {} (written by ax {}) into {shown} in {:.1?}: {imported}",
        args.file.display(),
        described.ax,
        started.elapsed()
    );
    if described.secrets_left_out > 0 {
        println!(
            "the dump left {} secrets out: set them again (ax secret set)",
            described.secrets_left_out
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn refuse(file: &Path, e: dump::Error) -> anyhow::Error {
    anyhow::anyhow!("{}: {e}", file.display())
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
