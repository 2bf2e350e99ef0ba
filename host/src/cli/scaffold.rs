//! `ax plugin new NAME --lang rust|python|js [--dir PATH]`: writes a plugin
//! project that builds with one command outside this repository.
//!
//! Every project gets the world (`wit/ax.wit`, compiled into this binary from
//! the repository's one `wit/` folder, so it never drifts from what the host
//! checks), a sample task (`task.yaml`), a README with the build, local test
//! (`ax exec`) and server commands, and the sample plugin: it greets
//! `input.name`, reads the `greeting` config value, logs and reports progress,
//! and returns a fatal error for bad input — the same in each language.
//!
//! - `rust`: a crate depending on `ax-plugin-sdk` by a path inside the
//!   project: the SDK this binary was built with is compiled into it and
//!   written to `ax-plugin-sdk/` (it generates its bindings from the project's
//!   `wit/`), so the project builds with nothing but this binary and cargo's
//!   registry; `--sdk-path DIR` (a clone's `plugin-sdk/`) or `--sdk-git URL`
//!   name another SDK instead. `rust-toolchain.toml` pins the toolchain and
//!   the `wasm32-wasip2` target.
//! - `python`: `app.py`, `ax.py` (`@task`, which turns an exception escaping
//!   `run` into the WIT's `task-error` with its type, message and innermost
//!   frame in the project, and the library frame it was raised at when
//!   deeper), `build.sh`, which installs the pinned
//!   componentize-py into `.venv` on first use, and `pyproject.toml` with the
//!   version `ax plugin push` reads (Cargo.toml and package.json hold it for
//!   the other two).
//! - `js`: `app.js`, `ax.js` (`task(run)`, which turns anything `run` throws
//!   into the WIT's `task-error` with the exception's type, message and
//!   line, so a `TypeError` is not lost in a trap) and `package.json` with
//!   the pinned componentize-js and `npm run build`.
//!
//! Decisions: NAME is `[a-z][a-z0-9-]*` (at most 64), so one name is at once a
//! valid plugin, task, crate and npm package name, and the built file
//! (`NAME` with `_` for `-`, as cargo names a cdylib) gives NAME back when
//! `ax plugin push` derives the plugin name from it. A NAME typed with `_`
//! (`my_plugin`, as the built file is called) is read with `-` for `_`, the
//! same way `ax plugin push` reads the file name, and the summary says so. The target folder must
//! not exist or be empty; nothing is written if any check fails, and a
//! failed write removes what this command created.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

/// The world, from the repository's `wit/` folder.
const WIT: &str = include_str!("../../../wit/ax.wit");
/// ax's own toolchain file; the Rust scaffold pins the same channel.
const TOOLCHAIN: &str = include_str!("../../../rust-toolchain.toml");
/// The componentize-py release the Python scaffold pins (PyPI).
pub(super) const COMPONENTIZE_PY: &str = "0.25.1";
/// The componentize-js release the JavaScript scaffold pins (npm).
pub(super) const COMPONENTIZE_JS: &str = "0.23.0";
/// The folder of a Rust project the SDK is written to (see the module docs).
const SDK_DIR: &str = "ax-plugin-sdk";
/// The SDK this binary was built with, written into a Rust project as is:
/// (path in the project, text). Its `../wit` is the project's `wit/`.
const SDK: &[(&str, &str)] = &[
    (
        "ax-plugin-sdk/Cargo.toml",
        include_str!("../../../plugin-sdk/Cargo.toml"),
    ),
    (
        "ax-plugin-sdk/src/lib.rs",
        include_str!("../../../plugin-sdk/src/lib.rs"),
    ),
    (
        "ax-plugin-sdk/src/caps.rs",
        include_str!("../../../plugin-sdk/src/caps.rs"),
    ),
    (
        "ax-plugin-sdk/src/http.rs",
        include_str!("../../../plugin-sdk/src/http.rs"),
    ),
];

