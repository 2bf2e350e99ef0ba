//! `ax build [--dir PATH]`: one build command for every plugin language. It
//! reads the project's manifest, `ax.yaml` (written by `ax plugin new`, see
//! [`super::scaffold`]), runs its `build.command` with `sh -c` in the project
//! folder, checks that `build.output` exists and prints where the component
//! is. It knows nothing of cargo, componentize-py or npm: the manifest says
//! what to run, so a project built some other way only edits two lines.
//!
//! The manifest:
//!
//! ```yaml
//! name: greet                 # the plugin (and sample task) name
//! lang: rust                  # rust | python | js
//! build:
//!   command: cargo build --release --target wasm32-wasip2
//!   output: ${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/greet.wasm
//! ```
//!
//! `output` is relative to the project folder (or absolute) and may name
//! environment variables as `${NAME}` or `${NAME:-default}` (the shell's
//! forms; nothing else is expanded), so cargo's `CARGO_TARGET_DIR` moves the
//! Rust output as it moves cargo's. Unknown fields are refused, so a typo is
//! not silently ignored. `ax task run --local` reads the same manifest to
//! find the component of a plugin its task names.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use serde::Deserialize;

use super::scaffold::Lang;

/// The manifest's file name, in the project folder.
pub(super) const MANIFEST: &str = "ax.yaml";

/// `ax build`.
#[derive(Debug, Args)]
pub(super) struct BuildArgs {
    /// The project folder, holding `ax.yaml`.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

/// A plugin project's `ax.yaml`; see the module docs.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct Manifest {
    /// The plugin's name (what `ax plugin push` derives from the file name).
    pub(super) name: String,
    /// The language the project is written in.
    pub(super) lang: Lang,
    /// How the component is built.
    pub(super) build: BuildSpec,
}

/// The `build:` section of [`Manifest`].
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct BuildSpec {
    /// A shell command (`sh -c`), run in the project folder.
    pub(super) command: String,
    /// The component the command writes (see the module docs).
    pub(super) output: String,
}

/// Why a project could not be built.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// No manifest in the folder.
    #[error(
        "no {MANIFEST} in {0} (`ax plugin new` writes one; run `ax build` in the project folder or pass --dir)"
    )]
    NoManifest(PathBuf),
    /// The manifest could not be read or parsed.
    #[error("{path}: {message}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The build command could not start or failed.
    #[error("`{command}` {how}")]
    Command {
        /// The command.
        command: String,
        /// How it ended.
        how: String,
    },
    /// The command succeeded but the output is not there.
    #[error("`{command}` succeeded but wrote no {path} (the `build.output` of {MANIFEST})")]
    NoOutput {
        /// The command.
        command: String,
        /// Where the output was expected.
        path: PathBuf,
    },
}

impl Manifest {
    /// The manifest of the project in `dir`.
    pub(super) fn read(dir: &Path) -> Result<Self, Error> {
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NoManifest(dir.to_path_buf()));
            }
            Err(e) => {
                return Err(Error::Manifest {
                    path,
                    message: e.to_string(),
                });
            }
        };
        Self::parse(&text).map_err(|message| Error::Manifest { path, message })
    }

    /// Parses a manifest's text.
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        let manifest: Self = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        if manifest.build.command.trim().is_empty() {
            return Err("build.command is empty".into());
        }
        if manifest.build.output.trim().is_empty() {
            return Err("build.output is empty".into());
        }
        Ok(manifest)
    }

    /// The component's path for the project in `dir`, environment variables
    /// expanded (module docs).
    pub(super) fn output_in(&self, dir: &Path) -> Result<PathBuf, Error> {
        let output =
            expand(&self.build.output, |name| std::env::var(name).ok()).map_err(|message| {
                Error::Manifest {
                    path: dir.join(MANIFEST),
                    message: format!("build.output: {message}"),
                }
            })?;
        Ok(dir.join(output))
    }
}

impl Manifest {
    /// The line before a build: `building NAME (LANG): COMMAND`.
    pub(super) fn building(&self) -> String {
        format!(
            "building {} ({}): {}",
            self.name,
            self.lang.as_str(),
            self.build.command
        )
    }

