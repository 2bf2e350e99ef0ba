//! JSON tree → typed spec: the fields each part of a definition has (the task,
//! the one-step shorthand, a step, the trigger, limits, retry, backoff) and the
//! converters that read them, every error carrying the path of its field. The
//! same converters implement `Deserialize` for the spec types, so stored specs
//! are read exactly like submitted ones. What the values mean (names, bounds,
//! the graph) is checked afterwards by `task::validate`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::error::{Result, SpecError};
use super::params::{PARAM_TYPES, ParamSpec, ParamType};
use super::read::Tree;
use super::retry::{Backoff, Exponential, RetryPolicy};
use super::types::{StepLimits, StepSpec, TaskSpec};
use super::value::{
    Obj, as_bool, as_duration, as_f64, as_keyword, as_string, as_string_list, as_u64, describe,
    join,
};
use super::{DEFAULT_PRIORITY, MAX_ATTEMPTS, MAX_PRIORITY, alerts, retention};
use crate::capability::{self, KvScope};
use crate::model::Definition;
use crate::model::record::RecordMode;
use crate::schedule::TriggerSpec;
use crate::template::shorten;

/// Every top-level field of a definition (the API document lists the same).
pub(crate) const TASK_FIELDS: [&str; 20] = [
    "name",
    "description",
    "trigger",
    "catch_up",
    "overlap",
    "priority",
    "params",
    "steps",
    "retention",
    "alerts",
    "config",
    "record",
    // The one-step shorthand.
    "plugin",
    "input",
    "limits",
    "retry",
    "pool",
    "allow_http",
    "secrets",
    "kv",
];
const SHORTHAND_FIELDS: [&str; 8] = [
    "plugin",
    "input",
    "limits",
    "retry",
    "pool",
    "allow_http",
    "secrets",
    "kv",
];
const STEP_FIELDS: [&str; 14] = [
    "name",
    "plugin",
    "input",
    "limits",
    "pool",
    "retry",
    "needs",
    "when",
    "trigger_rule",
    "allow_http",
    "secrets",
    "kv",
    "config",
    "record",
];
const PARAM_FIELDS: [&str; 5] = ["name", "type", "values", "default", "description"];
const TRIGGER_FIELDS: [&str; 7] = ["cron", "timezone", "at", "delay", "every", "after", "on"];

/// Converts a JSON tree to a spec; also says whether it used the shorthand.
pub(super) fn task_from_value(value: &Value) -> Result<(TaskSpec, bool)> {
    let Value::Object(map) = value else {
        return Err(SpecError::new(
            "",
            format!(
                "a task definition is a mapping (name, trigger, steps…), found {}",
                describe(value)
            ),
        ));
    };
    let task = Obj {
        map,
        path: String::new(),
    };
    let step_only = "this is a step field: put the step under `steps:`";
    task.deny_unknown(
        &TASK_FIELDS,
        &[
            ("needs", step_only),
            ("when", step_only),
            ("trigger_rule", step_only),
            ("cron", "put it under `trigger:`"),
            ("every", "put it under `trigger:`"),
            ("at", "put it under `trigger:`"),
            ("delay", "put it under `trigger:`"),
            ("after", "put it under `trigger:`"),
            ("timezone", "put it under `trigger:`"),
        ],
    )?;
    let name = task.required("name", as_string)?;
    let description = task.opt("description", as_string)?;
    let trigger = task.opt("trigger", trigger_from_value)?;
    let catch_up = task.opt("catch_up", as_keyword)?.unwrap_or_default();
    let overlap = task.opt("overlap", as_keyword)?.unwrap_or_default();
    let priority = task
        .opt("priority", |v, p| {
            let n = as_u64(v, p)?;
            u8::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_PRIORITY)
                .ok_or_else(|| SpecError::new(p, format!("{n} is outside 0..={MAX_PRIORITY}")))
        })?
        .unwrap_or(DEFAULT_PRIORITY);
    let params = task.opt("params", params_from_value)?.unwrap_or_default();
    let retention = task.opt("retention", retention::RetentionSpec::from_value)?;
    let alerts = task.opt("alerts", alerts::AlertSpec::from_value)?;

    let shorthand_keys: Vec<&str> = SHORTHAND_FIELDS
        .into_iter()
        .filter(|k| map.contains_key(*k))
        .collect();
    let (steps, shorthand) = match (task.get("steps"), shorthand_keys.first()) {
        (Some(_), Some(key)) => {
            let message = if *key == "plugin" {
                "use either `steps` or a top-level `plugin` (the one-step shorthand), not both"
                    .to_owned()
            } else {
                format!("`{key}` belongs to a step when `steps` is used")
            };
            return Err(SpecError::new(task.at(key), message));
        }
        (Some(steps), None) => {
            let Value::Array(items) = steps else {
                return Err(SpecError::new(
                    "steps",
                    format!("expected a list of steps, found {}", describe(steps)),
                ));
            };
            let steps = items
                .iter()
                .enumerate()
                .map(|(i, item)| step_from_value(item, &format!("steps[{i}]"), None))
                .collect::<Result<Vec<_>>>()?;
            (steps, false)
        }
        (None, _) if task.get("plugin").is_some() => {
            (vec![step_from_value(value, "", Some(&name))?], true)
        }
        (None, Some(key)) => {
            return Err(SpecError::new(
                task.at(key),
                format!(
                    "`{key}` needs a top-level `plugin` (the one-step shorthand) or belongs in `steps`"
                ),
            ));
        }
        (None, None) => {
            return Err(SpecError::new(
                "",
                "a task needs `steps` (a list) or a top-level `plugin` (the one-step shorthand)",
            ));
        }
    };
    let spec = TaskSpec {
        name,
        description,
        trigger,
        catch_up,
        overlap,
        priority,
        params,
        steps,
        retention,
        alerts,
        config: task.opt("config", config_from_value)?.unwrap_or_default(),
        record: task.opt("record", record_from_value)?.unwrap_or_default(),
    };
    Ok((spec, shorthand))
}

