//! `ax trigger TASK [-p NAME=VALUE]… [--wait]`: start a run now (each `-p`
//! a value of the task's `params:`, typed by its declaration) and, with `--wait`, poll it
//! to its end behind a progress bar; the exit code says whether it
//! succeeded (0), did not (1), or was still going at `--timeout` (124).
//! The answer's `warnings` (input fields the task never reads) are printed
//! on stderr as `warning: …`, the run being created all the same.
//! `ax trigger TASK --from-file runs.jsonl`: one run per line, sent in
//! batches of [`BATCH`] (`POST /v1/tasks/{name}/runs:batch`), one result
//! printed per line.

use std::path::{Path, PathBuf};
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
    /// Trigger one run per line of this JSON Lines file (`-`: stdin), each
    /// `{"params": …, "input": …, "idempotency_key": …, "priority": …}` (all
    /// optional), in batches of 1000; prints each line's run or error.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["input", "param", "idempotency_key", "priority", "wait"])]
    from_file: Option<PathBuf>,
    /// A value of one of the task's `params:` (repeatable), read as the
    /// param's type (`-p limit=5` is the integer 5, `-p day=2026-12-01` text);
    /// over `--input`'s and the defaults.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    param: Vec<String>,
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

/// Runs one bulk request holds (the server's bound).
const BATCH: usize = crate::service::MAX_BATCH_RUNS;

pub(super) fn trigger(args: TriggerArgs) -> Outcome {
    let client = Client::new(&args.conn);
    if let Some(file) = &args.from_file {
        return trigger_from_file(&client, &args.task, file, args.conn.json);
    }
    let mut body = serde_json::Map::new();
    if let Some(input) = &args.input {
        let value: Value = serde_json::from_str(input)
            .map_err(|e| Failure::new("usage", format!("--input is not JSON: {e}")))?;
        body.insert("input".into(), value);
    }
    if !args.param.is_empty() {
        let task = client.get(&format!("/v1/tasks/{}", enc(&args.task)))?;
        let params = typed_params(&task["spec"]["params"], &args.param)
            .map_err(|m| Failure::new("usage", m))?;
        body.insert("params".into(), Value::Object(params));
    }
    if let Some(key) = &args.idempotency_key {
        body.insert("idempotency_key".into(), key.clone().into());
    }
    if let Some(p) = args.priority {
        body.insert("priority".into(), p.into());
    }
    let (status, run) = start(&client, &args.task, body)?;
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
    let run = match wait_for(&client, &id, run, args.timeout, &|| false) {
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

/// Starts a run of `task` (`POST /v1/tasks/{task}/runs` with `body`):
/// the answer's status and run. Its warnings (input fields the task never
/// reads) are printed on stderr, so `--json` output stays the server's
/// answer alone.
pub(super) fn start(
    client: &Client,
    task: &str,
    body: serde_json::Map<String, Value>,
) -> Result<(u16, Value), Failure> {
    let (status, run) = client.post(
        &format!("/v1/tasks/{}/runs", enc(task)),
        Body::Json(Value::Object(body)),
    )?;
    for w in items(&run["warnings"]) {
        eprintln!("warning: {}", cell(&w["message"]));
    }
    Ok((status, run))
}

/// `-p NAME=VALUE` pairs as the JSON values of the task's declared params
/// (`declared`: its `spec.params`): text for `string` and `enum`, parsed
/// for `integer`, `number` and `boolean`. A name it does not declare is
/// sent as text, for the server to refuse with the task's param names.
pub(super) fn typed_params(
    declared: &Value,
    pairs: &[String],
) -> Result<serde_json::Map<String, Value>, String> {
    let mut out = serde_json::Map::new();
    for pair in pairs {
        let Some((name, text)) = pair.split_once('=') else {
            return Err(format!("-p {pair}: write NAME=VALUE"));
        };
        let kind = items(declared)
            .find(|p| p["name"] == name)
            .and_then(|p| p["type"].as_str())
            .unwrap_or("string");
        let bad = |what: &str| format!("-p {name}={text}: param `{name}` is {what}");
        let value = match kind {
            "integer" => text
                .trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| bad("an integer (like 42)"))?,
            "number" => text
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| bad("a number (like 0.5)"))?,
            "boolean" => match text.trim() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(bad("a boolean (true or false)")),
            },
            _ => Value::String(text.to_owned()),
        };
        if out.insert(name.to_owned(), value).is_some() {
            return Err(format!("-p {name}: given twice"));
        }
    }
    Ok(out)
}

