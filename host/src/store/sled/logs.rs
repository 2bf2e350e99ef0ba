//! Attempt logs under `log/{run}/{step}/{attempt}`: inline in sled when
//! small, else in a shared blob `blobs/<digest>.log` whose references are
//! counted by `lref/{digest}/…` keys and which is unlinked with its last one.
//!
//! Since store format 8 inline logs are compact: the byte
//! [`COMPACT`](super::compact::COMPACT), then postcard without the step and
//! attempt (the key holds them) or any field name. A blob reference, and
//! every value of a store of format 7 or before, is JSON ([`StoredLogs`]),
//! read as it is. A blob file is JSON: it is read whole, rarely.
//!
//! Several attempts' logs are stored in one sled batch
//! ([`put_batch`]): the write-behind hands over the logs of the attempts
//! that finished since its last write, and a sled batch costs two log
//! buffer seals whatever its size.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::blobs::{is_digest, remove_file_if_present};
use super::compact::COMPACT;
use super::engine::Batch;
use super::footprint::{Side, Weight, signed};
use super::keys::{decode, encode, key, show_key, split_parts};
use super::{SledStore, engine_error, lock};
use crate::model::{LogLevel, LogRecord, Progress};
use crate::store::rules::digest_of;
use crate::store::{AttemptLogs, Error, Result, RunLogs};

/// Serialized attempt logs larger than this go to a blob file: sled keeps
/// values in its page cache and rewrites them when it compacts, so large
/// values cost memory and write amplification.
pub const LOG_INLINE_MAX: usize = 16 << 10;

/// How attempt logs were kept under `log/…` as JSON (blob references
/// still are).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum StoredLogs {
    /// Small enough to live in sled.
    Inline(AttemptLogs),
    /// In `blobs/<digest>.log`.
    Blob { digest: String },
}

impl StoredLogs {
    pub(super) fn blob(&self) -> Option<&str> {
        match self {
            StoredLogs::Blob { digest } => Some(digest),
            StoredLogs::Inline(_) => None,
        }
    }
}

/// Inline logs as stored compact: [`AttemptLogs`] without its step and
/// attempt.
#[derive(Serialize)]
struct Compact<'a> {
    stdout: &'a str,
    stderr: &'a str,
    logs: Vec<Record<'a>>,
    progress: Option<&'a Progress>,
}

/// A [`LogRecord`] as stored compact.
#[derive(Serialize)]
struct Record<'a> {
    at_ms: u64,
    level: LogLevel,
    message: &'a str,
    fields: &'a [(String, String)],
}

/// [`Compact`], read back.
#[derive(Deserialize)]
struct ReadCompact {
    stdout: String,
    stderr: String,
    logs: Vec<ReadRecord>,
    progress: Option<Progress>,
}

/// [`Record`], read back.
#[derive(Deserialize)]
struct ReadRecord {
    at_ms: u64,
    level: LogLevel,
    message: String,
    fields: Vec<(String, String)>,
}

fn encode_compact(logs: &AttemptLogs) -> Result<Vec<u8>> {
    // Every field named, so that a field added to `AttemptLogs` is a
    // compile error here until it is stored.
    let AttemptLogs {
        step: _,
        attempt: _,
        stdout,
        stderr,
        logs,
        progress,
    } = logs;
    let compact = Compact {
        stdout,
        stderr,
        logs: logs
            .iter()
            .map(|r| {
                let LogRecord {
                    at_ms,
                    level,
                    message,
                    fields,
                } = r;
                Record {
                    at_ms: *at_ms,
                    level: *level,
                    message,
                    fields,
                }
            })
            .collect(),
        progress: progress.as_ref(),
    };
    postcard::to_extend(&compact, vec![COMPACT]).map_err(|e| Error::Backend(e.to_string()))
}

/// The logs stored at `key` (`log/{run}/{step}/{attempt}`): inline, or
/// the digest of their blob.
pub(super) fn read(key: &[u8], value: &[u8]) -> Result<StoredLogs> {
    let Some(body) = value.strip_prefix(&[COMPACT]) else {
        return decode(key, value);
    };
    let corrupt = |reason: String| Error::Corrupt {
        key: show_key(key),
        reason,
    };
    let (step, attempt) = match split_parts(key).as_deref() {
        Some([_, _, step, attempt]) => (step.clone(), attempt.parse().ok()),
        _ => (String::new(), None),
    };
    let attempt = attempt.ok_or_else(|| corrupt("not a log key".to_owned()))?;
    let read: ReadCompact =
        postcard::from_bytes(body).map_err(|e| corrupt(format!("unreadable logs: {e}")))?;
    Ok(StoredLogs::Inline(AttemptLogs {
        step,
        attempt,
        stdout: read.stdout,
        stderr: read.stderr,
        logs: read
            .logs
            .into_iter()
            .map(|r| LogRecord {
                at_ms: r.at_ms,
                level: r.level,
                message: r.message,
                fields: r.fields,
            })
            .collect(),
        progress: read.progress,
    }))
}

