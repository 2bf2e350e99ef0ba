//! Task parameters (`params:`): the typed, named values a run's input is
//! made of, and how a run's input is resolved from them.
//!
//! A task that declares `params:` has a fixed input shape: a mapping with
//! one entry per param. Every run gets every param: a fire (cron, `every`,
//! `at`, `delay`) takes the defaults; an `after` run takes the defaults
//! plus the reserved `upstream` entry it always had; a manual trigger may
//! override any of them, by the request's `input` (a mapping) and its
//! `params`, in that order of precedence: defaults < `input` < `params`.
//! A name that is not declared, or a value of the wrong type, refuses the
//! trigger and creates nothing. A param without a default is `required`:
//! a manual trigger must give it, and a task with a trigger that fires by
//! itself may not have one (checked on save by `task::validate`, which also
//! refuses `${input.NAME}` and `input.NAME` for an undeclared NAME).
//!
//! A task without `params:` keeps its old behaviour: its input is whatever
//! JSON the trigger sends (`{}` for a fire), and `${input.…}` is checked
//! only when the run renders it.
//!
//! Types are scalars only — `string`, `integer`, `number`, `boolean`, and
//! `enum` (text from a fixed list) — because a form field and `ax trigger
//! -p k=v` both give one value; a task that needs structured input leaves
//! `params:` out and takes `input` whole.

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::MAX_PARAM_VALUE_BYTES;
use super::types::TaskSpec;
use super::value::{describe, distance};
use crate::template::shorten;

/// The input entry an `after` run carries (the upstream run's task, id,
/// status and step outputs): a param may not take its name on a task with
/// an `after` trigger.
pub const UPSTREAM: &str = "upstream";

/// One declared parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// The key of the run's input; the name rule of tasks, without `.`
    /// (`${input.a.b}` reads a path).
    pub name: String,
    /// What values it takes.
    pub kind: ParamType,
    /// The value when the trigger gives none; `None`: the param is required.
    pub default: Option<Value>,
    /// Free text for people (the dashboard's form shows it).
    pub description: Option<String>,
}

/// The type of a param.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// Text, at most [`MAX_PARAM_VALUE_BYTES`].
    String,
    /// A whole number in the range of a 64-bit signed integer.
    Integer,
    /// Any number (JSON's: finite).
    Number,
    /// `true` or `false`.
    Boolean,
    /// One of the listed texts.
    Enum(Vec<String>),
}

/// The type names a definition may write, in the order the docs list them.
pub const PARAM_TYPES: [&str; 5] = ["string", "integer", "number", "boolean", "enum"];

impl ParamType {
    /// The type's name as written in a definition.
    pub fn name(&self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::Enum(_) => "enum",
        }
    }

    /// The type's name with its article: `a string`, `an integer`.
    pub fn article(&self) -> &'static str {
        match self {
            ParamType::String => "a string",
            ParamType::Integer => "an integer",
            ParamType::Number => "a number",
            ParamType::Boolean => "a boolean",
            ParamType::Enum(_) => "an enum",
        }
    }

    /// The type of a name, except `enum` (which needs its values).
    pub(super) fn scalar(name: &str) -> Option<Self> {
        match name {
            "string" => Some(ParamType::String),
            "integer" => Some(ParamType::Integer),
            "number" => Some(ParamType::Number),
            "boolean" => Some(ParamType::Boolean),
            _ => None,
        }
    }

    /// `value` if it is of this type (a whole number written `5.0` or
    /// `5e3` becomes the integer), or what is wrong with it.
    pub fn check(&self, value: &Value) -> Result<Value, String> {
        let wrong = |what: &str| format!("expected {what}, found {}", describe(value));
        match (self, value) {
            (ParamType::String, Value::String(s)) => {
                if s.len() > MAX_PARAM_VALUE_BYTES {
                    Err(format!(
                        "the text is {} bytes; a param's value is at most {MAX_PARAM_VALUE_BYTES}",
                        s.len()
                    ))
                } else {
                    Ok(value.clone())
                }
            }
            (ParamType::String, _) => Err(wrong("text")),
            (ParamType::Integer, Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    return Ok(Value::from(i));
                }
                match n.as_f64() {
                    // `i64::MAX as f64` rounds up to 2^63, itself out of range.
                    Some(f) if f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64 => {
                        Ok(Value::from(f as i64))
                    }
                    _ => Err(wrong("a whole number (64-bit)")),
                }
            }
            (ParamType::Integer, _) => Err(wrong("a whole number")),
            (ParamType::Number, Value::Number(_)) => Ok(value.clone()),
            (ParamType::Number, _) => Err(wrong("a number")),
            (ParamType::Boolean, Value::Bool(_)) => Ok(value.clone()),
            (ParamType::Boolean, _) => Err(wrong("true or false")),
            (ParamType::Enum(values), Value::String(s)) if values.contains(s) => Ok(value.clone()),
            (ParamType::Enum(values), _) => Err(format!(
                "expected one of {}, found {}",
                values
                    .iter()
                    .map(|v| format!("`{}`", shorten(v)))
                    .collect::<Vec<_>>()
                    .join(", "),
                describe(value)
            )),
        }
    }
}