const TASK: &str = include_str!("scaffold/task.yaml");

/// Each language's files: (path in the project, template).
const RUST: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("scaffold/rust/Cargo.toml")),
    (
        "rust-toolchain.toml",
        include_str!("scaffold/rust/rust-toolchain.toml"),
    ),
    ("src/lib.rs", include_str!("scaffold/rust/lib.rs")),
    ("README.md", include_str!("scaffold/rust/README.md")),
    (".gitignore", include_str!("scaffold/rust/gitignore")),
];
const PYTHON: &[(&str, &str)] = &[
    ("app.py", include_str!("scaffold/python/app.py")),
    // `@task`: every exception becomes the WIT's task-error, with its message.
    ("ax.py", include_str!("scaffold/python/ax.py")),
    // Holds the version `ax plugin push` reads.
    (
        "pyproject.toml",
        include_str!("scaffold/python/pyproject.toml"),
    ),
    (
        "requirements.txt",
        include_str!("scaffold/python/requirements.txt"),
    ),
    // Made executable.
    ("build.sh", include_str!("scaffold/python/build.sh")),
    ("README.md", include_str!("scaffold/python/README.md")),
    (".gitignore", include_str!("scaffold/python/gitignore")),
];
const JS: &[(&str, &str)] = &[
    ("app.js", include_str!("scaffold/js/app.js")),
    // `task(run)`: every throw becomes the WIT's task-error, with its message.
    ("ax.js", include_str!("scaffold/js/ax.js")),
    ("package.json", include_str!("scaffold/js/package.json")),
    ("README.md", include_str!("scaffold/js/README.md")),
    (".gitignore", include_str!("scaffold/js/gitignore")),
];

/// The language of a new plugin (also the `lang` of its `ax.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Lang {
    /// A Rust crate using ax-plugin-sdk (cargo, wasm32-wasip2).
    Rust,
    /// A Python app built with componentize-py.
    Python,
    /// A JavaScript module built with componentize-js.
    Js,
}

impl Lang {
    /// The name `--lang` and `ax.yaml` use.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }

    /// The command `ax build` runs for a project in this language (its
    /// `ax.yaml`'s `build.command`).
    fn build_command(self) -> &'static str {
        match self {
            Lang::Rust => "cargo build --release --target wasm32-wasip2",
            Lang::Python => "./build.sh",
            // `npm install` only once: it needs the network, the build not.
            Lang::Js => "[ -d node_modules ] || npm install --no-audit --no-fund; npm run build",
        }
    }
}

/// `ax plugin new`.
#[derive(Debug, Args)]
pub(super) struct NewArgs {
    /// The plugin's name: lowercase letters, digits and `-`, starting with a
    /// letter (it names the plugin, the sample task and the package); `_` is
    /// read as `-` (`my_plugin` makes `my-plugin`, built as `my_plugin.wasm`).
    name: String,
    /// The language.
    #[arg(long, value_enum)]
    lang: Lang,
    /// Where to create the project (default: ./NAME); must not exist or be empty.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Rust: depend on the SDK at this path (a clone's `plugin-sdk/`) instead
    /// of the copy written into the project.
    #[arg(long, value_name = "DIR", conflicts_with = "sdk_git")]
    sdk_path: Option<PathBuf>,
    /// Rust: depend on the SDK by git, the URL of an ax repository, instead of
    /// the copy written into the project.
    #[arg(long, value_name = "URL")]
    sdk_git: Option<String>,
}

/// Why a project was not created.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// The name does not fit the rule.
    #[error(
        "`{0}` is not a scaffold name: use lowercase letters, digits and `-` (`_` is \
         read as `-`), starting with a letter, at most 64 (e.g. `order-export`)"
    )]
    Name(String),
    /// A flag does not fit the language, or a value is unusable.
    #[error("{0}")]
    Usage(String),
    /// The target folder holds files already.
    #[error("{0} exists and is not empty; pick another --dir or remove it")]
    NotEmpty(PathBuf),
    /// Writing failed (what was created is removed).
    #[error("writing {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// What `new` created.