impl SledStore {
    /// Unlinks the log blobs in `digests` that no log references any more.
    /// The caller holds `blob_lock`.
    pub(super) fn release_log_blobs(
        &self,
        digests: impl IntoIterator<Item = String>,
    ) -> Result<()> {
        for digest in digests {
            if self.scan(&key("lref", &[&digest])).next().is_none() && is_digest(&digest) {
                remove_file_if_present(&self.blobs.join(format!("{digest}.log")))?;
            }
        }
        Ok(())
    }

    fn load_logs(&self, key: &[u8], value: &[u8]) -> Result<AttemptLogs> {
        match read(key, value)? {
            StoredLogs::Inline(logs) => Ok(logs),
            StoredLogs::Blob { digest } => {
                let bytes = self
                    .read_blob(&digest, "log")?
                    .ok_or_else(|| Error::Corrupt {
                        key: show_key(key),
                        reason: format!("its log blob {digest}.log is missing"),
                    })?;
                serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                    key: format!("{digest}.log"),
                    reason: e.to_string(),
                })
            }
        }
    }
}

/// [`Runs::put_logs`](crate::store::Runs::put_logs).
pub(super) fn put(store: &SledStore, tenant: &str, run_id: &str, logs: &AttemptLogs) -> Result<()> {
    put_batch(
        store,
        &[RunLogs {
            tenant: tenant.to_owned(),
            run_id: run_id.to_owned(),
            logs: logs.clone(),
        }],
    )
}

/// [`Runs::put_logs_batch`](crate::store::Runs::put_logs_batch): one sled
/// batch (all or nothing); of two logs for one attempt the last is kept.
pub(super) fn put_batch(store: &SledStore, all: &[RunLogs]) -> Result<()> {
    let mut last: HashMap<Vec<u8>, &RunLogs> = HashMap::with_capacity(all.len());
    let mut order = Vec::with_capacity(all.len());
    for l in all {
        let attempt = format!("{:010}", l.logs.attempt);
        let log_key = key("log", &[&l.run_id, &l.logs.step, &attempt]);
        if last.insert(log_key.clone(), l).is_none() {
            order.push(log_key);
        }
    }
    let _blobs = lock(&store.blob_lock);
    let mut batch = Batch::default();
    let mut weight = Weight::default();
    let mut released = Vec::new();
    for log_key in order {
        let l = last[&log_key];
        let old_value = store.db.get(&log_key).map_err(engine_error)?;
        let old = old_value.as_ref().map(|v| read(&log_key, v)).transpose()?;
        let old_weight = match &old_value {
            Some(v) => store.log_weight(&log_key, v)?,
            None => 0,
        };
        let old_blob = old.as_ref().and_then(StoredLogs::blob);
        let attempt = format!("{:010}", l.logs.attempt);
        let lref = |digest: &str| key("lref", &[digest, &l.run_id, &l.logs.step, &attempt]);
        let compact = encode_compact(&l.logs)?;
        let (value, blob) = if compact.len() > LOG_INLINE_MAX {
            let json = serde_json::to_vec(&l.logs).map_err(|e| Error::Backend(e.to_string()))?;
            let digest = digest_of(&json);
            store.write_blob(&format!("{digest}.log"), &json)?;
            batch.insert(lref(&digest), Vec::new());
            let value = encode(&StoredLogs::Blob {
                digest: digest.clone(),
            })?;
            (value, Some((digest, json.len())))
        } else {
            (compact, None)
        };
        let new_blob = blob.as_ref().map(|(digest, _)| digest.as_str());
        if let Some(digest) = old_blob.filter(|&d| Some(d) != new_blob) {
            batch.remove(lref(digest));
            released.push(digest.to_owned());
        }
        let blob_len = blob.map_or(0, |(_, len)| len);
        weight.add(
            &l.tenant,
            signed(value.len()) + signed(blob_len) - old_weight,
        );
        batch.insert(log_key, value);
    }
    store.weigh(&mut batch, &weight, Side::Logs)?;
    store.apply(batch)?;
    store.release_log_blobs(released)
}

