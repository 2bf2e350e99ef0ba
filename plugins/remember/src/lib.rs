//! The isolation probe (Rust; plugins/python/remember and plugins/js/remember
//! are the same in Python and JavaScript). Each attempt reports what a
//! `static` and a heap value behind it held when it started, then stores its
//! input's `write` there and reads it back. If anything of one attempt
//! reached the next, `before` would show it; `after` proves the write works.
//!
//! With `spread: N` in its input it also marks N bytes of a zeroed buffer,
//! 8 KiB apart: the attempt then leaves at least N separate runs of dirty
//! pages (one written 4 KiB page, one clean), more than the runs one
//! `PAGEMAP_SCAN` of wasmtime's pool reports (32 in wasmtime 48, 64 in
//! 50), so the slot's reset has to go on past its first scan.
//! `spread.before` counts the marks found when the attempt started (0
//! unless an earlier attempt's pages survived), `spread.after` those after
//! marking (N, so the probe can fail). An attempt that finds marks fails
//! (fatal, naming how many), so a benchmark loop (`ax bench exec`, which
//! stops at the first attempt that does not succeed) is a leak check too;
//! with `hold_ms` it waits that long after marking, holding its dirty pages
//! (the swap experiment of docs/SECURITY.md, *One attempt's memory and the
//! next*).
use std::sync::Mutex;

use std::time::Duration;

use ax_plugin_sdk::{Context, Error, Result, export_plugin};
use serde::Deserialize;
use serde_json::{Value, json};

/// Written by every attempt; must be `None` again at the start of the next.
static REMEMBERED: Mutex<Option<String>> = Mutex::new(None);

/// Bytes between two marks: two host pages, so no two marks share a page
/// nor touch pages next to each other.
const STRIDE: usize = 8 << 10;
/// Marks the buffer has room for.
const MAX_SPREAD: usize = 256;
/// Zero in the component's initial image; marked by attempts asking for it.
static SPREAD: Mutex<[u8; STRIDE * MAX_SPREAD]> = Mutex::new([0; STRIDE * MAX_SPREAD]);

#[derive(Deserialize)]
struct Input {
    write: String,
    #[serde(default)]
    spread: Option<usize>,
    #[serde(default)]
    hold_ms: u64,
}

fn run(_ctx: Context, input: Input) -> Result<Value> {
    // A guest is single-threaded: the lock is never contended (nor poisoned,
    // since a panic aborts the instance).
    let mut slot = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
    let before = slot.replace(input.write);
    let mut output = json!({ "before": before, "after": *slot });
    if let Some(n) = input.spread {
        let mut spread = SPREAD.lock().unwrap_or_else(|e| e.into_inner());
        let marks = |buf: &[u8]| (0..MAX_SPREAD).filter(|i| buf[i * STRIDE] != 0).count();
        let before = marks(&spread[..]);
        if before > 0 {
            return Err(Error::fatal(format!(
                "{before} marks of an earlier attempt found in the spread buffer"
            )));
        }
        for i in 0..n.min(MAX_SPREAD) {
            spread[i * STRIDE] = 1;
        }
        output["spread"] = json!({ "before": before, "after": marks(&spread[..]) });
    }
    std::thread::sleep(Duration::from_millis(input.hold_ms));
    Ok(output)
}

export_plugin!(run);
