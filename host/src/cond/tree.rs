//! The parsed tree, checked: its depth bounded by [`MAX_EXPR_DEPTH`] (the
//! evaluator recurses once per level), `steps` used only to name a step, the
//! variables and step names it reads collected, and the parser's errors put
//! in words with their position.

use cel::ParseErrors;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, MapExpr, StructExpr, operators};

use super::error::truncate;
use super::text::position;
use super::{CondError, MAX_EXPR_DEPTH};

/// What [`analyze`] finds in a parsed condition.
pub(super) struct Found {
    pub(super) steps: Vec<String>,
    pub(super) uses_input: bool,
    pub(super) uses_run: bool,
}

impl Found {
    fn add_step(&mut self, name: &str) {
        if !self.steps.iter().any(|s| s == name) {
            self.steps.push(name.to_owned());
        }
    }
}

/// Walks the tree (iteratively: it may be deeper than allowed) to bound its
/// depth and collect the variables and step names it reads.
pub(super) fn analyze(root: &IdedExpr) -> Result<Found, CondError> {
    let mut found = Found {
        steps: Vec::new(),
        uses_input: false,
        uses_run: false,
    };
    let bare_steps = || {
        CondError::Syntax(
            "uses `steps` without naming a step; write steps.NAME or steps[\"NAME\"] \
             (only named steps can be checked to be upstream)"
                .to_owned(),
        )
    };
    let mut stack: Vec<(&IdedExpr, usize)> = vec![(root, 1)];
    // A node's children in source order; pushed reversed so that names are
    // found in source order.
    let mut children: Vec<&IdedExpr> = Vec::new();
    while let Some((node, depth)) = stack.pop() {
        if depth > MAX_EXPR_DEPTH {
            return Err(expressions_too_deep());
        }
        children.clear();
        match &node.expr {
            Expr::Ident(name) => match name.trim_start_matches('.') {
                "steps" => return Err(bare_steps()),
                "input" => found.uses_input = true,
                "run" => found.uses_run = true,
                _ => {}
            },
            Expr::Select(select) => {
                if is_steps(&select.operand) {
                    found.add_step(&select.field);
                } else {
                    children.push(&select.operand);
                }
            }
            Expr::Call(call) => {
                let index =
                    [operators::INDEX, operators::OPT_INDEX].contains(&call.func_name.as_str());
                if index && call.target.is_none() && call.args.len() == 2 && is_steps(&call.args[0])
                {
                    match &call.args[1].expr {
                        Expr::Literal(LiteralValue::String(name)) => found.add_step(name.inner()),
                        _ => return Err(bare_steps()),
                    }
                } else {
                    children.extend(call.target.as_deref());
                    children.extend(&call.args);
                }
            }
            Expr::Comprehension(c) => {
                if c.iter_var == "steps" || c.iter_var2.as_deref() == Some("steps") {
                    return Err(CondError::Syntax(
                        "uses `steps` as a macro variable; choose another name".to_owned(),
                    ));
                }
                children.extend([
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ]);
            }
            Expr::List(list) => children.extend(&list.elements),
            Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
                for entry in entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(e) => children.extend([&e.key, &e.value]),
                        EntryExpr::StructField(f) => children.push(&f.value),
                    }
                }
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
        stack.extend(children.iter().rev().map(|c| (*c, depth + 1)));
    }
    Ok(found)
}

/// The error for an expression nested deeper than [`MAX_EXPR_DEPTH`].
fn expressions_too_deep() -> CondError {
    CondError::TooDeep(format!(
        "nests expressions more than {MAX_EXPR_DEPTH} deep (each operator, \
         `.field`, `[index]` or call in a chain like `a + b + c` is a level; \
         `&&` and `||` chains are not); split it up"
    ))
}

/// Whether `e` is the `steps` variable (`steps` or `.steps`).
fn is_steps(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Ident(name) if name.trim_start_matches('.') == "steps")
}

/// The first parse error, with its position, as a [`CondError`].
pub(super) fn syntax_error(errors: &ParseErrors) -> CondError {
    let Some(e) = errors.errors.first() else {
        return CondError::Syntax("syntax error".to_owned());
    };
    if e.msg.contains("Recursion limit") {
        // The parser's own limit (96 nested sub-expressions): a long chain
        // of `a ? b : c ? …`, or brackets if the text check was fooled.
        return expressions_too_deep();
    }
    let msg = e.msg.strip_prefix("Syntax error: ").unwrap_or(&e.msg);
    // ANTLR lists every token that may start an operand; say it in words.
    let msg = match msg.find(" expecting {") {
        Some(at) if msg.contains("IDENTIFIER") && msg.contains("NUM_INT") => {
            format!("{} expecting a value", &msg[..at])
        }
        _ => msg.to_owned(),
    };
    let msg = truncate(&msg);
    let (line, col) = e.pos;
    CondError::Syntax(match (usize::try_from(line), usize::try_from(col)) {
        (Ok(line @ 1..), Ok(col @ 1..)) => {
            format!("syntax error {}: {msg}", position(line, col))
        }
        _ => format!("syntax error: {msg}"),
    })
}

