//! `ax plugin push|list|show|delete|tag|untag`: upload a component (with a
//! progress bar, and tags to point at it; `--wait` follows its background
//! compilation to `ready` or `failed`), list the tenant's plugins with their
//! tags, show one version, delete a version no task pins, set or move a tag,
//! delete a tag. (`ax plugin new`, local, is `crate::cli::scaffold`.)

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::cli::term::CompileProgress;

use super::http::{Body, Client, enc, query};
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
        /// Semver version, e.g. 1.0.0 (default: the project's version, from
        /// `Cargo.toml` `[package]`, `package.json` or `pyproject.toml`
        /// `[project]` in the current directory, else beside the file).
        #[arg(long = "version", id = "plugin_version", value_name = "VERSION")]
        version: Option<String>,
        /// Point this tag at the version once uploaded (created or moved; repeatable).
        #[arg(long = "tag", value_name = "TAG")]
        tags: Vec<String>,
        /// Wait for the server to compile it: exit 0 when `ready`, 1 when
        /// `failed` (the reason on stderr), 124 at `--timeout`.
        #[arg(long)]
        wait: bool,
        /// Seconds `--wait` waits at most.
        #[arg(long, default_value_t = 600, requires = "wait")]
        timeout: u64,
    },
    /// List the tenant's plugins, with the tags that point at each version.
    List,
    /// Point a tag at a version: create it, or move it (tasks naming
    /// `NAME@TAG` take the new version at their next attempt).
    #[command(disable_version_flag = true)]
    Tag {
        /// `NAME@VERSION`, the version the tag is to point at.
        plugin: String,
        /// The tag, e.g. `stable` (starts with a letter, not a version range).
        tag: String,
    },
    /// Delete a tag (refused while a task names `NAME@TAG`).
    Untag {
        /// The plugin name.
        name: String,
        /// The tag.
        tag: String,
    },
    /// Show one plugin version: its status (`compiling`, `ready`, `failed`
    /// and why).
    #[command(disable_version_flag = true)]
    Show {
        /// `NAME@VERSION`, or `NAME` with the version as the next argument.
        plugin: String,
        /// The version, when not given as `NAME@VERSION`.
        #[arg(value_name = "VERSION")]
        plugin_version: Option<String>,
    },
    /// Delete a plugin version (refused while a task names that exact version).
    #[command(disable_version_flag = true)]
    Delete {
        /// `NAME@VERSION`, or `NAME` with the version as the next argument.
        plugin: String,
        /// The version, when not given as `NAME@VERSION`.
        #[arg(value_name = "VERSION")]
        plugin_version: Option<String>,
    },
}

/// `hello@1.0.0`, or `hello` and `1.0.0`: the name and the version.
fn name_and_version(plugin: &str, version: Option<&str>) -> Result<(String, String), Failure> {
    let (name, v) = match (plugin.split_once('@'), version) {
        (Some((n, v)), None) => (n, v),
        (None, Some(v)) => (plugin, v),
        (Some(_), Some(_)) => {
            return Err(Failure::new(
                "usage",
                format!("`{plugin}` names a version already; drop the extra argument"),
            ));
        }
        (None, None) => {
            return Err(Failure::new(
                "usage",
                format!("which version of `{plugin}`? e.g. `ax plugin delete {plugin}@1.0.0`"),
            ));
        }
    };
    if name.is_empty() || v.is_empty() {
        return Err(Failure::new(
            "usage",
            format!("`{plugin}` is not NAME@VERSION"),
        ));
    }
    Ok((name.to_string(), v.to_string()))
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
            tags,
            wait,
            timeout,
        } => {
            let (version, from) = match version {
                Some(v) => (v, VersionFrom::Flag),
                None => {
                    let cwd = std::env::current_dir().unwrap_or_default();
                    let found = super::manifest::find_version(&file, &cwd)
                        .map_err(|e| Failure::new("usage", e))?;
                    let shown = found.file.strip_prefix(&cwd).unwrap_or(&found.file);
                    eprintln!("version {} from {}", found.version, shown.display());
                    let from = VersionFrom::Manifest(shown.to_path_buf());
                    (found.version, from)
                }
            };
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
            let up = upload(&client, &file, &name, &version, &from)?;
            let v = up.record;
            if !args.conn.json {
                let what = if up.created {
                    "uploaded"
                } else {
                    "already uploaded (same bytes)"
                };
                println!(
                    "{what}: {}@{}  sha256:{}  {} bytes  {}",
                    cell(&v["name"]),
                    cell(&v["version"]),
                    short_digest(&v["digest"]),
                    cell(&v["size"]),
                    cell(&v["status"])
                );
            }
            for tag in tags {
                let t = set_tag(&client, &name, &version, &tag)?;
                if args.conn.json {
                    print_json(&t);
                } else {
                    print_tag(&t);
                }
            }
            if !wait {
                if args.conn.json {
                    print_json(&v);
                }
                return done();
            }
            return wait_compiled(&client, &args.conn, v, Duration::from_secs(timeout));
        }
        PluginCommand::Tag { plugin, tag } => {
            let (name, version) = name_and_version(&plugin, None)?;
            let t = set_tag(&client, &name, &version, &tag)?;
            if args.conn.json {
                print_json(&t);
            } else {
                print_tag(&t);
            }
        }
        PluginCommand::Untag { name, tag } => {
            client.call(
                "DELETE",
                &format!("/v1/plugins/{}/tags/{}", enc(&name), enc(&tag)),
                Body::None,
            )?;
            if args.conn.json {
                print_json(&serde_json::json!({ "deleted": { "name": name, "tag": tag } }));
            } else {
                println!("deleted tag: {}@{}", cell(&name.into()), cell(&tag.into()));
            }
        }
        PluginCommand::Show {
            plugin,
            plugin_version,
        } => {
            let (name, version) = name_and_version(&plugin, plugin_version.as_deref())?;
            let v = client.get(&format!("/v1/plugins/{}/{}", enc(&name), enc(&version)))?;
            if args.conn.json {
                print_json(&v);
            } else {
                print_version(&v);
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
                            cell(&p["status"]),
                            cell(&p["created_at"]),
                            tag_list(&p["tags"]),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(
                        &[
                            "NAME", "VERSION", "DIGEST", "SIZE", "STATUS", "CREATED", "TAGS"
                        ],
                        &rows
                    )
                );
            }
        }
        PluginCommand::Delete {
            plugin,
            plugin_version,
        } => {
            let (name, version) = name_and_version(&plugin, plugin_version.as_deref())?;
            client.call(
                "DELETE",
                &format!("/v1/plugins/{}/{}", enc(&name), enc(&version)),
                Body::None,
            )?;
            if args.conn.json {
                print_json(&serde_json::json!({ "deleted": { "name": name, "version": version } }));
            } else {
                println!("deleted: {}@{}", cell(&name.into()), cell(&version.into()));
            }
        }
    }
    done()
}

