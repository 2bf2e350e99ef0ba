//! Task definitions: the types a user writes (YAML or JSON), parsing them with
//! precise, located errors, structural validation on save, and the retry policy
//! of a step (whether to retry an outcome, how long to wait).
//!
//! Everything here is pure: no store, no clock, no plugin lookup. The caller
//! (the API) checks that referenced plugins exist, compiles the trigger with
//! `schedule` (cron syntax, time zones) and stores the result. The `${...}`
//! language of step inputs is [`crate::template`]; graph checks are
//! [`crate::dag`]. The user reference is `docs/TASKS.md`.
//!
//! Reading goes text → a JSON tree (serde-saphyr for YAML, serde_json for JSON,
//! both through one visitor that refuses duplicate keys and counts nodes) → the
//! typed spec, by hand, so that every error carries the path of the offending
//! field (`steps[1].limits.fuel`) rather than a line number alone. The same
//! converter backs `Deserialize`, so stored specs are read exactly like
//! submitted ones.
//!
//! # Layout
//! - `types`: [`TaskSpec`], [`StepSpec`], [`PluginRef`], [`StepLimits`], and the
//!   limits and grants an attempt of a step gets from them.
//! - `retry`: [`RetryPolicy`], [`Backoff`], [`RetryOn`]: whether an attempt is
//!   retried and how long to wait first.
//! - `rules`: [`TriggerRule`], [`RuleVerdict`]: how upstream results decide a step.
//! - `params`: [`ParamSpec`], [`ParamType`]: the `params:` a run's input is
//!   made of, and resolving a run's input from them ([`TaskSpec::manual_input`]).
//! - `reads`: [`InputReads`], which fields of a run's input a task reads
//!   (a trigger sending others is warned).
//! - `error`: [`SpecError`], located by the path of its field.
//! - `read`: text → JSON tree (YAML or JSON; duplicate keys refused, values counted).
//! - `value`: one value of the tree read with its path; mappings that refuse
//!   unknown keys with a did-you-mean hint.
//! - `convert`: JSON tree → typed spec, the fields of each part; it also
//!   implements `Deserialize` for the spec types.
//! - `validate`: what a parsed spec means ([`validate`](fn@validate)), with
//!   the checks of a step and of the trigger in their own files.
//! - [`alerts`], [`retention`]: the `alerts:` and `retention:` sections.
//! - this file: the limits, [`parse`] and [`load`], and the re-exports, so that
//!   callers name every item `crate::task::X`.

pub mod alerts;
pub mod retention;

mod convert;
mod error;
mod params;
mod read;
mod reads;
mod retry;
mod rules;
#[cfg(test)]
mod test_support;
mod types;
mod validate;
mod value;

use std::time::Duration;

// Read by the API contract's test, which holds its schema to these fields.
#[cfg(test)]
pub(crate) use convert::TASK_FIELDS;
use convert::task_from_value;
pub use error::SpecError;
pub use params::{PARAM_TYPES, ParamError, ParamSpec, ParamType, UPSTREAM};
use read::read_tree;
pub use reads::InputReads;
pub use retry::{Backoff, Exponential, RetryOn, RetryPolicy};
pub use rules::{RuleVerdict, TriggerRule};
pub use types::{
    MAX_RANGE_LEN, PluginRef, StepLimits, StepSpec, TaskSpec, VersionRange, VersionSelector,
};
pub use validate::validate;

use crate::cond;
pub use crate::model::Caps;

