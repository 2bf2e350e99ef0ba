//! Where `ax plugin push` takes the version from when `--version` is not
//! given: the project's own manifest, the version the author already keeps.
//!
//! Looked at, in order: the current directory, the `.wasm` file's directory,
//! and, when the file sits under a `target/` folder (cargo's
//! `target/wasm32-wasip2/release/`), the folder holding that `target/`. In
//! each, `Cargo.toml` (`[package] version`), `package.json` (`"version"`),
//! `pyproject.toml` (`[project] version`); the first version found wins. A
//! version that is not a plain string there (`version.workspace = true`,
//! `dynamic = ["version"]`) counts as none. Nothing found is an error that
//! names every file looked at and why it gave nothing.
//!
//! The TOML files are read line by line for one key of one table, not fully
//! parsed: enough for `version = "1.2.3"` as cargo, `cargo new`, poetry's
//! `[project]` and hatch write it, without a TOML dependency in the host.

use std::path::{Path, PathBuf};

/// A version found in a manifest.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// The version, as written.
    pub(super) version: String,
    /// The manifest it came from.
    pub(super) file: PathBuf,
}

/// The manifests read, with where each keeps its version.
const MANIFESTS: &[(&str, &str)] = &[
    ("Cargo.toml", "[package] version"),
    ("package.json", "\"version\""),
    ("pyproject.toml", "[project] version"),
];

/// The project version for `wasm` pushed from `cwd`; see the module docs.
/// The error lists the files looked at.
pub(super) fn find_version(wasm: &Path, cwd: &Path) -> Result<Found, String> {
    let mut looked = Vec::new();
    for dir in project_dirs(wasm, cwd) {
        for (name, key) in MANIFESTS {
            let file = dir.join(name);
            let text = match std::fs::read_to_string(&file) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    looked.push(format!("{} (absent)", file.display()));
                    continue;
                }
                Err(e) => {
                    looked.push(format!("{} (unreadable: {e})", file.display()));
                    continue;
                }
            };
            let version = match *name {
                "Cargo.toml" => toml_string(&text, "package", "version"),
                "pyproject.toml" => toml_string(&text, "project", "version"),
                _ => serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["version"].as_str().map(str::to_owned)),
            };
            match version.filter(|v| !v.is_empty()) {
                Some(version) => return Ok(Found { version, file }),
                None => looked.push(format!("{} (no {key} string)", file.display())),
            }
        }
    }
    Err(format!(
        "no --version given and no project version found; looked at {}: pass --version \
         (e.g. --version 0.1.0)",
        looked.join(", ")
    ))
}

/// The folders a manifest is looked for in, in order, without repeats.
fn project_dirs(wasm: &Path, cwd: &Path) -> Vec<PathBuf> {
    let beside = match wasm.parent() {
        Some(p) if !p.as_os_str().is_empty() => cwd.join(p),
        _ => cwd.to_path_buf(),
    };
    let above_target = beside
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "target"))
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in [Some(cwd.to_path_buf()), Some(beside), above_target]
        .into_iter()
        .flatten()
    {
        // `.` and the file's folder are often one folder written two ways.
        let key = |d: &Path| d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        if !dirs.iter().any(|d| key(d) == key(&dir)) {
            dirs.push(dir);
        }
    }
    dirs
}

/// The string value of `key` in the TOML table `[table]`, read line by line;
/// none when the table or key is missing or the value is not a plain string.
fn toml_string(text: &str, table: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[') {
            inside =
                !header.starts_with('[') && header.split(']').next().map(str::trim) == Some(table);
            continue;
        }
        if !inside {
            continue;
        }
        let Some((k, value)) = line.split_once('=') else {
            continue;
        };
        if k.trim() != key {
            continue;
        }
        let value = value.trim();
        let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let rest = &value[1..];
        return rest.find(quote).map(|end| rest[..end].to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_versions_are_read_from_their_table_only() {
        let cargo = "[workspace]\nversion = \"9.9.9\"\n\n[package]\nname = \"x\"\n\
                     version = \"0.3.1\" # bumped\n\n[dependencies]\nversion = \"1\"\n";
        assert_eq!(
            toml_string(cargo, "package", "version").as_deref(),
            Some("0.3.1")
        );
        assert_eq!(
            toml_string("[project]\nversion='2.0.0'\n", "project", "version").as_deref(),
            Some("2.0.0")
        );
        assert_eq!(
            toml_string(
                "[package]\nversion.workspace = true\n",
                "package",
                "version"
            ),
            None
        );
        assert_eq!(
            toml_string("[[package]]\nversion = \"1.0.0\"\n", "package", "version"),
            None
        );
    }

    #[test]
    fn the_current_directory_comes_first_then_the_file_and_its_project() {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = tmp.path().join("here");
        let project = tmp.path().join("proj");
        let release = project.join("target/wasm32-wasip2/release");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&release).unwrap();
        std::fs::write(
            project.join("Cargo.toml"),
            "[package]\nname = \"p\"\nversion = \"0.2.0\"\n",
        )
        .unwrap();
        let wasm = release.join("p.wasm");
        let found = find_version(&wasm, &cwd).unwrap();
        assert_eq!(found.version, "0.2.0");
        assert_eq!(found.file, project.join("Cargo.toml"));

        std::fs::write(cwd.join("package.json"), r#"{"version": "1.4.0"}"#).unwrap();
        assert_eq!(find_version(&wasm, &cwd).unwrap().version, "1.4.0");
    }

    #[test]
    fn no_version_names_every_file_looked_at() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("pyproject.toml"),
            "[project]\ndynamic = [\"version\"]\n",
        )
        .unwrap();
        let err = find_version(Path::new("x.wasm"), tmp.path()).unwrap_err();
        for name in ["Cargo.toml (absent)", "package.json (absent)"] {
            assert!(err.contains(name), "{err}");
        }
        assert!(
            err.contains("pyproject.toml (no [project] version string)"),
            "{err}"
        );
        assert!(err.contains("pass --version"), "{err}");
    }
}
