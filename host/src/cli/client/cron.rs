//! `ax cron next EXPR`: the next fire instants of a cron expression, computed
//! locally (no server).

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use serde_json::json;

use super::output::print_json;
use super::{Failure, Outcome, done};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum CronCommand {
    /// The next fire instants of a cron expression, with weekday names.
    Next(CronNextArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct CronNextArgs {
    /// Quartz-style expression, seconds first (`0 30 1 * * ?`).
    expr: String,
    /// IANA time zone.
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// How many instants.
    #[arg(short = 'n', long = "count", default_value_t = 5)]
    count: usize,
    /// Start after this instant (RFC 3339; default now).
    #[arg(long)]
    from: Option<String>,
    /// Print JSON (`{"next": [...], "described": [...]}`).
    #[arg(long)]
    json: bool,
}

pub(super) fn cron_next(args: CronNextArgs) -> Outcome {
    let cron = crate::schedule::CronSchedule::parse(&args.expr, &args.tz)
        .map_err(|e| Failure::new("invalid", e.to_string()))?;
    let from = match &args.from {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                Failure::new(
                    "usage",
                    format!("--from `{text}` is not an RFC 3339 instant ({e})"),
                )
            })?,
        None => Utc::now(),
    };
    let instants = cron.upcoming(from, args.count.max(1));
    let zone = cron.timezone();
    let described: Vec<String> = instants
        .iter()
        .map(|at| crate::schedule::describe(*at, zone))
        .collect();
    if args.json {
        let next: Vec<String> = instants
            .iter()
            .map(|at| crate::scheduler::clock::rfc3339(at.timestamp_millis()))
            .collect();
        print_json(&json!({ "next": next, "described": described }));
    } else {
        if described.is_empty() {
            println!("(no more fire instants)");
        }
        for line in described {
            println!("{line}");
        }
    }
    done()
}
