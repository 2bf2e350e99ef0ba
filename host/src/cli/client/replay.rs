//! `ax run replay RUN --step S [--attempt N] [--plugin FILE]`: fetches an
//! attempt's record (`GET /v1/runs/{id}/steps/{step}/attempts/{n}/record`)
//! and the component it ran (`…/component`, unless `--plugin` names a new
//! build), then re-executes the attempt here, in this process, with the
//! runtime `ax exec` uses ([`crate::cli::exec::replay_locally`]). Clocks,
//! random, KV and HTTP answers, config and secret names come from the
//! record; nothing is sent anywhere.
//!
//! It prints how the replay ended (with what the plugin wrote to stdout and
//! stderr, a traceback included), whether that is what the attempt did, and
//! the first request the record could not answer, if any.
//!
//! Exit codes ([`exit_code`]) answer the question each form asks:
//! - without `--plugin` (reproduce the attempt): 0 the replay ended as
//!   recorded, 1 it did not (or diverged);
//! - with `--plugin FILE` (does the new build work?): 0 the new build's
//!   attempt succeeded without leaving the record, 1 it did not, whatever the
//!   recorded attempt did. Whether it ended differently from the recorded
//!   attempt is the `result` line (`matches` in `--json`), not the exit code:
//!   a fix ends differently from the failure it fixes;
//! - 2 an error (nothing replayed).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::http::{Client, enc};
use super::output::{cell, items};
use super::{Conn, Failure, Outcome};
use crate::cli::term::{Layout, safe};
use crate::model::record::AttemptRecord;
use crate::runtime::ReplayReport;