    /// The line after a build begun at `started` that wrote `output`:
    /// `built NAME in 4.2s: /abs/path.wasm (0.1 MiB)`.
    pub(super) fn built(&self, output: &Path, started: Instant) -> String {
        let shown = std::path::absolute(output).unwrap_or_else(|_| output.to_path_buf());
        let bytes = std::fs::metadata(&shown).map_or(0, |m| m.len());
        format!(
            "built {} in {:.1}s: {} ({:.1} MiB)",
            self.name,
            started.elapsed().as_secs_f64(),
            shown.display(),
            bytes as f64 / f64::from(1 << 20)
        )
    }
}

/// `text` with `${NAME}` and `${NAME:-default}` replaced by `var(NAME)`
/// (the default when it is unset or empty, as the shell does); an unset
/// variable without a default is an error, so a path never silently loses
/// a part. Any other `$` is kept.
fn expand(text: &str, var: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let inner = &rest[start + 2..];
        let end = inner
            .find('}')
            .ok_or_else(|| format!("`${{` without `}}` in `{text}`"))?;
        let (name, default) = match inner[..end].split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (&inner[..end], None),
        };
        let valid = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !valid {
            return Err(format!("`{name}` is not an environment variable name"));
        }
        match (var(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!(
                    "${{{name}}} is not set (write ${{{name}:-DEFAULT}} for a fallback)"
                ));
            }
        }
        rest = &inner[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Runs the manifest's build in `dir`; the component's path. With `json`
/// (a command whose stdout is one JSON object: `ax dev --json`, `ax deploy
/// --json`) what the build prints on its stdout (componentize-py's
/// "Component built successfully") goes to stderr instead.
pub(super) fn build(dir: &Path, manifest: &Manifest, json: bool) -> Result<PathBuf, Error> {
    let output = manifest.output_in(dir)?;
    let command = &manifest.build.command;
    let fail = |how: String| Error::Command {
        command: command.clone(),
        how,
    };
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c").arg(command).current_dir(dir);
    if json {
        sh.stdout(std::io::stderr());
    }
    let status = sh
        .status()
        .map_err(|e| fail(format!("could not start: {e}")))?;
    if !status.success() {
        return Err(fail(match status.code() {
            Some(code) => format!("failed (exit {code})"),
            None => format!("failed ({status})"),
        }));
    }
    if !output.is_file() {
        return Err(Error::NoOutput {
            command: command.clone(),
            path: output,
        });
    }
    Ok(output)
}

/// `ax build`: exit 0 built, 1 the build failed, 2 no usable manifest.
pub(super) fn run(args: &BuildArgs) -> ExitCode {
    let manifest = match Manifest::read(&args.dir) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{}", manifest.building());
    let started = Instant::now();
    match build(&args.dir, &manifest, false) {
        Ok(output) => {
            println!("{}", manifest.built(&output, started));
            ExitCode::SUCCESS
        }
        Err(e @ Error::Manifest { .. }) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "T" => Some("/tmp/t".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn output_expands_variables_with_and_without_defaults() {
        assert_eq!(expand("${T}/a.wasm", env).unwrap(), "/tmp/t/a.wasm");
        assert_eq!(
            expand("${T:-target}/w/a.wasm", env).unwrap(),
            "/tmp/t/w/a.wasm"
        );
        assert_eq!(
            expand("${NONE:-target}/w/a.wasm", env).unwrap(),
            "target/w/a.wasm"
        );
        assert_eq!(expand("${EMPTY:-x}", env).unwrap(), "x");
        assert_eq!(expand("a$b.wasm", env).unwrap(), "a$b.wasm");
        assert!(expand("${NONE}/a.wasm", env).unwrap_err().contains("NONE"));
        assert!(expand("${T/a.wasm", env).is_err());
        assert!(expand("${1X:-a}", env).is_err());
        assert!(expand("${}", env).is_err());
    }

    #[test]
    fn a_manifest_parses_and_refuses_unknown_fields() {
        let m = Manifest::parse(
            "name: greet\nlang: python\nbuild:\n  command: ./build.sh\n  output: greet.wasm\n",
        )
        .unwrap();
        assert_eq!(m.lang, Lang::Python);
        assert_eq!(m.build.output, "greet.wasm");
        let typo = Manifest::parse(
            "name: g\nlang: js\nbuild:\n  comand: x\n  command: y\n  output: g.wasm\n",
        );
        assert!(typo.unwrap_err().contains("comand"));
        assert!(Manifest::parse("name: g\nlang: go\nbuild: {command: x, output: y}\n").is_err());
        assert!(
            Manifest::parse("name: g\nlang: js\nbuild: {command: ' ', output: y}\n")
                .unwrap_err()
                .contains("command")
        );
    }
}