/// Largest task definition accepted, in bytes (YAML or JSON text).
pub const MAX_SPEC_BYTES: usize = 1 << 20;
/// Cap on the values (scalars, lists, mappings) in one definition, counted
/// after YAML aliases are expanded: a second line of defence against alias bombs.
pub const MAX_SPEC_NODES: usize = 100_000;
pub use crate::model::name::{MAX_NAME_LEN, is_valid_name, is_valid_tag, is_valid_version};
/// Most steps in one task (docs/TASKS.md states it; a test holds them equal).
pub const MAX_STEPS: usize = 256;
pub use crate::model::priority::{DEFAULT_PRIORITY, MAX_PRIORITY};
/// Longest `description`, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Most `params:` one task may declare.
pub const MAX_PARAMS: usize = 32;
/// Longest text value of a param (a `string` default or override), in bytes.
pub const MAX_PARAM_VALUE_BYTES: usize = 4096;
/// Longest `description` of a param, in bytes.
pub const MAX_PARAM_DESCRIPTION_BYTES: usize = 1024;
/// Most `values` of an `enum` param.
pub const MAX_ENUM_VALUES: usize = 64;
/// Longest value of an `enum` param, in bytes.
pub const MAX_ENUM_VALUE_BYTES: usize = 256;
/// Most attempts a retry policy may allow.
pub const MAX_ATTEMPTS: u32 = 100;
/// Most entries in a backoff list.
pub const MAX_BACKOFF_ENTRIES: usize = 100;
/// Longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// Largest exponential backoff factor.
pub const MAX_BACKOFF_FACTOR: f64 = 10.0;
/// Longest `when` expression, in bytes (the CEL parser recurses deeply, so
/// size and nesting are bounded before it ever sees the text; the cost of
/// evaluating is bounded by [`cond::Budget`]).
pub const MAX_WHEN_BYTES: usize = cond::MAX_LEN;
/// Deepest bracket nesting in a `when` expression.
pub const MAX_WHEN_DEPTH: usize = cond::MAX_DEPTH;
/// A 32-bit WebAssembly instance cannot address more than 4 GiB.
pub const MAX_WASM_MEMORY_MB: u64 = 4096;
/// Shortest `every` interval.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// Earliest `trigger.at`, in ms since the Unix epoch: the epoch itself.
/// Instants are kept as milliseconds since it, and nothing before it is a
/// schedule anyone means (a past `at` after it is fine: `catch_up` decides).
pub const MIN_AT_MS: i64 = 0;
/// Latest `trigger.at`: 9999-12-31T23:59:59.999Z, the last instant that
/// RFC 3339's four-digit years can write in UTC (an offset can push a
/// written `9999-12-31T23:00:00-02:00` past it).
pub const MAX_AT_MS: i64 = 253_402_300_799_999;

/// An instant in ms as RFC 3339 UTC with milliseconds (the bounds above).
fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// Parses a task definition: JSON if the first non-space character is `{`,
/// YAML otherwise. Accepts the one-step shorthand (top-level `plugin`,
/// `input`, `limits`, `retry`, `pool`: one step named after the task).
/// Refuses: more than [`MAX_SPEC_BYTES`], alias bombs and over-deep nesting,
/// duplicate keys, unknown fields (naming the field and where), bad types,
/// bad durations (quoting the text), `steps` together with `plugin`.
///
/// This reads the document; [`validate`](fn@validate) checks what it means.
pub fn parse(text: &str) -> Result<TaskSpec, SpecError> {
    task_from_value(&read_tree(text)?).map(|(spec, _)| spec)
}

/// [`parse`] then [`validate`](fn@validate). For a shorthand task, validation
/// errors are reported at the fields as written (`limits.fuel`, not
/// `steps[0].limits.fuel`).
pub fn load(text: &str, caps: &Caps) -> Result<TaskSpec, SpecError> {
    let (spec, shorthand) = task_from_value(&read_tree(text)?)?;
    validate(&spec, caps).map_err(|mut e| {
        if shorthand && let Some(rest) = e.path.strip_prefix("steps[0]") {
            e.path = rest.strip_prefix('.').unwrap_or(rest).to_owned();
        }
        e
    })?;
    Ok(spec)
}

/// The fields of `trigger:` that fire a task by time (`after` fires it
/// when another task's run ends).
const TIME_TRIGGER_FIELDS: [&str; 5] = ["cron", "timezone", "at", "delay", "every"];

/// The same definition without what fires it by time, as JSON text: the
/// trigger's `cron`, `timezone`, `at`, `delay` and `every` are removed (and
/// `trigger:` itself when nothing is left of it); everything else, an
/// `after` trigger included, is kept as written. `ax task run --local` saves
/// this, so that no scheduled run starts beside the one it asks for (an
/// `after` trigger cannot fire there: no other task exists). Errors as
/// [`parse`] reads the text.
pub fn without_time_trigger(text: &str) -> Result<String, SpecError> {
    let mut tree = read_tree(text)?;
    drop_time_trigger(&mut tree);
    Ok(tree.to_string())
}