#[derive(Debug, Args)]
pub(in crate::cli) struct ReplayArgs {
    /// Run id.
    id: String,
    /// The step whose attempt is replayed.
    #[arg(long)]
    step: String,
    /// The attempt number (default: the step's last attempt).
    #[arg(long)]
    attempt: Option<u32>,
    /// Replay against this component (a new build) instead of the one that
    /// ran; the exit code then says whether the new build succeeded.
    #[arg(long, value_name = "FILE")]
    plugin: Option<PathBuf>,
    /// The value a listed secret reads as in the replay (repeatable; records
    /// keep no secret values: without this it reads as `[redacted]`).
    #[arg(long = "secret", value_name = "NAME=VALUE")]
    secrets: Vec<String>,
    /// Where compiled artifacts are cached.
    #[arg(long, env = "AX_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

pub(super) fn replay(conn: &Conn, args: ReplayArgs) -> Outcome {
    let client = Client::new(conn);
    let (id, step) = (enc(&args.id), enc(&args.step));
    let attempt = match args.attempt {
        Some(n) => n,
        None => last_attempt(&client.get(&format!("/v1/runs/{id}"))?, &args.step)?,
    };
    let base = format!("/v1/runs/{id}/steps/{step}/attempts/{attempt}");
    let record: AttemptRecord = serde_json::from_value(client.get(&format!("{base}/record"))?)
        .map_err(|e| {
            Failure::new(
                "bad_record",
                format!("the server's record does not read: {e}"),
            )
        })?;
    let (bytes, against) = match &args.plugin {
        Some(path) => (
            std::fs::read(path).map_err(|e| {
                Failure::new("bad_plugin", format!("reading {}: {e}", path.display()))
            })?,
            path.display().to_string(),
        ),
        None => (
            client.get_bytes(&format!("{base}/component"))?,
            format!("the recorded component {}", short(&record.digest)),
        ),
    };
    let mut secrets = BTreeMap::new();
    for entry in &args.secrets {
        let (name, value) = entry.split_once('=').ok_or_else(|| {
            Failure::new(
                "bad_secret",
                format!("--secret `{entry}`: write NAME=VALUE"),
            )
        })?;
        if !record.secrets.contains_key(name) {
            let listed: Vec<&str> = record.secrets.keys().map(String::as_str).collect();
            return Err(Failure::new(
                "bad_secret",
                format!(
                    "--secret `{name}`: the recorded step lists no such secret (it lists: {})",
                    if listed.is_empty() {
                        "none".to_owned()
                    } else {
                        listed.join(", ")
                    }
                ),
            ));
        }
        secrets.insert(name.to_owned(), value.to_owned());
    }
    let replayed =
        crate::cli::exec::replay_locally(bytes, record.clone(), secrets, args.cache_dir.clone())
            .map_err(|e| Failure::new("replay", format!("{e:#}")))?;
    if conn.json {
        super::output::print_json(&serde_json::to_value(&replayed).unwrap_or(Value::Null));
    } else {
        print_replay(&args, attempt, &against, &record, &replayed);
    }
    Ok(ExitCode::from(exit_code(&replayed, args.plugin.is_some())))
}

/// The exit code of a finished replay (see the module docs): a new build
/// passes when its attempt succeeded without diverging from the record; a
/// replay of the recorded component passes when it ended as recorded.
fn exit_code(replayed: &ReplayReport, new_build: bool) -> u8 {
    let passed = if new_build {
        replayed.report.outcome == crate::model::Outcome::Succeeded && replayed.divergence.is_none()
    } else {
        replayed.matches
    };
    if passed { 0 } else { 1 }
}

/// The number of the step's last attempt in a run.
fn last_attempt(run: &Value, step: &str) -> Result<u32, Failure> {
    let found = items(&run["steps"])
        .find(|s| s["name"] == step)
        .ok_or_else(|| {
            Failure::new(
                "not_found",
                format!("run {} has no step `{step}`", cell(&run["id"])),
            )
        })?;
    items(&found["attempts"])
        .filter_map(|a| a["number"].as_u64())
        .max()
        .map(|n| n as u32)
        .ok_or_else(|| Failure::new("not_found", format!("step `{step}` has no attempt yet")))
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

fn print_replay(
    args: &ReplayArgs,
    attempt: u32,
    against: &str,
    record: &AttemptRecord,
    replayed: &ReplayReport,
) {
    let line = |v: &Value| cell(v);
    println!(
        "replayed run {} step {} attempt {attempt} against {}",
        line(&Value::from(args.id.as_str())),
        line(&Value::from(args.step.as_str())),
        line(&Value::from(against))
    );
    let r = &replayed.report;
    println!("outcome   {} (recorded: {})", r.outcome, record.outcome);
    if let Some(output) = &r.output {
        println!("output    {}", line(&Value::from(output.to_string())));
    }
    if let Some(error) = &r.error {
        println!("error     {}", line(&Value::from(error.as_str())));
    }
    if replayed.matches {
        println!("result    the same as the recorded attempt");
    } else {
        println!("result    different from the recorded attempt");
        if let Some(output) = &record.output {
            println!(
                "recorded  output {}",
                line(&Value::from(output.to_string()))
            );
        }
        if let Some(error) = &record.error {
            println!("recorded  error {}", line(&Value::from(error.as_str())));
        }
    }
    if let Some(why) = &replayed.divergence {
        println!("diverged  {}", line(&Value::from(why.as_str())));
    }
    if replayed.calls_left > 0 {
        println!(
            "unmade    {} recorded call(s) the replay did not make",
            replayed.calls_left
        );
    }
    if replayed.truncated {
        println!("note      the record was truncated at its size cap");
    }
    if args.plugin.is_some() {
        let verdict = if exit_code(replayed, true) == 0 {
            "passed: the new build succeeded (exit 0)"
        } else {
            "failed: the new build did not succeed (exit 1)"
        };
        println!("verdict   {verdict}");
    }
    // What the plugin printed: a Python traceback or a Rust panic is here.
    for (name, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        if !text.is_empty() {
            println!("--- {name}");
            print!("{}", safe(text, Layout::Block));
            if !text.ends_with('\n') {
                println!();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttemptReport, Outcome as Ended};

    fn replayed(outcome: Ended, matches: bool, divergence: Option<&str>) -> ReplayReport {
        ReplayReport {
            report: AttemptReport {
                outcome,
                output: None,
                error: None,
                error_kind: None,
                fuel_consumed: 0,
                memory_peak_bytes: 0,
                duration_ms: 0.0,
                stdout: String::new(),
                stderr: String::new(),
                logs: Vec::new(),
                progress: None,
            },
            divergence: divergence.map(str::to_owned),
            calls_left: 0,
            matches,
            truncated: false,
        }
    }

    #[test]
    fn a_new_build_passes_when_it_succeeds_and_a_reproduction_when_it_matches() {
        // The fix: the recorded attempt failed, the new build succeeds.
        assert_eq!(exit_code(&replayed(Ended::Succeeded, false, None), true), 0);
        assert_eq!(exit_code(&replayed(Ended::Failed, true, None), true), 1);
        assert_eq!(
            exit_code(&replayed(Ended::Succeeded, false, Some("call 1")), true),
            1
        );
        // A reproduction: ending as recorded passes, a failure included.
        assert_eq!(exit_code(&replayed(Ended::Failed, true, None), false), 0);
        assert_eq!(
            exit_code(&replayed(Ended::Succeeded, false, None), false),
            1
        );
    }
}
