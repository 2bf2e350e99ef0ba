//! The checks of a task's `params:` on save: bounds, names, enum values,
//! defaults of the right type, and no required param on a task that fires
//! by itself; and the check that `${input.NAME}` and `input.NAME` name a
//! declared param (only when the task declares params: a task without them
//! keeps taking any input). A `when` is checked by the `input.NAME` fields
//! its parse found (`Condition::referenced_input`); a macro variable that
//! shadows `input` counts as the input, a documented false refusal that a
//! rename avoids.

use std::collections::HashSet;

use super::name_error;
use crate::model::name::is_valid_name;
use crate::task::error::{Result, SpecError};
use crate::task::params::kind_phrase;
use crate::task::types::TaskSpec;
use crate::task::value::join;
use crate::task::{
    MAX_ENUM_VALUE_BYTES, MAX_ENUM_VALUES, MAX_PARAM_DESCRIPTION_BYTES, MAX_PARAMS, ParamType,
    UPSTREAM,
};
use crate::template::shorten;

/// The `params:` of a task.
pub(super) fn validate_params(spec: &TaskSpec) -> Result<()> {
    if spec.params.len() > MAX_PARAMS {
        return Err(SpecError::new(
            "params",
            format!("{} params; the limit is {MAX_PARAMS}", spec.params.len()),
        ));
    }
    let mut seen = HashSet::new();
    for (i, p) in spec.params.iter().enumerate() {
        let path = format!("params[{i}]");
        let at = |field: &str| join(&path, field);
        if !is_valid_name(&p.name) || p.name.contains('.') {
            let mut e = name_error(&at("name"), "param", &p.name);
            if p.name.contains('.') {
                e.message = format!(
                    "`{}` is not a valid param name: `.` separates the path in `${{input.a.b}}`; use `_` or `-`",
                    shorten(&p.name)
                );
            }
            return Err(e);
        }
        if !seen.insert(p.name.as_str()) {
            return Err(SpecError::new(
                at("name"),
                format!("duplicate param name `{}`", p.name),
            ));
        }
        if p.name == UPSTREAM && spec.fires_after() {
            return Err(SpecError::new(
                at("name"),
                "`upstream` is the input entry an `after` run gets (the upstream run's outputs); \
                 give the param another name",
            ));
        }
        if let Some(d) = &p.description
            && d.len() > MAX_PARAM_DESCRIPTION_BYTES
        {
            return Err(SpecError::new(
                at("description"),
                format!(
                    "is {} bytes; the limit is {MAX_PARAM_DESCRIPTION_BYTES}",
                    d.len()
                ),
            ));
        }
        if let ParamType::Enum(values) = &p.kind {
            validate_enum(values, &at("values"))?;
        }
        match &p.default {
            Some(default) => {
                if let Err(why) = p.kind.check(default) {
                    return Err(SpecError::new(
                        at("default"),
                        format!("the default of {} param: {why}", p.kind.article()),
                    ));
                }
            }
            None if spec.fires_by_itself() => {
                return Err(SpecError::new(
                    at("default"),
                    format!(
                        "param `{}` has no default, but the task's trigger fires it with no one \
                         to give a value: give the param a default, or remove the trigger",
                        p.name
                    ),
                ));
            }
            None => {}
        }
    }
    Ok(())
}

fn validate_enum(values: &[String], path: &str) -> Result<()> {
    if values.is_empty() || values.len() > MAX_ENUM_VALUES {
        return Err(SpecError::new(
            path,
            format!(
                "{} values; an enum lists 1 to {MAX_ENUM_VALUES}",
                values.len()
            ),
        ));
    }
    for (i, v) in values.iter().enumerate() {
        let here = format!("{path}[{i}]");
        if v.is_empty() || v.len() > MAX_ENUM_VALUE_BYTES {
            return Err(SpecError::new(
                here,
                format!(
                    "an enum value is 1 to {MAX_ENUM_VALUE_BYTES} bytes; this one is {}",
                    v.len()
                ),
            ));
        }
        if values[..i].contains(v) {
            return Err(SpecError::new(
                here,
                format!("`{}` is listed twice", shorten(v)),
            ));
        }
    }
    Ok(())
}