/// Where a pushed version was named: what to change for a new one.
pub(super) enum VersionFrom {
    /// `--version`.
    Flag,
    /// The project's manifest (`Cargo.toml`, `package.json`, `pyproject.toml`).
    Manifest(PathBuf),
    /// `ax dev --url`: a development version, new on every push.
    Development,
}

/// A version the server holds after [`upload`].
pub(super) struct Uploaded {
    /// The server's record of the version (`name`, `version`, `digest`,
    /// `size`, `status`, …).
    pub(super) record: Value,
    /// Stored by this upload (201), rather than found with the same bytes (200).
    pub(super) created: bool,
}

/// Uploads `file` as `name@version` (`POST /v1/plugins`, with a progress
/// bar). Versions are immutable on the server: the same bytes again are
/// found (not `created`), other bytes are refused with 409 `conflict`,
/// whose message this completes with how to name a new version (`from`).
pub(super) fn upload(
    client: &Client,
    file: &Path,
    name: &str,
    version: &str,
    from: &VersionFrom,
) -> Result<Uploaded, Failure> {
    let bytes = std::fs::read(file)
        .map_err(|e| Failure::new("io", format!("reading {}: {e}", file.display())))?;
    let progress =
        crate::cli::term::UploadProgress::new(&format!("{name}@{version}"), bytes.len() as u64);
    let path = format!(
        "/v1/plugins{}",
        query(&[
            ("name", Some(name.to_owned())),
            ("version", Some(version.to_owned()))
        ])
    );
    let body = Body::Upload {
        content_type: "application/wasm",
        bytes,
        progress,
    };
    match client.post(&path, body) {
        Ok((status, record)) => Ok(Uploaded {
            record,
            created: status == 201,
        }),
        // The upload's one 409: this version holds other bytes.
        Err(mut f) if f.code == "conflict" => {
            let bump = match from {
                VersionFrom::Flag => "pass a new --version".to_owned(),
                VersionFrom::Manifest(manifest) => {
                    format!("bump the version in {} (now {version})", manifest.display())
                }
                VersionFrom::Development => {
                    "`ax dev --url` names a new development version on every push: run it \
                     again"
                        .to_owned()
                }
            };
            f.message = format!("{}; {bump}", f.message);
            Err(f)
        }
        Err(f) => Err(f),
    }
}

/// `PUT /v1/plugins/{name}/tags/{tag}`: the tag's answer.
fn set_tag(
    client: &Client,
    name: &str,
    version: &str,
    tag: &str,
) -> Result<serde_json::Value, Failure> {
    let path = format!("/v1/plugins/{}/tags/{}", enc(name), enc(tag));
    let body = Body::Json(serde_json::json!({ "version": version }));
    client.call("PUT", &path, body).map(|(_, v)| v)
}

