//! Attempt records of the facade ([`Ax`]): what `ax run replay` fetches,
//! the record of one attempt and the component it ran, both scoped to the
//! caller's tenant through the run.

use crate::model::record::AttemptRecord;
use crate::service::{Ax, Error, Result};

impl Ax {
    /// The record of attempt `attempt` of `step` in run `id`: not found when
    /// the run is another tenant's, or when that attempt kept no record.
    pub fn attempt_record(
        &self,
        tenant: &str,
        id: &str,
        step: &str,
        attempt: u32,
    ) -> Result<AttemptRecord> {
        self.get_run(tenant, id)?;
        self.store
            .get_record(id, step, attempt)?
            .ok_or_else(|| no_record(id, step, attempt))
    }

    /// The component a recorded attempt ran (its bytes), so it can be replayed
    /// without the plugin's file: not found when its blob is gone.
    pub fn attempt_component(
        &self,
        tenant: &str,
        id: &str,
        step: &str,
        attempt: u32,
    ) -> Result<Vec<u8>> {
        let record = self.attempt_record(tenant, id, step, attempt)?;
        self.store.get_blob(&record.digest)?.ok_or_else(|| {
            Error::NotFound(format!(
                "the component {} of that attempt (its plugin version was deleted)",
                record.digest
            ))
        })
    }
}

fn no_record(id: &str, step: &str, attempt: u32) -> Error {
    Error::NotFound(format!(
        "a record of attempt {attempt} of step `{step}` in run `{id}` (a step keeps records with `record: on_failure` or `always`)"
    ))
}
