//! Fixtures shared by the task module's tests: the example task of SPEC §4, a
//! tenant's caps, and shorthands for reading that expect an error.

use std::time::Duration;

use super::{Caps, PluginRef, SpecError, load, parse};

/// The example task of SPEC §4, verbatim.
pub(super) const SPEC_EXAMPLE: &str = r#"name: order_report            # unique per tenant
trigger:
  cron: "0 30 1 * * ?"        # 6 or 7 fields, seconds first (Quartz style); or
  timezone: Asia/Shanghai     # IANA zone; default UTC
  # at: 2026-12-01T23:00:00+08:00   one-shot
  # delay: 30m                      relative to the task's creation, not to when it was noticed
  # every: 5m                       fixed interval
  # after: [other_task]             when another task's run finishes (on: success | failure | done)
  # (no trigger: manual/API only)
catch_up: latest              # after downtime: latest (default) | none | all
overlap: skip                 # previous run still active: skip (default) | queue_one | allow
priority: 5                   # 0..9, higher first
steps:
  - name: extract
    plugin: extract-orders@1.2.0
    input: { date: "${bizDate}" }
    limits: { fuel: 50000000, memory_mb: 64, timeout: 30s }
    pool: warehouse             # named slot pool (concurrency, optional start rate)
    retry: { max_attempts: 3, backoff: [10s, 30s, 2m] }
  - name: full
    needs: [extract]
    when: "steps.extract.output.rows > 800000"
    plugin: pack-full@1.0.0
  - name: incremental
    needs: [extract]
    when: "steps.extract.output.rows <= 800000"
    plugin: pack-incremental@1.0.0
  - name: push
    needs: [full, incremental]
    trigger_rule: one_success   # all_success (default) | one_success | all_done | none_failed
    plugin: notify@1.0.0
    input: { text: "report ready: ${steps.extract.output.rows} rows" }
"#;

pub(super) const CAPS: Caps = Caps {
    max_fuel: 10_000_000_000,
    max_memory_mb: 256,
    max_timeout: Duration::from_secs(1800),
};

pub(super) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub(super) fn parse_err(text: &str) -> SpecError {
    parse(text).expect_err("should not parse")
}

pub(super) fn load_err(text: &str) -> SpecError {
    load(text, &CAPS).expect_err("should not load")
}

/// Error (path, message) of loading `yaml`.
pub(super) fn err_of(yaml: &str) -> (String, String) {
    let e = load_err(yaml);
    (e.path, e.message)
}

pub(super) fn plugin(s: &str) -> PluginRef {
    s.parse().unwrap()
}
