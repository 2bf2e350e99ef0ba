//! One value of the JSON tree, read with its path: the scalar readers
//! (`as_string`, `as_u64`, `as_duration`, …), whose errors name the field and
//! describe what was found, and [`Obj`], a mapping being read, which refuses
//! unknown keys with a did-you-mean hint ([`distance`]). Which fields a task
//! has is `task::convert`.

use std::time::Duration;

use serde_json::{Map, Value};

use super::error::{Result, SpecError};
use crate::template::shorten;

/// `base.key`, or `key` at the root.
pub(super) fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_owned()
    } else {
        format!("{base}.{key}")
    }
}

/// How a value is described in messages.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the text `{}`", shorten(s)),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

pub(super) fn as_string(value: &Value, path: &str) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Err(SpecError::new(
            path,
            format!(
                "expected text, found {}; quote it: \"{value}\"",
                describe(value)
            ),
        )),
        other => Err(SpecError::new(
            path,
            format!("expected text, found {}", describe(other)),
        )),
    }
}

pub(super) fn as_u64(value: &Value, path: &str) -> Result<u64> {
    let bad = || {
        SpecError::new(
            path,
            format!("expected a whole number ≥ 0, found {}", describe(value)),
        )
    };
    match value {
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(v), _) => Ok(v),
            // `5e7` is read as a float; accept it when it is a whole number.
            (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 => Ok(f as u64),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

pub(super) fn as_duration(value: &Value, path: &str) -> Result<Duration> {
    match value {
        Value::String(text) => humantime::parse_duration(text.trim()).map_err(|e| {
            SpecError::new(
                path,
                format!(
                    "`{}` is not a duration ({e}); write it like 30s, 5m or 1h30m",
                    shorten(text)
                ),
            )
        }),
        Value::Number(n) => Err(SpecError::new(
            path,
            format!("`{n}` has no unit; write a duration like {n}s or {n}m"),
        )),
        other => Err(SpecError::new(
            path,
            format!("expected a duration like 30s, found {}", describe(other)),
        )),
    }
}

pub(super) fn as_bool(value: &Value, path: &str) -> Result<bool> {
    value.as_bool().ok_or_else(|| {
        SpecError::new(
            path,
            format!("expected true or false, found {}", describe(value)),
        )
    })
}

pub(super) fn as_f64(value: &Value, path: &str) -> Result<f64> {
    value.as_f64().ok_or_else(|| {
        SpecError::new(
            path,
            format!("expected a number, found {}", describe(value)),
        )
    })
}

/// A keyword (`latest`, `one_success`, …) read through the enum's serde names.
pub(super) fn as_keyword<T: serde::de::DeserializeOwned>(value: &Value, path: &str) -> Result<T> {
    let text = as_string(value, path)?;
    serde_json::from_value(Value::String(text)).map_err(|e| {
        // serde says "unknown variant `x`, expected one of `a`, `b`"; say it plainly.
        let msg = e.to_string().replace("unknown variant", "unknown value");
        SpecError::new(path, msg)
    })
}

/// A list of texts; a single text is read as a list of one.
pub(super) fn as_string_list(value: &Value, path: &str) -> Result<Vec<String>> {
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| as_string(item, &format!("{path}[{i}]")))
            .collect(),
        Value::String(s) => Ok(vec![s.clone()]),
        other => Err(SpecError::new(
            path,
            format!("expected a list of names, found {}", describe(other)),
        )),
    }
}

/// Edit distance, for "did you mean" hints on short field names.
pub(super) use crate::model::hint::distance;

/// A mapping being read, with its path.
pub(super) struct Obj<'v> {
    pub(super) map: &'v Map<String, Value>,
    pub(super) path: String,
}

impl<'v> Obj<'v> {
    /// `value` as a mapping whose keys are all in `allowed`.
    pub(super) fn new(value: &'v Value, path: &str, what: &str, allowed: &[&str]) -> Result<Self> {
        let Value::Object(map) = value else {
            return Err(SpecError::new(
                path,
                format!("{what} must be a mapping, found {}", describe(value)),
            ));
        };
        let obj = Obj {
            map,
            path: path.to_owned(),
        };
        obj.deny_unknown(allowed, &[])?;
        Ok(obj)
    }

