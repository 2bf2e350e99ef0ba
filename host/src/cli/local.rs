//! `ax task run -f FILE --local`: one run of a whole task in this process,
//! against local plugin files, with no server.
//!
//! It starts the host's core ([`crate::server::start_core`]: the real
//! scheduler and the wasm runtime, without HTTP) on a memory store, uploads
//! the plugin files the task names into it, saves the task without its
//! time trigger (checked as written, but saved without `cron`, `every`,
//! `at`, `delay`: nothing but the one run asked for starts), triggers that
//! run and waits for its end. So
//! conditions, trigger rules, retries, params and templates behave exactly
//! as on a server: they are the same code. What it prints is made by the
//! client's `ax run show` and `ax logs` ([`super::client`]); this module
//! only runs and answers the run and its logs as the API would.
//!
//! A plugin the task names (`name@1.2.0`, `name@^1`, `name@stable`) is
//! read from `--plugin NAME=PATH`, else, for the plugin of the project the
//! task file is in, from the `build.output` of its `ax.yaml`
//! ([`super::build::Manifest`]). It is uploaded under the versions the task
//! names (a range gets the project's version when it matches it, as read
//! from its Cargo.toml, package.json or pyproject.toml, else the lowest
//! version it matches; a tag points at one), so every reference resolves
//! to the local file. Components are compiled
//! as `ax exec` compiles them ([`super::exec::open_runtime`]: Winch for
//! large ones, the local artifact cache).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::build::{self, Manifest};
use crate::api::views::{LogList, RunView, Warning};
use crate::model::RunStatus;
use crate::scheduler::TriggerRequest;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use crate::task::{PluginRef, TaskSpec, VersionSelector};
use crate::tenant::DEFAULT_TENANT;

/// What `ax task run --local` is asked to run.
#[derive(Debug)]
pub(super) struct LocalRun {
    /// The definition file (`-`: stdin, read by the caller).
    pub(super) file: PathBuf,
    /// The definition's text.
    pub(super) text: String,
    /// The parsed definition.
    pub(super) spec: TaskSpec,
    /// `--plugin NAME=PATH`, by name.
    pub(super) plugins: BTreeMap<String, PathBuf>,
    /// The trigger input.
    pub(super) input: Option<Value>,
    /// Values of the task's params.
    pub(super) params: Option<serde_json::Map<String, Value>>,
    /// Where compiled artifacts are cached (`ax exec`'s default).
    pub(super) cache_dir: Option<PathBuf>,
    /// Cranelift for every component (`ax exec --optimized`).
    pub(super) optimized: bool,
}

/// How a local run ended: the API's views of the run and of its logs.
#[derive(Debug)]
pub(super) struct Finished {
    /// The run (`GET /v1/runs/{id}`'s JSON).
    pub(super) run: Value,
    /// Its attempts' logs (`GET /v1/runs/{id}/logs`'s JSON).
    pub(super) logs: Value,
    /// Whether it succeeded.
    pub(super) succeeded: bool,
}

/// Why a local run could not be made.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// A plugin the task names has no local file.
    #[error(
        "step `{step}` runs plugin `{plugin}`, which has no local file: pass --plugin {name}=PATH.wasm{hint}"
    )]
    Unresolved {
        /// The first step naming it.
        step: String,
        /// The reference as written.
        plugin: String,
        /// The plugin's name.
        name: String,
        /// What the project folder offered instead, if anything.
        hint: String,
    },
    /// The project's component is not built.
    #[error(
        "plugin `{name}` is the project's (`{manifest}`), but {path} does not exist: run `ax build` first, or pass --plugin {name}=PATH.wasm"
    )]
    NotBuilt {
        /// The plugin's name.
        name: String,
        /// The manifest.
        manifest: String,
        /// Its `build.output`.
        path: String,
    },
    /// The project's manifest could not be read.
    #[error(transparent)]
    Manifest(#[from] build::Error),
    /// A reference that no version can be made for.
    #[error("{0}")]
    Usage(String),
    /// The definition was refused (as `ax task apply` would be).
    #[error("{file}: {source}")]
    Invalid {
        /// The definition file.
        file: String,
        /// Why.
        source: crate::service::Error,
    },
    /// Anything else (reading a file, compiling, the core).
    #[error(transparent)]
    Host(#[from] anyhow::Error),
}

impl Error {
    /// The code `error: CODE: message` prints.
    pub(super) fn code(&self) -> &'static str {
        match self {
            Error::Unresolved { .. } | Error::NotBuilt { .. } | Error::Usage(_) => "usage",
            Error::Manifest(_) | Error::Invalid { .. } => "invalid",
            Error::Host(_) => "local",
        }
    }
}

/// How often the run is read back while it goes on (a memory store read).
const POLL: Duration = Duration::from_millis(20);

