//! `ax dev`: a plugin author's loop. In a project folder (`ax plugin new`
//! writes its `ax.yaml` and `task.yaml`) it builds the plugin
//! ([`super::build::build`], the command `ax build` runs), runs the
//! project's task and prints its logs and result; then it watches the
//! sources ([`super::watch`]) and, on every change that has settled, builds
//! and runs again: a separator naming the change, the build's errors when
//! it fails (and it keeps watching), the result, and the time from the
//! change to the result.
//!
//! Where the task runs:
//!
//! - by default in this process ([`super::local`], as `ax task run -f
//!   task.yaml --local` does). One process for the whole session: the wasm
//!   runtime stays open, so a component that did not change is not loaded
//!   again, and one that did is compiled as `ax exec` compiles it (Winch
//!   for large ones, the local artifact cache). Each run gets a fresh core
//!   on a memory store, so it sees the new component under the versions
//!   the task names. Nothing is pushed to a server;
//! - with `--url` on that server ([`super::client::Remote`]): each build
//!   pushed as a development version, the task applied naming it,
//!   triggered and waited for, the development version it replaced
//!   deleted. docs/PLUGINS.md says when to use which.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::build::{self, Manifest};
use super::client::{self, Conn, Failure, LocalFlags, Remote};
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
    #[command(flatten)]
    with: LocalFlags,
    /// `--url` runs each build on that server instead of in this process
    /// (`--url` alone: AX_URL's); `--json` prints each run as one JSON
    /// object (as `ax task run --local --json`), `ax dev`'s own lines then
    /// on stderr.
    #[command(flatten)]
    conn: Conn,
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
    /// The server of `--url` could not be reached (before the build).
    Unreachable(ExitCode),
    /// Ctrl-C came first.
    Stopped,
}

/// Where a cycle runs the task: in `host`, or on the server of `remote`.
struct Where<'a> {
    host: &'a Host,
    remote: Option<&'a Remote>,
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
    let remote = args.conn.url_given().then(|| Remote::new(&args.conn));
    let on = Where {
        host: &host,
        remote: remote.as_ref(),
    };
    if args.once {
        // No Ctrl-C handler: SIGINT ends the process as usual.
        return match cycle(&on, &args, &file, &CancellationToken::new()) {
            Cycle::Ran(code) | Cycle::Failed(code) | Cycle::Unreachable(code) => code,
            Cycle::Stopped => ExitCode::from(2),
        };
    }
    let json = args.conn.json();
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
    match cycle(&on, &args, &file, &stop) {
        Cycle::Stopped => return stopped(remote.as_ref()),
        // Nothing to watch for: the server is not there.
        Cycle::Unreachable(code) => return code,
        Cycle::Ran(_) | Cycle::Failed(_) => {}
    }
    say(
        json,
        &format!(
            "ax dev: built and ran in {:.1}s{}; watching {} for changes (Ctrl-C stops)",
            started.elapsed().as_secs_f64(),
            remote
                .as_ref()
                .map(|r| format!(" on {}", r.url()))
                .unwrap_or_default(),
            args.dir.display()
        ),
    );
    let mut settle = Settle::new(QUIET);
    let mut looked = Instant::now();
    loop {
        std::thread::sleep(POLL);
        if stop.is_cancelled() {
            return stopped(remote.as_ref());
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
        say(json, &separator(&args.dir, &files));
        let what = match cycle(&on, &args, &file, &stop) {
            Cycle::Stopped => return stopped(remote.as_ref()),
            Cycle::Ran(_) => "result",
            Cycle::Failed(_) | Cycle::Unreachable(_) => "error",
        };
        say(
            json,
            &format!(
                "ax dev: {:.1}s from the change to the {what}; watching",
                first.elapsed().as_secs_f64()
            ),
        );
    }
}

/// Ctrl-C: a clean end, with what stays on the server of `--url`.
fn stopped(remote: Option<&Remote>) -> ExitCode {
    match remote.and_then(Remote::left) {
        Some(left) => eprintln!("ax dev: stopped; {left}"),
        None => eprintln!("ax dev: stopped"),
    }
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
fn cycle(on: &Where<'_>, args: &DevArgs, file: &Path, stop: &CancellationToken) -> Cycle {
    let json = args.conn.json();
    let fail = |code: &str, message: String| {
        client::report(&Failure::new(code, message));
        Cycle::Failed(ExitCode::from(2))
    };
    // Read again every time: the manifest and the task are sources too.
    let manifest = match Manifest::read(&args.dir) {
        Ok(m) => m,
        Err(e) => return fail("invalid", e.to_string()),
    };
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
    // On a server: what to delete after the run, asked before the build.
    let previous = match on.remote {
        None => Vec::new(),
        Some(remote) => match remote.previous(&what.spec.name, &manifest.name) {
            Ok(previous) => previous,
            Err(failed) => {
                client::report(&failed.failure);
                return Cycle::Unreachable(ExitCode::from(failed.exit));
            }
        },
    };
    say(json, &manifest.building());
    let started = Instant::now();
    let output = match build::build(&args.dir, &manifest, json) {
        Ok(output) => output,
        Err(e) => {
            if stop.is_cancelled() {
                return Cycle::Stopped;
            }
            // The command's own errors are above, as it printed them.
            client::report(&Failure::new("build", e.to_string()));
            return Cycle::Failed(ExitCode::from(1));
        }
    };
    say(
        json,
        &format!("built in {:.1}s", started.elapsed().as_secs_f64()),
    );
    if stop.is_cancelled() {
        return Cycle::Stopped;
    }
    if let Some(remote) = on.remote {
        let stopped = || stop.is_cancelled();
        return match remote.cycle(
            &args.dir,
            &manifest.name,
            &output,
            &what,
            &previous,
            &stopped,
        ) {
            Ok(Some(code)) => Cycle::Ran(code),
            Ok(None) => Cycle::Stopped,
            Err(failed) => {
                client::report(&failed.failure);
                Cycle::Failed(ExitCode::from(failed.exit))
            }
        };
    }
    match on.host.run_or_stop(&what, stop) {
        None => Cycle::Stopped,
        Some(Ok(finished)) => Cycle::Ran(client::print_local(&finished, json)),
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