impl Serialize for ParamSpec {
    /// `{"name", "type", "values" (enum only), "default", "description"}`,
    /// the shape it is written in.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            name: &'a str,
            #[serde(rename = "type")]
            kind: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            values: Option<&'a [String]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            default: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            description: Option<&'a str>,
        }
        Out {
            name: &self.name,
            kind: self.kind.name(),
            values: match &self.kind {
                ParamType::Enum(values) => Some(values),
                _ => None,
            },
            default: self.default.as_ref(),
            description: self.description.as_deref(),
        }
        .serialize(s)
    }
}

/// Why a trigger's input or params are refused (a client error: 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

impl TaskSpec {
    /// The declared param of this name.
    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Whether the task fires by itself (cron, `every`, `at`, `delay`,
    /// `after`): then nobody is there to give a required param.
    pub fn fires_by_itself(&self) -> bool {
        self.trigger.as_ref().is_some_and(|t| {
            t.cron.is_some()
                || t.at.is_some()
                || t.delay.is_some()
                || t.every.is_some()
                || !t.after.is_empty()
        })
    }

    /// Whether the task has an `after` trigger (its runs' input has `upstream`).
    pub fn fires_after(&self) -> bool {
        self.trigger.as_ref().is_some_and(|t| !t.after.is_empty())
    }

    /// Whether `input.NAME` names a value every run's input has: a declared
    /// param, or `upstream` on a task with an `after` trigger.
    pub fn input_has(&self, name: &str) -> bool {
        self.param(name).is_some() || (name == UPSTREAM && self.fires_after())
    }

    /// The defaults of the declared params, as a mapping.
    fn defaults(&self) -> Map<String, Value> {
        self.params
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.default.clone()?)))
            .collect()
    }

    /// The input of a run that fired (cron, `every`, `at`, `delay`): the
    /// params' defaults, `{}` for a task without params.
    pub fn fire_input(&self) -> Value {
        Value::Object(self.defaults())
    }

    /// The input of an `after` run: the params' defaults and `upstream`.
    pub fn after_input(&self, upstream: Value) -> Value {
        let mut input = self.defaults();
        input.insert(UPSTREAM.to_owned(), upstream);
        Value::Object(input)
    }

    /// The input of a manual run from the request's `input` and `params`.
    ///
    /// Without declared params: `input` as sent (`{}` when absent); a
    /// non-empty `params` is refused. With them: the defaults, overridden
    /// by the entries of `input` (which must then be a mapping), overridden
    /// by those of `params`; a `null` entry keeps the default. Refused: an
    /// undeclared name, a value of the wrong type, a required param left
    /// out. Giving the resolved input back as `input` resolves to itself.
    pub fn manual_input(
        &self,
        input: Option<&Value>,
        params: Option<&Map<String, Value>>,
    ) -> Result<Value, ParamError> {
        if self.params.is_empty() {
            if let Some(params) = params
                && let Some(name) = params.keys().next()
            {
                return Err(ParamError(format!(
                    "task `{}` declares no params, so `params` (here `{}`) cannot be given; \
                     send the values as `input`, or declare them under `params:` in the task",
                    self.name,
                    shorten(name)
                )));
            }
            return Ok(input.cloned().unwrap_or_else(|| Value::Object(Map::new())));
        }
        let from_input = match input {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(other) => {
                return Err(ParamError(format!(
                    "task `{}` declares params, so `input` is a mapping of param names to values; \
                     found {}",
                    self.name,
                    describe(other)
                )));
            }
        };
        let mut out = self.defaults();
        for (field, map) in [("input", from_input), ("params", params)] {
            for (name, value) in map.into_iter().flatten() {
                if value.is_null() {
                    continue;
                }
                let value = match self.param(name) {
                    Some(p) => p.kind.check(value).map_err(|why| {
                        ParamError(format!(
                            "{field}.{name}: param `{name}` is {}: {why}",
                            kind_phrase(&p.kind)
                        ))
                    })?,
                    None if name == UPSTREAM && self.fires_after() => value.clone(),
                    None => return Err(self.unknown_param(field, name)),
                };
                out.insert(name.clone(), value);
            }
        }
        if let Some(missing) = self.params.iter().find(|p| !out.contains_key(&p.name)) {
            return Err(ParamError(format!(
                "param `{}` is required (it has no default): give it in `params`",
                missing.name
            )));
        }
        Ok(Value::Object(out))
    }

    fn unknown_param(&self, field: &str, name: &str) -> ParamError {
        let known: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
        let hint = match known
            .iter()
            .map(|k| (distance(name, k), *k))
            .filter(|(d, k)| *d <= 2.max(k.len() / 3))
            .min()
        {
            Some((_, best)) => format!("did you mean `{best}`?"),
            None => format!("its params are: {}", known.join(", ")),
        };
        ParamError(format!(
            "{field}.{}: task `{}` has no param `{}`; {hint}",
            shorten(name),
            self.name,
            shorten(name)
        ))
    }
}

