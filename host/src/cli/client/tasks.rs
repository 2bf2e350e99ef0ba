//! `ax task apply|validate|list|show|pause|resume|delete|next`: a task's
//! definition and its trigger (checks before saving: [`super::task_check`]).

use std::io::Read as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::http::{Body, Client, all_pages, enc};
use super::output::{cell, print_json, table};
use super::{Conn, Failure, Outcome, done};
use crate::cli::term::{Layout, safe};

#[derive(Debug, Args)]
pub(in crate::cli) struct TaskArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(Debug, Subcommand)]
enum TaskCommand {
    /// Create or replace a task from a YAML or JSON file (`-` reads stdin).
    Apply {
        /// The definition file.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Check the definition and show a diff against the stored one; store nothing.
        #[arg(long)]
        dry_run: bool,
    },
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

fn read_definition(file: &PathBuf) -> Result<String, Failure> {
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
        TaskCommand::Apply { file, .. } => {
            let text = read_definition(&file)?;
            // The URL names the task: read the name with the server's own parser.
            let spec = crate::task::parse(&text).map_err(|e| {
                let at = if e.path.is_empty() {
                    String::new()
                } else {
                    format!("{}: ", e.path)
                };
                Failure::new("invalid", format!("{}: {at}{}", file.display(), e.message))
            })?;
            let content_type = if text.trim_start().starts_with('{') {
                "application/json"
            } else {
                "application/yaml"
            };
            let (status, v) = client.call(
                "PUT",
                &format!("/v1/tasks/{}", enc(&spec.name)),
                Body::Raw {
                    content_type,
                    bytes: text.into_bytes(),
                },
            )?;
            show(&v, if status == 201 { "created" } else { "replaced" });
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