    /// Refuses keys outside `allowed`, with a hint: a special one from
    /// `hints`, else the closest allowed name, else the list.
    pub(super) fn deny_unknown(&self, allowed: &[&str], hints: &[(&str, &str)]) -> Result<()> {
        let Some(key) = self.map.keys().find(|k| !allowed.contains(&k.as_str())) else {
            return Ok(());
        };
        let hint = if let Some((_, hint)) = hints.iter().find(|(k, _)| k == key) {
            (*hint).to_owned()
        } else if let Some(best) = allowed
            .iter()
            .map(|a| (distance(key, a), a))
            .filter(|(d, a)| *d <= 2.max(a.len() / 3))
            .min()
        {
            format!("did you mean `{}`?", best.1)
        } else {
            format!("expected one of: {}", allowed.join(", "))
        };
        Err(SpecError::new(
            self.path.clone(),
            format!("unknown field `{}`; {hint}", shorten(key)),
        ))
    }

    pub(super) fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The value of `key`; absent and `null` are the same.
    pub(super) fn get(&self, key: &str) -> Option<&'v Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn opt<T>(
        &self,
        key: &str,
        read: impl FnOnce(&'v Value, &str) -> Result<T>,
    ) -> Result<Option<T>> {
        self.get(key).map(|v| read(v, &self.at(key))).transpose()
    }