/// One line for a tag set or moved.
fn print_tag(t: &serde_json::Value) {
    let from = match t["previous"].as_str() {
        Some(p) if p != t["version"] => format!(" (moved from {})", cell(&p.into())),
        Some(_) => " (unchanged)".to_owned(),
        None => String::new(),
    };
    println!(
        "tag {}@{} -> {}{from}",
        cell(&t["name"]),
        cell(&t["tag"]),
        cell(&t["version"])
    );
}

/// A version's tags, comma-separated (`-` when none).
fn tag_list(tags: &serde_json::Value) -> String {
    let tags: Vec<String> = items(tags).map(cell).collect();
    if tags.is_empty() {
        "-".into()
    } else {
        tags.join(",")
    }
}

/// One version, a field a line.
fn print_version(v: &Value) {
    println!("{}@{}", cell(&v["name"]), cell(&v["version"]));
    println!("  status   {}", cell(&v["status"]));
    if let Some(error) = v["error"].as_str() {
        println!("  error    {}", cell(&error.into()));
    }
    if let Some(tier) = v["tier"].as_str() {
        println!("  tier     {}", cell(&tier.into()));
    }
    println!("  sha256   {}", cell(&v["digest"]));
    println!("  size     {} bytes", cell(&v["size"]));
    println!("  created  {}", cell(&v["created_at"]));
}

/// Polls an uploaded version until its compilation ends: 0 when `ready`, 1
/// when `failed` (the reason on stderr), 124 after `timeout`.
fn wait_compiled(client: &Client, conn: &Conn, v: Value, timeout: Duration) -> Outcome {
    let what = format!("{}@{}", cell(&v["name"]), cell(&v["version"]));
    let started = Instant::now();
    let Some(v) = compiled(client, v, timeout)? else {
        super::report(&Failure::new(
            "timeout",
            format!(
                "{what} is still compiling after {}s (`ax plugin show {what}` to look again)",
                timeout.as_secs()
            ),
        ));
        return Ok(ExitCode::from(super::EXIT_WAIT_TIMED_OUT));
    };
    if conn.json {
        print_json(&v);
    } else if v["status"] == "ready" {
        println!(
            "ready: {what} (compiled in {:.1}s{})",
            started.elapsed().as_secs_f64(),
            tier_note(&v)
        );
    }
    if v["status"] == "failed" {
        super::report(&Failure::new(
            "compile_failed",
            format!("{what} did not compile: {}", cell(&v["error"])),
        ));
        return Ok(ExitCode::from(1));
    }
    done()
}

/// `; on Winch's code …` for a version ready on the baseline tier, else
/// nothing: a large component is ready on Winch's code first
/// (docs/PLUGINS.md, "Winch first, Cranelift behind") and runs slower until
/// Cranelift's replaces it.
pub(super) fn tier_note(v: &Value) -> &'static str {
    if v["tier"] == "baseline" {
        "; on Winch's code until Cranelift's, compiling now, replaces it"
    } else {
        ""
    }
}

/// Polls the uploaded version `v` (the server's record) while it is
/// `compiling`, with a progress bar: its last record (`ready` or `failed`),
/// or none when `timeout` passed first.
pub(super) fn compiled(
    client: &Client,
    mut v: Value,
    timeout: Duration,
) -> Result<Option<Value>, Failure> {
    let what = format!("{}@{}", cell(&v["name"]), cell(&v["version"]));
    let path = format!(
        "/v1/plugins/{}/{}",
        enc(&cell(&v["name"])),
        enc(&cell(&v["version"]))
    );
    let started = Instant::now();
    let progress = (v["status"] == "compiling").then(|| CompileProgress::new(&what));
    while v["status"] == "compiling" {
        if started.elapsed() >= timeout {
            if let Some(p) = &progress {
                p.finish();
            }
            return Ok(None);
        }
        std::thread::sleep(COMPILE_POLL);
        v = client.get(&path)?;
    }
    if let Some(p) = &progress {
        p.finish();
    }
    Ok(Some(v))
}

/// How often `--wait` asks: a compilation takes from a tenth of a second
/// to seconds.
const COMPILE_POLL: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_version_is_named_either_way_and_once() {
        let both = |p, v| name_and_version(p, v).map_err(|f| f.message);
        assert_eq!(
            both("hello@1.0.0", None),
            Ok(("hello".into(), "1.0.0".into()))
        );
        assert_eq!(
            both("hello", Some("1.0.0")),
            Ok(("hello".into(), "1.0.0".into()))
        );
        assert!(both("hello", None).unwrap_err().contains("hello@1.0.0"));
        assert!(both("hello@1.0.0", Some("2.0.0")).is_err());
        assert!(both("@1.0.0", None).is_err());
        assert!(both("hello@", None).is_err());
    }
}
