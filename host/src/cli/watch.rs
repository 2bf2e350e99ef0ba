//! Watching a project folder for `ax dev`: which files count as sources,
//! what changed between two looks, and when a burst of changes has settled.
//!
//! It polls modification times (no file-notification dependency, and the
//! same on every platform): [`Snapshot::take`] reads the stamp (modified
//! time and length) of every source file, [`Snapshot::changes`] compares two,
//! and [`Settle`] waits for a quiet moment, so an editor's save (often a
//! write, a rename and a touch) or a `git checkout` is one rebuild, not
//! several. Build output is not a source ([`skipped`]): a rebuild must not
//! start the next one. This module does no waiting itself; `ax dev`
//! ([`super::dev`]) owns the loop and the clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Folders that hold what builds and package managers write, never sources.
const SKIPPED_DIRS: [&str; 3] = ["target", "node_modules", "__pycache__"];

/// Files a build writes beside the sources (cargo writes `Cargo.lock` on the
/// first build, npm `package-lock.json` on install).
const SKIPPED_FILES: [&str; 2] = ["Cargo.lock", "package-lock.json"];

/// Most files one snapshot reads: a folder with more is not a plugin's
/// sources (a data set, a home directory), and polling it would cost more
/// than the builds.
pub(super) const MAX_FILES: usize = 20_000;

/// Whether the entry `name` (a file, or a folder when `dir`) is left out of
/// a snapshot, with all it holds: hidden entries (`.git`, `.venv`, editor
/// swap files such as `.app.py.swp`), editor backups (`app.py~`), build
/// folders ([`SKIPPED_DIRS`]), components (`*.wasm`: what the Python and
/// JavaScript builds write beside their sources) and lock files a build
/// writes ([`SKIPPED_FILES`]).
pub(super) fn skipped(name: &str, dir: bool) -> bool {
    if name.starts_with('.') || name.ends_with('~') {
        return true;
    }
    if dir {
        SKIPPED_DIRS.contains(&name)
    } else {
        name.ends_with(".wasm") || SKIPPED_FILES.contains(&name)
    }
}

/// What a file looked like: a change of either is a change of the file
/// (the length catches a write within the file system's time resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    /// Its modification time.
    pub(super) modified: SystemTime,
    /// Its length in bytes.
    pub(super) len: u64,
}

/// The stamps of a folder's source files, by path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Snapshot {
    files: BTreeMap<PathBuf, Stamp>,
    /// Whether [`MAX_FILES`] cut the walk short.
    pub(super) truncated: bool,
}

impl Snapshot {
    /// Reads the source files under `root` (see [`skipped`]), at most
    /// [`MAX_FILES`]. Entries that vanish or cannot be read while it walks
    /// are left out: the next snapshot sees them as they are then.
    pub(super) fn take(root: &Path) -> Self {
        let mut snapshot = Self::default();
        let mut folders = vec![root.to_path_buf()];
        while let Some(folder) = folders.pop() {
            let Ok(entries) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let name = entry.file_name();
                let dir = kind.is_dir();
                if skipped(&name.to_string_lossy(), dir) {
                    continue;
                }
                if dir {
                    folders.push(entry.path());
                    continue;
                }
                // A symlink counts by what it points at (metadata follows it).
                let Ok(meta) = std::fs::metadata(entry.path()) else {
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                if snapshot.files.len() == MAX_FILES {
                    snapshot.truncated = true;
                    return snapshot;
                }
                let stamp = Stamp {
                    modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    len: meta.len(),
                };
                snapshot.files.insert(entry.path(), stamp);
            }
        }
        snapshot
    }

    /// A snapshot of the given stamps (tests).
    #[cfg(test)]
    fn of(files: &[(&str, Stamp)]) -> Self {
        Self {
            files: files.iter().map(|(p, s)| (PathBuf::from(p), *s)).collect(),
            truncated: false,
        }
    }