/// The biggest component a local run takes: the author's own files, so the
/// server's upload limit (32 MiB by default) does not apply.
const MAX_PLUGIN_MB: usize = 1 << 10;

/// What local runs share: an async runtime and the wasm runtime, whose
/// loaded components stay in memory between runs (`ax dev` keeps one for
/// its whole session, so a component that did not change is not loaded
/// again). Each run still gets a core of its own on a new memory store.
pub(super) struct Host {
    /// Drives the core of each run.
    tokio: tokio::runtime::Runtime,
    /// The sandbox, opened as `ax exec` opens it.
    wasm: crate::runtime::Runtime,
}

impl Host {
    /// Opens the runtimes: artifacts cached in `cache_dir` (`ax exec`'s
    /// default when `None`), Cranelift for every component when `optimized`.
    pub(super) fn new(cache_dir: Option<PathBuf>, optimized: bool) -> Result<Self, Error> {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let wasm = super::exec::open_runtime(cache_dir, optimized)?;
        Ok(Self { tokio, wasm })
    }

    /// Runs `what`; blocks until the run ended.
    pub(super) fn run(&self, what: &LocalRun) -> Result<Finished, Error> {
        self.tokio.block_on(run(&self.wasm, what))
    }

    /// Runs `what` unless `stop` fires first (`None` then: the run is
    /// dropped, as a process ending drops it).
    pub(super) fn run_or_stop(
        &self,
        what: &LocalRun,
        stop: &CancellationToken,
    ) -> Option<Result<Finished, Error>> {
        self.tokio.block_on(async {
            tokio::select! {
                finished = run(&self.wasm, what) => Some(finished),
                () = stop.cancelled() => None,
            }
        })
    }

    /// A token that fires on Ctrl-C (SIGINT), which then no longer ends
    /// the process: the caller stops when it sees the token.
    pub(super) fn on_ctrl_c(&self) -> CancellationToken {
        let stop = CancellationToken::new();
        let fire = stop.clone();
        self.tokio.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                fire.cancel();
            }
        });
        stop
    }
}

/// Runs `what` on runtimes of its own; blocks until the run ended.
pub(super) fn run_blocking(what: LocalRun) -> Result<Finished, Error> {
    Host::new(what.cache_dir.clone(), what.optimized)?.run(&what)
}

/// The local file of every plugin the task names, by name, with the
/// project's version for the project's own plugin (what `ax plugin push`
/// reads from its Cargo.toml, package.json or pyproject.toml), so a range
/// resolves to the version that is built.
fn resolve(what: &LocalRun) -> Result<BTreeMap<String, (PathBuf, Option<String>)>, Error> {
    let dir = match what.file.parent() {
        Some(p) if !p.as_os_str().is_empty() && what.file.as_os_str() != "-" => p,
        _ => Path::new("."),
    };
    // Read only when a plugin needs it: a task run with --plugin for every
    // plugin works in a folder with a broken or no manifest.
    let mut project: Option<Option<Manifest>> = None;
    let mut files = BTreeMap::new();
    for step in &what.spec.steps {
        let name = &step.plugin.name;
        if files.contains_key(name) {
            continue;
        }
        if let Some(path) = what.plugins.get(name) {
            files.insert(name.clone(), (path.clone(), None));
            continue;
        }
        if project.is_none() {
            project = Some(match Manifest::read(dir) {
                Ok(m) => Some(m),
                Err(build::Error::NoManifest(_)) => None,
                Err(e) => return Err(e.into()),
            });
        }
        let manifest = project.as_ref().and_then(Option::as_ref);
        match manifest {
            Some(m) if &m.name == name => {
                let path = m.output_in(dir)?;
                if !path.is_file() {
                    return Err(Error::NotBuilt {
                        name: name.clone(),
                        manifest: dir.join(build::MANIFEST).display().to_string(),
                        path: path.display().to_string(),
                    });
                }
                let version = super::client::project_version(&path, dir);
                files.insert(name.clone(), (path, version));
            }
            _ => {
                let hint = match manifest {
                    Some(m) => format!(
                        " ({} in {} builds `{}`)",
                        build::MANIFEST,
                        dir.display(),
                        m.name
                    ),
                    None => format!(" (no {} in {})", build::MANIFEST, dir.display()),
                };
                return Err(Error::Unresolved {
                    step: step.name.clone(),
                    plugin: format!("{name}@{}", step.plugin.version),
                    name: name.clone(),
                    hint,
                });
            }
        }
    }
    Ok(files)
}

