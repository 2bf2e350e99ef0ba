//! `ax secret set|list|delete`: the tenant's secrets. A value is read from
//! stdin or a file, never from the command line (where `ps` and the shell's
//! history would keep it), and no answer ever carries one.

use std::io::Read as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;

use super::http::{Body, Client, enc};
use super::output::{cell, items, print_json, table};
use super::{Conn, Failure, Outcome, done};

#[derive(Debug, Args)]
pub(in crate::cli) struct SecretArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: SecretCommand,
}

#[derive(Debug, Subcommand)]
enum SecretCommand {
    /// Create or replace a secret; the value comes from stdin (one trailing
    /// newline dropped, so `echo VALUE | ax secret set NAME` works) or --file.
    Set {
        /// Secret name (what a task's `secrets:` lists).
        name: String,
        /// Read the value from this file, byte for byte.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// List the tenant's secrets: names and when they were set, never values.
    List,
    /// Delete a secret.
    Delete {
        /// Secret name.
        name: String,
    },
}

/// The value from stdin: one trailing `\n` (or `\r\n`) dropped.
fn from_stdin(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

fn read_value(file: Option<&PathBuf>) -> Result<String, Failure> {
    match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::new("io", format!("reading {}: {e}", path.display()))),
        None => {
            if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                eprintln!("ax: reading the secret's value from stdin (end with Ctrl-D)");
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| Failure::new("io", format!("reading stdin: {e}")))?;
            Ok(from_stdin(text))
        }
    }
}

pub(super) fn secret(args: SecretArgs) -> Outcome {
    let client = Client::new(&args.conn);
    match args.command {
        SecretCommand::Set { name, file } => {
            let value = read_value(file.as_ref())?;
            let (_, v) = client.call(
                "PUT",
                &format!("/v1/secrets/{}", enc(&name)),
                Body::Raw {
                    content_type: "text/plain; charset=utf-8",
                    bytes: value.into_bytes(),
                },
            )?;
            if args.conn.json {
                print_json(&v);
            } else {
                let what = if v["created"] == true {
                    "created"
                } else {
                    "replaced"
                };
                println!("secret {} {what}", cell(&v["name"]));
            }
        }
        SecretCommand::List => {
            let v = client.get("/v1/secrets")?;
            if args.conn.json {
                print_json(&v);
            } else {
                let rows: Vec<Vec<String>> = items(&v["secrets"])
                    .map(|s| vec![cell(&s["name"]), cell(&s["updated_at"])])
                    .collect();
                print!("{}", table(&["NAME", "UPDATED"], &rows));
            }
        }
        SecretCommand::Delete { name } => {
            client.call("DELETE", &format!("/v1/secrets/{}", enc(&name)), Body::None)?;
            if args.conn.json {
                print_json(&json!({ "deleted": name }));
            } else {
                println!("secret {} deleted", cell(&name.into()));
            }
        }
    }
    done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_trailing_newline_is_dropped_from_stdin() {
        assert_eq!(from_stdin("s3cret\n".into()), "s3cret");
        assert_eq!(from_stdin("s3cret\r\n".into()), "s3cret");
        assert_eq!(from_stdin("two\n\n".into()), "two\n");
        assert_eq!(from_stdin("none".into()), "none");
    }
}
