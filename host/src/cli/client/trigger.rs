//! `ax trigger TASK [--wait]`: start a run now and, with `--wait`, poll it
//! to its end behind a progress bar; the exit code says whether it
//! succeeded (0), did not (1), or was still going at `--timeout` (124).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value;

use super::http::{Body, Client, enc};
use super::output::{cell, items, print_json};
use super::runs::print_run;
use super::{Conn, Failure, Outcome, done};

#[derive(Debug, Args)]
pub(in crate::cli) struct TriggerArgs {
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
    /// Wait for the run to end; exit 0 if it succeeded, 1 if it failed or
    /// was cancelled, 124 if --timeout passed first, 2 on an error.
    #[arg(long)]
    wait: bool,
    /// With --wait: stop waiting after this long and exit 124 (the run goes on).
    #[arg(long, default_value = "60s", value_parser = crate::cli::parse_duration, requires = "wait")]
    timeout: Duration,
}

pub(super) fn trigger(args: TriggerArgs) -> Outcome {
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
    let run = match wait_for(&client, &id, run, args.timeout) {
        Err(f) if f.code == "timeout" => {
            super::report(&f);
            return Ok(ExitCode::from(super::EXIT_WAIT_TIMED_OUT));
        }
        waited => waited?,
    };
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
    let progress = crate::cli::term::RunProgress::new(id, steps_done(&run).1);
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
                    "run {id} is still {} after {}; it goes on (`ax run show {id}`)",
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}
