//! How the client's output meets a terminal: tables cut to its width, and
//! progress bars on stderr for `ax trigger --wait` and `ax plugin push`.
//!
//! Decisions:
//! - A table is cut to `COLUMNS` when that is set, else to the terminal's
//!   width when stdout is a terminal; into a pipe it prints whole cells
//!   (scripts want the data, and `--json` exists for them anyway). The widest
//!   columns shrink first (the first column, the key, only as a last resort), none below 6 characters (headers too: a narrow
//!   terminal gets `ATTEM…` rather than wrapped rows), and a cut cell ends
//!   in `…`.
//! - Progress goes to stderr and only when stderr is a terminal, so
//!   redirected output and `--json` stay clean (indicatif draws nothing to a
//!   non-terminal either; the explicit check also skips building the bars).
//! - Text that others wrote — a plugin's logs, field keys and values,
//!   output, errors and captured stdout/stderr; names and messages from the
//!   server — is printed through [`safe`], which turns every character a
//!   terminal would *act on* into a visible escape (`\x1b`, `\r`,
//!   `\u{202e}`), so a plugin cannot clear the screen, retitle the window,
//!   rewrite a line with `\r` or reorder text with bidi overrides. Tables
//!   apply it to every cell. `--json` prints the server's JSON unchanged
//!   (exact strings, JSON-escaped); only the people-facing output is escaped.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Read};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A column never shrinks below this (or its natural width, if narrower).
const MIN_COLUMN: usize = 6;
/// Space between columns.
const GAP: usize = 2;

/// Columns a table may use, or `None` for no limit.
pub(super) fn table_width() -> Option<usize> {
    if let Some(cols) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return Some(cols);
    }
    let term = console::Term::stdout();
    term.is_term()
        .then(|| term.size_checked().map(|(_, cols)| usize::from(cols)))
        .flatten()
}

/// How much layout [`safe`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// One line (a cell, a log message, a field, an error): `\n` and `\t`
    /// are escaped too, so a value cannot forge the lines after it.
    Line,
    /// Lines of text (captured stdout/stderr, a task's source, a drawing):
    /// `\n` and `\t` stay; everything else is escaped as in [`Layout::Line`].
    Block,
}

/// Whether a terminal would act on `c` rather than print it: C0 controls
/// (ESC starts CSI/OSC sequences, CR rewrites a line, NUL, BEL, BS…), DEL,
/// C1 controls (U+009B is a one-character CSI for some terminals), the line
/// and paragraph separators, and the bidirectional marks, embeddings,
/// overrides and isolates that reorder what follows them (the "Trojan
/// Source" set: U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069).
fn acts_on_terminal(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// `text` made safe to print on a terminal: every character a terminal
/// would act on (see `acts_on_terminal`) becomes a visible escape —
/// `\n`, `\r`, `\t`, `\x1b` for the other C0 controls and DEL,
/// `\u{9b}` / `\u{202e}` above ASCII. With [`Layout::Block`], `\n` and
/// `\t` stay. Everything else is unchanged, backslashes included: the aim
/// is a terminal that shows what was written, not a reversible encoding
/// (that is `--json`'s job). Applying it twice changes nothing more.
pub(super) fn safe(text: &str, layout: Layout) -> Cow<'_, str> {
    let keep = |c: char| layout == Layout::Block && matches!(c, '\n' | '\t');
    let needs = |c: char| acts_on_terminal(c) && !keep(c);
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !needs(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Writing to a String cannot fail.
            c if c.is_ascii() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

fn width(text: &str) -> usize {
    text.chars().count()
}

/// Column widths for `natural` widths within `max` columns: the widest
/// column that may still shrink loses one character at a time.
fn fit(natural: &[usize], max: Option<usize>) -> Vec<usize> {
    let mut widths = natural.to_vec();
    let Some(max) = max else { return widths };
    let gaps = GAP * widths.len().saturating_sub(1);
    // The first column is the key people copy (a run id, a task name): it is
    // cut only when cutting every other column to the floor was not enough.
    for key_may_shrink in [false, true] {
        let floor = |i: usize| {
            if i == 0 && !key_may_shrink {
                natural[0]
            } else {
                natural[i].min(MIN_COLUMN)
            }
        };
        while widths.iter().sum::<usize>() + gaps > max {
            let Some(i) = (0..widths.len())
                .filter(|&i| widths[i] > floor(i))
                .max_by_key(|&i| (widths[i], std::cmp::Reverse(i)))
            else {
                break; // Every column is at its floor: the terminal is just narrow.
            };
            widths[i] -= 1;
        }
    }
    widths
}

/// `text` cut to `max` characters, ending in `…` when cut.
fn clip(text: &str, max: usize) -> String {
    if width(text) <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A cell as one line: its first line, with `…` when more follow.
fn one_line(cell: &str) -> std::borrow::Cow<'_, str> {
    match cell.split_once('\n') {
        None => cell.into(),
        Some((first, _)) => format!("{}…", first.trim_end_matches('\r')).into(),
    }
}

/// A cell as shown: its first line, made [`safe`].
fn shown(cell: &str) -> String {
    safe(&one_line(cell), Layout::Line).into_owned()
}

/// Columns padded to their width (all but the last), two spaces apart, cut
/// to `max`. Every cell is made [`safe`] here, whoever built the rows.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>], max: Option<usize>) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| shown(c)).collect())
        .collect();
    let mut natural: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in &rows {
        for (i, c) in row.iter().enumerate() {
            if let Some(w) = natural.get_mut(i) {
                // Tables show one line per row.
                *w = (*w).max(width(c));
            }
        }
    }
    let widths = fit(&natural, max);
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, c) in cells.enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            let cut = clip(c, w);
            let pad = w.saturating_sub(width(&cut));
            text.push_str(&cut);
            text.push_str(&" ".repeat(pad + GAP));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A bar on stderr, or `None` when stderr is not a terminal.
fn bar(len: u64, template: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar =
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr()).with_style(style);
    bar.enable_steady_tick(Duration::from_millis(100));
    Some(bar)
}