#[derive(Debug)]
pub(super) struct Created {
    /// The plugin's (and the sample task's) name.
    pub(super) name: String,
    /// The project folder.
    pub(super) dir: PathBuf,
    /// The files written, relative to `dir`.
    pub(super) files: Vec<&'static str>,
    /// The built component, relative to `dir`.
    pub(super) wasm: String,
    /// The NAME as typed, when it was read with `-` for `_`.
    pub(super) typed: Option<String>,
}

/// The scaffold name NAME stands for: `_` read as `-` (see the module docs).
pub(super) fn scaffold_name(typed: &str) -> String {
    typed.replace('_', "-")
}

/// Whether `name` can name a scaffold (see the module docs).
pub(super) fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && name.len() <= crate::model::name::MAX_NAME_LEN
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
}

/// Writes the project `args` describes; see the module docs.
pub(super) fn new(args: &NewArgs) -> Result<Created, Error> {
    let name = scaffold_name(&args.name);
    if !valid_name(&name) {
        return Err(Error::Name(args.name.clone()));
    }
    if args.lang != Lang::Rust && (args.sdk_path.is_some() || args.sdk_git.is_some()) {
        return Err(Error::Usage(
            "--sdk-path and --sdk-git are for --lang rust".into(),
        ));
    }
    let name = name.as_str();
    let file = name.replace('-', "_");
    let (sdk, vendored) = match args.lang {
        Lang::Rust => sdk_dependency(args)?,
        _ => (String::new(), false),
    };
    let (fuel, memory_mb) = sample_limits(args.lang);
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{file}}", &file)
            .replace("{{sdk}}", &sdk)
            .replace("{{toolchain}}", toolchain_channel())
            .replace("{{componentize_py}}", COMPONENTIZE_PY)
            .replace("{{componentize_js}}", COMPONENTIZE_JS)
            .replace("{{fuel}}", &fuel.to_string())
            .replace("{{memory_mb}}", &memory_mb.to_string())
    };
    let (templates, wasm, output) = match args.lang {
        Lang::Rust => (
            RUST,
            format!("target/wasm32-wasip2/release/{file}.wasm"),
            // Where cargo writes it: `CARGO_TARGET_DIR` moves it.
            format!("${{CARGO_TARGET_DIR:-target}}/wasm32-wasip2/release/{file}.wasm"),
        ),
        Lang::Python => (PYTHON, format!("{file}.wasm"), format!("{file}.wasm")),
        Lang::Js => (JS, format!("{file}.wasm"), format!("{file}.wasm")),
    };
    let mut files: Vec<(&'static str, String, bool)> = vec![
        ("wit/ax.wit", WIT.to_owned(), false),
        ("task.yaml", fill(TASK), false),
        (
            super::build::MANIFEST,
            manifest(name, args.lang, &output),
            false,
        ),
    ];
    files.extend(
        templates
            .iter()
            .map(|(path, template)| (*path, fill(template), *path == "build.sh")),
    );
    if vendored {
        // Written as they are: the SDK's sources are not templates.
        files.extend(
            SDK.iter()
                .map(|(path, text)| (*path, (*text).to_owned(), false)),
        );
    }

    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(name));
    let created_dir = prepare_dir(&dir)?;
    if let Err(e) = write_all(&dir, &files) {
        // Leave nothing half-written behind: only what this call created goes.
        if created_dir {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            for (path, _, _) in &files {
                let _ = std::fs::remove_file(dir.join(path));
            }
            for sub in ["wit", "src", "ax-plugin-sdk/src", SDK_DIR] {
                let _ = std::fs::remove_dir(dir.join(sub));
            }
        }
        return Err(e);
    }
    Ok(Created {
        name: name.to_owned(),
        dir,
        files: files.iter().map(|(p, _, _)| *p).collect(),
        wasm,
        typed: (args.name != name).then(|| args.name.clone()),
    })
}

