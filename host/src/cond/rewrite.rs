//! The rewrite that inserts the meters into a parsed tree (see "The budget"
//! in the module docs): around every operand whose size makes work, a call
//! of a meter function, so cel's own interpreter charges the budget as it
//! evaluates and conditions keep cel's exact semantics. Literal `matches`
//! patterns are compiled here, so a bad one is refused on save.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr,
    operators,
};

use super::CondError;
use super::error::truncate;
use super::estimate::steps_outside_bodies;
use super::meter;
use super::pattern::Pattern;

/// Inserts the meters into a parsed tree (see "The budget" in the module
/// docs). Recursive: the tree was checked to be at most
/// [`MAX_EXPR_DEPTH`](super::MAX_EXPR_DEPTH) deep, and this runs on the
/// parsing thread's large stack.
#[derive(Default)]
pub(super) struct Rewrite {
    /// The variables of the macros around the node being rewritten.
    scope: Vec<String>,
    /// The literal `matches` patterns, compiled.
    pub(super) patterns: HashMap<String, Arc<Pattern>>,
    /// The first literal pattern that does not compile.
    pub(super) error: Option<CondError>,
}

/// A new node (meters are not in the source, so they have no position).
fn node(expr: Expr) -> IdedExpr {
    IdedExpr { id: 0, expr }
}

/// A call of the global function `name`.
fn call(name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    node(Expr::Call(CallExpr {
        func_name: name.to_owned(),
        target: None,
        args,
    }))
}

/// A macro's accumulator (`@result`) or another name the parser made up:
/// not a value of the run, and the shapes cel optimises look for it.
pub(super) fn is_internal(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Ident(name) if name.starts_with('@'))
}

/// `a`, `a.b.c`: a name the interpreter resolves in O(1) per segment.
fn is_name(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Ident(_) => true,
        Expr::Select(s) => !s.test && is_name(&s.operand),
        _ => false,
    }
}

impl Rewrite {
    /// `e` with meters inside (not around it: its parent decides that).
    pub(super) fn node(&mut self, e: IdedExpr) -> IdedExpr {
        let IdedExpr { id, expr } = e;
        let expr = match expr {
            Expr::Call(c) => return self.call(id, c),
            Expr::Comprehension(c) => Expr::Comprehension(Box::new(self.comprehension(*c))),
            Expr::List(ListExpr {
                elements,
                optional_indices,
            }) => Expr::List(ListExpr {
                // Each item is copied into the new list.
                elements: self.metered_all(meter::COPY, elements),
                optional_indices,
            }),
            Expr::Map(MapExpr { mut entries }) => {
                for entry in &mut entries {
                    if let EntryExpr::MapEntry(e) = &mut entry.expr {
                        e.key = self.metered(meter::COPY, std::mem::take(&mut e.key));
                        e.value = self.metered(meter::COPY, std::mem::take(&mut e.value));
                    }
                }
                Expr::Map(MapExpr { entries })
            }
            // A name is left whole: the interpreter resolves `input.a.b` as
            // one qualified name. Selecting a field of a computed value is O(1).
            Expr::Select(mut s) if !is_name(&s.operand) => {
                s.operand = Box::new(self.node(*s.operand));
                Expr::Select(s)
            }
            other => other,
        };
        IdedExpr { id, expr }
    }

    /// `e` with meters inside, wrapped in the meter `name` unless reading it
    /// costs nothing (a scalar literal, an internal name).
    fn metered(&mut self, name: &str, e: IdedExpr) -> IdedExpr {
        let e = self.node(e);
        // A name that is no variable is a namespace (`optional.of(x)`) or
        // undeclared: cel must see it as written to resolve it.
        let free = is_internal(&e)
            || (is_name(&e) && !self.is_variable(&e))
            || matches!(
                &e.expr,
                Expr::Literal(
                    LiteralValue::Boolean(_)
                        | LiteralValue::Int(_)
                        | LiteralValue::UInt(_)
                        | LiteralValue::Double(_)
                        | LiteralValue::Null
                )
            );
        if free { e } else { call(name, vec![e]) }
    }