/// Progress of a waited-for run: steps finished of all, the current state.
pub(super) struct RunProgress(Option<ProgressBar>);

impl RunProgress {
    pub(super) fn new(run_id: &str, steps: u64) -> Self {
        // `wide_msg` takes what is left of the line, so the bar never wraps.
        let bar = bar(
            steps,
            "{spinner} run {prefix} [{bar:12}] {pos}/{len} steps {elapsed} · {wide_msg}",
        );
        if let Some(b) = &bar {
            b.set_prefix(run_id.to_string());
        }
        Self(bar)
    }

    /// Shows `done` of `total` steps and what is happening now.
    pub(super) fn update(&self, done: u64, total: u64, state: &str) {
        if let Some(b) = &self.0 {
            b.set_length(total);
            b.set_position(done);
            b.set_message(state.to_string());
        }
    }

    /// Removes the bar (the result is printed next).
    pub(super) fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

/// Bytes going up, then a spinner while the server validates and compiles.
pub(super) struct UploadProgress {
    bar: Option<ProgressBar>,
}

impl UploadProgress {
    pub(super) fn new(what: &str, len: u64) -> Self {
        let bar = bar(
            len,
            "{spinner} {prefix} [{bar:20}] {bytes}/{total_bytes} {wide_msg}",
        );
        if let Some(b) = &bar {
            b.set_prefix(format!("uploading {what}"));
        }
        Self { bar }
    }

    /// Wraps the body so that reading it moves the bar.
    pub(super) fn reader(&self, bytes: Vec<u8>) -> impl Read + 'static {
        Counting {
            inner: std::io::Cursor::new(bytes),
            bar: self.bar.clone(),
        }
    }

    pub(super) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A spinner while an uploaded plugin compiles on the server (`ax plugin
/// push --wait`); off a terminal, one `compiling…` line on stderr.
pub(super) struct CompileProgress(Option<ProgressBar>);

impl CompileProgress {
    pub(super) fn new(what: &str) -> Self {
        let bar = bar(1, "{spinner} {prefix} {elapsed} {wide_msg}");
        match &bar {
            Some(b) => b.set_prefix(format!("compiling {what}…")),
            None => eprintln!("compiling {what}…"),
        }
        Self(bar)
    }

