//! A synthetic order extraction: derives a row count from the business date
//! (deterministically), or takes `rows` from the input to force a branch.
use ax_plugin_sdk::{Context, Error, Result, export_plugin, log, progress};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Input {
    /// Business date, yyyy-MM-dd.
    date: String,
    /// Overrides the derived row count (for demos and tests).
    rows: Option<u64>,
}

#[derive(Serialize)]
struct Output {
    date: String,
    rows: u64,
    source: &'static str,
}

fn run(_ctx: Context, input: Input) -> Result<Output> {
    let valid = input.date.len() == 10
        && input.date.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    if !valid {
        return Err(Error::fatal(format!(
            "date `{}` is not yyyy-MM-dd",
            input.date
        )));
    }
    let rows = input.rows.unwrap_or_else(|| {
        // FNV-1a of the date: stable, spread between 0 and 1.6 million rows.
        let hash = input.date.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        hash % 1_600_000
    });
    progress(100, "orders extracted");
    log::with_fields(
        log::Level::Info,
        "extracted orders",
        &[("date", &input.date), ("rows", &rows.to_string())],
    );
    Ok(Output {
        date: input.date,
        rows,
        source: "synthetic",
    })
}

export_plugin!(run);
