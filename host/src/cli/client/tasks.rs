//! `ax task apply|validate|list|show|pause|resume|delete|next`: a task's
//! definition and its trigger (checks before saving: [`super::task_check`]).
//! `ax task apply -f DIR/` applies a directory's definitions in one request,
//! all or nothing. `ax task run -f FILE --local` runs one in this process,
//! with no server ([`crate::cli::local`]), and prints it here.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::http::{Body, Client, all_pages, enc};
use super::output::{cell, items, print_json, table};
use super::{Conn, Failure, Outcome, done};
use crate::cli::term::{Layout, safe};

#[derive(Debug, Args)]
pub(in crate::cli) struct TaskArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: TaskCommand,
}

impl TaskArgs {
    /// Whether this is `ax task run --local`.
    pub(super) fn runs_locally(&self) -> bool {
        matches!(&self.command, TaskCommand::Run(run) if run.local)
    }
}

#[derive(Debug, Subcommand)]
enum TaskCommand {
    /// Create or replace a task from a YAML or JSON file (`-` reads stdin),
    /// or every `*.yaml`, `*.yml` and `*.json` file of a directory in one
    /// request, all or nothing.
    Apply {
        /// The definition file, or a directory of them.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Check the definition and show a diff against the stored one; store nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Run a task once, now, and print its steps, outputs, errors and logs
    /// (as `ax run show` and `ax logs`); exit 0 when the run succeeded, 1
    /// when it did not, 2 on an error.
    ///
    /// With `--local` (the only mode for now) the whole DAG runs in this
    /// process, without a server: the plugins the task names are read from
    /// local files, the plugin of the project the task file is in from the
    /// `build.output` of its `ax.yaml` (`ax build` writes it), any other
    /// from `--plugin NAME=PATH.wasm`. Conditions, trigger rules, retries,
    /// params and templates behave as on a server (it is the server's
    /// scheduler). Large components are compiled with Winch, the fast tier,
    /// and cached as `ax exec` does.
    #[command(
        after_help = "Example:\n  ax build && ax task run -f task.yaml --local -p name=you\n  ax task run -f pipeline.yaml --local --plugin extract=extract.wasm --input '{\"day\": \"2026-12-01\"}'"
    )]
    Run(RunArgs),
    /// Check a definition (YAML or JSON, `-` reads stdin) without saving it.
    Validate {
        /// The definition file.
        file: PathBuf,
    },
    /// List tasks.
    List,
    /// Show one task and its definition.
    Show {
        /// Task name.
        name: String,
    },
    /// Pause a task's trigger.
    Pause {
        /// Task name.
        name: String,
    },
    /// Resume a task's trigger.
    Resume {
        /// Task name.
        name: String,
    },
    /// Delete a task (its runs stay).
    Delete {
        /// Task name.
        name: String,
    },
    /// The next fire instants of a task.
    Next {
        /// Task name.
        name: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 5)]
        count: usize,
    },
}

/// `ax task run`'s flags.
#[derive(Debug, Args)]
struct RunArgs {
    /// The definition file (YAML or JSON, `-` reads stdin).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Run in this process against local plugin files, without a server.
    #[arg(long)]
    local: bool,
    #[command(flatten)]
    with: LocalFlags,
}

/// What a local run is given: `ax task run --local`'s flags, and `ax dev`'s.
#[derive(Debug, Args)]
pub(in crate::cli) struct LocalFlags {
    /// The component of plugin NAME (repeatable), for every plugin the task
    /// names but the project's own.
    #[arg(long = "plugin", value_name = "NAME=PATH")]
    plugins: Vec<String>,
    /// A value of one of the task's `params:` (repeatable), read as the
    /// param's type; over `--input`'s and the defaults.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    param: Vec<String>,
    /// Trigger input (JSON), available to steps as `${input.*}`.
    #[arg(long)]
    input: Option<String>,
    /// Where compiled artifacts are cached (`ax exec`'s cache by default).
    #[arg(long, env = "AX_CACHE_DIR")]
    pub(in crate::cli) cache_dir: Option<PathBuf>,
    /// Compile every component with Cranelift (as `ax exec --optimized`).
    #[arg(long)]
    pub(in crate::cli) optimized: bool,
}

impl LocalFlags {
    /// The run of the definition `text`, read from `file`, these flags ask for.
    pub(in crate::cli) fn local_run(
        &self,
        file: &Path,
        text: String,
    ) -> Result<crate::cli::local::LocalRun, Failure> {
        let spec = parse_definition(file, &text)?;
        let mut plugins = std::collections::BTreeMap::new();
        for entry in &self.plugins {
            let (name, path) = entry.split_once('=').ok_or_else(|| {
                Failure::new("usage", format!("--plugin {entry}: write NAME=PATH.wasm"))
            })?;
            plugins.insert(name.to_owned(), PathBuf::from(path));
        }
        let input = match &self.input {
            Some(text) => Some(
                serde_json::from_str(text)
                    .map_err(|e| Failure::new("usage", format!("--input is not JSON: {e}")))?,
            ),
            None => None,
        };
        let params = if self.param.is_empty() {
            None
        } else {
            let declared = serde_json::to_value(&spec.params)
                .map_err(|e| Failure::new("invalid", e.to_string()))?;
            Some(
                super::trigger::typed_params(&declared, &self.param)
                    .map_err(|m| Failure::new("usage", m))?,
            )
        };
        Ok(crate::cli::local::LocalRun {
            file: file.to_path_buf(),
            text,
            spec,
            plugins,
            input,
            params,
            cache_dir: self.cache_dir.clone(),
            optimized: self.optimized,
        })
    }
}

