//! Structural validation on save: [`validate`] checks what a parsed
//! [`TaskSpec`] means — the task's name, description, priority and config;
//! each `when`, parsed as a CEL [`Condition`]; the graph (through
//! [`crate::dag`]); and that template references and conditions read only
//! upstream steps, and that `input.NAME` names a declared param. A step's own
//! fields are checked in `step`, the trigger in `trigger`, `params:` in
//! `params`. Errors carry the path of the field (`steps[1].limits.fuel`).

mod params;
mod step;
mod trigger;

use params::{input_field_error, validate_params};
use step::{validate_config, validate_step};
use trigger::validate_trigger;

use super::error::SpecError;
use super::types::TaskSpec;
use super::{MAX_DESCRIPTION_BYTES, MAX_PRIORITY, MAX_STEPS};
use crate::cond::Condition;
use crate::model::Caps;
use crate::model::name::{MAX_NAME_LEN, is_valid_name};
use crate::template::shorten;
use crate::{dag, template};

/// Structural validation on save (plugins are not looked up; the trigger's
/// cron syntax and time zone are compiled by `schedule`). Checks, in order:
/// the task name, description, priority and trigger; each step's name,
/// plugin, limits (non-zero, within `caps` and what wasm can address), pool,
/// retry bounds, `needs`; each `when`, parsed as a [`Condition`] (bounds,
/// syntax); the graph (duplicates, unknown needs, cycles); then template
/// references and the steps each `when` reads, which must be upstream
/// (transitively needed) of the step using them, and, on a task that
/// declares `params:`, the `input.NAME` each reads, which must be a param.
pub fn validate(spec: &TaskSpec, caps: &Caps) -> Result<(), SpecError> {
    if !is_valid_name(&spec.name) {
        return Err(name_error("name", "task", &spec.name));
    }
    if let Some(d) = &spec.description
        && d.len() > MAX_DESCRIPTION_BYTES
    {
        return Err(SpecError::new(
            "description",
            format!("is {} bytes; the limit is {MAX_DESCRIPTION_BYTES}", d.len()),
        ));
    }
    if spec.priority > MAX_PRIORITY {
        return Err(SpecError::new(
            "priority",
            format!("{} is outside 0..={MAX_PRIORITY}", spec.priority),
        ));
    }
    if let Some(trigger) = &spec.trigger {
        validate_trigger(trigger, &spec.name)?;
    }
    validate_params(spec)?;
    if spec.steps.is_empty() {
        return Err(SpecError::new("steps", "a task needs at least one step"));
    }
    if spec.steps.len() > MAX_STEPS {
        return Err(SpecError::new(
            "steps",
            format!("{} steps; the limit is {MAX_STEPS}", spec.steps.len()),
        ));
    }
    validate_config(&spec.config, "config")?;
    let mut conditions = Vec::with_capacity(spec.steps.len());
    for (i, step) in spec.steps.iter().enumerate() {
        validate_step(step, &format!("steps[{i}]"), caps)?;
        let when = step
            .when
            .as_deref()
            .map(Condition::parse_cached)
            .transpose();
        conditions
            .push(when.map_err(|e| SpecError::new(format!("steps[{i}].when"), e.to_string()))?);
    }
    let graph = spec.graph();
    dag::check(&graph).map_err(|e| dag_error(spec, e))?;
    let names: Vec<&str> = graph.iter().map(|(n, _)| *n).collect();
    for (i, step) in spec.steps.iter().enumerate() {
        let upstream = dag::upstream(&graph, i);
        let path = format!("steps[{i}]");
        let reach = |other: &str| -> Option<String> {
            if upstream.contains(other) {
                None
            } else if names.contains(&other) {
                Some(format!(
                    "step `{other}` is not upstream of `{}`; add it to `needs` (directly or through another step)",
                    step.name
                ))
            } else {
                Some(format!("there is no step `{other}` in this task"))
            }
        };
        template::for_each_string(&step.input, &mut |at, text| {
            let here = match at {
                "" => format!("{path}.input"),
                at if at.starts_with('[') => format!("{path}.input{at}"),
                at => format!("{path}.input.{at}"),
            };
            for var in template::references_in_str(text)
                .map_err(|e| SpecError::new(&here, e.to_string()))?
            {
                if let template::VarRef::StepOutput { step: other, .. } = &var
                    && let Some(why) = reach(other)
                {
                    return Err(SpecError::new(&here, format!("`${{{var}}}`: {why}")));
                }
                if let template::VarRef::Input(path) = &var
                    && let Some((name, below)) = path.split_first()
                    && let Some(why) = input_field_error(spec, name, !below.is_empty())
                {
                    return Err(SpecError::new(&here, format!("`${{{var}}}`: {why}")));
                }
            }
            Ok(())
        })?;
        if let Some(when) = &conditions[i] {
            for (name, below) in when.referenced_input() {
                if let Some(why) = input_field_error(spec, &name, below) {
                    return Err(SpecError::new(
                        format!("{path}.when"),
                        format!("`input.{name}`: {why}"),
                    ));
                }
            }
            for other in when.referenced_steps() {
                if let Some(why) = reach(&other) {
                    let hint = if names.iter().any(|n| n.starts_with(&format!("{other}-"))) {
                        " (a name with `-` or `.` is written steps[\"my-step\"])"
                    } else {
                        ""
                    };
                    return Err(SpecError::new(
                        format!("{path}.when"),
                        format!("{why}{hint}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Maps a graph error to the field it is about.
fn dag_error(spec: &TaskSpec, e: dag::DagError) -> SpecError {
    let index_of = |name: &str, nth: usize| {
        spec.steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name == name)
            .nth(nth)
            .map_or(0, |(i, _)| i)
    };
    match e {
        dag::DagError::Duplicate(name) => SpecError::new(
            format!("steps[{}].name", index_of(&name, 1)),
            format!(
                "duplicate step name `{name}` (also steps[{}])",
                index_of(&name, 0)
            ),
        ),
        dag::DagError::UnknownNeed { step, need } => SpecError::new(
            format!("steps[{}].needs", index_of(&step, 0)),
            format!("there is no step `{need}` in this task"),
        ),
        cycle @ dag::DagError::Cycle(_) => {
            SpecError::new("steps", format!("{cycle} (each step needs the next)"))
        }
    }
}

fn name_error(path: &str, what: &str, name: &str) -> SpecError {
    SpecError::new(
        path,
        format!(
            "`{}` is not a valid {what} name: use letters, digits, `_`, `.` and `-`, \
             start with a letter or digit, at most {MAX_NAME_LEN} characters",
            shorten(name)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::test_support::{CAPS, err_of};
    use crate::task::{MAX_WHEN_BYTES, StepSpec, load, parse};

    #[test]
    fn graph_errors_point_at_the_step() {
        let (p, m) = err_of(
            "name: t\nsteps: [{name: a, plugin: p@1.0.0}, {name: b, plugin: p@1.0.0}, {name: a, plugin: p@1.0.0}]\n",
        );
        assert_eq!(
            (p.as_str(), m.as_str()),
            ("steps[2].name", "duplicate step name `a` (also steps[0])")
        );
        let (p, m) = err_of(
            "name: t\nsteps: [{name: a, plugin: p@1.0.0}, {name: b, plugin: p@1.0.0, needs: [a, c]}]\n",
        );
        assert_eq!(
            (p.as_str(), m.as_str()),
            ("steps[1].needs", "there is no step `c` in this task")
        );
        let (p, m) = err_of("name: t\nsteps: [{name: a, plugin: p@1.0.0, needs: [a, a]}]\n");
        assert_eq!(
            (p.as_str(), m.as_str()),
            ("steps[0].needs[1]", "`a` is listed twice")
        );
    }

    #[test]
    fn cycle_is_rejected_with_its_path() {
        let yaml = "
name: t
steps:
  - {name: start, plugin: p@1.0.0}
  - {name: a, plugin: p@1.0.0, needs: [start, c]}
  - {name: b, plugin: p@1.0.0, needs: [a]}
  - {name: c, plugin: p@1.0.0, needs: [b]}
";
        let (p, m) = err_of(yaml);
        assert_eq!(
            (p.as_str(), m.as_str()),
            (
                "steps",
                "cycle: a -> c -> b -> a (each step needs the next)"
            )
        );
    }

    #[test]
    fn template_references_must_be_known_and_upstream() {
        let base = |input: &str, needs: &str| {
            format!(
                "name: t\nsteps:\n  - {{name: a, plugin: p@1.0.0}}\n  - {{name: b, plugin: p@1.0.0, needs: [a]}}\n  - {{name: c, plugin: p@1.0.0}}\n  - {{name: d, plugin: p@1.0.0, needs: {needs}, input: {input}}}\n"
            )
        };
        // Transitive upstream (a through b) is fine.
        assert!(
            load(
                &base(
                    "{x: '${steps.a.output.rows}', y: '${steps.b.output}'}",
                    "[b]"
                ),
                &CAPS
            )
            .is_ok()
        );
        let (p, m) = err_of(&base("{x: {y: ['ok', 'n=${steps.c.output.n}']}}", "[b]"));
        assert_eq!(p, "steps[3].input.x.y[1]");
        assert_eq!(
            m,
            "`${steps.c.output.n}`: step `c` is not upstream of `d`; add it to `needs` (directly or through another step)"
        );
        let (p, m) = err_of(&base("{x: '${steps.zz.output}'}", "[b]"));
        assert_eq!(
            (p.as_str(), m.as_str()),
            (
                "steps[3].input.x",
                "`${steps.zz.output}`: there is no step `zz` in this task"
            )
        );
        let (p, m) = err_of(&base("'${steps.d.output}'", "[b]"));
        assert_eq!(p, "steps[3].input");
        assert!(m.contains("step `d` is not upstream of `d`"), "{m}");
        let (p, m) = err_of(&base("['${today}']", "[]"));
        assert_eq!(p, "steps[3].input[0]");
        assert!(m.starts_with("unknown variable `${today}`"), "{m}");
        let (p, m) = err_of(&base("{x: '${input.a'}", "[]"));
        assert_eq!(p, "steps[3].input.x");
        assert!(m.starts_with("unterminated"), "{m}");
    }

    #[test]
    fn when_bounds_are_checked() {
        let with_when = |when: &str| {
            format!(
                "name: t\nsteps: [{{name: a, plugin: p@1.0.0, when: {}}}]\n",
                serde_json::to_string(when).unwrap()
            )
        };
        let cases = [
            (
                "   ".to_owned(),
                "is empty; remove `when` or write a condition".to_owned(),
            ),
            (
                "x".repeat(MAX_WHEN_BYTES + 1),
                "is 1025 bytes; the limit is 1024".to_owned(),
            ),
            (
                format!("{}1{}", "(".repeat(33), ")".repeat(33)),
                "nests brackets more than 32 deep".to_owned(),
            ),
            ("(a > 1".to_owned(), "has an unclosed `(`".to_owned()),
            (
                "a[0)".to_owned(),
                "has a `)` that closes nothing".to_owned(),
            ),
            (
                "a > 1)".to_owned(),
                "has a `)` that closes nothing".to_owned(),
            ),
            (
                // Seven nested `map`s over ten items: 10⁷ values at run time.
                format!(
                    "{}a{}.size() > 0",
                    ["a", "b", "c", "d", "e", "f", "g"]
                        .map(|v| format!("[0,1,2,3,4,5,6,7,8,9].map({v},"))
                        .concat(),
                    ")".repeat(7)
                ),
                "would take about 83333331 steps evaluated over its literal lists (nested \
                 macros multiply); a condition may take at most 1000000; nest fewer macros or \
                 use shorter lists"
                    .to_owned(),
            ),
            (
                "input.x.matches('(a')".to_owned(),
                "the pattern of matches() '(a' not a valid regex:\nregex parse error:\n    (a\n    ^\nerror: unclosed group".to_owned(),
            ),
        ];
        for (when, message) in cases {
            let (p, m) = err_of(&with_when(&when));
            assert_eq!(
                (p.as_str(), m.as_str()),
                ("steps[0].when", message.as_str()),
                "for {when}"
            );
        }
        let ok = [
            format!("{}1{}", "(".repeat(32), ")".repeat(32)),
            "input.name == ')(' && input.x[0] > 1".to_owned(),
            r#"input.s == "a\"(" || {'k': [1]}.size() > 0"#.to_owned(),
        ];
        for when in ok {
            assert!(load(&with_when(&when), &CAPS).is_ok(), "{when}");
        }
    }

    #[test]
    fn when_may_only_name_upstream_steps() {
        let yaml = |when: &str| {
            format!(
                "name: t\nsteps:\n  - {{name: a, plugin: p@1.0.0}}\n  - {{name: my-step, plugin: p@1.0.0}}\n  - {{name: c, plugin: p@1.0.0, needs: [a], when: {}}}\n",
                serde_json::to_string(when).unwrap()
            )
        };
        assert!(load(&yaml("steps.a.output.rows > 5"), &CAPS).is_ok());
        assert!(load(&yaml("steps[\"a\"].output.ok"), &CAPS).is_ok());
        assert!(
            load(&yaml("input.note == 'steps.zz'"), &CAPS).is_ok(),
            "text inside a literal is not a reference"
        );
        assert!(
            load(&yaml("mysteps.zz == 1 || x.steps.zz"), &CAPS).is_ok(),
            "only the `steps` variable counts"
        );
        let (p, m) = err_of(&yaml("steps.a.output.ok && steps['my-step'].output.ok"));
        assert_eq!(
            (p.as_str(), m.as_str()),
            (
                "steps[2].when",
                "step `my-step` is not upstream of `c`; add it to `needs` (directly or through another step)"
            )
        );
        let (_, m) = err_of(&yaml("steps.my-step.output.ok"));
        assert_eq!(
            m,
            "there is no step `my` in this task (a name with `-` or `.` is written steps[\"my-step\"])"
        );
        let (_, m) = err_of(&yaml("size(steps . ghost.output) > 0"));
        assert_eq!(m, "there is no step `ghost` in this task");
    }

    #[test]
    fn when_step_names_are_found_in_order() {
        let names = |when: &str| Condition::parse(when).unwrap().referenced_steps();
        assert_eq!(
            names(r#"steps.a.x > 1 && steps [ "b-c" ].y || 'steps.d' == steps.e"#),
            ["a", "b-c", "e"]
        );
        assert!(names("mysteps.a == x.steps.b // steps.c").is_empty());
    }

    #[test]
    fn when_is_parsed_as_cel_on_save() {
        let with_when = |when: &str| {
            format!(
                "name: t\nsteps:\n  - {{name: a, plugin: p@1.0.0}}\n  - {{name: b, plugin: p@1.0.0, needs: [a], when: {}}}\n",
                serde_json::to_string(when).unwrap()
            )
        };
        let cases = [
            (
                "steps.a.output.rows >",
                "syntax error at column 22: mismatched input '<EOF>' expecting a value",
            ),
            (
                "steps.a.output.rows > 'x",
                "has a string starting at column 23 that is not closed on its line",
            ),
            (
                "size(steps) > 0",
                "uses `steps` without naming a step; write steps.NAME or steps[\"NAME\"] (only named steps can be checked to be upstream)",
            ),
        ];
        for (when, message) in cases {
            let (p, m) = err_of(&with_when(when));
            assert_eq!(
                (p.as_str(), m.as_str()),
                ("steps[1].when", message),
                "for {when}"
            );
        }
        let chain = format!("steps.a.output.n{} > 0", " + 1".repeat(70));
        let (p, m) = err_of(&with_when(&chain));
        assert_eq!(p, "steps[1].when");
        assert!(m.starts_with("nests expressions more than 64 deep"), "{m}");
        // Transitive upstreams may be read.
        let yaml = "name: t\nsteps:\n  - {name: a, plugin: p@1.0.0}\n  - {name: b, plugin: p@1.0.0, needs: [a]}\n  - {name: c, plugin: p@1.0.0, needs: [b], when: 'steps.a.status == \"succeeded\" && has(steps.b.output.x)'}\n";
        assert!(load(yaml, &CAPS).is_ok());
    }

    #[test]
    fn hand_built_spec_is_validated_too() {
        let mut spec = parse("name: t\nplugin: p@1.0.0\n").unwrap();
        spec.priority = 10;
        assert_eq!(
            validate(&spec, &CAPS).unwrap_err().to_string(),
            "priority: 10 is outside 0..=9"
        );
        spec.priority = 9;
        spec.steps[0].plugin.version = crate::task::VersionSelector::Exact("1".into());
        let e = validate(&spec, &CAPS).unwrap_err();
        assert_eq!(e.path, "steps[0].plugin");
        assert!(e.message.contains("`1` is not a semver version"), "{e}");
        spec.steps[0].plugin.version = crate::task::VersionSelector::Tag("x".into());
        let e = validate(&spec, &CAPS).unwrap_err();
        assert!(e.message.contains("`x` is not a valid tag"), "{e}");
        spec.steps.clear();
        assert_eq!(validate(&spec, &CAPS).unwrap_err().path, "steps");
        let one = parse("name: t\nplugin: p@1.0.0\n").unwrap().steps.remove(0);
        spec.steps = (0..=MAX_STEPS)
            .map(|i| StepSpec {
                name: format!("s{i}"),
                ..one.clone()
            })
            .collect();
        assert_eq!(
            validate(&spec, &CAPS).unwrap_err().message,
            format!("{} steps; the limit is {MAX_STEPS}", MAX_STEPS + 1)
        );
    }
}
