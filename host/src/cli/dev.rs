//! `ax dev`: a plugin author's loop. In a project folder (`ax plugin new`
//! writes its `ax.yaml` and `task.yaml`) it builds the plugin
//! ([`super::build::build`], the command `ax build` runs), runs the
//! project's task in this process ([`super::local`], as
//! `ax task run -f task.yaml --local` does) and prints its logs and result;
//! then it watches the sources ([`super::watch`]) and, on every change that
//! has settled, builds and runs again: a separator naming the change, the
//! build's errors when it fails (and it keeps watching), the result, and
//! the time from the change to the result.
//!
//! One process for the whole session: the wasm runtime stays open, so a
//! component that did not change is not loaded again, and one that did is
//! compiled as `ax exec` compiles it (Winch for large ones, the local
//! artifact cache). Each run gets a fresh core on a memory store, so it
//! sees the new component under the versions the task names. Nothing is
//! pushed to a server (docs/PLUGINS.md says why).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::build::{self, Manifest};
use super::client::{self, Failure, LocalFlags};
use super::local::Host;
use super::watch::{Settle, Snapshot};

/// `ax dev`'s flags.
#[derive(Debug, Args)]
pub(super) struct DevArgs {
    /// The project folder, holding `ax.yaml`.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// The task to run (default: `task.yaml` in the project folder).
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// Build and run once, then exit: 0 when the run succeeded, 1 when the
    /// build or the run failed, 2 on any other error.
    #[arg(long)]
    once: bool,
    /// Print each run as one JSON object (as `ax task run --local --json`);
    /// `ax dev`'s own lines then go to stderr.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    with: LocalFlags,
}

/// How often the sources are looked at.
const POLL: Duration = Duration::from_millis(100);

/// How long the sources must stay unchanged before a rebuild: an editor's
/// save is a few writes within milliseconds, a `git checkout` many.
const QUIET: Duration = Duration::from_millis(200);

/// How one build and run ended; the exit code `--once` ends with.
enum Cycle {
    /// The task ran.
    Ran(ExitCode),
    /// The build failed, or something else did before the run.
    Failed(ExitCode),
    /// Ctrl-C came first.
    Stopped,
}

/// `ax dev`.
pub(super) fn run(args: DevArgs) -> ExitCode {
    let host = match Host::new(args.with.cache_dir.clone(), args.with.optimized) {
        Ok(host) => host,
        Err(e) => {
            client::report(&Failure::new(e.code(), format!("{e:#}")));
            return ExitCode::from(2);
        }
    };
    let file = args
        .file
        .clone()
        .unwrap_or_else(|| args.dir.join("task.yaml"));
    if args.once {
        // No Ctrl-C handler: SIGINT ends the process as usual.
        return match cycle(&host, &args, &file, &CancellationToken::new()) {
            Cycle::Ran(code) | Cycle::Failed(code) => code,
            Cycle::Stopped => ExitCode::from(2),
        };
    }
    let stop = host.on_ctrl_c();
    let mut seen = Snapshot::take(&args.dir);
    if seen.truncated {
        eprintln!(
            "warning: {} holds more than {} files; ax dev watches the first ones only",
            args.dir.display(),
            super::watch::MAX_FILES
        );
    }
    let started = Instant::now();
    if let Cycle::Stopped = cycle(&host, &args, &file, &stop) {
        return stopped();
    }
    say(
        args.json,
        &format!(
            "ax dev: built and ran in {:.1}s; watching {} for changes (Ctrl-C stops)",
            started.elapsed().as_secs_f64(),
            args.dir.display()
        ),
    );
    let mut settle = Settle::new(QUIET);
    let mut looked = Instant::now();
    loop {
        std::thread::sleep(POLL);
        if stop.is_cancelled() {
            return stopped();
        }
        let now = Instant::now();
        let snapshot = Snapshot::take(&args.dir);
        let changed = snapshot.changes(&seen);
        if !changed.is_empty() {
            // When the change was made: its file's time, within the last
            // poll (an old time is a file moved in, seen now).
            let age = snapshot
                .earliest(&changed)
                .and_then(|made| SystemTime::now().duration_since(made).ok())
                .unwrap_or_default()
                .min(now.saturating_duration_since(looked));
            settle.changed(now - age, changed);
            seen = snapshot;
        }
        looked = now;
        let Some((first, files)) = settle.settled(Instant::now()) else {
            continue;
        };
        say(args.json, &separator(&args.dir, &files));
        let what = match cycle(&host, &args, &file, &stop) {
            Cycle::Stopped => return stopped(),
            Cycle::Ran(_) => "result",
            Cycle::Failed(_) => "error",
        };
        say(
            args.json,
            &format!(
                "ax dev: {:.1}s from the change to the {what}; watching",
                first.elapsed().as_secs_f64()
            ),
        );
    }
}