/// `params: [{name, type, values, default, description}, …]`; a default
/// is checked against its type here (and a whole `5.0` stored as `5`).
fn params_from_value(value: &Value, path: &str) -> Result<Vec<ParamSpec>> {
    let Value::Array(items) = value else {
        return Err(SpecError::new(
            path,
            format!(
                "expected a list of params ([{{name: day, type: string, default: \"2026-01-01\"}}]), found {}",
                describe(value)
            ),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| param_from_value(item, &format!("{path}[{i}]")))
        .collect()
}

fn param_from_value(value: &Value, path: &str) -> Result<ParamSpec> {
    let obj = Obj::new(value, path, "a param", &PARAM_FIELDS)?;
    let name = obj.required("name", as_string)?;
    let type_name = obj.required("type", as_string)?;
    let values = obj.opt("values", |v, p| match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| as_string(item, &format!("{p}[{i}]")))
            .collect(),
        other => Err(SpecError::new(
            p,
            format!("expected a list of texts, found {}", describe(other)),
        )),
    })?;
    let kind = match (type_name.as_str(), values) {
        ("enum", Some(values)) => ParamType::Enum(values),
        ("enum", None) => {
            return Err(SpecError::new(
                path,
                "missing field `values`: an enum lists its values (values: [full, incremental])",
            ));
        }
        (other, values) => {
            let Some(kind) = ParamType::scalar(other) else {
                return Err(SpecError::new(
                    obj.at("type"),
                    format!(
                        "unknown type `{}`; expected one of: {}",
                        shorten(other),
                        PARAM_TYPES.join(", ")
                    ),
                ));
            };
            if values.is_some() {
                return Err(SpecError::new(
                    obj.at("values"),
                    format!("`values` belongs to `type: enum`, not `{other}`"),
                ));
            }
            kind
        }
    };
    let default = obj.opt("default", |v, p| {
        kind.check(v).map_err(|why| {
            SpecError::new(p, format!("the default of {} param: {why}", kind.article()))
        })
    })?;
    Ok(ParamSpec {
        name,
        kind,
        default,
        description: obj.opt("description", as_string)?,
    })
}

fn trigger_from_value(value: &Value, path: &str) -> Result<TriggerSpec> {
    let obj = Obj::new(value, path, "`trigger`", &TRIGGER_FIELDS)?;
    // Read field by field so an error names its field, then as a whole.
    for (key, field) in obj.map {
        let one = Value::Object(Map::from_iter([(key.clone(), field.clone())]));
        if let Err(e) = serde_json::from_value::<TriggerSpec>(one) {
            let msg = e.to_string().replace("unknown variant", "unknown value");
            return Err(SpecError::new(obj.at(key), msg));
        }
    }
    serde_json::from_value(value.clone()).map_err(|e| SpecError::new(path, e.to_string()))
}