    pub(super) fn required<T>(
        &self,
        key: &str,
        read: impl FnOnce(&'v Value, &str) -> Result<T>,
    ) -> Result<T> {
        match self.get(key) {
            Some(v) => read(v, &self.at(key)),
            None => Err(SpecError::new(
                self.path.clone(),
                format!("missing field `{key}`"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::task::test_support::{load_err, parse_err};

    #[test]
    fn unknown_fields_are_named_with_where_they_are() {
        let cases = [
            (
                "name: t\nplugin: p@1.0.0\nlimits: {fule: 5}\n",
                "limits",
                "unknown field `fule`; did you mean `fuel`?",
            ),
            (
                "name: t\nsteps:\n- {name: a, plugin: p@1.0.0}\n- {name: b, plugin: p@1.0.0, limits: {fuel: 1, cpu: 2}}\n",
                "steps[1].limits",
                "unknown field `cpu`; expected one of: fuel, memory_mb, timeout, http_requests, http_timeout, http_response_kb",
            ),
            (
                "name: t\nstpes: []\n",
                "",
                "unknown field `stpes`; did you mean `steps`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nneeds: [x]\n",
                "",
                "unknown field `needs`; this is a step field: put the step under `steps:`",
            ),
            (
                "name: t\ncron: 0 0 1 * * ?\nplugin: p@1.0.0\n",
                "",
                "unknown field `cron`; put it under `trigger:`",
            ),
            (
                "name: t\nplugin: p@1.0.0\ntrigger: {crn: x}\n",
                "trigger",
                "unknown field `crn`; did you mean `cron`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {attempts: 3}\n",
                "retry",
                "unknown field `attempts`; did you mean `max_attempts`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {initial: 1s, cap: 5m}}}\n",
                "retry.backoff.exponential",
                "unknown field `cap`; did you mean `max`?",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {linear: 1s}}\n",
                "retry.backoff",
                "unknown field `linear`; expected one of: exponential",
            ),
            (
                "name: t\nsteps: [{name: a, plugin: p@1.0.0, need: [b]}]\n",
                "steps[0]",
                "unknown field `need`; did you mean `needs`?",
            ),
        ];
        for (yaml, path, message) in cases {
            let e = parse_err(yaml);
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                (path, message),
                "for {yaml}"
            );
        }
    }

    #[test]
    fn wrong_types_are_reported_at_their_field() {
        let cases = [
            (
                "name: 12\nplugin: p@1.0.0\n",
                "name",
                "expected text, found the number 12; quote it: \"12\"",
            ),
            (
                "name: t\nplugin: p@1.0.0\npriority: high\n",
                "priority",
                "expected a whole number ≥ 0, found the text `high`",
            ),
            (
                "name: t\nplugin: p@1.0.0\npriority: 12\n",
                "priority",
                "12 is outside 0..=9",
            ),
            (
                "name: t\nplugin: p@1.0.0\npriority: -1\n",
                "priority",
                "expected a whole number ≥ 0, found the number -1",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {fuel: 1.5}\n",
                "limits.fuel",
                "expected a whole number ≥ 0, found the number 1.5",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: 5\n",
                "limits",
                "`limits` must be a mapping, found the number 5",
            ),
            (
                "name: t\nsteps: {a: 1}\n",
                "steps",
                "expected a list of steps, found a mapping",
            ),
            (
                "name: t\nsteps: [x]\n",
                "steps[0]",
                "a step must be a mapping, found the text `x`",
            ),
            (
                "name: t\nsteps: [{plugin: p@1.0.0}]\n",
                "steps[0]",
                "missing field `name`",
            ),
            (
                "name: t\nsteps: [{name: a}]\n",
                "steps[0]",
                "missing field `plugin`",
            ),
            ("plugin: p@1.0.0\n", "", "missing field `name`"),
            (
                "name: t\nplugin: p@1.0.0\ncatch_up: sometimes\n",
                "catch_up",
                "unknown value `sometimes`, expected one of `latest`, `none`, `all`",
            ),
            (
                "name: t\nplugin: p@1.0.0\noverlap: queue\n",
                "overlap",
                "unknown value `queue`, expected one of `skip`, `queue_one`, `allow`",
            ),
            (
                "name: t\nsteps: [{name: a, plugin: p@1.0.0, trigger_rule: any}]\n",
                "steps[0].trigger_rule",
                "unknown value `any`, expected one of `all_success`, `one_success`, `all_done`, `none_failed`",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {retry_on: [fatal, panic]}\n",
                "retry.retry_on[1]",
                "unknown value `panic`, expected one of `fatal`, `fuel_exhausted`, `memory_exceeded`, `output_too_large`",
            ),
            (
                "name: t\nsteps: [{name: a, plugin: p@1.0.0, needs: [b, 3]}]\n",
                "steps[0].needs[1]",
                "expected text, found the number 3; quote it: \"3\"",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {jitter: yes}}}\n",
                "retry.backoff.exponential.jitter",
                "expected true or false, found the text `yes`",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: 5}\n",
                "retry.backoff",
                "expected a list of durations ([10s, 30s, 2m]) or { exponential: { initial: 1s, max: 5m } }, found the number 5",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {factor: fast}}}\n",
                "retry.backoff.exponential.factor",
                "expected a number, found the text `fast`",
            ),
            (
                "name: t\nplugin: p@1.0.0\ntrigger: [x]\n",
                "trigger",
                "`trigger` must be a mapping, found a list",
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {max_attempts: 5000000000}\n",
                "retry.max_attempts",
                "5000000000 is above the limit of 100",
            ),
        ];
        for (yaml, path, message) in cases {
            let e = parse_err(yaml);
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                (path, message),
                "for {yaml}"
            );
        }
    }

    #[test]
    fn bad_durations_quote_the_offending_text() {
        let e = parse_err("name: t\nplugin: p@1.0.0\nlimits: {timeout: 30 parsecs}\n");
        assert_eq!(e.path, "limits.timeout");
        assert!(
            e.message.starts_with("`30 parsecs` is not a duration ("),
            "{e}"
        );
        assert!(e.message.ends_with("write it like 30s, 5m or 1h30m"), "{e}");
        let e = parse_err("name: t\nplugin: p@1.0.0\nlimits: {timeout: 30}\n");
        assert_eq!(
            e.message,
            "`30` has no unit; write a duration like 30s or 30m"
        );
        let e = parse_err("name: t\nplugin: p@1.0.0\nretry: {backoff: [10s, 3 fortnights]}\n");
        assert_eq!(e.path, "retry.backoff[1]");
        assert!(e.message.contains("`3 fortnights`"), "{e}");
        let e = parse_err("name: t\nplugin: p@1.0.0\ntrigger: {every: soon}\n");
        assert_eq!(e.path, "trigger.every");
        assert!(e.message.contains("`soon` is not a duration"), "{e}");
    }

    #[test]
    fn echoed_user_text_is_clipped() {
        let long = "x".repeat(5000);
        let e = parse_err(&format!(
            "name: t\nplugin: p@1.0.0\nlimits: {{timeout: '{long}'}}\n"
        ));
        assert!(e.message.len() < 300, "{}", e.message.len());
        let e = load_err(&format!("name: '{long} y'\nplugin: p@1.0.0\n"));
        assert!(e.message.len() < 300, "{}", e.message.len());
        let e = parse_err(&format!("name: t\nplugin: p@1.0.0\n{long}: 1\n"));
        assert!(e.message.len() < 300, "{}", e.message.len());
        let e = parse_err(&format!("name: t\nplugin: '{long}'\n"));
        assert!(e.message.len() < 300, "{}", e.message.len());
    }
}