/// The versions to upload one plugin's file under, and the tags to point
/// at one of them, so that each of `refs` resolves to it: the exact
/// versions named, and `known` (the project's version of the file) when a
/// range matches it; for a range none of them matches, the lowest version
/// it names that it matches; a tag points at the first version (`0.0.0`
/// when the task names none).
fn versions_for<'a>(
    refs: impl IntoIterator<Item = &'a PluginRef>,
    known: Option<&str>,
) -> Result<(BTreeSet<String>, BTreeSet<String>), String> {
    let refs: Vec<&PluginRef> = refs.into_iter().collect();
    let mut versions: BTreeSet<String> = refs
        .iter()
        .filter_map(|r| r.version.exact().map(str::to_owned))
        .collect();
    if let Some(known) = known {
        let in_a_range = refs
            .iter()
            .any(|r| matches!(&r.version, VersionSelector::Range(range) if range.matches(known)));
        if in_a_range {
            versions.insert(known.to_owned());
        }
    }
    let mut tags = BTreeSet::new();
    for r in &refs {
        match &r.version {
            VersionSelector::Exact(_) => {}
            VersionSelector::Tag(t) => {
                tags.insert(t.clone());
            }
            VersionSelector::Range(range) => {
                if versions.iter().any(|v| range.matches(v)) {
                    continue;
                }
                let version = version_in(range.text()).ok_or_else(|| {
                    format!(
                        "plugin `{}@{}`: no version to run the local file as; name an exact version in the task",
                        r.name,
                        range.text()
                    )
                })?;
                versions.insert(version);
            }
        }
    }
    if !tags.is_empty() && versions.is_empty() {
        versions.insert("0.0.0".to_owned());
    }
    Ok((versions, tags))
}

/// The lowest version a range's comparators name that the range matches
/// (`^0.1` → `0.1.0`, `>=1.2, <2` → `1.2.0`, `1.x` → `1.0.0`), else `0.0.0`
/// when it matches that (`<2`); `None` when neither does (`>1.2`).
fn version_in(range: &str) -> Option<String> {
    let req = semver::VersionReq::parse(range).ok()?;
    let mut candidates: Vec<semver::Version> = req
        .comparators
        .iter()
        .map(|c| semver::Version {
            major: c.major,
            minor: c.minor.unwrap_or(0),
            patch: c.patch.unwrap_or(0),
            pre: c.pre.clone(),
            build: semver::BuildMetadata::EMPTY,
        })
        .collect();
    candidates.push(semver::Version::new(0, 0, 0));
    candidates.sort();
    candidates
        .into_iter()
        .find(|v| req.matches(v))
        .map(|v| v.to_string())
}

async fn run(runtime: &crate::runtime::Runtime, what: &LocalRun) -> Result<Finished, Error> {
    let files = resolve(what)?;
    let mut uploads = Vec::new();
    for (name, (path, known)) in &files {
        let refs = what
            .spec
            .steps
            .iter()
            .filter(|s| &s.plugin.name == name)
            .map(|s| &s.plugin);
        let (versions, tags) = versions_for(refs, known.as_deref()).map_err(Error::Usage)?;
        uploads.push((name, path, versions, tags));
    }
    let mut bytes_of = BTreeMap::new();
    for (name, path, _, _) in &uploads {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        // Loaded here, so the upload below finds it ready and the output
        // says how it was compiled (or that it came from the cache).
        super::exec::load_plugin(runtime, bytes.clone(), &path.display().to_string()).await?;
        bytes_of.insert(name.to_string(), bytes);
    }
    let config = crate::config::Config {
        max_plugin_mb: MAX_PLUGIN_MB,
        plugin_quota_mb: (MAX_PLUGIN_MB as u64) * 16,
        ..crate::config::Config::default()
    };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let shutdown = CancellationToken::new();
    let core = crate::server::start_core(&config, store, runtime.clone(), shutdown.clone()).await?;
    let finished = run_on(&core.ax, what, &uploads, &bytes_of).await;
    shutdown.cancel();
    let _ = core.scheduler.await;
    finished
}

