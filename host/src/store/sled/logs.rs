//! Attempt logs under `log/{run}/{step}/{attempt}`: inline in sled when
//! small, else in a shared blob `blobs/<digest>.log` whose references are
//! counted by `lref/{digest}/…` keys and which is unlinked with its last one.

use serde::{Deserialize, Serialize};

use super::blobs::{is_digest, remove_file_if_present};
use super::footprint::{Side, Weight, signed};
use super::keys::{decode, encode, key, show_key};
use super::{SledStore, lock, sled_error};
use crate::store::rules::digest_of;
use crate::store::{AttemptLogs, Error, Result};

/// Serialized attempt logs larger than this go to a blob file: sled keeps
/// values in its page cache and rewrites them when it compacts, so large
/// values cost memory and write amplification.
pub const LOG_INLINE_MAX: usize = 16 << 10;

/// How attempt logs are kept under `log/…`.
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
        match decode::<StoredLogs>(key, value)? {
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
    let attempt = format!("{:010}", logs.attempt);
    let log_key = key("log", &[run_id, &logs.step, &attempt]);
    let json = serde_json::to_vec(logs).map_err(|e| Error::Backend(e.to_string()))?;
    let _blobs = lock(&store.blob_lock);
    let old_value = store.db.get(&log_key).map_err(sled_error)?;
    let old = old_value
        .as_ref()
        .map(|v| decode::<StoredLogs>(&log_key, v))
        .transpose()?;
    let old_weight = match &old_value {
        Some(v) => store.log_weight(&log_key, v)?,
        None => 0,
    };
    let old_blob = old.as_ref().and_then(StoredLogs::blob);
    let lref = |digest: &str| key("lref", &[digest, run_id, &logs.step, &attempt]);
    let mut batch = sled::Batch::default();
    let (stored, blob_len) = if json.len() > LOG_INLINE_MAX {
        let digest = digest_of(&json);
        store.write_blob(&format!("{digest}.log"), &json)?;
        batch.insert(lref(&digest), Vec::new());
        (StoredLogs::Blob { digest }, json.len())
    } else {
        (StoredLogs::Inline(logs.clone()), 0)
    };
    let released = old_blob.filter(|&d| Some(d) != stored.blob());
    if let Some(digest) = released {
        batch.remove(lref(digest));
    }
    let value = encode(&stored)?;
    let mut weight = Weight::default();
    weight.add(tenant, signed(value.len()) + signed(blob_len) - old_weight);
    batch.insert(log_key, value);
    store.weigh(&mut batch, &weight, Side::Logs)?;
    store.apply(batch)?;
    store.release_log_blobs(released.map(str::to_owned))
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
    use crate::model::RunStatus;
    use crate::store::prelude::*;

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