#[cfg(test)]
mod tests {
    use crate::cond::tests::eval;
    use crate::cond::{CondError, Condition};

    #[test]
    fn referenced_steps_are_found_in_order_once() {
        let refs = |e: &str| Condition::parse(e).unwrap().referenced_steps();
        assert_eq!(
            refs(r#"steps.a.x > 1 && steps [ "b-c" ].y || 'steps.d' == steps.e && steps.a.z"#),
            ["a", "b-c", "e"]
        );
        assert_eq!(refs("has(steps.a) && .steps.b.status == 'x'"), ["a", "b"]);
        assert_eq!(refs("[1].exists(x, steps.c.output.n == x)"), ["c"]);
        assert_eq!(
            refs("x.steps.y == mysteps.z // steps.q"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn steps_must_name_a_step() {
        for expr in [
            "size(steps) > 0",
            "steps[input.name].status == 'x'",
            "'a' in steps",
            "[1].all(steps, steps > 0)",
        ] {
            let e = Condition::parse(expr).unwrap_err();
            assert!(matches!(e, CondError::Syntax(_)), "{expr}: {e:?}");
            assert!(e.to_string().contains("steps"), "{expr}: {e}");
        }
    }

    #[test]
    fn long_chains_are_too_deep_not_a_crash() {
        let too_deep = |e: &str| matches!(Condition::parse(e), Err(CondError::TooDeep(m)) if m.contains("expressions"));
        assert!(too_deep(&format!("1{} > 0", " + 1".repeat(100))));
        assert!(too_deep(&format!("input{} == 1", ".a".repeat(100))));
        assert!(too_deep(&format!("input.list{} == 1", "[0]".repeat(100))));
        assert!(too_deep(&format!("'a'{} == 1", ".size()".repeat(100))));
        assert!(too_deep(&format!("1{}", " == 1".repeat(200))));
        // 90 levels: the tree check; 100: the parser's own limit (96).
        assert!(too_deep(&format!("{}1", "true ? 1 : ".repeat(90))));
        assert!(too_deep(&format!("{}1", "x?1:".repeat(100))));
        // `&&`/`||` chains are balanced, so even very long ones pass.
        assert_eq!(eval(&format!("true{}", " && true".repeat(120))), Ok(true));
        assert_eq!(eval(&format!("1{} == 61", " + 1".repeat(60))), Ok(true));
        // Unary chains are folded by the parser.
        assert_eq!(eval(&format!("{}true", "!".repeat(1000))), Ok(true));
        assert_eq!(eval(&format!("{}true", "!".repeat(1001))), Ok(false));
        assert!(matches!(
            eval(&format!("{}1", "-".repeat(1000))),
            Err(CondError::NotBool(_))
        ));
    }

    #[test]
    fn syntax_errors_say_where() {
        let syntax = |e: &str| match Condition::parse(e) {
            Err(CondError::Syntax(m)) => m,
            other => panic!("{e}: {other:?}"),
        };
        assert_eq!(
            syntax("input.x +"),
            "syntax error at column 10: mismatched input '<EOF>' expecting a value"
        );
        assert_eq!(
            syntax("1 ++ 2"),
            "syntax error at column 4: extraneous input '+' expecting a value"
        );
        assert!(syntax("input.x ==\n == 1").starts_with("syntax error at line 2, column 2: "));
        assert_eq!(syntax("(a > 1"), "has an unclosed `(`");
        assert_eq!(syntax("a[0)"), "has a `)` that closes nothing");
        assert_eq!(
            syntax("input.x == 'abc"),
            "has a string starting at column 12 that is not closed on its line"
        );
        assert_eq!(
            syntax(r#"input.x == "a\qb""#),
            r"has an invalid escape `\q` at column 14; write `\\` for a backslash"
        );
        assert!(syntax("has(1)").contains("has() macro"));
        assert!(syntax("input.?x").contains("unsupported syntax"));
    }
}