/// Ctrl-C: a clean end.
fn stopped() -> ExitCode {
    eprintln!("ax dev: stopped");
    ExitCode::SUCCESS
}

/// Prints one of `ax dev`'s own lines: on stdout, or on stderr when stdout
/// is JSON.
fn say(json: bool, line: &str) {
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// The line between two runs: what changed, relative to the project.
fn separator(dir: &Path, files: &[PathBuf]) -> String {
    let shown: Vec<String> = files
        .iter()
        .take(3)
        .map(|f| f.strip_prefix(dir).unwrap_or(f).display().to_string())
        .collect();
    let more = match files.len().saturating_sub(shown.len()) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let text = format!("── changed: {}{more} ", shown.join(", "));
    let width = 72usize.saturating_sub(text.chars().count());
    format!("\n{text}{}", "─".repeat(width))
}

/// Builds the project, then runs its task and prints the run.
fn cycle(host: &Host, args: &DevArgs, file: &Path, stop: &CancellationToken) -> Cycle {
    let fail = |code: &str, message: String| {
        client::report(&Failure::new(code, message));
        Cycle::Failed(ExitCode::from(2))
    };
    // Read again every time: the manifest and the task are sources too.
    let manifest = match Manifest::read(&args.dir) {
        Ok(m) => m,
        Err(e) => return fail("invalid", e.to_string()),
    };
    say(args.json, &manifest.building());
    let started = Instant::now();
    if let Err(e) = build::build(&args.dir, &manifest) {
        if stop.is_cancelled() {
            return Cycle::Stopped;
        }
        // The command's own errors are above, as it printed them.
        client::report(&Failure::new("build", e.to_string()));
        return Cycle::Failed(ExitCode::from(1));
    }
    say(
        args.json,
        &format!("built in {:.1}s", started.elapsed().as_secs_f64()),
    );
    if stop.is_cancelled() {
        return Cycle::Stopped;
    }
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => return fail("io", format!("reading {}: {e}", file.display())),
    };
    let what = match args.with.local_run(file, text) {
        Ok(what) => what,
        Err(f) => {
            client::report(&f);
            return Cycle::Failed(ExitCode::from(2));
        }
    };
    match host.run_or_stop(&what, stop) {
        None => Cycle::Stopped,
        Some(Ok(finished)) => Cycle::Ran(client::print_local(&finished, args.json)),
        Some(Err(e)) => fail(e.code(), format!("{e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_separator_names_the_changed_files_relative_to_the_project() {
        let dir = Path::new("/p");
        let files: Vec<PathBuf> = ["/p/src/lib.rs", "/p/a", "/p/b", "/p/c", "/elsewhere/t.yaml"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let one = separator(dir, &files[..1]);
        assert!(one.starts_with("\n── changed: src/lib.rs ─"), "{one}");
        assert_eq!(one.trim_start().chars().count(), 72);
        let many = separator(dir, &files);
        assert!(
            many.contains("changed: src/lib.rs, a, b and 2 more ─"),
            "{many}"
        );
    }
}