/// [`Runs::logs`](crate::store::Runs::logs).
pub(super) fn list(store: &SledStore, run_id: &str) -> Result<Vec<AttemptLogs>> {
    store
        .scan(&key("log", &[run_id]))
        .map(|item| item.and_then(|(k, v)| store.load_logs(&k, &v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::SledStore;
    use super::super::fixtures::{files_under, logs, run};
    use super::super::footprint::weigh_all;
    use super::*;
    use crate::model::RunStatus;
    use crate::store::prelude::*;

    fn full(attempt: u32) -> AttemptLogs {
        AttemptLogs {
            step: "s/1".to_owned(),
            attempt,
            stdout: "out\n".to_owned(),
            stderr: "err \u{0}\n".to_owned(),
            logs: vec![LogRecord {
                at_ms: 12,
                level: LogLevel::Warn,
                message: "careful".to_owned(),
                fields: vec![("k".to_owned(), "v".to_owned())],
            }],
            progress: Some(Progress {
                percent: 40,
                note: "a note".to_owned(),
                at_ms: 15,
            }),
        }
    }

    /// Inline logs are compact, read back whole with the step and attempt
    /// of their key, and smaller than their JSON; JSON inline logs (a store
    /// of format 7) still read.
    #[test]
    fn inline_logs_are_compact_and_older_json_ones_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        store
            .insert_run(&run("r1", RunStatus::Running), false, None, &[])
            .unwrap();
        store.put_logs("t1", "r1", &full(3)).unwrap();
        let k = key("log", &["r1", "s/1", "0000000003"]);
        let stored = store.db.get(&k).unwrap().unwrap();
        assert_eq!(stored[0], COMPACT);
        let json = encode(&StoredLogs::Inline(full(3))).unwrap();
        assert!(
            stored.len() * 2 < json.len(),
            "{} against {}",
            stored.len(),
            json.len()
        );
        assert_eq!(store.logs("r1").unwrap(), vec![full(3)]);
        store.db.insert(&k, json).unwrap();
        assert_eq!(store.logs("r1").unwrap(), vec![full(3)]);
        for cut in [1, stored.len() / 2] {
            store.db.insert(&k, &stored[..cut]).unwrap();
            assert!(matches!(store.logs("r1"), Err(Error::Corrupt { .. })));
        }
    }

    /// A batch of logs is one write: each stored, of two for one attempt
    /// the last, and the tenant charged exactly what is stored.
    #[test]
    fn a_batch_of_logs_is_stored_in_one_write_and_charged_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        for id in ["r1", "r2"] {
            let r = run(id, RunStatus::Running);
            store.insert_run(&r, false, None, &[]).unwrap();
        }
        let big = "large output\n".repeat(2_000);
        let entry = |run_id: &str, logs: AttemptLogs| RunLogs {
            tenant: "t1".to_owned(),
            run_id: run_id.to_owned(),
            logs,
        };
        store.put_logs("t1", "r2", &logs(1, big.clone())).unwrap();
        let batch = [
            entry("r1", full(1)),
            entry("r1", logs(2, "first".to_owned())),
            entry("r2", logs(1, "now small".to_owned())),
            entry("r1", logs(2, "second".to_owned())),
            entry("r2", logs(2, big.clone())),
        ];
        store.put_logs_batch(&batch).unwrap();
        let r1 = store.logs("r1").unwrap();
        assert_eq!(r1, vec![full(1), logs(2, "second".to_owned())]);
        let r2 = store.logs("r2").unwrap();
        assert_eq!(r2, vec![logs(1, "now small".to_owned()), logs(2, big)]);
        let weighed = weigh_all(&store).unwrap();
        assert_eq!(store.run_bytes("t1").unwrap() as i64, weighed.of("t1"));
    }

    #[test]
    fn large_logs_live_in_shared_blobs_removed_with_their_last_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let log_blobs = || -> Vec<PathBuf> {
            let all = files_under(&dir.path().join("blobs"));
            all.into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .collect()
        };
        let big = "same output\n".repeat(2_000);
        for id in ["r1", "r2"] {
            let r = run(id, RunStatus::Succeeded);
            store.insert_run(&r, false, None, &[]).unwrap();
            store.put_logs("t1", id, &logs(1, big.clone())).unwrap();
            store
                .put_logs("t1", id, &logs(2, "small".to_owned()))
                .unwrap();
        }
        assert_eq!(log_blobs().len(), 1, "identical logs share one blob");
        assert!(store.delete_run("r1").unwrap());
        assert_eq!(log_blobs().len(), 1, "r2 still references it");
        assert_eq!(store.logs("r2").unwrap()[0].stdout, big);
        // Replacing the large logs with small ones releases the blob.
        store
            .put_logs("t1", "r2", &logs(1, "now small".to_owned()))
            .unwrap();
        assert!(log_blobs().is_empty());
        store.put_logs("t1", "r2", &logs(1, big.clone())).unwrap();
        assert_eq!(log_blobs().len(), 1);
        assert!(store.delete_run("r2").unwrap());
        assert!(log_blobs().is_empty());
    }
}
