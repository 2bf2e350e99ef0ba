//! `ax deploy`: a plugin project onto a server in one command (as `spin
//! deploy`). In the project folder (or `--dir`) it runs three stages, each
//! the command a user would otherwise type, through the same functions:
//!
//! 1. **build**: `ax.yaml`'s build ([`crate::cli::build::build`], what
//!    `ax build` runs), unless its `build.output` is newer than every
//!    source (`ax dev`'s sources, [`crate::cli::watch`], but the task file):
//!    componentize-py and componentize-js write other bytes on every build,
//!    and a deploy again without a change must find the same bytes;
//!    `--no-build` takes the component at `build.output` as it is;
//! 2. **push**: the component uploaded as `NAME@VERSION`, NAME from
//!    `ax.yaml`, VERSION from the project's manifest
//!    ([`super::manifest::find_version`], what `ax plugin push` reads), then
//!    its compilation on the server waited for ([`super::plugins::compiled`]).
//!    The server's rule for versions decides the rest: the same bytes again
//!    are found and the deploy goes on; other bytes under that version are
//!    refused (409), and the failure says which file's version to bump;
//! 3. **apply**: the project's `task.yaml` (or `-f`) saved as `ax task
//!    apply -f` saves it ([`super::tasks::apply_file`]); a step that names
//!    the plugin by another exact version, or a range the pushed one is not
//!    in, is warned about (it goes on running the old one).
//!
//! One line per stage, then the command that runs the task. A failed stage
//! prints the error (`error: CODE: message`, as every client command) and
//! `deploy: stopped at STAGE`, and nothing after it runs. Exit codes: 0
//! deployed; 1 the build failed or the server could not compile the
//! component; 2 any other error; 124 the compilation outlasted `--timeout`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{Value, json};

use super::http::Client;
use super::output::{cell, print_json, short_digest};
use super::plugins::{self, VersionFrom};
use super::{Conn, Failure, Outcome};
use crate::cli::build::{self, Manifest};
use crate::cli::watch::Snapshot;
use crate::task::{TaskSpec, VersionSelector};

/// `ax deploy`'s flags.
#[derive(Debug, Args)]
pub(in crate::cli) struct DeployArgs {
    #[command(flatten)]
    conn: Conn,
    /// The project folder, holding `ax.yaml`.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// The task to apply (default: `task.yaml` in the project folder).
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// Do not build, even when a source is newer: push the component
    /// already at `ax.yaml`'s `build.output`.
    #[arg(long)]
    no_build: bool,
    /// Seconds the push waits at most for the server to compile the component.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

/// A stage of a deploy, named when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Build,
    Push,
    Apply,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::Build => "build",
            Stage::Push => "push",
            Stage::Apply => "apply",
        }
    }
}

/// How a stage failed: its failure and the exit code it ends with.
struct Stopped {
    stage: Stage,
    failure: Failure,
    exit: u8,
}

impl Stopped {
    /// A failure of `stage` that ends with exit 2 (a client error).
    fn at(stage: Stage) -> impl FnOnce(Failure) -> Self {
        move |failure| Stopped {
            stage,
            failure,
            exit: 2,
        }
    }
}

/// `ax deploy`.
pub(super) fn deploy(args: DeployArgs) -> Outcome {
    match stages(&args) {
        Ok(code) => Ok(code),
        Err(stopped) => {
            super::report(&stopped.failure);
            eprintln!("deploy: stopped at {}", stopped.stage.as_str());
            Ok(ExitCode::from(stopped.exit))
        }
    }
}

