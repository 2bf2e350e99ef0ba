//! `ax dev --url`: each build of `ax dev` ([`crate::cli::dev`]) run on a
//! server instead of in the process. A cycle, after `ax dev` built the
//! component:
//!
//! 1. **push** it as a development version ([`dev_version`]: the project's
//!    version with the pre-release `dev.<unix ms>`, `0.1.0-dev.1765…`),
//!    through `ax deploy`'s push ([`super::deploy::push_component`]: the
//!    upload, then the server's compilation waited for);
//! 2. **apply** the project's task naming exactly that version for every
//!    reference to the project's plugin, without its time trigger
//!    ([`crate::task::for_development`], saved as `ax task apply` saves
//!    it), so only the runs `ax dev` starts run development code;
//! 3. **run** it as `ax trigger --wait` does ([`super::trigger::start`],
//!    [`super::trigger::wait_for`]) with the flags' input and params, and
//!    print the run and its logs as `ax dev` prints a local one
//!    ([`super::tasks::print_finished`]);
//! 4. **delete** the development version the task named before this cycle
//!    ([`previous`], read before the build), once the new one's run
//!    ended: development versions do not pile up against the tenant's
//!    plugin quota. The last one stays, named by the task, until `ax
//!    deploy` puts the project's version back (then `ax plugin delete`).
//!
//! Why a timestamp and not `dev.N` after the server's highest: no list to
//! read first, no race between two sessions, and it still orders as
//! pushed (docs/PLUGINS.md, "`ax dev --url`").

use std::cell::RefCell;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::deploy::push_component;
use super::http::{Body, Client, enc};
use super::output::{cell, items};
use super::plugins::VersionFrom;
use super::{Conn, Failure};
use crate::cli::local::LocalRun;
use crate::task::{PluginRef, VersionSelector};

/// How long the push waits at most for the server's compilation (`ax
/// deploy`'s default `--timeout`).
const COMPILE_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a run is waited for at most; Ctrl-C stops the wait sooner.
const RUN_TIMEOUT: Duration = Duration::from_secs(3600);

/// The server `ax dev --url` runs on.
pub(in crate::cli) struct Remote {
    client: Client,
    url: String,
    json: bool,
    /// The task and the development version it names since the last
    /// apply: what stays on the server when `ax dev` ends.
    last: RefCell<Option<(String, String)>>,
}

/// How a cycle on the server failed: the failure and the exit code of
/// `--once` (1 the server could not compile the component, 2 the rest).
pub(in crate::cli) struct Failed {
    pub(in crate::cli) failure: Failure,
    pub(in crate::cli) exit: u8,
}

impl Failed {
    fn other(failure: Failure) -> Self {
        Self { failure, exit: 2 }
    }
}

impl Remote {
    pub(in crate::cli) fn new(conn: &Conn) -> Self {
        Self {
            client: Client::new(conn),
            url: conn.url(),
            json: conn.json,
            last: RefCell::new(None),
        }
    }

    /// The server's URL, for messages.
    pub(in crate::cli) fn url(&self) -> &str {
        &self.url
    }

    /// What the session leaves on the server, for its last line: `task
    /// greet runs greet@0.1.0-dev.…`, and how to put the project's version
    /// back; none when nothing was applied.
    pub(in crate::cli) fn left(&self) -> Option<String> {
        let (task, version) = self.last.borrow().clone()?;
        Some(format!(
            "task {task} on {} runs the development version {version}: `ax deploy` puts \
             the project's version back, then `ax plugin delete {version}`",
            self.url
        ))
    }

    /// Before a build: the development versions of `plugin` that the
    /// server's task `task` names now (none when there is no such task), to
    /// delete after the next run. Asking first also finds an unreachable
    /// server before a build is spent on it.
    pub(in crate::cli) fn previous(&self, task: &str, plugin: &str) -> Result<Vec<String>, Failed> {
        match self.client.get(&format!("/v1/tasks/{}", enc(task))) {
            Ok(found) => Ok(development_versions(&found["spec"], plugin)),
            Err(f) if f.code == "not_found" => Ok(Vec::new()),
            Err(f) => Err(Failed::other(f)),
        }
    }

