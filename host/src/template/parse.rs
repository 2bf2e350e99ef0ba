//! Reading templates: one string parsed into text and `${...}` pieces, the
//! reference inside the braces checked against [`VARIABLES`], and every
//! string of a JSON template walked with its path, for listing the
//! variables a template refers to.

use serde_json::Value;

use super::{TemplateError, VARIABLES, VarRef, shorten};

/// A piece of a parsed template string.
#[derive(Debug, PartialEq)]
pub(super) enum Piece<'s> {
    Text(&'s str),
    Var(VarRef),
}

/// Parses one template string into text and variable pieces.
pub(super) fn parse_str(s: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(dollar) = rest.find('$') {
        let after = &rest[dollar..];
        if let Some(tail) = after.strip_prefix("$${") {
            // The escape: keep the text before, then a literal `${`.
            pieces.push(Piece::Text(&rest[..dollar]));
            pieces.push(Piece::Text("${"));
            rest = tail;
        } else if let Some(body) = after.strip_prefix("${") {
            pieces.push(Piece::Text(&rest[..dollar]));
            let Some(close) = body.find('}') else {
                return Err(TemplateError::Unterminated {
                    text: shorten(after),
                });
            };
            pieces.push(Piece::Var(parse_var(&body[..close])?));
            rest = &body[close + 1..];
        } else {
            pieces.push(Piece::Text(&rest[..=dollar]));
            rest = &after[1..];
        }
    }
    pieces.push(Piece::Text(rest));
    pieces.retain(|p| !matches!(p, Piece::Text("")));
    Ok(pieces)
}

/// Parses what stands between `${` and `}`.
fn parse_var(raw: &str) -> Result<VarRef, TemplateError> {
    let text = raw.trim();
    if text.is_empty() {
        return Err(TemplateError::Empty);
    }
    if text.contains("${") || text.contains('{') {
        return Err(TemplateError::Nested {
            text: shorten(text),
        });
    }
    let bad = |reason: &str| TemplateError::BadPath {
        text: shorten(text),
        reason: reason.to_owned(),
    };
    let segments: Vec<&str> = text.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(bad("a path segment is empty (check the dots)"));
    }
    if let Some(s) = segments.iter().find(|s| s.chars().any(char::is_whitespace)) {
        return Err(bad(&format!("the path segment `{s}` contains a space")));
    }
    let (head, tail) = (segments[0], &segments[1..]);
    let owned = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let scalar = |var: VarRef| {
        if tail.is_empty() {
            Ok(var)
        } else {
            Err(bad(&format!("`{head}` is a plain value and has no fields")))
        }
    };
    match head {
        "bizDate" => scalar(VarRef::BizDate),
        "scheduledFor" => scalar(VarRef::ScheduledFor),
        "triggerTime" => scalar(VarRef::TriggerTime),
        "runId" => scalar(VarRef::RunId),
        "attempt" => scalar(VarRef::Attempt),
        "input" => Ok(VarRef::Input(owned(tail))),
        "steps" => {
            // Step names may contain dots, so the name runs up to the first
            // `output` segment after it.
            match tail.iter().skip(1).position(|s| *s == "output") {
                Some(at) => Ok(VarRef::StepOutput {
                    step: tail[..=at].join("."),
                    path: owned(&tail[at + 2..]),
                }),
                None => Err(bad(
                    "write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
                )),
            }
        }
        _ => Err(TemplateError::UnknownVariable {
            name: shorten(text),
            hint: hint_for(head),
        }),
    }
}

/// A "did you mean" for a misspelt variable head, or the list of variables.
fn hint_for(head: &str) -> String {
    let fold = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase();
    let heads = [
        "bizDate",
        "scheduledFor",
        "triggerTime",
        "runId",
        "attempt",
        "input",
        "steps",
    ];
    match heads.iter().find(|h| fold(h) == fold(head)) {
        Some(h) => format!("; did you mean `${{{h}}}`?"),
        None => format!("; known variables: {}", VARIABLES.join(", ")),
    }
}

/// Calls `f` with every string of a template and its JSON path (`a.b[0]`,
/// empty for the root), in document order. Object keys are not visited: they
/// are not templated.
pub fn for_each_string<'v, E>(
    template: &'v Value,
    f: &mut dyn FnMut(&str, &'v str) -> Result<(), E>,
) -> Result<(), E> {
    fn walk<'v, E>(
        value: &'v Value,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'v str) -> Result<(), E>,
    ) -> Result<(), E> {
        match value {
            Value::String(s) => f(path, s),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    walk(item, path, f)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    walk(item, path, f)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
        }
    }
    walk(template, &mut String::new(), f)
}

/// The variables one template string refers to, in order of appearance.
pub fn references_in_str(s: &str) -> Result<Vec<VarRef>, TemplateError> {
    Ok(parse_str(s)?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Var(v) => Some(v),
            Piece::Text(_) => None,
        })
        .collect())
}

