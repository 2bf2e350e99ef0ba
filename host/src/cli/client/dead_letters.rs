//! `ax dead-letters [--all]`, `ax dead-letters resolve|requeue ID`: steps
//! that ran out of attempts, and what was decided about them.

use clap::{Args, Subcommand};
use serde_json::json;

use super::http::{Body, Client, enc};
use super::output::{cell, items, print_json, table};
use super::{Conn, Outcome, done};

#[derive(Debug, Args)]
pub(in crate::cli) struct DeadLettersArgs {
    #[command(flatten)]
    conn: Conn,
    /// Also list resolved dead letters.
    #[arg(long)]
    all: bool,
    #[command(subcommand)]
    command: Option<DeadLetterCommand>,
}

#[derive(Debug, Subcommand)]
enum DeadLetterCommand {
    /// Record what was decided about a dead letter.
    Resolve {
        /// Dead letter id.
        id: String,
        /// What was decided.
        #[arg(long)]
        resolution: String,
    },
    /// Queue the dead step again for another round of attempts.
    Requeue {
        /// Dead letter id.
        id: String,
    },
}

pub(super) fn dead_letters(args: DeadLettersArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let json = args.conn.json;
    match args.command {
        None => {
            let open = if args.all { "false" } else { "true" };
            let v = client.get(&format!("/v1/dead-letters?open={open}"))?;
            if json {
                print_json(&v);
            } else {
                let rows: Vec<Vec<String>> = items(&v["dead_letters"])
                    .map(|d| {
                        vec![
                            cell(&d["id"]),
                            cell(&d["task"]),
                            cell(&d["run_id"]),
                            cell(&d["step"]),
                            cell(&d["attempts"]),
                            cell(&d["outcome"]),
                            cell(&d["created_at"]),
                            if d["resolution"].is_null() {
                                cell(&d["error"])
                            } else {
                                format!("resolved: {}", cell(&d["resolution"]))
                            },
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(
                        &[
                            "ID",
                            "TASK",
                            "RUN",
                            "STEP",
                            "ATTEMPTS",
                            "OUTCOME",
                            "CREATED",
                            "ERROR / RESOLUTION"
                        ],
                        &rows
                    )
                );
            }
        }
        Some(DeadLetterCommand::Resolve { id, resolution }) => {
            let (_, v) = client.post(
                &format!("/v1/dead-letters/{}/resolve", enc(&id)),
                Body::Json(json!({ "resolution": resolution })),
            )?;
            if json {
                print_json(&v);
            } else {
                println!(
                    "dead letter {} resolved: {}",
                    cell(&v["id"]),
                    cell(&v["resolution"])
                );
            }
        }
        Some(DeadLetterCommand::Requeue { id }) => {
            let (_, v) = client.post(
                &format!("/v1/dead-letters/{}/requeue", enc(&id)),
                Body::None,
            )?;
            if json {
                print_json(&v);
            } else {
                println!(
                    "dead letter {id} requeued: run {} is {}",
                    cell(&v["id"]),
                    cell(&v["status"])
                );
            }
        }
    }
    done()
}