    /// The files added, removed or changed since `before`, in path order.
    pub(super) fn changes(&self, before: &Snapshot) -> Vec<PathBuf> {
        let mut changed: Vec<PathBuf> = self
            .files
            .iter()
            .filter(|(path, stamp)| before.files.get(*path) != Some(stamp))
            .map(|(path, _)| path.clone())
            .collect();
        changed.extend(
            before
                .files
                .keys()
                .filter(|path| !self.files.contains_key(*path))
                .cloned(),
        );
        changed.sort();
        changed
    }

    /// The source modified last, but `except`, with its time; none when
    /// there is no other source.
    pub(super) fn newest(&self, except: &Path) -> Option<(&Path, SystemTime)> {
        self.files
            .iter()
            .filter(|(path, _)| path.as_path() != except)
            .map(|(path, stamp)| (path.as_path(), stamp.modified))
            .max_by_key(|(_, modified)| *modified)
    }

    /// The earliest modification time among `paths` that this snapshot
    /// has (a removed file has none).
    pub(super) fn earliest(&self, paths: &[PathBuf]) -> Option<SystemTime> {
        paths
            .iter()
            .filter_map(|p| self.files.get(p))
            .map(|s| s.modified)
            .min()
    }
}

/// When a burst of changes has settled: nothing changed for `quiet` since
/// the last one. It remembers when the burst began (what `ax dev` measures
/// "change → result" from) and the files it touched.
#[derive(Debug)]
pub(super) struct Settle {
    quiet: Duration,
    /// The burst under way: its first and latest change, and its files.
    burst: Option<(Instant, Instant, Vec<PathBuf>)>,
}

impl Settle {
    /// Settles after `quiet` without a change.
    pub(super) fn new(quiet: Duration) -> Self {
        Self { quiet, burst: None }
    }

    /// Files changed at `at` (seen now, made then).
    pub(super) fn changed(&mut self, at: Instant, files: Vec<PathBuf>) {
        match &mut self.burst {
            Some((first, last, all)) => {
                *first = (*first).min(at);
                *last = (*last).max(at);
                for f in files {
                    if !all.contains(&f) {
                        all.push(f);
                    }
                }
            }
            None => self.burst = Some((at, at, files)),
        }
    }