/// Why `input.NAME` (with a path below it when `deeper`) reads nothing a run
/// of this task has, if it does; `None` when the task declares no params.
pub(super) fn input_field_error(spec: &TaskSpec, name: &str, deeper: bool) -> Option<String> {
    if spec.params.is_empty() {
        return None;
    }
    match spec.param(name) {
        Some(p) if deeper => Some(format!(
            "param `{name}` is {}, which has no fields",
            kind_phrase(&p.kind)
        )),
        Some(_) => None,
        None if spec.input_has(name) => None,
        None => {
            let known: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
            Some(format!(
                "task `{}` declares no param `{}` (its params: {}); declare it under `params:`",
                spec.name,
                shorten(name),
                known.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::task::test_support::{CAPS, err_of, parse_err};
    use crate::task::{MAX_PARAMS, ParamType, load};

    /// A manual task with `params` (YAML flow list) and a step input.
    fn task(params: &str, input: &str) -> String {
        format!("name: t\nparams: {params}\nplugin: p@1.0.0\ninput: {input}\n")
    }

    #[test]
    fn params_are_read_with_their_types_and_defaults() {
        let spec = load(
            &task(
                "[{name: day, type: string, default: x, description: which day}, {name: n, type: integer, default: 5.0}, {name: m, type: enum, values: [a, b]}]",
                "{d: '${input.day}', n: '${input.n}', m: '${input.m}'}",
            ),
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec.params.len(), 3);
        assert_eq!(spec.params[0].kind, ParamType::String);
        assert_eq!(spec.params[0].description.as_deref(), Some("which day"));
        assert_eq!(
            spec.params[1].default,
            Some(json!(5)),
            "a whole 5.0 is the integer 5"
        );
        assert_eq!(
            spec.params[2].kind,
            ParamType::Enum(vec!["a".into(), "b".into()])
        );
        assert_eq!(spec.params[2].default, None);
    }

    #[test]
    fn every_bad_param_is_refused_at_its_field() {
        let long = "x".repeat(crate::task::MAX_PARAM_DESCRIPTION_BYTES + 1);
        let cases = [
            (
                task("{day: string}", "{}"),
                "params",
                "expected a list of params ([{name: day, type: string, default: \"2026-01-01\"}]), found a mapping".to_owned(),
            ),
            (
                task("[day]", "{}"),
                "params[0]",
                "a param must be a mapping, found the text `day`".to_owned(),
            ),
            (
                task("[{name: day, type: date}]", "{}"),
                "params[0].type",
                "unknown type `date`; expected one of: string, integer, number, boolean, enum".to_owned(),
            ),
            (
                task("[{name: day}]", "{}"),
                "params[0]",
                "missing field `type`".to_owned(),
            ),
            (
                task("[{type: string}]", "{}"),
                "params[0]",
                "missing field `name`".to_owned(),
            ),
            (
                task("[{name: day, type: string, requried: true}]", "{}"),
                "params[0]",
                "unknown field `requried`; expected one of: name, type, values, default, description".to_owned(),
            ),
            (
                task("[{name: n, type: integer, default: ten}]", "{}"),
                "params[0].default",
                "the default of an integer param: expected a whole number, found the text `ten`".to_owned(),
            ),
            (
                task("[{name: n, type: integer, default: 1.5}]", "{}"),
                "params[0].default",
                "the default of an integer param: expected a whole number (64-bit), found the number 1.5".to_owned(),
            ),
            (
                task("[{name: b, type: boolean, default: 'no'}]", "{}"),
                "params[0].default",
                "the default of a boolean param: expected true or false, found the text `no`".to_owned(),
            ),
            (
                task("[{name: s, type: string, default: 3}]", "{}"),
                "params[0].default",
                "the default of a string param: expected text, found the number 3".to_owned(),
            ),
            (
                task("[{name: x, type: number, default: [1]}]", "{}"),
                "params[0].default",
                "the default of a number param: expected a number, found a list".to_owned(),
            ),
            (
                task("[{name: m, type: enum, values: [a, b], default: c}]", "{}"),
                "params[0].default",
                "the default of an enum param: expected one of `a`, `b`, found the text `c`".to_owned(),
            ),
            (
                task("[{name: m, type: enum}]", "{}"),
                "params[0]",
                "missing field `values`: an enum lists its values (values: [full, incremental])".to_owned(),
            ),
            (
                task("[{name: m, type: string, values: [a]}]", "{}"),
                "params[0].values",
                "`values` belongs to `type: enum`, not `string`".to_owned(),
            ),
            (
                task("[{name: m, type: enum, values: [a, 2]}]", "{}"),
                "params[0].values[1]",
                "expected text, found the number 2; quote it: \"2\"".to_owned(),
            ),
        ];
        for (yaml, path, message) in cases {
            let e = parse_err(&yaml);
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                (path, message.as_str()),
                "for {yaml}"
            );
        }
        let cases = [
            (
                task("[{name: m, type: enum, values: []}]", "{}"),
                "params[0].values",
                "0 values; an enum lists 1 to 64".to_owned(),
            ),
            (
                task("[{name: m, type: enum, values: [a, b, a]}]", "{}"),
                "params[0].values[2]",
                "`a` is listed twice".to_owned(),
            ),
            (
                task("[{name: m, type: enum, values: [a, '']}]", "{}"),
                "params[0].values[1]",
                "an enum value is 1 to 256 bytes; this one is 0".to_owned(),
            ),
            (
                task("[{name: a, type: string}, {name: a, type: integer}]", "{}"),
                "params[1].name",
                "duplicate param name `a`".to_owned(),
            ),
            (
                task("[{name: a.b, type: string}]", "{}"),
                "params[0].name",
                "`a.b` is not a valid param name: `.` separates the path in `${input.a.b}`; use `_` or `-`".to_owned(),
            ),
            (
                task("[{name: -a, type: string}]", "{}"),
                "params[0].name",
                "`-a` is not a valid param name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters".to_owned(),
            ),
            (
                task(&format!("[{{name: a, type: string, description: {long}}}]"), "{}"),
                "params[0].description",
                "is 1025 bytes; the limit is 1024".to_owned(),
            ),
        ];
        for (yaml, path, message) in cases {
            let (p, m) = err_of(&yaml);
            assert_eq!(
                (p.as_str(), m.as_str()),
                (path, message.as_str()),
                "for {yaml}"
            );
        }
        let many: Vec<String> = (0..=MAX_PARAMS)
            .map(|i| format!("{{name: p{i}, type: string, default: x}}"))
            .collect();
        let (p, m) = err_of(&task(&format!("[{}]", many.join(", ")), "{}"));
        assert_eq!(
            (p.as_str(), m.as_str()),
            ("params", "33 params; the limit is 32")
        );
    }

    #[test]
    fn a_param_without_default_is_refused_on_a_task_that_fires_by_itself() {
        for trigger in [
            "{cron: '0 0 1 * * ?'}",
            "{every: 1h}",
            "{delay: 5m}",
            "{at: '2030-01-01T00:00:00Z'}",
            "{after: [other]}",
        ] {
            let yaml = format!(
                "name: t\ntrigger: {trigger}\nparams: [{{name: ok, type: string, default: x}}, {{name: day, type: string}}]\nplugin: p@1.0.0\n"
            );
            let (p, m) = err_of(&yaml);
            assert_eq!(p, "params[1].default", "for {trigger}");
            assert_eq!(
                m,
                "param `day` has no default, but the task's trigger fires it with no one to give a value: give the param a default, or remove the trigger"
            );
            // With a default it saves.
            let yaml = yaml.replace(
                "{name: day, type: string}",
                "{name: day, type: string, default: y}",
            );
            assert!(load(&yaml, &CAPS).is_ok(), "{yaml}");
        }
        // A manual task may require it.
        assert!(
            load(
                &task("[{name: day, type: string}]", "'${input.day}'"),
                &CAPS
            )
            .is_ok()
        );
    }

    #[test]
    fn upstream_is_reserved_on_a_task_with_an_after_trigger() {
        let yaml = "name: t\ntrigger: {after: [up]}\nparams: [{name: upstream, type: string, default: x}]\nplugin: p@1.0.0\n";
        let (p, m) = err_of(yaml);
        assert_eq!(p, "params[0].name");
        assert!(
            m.starts_with("`upstream` is the input entry an `after` run gets"),
            "{m}"
        );
        // Its runs' `upstream` may be read beside the params.
        let yaml = "name: t\ntrigger: {after: [up]}\nparams: [{name: n, type: integer, default: 1}]\nsteps:\n  - {name: a, plugin: p@1.0.0, input: {s: '${input.upstream.status}', n: '${input.n}'}, when: \"input.upstream.status == 'succeeded'\"}\n";
        assert!(load(yaml, &CAPS).is_ok());
        // A manual task may name a param `upstream`.
        assert!(
            load(
                &task("[{name: upstream, type: string}]", "'${input.upstream}'"),
                &CAPS
            )
            .is_ok()
        );
    }

    #[test]
    fn input_references_must_name_a_declared_param() {
        let params =
            "[{name: day, type: string, default: x}, {name: n, type: integer, default: 1}]";
        let (p, m) = err_of(&task(params, "{a: ok, b: ['${input.dya}']}"));
        assert_eq!(p, "input.b[0]");
        assert_eq!(
            m,
            "`${input.dya}`: task `t` declares no param `dya` (its params: day, n); declare it under `params:`"
        );
        let (p, m) = err_of(&task(params, "'day ${input.n.x}'"));
        assert_eq!(p, "input");
        assert_eq!(
            m,
            "`${input.n.x}`: param `n` is an integer, which has no fields"
        );
        // The whole input, and the declared names, are fine.
        assert!(
            load(
                &task(
                    params,
                    "{all: '${input}', d: '${input.day}', n: '${input.n}'}"
                ),
                &CAPS
            )
            .is_ok()
        );
        // In a step of a `steps:` task, the path names the step.
        let yaml = format!(
            "name: t\nparams: {params}\nsteps:\n  - {{name: a, plugin: p@1.0.0}}\n  - {{name: b, plugin: p@1.0.0, needs: [a], input: {{x: '${{input.y}}'}}}}\n"
        );
        let (p, m) = err_of(&yaml);
        assert_eq!(p, "steps[1].input.x");
        assert!(
            m.starts_with("`${input.y}`: task `t` declares no param `y`"),
            "{m}"
        );
    }

    #[test]
    fn conditions_must_read_declared_params() {
        let with_when = |when: &str| {
            format!(
                "name: t\nparams: [{{name: n, type: integer, default: 1}}, {{name: mode, type: enum, values: [a, b], default: a}}]\nsteps: [{{name: s, plugin: p@1.0.0, when: {}}}]\n",
                serde_json::to_string(when).unwrap()
            )
        };
        assert!(
            load(
                &with_when("input.n > 0 && input.mode == 'a' && has(input.n)"),
                &CAPS
            )
            .is_ok()
        );
        assert!(
            load(&with_when("input.size() > 0"), &CAPS).is_ok(),
            "the whole input"
        );
        let (p, m) = err_of(&with_when("input.n > 0 && input.limit > 3"));
        assert_eq!(p, "steps[0].when");
        assert_eq!(
            m,
            "`input.limit`: task `t` declares no param `limit` (its params: n, mode); declare it under `params:`"
        );
        let (_, m) = err_of(&with_when("input.mode.x == 1"));
        assert_eq!(
            m,
            "`input.mode`: param `mode` is an enum of `a`, `b`, which has no fields"
        );
    }

    #[test]
    fn a_task_without_params_keeps_reading_any_input() {
        let yaml = "name: t\nsteps: [{name: s, plugin: p@1.0.0, input: {x: '${input.anything.deep}'}, when: input.whatever > 1}]\n";
        assert!(load(yaml, &CAPS).is_ok());
    }
}