/// Every variable a template refers to, in document order (repeats included).
/// Fails on the first malformed or unknown reference.
pub fn references(template: &Value) -> Result<Vec<VarRef>, TemplateError> {
    let mut found = Vec::new();
    for_each_string(template, &mut |_, s| {
        found.extend(references_in_str(s)?);
        Ok(())
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn references_lists_every_variable_in_document_order() {
        let t = json!({
            "a": "${bizDate}-${scheduledFor}",
            "b": ["${triggerTime}", "${runId}", "${attempt}"],
            "c": {"d": "${input}", "e": "${input.x.0}", "f": "${steps.s1.output}", "g": "${steps.s-2.output.a.b}"},
        });
        assert_eq!(
            references(&t).unwrap(),
            vec![
                VarRef::BizDate,
                VarRef::ScheduledFor,
                VarRef::TriggerTime,
                VarRef::RunId,
                VarRef::Attempt,
                VarRef::Input(vec![]),
                VarRef::Input(vec!["x".into(), "0".into()]),
                VarRef::StepOutput {
                    step: "s1".into(),
                    path: vec![]
                },
                VarRef::StepOutput {
                    step: "s-2".into(),
                    path: vec!["a".into(), "b".into()]
                },
            ]
        );
    }

    #[test]
    fn dotted_step_names_end_at_the_first_output_segment() {
        assert_eq!(
            references(&json!("${steps.load.v2.output.rows}")).unwrap(),
            vec![VarRef::StepOutput {
                step: "load.v2".into(),
                path: vec!["rows".into()]
            }]
        );
        assert_eq!(
            references(&json!("${steps.output.output.output}")).unwrap(),
            vec![VarRef::StepOutput {
                step: "output".into(),
                path: vec!["output".into()]
            }]
        );
    }

    #[test]
    fn var_ref_displays_as_written() {
        for text in [
            "bizDate",
            "attempt",
            "input",
            "input.a.0",
            "steps.x.output",
            "steps.x.output.rows",
        ] {
            let [var] = references(&json!(format!("${{{text}}}")))
                .unwrap()
                .try_into()
                .unwrap();
            assert_eq!(var.to_string(), text);
        }
    }

    #[test]
    fn unknown_variable_is_refused_with_a_suggestion() {
        let err = references(&json!("${bizdate}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown variable `${bizdate}`; did you mean `${bizDate}`?"
        );
        let err = references(&json!("${run_id}")).unwrap_err();
        assert!(
            err.to_string().contains("did you mean `${runId}`?"),
            "{err}"
        );
        let err = references(&json!("${today}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown variable `${today}`; known variables: bizDate, scheduledFor, triggerTime, runId, attempt, input, steps.NAME.output"
        );
    }

    #[test]
    fn malformed_references_are_refused() {
        let cases = [
            (
                "${",
                "unterminated `${` in `${` (write `$${` for a literal `${`)",
            ),
            (
                "abc ${input.x",
                "unterminated `${` in `${input.x` (write `$${` for a literal `${`)",
            ),
            ("${}", "`${}` names no variable"),
            ("${  }", "`${}` names no variable"),
            (
                "${input..x}",
                "`${input..x}`: a path segment is empty (check the dots)",
            ),
            (
                "${input.}",
                "`${input.}`: a path segment is empty (check the dots)",
            ),
            (
                "${input.a b}",
                "`${input.a b}`: the path segment `a b` contains a space",
            ),
            (
                "${attempt.x}",
                "`${attempt.x}`: `attempt` is a plain value and has no fields",
            ),
            (
                "${steps.x}",
                "`${steps.x}`: write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
            ),
            (
                "${steps.x.status}",
                "`${steps.x.status}`: write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
            ),
            (
                "${steps.output}",
                "`${steps.output}`: write it as `steps.NAME.output` or `steps.NAME.output.PATH`",
            ),
            (
                "${input.${x}}",
                "`${input.${x}`: a `${` cannot appear inside `${...}`",
            ),
        ];
        for (text, message) in cases {
            let err = references(&json!({"k": [text]})).unwrap_err();
            assert_eq!(err.to_string(), message, "for {text}");
        }
    }

    #[test]
    fn long_unterminated_text_is_shortened() {
        let text = format!("${{input.{}", "x".repeat(200));
        let err = references(&json!(text)).unwrap_err();
        let TemplateError::Unterminated { text } = err else {
            panic!("{err:?}")
        };
        assert_eq!(text.chars().count(), 81);
        assert!(text.ends_with('…'));
    }

    #[test]
    fn for_each_string_reports_json_paths() {
        let t = json!({"a": {"b": ["x", 1, {"c": "y"}]}, "d": "z"});
        let mut seen = Vec::new();
        for_each_string::<()>(&t, &mut |path, s| {
            seen.push(format!("{path}={s}"));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["a.b[0]=x", "a.b[2].c=y", "d=z"]);
        let mut root = Vec::new();
        for_each_string::<()>(&json!("top"), &mut |path, s| {
            root.push((path.to_owned(), s.to_owned()));
            Ok(())
        })
        .unwrap();
        assert_eq!(root, [(String::new(), "top".to_owned())]);
    }
}