/// Uploads, saves, triggers and waits, on a started core.
async fn run_on(
    ax: &crate::service::Ax,
    what: &LocalRun,
    uploads: &[(&String, &PathBuf, BTreeSet<String>, BTreeSet<String>)],
    bytes_of: &BTreeMap<String, Vec<u8>>,
) -> Result<Finished, Error> {
    let tenant = DEFAULT_TENANT;
    let host = |e: crate::service::Error, what: String| Error::Host(anyhow::anyhow!("{what}: {e}"));
    for (name, _, versions, tags) in uploads {
        for version in versions {
            ax.upload_plugin(tenant, name, version, bytes_of[name.as_str()].clone())
                .await
                .map_err(|e| host(e, format!("loading plugin {name}@{version}")))?;
        }
        if let Some(first) = versions.first() {
            for tag in tags {
                ax.set_plugin_tag(tenant, name, tag, first)
                    .await
                    .map_err(|e| host(e, format!("tagging plugin {name}@{first} {tag}")))?;
            }
        }
    }
    let invalid = |source| Error::Invalid {
        file: what.file.display().to_string(),
        source,
    };
    let task = &what.spec.name;
    // Checked as written (a time trigger's own rules, params it needs
    // defaults for), then saved without what fires it by time: the task's
    // own schedule must not start a run beside the one asked for, not even
    // in the moment between saving and pausing it.
    let spec_error = |e: crate::task::SpecError| invalid(e.into());
    crate::task::load(&what.text, &crate::task::Caps::UNLIMITED).map_err(spec_error)?;
    crate::schedule::Trigger::compile(what.spec.trigger.as_ref(), chrono::Utc::now()).map_err(
        |e| {
            invalid(crate::service::Error::Invalid {
                path: Some("trigger".into()),
                message: e.to_string(),
            })
        },
    )?;
    let saved = crate::task::without_time_trigger(&what.text).map_err(spec_error)?;
    ax.put_task(tenant, task, &saved).await.map_err(invalid)?;
    let (run, _) = ax
        .trigger(TriggerRequest {
            tenant: tenant.into(),
            task: task.as_str().into(),
            input: what.input.clone(),
            params: what.params.clone(),
            idempotency_key: None,
            priority: None,
            actor: "local".into(),
        })
        .await
        .map_err(invalid)?;
    for w in Warning::of_trigger(&run) {
        eprintln!("warning: {}", w.message);
    }
    let id = run.id.to_string();
    let run = loop {
        let run = ax
            .get_run(tenant, &id)
            .map_err(|e| host(e, format!("reading run {id}")))?;
        if run.status.is_terminal() {
            break run;
        }
        tokio::time::sleep(POLL).await;
    };
    let logs = ax
        .run_logs(tenant, &id)
        .map_err(|e| host(e, format!("reading the logs of run {id}")))?;
    let succeeded = run.status == RunStatus::Succeeded;
    let to_json = |v: Result<Value, serde_json::Error>| v.context("writing the run as JSON");
    Ok(Finished {
        run: to_json(serde_json::to_value(RunView::from(run)))?,
        logs: to_json(serde_json::to_value(LogList { attempts: logs }))?,
        succeeded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(texts: &[&str]) -> Vec<PluginRef> {
        texts
            .iter()
            .map(|t| {
                let (name, version) = t.split_once('@').unwrap();
                PluginRef {
                    name: name.into(),
                    version: version.parse().unwrap(),
                }
            })
            .collect()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_range_gets_the_lowest_version_it_names_and_matches() {
        assert_eq!(version_in("^0.1").as_deref(), Some("0.1.0"));
        assert_eq!(version_in(">=1.2, <2").as_deref(), Some("1.2.0"));
        assert_eq!(version_in("1.x").as_deref(), Some("1.0.0"));
        assert_eq!(version_in("~2.3.4").as_deref(), Some("2.3.4"));
        assert_eq!(version_in("<2").as_deref(), Some("0.0.0"));
        assert_eq!(version_in(">1.2.0"), None);
    }

    #[test]
    fn every_reference_of_a_plugin_resolves_to_one_of_its_versions() {
        let r = refs(&["p@1.0.0", "p@^1", "p@stable"]);
        let (versions, tags) = versions_for(&r, None).unwrap();
        assert_eq!(versions, set(&["1.0.0"]), "the exact one serves the range");
        assert_eq!(tags, set(&["stable"]));
        let r = refs(&["p@^0.2", "p@dev"]);
        assert_eq!(
            versions_for(&r, None).unwrap(),
            (set(&["0.2.0"]), set(&["dev"]))
        );
        let r = refs(&["p@dev"]);
        assert_eq!(
            versions_for(&r, None).unwrap(),
            (set(&["0.0.0"]), set(&["dev"]))
        );
        let r = refs(&["p@>1.2.0"]);
        let e = versions_for(&r, None).unwrap_err();
        assert!(e.contains("name an exact version"), "{e}");
    }

    #[test]
    fn a_range_runs_the_projects_own_version_when_it_matches() {
        let r = refs(&["p@^0.1"]);
        let got = versions_for(&r, Some("0.1.3")).unwrap();
        assert_eq!(got, (set(&["0.1.3"]), set(&[])));
        // Out of the range: the range's own lowest version, as without it.
        let got = versions_for(&r, Some("0.2.0")).unwrap();
        assert_eq!(got, (set(&["0.1.0"]), set(&[])));
        // An exact reference alone does not need it.
        let got = versions_for(&refs(&["p@0.1.0"]), Some("0.1.3")).unwrap();
        assert_eq!(got, (set(&["0.1.0"]), set(&[])));
    }
}
