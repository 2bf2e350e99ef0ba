//! Usage buckets under `use/{tenant}/{hour}/{task}`: one hour of a task's
//! usage, added to (read, add, write) and never replaced.

use super::engine::Batch;
use super::keys::{decode, encode, hour_part, key, usage_key};
use super::{SledStore, engine_error};
use crate::model::Millis;
use crate::store::Result;
use crate::tenant::UsageBucket;

/// [`Tenancy::usage`](crate::store::Tenancy::usage).
pub(super) fn read(
    store: &SledStore,
    tenant: &str,
    from: Millis,
    to: Millis,
) -> Result<Vec<UsageBucket>> {
    if from >= to {
        return Ok(Vec::new());
    }
    let lo = usage_key(tenant, from, "");
    let hi = key("use", &[tenant, &hour_part(to)]);
    store
        .db
        .range(lo..hi)
        .map(|item| {
            let (k, v) = item.map_err(engine_error)?;
            decode(&k, &v)
        })
        .collect()
}

impl SledStore {
    /// Adds `usage` to the stored hourly buckets, in `batch` (read-add-write:
    /// callers hold `run_lock`).
    pub(super) fn usage_changes(&self, batch: &mut Batch, usage: &[UsageBucket]) -> Result<()> {
        let mut merged: std::collections::BTreeMap<Vec<u8>, UsageBucket> = Default::default();
        for u in usage {
            let k = usage_key(&u.tenant, u.hour, &u.task);
            if let Some(b) = merged.get_mut(&k) {
                b.add(u);
                continue;
            }
            let mut bucket = self.get::<UsageBucket>(&k)?.unwrap_or_else(|| UsageBucket {
                outcomes: Default::default(),
                fuel: 0,
                attempts: 0,
                wall_ms: 0.0,
                ..u.clone()
            });
            bucket.add(u);
            merged.insert(k, bucket);
        }
        for (k, bucket) in merged {
            batch.insert(k, encode(&bucket)?);
        }
        Ok(())
    }
}
