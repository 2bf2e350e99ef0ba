//! Content-addressed files in `blobs/` (plugin components and large attempt
//! logs), and writing a file atomically.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::SledStore;
use crate::store::rules::digest_of;
use crate::store::{Error, Result};

impl SledStore {
    /// Writes a blob file atomically unless it is there already (the name is
    /// the content's digest, so an existing file holds the same bytes).
    pub(super) fn write_blob(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.blobs.join(name);
        if path.exists() {
            return Ok(());
        }
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .blobs
            .join(format!(".tmp-{}-{n}-{name}", std::process::id()));
        write_atomically(&path, &tmp, bytes)?;
        Ok(())
    }

    /// Reads a blob file and checks it against its digest.
    pub(super) fn read_blob(&self, digest: &str, ext: &str) -> Result<Option<Vec<u8>>> {
        if !is_digest(digest) {
            return Ok(None);
        }
        let path = self.blobs.join(format!("{digest}.{ext}"));
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if digest_of(&bytes) != digest {
            return Err(Error::Corrupt {
                key: path.display().to_string(),
                reason: "the file's content does not match its digest".to_owned(),
            });
        }
        Ok(Some(bytes))
    }
}

/// Writes `bytes` to `path` so that `path` holds either nothing or all of
/// them, even across a crash: write `tmp`, fsync it, rename it over `path`,
/// fsync the directory (which makes the rename itself durable).
pub(super) fn write_atomically(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let result = (|| {
        let mut file = File::create(tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(tmp);
    }
    result
}

pub(super) fn remove_file_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// The bytes of the files in folder `dir` (0 when it cannot be read).
pub(super) fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|dir| {
            dir.filter_map(|entry| entry.ok()?.metadata().ok())
                .map(|meta| meta.len())
                .sum::<u64>()
        })
        .unwrap_or(0)
}

/// Removes temporary files a crash left in `blobs/` (best effort).
pub(super) fn remove_stale_tmp_files(blobs: &Path) {
    let Ok(dir) = fs::read_dir(blobs) else {
        return;
    };
    for entry in dir.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether `s` can name a blob: 64 lower-case hex digits (anything else could
/// escape the blobs folder or never match a digest).
pub(super) fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::SledStore;
    use super::super::fixtures::files_under;
    use crate::store::Error;
    use crate::store::prelude::*;

    #[test]
    fn blobs_are_files_named_by_digest_and_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let digest = store.put_blob(b"\0asm\x01\0\0\0").unwrap();
        let path = dir.path().join("blobs").join(format!("{digest}.wasm"));
        assert_eq!(fs::read(&path).unwrap(), b"\0asm\x01\0\0\0");
        let leftovers: Vec<_> = files_under(&dir.path().join("blobs"));
        assert_eq!(
            leftovers,
            std::slice::from_ref(&path),
            "no temporary file is left behind"
        );
        fs::write(&path, b"tampered").unwrap();
        assert!(matches!(
            store.get_blob(&digest),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn size_on_disk_counts_the_database_and_the_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let before = store.size_on_disk();
        assert!(before > 0);
        store.put_blob(&vec![7; 1 << 20]).unwrap();
        assert!(store.size_on_disk() >= before + (1 << 20));
    }
}
