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

/// Columns padded to their width (all but the last), two spaces apart, cut to `max`.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>], max: Option<usize>) -> String {
    let mut natural: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            if let Some(w) = natural.get_mut(i) {
                // Tables show one line per row.
                *w = (*w).max(width(&one_line(c)));
            }
        }
    }
    let widths = fit(&natural, max);
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, c) in cells.enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            let shown = clip(&one_line(c), w);
            let pad = w.saturating_sub(width(&shown));
            text.push_str(&shown);
            text.push_str(&" ".repeat(pad + GAP));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
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
                b.set_message("sent; the server validates and compiles it");
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

    #[test]
    fn cutting_counts_characters_not_bytes() {
        assert_eq!(clip("héllo wörld", 6), "héllo…");
        assert_eq!(clip("abc", 3), "abc");
    }
}