/// Reads a step. `shorthand_name` is set when the step's fields sit at the top
/// level of the task (the one-step shorthand); the step is then named after the task.
fn step_from_value(value: &Value, path: &str, shorthand_name: Option<&str>) -> Result<StepSpec> {
    let obj = match shorthand_name {
        // The task reader has already refused unknown top-level fields.
        Some(_) => Obj::new(value, path, "a task", &TASK_FIELDS)?,
        None => Obj::new(value, path, "a step", &STEP_FIELDS)?,
    };
    let name = match shorthand_name {
        Some(name) => name.to_owned(),
        None => obj.required("name", as_string)?,
    };
    let plugin = obj.required("plugin", |v, p| {
        as_string(v, p)?.parse().map_err(|e| SpecError::new(p, e))
    })?;
    let input = obj
        .get("input")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let limits = obj.opt("limits", limits_from_value)?.unwrap_or_default();
    let pool = obj.opt("pool", as_string)?;
    let retry = obj.opt("retry", retry_from_value)?.unwrap_or_default();
    let needs = obj.opt("needs", as_string_list)?.unwrap_or_default();
    let when = obj.opt("when", as_string)?;
    let trigger_rule = obj.opt("trigger_rule", as_keyword)?.unwrap_or_default();
    let allow_http = obj
        .opt("allow_http", |v, p| {
            let items = as_string_list(v, p)?;
            capability::http::parse_list(&items)
                .map_err(|(i, e)| SpecError::new(format!("{p}[{i}]"), e))
        })?
        .unwrap_or_default();
    let secrets = obj.opt("secrets", as_string_list)?.unwrap_or_default();
    let kv = obj.opt("kv", kv_from_value)?.flatten();
    // In the shorthand, a top-level `config` is the task's, not the step's.
    let config = match shorthand_name {
        Some(_) => BTreeMap::new(),
        None => obj.opt("config", config_from_value)?.unwrap_or_default(),
    };
    // In the shorthand, a top-level `record` is the task's (read above).
    let record = match shorthand_name {
        Some(_) => None,
        None => obj.opt("record", record_from_value)?,
    };
    Ok(StepSpec {
        name,
        plugin,
        input,
        limits,
        pool,
        retry,
        needs,
        when,
        trigger_rule,
        allow_http,
        secrets,
        kv,
        config,
        record,
    })
}

/// `record: off | on_failure | always`.
fn record_from_value(value: &Value, path: &str) -> Result<RecordMode> {
    value.as_str().and_then(RecordMode::parse).ok_or_else(|| {
        SpecError::new(
            path,
            format!("`record` is `off`, `on_failure` or `always`, not {value}"),
        )
    })
}

/// `kv: tenant | task | true | false` (`true` is `tenant`, `false` none).
fn kv_from_value(value: &Value, path: &str) -> Result<Option<KvScope>> {
    match value {
        Value::Bool(true) => Ok(Some(KvScope::Tenant)),
        Value::Bool(false) => Ok(None),
        Value::String(s) if s == "tenant" => Ok(Some(KvScope::Tenant)),
        Value::String(s) if s == "task" => Ok(Some(KvScope::Task)),
        other => Err(SpecError::new(
            path,
            format!(
                "expected `tenant` or `task` (or `true` for tenant), found {}",
                describe(other)
            ),
        )),
    }
}

/// `config: {key: value}`; scalar values are kept as their text.
fn config_from_value(value: &Value, path: &str) -> Result<BTreeMap<String, String>> {
    let Value::Object(map) = value else {
        return Err(SpecError::new(
            path,
            format!(
                "expected a mapping of keys to values, found {}",
                describe(value)
            ),
        ));
    };
    map.iter()
        .map(|(k, v)| {
            let at = join(path, k);
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => {
                    return Err(SpecError::new(
                        at,
                        format!(
                            "a config value is text, a number or a boolean, found {}",
                            describe(other)
                        ),
                    ));
                }
            };
            Ok((k.clone(), text))
        })
        .collect()
}

fn limits_from_value(value: &Value, path: &str) -> Result<StepLimits> {
    let obj = Obj::new(
        value,
        path,
        "`limits`",
        &[
            "fuel",
            "memory_mb",
            "timeout",
            "http_requests",
            "http_timeout",
            "http_response_kb",
        ],
    )?;
    Ok(StepLimits {
        fuel: obj.opt("fuel", as_u64)?,
        memory_mb: obj.opt("memory_mb", as_u64)?,
        timeout: obj.opt("timeout", as_duration)?,
        http_requests: obj.opt("http_requests", |v, p| {
            let n = as_u64(v, p)?;
            u32::try_from(n).map_err(|_| SpecError::new(p, format!("{n} is too large")))
        })?,
        http_timeout: obj.opt("http_timeout", as_duration)?,
        http_response_kb: obj.opt("http_response_kb", as_u64)?,
    })
}