    /// At `now`: the burst's first change and its files, when it has been
    /// quiet long enough (and it is then over); `None` while changes may
    /// still come or when nothing changed.
    pub(super) fn settled(&mut self, now: Instant) -> Option<(Instant, Vec<PathBuf>)> {
        let (_, last, _) = self.burst.as_ref()?;
        if now.saturating_duration_since(*last) < self.quiet {
            return None;
        }
        self.burst.take().map(|(first, _, files)| (first, files))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(secs: u64, len: u64) -> Stamp {
        Stamp {
            modified: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
            len,
        }
    }

    #[test]
    fn build_output_hidden_entries_and_backups_are_skipped() {
        for (name, dir) in [
            ("target", true),
            ("node_modules", true),
            ("__pycache__", true),
            (".git", true),
            (".venv", true),
            ("greet.wasm", false),
            ("Cargo.lock", false),
            ("package-lock.json", false),
            (".app.py.swp", false),
            ("app.py~", false),
        ] {
            assert!(skipped(name, dir), "{name} is watched");
        }
        for (name, dir) in [
            ("src", true),
            ("wit", true),
            ("lib.rs", false),
            ("app.py", false),
            ("app.js", false),
            ("Cargo.toml", false),
            ("task.yaml", false),
            ("ax.yaml", false),
            // A file named like a build folder is a source.
            ("target", false),
        ] {
            assert!(!skipped(name, dir), "{name} is skipped");
        }
    }

    #[test]
    fn the_newest_source_is_found_but_the_one_left_out() {
        let snapshot = Snapshot::of(&[
            ("/p/src/lib.rs", stamp(5, 1)),
            ("/p/task.yaml", stamp(9, 1)),
            ("/p/Cargo.toml", stamp(2, 1)),
        ]);
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(
            snapshot.newest(Path::new("/p/none")),
            Some((Path::new("/p/task.yaml"), at(9)))
        );
        assert_eq!(
            snapshot.newest(Path::new("/p/task.yaml")),
            Some((Path::new("/p/src/lib.rs"), at(5)))
        );
        assert_eq!(Snapshot::default().newest(Path::new("/p/x")), None);
    }

    #[test]
    fn changes_are_added_removed_and_restamped_files_in_path_order() {
        let before = Snapshot::of(&[("a", stamp(1, 1)), ("b", stamp(1, 1)), ("c", stamp(1, 1))]);
        let after = Snapshot::of(&[
            ("a", stamp(1, 1)),
            ("b", stamp(1, 2)),
            ("c", stamp(2, 1)),
            ("d", stamp(1, 1)),
        ]);
        let paths = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(after.changes(&before), paths(&["b", "c", "d"]));
        assert_eq!(before.changes(&after), paths(&["b", "c", "d"]));
        assert!(after.changes(&after).is_empty());
        let removed = Snapshot::of(&[("a", stamp(1, 1))]);
        assert_eq!(removed.changes(&before), paths(&["b", "c"]));
        assert_eq!(
            after.earliest(&paths(&["b", "c", "gone"])),
            Some(stamp(1, 2).modified)
        );
        assert_eq!(removed.earliest(&paths(&["b"])), None);
    }

    #[test]
    fn a_burst_settles_once_quiet_from_its_last_change_and_keeps_its_first() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut settle = Settle::new(Duration::from_millis(200));
        assert_eq!(settle.settled(ms(1000)), None, "nothing changed");
        settle.changed(ms(0), vec!["a".into()]);
        assert_eq!(settle.settled(ms(150)), None);
        // Another change within the quiet time extends the burst.
        settle.changed(ms(150), vec!["b".into(), "a".into()]);
        assert_eq!(settle.settled(ms(300)), None);
        let (first, files) = settle.settled(ms(350)).expect("settled");
        assert_eq!(first, ms(0), "measured from the burst's first change");
        assert_eq!(files, [PathBuf::from("a"), PathBuf::from("b")]);
        assert_eq!(settle.settled(ms(1000)), None, "a burst settles once");
        // A change seen late but made earlier counts from when it was made.
        settle.changed(ms(2000), vec!["c".into()]);
        settle.changed(ms(1900), vec!["d".into()]);
        assert_eq!(settle.settled(ms(2200)).map(|(f, _)| f), Some(ms(1900)));
    }

    #[test]
    fn a_snapshot_reads_sources_and_leaves_out_build_output() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for dir in ["src", "target/release", "node_modules/x", ".git"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for file in [
            "src/lib.rs",
            "Cargo.toml",
            "target/release/a.rlib",
            "node_modules/x/index.js",
            ".git/HEAD",
            "greet.wasm",
            "Cargo.lock",
        ] {
            std::fs::write(root.join(file), "x").unwrap();
        }
        let first = Snapshot::take(root);
        let files: Vec<_> = first
            .files
            .keys()
            .map(|p| p.strip_prefix(root).unwrap())
            .collect();
        assert_eq!(files, [Path::new("Cargo.toml"), Path::new("src/lib.rs")]);
        assert!(!first.truncated);
        // A build writing its output changes nothing; a source edit does.
        std::fs::write(root.join("greet.wasm"), "rebuilt").unwrap();
        std::fs::write(root.join("target/release/a.rlib"), "rebuilt").unwrap();
        assert!(Snapshot::take(root).changes(&first).is_empty());
        let lib = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join("src/lib.rs"))
            .unwrap();
        lib.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1))
            .unwrap();
        assert_eq!(
            Snapshot::take(root).changes(&first),
            [root.join("src/lib.rs")]
        );
    }
}