/// The `ax.yaml` of a new project: what `ax build` runs and where the
/// component lands (`super::build`). Single-quoted YAML: the JavaScript
/// command starts with `[`, which a plain scalar would read as a list.
fn manifest(name: &str, lang: Lang, output: &str) -> String {
    format!(
        "# How `ax build` builds this plugin: it runs `command` here with `sh -c`\n\
         # and checks that `output` exists (`${{VAR:-default}}` reads the environment).\n\
         name: {name}\n\
         lang: {lang}\n\
         build:\n  command: '{command}'\n  output: '{output}'\n",
        lang = lang.as_str(),
        command = lang.build_command(),
    )
}

/// The sample task's limits per language: the host's default fuel (about
/// 70 ms of CPU in Rust or JavaScript, 110 ms in Python, measured in
/// docs/PLUGINS.md) and three to eight times the memory the sample needs
/// (its floor: 2, 13 and 10 MiB), so a first change to the sample does not
/// hit them while a runaway loop still ends quickly.
fn sample_limits(lang: Lang) -> (u64, u64) {
    let fuel = crate::model::DEFAULT_FUEL;
    match lang {
        Lang::Rust => (fuel, 16),
        Lang::Python => (fuel, 48),
        Lang::Js => (fuel, 32),
    }
}

/// The `ax-plugin-sdk = …` line of the Rust scaffold's Cargo.toml, and
/// whether it names the copy written into the project ([`SDK`]).
fn sdk_dependency(args: &NewArgs) -> Result<(String, bool), Error> {
    if let Some(url) = &args.sdk_git {
        if url.trim().is_empty() {
            return Err(Error::Usage(
                "--sdk-git needs the URL of an ax repository".into(),
            ));
        }
        let line = format!("ax-plugin-sdk = {{ git = {} }}", toml_string(url));
        return Ok((line, false));
    }
    let Some(path) = &args.sdk_path else {
        let line = format!("ax-plugin-sdk = {{ path = {} }}", toml_string(SDK_DIR));
        return Ok((line, true));
    };
    match std::fs::canonicalize(path) {
        Ok(abs) if abs.join("Cargo.toml").is_file() => {
            let text = abs.to_str().ok_or_else(|| {
                Error::Usage(format!("{} is not UTF-8; pass --sdk-git", abs.display()))
            })?;
            let line = format!("ax-plugin-sdk = {{ path = {} }}", toml_string(text));
            Ok((line, false))
        }
        _ => Err(Error::Usage(format!(
            "--sdk-path {}: no Cargo.toml there; point it at the plugin-sdk/ folder of a clone of ax",
            path.display()
        ))),
    }
}

/// The `channel` of ax's rust-toolchain.toml.
fn toolchain_channel() -> &'static str {
    TOOLCHAIN
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "channel").then(|| value.trim().trim_matches('"'))
        })
        .unwrap_or("stable")
}

/// A TOML basic string holding `s`.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Makes sure `dir` exists and is empty; `true` if this call created it.
fn prepare_dir(dir: &Path) -> Result<bool, Error> {
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::NotEmpty(dir.to_path_buf()));
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io)?;
            Ok(true)
        }
        Err(e) => Err(io(e)),
    }
}

