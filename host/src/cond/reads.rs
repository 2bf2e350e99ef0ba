//! The run's data a condition reads: the parts of `input` and of each step
//! it names ([`Reads`], collected from the tree on parse), and the copy of
//! just those parts out of a run ([`Condition::extract`]), counted against
//! the step budget, for evaluating elsewhere.

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};

use super::estimate::children;
use super::{BYTES_PER_STEP, Budget, CondVars, Condition};

/// The parts of a JSON value a condition reads: the whole of it (`full`),
/// or only some fields of it, each read in part or whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Trie {
    pub(super) full: bool,
    pub(super) fields: std::collections::BTreeMap<String, Trie>,
}

impl Trie {
    fn add(&mut self, path: &[String]) {
        if self.full {
            return;
        }
        match path.split_first() {
            None => {
                self.full = true;
                self.fields.clear();
            }
            Some((field, rest)) => self.fields.entry(field.clone()).or_default().add(rest),
        }
    }
}

/// What a condition reads of the run: of `input`, and of each step (its
/// map of `status` and `output`), by the paths it names. A name used other
/// than through `.field` (compared, iterated, passed to a function, indexed
/// by a computed key) is read whole. Only this is copied out of the run and
/// converted to CEL, so `steps.a.output.rows > 5` costs the same whatever
/// else `a` returned.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Reads {
    pub(super) input: Trie,
    /// Level one: step names.
    pub(super) steps: Trie,
}