/// The definition for a development run of plugin `name` at `version`, as
/// JSON text: without what fires it by time (as [`without_time_trigger`]),
/// and every reference to `name` (the shorthand's `plugin:` and each
/// step's, whatever version, range or tag they name) naming exactly
/// `name@version`; everything else as written. `ax dev --url` saves this
/// on a server, so that the runs it starts, and only those, run the
/// development version it pushed. Errors as [`parse`] reads the text.
pub fn for_development(text: &str, name: &str, version: &str) -> Result<String, SpecError> {
    let mut tree = read_tree(text)?;
    drop_time_trigger(&mut tree);
    let exact = serde_json::Value::String(format!("{name}@{version}"));
    let names = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| s.parse::<PluginRef>().ok())
            .is_some_and(|r| r.name == name)
    };
    if let Some(task) = tree.as_object_mut() {
        if task.get("plugin").is_some_and(names) {
            task.insert("plugin".into(), exact.clone());
        }
        if let Some(steps) = task.get_mut("steps").and_then(|s| s.as_array_mut()) {
            for step in steps.iter_mut().filter_map(|s| s.as_object_mut()) {
                if step.get("plugin").is_some_and(names) {
                    step.insert("plugin".into(), exact.clone());
                }
            }
        }
    }
    Ok(tree.to_string())
}