/// Prints a stage's line: on stdout, or on stderr when stdout is JSON.
fn say(json: bool, line: &str) {
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// The three stages in order; the first failure stops them.
fn stages(args: &DeployArgs) -> Result<ExitCode, Stopped> {
    let json = args.conn.json;
    let dir = &args.dir;
    let manifest = Manifest::read(dir)
        .map_err(|e| Stopped::at(Stage::Build)(Failure::new("invalid", e.to_string())))?;

    let task_file = args.file.clone().unwrap_or_else(|| dir.join("task.yaml"));

    // build
    let component = if args.no_build {
        let output = manifest
            .output_in(dir)
            .map_err(|e| Stopped::at(Stage::Build)(Failure::new("invalid", e.to_string())))?;
        if !output.is_file() {
            return Err(Stopped::at(Stage::Build)(Failure::new(
                "usage",
                format!(
                    "--no-build, and nothing is built at {} (the `build.output` of {}): \
                     drop --no-build or run `ax build`",
                    output.display(),
                    build::MANIFEST
                ),
            )));
        }
        say(
            json,
            &format!("build: skipped (--no-build): {}", output.display()),
        );
        output
    } else if let Some(output) = up_to_date(dir, &manifest, &task_file)? {
        say(
            json,
            &format!(
                "build: up to date: no source changed since {} was built (`ax build` to \
                 build anyway)",
                output.display()
            ),
        );
        output
    } else {
        say(json, &format!("build: {}", manifest.building()));
        let started = Instant::now();
        let output = build::build(dir, &manifest, json).map_err(|e| {
            let (code, exit) = match e {
                build::Error::Command { .. } | build::Error::NoOutput { .. } => ("build", 1),
                _ => ("invalid", 2),
            };
            Stopped {
                stage: Stage::Build,
                failure: Failure::new(code, e.to_string()),
                exit,
            }
        })?;
        say(
            json,
            &format!("build: {}", manifest.built(&output, started)),
        );
        output
    };

    // push
    let record = push(args, &manifest, &component)?;

    // apply
    let file = task_file;
    let client = Client::new(&args.conn);
    let applied = super::tasks::apply_file(&client, &file).map_err(Stopped::at(Stage::Apply))?;
    let (created, task) = (applied.created, &applied.task);
    say(
        json,
        &format!(
            "apply: task {} {} from {} (version {}); next fire: {}",
            cell(&task["name"]),
            if created { "created" } else { "replaced" },
            file.display(),
            cell(&task["version"]),
            cell(&task["next_fire"])
        ),
    );
    let version = cell(&record["version"]);
    for (step, selector) in not_following(&applied.spec, &manifest.name, &version) {
        eprintln!(
            "warning: step `{step}` of {} runs {name}@{selector}, not {name}@{version} just \
             pushed: write `{name}@{version}` there, or `{name}@{}` to follow new versions",
            file.display(),
            caret(&version),
            name = manifest.name,
        );
    }
    let run = format!("ax trigger {} --wait", cell(&task["name"]));
    if json {
        print_json(&json!({
            "component": component,
            "plugin": record,
            "task": task,
            "next": run,
        }));
    } else {
        println!("deployed; run it: {run}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the build can be skipped: `build.output` exists and no source
/// of the project (as `ax dev` watches them, the task file left out: it is
/// applied, not built) was modified after it. The output, or none when
/// the build must run. Why: componentize-py and componentize-js do not
/// write the same bytes twice, so without this a deploy again without a
/// change would be refused as other bytes under the same version; and it
/// saves their 5 to 10 s.
fn up_to_date(
    dir: &Path,
    manifest: &Manifest,
    task_file: &Path,
) -> Result<Option<PathBuf>, Stopped> {
    let output = manifest
        .output_in(dir)
        .map_err(|e| Stopped::at(Stage::Build)(Failure::new("invalid", e.to_string())))?;
    let Ok(built) = std::fs::metadata(&output).and_then(|m| m.modified()) else {
        return Ok(None);
    };
    let sources = Snapshot::take(dir);
    if sources.truncated {
        return Ok(None);
    }
    // The snapshot names files as `dir` joined with their path.
    let except = dir.join(task_file.strip_prefix(dir).unwrap_or(task_file));
    Ok(match sources.newest(&except) {
        Some((_, modified)) if modified < built => Some(output),
        _ => None,
    })
}

/// The push stage: uploads the component as `NAME@VERSION` and waits for
/// the server to compile it; the version's record, `ready`.
fn push(args: &DeployArgs, manifest: &Manifest, component: &Path) -> Result<Value, Stopped> {
    let stop = Stopped::at(Stage::Push);
    let found = super::manifest::find_version(component, &args.dir)
        .map_err(|e| stop(Failure::new("usage", e)))?;
    let from = found.file.strip_prefix(&args.dir).unwrap_or(&found.file);
    let client = Client::new(&args.conn);
    let pushed = push_component(
        &client,
        component,
        &manifest.name,
        &found.version,
        &VersionFrom::Manifest(from.to_path_buf()),
        Duration::from_secs(args.timeout),
    )
    .map_err(|(failure, exit)| Stopped {
        stage: Stage::Push,
        failure,
        exit,
    })?;
    say(
        args.conn.json,
        &format!(
            "push: {}",
            pushed.summary(&format!(" (version from {})", from.display()))
        ),
    );
    Ok(pushed.record)
}

/// A component the server holds and has compiled ([`push_component`]).
pub(super) struct Pushed {
    /// The version's record, `ready`.
    pub(super) record: Value,
    /// Stored by this push, rather than found with the same bytes.
    created: bool,
    /// From the upload's end to `ready`: the server's compilation.
    took: Duration,
}

impl Pushed {
    /// `NAME@VERSION uploaded{note}, sha256:…, N bytes, ready in 0.2s`,
    /// with the tier's note.
    pub(super) fn summary(&self, note: &str) -> String {
        let record = &self.record;
        let how = if self.created {
            "uploaded"
        } else {
            "already uploaded with the same bytes, kept"
        };
        format!(
            "{}@{} {how}{note}, sha256:{}, {} bytes, ready in {:.1}s{}",
            cell(&record["name"]),
            cell(&record["version"]),
            short_digest(&record["digest"]),
            cell(&record["size"]),
            self.took.as_secs_f64(),
            plugins::tier_note(record)
        )
    }
}

/// Uploads `component` as `name@version` ([`plugins::upload`]) and waits
/// at most `timeout` for the server to compile it
/// ([`plugins::compiled`]). A failure comes with its exit code: 1 the
/// server could not compile it, 124 it was still compiling at `timeout`, 2
/// any other error.
pub(super) fn push_component(
    client: &Client,
    component: &Path,
    name: &str,
    version: &str,
    from: &VersionFrom,
    timeout: Duration,
) -> Result<Pushed, (Failure, u8)> {
    let up = plugins::upload(client, component, name, version, from).map_err(|f| (f, 2))?;
    let started = Instant::now();
    let what = format!(
        "{}@{}",
        cell(&up.record["name"]),
        cell(&up.record["version"])
    );
    let record = plugins::compiled(client, up.record, timeout)
        .map_err(|f| (f, 2))?
        .ok_or_else(|| {
            let failure = Failure::new(
                "timeout",
                format!(
                    "{what} is still compiling after {}s (`ax plugin show {what}` to look \
                     again, then `ax deploy --no-build`)",
                    timeout.as_secs()
                ),
            );
            (failure, super::EXIT_WAIT_TIMED_OUT)
        })?;
    if record["status"] != "ready" {
        let failure = Failure::new(
            "compile_failed",
            format!("{what} did not compile: {}", cell(&record["error"])),
        );
        return Err((failure, 1));
    }
    Ok(Pushed {
        record,
        created: up.created,
        took: started.elapsed(),
    })
}

/// The steps of `spec` that run plugin `name` by an exact version or a
/// range that `version`, just pushed, is not: `(step, selector)`. A tag is
/// left out (moving it is a choice, `ax plugin tag`), and so is a range the
/// version is in, although a higher version in it would run instead.
fn not_following(spec: &TaskSpec, name: &str, version: &str) -> Vec<(String, String)> {
    spec.steps
        .iter()
        .filter(|s| s.plugin.name == name)
        .filter(|s| match &s.plugin.version {
            VersionSelector::Exact(v) => v != version,
            VersionSelector::Range(r) => !r.matches(version),
            VersionSelector::Tag(_) => false,
        })
        .map(|s| (s.name.clone(), s.plugin.version.to_string()))
        .collect()
}

/// `^MAJOR.MINOR` of a version: the range that follows its compatible
/// updates (`0.1.2` → `^0.1`, every `0.1.x`).
fn caret(version: &str) -> String {
    let mut parts = version.split(['.', '-', '+']);
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => format!("^{major}.{minor}"),
        _ => format!("^{version}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_naming_another_version_or_a_range_without_it_are_found() {
        let spec = crate::task::parse(
            "name: t\nsteps:\n  - { name: exact, plugin: greet@0.1.0 }\n  \
             - { name: same, plugin: greet@0.1.1 }\n  - { name: range, plugin: greet@^0.1 }\n  \
             - { name: old, plugin: greet@~0.0.9 }\n  - { name: tag, plugin: greet@stable }\n  \
             - { name: other, plugin: hello@1.0.0 }\n",
        )
        .unwrap();
        assert_eq!(
            not_following(&spec, "greet", "0.1.1"),
            vec![
                ("exact".to_owned(), "0.1.0".to_owned()),
                ("old".to_owned(), "~0.0.9".to_owned())
            ]
        );
        assert_eq!(caret("0.1.1"), "^0.1");
        assert_eq!(caret("2.3.0-rc.1"), "^2.3");
    }
}