/// The runs of a JSON Lines file: (line number from 1, object), blank lines
/// skipped. Any line that is not a JSON object fails the whole file, before
/// anything is sent.
fn read_runs(file: &Path) -> Result<Vec<(usize, Value)>, Failure> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| Failure::new("io", format!("reading stdin: {e}")))?
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| Failure::new("io", format!("reading {}: {e}", file.display())))?
    };
    parse_runs(&text).map_err(|m| Failure::new("usage", format!("{}: {m}", file.display())))
}

fn parse_runs(text: &str) -> Result<Vec<(usize, Value)>, String> {
    let mut runs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: not JSON: {e}", i + 1))?;
        if !value.is_object() {
            return Err(format!(
                "line {}: a run is a JSON object ({{\"params\": …, \"input\": …, \"idempotency_key\": …, \"priority\": …}})",
                i + 1
            ));
        }
        runs.push((i + 1, value));
    }
    if runs.is_empty() {
        return Err("no runs in the file (one JSON object per line)".into());
    }
    Ok(runs)
}

/// One line's result as printed: `line N: run ID created: queued`.
fn result_line(line: usize, item: &Value) -> String {
    let error = &item["error"];
    if !error.is_null() {
        return format!(
            "line {line}: error {}: {}",
            cell(&error["code"]),
            cell(&error["message"])
        );
    }
    let what = if item["created"] == true {
        "created"
    } else {
        "already exists (same idempotency key)"
    };
    format!(
        "line {line}: run {} {what}: {}",
        cell(&item["id"]),
        cell(&item["status"])
    )
}