/// Removes the time trigger's fields of a definition's tree (and
/// `trigger:` when nothing is left of it).
fn drop_time_trigger(tree: &mut serde_json::Value) {
    if let Some(task) = tree.as_object_mut() {
        if let Some(trigger) = task.get_mut("trigger").and_then(|t| t.as_object_mut()) {
            for field in TIME_TRIGGER_FIELDS {
                trigger.remove(field);
            }
        }
        let emptied = task
            .get("trigger")
            .is_some_and(|t| t.as_object().is_some_and(|t| t.is_empty()));
        if emptied {
            task.remove("trigger");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schedule::{CatchUp, Overlap};
    use crate::task::test_support::{CAPS, SPEC_EXAMPLE, plugin, secs};
    use crate::{dag, template};

    #[test]
    fn spec_example_parses_and_validates() {
        let spec = load(SPEC_EXAMPLE, &CAPS).unwrap();
        assert_eq!(spec.name, "order_report");
        let trigger = spec.trigger.clone().unwrap();
        assert_eq!(trigger.cron.as_deref(), Some("0 30 1 * * ?"));
        assert_eq!(trigger.timezone.as_deref(), Some("Asia/Shanghai"));
        assert_eq!(spec.catch_up, CatchUp::Latest);
        assert_eq!(spec.overlap, Overlap::Skip);
        assert_eq!(spec.priority, 5);
        let names: Vec<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["extract", "full", "incremental", "push"]);

        let extract = &spec.steps[0];
        assert_eq!(extract.plugin, plugin("extract-orders@1.2.0"));
        assert_eq!(extract.input, json!({"date": "${bizDate}"}));
        assert_eq!(
            extract.limits,
            StepLimits {
                fuel: Some(50_000_000),
                memory_mb: Some(64),
                timeout: Some(secs(30)),
                ..StepLimits::default()
            }
        );
        assert_eq!(extract.pool.as_deref(), Some("warehouse"));
        assert_eq!(extract.retry.max_attempts, 3);
        assert_eq!(
            extract.retry.backoff,
            Backoff::List(vec![secs(10), secs(30), secs(120)])
        );

        let full = &spec.steps[1];
        assert_eq!(full.needs, ["extract"]);
        assert_eq!(
            full.when.as_deref(),
            Some("steps.extract.output.rows > 800000")
        );
        assert_eq!(full.input, json!({}));
        assert_eq!(full.retry, RetryPolicy::default());
        assert_eq!(full.trigger_rule, TriggerRule::AllSuccess);

        let push = &spec.steps[3];
        assert_eq!(push.needs, ["full", "incremental"]);
        assert_eq!(push.trigger_rule, TriggerRule::OneSuccess);
        assert_eq!(push.plugin.to_string(), "notify@1.0.0");
        assert_eq!(
            template::references(&push.input).unwrap(),
            [template::VarRef::StepOutput {
                step: "extract".into(),
                path: vec!["rows".into()]
            }]
        );
        assert_eq!(dag::check(&spec.graph()).unwrap(), [0, 1, 2, 3]);
    }

    #[test]
    fn serialized_spec_reads_back_equal() {
        let spec = parse(SPEC_EXAMPLE).unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(parse(&json).unwrap(), spec);
        assert_eq!(serde_json::from_str::<TaskSpec>(&json).unwrap(), spec);
        let value = serde_json::to_value(&spec).unwrap();
        assert_eq!(value["steps"][0]["plugin"], json!("extract-orders@1.2.0"));
        assert_eq!(
            value["steps"][0]["limits"],
            json!({"fuel": 50000000, "memory_mb": 64, "timeout": "30s"})
        );
        assert_eq!(
            value["steps"][0]["retry"]["backoff"],
            json!(["10s", "30s", "2m"])
        );
        assert_eq!(
            value["steps"][1]["retry"],
            json!({"max_attempts": 1, "backoff": {"exponential": {"initial": "1s", "max": "5m", "factor": 2.0, "jitter": true}}})
        );
        assert_eq!(value["steps"][3]["trigger_rule"], json!("one_success"));
        assert!(value["steps"][1].get("limits").is_none());
        // And through YAML text too.
        let yaml = serde_saphyr::to_string(&spec).unwrap();
        assert_eq!(parse(&yaml).unwrap(), spec);
    }

    #[test]
    fn yaml_json_and_shorthand_forms_give_equal_specs() {
        let yaml_steps = "
name: hourly
trigger: { every: 1h }
steps:
  - name: hourly
    plugin: echo@0.1.0
    input: { n: 1, list: [a, b], flag: true }
    limits: { fuel: 1000, timeout: 5s }
    retry: { max_attempts: 2 }
    pool: small
";
        let yaml_short = "
name: hourly
trigger:
  every: 1h
plugin: echo@0.1.0
input:
  n: 1
  list: [a, b]
  flag: true
limits: { fuel: 1000, timeout: 5s }
retry: { max_attempts: 2 }
pool: small
";
        let json_short = r#"  {"name": "hourly", "trigger": {"every": "1h"}, "plugin": "echo@0.1.0",
            "input": {"n": 1, "list": ["a", "b"], "flag": true},
            "limits": {"fuel": 1000, "timeout": "5s"}, "retry": {"max_attempts": 2}, "pool": "small"}"#;
        let json_steps = r#"{"name": "hourly", "trigger": {"every": "1h"}, "steps": [{"name": "hourly",
            "plugin": "echo@0.1.0", "input": {"n": 1, "list": ["a", "b"], "flag": true},
            "limits": {"fuel": 1000, "timeout": "5s"}, "retry": {"max_attempts": 2}, "pool": "small"}]}"#;
        let a = load(yaml_steps, &CAPS).unwrap();
        assert_eq!(load(yaml_short, &CAPS).unwrap(), a);
        assert_eq!(load(json_short, &CAPS).unwrap(), a);
        assert_eq!(load(json_steps, &CAPS).unwrap(), a);
        assert_eq!(a.trigger.unwrap().every, Some(secs(3600)));
        assert_eq!(a.steps.len(), 1);
        assert_eq!(a.steps[0].name, "hourly");
    }

    #[test]
    fn validate_reports_step_paths_and_load_maps_them_for_shorthand() {
        let yaml = "name: t\nplugin: p@1.0.0\nlimits: {fuel: 90000000000}\n";
        let spec = parse(yaml).unwrap();
        assert_eq!(
            validate(&spec, &CAPS).unwrap_err().path,
            "steps[0].limits.fuel"
        );
        assert_eq!(load(yaml, &CAPS).unwrap_err().path, "limits.fuel");
        assert_eq!(
            load(yaml, &CAPS).unwrap_err().to_string(),
            "limits.fuel: fuel 90000000000 is above the tenant's cap of 10000000000"
        );
    }

    #[test]
    fn the_documented_limits_are_the_enforced_ones() {
        let docs = include_str!("../../../docs/TASKS.md");
        let steps = format!("| 1 to {MAX_STEPS} steps |");
        assert!(docs.contains(&steps), "docs/TASKS.md must say `{steps}`");
        // The *Limits* table: the row naming each constant gives its value.
        let row = |constant: &str| {
            docs.lines()
                .find(|l| l.starts_with('|') && l.contains(&format!("`{constant}`")))
                .unwrap_or_else(|| panic!("docs/TASKS.md *Limits* has no row for {constant}"))
        };
        for (constant, value) in [
            ("MAX_STEPS", format!("1 to {MAX_STEPS}")),
            ("MAX_SPEC_NODES", "100,000".to_string()),
            ("MAX_NAME_LEN", format!("{MAX_NAME_LEN} characters")),
            ("MAX_PRIORITY", format!("0..={MAX_PRIORITY}")),
            (
                "MAX_DESCRIPTION_BYTES",
                format!("{MAX_DESCRIPTION_BYTES} bytes"),
            ),
            ("MAX_ATTEMPTS", format!("| {MAX_ATTEMPTS} |")),
            (
                "MAX_BACKOFF_ENTRIES",
                format!("{MAX_BACKOFF_ENTRIES} entries"),
            ),
            ("MAX_WHEN_BYTES", format!("{MAX_WHEN_BYTES} bytes")),
            ("MAX_WHEN_DEPTH", format!("{MAX_WHEN_DEPTH} deep")),
            ("MAX_WASM_MEMORY_MB", format!("{MAX_WASM_MEMORY_MB} (")),
            (
                "MIN_AT_MS",
                format!("{}..={}", utc(MIN_AT_MS), utc(MAX_AT_MS)),
            ),
            ("MAX_PARAMS", format!("{MAX_PARAMS} per task")),
            (
                "MAX_PARAM_VALUE_BYTES",
                format!("{MAX_PARAM_VALUE_BYTES} bytes"),
            ),
            (
                "MAX_PARAM_DESCRIPTION_BYTES",
                format!("{MAX_PARAM_DESCRIPTION_BYTES} bytes"),
            ),
            (
                "MAX_ENUM_VALUES",
                format!("1 to {MAX_ENUM_VALUES}, each 1 to {MAX_ENUM_VALUE_BYTES} bytes"),
            ),
        ] {
            assert!(
                row(constant).contains(&value),
                "{constant}: `{}` lacks `{value}`",
                row(constant)
            );
        }
        assert_eq!(MAX_SPEC_NODES, 100_000, "update the *Limits* table");
    }

    #[test]
    fn a_local_copy_keeps_everything_but_the_time_trigger() {
        let yaml = "name: t\ntrigger: { cron: '* * * * * *', timezone: UTC }\nparams: [{ name: n, type: integer, default: 3 }]\nplugin: p@1.0.0\ninput: { n: '${input.n}' }\n";
        let copy = without_time_trigger(yaml).unwrap();
        let (original, copied) = (parse(yaml).unwrap(), parse(&copy).unwrap());
        assert!(copied.trigger.is_none(), "{copy}");
        assert!(!copied.fires_by_itself());
        assert_eq!(copied.steps, original.steps);
        assert_eq!(copied.params, original.params);
        for trigger in [
            "{ every: 1s }",
            "{ at: '2030-01-01T00:00:00Z' }",
            "{ delay: 5m }",
        ] {
            let yaml = format!("name: t\ntrigger: {trigger}\nplugin: p@1.0.0\n");
            let copied = parse(&without_time_trigger(&yaml).unwrap()).unwrap();
            assert!(copied.trigger.is_none(), "for {trigger}");
        }
        let yaml = "name: t\ntrigger: { after: [up], on: failure }\nplugin: p@1.0.0\n";
        let copied = parse(&without_time_trigger(yaml).unwrap()).unwrap();
        assert_eq!(copied.trigger, parse(yaml).unwrap().trigger, "after stays");
        let yaml = "name: t\nplugin: p@1.0.0\n";
        assert_eq!(
            parse(&without_time_trigger(yaml).unwrap()).unwrap(),
            parse(yaml).unwrap()
        );
    }

    #[test]
    fn a_development_copy_names_the_version_for_every_reference_to_the_plugin() {
        let yaml = "name: t\ntrigger: { every: 1s }\nplugin: p@^0.1\nconfig: { a: 1 }\n";
        let copied = parse(&for_development(yaml, "p", "0.1.0-dev.7").unwrap()).unwrap();
        assert!(copied.trigger.is_none());
        assert_eq!(copied.steps[0].plugin.to_string(), "p@0.1.0-dev.7");
        assert_eq!(copied.steps[0].config, parse(yaml).unwrap().steps[0].config);
        let yaml = "name: t\nsteps:\n  - { name: a, plugin: p@stable }\n  \
                    - { name: b, plugin: pp@^0.1, needs: [a] }\n  - { name: c, plugin: p@0.1.0 }\n";
        let copied = parse(&for_development(yaml, "p", "0.2.0-dev.1").unwrap()).unwrap();
        let plugins: Vec<String> = copied.steps.iter().map(|s| s.plugin.to_string()).collect();
        assert_eq!(plugins, ["p@0.2.0-dev.1", "pp@^0.1", "p@0.2.0-dev.1"]);
    }
}
