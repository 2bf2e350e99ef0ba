//! `ax graph TASK`: the server's drawing of a task's DAG (text, DOT, Mermaid
//! or JSON), optionally coloured by a run's step states.

use clap::Args;
use serde_json::Value;

use super::http::{Client, enc, query};
use super::output::print_json;
use super::{Conn, Outcome, done};
use crate::cli::term::{Layout, safe};

#[derive(Debug, Args)]
pub(in crate::cli) struct GraphArgs {
    #[command(flatten)]
    conn: Conn,
    /// Task name.
    task: String,
    /// Colour the steps by their states in this run (drawn from the run's own definition).
    #[arg(long)]
    run: Option<String>,
    /// Output format (default text; json with --json).
    #[arg(long, value_parser = ["text", "dot", "mermaid", "json"])]
    format: Option<String>,
}

/// Prints the server's drawing as it is (JSON pretty-printed).
pub(super) fn graph(args: GraphArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let format = args
        .format
        .unwrap_or_else(|| if args.conn.json { "json" } else { "text" }.into());
    let path = format!(
        "/v1/tasks/{}/graph{}",
        enc(&args.task),
        query(&[("format", Some(format)), ("run", args.run)])
    );
    match client.get(&path)? {
        // Text, DOT and Mermaid never parse as JSON (a name or keyword, then more).
        Value::String(text) => print!("{}", safe(&text, Layout::Block)),
        other => print_json(&other),
    }
    done()
}