/// `(root, path)` when `e` names a part of `input` or `steps`: `input.a.b`,
/// `steps.x.output`, `steps["my-step"].status`.
fn path_of(e: &IdedExpr) -> Option<(&'static str, Vec<String>)> {
    match &e.expr {
        Expr::Ident(name) => match name.trim_start_matches('.') {
            "input" => Some(("input", Vec::new())),
            "steps" => Some(("steps", Vec::new())),
            _ => None,
        },
        Expr::Select(s) if !s.test => {
            let (root, mut path) = path_of(&s.operand)?;
            path.push(s.field.clone());
            Some((root, path))
        }
        Expr::Call(c)
            if c.func_name == operators::INDEX && c.target.is_none() && c.args.len() == 2 =>
        {
            // Only `steps["NAME"]`: for anything else an index may also be
            // a list's, which is read whole.
            let Expr::Literal(LiteralValue::String(name)) = &c.args[1].expr else {
                return None;
            };
            match path_of(&c.args[0])? {
                ("steps", path) if path.is_empty() => {
                    Some(("steps", vec![name.inner().to_owned()]))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Collects the paths `e` reads (recursive: run on the parsing thread,
/// after the depth check). A macro variable named `input` adds paths the
/// real input may not have: harmless, they are only not found.
pub(super) fn collect_reads(e: &IdedExpr, reads: &mut Reads) {
    let mut add = |root: &str, path: &[String]| match root {
        "input" => reads.input.add(path),
        _ => reads.steps.add(path),
    };
    if let Some((root, path)) = path_of(e) {
        return add(root, &path);
    }
    // `has(p.f)` needs only `f` of `p`.
    if let Expr::Select(s) = &e.expr
        && s.test
        && let Some((root, mut path)) = path_of(&s.operand)
    {
        path.push(s.field.clone());
        return add(root, &path);
    }
    let (once, body) = children(e);
    for child in once.into_iter().chain(body) {
        collect_reads(child, reads);
    }
}

/// The run's data a condition reads, copied out of the run (by
/// [`Condition::extract`]) for evaluation elsewhere.
#[derive(Clone, Debug, Default)]
pub struct Extract {
    /// (name, status, output) of the steps it reads, outputs cut to the
    /// parts it reads.
    pub(super) steps: Vec<(String, String, Option<serde_json::Value>)>,
    /// The parts of the input it reads (`null` if none).
    pub(super) input: serde_json::Value,
    pub(super) run_id: String,
    pub(super) scheduled_for: String,
    pub(super) biz_date: String,
    pub(super) trigger: String,
    /// Set when the parts read were too large to copy within the budget:
    /// evaluating stops at once with [`CondError::Budget`](super::CondError::Budget).
    pub(super) over: bool,
}

/// Copies the parts of `v` that `trie` reads, counting the values copied
/// against `left` (`None` once over it). A field read of a list or a scalar
/// is an error naming only the type, so only the type of those is kept.
fn cut(v: &serde_json::Value, trie: &Trie, left: &mut u64) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    if trie.full {
        return copy_counted(v, left);
    }
    *left = left.checked_sub(1)?;
    Some(match v {
        J::Object(fields) => J::Object(
            trie.fields
                .iter()
                .filter_map(|(k, t)| fields.get(k).map(|v| (k, v, t)))
                .map(|(k, v, t)| Some((k.clone(), cut(v, t, left)?)))
                .collect::<Option<_>>()?,
        ),
        J::Array(_) => J::Array(Vec::new()),
        J::String(_) => J::String(String::new()),
        other => other.clone(),
    })
}

/// A copy of `v`, counting its values and text bytes / [`BYTES_PER_STEP`]
/// against `left` (`None` once over it). Recursive: JSON from outside is
/// at most 128 levels deep (serde_json's limit).
fn copy_counted(v: &serde_json::Value, left: &mut u64) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    *left = left.checked_sub(1)?;
    Some(match v {
        J::String(s) => {
            *left = left.checked_sub(s.len() as u64 / BYTES_PER_STEP)?;
            J::String(s.clone())
        }
        J::Array(items) => J::Array(
            items
                .iter()
                .map(|item| copy_counted(item, left))
                .collect::<Option<_>>()?,
        ),
        J::Object(fields) => J::Object(
            fields
                .iter()
                .map(|(k, v)| {
                    *left = left.checked_sub(1 + k.len() as u64 / BYTES_PER_STEP)?;
                    Some((k.clone(), copy_counted(v, left)?))
                })
                .collect::<Option<_>>()?,
        ),
        scalar => scalar.clone(),
    })
}

/// The reason when the data a condition reads exceeds the budget.
pub(super) fn reads_too_large(steps: u64) -> String {
    format!(
        "the run's data it reads (the input and step outputs it names) is more than \
         {steps} steps' worth; read fewer fields or smaller outputs"
    )
}

/// A read of the whole value.
pub(super) static WHOLE: Trie = Trie {
    full: true,
    fields: std::collections::BTreeMap::new(),
};

impl Condition {
    /// Copies the parts of the run's data the condition reads (see
    /// `Reads`), for evaluating it elsewhere with
    /// [`Condition::eval_extract`]. The copy stops at `budget.steps` values
    /// (the evaluation would stop there too), so its cost to the caller is
    /// bounded whatever the run holds.
    pub fn extract(&self, vars: &CondVars<'_>, budget: &Budget) -> Extract {
        let mut left = budget.steps;
        let mut over = false;
        let mut steps = Vec::new();
        for name in &self.steps {
            let Some((name, status, output)) = vars.steps.iter().find(|s| s.0 == name) else {
                continue;
            };
            let read = self.reads.steps.fields.get(*name).unwrap_or(&WHOLE);
            let output_read = if read.full {
                Some(&WHOLE)
            } else {
                read.fields.get("output")
            };
            let output = match (output, output_read) {
                (Some(v), Some(r)) => {
                    let copy = cut(v, r, &mut left);
                    over |= copy.is_none();
                    copy
                }
                _ => None,
            };
            steps.push(((*name).to_owned(), (*status).to_owned(), output));
        }
        let input = if self.uses_input && !over {
            let copy = cut(vars.input, &self.reads.input, &mut left);
            over |= copy.is_none();
            copy.unwrap_or_default()
        } else {
            serde_json::Value::Null
        };
        Extract {
            steps,
            input,
            run_id: vars.run_id.to_owned(),
            scheduled_for: vars.scheduled_for.to_owned(),
            biz_date: vars.biz_date.to_owned(),
            trigger: vars.trigger.to_owned(),
            over,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::cond::tests::eval_unmetered;
    use crate::cond::{Budget, CondError, CondVars, Condition, on_own_stack};

    #[test]
    fn only_the_parts_of_the_run_read_are_converted() {
        let junk: Vec<u32> = (0..2_000_000).collect();
        let output = json!({ "rows": 7, "junk": junk, "list": [1, 2], "s": "x" });
        let steps = [("a", "succeeded", Some(&output))];
        let input = json!({ "k": "v", "junk": junk });
        let vars = CondVars {
            steps: &steps,
            input: &input,
            run_id: "r",
            scheduled_for: "",
            biz_date: "",
            trigger: "manual",
        };
        let eval = |expr: &str| {
            let cond = Condition::parse(expr).unwrap();
            // As the scheduler does: copy out, then evaluate the copy.
            let data = cond.extract(&vars, &Budget::default());
            on_own_stack(|| cond.eval_extract(&data, &Budget::default()))
        };
        assert_eq!(eval("steps.a.output.rows == 7 && input.k == 'v'"), Ok(true));
        assert_eq!(
            eval("has(steps.a.output.rows) && !has(steps.a.output.nope)"),
            Ok(true)
        );
        assert_eq!(eval("steps.a.status == 'succeeded'"), Ok(true));
        assert_eq!(eval(r#"steps["a"].output.list == [1, 2]"#), Ok(true));
        // Errors read as if everything were there.
        let cond = Condition::parse("steps.a.output.list.x == 1").unwrap();
        let data = cond.extract(&vars, &Budget::default());
        let cut = on_own_stack(|| cond.eval_extract(&data, &Budget::default()));
        let whole = eval_unmetered(&cond, &vars);
        assert_eq!(cut, whole);
        for expr in [
            "steps.a.output.nope == 1",
            "steps.a.output.s.x == 1",
            "has(steps.a.output.list.x)",
        ] {
            let cond = Condition::parse(expr).unwrap();
            let data = cond.extract(&vars, &Budget::default());
            let cut = on_own_stack(|| cond.eval_extract(&data, &Budget::default()));
            assert!(matches!(cut, Err(CondError::Eval(_))), "{expr}: {cut:?}");
            assert_eq!(cut, eval_unmetered(&cond, &vars), "{expr}");
        }
        // Reading a large part whole costs its size, and is stopped while
        // being copied out, before anything is converted.
        let cond = Condition::parse("size(steps.a.output.junk) > 0").unwrap();
        let data = cond.extract(&vars, &Budget::default());
        assert!(data.over);
        let Err(CondError::Budget(m)) = cond.eval_extract(&data, &Budget::default()) else {
            panic!("reading 2,000,000 values must be over the budget");
        };
        assert!(m.starts_with("the run's data it reads"), "{m}");
        let direct = on_own_stack(|| cond.eval_here(&vars, &Budget::default()));
        assert_eq!(direct, Err(CondError::Budget(m)));
    }
}