/// Prints a finished local run as `ax logs` then `ax run show` print one
/// (`json`: one object with the run and its attempts' logs); its exit code:
/// 0 when it succeeded, else 1.
pub(in crate::cli) fn print_local(
    finished: &crate::cli::local::Finished,
    json: bool,
) -> std::process::ExitCode {
    print_finished(&finished.run, &finished.logs, json);
    if finished.succeeded {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}

/// Prints an ended run and its logs (the API's answers) as `ax logs` then
/// `ax run show` print them, or with `json` as one object with the run and
/// its attempts' logs.
pub(super) fn print_finished(run: &Value, logs: &Value, json: bool) {
    if json {
        print_json(&json!({ "run": run, "logs": logs["attempts"] }));
    } else {
        super::runs::print_logs(logs, run);
        println!();
        super::runs::print_run(run);
    }
}

/// `ax task run --local`: the run made by [`crate::cli::local`], printed
/// as `ax run show` and `ax logs` print one.
fn run_local(args: RunArgs, json: bool) -> Outcome {
    if !args.local {
        return Err(Failure::new(
            "usage",
            "`ax task run` runs a task in this process and needs --local; on a server, \
             `ax task apply -f FILE` then `ax trigger NAME --wait`",
        ));
    }
    let text = read_definition(&args.file)?;
    let what = args.with.local_run(&args.file, text)?;
    let finished = crate::cli::local::run_blocking(what)
        .map_err(|e| Failure::new(e.code(), format!("{e:#}")))?;
    Ok(print_local(&finished, json))
}

fn read_definition(file: &Path) -> Result<String, Failure> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::new("io", format!("reading stdin: {e}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(file)
        .map_err(|e| Failure::new("io", format!("reading {}: {e}", file.display())))
}

/// The task definition `text`, read from `file`, parsed by the server's
/// own parser; an error names the file and the field.
fn parse_definition(file: &Path, text: &str) -> Result<crate::task::TaskSpec, Failure> {
    crate::task::parse(text).map_err(|e| {
        let at = if e.path.is_empty() {
            String::new()
        } else {
            format!("{}: ", e.path)
        };
        Failure::new("invalid", format!("{}: {at}{}", file.display(), e.message))
    })
}

/// Definitions one bulk apply holds (the server's bound).
const MAX_FILES: usize = crate::service::MAX_BATCH_TASKS;

/// The definition files of a directory (`*.yaml`, `*.yml`, `*.json`, not
/// its subdirectories), by name.
fn definition_files(dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Failure::new("io", format!("reading {}: {e}", dir.display())))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| Failure::new("io", format!("reading {}: {e}", dir.display())))?
            .path();
        let wanted = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if wanted && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `ax task apply -f DIR/`: every definition of the directory in one
/// request (`POST /v1/tasks:apply`), all or nothing; a refusal lists each
/// bad file's errors.
fn apply_dir(client: &Client, dir: &Path, json: bool) -> Outcome {
    let files = definition_files(dir)?;
    if files.is_empty() {
        return Err(Failure::new(
            "usage",
            format!("{} holds no *.yaml, *.yml or *.json file", dir.display()),
        ));
    }
    // All or nothing holds for one request: more files would need several.
    if files.len() > MAX_FILES {
        return Err(Failure::new(
            "usage",
            format!(
                "{} holds {} definitions; one apply takes at most {MAX_FILES}: split the directory",
                dir.display(),
                files.len()
            ),
        ));
    }
    let mut tasks = Vec::with_capacity(files.len());
    for path in &files {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        tasks.push(json!({ "file": name, "source": read_definition(path)? }));
    }
    let answer = match client.post("/v1/tasks:apply", Body::Json(json!({ "tasks": tasks }))) {
        Ok((_, answer)) => answer,
        Err(f) => {
            let bad: Vec<&Value> = items(&f.details["items"]).collect();
            if json && !bad.is_empty() {
                print_json(&f.details);
            }
            if !json {
                for item in &bad {
                    println!(
                        "{}: error {}: {}",
                        cell(&item["file"]),
                        cell(&item["error"]["code"]),
                        cell(&item["error"]["message"])
                    );
                }
            }
            return Err(Failure::new(&f.code, f.message));
        }
    };
    if json {
        print_json(&answer);
    } else {
        for item in items(&answer["tasks"]) {
            let t = &item["task"];
            println!(
                "{}: task {} {} (version {}); next fire: {}",
                cell(&item["file"]),
                cell(&t["name"]),
                if item["created"] == true {
                    "created"
                } else {
                    "replaced"
                },
                cell(&t["version"]),
                cell(&t["next_fire"])
            );
        }
        println!(
            "{} tasks applied: {} created, {} replaced",
            files.len(),
            cell(&answer["created"]),
            cell(&answer["replaced"])
        );
    }
    done()
}

/// A definition saved by [`apply_file`].
pub(super) struct Applied {
    /// Created (201), else replaced.
    pub(super) created: bool,
    /// The server's task.
    pub(super) task: Value,
    /// The definition as the server's parser read it.
    pub(super) spec: crate::task::TaskSpec,
}

/// `ax task apply -f FILE`: the definition of `file` saved under the name
/// it gives (`PUT /v1/tasks/{name}`).
pub(super) fn apply_file(client: &Client, file: &Path) -> Result<Applied, Failure> {
    let text = read_definition(file)?;
    apply_text(client, file, text)
}

/// The definition `text`, read from `file` (named in errors), saved under
/// the name it gives (`PUT /v1/tasks/{name}`).
pub(super) fn apply_text(client: &Client, file: &Path, text: String) -> Result<Applied, Failure> {
    // The URL names the task: read the name with the server's own parser.
    let spec = parse_definition(file, &text)?;
    let content_type = if text.trim_start().starts_with('{') {
        "application/json"
    } else {
        "application/yaml"
    };
    let (status, task) = client.call(
        "PUT",
        &format!("/v1/tasks/{}", enc(&spec.name)),
        Body::Raw {
            content_type,
            bytes: text.into_bytes(),
        },
    )?;
    Ok(Applied {
        created: status == 201,
        task,
        spec,
    })
}

fn task_row(t: &Value) -> Vec<String> {
    vec![
        cell(&t["name"]),
        cell(&t["version"]),
        if t["paused"].as_bool().unwrap_or(false) {
            "yes".into()
        } else {
            "no".into()
        },
        cell(&t["next_fire"]),
        cell(&t["updated_at"]),
    ]
}

const TASK_HEADERS: [&str; 5] = ["NAME", "VERSION", "PAUSED", "NEXT FIRE", "UPDATED"];

pub(super) fn task(args: TaskArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let json = args.conn.json;
    let show = |v: &Value, what: &str| {
        if json {
            print_json(v);
        } else {
            println!(
                "task {} {what} (version {}); next fire: {}",
                cell(&v["name"]),
                cell(&v["version"]),
                cell(&v["next_fire"])
            );
        }
    };
    match args.command {
        TaskCommand::Run(run) => return run_local(run, json),
        TaskCommand::Validate { file } => {
            let text = read_definition(&file)?;
            return super::task_check::validate(&client, &text, &file.display().to_string());
        }
        TaskCommand::Apply {
            file,
            dry_run: true,
        } => {
            let text = read_definition(&file)?;
            return super::task_check::dry_run(&client, &text, &file.display().to_string());
        }
        TaskCommand::Apply { file, .. } if file.is_dir() => return apply_dir(&client, &file, json),
        TaskCommand::Apply { file, .. } => {
            let applied = apply_file(&client, &file)?;
            let how = if applied.created {
                "created"
            } else {
                "replaced"
            };
            show(&applied.task, how);
        }
        TaskCommand::List => {
            // Every page: a listing of tasks is short enough to read whole.
            let tasks = all_pages(&client, "/v1/tasks", "tasks")?;
            if json {
                print_json(&json!({ "tasks": tasks, "next_cursor": null }));
            } else {
                let rows: Vec<Vec<String>> = tasks.iter().map(task_row).collect();
                print!("{}", table(&TASK_HEADERS, &rows));
            }
        }
        TaskCommand::Show { name } => {
            let v = client.get(&format!("/v1/tasks/{}", enc(&name)))?;
            if json {
                print_json(&v);
            } else {
                print!("{}", table(&TASK_HEADERS, &[task_row(&v)]));
                println!("created   {}", cell(&v["created_at"]));
                println!("---");
                let source = v["source"].as_str().unwrap_or_default();
                print!("{}", safe(source, Layout::Block));
                if !source.ends_with('\n') {
                    println!();
                }
            }
        }
        TaskCommand::Pause { name } => {
            let (_, v) = client.post(&format!("/v1/tasks/{}/pause", enc(&name)), Body::None)?;
            show(&v, "paused");
        }
        TaskCommand::Resume { name } => {
            let (_, v) = client.post(&format!("/v1/tasks/{}/resume", enc(&name)), Body::None)?;
            show(&v, "resumed");
        }
        TaskCommand::Delete { name } => {
            client.call("DELETE", &format!("/v1/tasks/{}", enc(&name)), Body::None)?;
            if json {
                print_json(&json!({ "deleted": name }));
            } else {
                println!("task {name} deleted");
            }
        }
        TaskCommand::Next { name, count } => {
            let v = client.get(&format!("/v1/tasks/{}/next?count={count}", enc(&name)))?;
            if json {
                print_json(&v);
            } else {
                for at in v["next"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    println!("{}", cell(at));
                }
            }
        }
    }
    done()
}