fn retry_from_value(value: &Value, path: &str) -> Result<RetryPolicy> {
    let obj = Obj::new(
        value,
        path,
        "`retry`",
        &["max_attempts", "backoff", "retry_on"],
    )?;
    let max_attempts = obj
        .opt("max_attempts", |v, p| {
            let n = as_u64(v, p)?;
            u32::try_from(n)
                .map_err(|_| SpecError::new(p, format!("{n} is above the limit of {MAX_ATTEMPTS}")))
        })?
        .unwrap_or(1);
    let backoff = obj.opt("backoff", backoff_from_value)?.unwrap_or_default();
    let retry_on = obj
        .opt("retry_on", |v, p| {
            let Value::Array(items) = v else {
                return Err(SpecError::new(
                    p,
                    format!("expected a list, found {}", describe(v)),
                ));
            };
            items
                .iter()
                .enumerate()
                .map(|(i, item)| as_keyword(item, &format!("{p}[{i}]")))
                .collect()
        })?
        .unwrap_or_default();
    Ok(RetryPolicy {
        max_attempts,
        backoff,
        retry_on,
    })
}

fn backoff_from_value(value: &Value, path: &str) -> Result<Backoff> {
    match value {
        // A single duration: a fixed wait.
        Value::String(_) => Ok(Backoff::List(vec![as_duration(value, path)?])),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| as_duration(item, &format!("{path}[{i}]")))
            .collect::<Result<_>>()
            .map(Backoff::List),
        Value::Object(_) => {
            let obj = Obj::new(value, path, "`backoff`", &["exponential"])?;
            let inner_path = obj.at("exponential");
            let Some(inner) = obj.map.get("exponential") else {
                return Err(SpecError::new(path, "missing field `exponential`"));
            };
            let empty = Value::Object(Map::new());
            let inner = if inner.is_null() { &empty } else { inner };
            let e = Obj::new(
                inner,
                &inner_path,
                "`exponential`",
                &["initial", "max", "factor", "jitter"],
            )?;
            let d = Exponential::default();
            Ok(Backoff::Exponential(Exponential {
                initial: e.opt("initial", as_duration)?.unwrap_or(d.initial),
                max: e.opt("max", as_duration)?.unwrap_or(d.max),
                factor: e.opt("factor", as_f64)?.unwrap_or(d.factor),
                jitter: e.opt("jitter", as_bool)?.unwrap_or(d.jitter),
            }))
        }
        other => Err(SpecError::new(
            path,
            format!(
                "expected a list of durations ([10s, 30s, 2m]) or {{ exponential: {{ initial: 1s, max: 5m }} }}, found {}",
                describe(other)
            ),
        )),
    }
}

/// Implements `Deserialize` through a path-tracking converter, so stored and
/// submitted definitions are read by the same code.
macro_rules! deserialize_via {
    ($ty:ty, $convert:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let value = Tree::deserialize(d)?.0;
                $convert(&value).map_err(de::Error::custom)
            }
        }
    };
}

deserialize_via!(TaskSpec, |v| task_from_value(v).map(|(spec, _)| spec));
deserialize_via!(StepSpec, |v| step_from_value(v, "", None));
deserialize_via!(StepLimits, |v| limits_from_value(v, ""));
deserialize_via!(RetryPolicy, |v| retry_from_value(v, ""));
deserialize_via!(Backoff, |v| backoff_from_value(v, ""));