    /// Whether the name `e` starts with a variable: `input`, `steps`,
    /// `run` or a macro's in scope.
    fn is_variable(&self, e: &IdedExpr) -> bool {
        let mut e = e;
        loop {
            match &e.expr {
                Expr::Select(s) => e = &s.operand,
                Expr::Ident(name) => {
                    let name = name.trim_start_matches('.');
                    return ["input", "steps", "run"].contains(&name)
                        || self.scope.iter().any(|v| v == name);
                }
                _ => return true,
            }
        }
    }

    fn metered_all(&mut self, name: &str, list: Vec<IdedExpr>) -> Vec<IdedExpr> {
        list.into_iter().map(|e| self.metered(name, e)).collect()
    }

    fn plain_all(&mut self, list: Vec<IdedExpr>) -> Vec<IdedExpr> {
        list.into_iter().map(|e| self.node(e)).collect()
    }

    fn call(&mut self, id: u64, c: CallExpr) -> IdedExpr {
        let CallExpr {
            func_name,
            target,
            args,
        } = c;
        let name = func_name.as_str();
        let plain_target = |r: &mut Self, t: Option<Box<IdedExpr>>| t.map(|t| Box::new(r.node(*t)));
        let (target, args) = match name {
            // O(1) on their operands: booleans, a branch passed through, a
            // type. The loop steps of `all`/`exists` (`@result && x`) keep
            // the shape cel looks for.
            operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::CONDITIONAL
            | operators::NOT_STRICTLY_FALSE
            | "type"
            | "dyn" => (plain_target(self, target), self.plain_all(args)),
            // O(1) for a list or map; a string's characters are counted.
            "size" => (
                target.map(|t| Box::new(self.metered(meter::TEXT, *t))),
                self.metered_all(meter::TEXT, args),
            ),
            // A list index or a map lookup: the container is not walked.
            operators::INDEX | operators::OPT_INDEX if args.len() == 2 => {
                let mut args = args.into_iter();
                let container = self.node(args.next().expect("two"));
                let index = self.metered(meter::READ, args.next().expect("two"));
                (plain_target(self, target), vec![container, index])
            }
            // `@result + [x]`: the step of `map`/`filter`, appended in place
            // by cel when it keeps this shape; `[x]` copies `x`.
            operators::ADD if args.first().is_some_and(is_internal) => {
                (plain_target(self, target), self.plain_all(args))
            }
            operators::IN if args.len() == 2 => {
                let mut args = args.into_iter();
                let item = self.metered(meter::READ, args.next().expect("two"));
                let container = self.metered(meter::LOOKUP, args.next().expect("two"));
                (plain_target(self, target), vec![item, container])
            }
            "matches" if target.is_none() && args.len() == 2 => {
                let args = self.pattern_args(args);
                return IdedExpr {
                    id,
                    expr: call(meter::MATCHES, args).expr,
                };
            }
            "matches" if args.len() == 1 => {
                let text = *target.expect("a method");
                let args = self.pattern_args(vec![text, args.into_iter().next().expect("one")]);
                return IdedExpr {
                    id,
                    expr: call(meter::MATCHES_METHOD, args).expr,
                };
            }
            // Copies its operands into a new value.
            operators::ADD | "string" | "bytes" => (
                target.map(|t| Box::new(self.metered(meter::COPY, *t))),
                self.metered_all(meter::COPY, args),
            ),
            // Everything else reads its operands: comparisons, arithmetic
            // (whose errors quote the values), string functions,
            // conversions, timestamp and duration functions.
            _ => (
                target.map(|t| Box::new(self.metered(meter::READ, *t))),
                self.metered_all(meter::READ, args),
            ),
        };
        IdedExpr {
            id,
            expr: Expr::Call(CallExpr {
                func_name,
                target,
                args,
            }),
        }
    }

    /// The operands of `matches`, which meters itself; a literal pattern is
    /// compiled now, so a bad one is refused on save.
    fn pattern_args(&mut self, args: Vec<IdedExpr>) -> Vec<IdedExpr> {
        if let Some(Expr::Literal(LiteralValue::String(p))) = args.get(1).map(|a| &a.expr) {
            let p = p.inner();
            if !self.patterns.contains_key(p) {
                match Pattern::compile(p) {
                    Ok(pattern) => {
                        self.patterns.insert(p.to_owned(), Arc::new(pattern));
                    }
                    Err(e) => {
                        self.error.get_or_insert(CondError::Syntax(format!(
                            "the pattern of matches() {}",
                            truncate(&e)
                        )));
                    }
                }
            }
        }
        self.plain_all(args)
    }