/// `a string`, `an integer`, `an enum of `a`, `b``.
pub(super) fn kind_phrase(kind: &ParamType) -> String {
    match kind {
        ParamType::Enum(values) => format!(
            "an enum of {}",
            values
                .iter()
                .map(|v| format!("`{}`", shorten(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.article().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::task::load;
    use crate::task::test_support::CAPS;

    const MANUAL: &str = "
name: report
params:
  - { name: day, type: string, default: '2026-01-01', description: the day to process }
  - { name: limit, type: integer, default: 100 }
  - { name: ratio, type: number, default: 0.5 }
  - { name: dry_run, type: boolean, default: false }
  - { name: mode, type: enum, values: [full, incremental], default: incremental }
  - { name: region, type: string }
plugin: echo@1.0.0
input: { day: '${input.day}', all: '${input}' }
";

    fn spec() -> TaskSpec {
        load(MANUAL, &CAPS).unwrap()
    }

    fn manual(input: Option<Value>, params: Value) -> Result<Value, ParamError> {
        let params = params.as_object().cloned();
        spec().manual_input(input.as_ref(), params.as_ref())
    }

    #[test]
    fn manual_input_takes_the_defaults_and_the_overrides() {
        let got = manual(None, json!({"region": "eu", "limit": 7})).unwrap();
        assert_eq!(
            got,
            json!({"day": "2026-01-01", "limit": 7, "ratio": 0.5, "dry_run": false,
                   "mode": "incremental", "region": "eu"})
        );
        // Giving the resolved input back resolves to itself.
        assert_eq!(manual(Some(got.clone()), json!(null)).unwrap(), got);
    }

    #[test]
    fn params_win_over_input_and_null_keeps_the_default() {
        let got = manual(
            Some(json!({"region": "us", "limit": 1, "mode": "full"})),
            json!({"region": "eu", "mode": null, "ratio": 2}),
        )
        .unwrap();
        assert_eq!(got["region"], "eu", "params over input");
        assert_eq!(got["limit"], 1, "input over the default");
        assert_eq!(got["mode"], "full", "null in params keeps input's value");
        assert_eq!(got["ratio"], 2);
    }

    #[test]
    fn whole_floats_become_integers_and_other_numbers_are_refused() {
        let got = manual(None, json!({"region": "eu", "limit": 5e3})).unwrap();
        assert_eq!(got["limit"], json!(5000));
        assert!(got["limit"].is_i64());
        let e = manual(None, json!({"region": "eu", "limit": 1.5})).unwrap_err();
        assert_eq!(
            e.0,
            "params.limit: param `limit` is an integer: expected a whole number (64-bit), found the number 1.5"
        );
        let e = manual(None, json!({"region": "eu", "limit": 1e300})).unwrap_err();
        assert!(e.0.contains("expected a whole number (64-bit)"), "{e}");
    }

    #[test]
    fn every_wrong_value_is_refused_naming_the_param_and_its_type() {
        let cases = [
            (
                json!({"region": 3}),
                "params.region: param `region` is a string: expected text, found the number 3",
            ),
            (
                json!({"region": "eu", "limit": "7"}),
                "params.limit: param `limit` is an integer: expected a whole number, found the text `7`",
            ),
            (
                json!({"region": "eu", "ratio": true}),
                "params.ratio: param `ratio` is a number: expected a number, found the boolean true",
            ),
            (
                json!({"region": "eu", "dry_run": "yes"}),
                "params.dry_run: param `dry_run` is a boolean: expected true or false, found the text `yes`",
            ),
            (
                json!({"region": "eu", "mode": "partial"}),
                "params.mode: param `mode` is an enum of `full`, `incremental`: expected one of `full`, `incremental`, found the text `partial`",
            ),
            (
                json!({"region": "eu", "limt": 3}),
                "params.limt: task `report` has no param `limt`; did you mean `limit`?",
            ),
            (
                json!({"region": "eu", "zzz": 3}),
                "params.zzz: task `report` has no param `zzz`; its params are: day, limit, ratio, dry_run, mode, region",
            ),
            (
                json!({}),
                "param `region` is required (it has no default): give it in `params`",
            ),
            (
                json!({"region": null}),
                "param `region` is required (it has no default): give it in `params`",
            ),
        ];
        for (params, message) in cases {
            assert_eq!(
                manual(None, params.clone()).unwrap_err().0,
                message,
                "for {params}"
            );
        }
        let long = "x".repeat(MAX_PARAM_VALUE_BYTES + 1);
        let e = manual(None, json!({ "region": long })).unwrap_err();
        assert!(e.0.ends_with("a param's value is at most 4096"), "{e}");
    }

    #[test]
    fn input_of_a_task_with_params_is_a_mapping_of_params() {
        let e = manual(Some(json!([1, 2])), json!(null)).unwrap_err();
        assert_eq!(
            e.0,
            "task `report` declares params, so `input` is a mapping of param names to values; found a list"
        );
        let e = manual(Some(json!({"region": "eu", "extra": 1})), json!(null)).unwrap_err();
        assert!(
            e.0.starts_with("input.extra: task `report` has no param `extra`"),
            "{e}"
        );
    }

    #[test]
    fn a_task_without_params_keeps_its_input_and_refuses_params() {
        let spec = load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap();
        assert_eq!(spec.manual_input(None, None).unwrap(), json!({}));
        let any = json!([1, {"x": 2}]);
        assert_eq!(spec.manual_input(Some(&any), None).unwrap(), any);
        let empty = Map::new();
        assert_eq!(spec.manual_input(None, Some(&empty)).unwrap(), json!({}));
        let some = json!({"day": "x"}).as_object().cloned().unwrap();
        let e = spec.manual_input(None, Some(&some)).unwrap_err();
        assert!(
            e.0.starts_with("task `t` declares no params, so `params` (here `day`)"),
            "{e}"
        );
        assert_eq!(spec.fire_input(), json!({}));
    }

    #[test]
    fn fires_take_the_defaults_and_after_runs_add_upstream() {
        let spec = load(
            "name: t\ntrigger: {after: [up]}\nparams: [{name: n, type: integer, default: 3}]\nplugin: p@1.0.0\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec.fire_input(), json!({"n": 3}));
        assert_eq!(
            spec.after_input(json!({"task": "up"})),
            json!({"n": 3, "upstream": {"task": "up"}})
        );
        // A manual run of such a task may stand in for the upstream.
        let up = json!({"upstream": {"task": "by hand"}});
        assert_eq!(
            spec.manual_input(Some(&up), None).unwrap(),
            json!({"n": 3, "upstream": {"task": "by hand"}})
        );
    }

    #[test]
    fn params_serialize_in_the_shape_they_are_written() {
        let value = serde_json::to_value(spec()).unwrap();
        assert_eq!(
            value["params"][0],
            json!({"name": "day", "type": "string", "default": "2026-01-01", "description": "the day to process"})
        );
        assert_eq!(
            value["params"][4],
            json!({"name": "mode", "type": "enum", "values": ["full", "incremental"], "default": "incremental"})
        );
        assert_eq!(
            value["params"][5],
            json!({"name": "region", "type": "string"})
        );
        let back: TaskSpec = serde_json::from_value(value).unwrap();
        assert_eq!(back, spec());
    }
}
