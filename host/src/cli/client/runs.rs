//! `ax runs`, `ax run show|cancel|retry|rerun`, `ax logs RUN`, `ax events
//! RUN`: listing runs, one run in detail, run control, and what a run's
//! attempts printed and went through.

use clap::{Args, Subcommand};
use serde_json::Value;

use super::http::{Body, Client, enc, query};
use super::output::{cell, elapsed, human_ms, items, print_json, table};
use super::{Conn, Outcome, done};
use crate::cli::term::{Layout, safe};

#[derive(Debug, Args)]
pub(in crate::cli) struct RunsArgs {
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
pub(in crate::cli) struct RunArgs {
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
    /// Re-execute a recorded attempt here, from its record (`record:` on the
    /// task or step), optionally against a new build (`--plugin FILE`).
    ///
    /// Exit status: without `--plugin`, 0 when the replay ended as recorded
    /// (the attempt is reproduced), 1 when it did not; with `--plugin`, 0 when
    /// the new build's attempt succeeded without leaving the record, 1 when it
    /// did not (the `result` line says separately whether it ended as the
    /// recorded attempt did); 2 on an error.
    Replay(super::replay::ReplayArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct RunIdArgs {
    #[command(flatten)]
    conn: Conn,
    /// Run id.
    run: String,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct LogsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Run id.
    run: String,
    /// Follow a running run: print each attempt's logs as it ends, until
    /// the run ends (with --json: one attempt's JSON per line).
    #[arg(short = 'f', long)]
    follow: bool,
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

pub(super) fn runs(args: RunsArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let path = format!(
        "/v1/runs{}",
        query(&[
            ("task", args.task.clone()),
            ("status", args.status),
            ("limit", Some(args.limit.to_string())),
            ("cursor", args.cursor)
        ])
    );
    let v = client.get(&path)?;
    if let Some(task) = &args.task
        && items(&v["runs"]).len() == 0
    {
        known_task(&client, task)?;
    }
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

/// No runs of `task`: an error when no such task exists either (runs of a
/// deleted task stay, so only an empty listing asks).
fn known_task(client: &Client, task: &str) -> Result<(), super::Failure> {
    match client.get(&format!("/v1/tasks/{}", enc(task))) {
        Err(f) if f.code == "not_found" => Err(super::Failure::new(
            "not_found",
            format!("no task `{task}` (`ax task list` shows the tasks)"),
        )),
        _ => Ok(()),
    }
}

/// A run for people: its fields, a table of steps, then outputs and errors.
pub(super) fn print_run(r: &Value) {
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
            cell(&s["plugin"]),
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
                "PLUGIN",
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
    let attempt_rows: Vec<Vec<String>> = steps
        .iter()
        .flat_map(|s| items(&s["attempts"]).map(move |a| (s, a)))
        .map(|(s, a)| {
            vec![
                cell(&s["name"]),
                cell(&a["number"]),
                if a["outcome"].is_null() {
                    "running".into()
                } else {
                    cell(&a["outcome"])
                },
                cell(&a["started_at"]),
                a["duration_ms"]
                    .as_f64()
                    .filter(|_| !a["outcome"].is_null())
                    .map_or_else(|| "-".into(), human_ms),
                cell(&a["plugin_version"]),
                cell(&a["error"]),
            ]
        })
        .collect();
    if !attempt_rows.is_empty() {
        println!();
        print!(
            "{}",
            table(
                &[
                    "STEP", "ATTEMPT", "OUTCOME", "STARTED", "TIME", "VERSION", "ERROR"
                ],
                &attempt_rows
            )
        );
    }
    for s in steps {
        if !s["output"].is_null() {
            // As JSON (a string output keeps its quotes), made terminal-safe.
            let output = safe(&s["output"].to_string(), Layout::Line).into_owned();
            println!("{} output: {output}", cell(&s["name"]));
        }
        if !s["error"].is_null() {
            // A skipped step's "error" is why it was skipped (its condition).
            let label = if s["status"] == "skipped" {
                "skipped"
            } else {
                "error"
            };
            println!("{} {label}: {}", cell(&s["name"]), cell(&s["error"]));
        }
    }
}

pub(super) fn run_command(args: RunArgs) -> Outcome {
    if let RunCommand::Replay(replay) = args.command {
        return super::replay::replay(&args.conn, replay);
    }
    let client = Client::new(&args.conn);
    let run = match &args.command {
        RunCommand::Replay(_) => unreachable!("replays returned above"),
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
            RunCommand::Replay(_) => {}
            RunCommand::Cancel { .. } | RunCommand::Retry { .. } | RunCommand::Rerun { .. } => {
                println!("run {}: {}", cell(&run["id"]), cell(&run["status"]))
            }
        }
    }
    done()
}

/// The attempts of a logs answer in step order (the run's), then by number.
fn in_step_order(logs: &Value, run: &Value) -> Vec<Value> {
    let position = |name: &Value| {
        items(&run["steps"])
            .position(|s| s["name"] == *name)
            .unwrap_or(usize::MAX)
    };
    let mut attempts: Vec<Value> = items(&logs["attempts"]).cloned().collect();
    attempts.sort_by_key(|a| (position(&a["step"]), a["attempt"].as_u64().unwrap_or(0)));
    attempts
}

/// A logs answer for people, in `run`'s step order (`ax logs`).
pub(super) fn print_logs(logs: &Value, run: &Value) {
    in_step_order(logs, run).iter().for_each(print_attempt_logs);
}

/// One attempt's logs for people: a header, log lines, stdout and stderr.
fn print_attempt_logs(a: &Value) {
    println!(
        "== step {} attempt {} ==",
        cell(&a["step"]),
        cell(&a["attempt"])
    );
    for l in items(&a["logs"]) {
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

/// How often `ax logs -f` asks again.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

pub(super) fn logs(args: LogsArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let run_path = format!("/v1/runs/{}", enc(&args.run));
    let logs_path = format!("/v1/runs/{}/logs", enc(&args.run));
    if !args.follow {
        let run = client.get(&run_path)?;
        let v = client.get(&logs_path)?;
        if args.conn.json {
            let attempts = in_step_order(&v, &run);
            print_json(&serde_json::json!({ "attempts": attempts }));
        } else {
            print_logs(&v, &run);
        }
        return done();
    }
    // An attempt's logs are stored once, when it ends: print each once.
    let mut printed = std::collections::HashSet::new();
    loop {
        // The run first: logs read after it ended are its last ones.
        let run = client.get(&run_path)?;
        let ended = matches!(
            run["status"].as_str(),
            Some("succeeded" | "failed" | "cancelled")
        );
        let v = client.get(&logs_path)?;
        for a in in_step_order(&v, &run) {
            if !printed.insert((cell(&a["step"]), cell(&a["attempt"]))) {
                continue;
            }
            if args.conn.json {
                println!("{a}");
            } else {
                print_attempt_logs(&a);
            }
        }
        if ended {
            if !args.conn.json {
                println!("== run {} {} ==", cell(&run["id"]), cell(&run["status"]));
            }
            return done();
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

pub(super) fn events(args: RunIdArgs) -> Outcome {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn logs_come_in_the_runs_step_order_then_by_attempt() {
        let run = json!({"steps": [{"name": "extract"}, {"name": "pack"}, {"name": "notify"}]});
        let logs = json!({"attempts": [
            {"step": "notify", "attempt": 1},
            {"step": "extract", "attempt": 2},
            {"step": "pack", "attempt": 1},
            {"step": "extract", "attempt": 1},
        ]});
        let order: Vec<String> = in_step_order(&logs, &run)
            .iter()
            .map(|a| format!("{}#{}", cell(&a["step"]), cell(&a["attempt"])))
            .collect();
        assert_eq!(order, ["extract#1", "extract#2", "pack#1", "notify#1"]);
    }
}