fn trigger_from_file(client: &Client, task: &str, file: &Path, json: bool) -> Outcome {
    let runs = read_runs(file)?;
    let path = format!("/v1/tasks/{}/runs:batch", enc(task));
    let mut results: Vec<Value> = Vec::with_capacity(runs.len());
    let (mut created, mut existing, mut failed) = (0u64, 0u64, 0u64);
    let print = |results: &[Value], created, existing, failed| {
        if json {
            print_json(&serde_json::json!({
                "results": results, "created": created, "existing": existing, "failed": failed,
            }));
        }
    };
    for chunk in runs.chunks(BATCH) {
        let lines: Vec<usize> = chunk.iter().map(|(line, _)| *line).collect();
        let body = serde_json::json!({ "runs": chunk.iter().map(|(_, v)| v).collect::<Vec<_>>() });
        let answer = match client.post(&path, Body::Json(body)) {
            Ok((_, answer)) => answer,
            Err(f) => {
                // A refused batch: every bad line with its error; nothing of
                // this batch or after it was created.
                for item in items(&f.details["items"]) {
                    let line = item["index"].as_u64().and_then(|i| lines.get(i as usize));
                    if let Some(&line) = line {
                        let mut result =
                            serde_json::json!({ "line": line, "error": item["error"] });
                        if !json {
                            println!("{}", result_line(line, &result));
                        }
                        result["index"] = item["index"].clone();
                        results.push(result);
                    }
                }
                print(&results, created, existing, failed);
                let first = lines.first().copied().unwrap_or_default();
                let last = lines.last().copied().unwrap_or_default();
                return Err(Failure::new(
                    &f.code,
                    format!(
                        "lines {first}-{last} were refused, none of them triggered: {}{}",
                        f.message,
                        if last < runs.last().map_or(0, |r| r.0) {
                            "; the lines after them were not sent"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        };
        for item in items(&answer["runs"]) {
            let Some(&line) = item["index"].as_u64().and_then(|i| lines.get(i as usize)) else {
                continue;
            };
            if !item["error"].is_null() {
                failed += 1;
            } else if item["created"] == true {
                created += 1;
            } else {
                existing += 1;
            }
            if !json {
                println!("{}", result_line(line, item));
            }
            let mut result = item.clone();
            result["line"] = line.into();
            results.push(result);
        }
    }
    print(&results, created, existing, failed);
    if failed > 0 {
        return Err(Failure::new(
            "partial",
            format!(
                "{failed} of {} runs were refused (see their lines); {created} created, {existing} already existed",
                runs.len()
            ),
        ));
    }
    if !json {
        println!("{created} runs created, {existing} already existed");
    }
    done()
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
/// current state) on a terminal's stderr. `timeout` passed first is a
/// `timeout` failure, and so is `stopped` answering true (Ctrl-C in `ax
/// dev`).
pub(super) fn wait_for(
    client: &Client,
    id: &str,
    mut run: Value,
    timeout: Duration,
    stopped: &dyn Fn() -> bool,
) -> Result<Value, Failure> {
    let progress = crate::cli::term::RunProgress::new(id, steps_done(&run).1);
    let started = Instant::now();
    let mut delay = Duration::from_millis(50);
    while !is_terminal(&run["status"]) {
        let (done, total) = steps_done(&run);
        progress.update(done, total, &run_state(&run));
        if started.elapsed() >= timeout || stopped() {
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
    fn a_runs_file_is_read_line_by_line_and_refused_whole_on_a_bad_line() {
        let runs = parse_runs("{\"input\": {\"n\": 1}}\n\n{\"idempotency_key\": \"k\"}\n").unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].0, 1);
        assert_eq!(runs[1], (3, json!({"idempotency_key": "k"})));
        assert_eq!(
            parse_runs("{}\n[1]").unwrap_err().split(':').next(),
            Some("line 2")
        );
        assert!(
            parse_runs("{}\n{oops")
                .unwrap_err()
                .starts_with("line 2: not JSON")
        );
        assert!(parse_runs("\n  \n").unwrap_err().starts_with("no runs"));
    }

    #[test]
    fn params_are_typed_by_their_declaration() {
        let declared = json!([
            {"name": "day", "type": "string"},
            {"name": "n", "type": "integer"},
            {"name": "x", "type": "number"},
            {"name": "dry", "type": "boolean"},
            {"name": "mode", "type": "enum", "values": ["a", "b"]},
        ]);
        let pairs = [
            "day=2026-12-01",
            "n=42",
            "x=0.5",
            "dry=true",
            "mode=a",
            "other=5",
            "eq=a=b",
        ]
        .map(String::from);
        let got = typed_params(&declared, &pairs).unwrap();
        assert_eq!(
            Value::Object(got),
            json!({"day": "2026-12-01", "n": 42, "x": 0.5, "dry": true, "mode": "a", "other": "5", "eq": "a=b"})
        );
        let err = |pair: &str| typed_params(&declared, &[pair.to_owned()]).unwrap_err();
        assert_eq!(err("n=ten"), "-p n=ten: param `n` is an integer (like 42)");
        assert_eq!(err("x=fast"), "-p x=fast: param `x` is a number (like 0.5)");
        assert_eq!(
            err("dry=yes"),
            "-p dry=yes: param `dry` is a boolean (true or false)"
        );
        assert_eq!(err("day"), "-p day: write NAME=VALUE");
        let twice = typed_params(&declared, &["n=1".to_owned(), "n=2".to_owned()]).unwrap_err();
        assert_eq!(twice, "-p n: given twice");
    }

    #[test]
    fn each_line_prints_its_run_or_its_error() {
        let ok = json!({"index": 0, "id": "r1", "created": true, "status": "queued"});
        assert_eq!(result_line(4, &ok), "line 4: run r1 created: queued");
        let again = json!({"index": 1, "id": "r1", "created": false, "status": "queued"});
        assert!(result_line(5, &again).contains("already exists"));
        let bad = json!({"index": 2, "error": {"code": "queue_full", "message": "full"}});
        assert_eq!(result_line(6, &bad), "line 6: error queue_full: full");
    }

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