fn write_all(dir: &Path, files: &[(&'static str, String, bool)]) -> Result<(), Error> {
    for (rel, text, executable) in files {
        let path = dir.join(rel);
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, text).map_err(io)?;
        if *executable {
            set_executable(&path).map_err(io)?;
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

/// What `ax plugin new` prints: where the project is and the next commands.
pub(super) fn summary(created: &Created) -> String {
    let dir = created.dir.display();
    let wasm = &created.wasm;
    let mut out = String::new();
    if let Some(typed) = &created.typed {
        out.push_str(&format!(
            "`{typed}` is named `{name}` (plugin and task names use `-`; the built file keeps `_`, \
             {wasm}, and `ax plugin push` reads it back as `{name}`)\n",
            name = created.name
        ));
    }
    out.push_str(&format!("created {dir}:"));
    for f in &created.files {
        out.push_str(&format!(" {f}"));
    }
    out.push_str(&format!(
        "\nnext:\n  cd {dir}\n  ax dev --once                 # build, run task.yaml here, no server (ax dev: on every change)\n  \
         ax deploy                     # build, push, apply task.yaml on the server of AX_URL\n  \
         ax trigger {name} --wait\n",
        name = created.name,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(name: &str, lang: Lang, dir: &Path) -> NewArgs {
        NewArgs {
            name: name.into(),
            lang,
            dir: Some(dir.to_path_buf()),
            sdk_path: None,
            sdk_git: None,
        }
    }

    #[test]
    fn names_follow_the_scaffold_rule() {
        for good in ["a", "order-export", "x1", &"a".repeat(64)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            "1a",
            "-a",
            "A",
            "my_plugin",
            "a.b",
            "a b",
            &"a".repeat(65),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn an_underscore_name_is_read_with_dashes_as_push_reads_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        let created = new(&args("my_plugin", Lang::Rust, &dir)).unwrap();
        assert_eq!(created.name, "my-plugin");
        assert!(
            created.wasm.ends_with("/my_plugin.wasm"),
            "{}",
            created.wasm
        );
        let task = std::fs::read_to_string(dir.join("task.yaml")).unwrap();
        assert!(task.contains("plugin: my-plugin@^0.1"), "{task}");
        let shown = summary(&created);
        assert!(
            shown.starts_with("`my_plugin` is named `my-plugin`"),
            "{shown}"
        );
        assert!(shown.contains("ax trigger my-plugin --wait"), "{shown}");
        assert!(matches!(
            new(&args("_x", Lang::Js, &tmp.path().join("q"))),
            Err(Error::Name(n)) if n == "_x"
        ));
    }

    #[test]
    fn each_language_gets_the_repository_wit_and_a_task_naming_the_plugin() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("p");
            let created = new(&args("my-plugin", lang, &dir)).unwrap();
            let wit = std::fs::read_to_string(dir.join("wit/ax.wit")).unwrap();
            assert_eq!(
                wit,
                std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/ax.wit"))
                    .unwrap()
            );
            let task = std::fs::read_to_string(dir.join("task.yaml")).unwrap();
            let parsed = crate::task::parse(&task).expect("the sample task parses");
            assert_eq!(parsed.name.as_str(), "my-plugin");
            assert!(task.contains("plugin: my-plugin@^0.1"), "{task}");
            assert!(created.wasm.ends_with("my_plugin.wasm"), "{}", created.wasm);
            for f in &created.files {
                let text = std::fs::read_to_string(dir.join(f)).unwrap();
                assert!(!text.contains("{{"), "{f} has an unfilled placeholder");
            }
        }
    }

    #[test]
    fn each_language_gets_an_ax_yaml_naming_its_build_and_output() {
        for (lang, command) in [
            (Lang::Rust, "cargo build"),
            (Lang::Python, "./build.sh"),
            (Lang::Js, "npm run build"),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let created = new(&args("my-plugin", lang, tmp.path())).unwrap();
            let text = std::fs::read_to_string(tmp.path().join("ax.yaml")).unwrap();
            let manifest = crate::cli::build::Manifest::parse(&text).unwrap();
            assert_eq!((manifest.name.as_str(), manifest.lang), ("my-plugin", lang));
            assert!(manifest.build.command.contains(command), "{text}");
            // Without CARGO_TARGET_DIR the output is the file the summary names.
            let output = manifest
                .build
                .output
                .replace("${CARGO_TARGET_DIR:-target}", "target");
            assert_eq!(output, created.wasm, "{text}");
            assert!(summary(&created).contains("\n  ax deploy "));
        }
    }

    #[test]
    fn a_rust_project_gets_the_sdk_written_into_it_or_names_one_by_path_or_git() {
        let tmp = tempfile::tempdir().unwrap();
        let created = new(&args("p", Lang::Rust, &tmp.path().join("a"))).unwrap();
        let manifest = std::fs::read_to_string(tmp.path().join("a/Cargo.toml")).unwrap();
        assert!(
            manifest.contains("ax-plugin-sdk = { path = \"ax-plugin-sdk\" }"),
            "{manifest}"
        );
        for (path, text) in SDK {
            assert!(created.files.contains(path), "{path}");
            assert_eq!(
                &std::fs::read_to_string(tmp.path().join("a").join(path)).unwrap(),
                text
            );
        }

        let mut local = args("p", Lang::Rust, &tmp.path().join("c"));
        local.sdk_path = Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk"
        )));
        let created = new(&local).unwrap();
        assert!(!created.files.iter().any(|f| f.starts_with(SDK_DIR)));
        let manifest = std::fs::read_to_string(tmp.path().join("c/Cargo.toml")).unwrap();
        assert!(manifest.contains("plugin-sdk\" }"), "{manifest}");

        let mut git = args("p", Lang::Rust, &tmp.path().join("b"));
        git.sdk_git = Some("https://git.example/ax.git".into());
        new(&git).unwrap();
        let manifest = std::fs::read_to_string(tmp.path().join("b/Cargo.toml")).unwrap();
        assert!(
            manifest.contains("ax-plugin-sdk = { git = \"https://git.example/ax.git\" }"),
            "{manifest}"
        );
        let toolchain = std::fs::read_to_string(tmp.path().join("b/rust-toolchain.toml")).unwrap();
        assert!(toolchain.contains(&format!("channel = \"{}\"", toolchain_channel())));
        assert_ne!(toolchain_channel(), "stable");
    }

    /// Every source file of the SDK is in [`SDK`], so a file added to
    /// `plugin-sdk/src` cannot be missing from the copy (whose build would fail).
    #[test]
    fn the_written_sdk_has_every_file_of_plugin_sdk() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../plugin-sdk"));
        let mut sources: Vec<String> = std::fs::read_dir(root.join("src"))
            .unwrap()
            .map(|e| format!("{SDK_DIR}/src/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        sources.push(format!("{SDK_DIR}/Cargo.toml"));
        sources.sort();
        let mut written: Vec<String> = SDK.iter().map(|(p, _)| (*p).to_owned()).collect();
        written.sort();
        assert_eq!(written, sources);
    }

    #[test]
    fn bad_requests_write_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        assert!(matches!(
            new(&args("Bad_Name", Lang::Js, &dir)),
            Err(Error::Name(_))
        ));
        let mut wrong = args("p", Lang::Python, &dir);
        wrong.sdk_git = Some("https://git.example/ax.git".into());
        assert!(matches!(new(&wrong), Err(Error::Usage(_))));
        let mut missing = args("p", Lang::Rust, &dir);
        missing.sdk_path = Some(tmp.path().join("nowhere"));
        assert!(matches!(new(&missing), Err(Error::Usage(_))));
        assert!(!dir.exists());

        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "mine").unwrap();
        assert!(matches!(
            new(&args("p", Lang::Js, &dir)),
            Err(Error::NotEmpty(_))
        ));
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn an_empty_existing_folder_is_used() {
        let tmp = tempfile::tempdir().unwrap();
        new(&args("p", Lang::Python, tmp.path())).unwrap();
        assert!(tmp.path().join("app.py").is_file());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(tmp.path().join("build.sh"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o111, 0o111);
        }
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(toml_string("a\nb"), "\"a\\u000Ab\"");
    }
}
