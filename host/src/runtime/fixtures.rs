//! Test fixtures shared by the runtime's unit tests: the example plugins
//! `host/build.rs` compiles, and an attempt's context.

use crate::model::{AttemptContext, TriggerKind};

/// The bytes of example plugin `name` (`plugins/`, built by `host/build.rs`).
pub(super) fn example(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("AX_PLUGIN_DIR")).join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The context of attempt 1 of a manual run.
pub(super) fn context() -> AttemptContext {
    AttemptContext {
        run_id: "run-1".into(),
        tenant: "t".into(),
        task: "t".into(),
        step: "s".into(),
        attempt: 1,
        scheduled_for: "2026-12-01T00:00:00Z".into(),
        trigger: TriggerKind::Manual,
    }
}