impl TaskSpec {
    /// The typed form of a stored definition, parsed once for every record
    /// holding it ([`Definition::typed`]): a task record and the runs made
    /// from it, and the runs a store reads back of one definition, share
    /// one parse. Read by the same converter as a submitted definition (its
    /// validation was done when it was stored); an error is one of a record
    /// damaged or written by another program.
    pub fn stored(definition: &Definition) -> Result<Arc<TaskSpec>> {
        definition.typed(|json| task_from_value(json).map(|(spec, _)| Arc::new(spec)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schedule::{CatchUp, Overlap};
    use crate::task::test_support::{CAPS, parse_err, plugin, secs};
    use crate::task::{RetryOn, TriggerRule, load};

    /// A definition stored (as JSON) and read back is the definition that
    /// was checked: bulk apply hands the checked one to the scheduler
    /// instead of reading the record back, and a restart reads the record.
    #[test]
    fn a_definition_reads_back_from_its_record_as_it_was_parsed() {
        let sources = [
            include_str!("../../../fuzz/corpus/task/spec-example.yaml"),
            include_str!("../../../fuzz/corpus/task/tasks-md-1.yaml"),
            include_str!("../../../fuzz/corpus/task/tasks-md-2.yaml"),
            "name: t\nplugin: echo@1.0.0\ntrigger: { every: 90s }\n",
            "name: t\nplugin: echo@^1\ntrigger: { after: [a, b], on: failure }\nparams: [{ name: n, type: integer, default: 3 }]\n",
            "name: t\nplugin: echo@stable\ntrigger: { delay: 2h }\nretention: { keep_runs: 10 }\n",
        ];
        for source in sources {
            let spec = crate::task::parse(source).unwrap_or_else(|e| panic!("{source}: {e}"));
            let stored = serde_json::to_value(&spec).unwrap();
            let back = TaskSpec::deserialize(&stored).unwrap();
            assert_eq!(back, spec, "{source}");
            let definition = crate::model::Definition::new(stored);
            let once = TaskSpec::stored(&definition).unwrap();
            assert_eq!(*once, spec, "{source}");
            let again = TaskSpec::stored(&definition.clone()).unwrap();
            assert!(
                std::sync::Arc::ptr_eq(&once, &again),
                "parsed once: {source}"
            );
        }
    }

    #[test]
    fn an_unreadable_stored_definition_is_a_located_error_every_time() {
        let definition =
            crate::model::Definition::new(json!({"name": "t", "steps": [{"name": 3}]}));
        let first = TaskSpec::stored(&definition).unwrap_err();
        assert!(first.path.starts_with("steps[0]"), "{first}");
        assert_eq!(TaskSpec::stored(&definition).unwrap_err(), first);
    }

    #[test]
    fn minimal_shorthand_takes_every_default() {
        let spec = load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap();
        assert_eq!(
            spec,
            TaskSpec {
                name: "t".into(),
                description: None,
                trigger: None,
                catch_up: CatchUp::Latest,
                overlap: Overlap::Skip,
                priority: DEFAULT_PRIORITY,
                params: vec![],
                retention: None,
                alerts: None,
                steps: vec![StepSpec {
                    name: "t".into(),
                    plugin: plugin("p@1.0.0"),
                    input: json!({}),
                    limits: StepLimits::default(),
                    pool: None,
                    retry: RetryPolicy::default(),
                    needs: vec![],
                    when: None,
                    trigger_rule: TriggerRule::AllSuccess,
                    allow_http: vec![],
                    secrets: vec![],
                    kv: None,
                    config: BTreeMap::new(),
                    record: None,
                }],
                config: BTreeMap::new(),
                record: RecordMode::Off,
            }
        );
    }

    #[test]
    fn record_is_read_on_the_task_and_the_step() {
        let spec = load(
            "name: t\nrecord: on_failure\nsteps:\n  - {name: a, plugin: p@1.0.0}\n  - {name: b, plugin: p@1.0.0, record: always}\n  - {name: c, plugin: p@1.0.0, record: \"off\"}\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec.record, RecordMode::OnFailure);
        let modes: Vec<RecordMode> = (0..3).map(|i| spec.step_grants(i).record).collect();
        assert_eq!(
            modes,
            [RecordMode::OnFailure, RecordMode::Always, RecordMode::Off]
        );
        let short = load("name: t\nplugin: p@1.0.0\nrecord: always\n", &CAPS).unwrap();
        assert_eq!(short.step_grants(0).record, RecordMode::Always);
        let e = parse_err("name: t\nplugin: p@1.0.0\nrecord: sometimes\n");
        assert_eq!(e.path, "record");
        assert!(e.message.contains("`on_failure`"), "{e}");
        let e = parse_err("name: t\nsteps:\n  - {name: a, plugin: p@1.0.0, record: 1}\n");
        assert_eq!(e.path, "steps[0].record");
    }

    #[test]
    fn null_fields_read_as_absent() {
        let spec = load(
            "name: t\ndescription:\ntrigger: ~\nplugin: p@1.0.0\ninput: null\nretry:\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec, load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap());
    }

    #[test]
    fn steps_with_top_level_plugin_is_refused() {
        let e = parse_err("name: t\nplugin: p@1.0.0\nsteps: [{name: a, plugin: p@1.0.0}]\n");
        assert_eq!(e.path, "plugin");
        assert!(e.message.contains("not both"), "{e}");
    }

    #[test]
    fn shorthand_field_beside_steps_is_refused() {
        let e = parse_err("name: t\nlimits: {fuel: 5}\nsteps: [{name: a, plugin: p@1.0.0}]\n");
        assert_eq!(
            (e.path.as_str(), e.message.as_str()),
            ("limits", "`limits` belongs to a step when `steps` is used")
        );
    }

    #[test]
    fn shorthand_field_without_plugin_is_refused() {
        let e = parse_err("name: t\ninput: {a: 1}\n");
        assert_eq!(e.path, "input");
        assert!(e.message.contains("top-level `plugin`"), "{e}");
    }

    #[test]
    fn task_without_steps_or_plugin_is_refused() {
        let e = parse_err("name: t\n");
        assert_eq!(
            e.to_string(),
            "a task needs `steps` (a list) or a top-level `plugin` (the one-step shorthand)"
        );
    }

    #[test]
    fn shorthand_takes_capability_fields_at_the_top() {
        let spec = load(
            "name: t\nplugin: p@1.0.0\nallow_http: [\"https://a.example.com\"]\nsecrets: [s]\nkv: tenant\nconfig: { k: v }\n",
            &CAPS,
        )
        .unwrap();
        let g = spec.step_grants(0);
        assert_eq!(g.allow_http.len(), 1);
        assert_eq!((g.secrets.len(), g.kv), (1, Some(KvScope::Tenant)));
        assert_eq!(spec.config["k"], "v", "a top-level config is the task's");
    }

    #[test]
    fn needs_may_be_a_single_name() {
        let spec = load(
            "name: t\nsteps: [{name: a, plugin: p@1.0.0}, {name: b, plugin: p@1.0.0, needs: a}]\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec.steps[1].needs, ["a"]);
    }

    #[test]
    fn bad_plugin_references_are_explained() {
        let cases = [
            (
                "p",
                "`p` has no version: write the plugin as name@1.2.3, name@^1.2 or name@TAG",
            ),
            (
                "p@01.2.3",
                "`01.2.3` is neither a semver version (1.2.0, 1.2.0-rc.1), a version range (^1.2, ~1.2, >=1.0, <2, 1.x) nor a tag (a name starting with a letter, at most 64 characters)",
            ),
            (
                "p@1.2.3.4",
                "`1.2.3.4` is neither a semver version (1.2.0, 1.2.0-rc.1), a version range (^1.2, ~1.2, >=1.0, <2, 1.x) nor a tag (a name starting with a letter, at most 64 characters)",
            ),
            (
                "my plugin@1.0.0",
                "`my plugin` is not a valid plugin name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters",
            ),
            (
                "@1.0.0",
                "`` is not a valid plugin name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters",
            ),
        ];
        for (text, message) in cases {
            let e = parse_err(&format!("name: t\nplugin: \"{text}\"\n"));
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                ("plugin", message),
                "for {text}"
            );
        }
    }

    #[test]
    fn backoff_forms_parse() {
        let retry = |r: &str| {
            load(&format!("name: t\nplugin: p@1.0.0\nretry: {r}\n"), &CAPS)
                .unwrap()
                .steps[0]
                .retry
                .clone()
        };
        assert_eq!(
            retry("{backoff: 45s}").backoff,
            Backoff::List(vec![secs(45)])
        );
        assert_eq!(
            retry(
                "{max_attempts: 4, backoff: {exponential: {initial: 2s, max: 1m, factor: 3, jitter: false}}, retry_on: [fuel_exhausted]}"
            ),
            RetryPolicy {
                max_attempts: 4,
                backoff: Backoff::Exponential(Exponential {
                    initial: secs(2),
                    max: secs(60),
                    factor: 3.0,
                    jitter: false
                }),
                retry_on: vec![RetryOn::FuelExhausted],
            }
        );
        assert_eq!(
            retry("{backoff: {exponential: {}}}").backoff,
            Backoff::default()
        );
        assert_eq!(
            retry("{backoff: {exponential: }}").backoff,
            Backoff::default()
        );
        let e = parse_err("name: t\nplugin: p@1.0.0\nretry: {backoff: {}}\n");
        assert_eq!(
            (e.path.as_str(), e.message.as_str()),
            ("retry.backoff", "missing field `exponential`")
        );
    }
}
