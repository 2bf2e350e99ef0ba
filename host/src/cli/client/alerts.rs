//! `ax alerts list [--status pending|dead|delivered] [--limit N] [--cursor C]`,
//! `ax alerts retry ID`: the tenant's webhook alert outbox.

use clap::{Args, Subcommand, ValueEnum};

use super::http::{Body, Client, enc};
use super::output::{cell, items, print_json, table};
use super::{Conn, Outcome, done};

#[derive(Debug, Args)]
pub(in crate::cli) struct AlertsArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: AlertCommand,
}

/// An outbox state.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum State {
    Pending,
    Dead,
    Delivered,
}

#[derive(Debug, Subcommand)]
enum AlertCommand {
    /// List alerts, newest first.
    List {
        /// Only alerts in this state.
        #[arg(long, value_enum)]
        status: Option<State>,
        /// Page size (1..=1000, default 50).
        #[arg(long)]
        limit: Option<usize>,
        /// The cursor a previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Put a dead alert back to pending, with its attempts reset.
    Retry {
        /// Alert id.
        id: String,
    },
}

pub(super) fn alerts(args: AlertsArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let json = args.conn.json;
    match args.command {
        AlertCommand::List {
            status,
            limit,
            cursor,
        } => {
            let mut query = Vec::new();
            if let Some(s) = status {
                let s = format!("{s:?}").to_ascii_lowercase();
                query.push(format!("status={s}"));
            }
            if let Some(n) = limit {
                query.push(format!("limit={n}"));
            }
            if let Some(c) = cursor {
                query.push(format!("cursor={}", enc(&c)));
            }
            let q = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            let v = client.get(&format!("/v1/alerts{q}"))?;
            if json {
                print_json(&v);
            } else {
                let rows: Vec<Vec<String>> = items(&v["alerts"])
                    .map(|a| {
                        vec![
                            cell(&a["id"]),
                            cell(&a["status"]),
                            cell(&a["kind"]),
                            cell(&a["run_id"]),
                            cell(&a["attempts"]),
                            if a["status"] == "pending" {
                                cell(&a["next_try"])
                            } else {
                                "-".into()
                            },
                            cell(&a["url"]),
                            cell(&a["last_error"]),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(
                        &[
                            "ID",
                            "STATE",
                            "KIND",
                            "RUN",
                            "ATTEMPTS",
                            "NEXT TRY",
                            "WEBHOOK",
                            "LAST ERROR"
                        ],
                        &rows
                    )
                );
                if let Some(next) = v["next_cursor"].as_str() {
                    println!("more: --cursor {next}");
                }
            }
        }
        AlertCommand::Retry { id } => {
            let (_, v) = client.post(&format!("/v1/alerts/{}/retry", enc(&id)), Body::None)?;
            if json {
                print_json(&v);
            } else {
                println!("alert {} is {} again", cell(&v["id"]), cell(&v["status"]));
            }
        }
    }
    done()
}