    /// Pushes `component` (built in `dir` for the plugin `plugin`) as a
    /// development version, applies the task of `what` naming it, runs
    /// it, prints the run, then deletes `previous`. The run's exit code (0
    /// succeeded, 1 not), or none when `stopped` answered true first.
    pub(in crate::cli) fn cycle(
        &self,
        dir: &Path,
        plugin: &str,
        component: &Path,
        what: &LocalRun,
        previous: &[String],
        stopped: &dyn Fn() -> bool,
    ) -> Result<Option<ExitCode>, Failed> {
        if let Some(name) = what.plugins.keys().next() {
            return Err(Failed::other(Failure::new(
                "usage",
                format!(
                    "--plugin {name}=…: with --url the task's other plugins are the server's; \
                     push them there (`ax plugin push`) and drop --plugin"
                ),
            )));
        }
        let found = super::manifest::find_version(component, dir)
            .map_err(|e| Failed::other(Failure::new("usage", e)))?;
        let from = found.file.strip_prefix(dir).unwrap_or(&found.file);
        let version = dev_version(&found.version, unix_ms()).map_err(|e| {
            Failed::other(Failure::new(
                "usage",
                format!("{}: version {e}", from.display()),
            ))
        })?;
        let pushed = push_component(
            &self.client,
            component,
            plugin,
            &version,
            &VersionFrom::Development,
            COMPILE_TIMEOUT,
        )
        .map_err(|(failure, exit)| Failed {
            failure,
            exit: if exit == 1 { 1 } else { 2 },
        })?;
        self.say(&format!(
            "push: {}",
            pushed.summary(&format!(
                " (a development version of {}'s {})",
                from.display(),
                found.version
            ))
        ));

        // The task, naming the version just pushed.
        let applied = crate::task::for_development(&what.text, plugin, &version)
            .map_err(|e| Failure::new("invalid", format!("{}: {e}", what.file.display())))
            .and_then(|text| super::tasks::apply_text(&self.client, &what.file, text));
        let applied = match applied {
            Ok(applied) => applied,
            Err(f) => {
                // Nothing names it: it would only take up the quota.
                self.delete(plugin, &version);
                return Err(Failed::other(f));
            }
        };
        let task = cell(&applied.task["name"]);
        *self.last.borrow_mut() = Some((task.clone(), format!("{plugin}@{version}")));
        self.say(&format!(
            "apply: task {task} {} naming {plugin}@{version}, without its time trigger",
            if applied.created {
                "created"
            } else {
                "replaced"
            }
        ));

        // The run.
        let mut body = serde_json::Map::new();
        if let Some(input) = &what.input {
            body.insert("input".into(), input.clone());
        }
        if let Some(params) = &what.params {
            body.insert("params".into(), Value::Object(params.clone()));
        }
        let (_, run) = super::trigger::start(&self.client, &task, body).map_err(Failed::other)?;
        let id = cell(&run["id"]);
        let run = match super::trigger::wait_for(&self.client, &id, run, RUN_TIMEOUT, stopped) {
            Err(_) if stopped() => return Ok(None),
            waited => waited.map_err(Failed::other)?,
        };
        let logs = self
            .client
            .get(&format!("/v1/runs/{}/logs", enc(&id)))
            .map_err(Failed::other)?;
        super::tasks::print_finished(&run, &logs, self.json);

        for old in previous.iter().filter(|v| **v != version) {
            self.delete(plugin, old);
        }
        Ok(Some(if run["status"] == "succeeded" {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }))
    }

    /// Deletes `plugin@version`, saying so; a refusal is a warning (the
    /// version stays, and the line says how to delete it later).
    fn delete(&self, plugin: &str, version: &str) {
        let path = format!("/v1/plugins/{}/{}", enc(plugin), enc(version));
        match self.client.call("DELETE", &path, Body::None) {
            Ok(_) => self.say(&format!(
                "dev: deleted {plugin}@{version}, the development version this one replaced"
            )),
            Err(f) if f.code == "not_found" => {}
            Err(f) => eprintln!(
                "warning: {plugin}@{version} stays on the server: {}: {} (`ax plugin delete \
                 {plugin}@{version}` to delete it)",
                f.code, f.message
            ),
        }
    }