    /// Removes the spinner (the result is printed next).
    pub(super) fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

/// A reader that reports what was read to a bar.
struct Counting {
    inner: std::io::Cursor<Vec<u8>>,
    bar: Option<ProgressBar>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(b) = &self.bar {
            b.inc(n as u64);
            if n == 0 || b.position() >= b.length().unwrap_or(0) {
                b.set_message("sent; the server checks it");
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let out = table(
            &["A", "BB"],
            &[
                vec!["long".into(), "x".into()],
                vec!["s".into(), "yy".into()],
            ],
            None,
        );
        assert_eq!(out, "A     BB\nlong  x\ns     yy\n");
    }

    #[test]
    fn the_widest_column_is_cut_first_with_an_ellipsis() {
        let rows = vec![vec![
            "r0193abc".to_string(),
            "a very long error message that goes on".to_string(),
        ]];
        let out = table(&["ID", "ERROR"], &rows, Some(30));
        assert_eq!(out, "ID        ERROR\nr0193abc  a very long error m…\n");
        // The key column is cut last.
        let out = table(&["ID", "ERROR"], &rows, Some(16));
        assert_eq!(out, "ID        ERROR\nr0193abc  a ver…\n");
        assert!(out.lines().all(|l| l.chars().count() <= 30), "{out}");
    }

    #[test]
    fn columns_never_shrink_below_six_characters() {
        assert_eq!(fit(&[20, 20], Some(10)), vec![6, 6]);
        assert_eq!(fit(&[3, 40], Some(20)), vec![3, 15]);
        assert_eq!(fit(&[10, 10], None), vec![10, 10]);
        assert_eq!(fit(&[30, 10, 30], Some(40)), vec![24, 6, 6]);
        assert_eq!(fit(&[30, 10, 30], Some(60)), vec![30, 10, 16]);
    }

    #[test]
    fn multi_line_cells_show_their_first_line() {
        let out = table(&["A"], &[vec!["one\ntwo".into()]], None);
        assert_eq!(out, "A\none…\n");
    }

    /// Whether `text` holds anything a terminal acts on (what the
    /// integration test of `ax logs` checks too).
    fn raw_controls(text: &str) -> Vec<char> {
        text.chars()
            .filter(|&c| c != '\n' && acts_on_terminal(c))
            .collect()
    }

    #[test]
    fn control_characters_become_visible_escapes() {
        let hostile = "\u{1b}[2J\u{1b}]0;owned\u{7}all runs succeeded\r\0\u{8}\u{7f}";
        assert_eq!(
            safe(hostile, Layout::Line),
            "\\x1b[2J\\x1b]0;owned\\x07all runs succeeded\\r\\x00\\x08\\x7f"
        );
        // C1 controls, bidi overrides and isolates, line separators.
        assert_eq!(
            safe(
                "a\u{9b}31m\u{202e}txt.exe\u{2066}b\u{2069}\u{2028}\u{61c}",
                Layout::Line
            ),
            "a\\u{9b}31m\\u{202e}txt.exe\\u{2066}b\\u{2069}\\u{2028}\\u{61c}"
        );
        for c in [
            '\u{200e}', '\u{200f}', '\u{202a}', '\u{202d}', '\u{2067}', '\u{85}',
        ] {
            assert!(
                raw_controls(&safe(&c.to_string(), Layout::Line)).is_empty(),
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_line_escapes_newlines_and_tabs_and_a_block_keeps_them() {
        let text = "one\ttwo\nthree\r\n";
        assert_eq!(safe(text, Layout::Line), "one\\ttwo\\nthree\\r\\n");
        assert_eq!(safe(text, Layout::Block), "one\ttwo\nthree\\r\n");
    }

    #[test]
    fn printable_text_is_left_alone_and_escaping_twice_changes_nothing() {
        for text in [
            "plain",
            "héllo wörld ✓ 日本",
            "C:\\path\\x1b",
            "emoji 👩‍💻",
            "",
        ] {
            assert!(
                matches!(safe(text, Layout::Line), Cow::Borrowed(_)),
                "{text}"
            );
        }
        let once = safe("\u{1b}[31mred\u{202e}\n", Layout::Line).into_owned();
        assert!(raw_controls(&once).is_empty() && !once.contains('\n'));
        assert_eq!(safe(&once, Layout::Line), once);
        assert_eq!(safe(&once, Layout::Block), once);
    }

    #[test]
    fn every_table_cell_is_made_safe() {
        let out = table(
            &["A", "B"],
            &[vec!["\u{1b}[2Jx".into(), "y\r\u{202e}z".into()]],
            None,
        );
        assert_eq!(out, "A         B\n\\x1b[2Jx  y\\r\\u{202e}z\n");
        assert!(raw_controls(&out).is_empty());
    }

    #[test]
    fn cutting_counts_characters_not_bytes() {
        assert_eq!(clip("héllo wörld", 6), "héllo…");
        assert_eq!(clip("abc", 3), "abc");
    }
}