    /// A macro: its range metered with the steps of one pass of its body.
    fn comprehension(&mut self, c: ComprehensionExpr) -> ComprehensionExpr {
        let range = self.node(c.iter_range);
        let accu_init = self.node(c.accu_init);
        let depth = self.scope.len();
        self.scope.push(c.iter_var.clone());
        self.scope.extend(c.iter_var2.clone());
        let loop_cond = self.node(c.loop_cond);
        let loop_step = self.node(c.loop_step);
        let result = self.node(c.result);
        self.scope.truncate(depth);
        let body = steps_outside_bodies(&loop_cond) + steps_outside_bodies(&loop_step);
        let body = i64::try_from(body).unwrap_or(i64::MAX);
        ComprehensionExpr {
            iter_range: call(
                meter::RANGE,
                vec![range, node(Expr::Literal(LiteralValue::Int(body.into())))],
            ),
            accu_init,
            result,
            loop_cond,
            loop_step,
            ..c
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cond::Condition;
    use crate::cond::tests::{comparable, eval, eval_unmetered, with_run};

    #[test]
    fn meters_change_no_result() {
        // Shapes cel optimises (map/filter appends, all/exists folds that
        // forgive an error), error messages, and every kind of meter.
        let cases = [
            "[1, 2, 3].map(x, x * 2) == [2, 4, 6]",
            "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]",
            "[1, 2, 3].filter(x, x > 1) == [2, 3]",
            "[1, 'a', 3].all(x, x > 0)",
            "[1, 'a', 3].exists(x, x == 3)",
            "[1, 'a', 0].all(x, x > 0)",
            "[1, 2, 3].exists_one(x, x > 2)",
            "{'a': 1, 'b': 2}.all(k, k in ['a', 'b'])",
            "'a' in {'a': 1} && 1 in [1, 2] && !(3 in [1, 2])",
            "input.list.map(x, [x, x]).map(l, l[0] + l[1]) == [2, 4, 6]",
            "input.list + [4] == [1, 2, 3, 4] && input.x + 'z' == 'yz'",
            "input.list[1] == 2 && {'k': input.n}['k'] == 3 && input['x'] == 'y'",
            "size(input.list) == 3 && input.list.size() == 3 && size('abc') == 3",
            "string(input.n) == '3' && int('4') == 4 && double(input.n) == 3.0",
            "bytes('ab') == b'ab' && string(b'ab') == 'ab' && type(1) == int && dyn(1) == 1",
            "optional.of(input.n).hasValue() && optional.none().orValue(input.n) == 3",
            "[1].all(input, input == 1) && input.n == 3",
            "input.x.startsWith('y') && input.x.endsWith('y') && input.x.contains('y')",
            "input.x.matches('^y$') && matches(input.x, 'y') && !input.x.matches(input.mode)",
            "input.n - 1 == 2 && input.n % 2 == 1 && input.n / 2 == 1 && -input.n == -3",
            "timestamp(run.scheduled_for).getHours('Asia/Shanghai') == 9",
            "duration('1h') > duration('30m') && timestamp(run.scheduled_for) + duration('1h') > timestamp(run.scheduled_for)",
            "has(input.x) && !has(input.nope) && (input.nope > 1 || true)",
            "input.nope > 1 || false",
            "input.list.all(x, x.nope)",
            "input.x > 1",
            "input.x - 1 == 0",
            "[input.list, input].size()",
            "{input.x: input.list}",
            "steps.extract.output.nested.x[1].y && steps.extract.output.tags.exists(t, t == 'b')",
            "1 / 0 == 1 || true",
            "[1, 2][5] == 1",
            "{1: 2, 1: 3}.size() == 1",
            "9223372036854775807 + 1 > 0",
        ];
        for expr in cases {
            let cond = Condition::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
            let metered = with_run(|v| cond.eval(v));
            let plain = with_run(|v| eval_unmetered(&cond, v));
            assert_eq!(comparable(&metered), comparable(&plain), "{expr}");
        }
        assert_eq!(eval(cases[0]), Ok(true));
        assert_eq!(eval(cases[5]), Ok(false));
    }
}