    /// One of the cycle's lines: on stdout, or stderr when stdout is JSON.
    fn say(&self, line: &str) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

/// The development version of `version` pushed at `ms` (ms since the Unix
/// epoch): its pre-release `dev.MS` (`0.1.0` → `0.1.0-dev.1765000000000`),
/// or `PRE.dev.MS` after one it has (`1.0.0-rc.1` → `1.0.0-rc.1.dev.…`);
/// build metadata dropped. A pre-release orders below its release and
/// outside every range without one (`^0.1` does not run it), and a later
/// push orders above an earlier one.
fn dev_version(version: &str, ms: u128) -> Result<String, String> {
    let mut v = semver::Version::parse(version).map_err(|e| format!("`{version}`: {e}"))?;
    let pre = if v.pre.is_empty() {
        format!("dev.{ms}")
    } else {
        format!("{}.dev.{ms}", v.pre)
    };
    v.pre = semver::Prerelease::new(&pre).map_err(|e| format!("`{version}`: {e}"))?;
    v.build = semver::BuildMetadata::EMPTY;
    Ok(v.to_string())
}

/// Whether `version` is one [`dev_version`] makes.
fn is_dev_version(version: &str) -> bool {
    let Ok(v) = semver::Version::parse(version) else {
        return false;
    };
    let parts: Vec<&str> = v.pre.as_str().split('.').collect();
    matches!(parts.as_slice(), [.., "dev", ms] if !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()))
}

/// The development versions of `plugin` that a task's spec (the API's
/// `spec`) names exactly, in its steps.
fn development_versions(spec: &Value, plugin: &str) -> Vec<String> {
    let mut versions: Vec<String> = items(&spec["steps"])
        .filter_map(|s| s["plugin"].as_str()?.parse::<PluginRef>().ok())
        .filter(|r| r.name == plugin)
        .filter_map(|r| match r.version {
            VersionSelector::Exact(v) if is_dev_version(&v) => Some(v),
            _ => None,
        })
        .collect();
    versions.sort();
    versions.dedup();
    versions
}

/// Now, in ms since the Unix epoch.
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_development_version_is_a_pre_release_that_orders_as_pushed() {
        assert_eq!(dev_version("0.1.0", 17).unwrap(), "0.1.0-dev.17");
        assert_eq!(
            dev_version("1.0.0-rc.1+b5", 17).unwrap(),
            "1.0.0-rc.1.dev.17"
        );
        assert!(dev_version("1.0", 17).is_err());
        let (a, b) = (
            dev_version("0.1.0", 9).unwrap(),
            dev_version("0.1.0", 10).unwrap(),
        );
        assert!(semver::Version::parse(&a).unwrap() < semver::Version::parse(&b).unwrap());
        let range = semver::VersionReq::parse("^0.1").unwrap();
        assert!(!range.matches(&semver::Version::parse(&b).unwrap()));
        assert!(is_dev_version(&b));
        assert!(is_dev_version("1.0.0-rc.1.dev.17"));
        assert!(!is_dev_version("0.1.0"));
        assert!(!is_dev_version("0.1.0-dev"));
        assert!(!is_dev_version("0.1.0-rc.1"));
    }

    #[test]
    fn the_development_versions_a_task_names_are_found() {
        let spec = json!({"steps": [
            {"name": "a", "plugin": "greet@0.1.0-dev.5"},
            {"name": "b", "plugin": "greet@0.1.0"},
            {"name": "c", "plugin": "greet@^0.1"},
            {"name": "d", "plugin": "other@0.1.0-dev.6"},
            {"name": "e", "plugin": "greet@0.1.0-dev.5"},
        ]});
        assert_eq!(development_versions(&spec, "greet"), ["0.1.0-dev.5"]);
        assert!(development_versions(&Value::Null, "greet").is_empty());
    }
}
