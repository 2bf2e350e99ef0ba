//! `ax plugin push|list`: upload a component (with a progress bar) and list
//! the tenant's plugins. (`ax plugin new`, local, is `crate::cli::scaffold`.)

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::http::{Body, Client, query};
use super::output::{cell, items, print_json, short_digest, table};
use super::{Conn, Failure, Outcome, done};

#[derive(Debug, Args)]
pub(in crate::cli) struct PluginArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Create a plugin project in Rust, Python or JavaScript (no server needed).
    New(crate::cli::scaffold::NewArgs),
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

pub(super) fn plugin(args: PluginArgs) -> Outcome {
    let client = Client::new(&args.conn);
    match args.command {
        PluginCommand::New(new) => {
            let created = crate::cli::scaffold::new(&new).map_err(|e| {
                let code = match e {
                    crate::cli::scaffold::Error::Io { .. } => "io",
                    _ => "usage",
                };
                Failure::new(code, e.to_string())
            })?;
            print!("{}", crate::cli::scaffold::summary(&created));
        }
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
            let progress = crate::cli::term::UploadProgress::new(
                &format!("{name}@{version}"),
                bytes.len() as u64,
            );
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
