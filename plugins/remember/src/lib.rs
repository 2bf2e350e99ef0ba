//! The isolation probe (Rust; plugins/python/remember and plugins/js/remember
//! are the same in Python and JavaScript). Each attempt reports what a
//! `static` and a heap value behind it held when it started, then stores its
//! input's `write` there and reads it back. If anything of one attempt
//! reached the next, `before` would show it; `after` proves the write works.
use std::sync::Mutex;

use ax_plugin_sdk::{Context, Result, export_plugin};
use serde::Deserialize;
use serde_json::{Value, json};

/// Written by every attempt; must be `None` again at the start of the next.
static REMEMBERED: Mutex<Option<String>> = Mutex::new(None);

#[derive(Deserialize)]
struct Input {
    write: String,
}

fn run(_ctx: Context, input: Input) -> Result<Value> {
    // A guest is single-threaded: the lock is never contended (nor poisoned,
    // since a panic aborts the instance).
    let mut slot = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
    let before = slot.replace(input.write);
    Ok(json!({ "before": before, "after": *slot }))
}

export_plugin!(run);
