//! The static estimate of a condition's cost, on save: the steps the meters
//! would charge for node evaluations alone, with list and map literals at
//! their size and anything read from the run as one item. A condition over
//! [`MAX_EVAL_STEPS`](super::MAX_EVAL_STEPS) even so (macros nested over literal lists) is refused
//! with [`CondError::TooCostly`](super::CondError::TooCostly).

use cel::common::ast::{EntryExpr, Expr, IdedExpr, MapExpr, StructExpr, operators};

use super::meter;
use super::rewrite::is_internal;

/// The children of `e` in evaluation terms: those evaluated once per
/// evaluation of `e`, and a macro's body (evaluated once per item).
pub(super) fn children(e: &IdedExpr) -> (Vec<&IdedExpr>, Vec<&IdedExpr>) {
    let mut once = Vec::new();
    let mut body = Vec::new();
    match &e.expr {
        Expr::Call(c) => {
            once.extend(c.target.as_deref());
            once.extend(&c.args);
        }
        Expr::Comprehension(c) => {
            once.extend([&c.iter_range, &c.accu_init, &c.result]);
            body.extend([&c.loop_cond, &c.loop_step]);
        }
        Expr::Select(s) => once.push(&s.operand),
        Expr::List(l) => once.extend(&l.elements),
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            for entry in entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => once.extend([&e.key, &e.value]),
                    EntryExpr::StructField(f) => once.push(&f.value),
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
    (once, body)
}

/// Nodes of `e` evaluated once per evaluation of `e`: all but the bodies of
/// the macros in it (charged by their ranges' meters, once per item).
pub(super) fn steps_outside_bodies(e: &IdedExpr) -> u64 {
    let mut n = 0;
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        n += 1;
        stack.extend(children(e).0);
    }
    n
}

/// The steps the meters would charge for node evaluations alone, with every
/// macro's range as long as [`static_len`] says: what evaluating the
/// condition costs at least when everything it reads from the run is small.
pub(super) fn static_steps(root: &IdedExpr) -> u128 {
    let mut total: u128 = 0;
    let mut stack: Vec<(&IdedExpr, u128)> = vec![(root, 1)];
    while let Some((e, times)) = stack.pop() {
        total = total.saturating_add(times);
        let (once, body) = children(e);
        stack.extend(once.into_iter().map(|c| (c, times)));
        if let Expr::Comprehension(c) = &e.expr {
            let per_item = times.saturating_mul(static_len(&c.iter_range));
            stack.extend(body.into_iter().map(|c| (c, per_item)));
        }
    }
    total
}

/// How many items `e` has when it is a list or map literal, a sum of them, a
/// metered one or a `map`/`filter` over one (the filter at its largest);
/// anything read from the run counts as one.
fn static_len(e: &IdedExpr) -> u128 {
    match &e.expr {
        Expr::List(l) => l.elements.len() as u128,
        Expr::Map(m) => m.entries.len() as u128,
        Expr::Call(c) if meter::ALL.contains(&c.func_name.as_str()) && !c.args.is_empty() => {
            static_len(&c.args[0])
        }
        Expr::Call(c) if c.func_name == operators::ADD && c.args.len() == 2 => {
            static_len(&c.args[0]).saturating_add(static_len(&c.args[1]))
        }
        Expr::Comprehension(c)
            if is_internal(&c.result)
                && matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty()) =>
        {
            static_len(&c.iter_range)
        }
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use crate::cond::tests::{eval, nested_maps};
    use crate::cond::{CondError, Condition, MAX_LEN};

    #[test]
    fn nested_macros_over_literals_are_refused_on_save() {
        for levels in [6, 7, 8] {
            let expr = nested_maps(levels);
            let Err(CondError::TooCostly(m)) = Condition::parse(&expr) else {
                panic!("{levels} levels ({} bytes) must be refused", expr.len());
            };
            assert!(
                m.starts_with("would take about ") && m.contains("at most 1000000"),
                "{m}"
            );
        }
        assert!(nested_maps(8).len() < MAX_LEN);
        assert_eq!(
            Condition::parse(&nested_maps(7)).unwrap_err().to_string(),
            "would take about 83333331 steps evaluated over its literal lists (nested macros \
             multiply); a condition may take at most 1000000; nest fewer macros or use shorter lists"
        );
        // `all` and `exists` count as if they went through every item.
        let exists = "[0,1,2,3,4,5,6,7,8,9].exists(a, [0,1,2,3,4,5,6,7,8,9].exists(b, \
                      [0,1,2,3,4,5,6,7,8,9].exists(c, [0,1,2,3,4,5,6,7,8,9].exists(d, \
                      [0,1,2,3,4,5,6,7,8,9].exists(e, [0,1,2,3,4,5,6,7,8,9].exists(f, a == 9))))))";
        assert!(matches!(
            Condition::parse(exists),
            Err(CondError::TooCostly(_))
        ));
        // A map's result as another macro's range keeps its size.
        let list = format!("{:?}", (0..25).collect::<Vec<_>>());
        let chained = format!(
            "{list}.map(x, x).all(a, {list}.map(x, x).all(b, {list}.map(x, x).all(c, \
             {list}.map(x, x).all(d, true))))"
        );
        assert!(matches!(
            Condition::parse(&chained),
            Err(CondError::TooCostly(_))
        ));
        // Ordinary conditions, and what is read from the run, pass.
        for ok in [
            nested_maps(3),
            "input.l.all(x, input.l.all(y, input.l.all(z, x + y + z >= 0)))".to_owned(),
            "steps.extract.output.tags.exists(t, t in ['a', 'b', 'c'])".to_owned(),
            "[1, 2, 3].map(x, x * 2).filter(x, x > 2).size() == 2".to_owned(),
        ] {
            assert!(Condition::parse(&ok).is_ok(), "{ok}");
        }
        assert_eq!(eval(&nested_maps(3)), Ok(true));
    }
}
