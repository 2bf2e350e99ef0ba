//! The fixtures the tests of every part of `cond` share (a run, evaluation
//! under a budget, the tree evaluated without meters), and the tests of the
//! whole: conditions parsed and evaluated end to end, random text, the
//! parse cache. Each part's own tests sit beside it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value as J, json};

use super::reads::{Reads, WHOLE};
use super::*;

/// A run with `extract` succeeded (`rows`, `ratio`, `name`, `tags`, …),
/// `empty` succeeded without output, `full` skipped, `my-step` failed and
/// `load-users` succeeded with `files`.
pub(super) fn with_run<T>(f: impl FnOnce(&CondVars<'_>) -> T) -> T {
    let extract = json!({"rows": 900000, "ratio": 0.25, "name": "orders-2026", "tags": ["a", "b"],
                         "big": 18446744073709551615u64, "nested": {"x": [1, {"y": true}]}});
    let input = json!({"x": "y", "n": 3, "list": [1, 2, 3], "mode": "full", "region": "eu"});
    let users = json!({"files": ["a.json", "b.csv"]});
    let steps = [
        ("extract", "succeeded", Some(&extract)),
        ("empty", "succeeded", None),
        ("full", "skipped", None),
        ("my-step", "failed", None),
        ("load-users", "succeeded", Some(&users)),
    ];
    f(&CondVars {
        steps: &steps,
        input: &input,
        run_id: "r-1",
        scheduled_for: "2026-03-01T01:30:00Z",
        biz_date: "2026-02-28",
        trigger: "cron",
    })
}

pub(super) fn eval(expr: &str) -> Result<bool, CondError> {
    let cond = Condition::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    with_run(|vars| cond.eval(vars))
}

fn eval_with_rows(rows: J, expr: &str) -> Result<bool, CondError> {
    let output = json!({ "rows": rows });
    let steps = [("extract", "succeeded", Some(&output))];
    let vars = CondVars {
        steps: &steps,
        input: &J::Null,
        run_id: "r",
        scheduled_for: "",
        biz_date: "",
        trigger: "manual",
    };
    Condition::parse(expr).unwrap().eval(&vars)
}

/// An outcome, with a message quoting a map cut where the map starts
/// (its entries print in hash order, which differs between two maps).
pub(super) fn comparable(r: &Result<bool, CondError>) -> Result<bool, CondError> {
    match r {
        Err(CondError::Eval(m)) => Err(CondError::Eval(
            m.find("Map(").map_or(m.clone(), |at| m[..at].to_owned()),
        )),
        other => other.clone(),
    }
}

/// Evaluates the tree as parsed, without meters, by cel alone.
pub(super) fn eval_unmetered(cond: &Condition, vars: &CondVars<'_>) -> Result<bool, CondError> {
    on_own_stack(|| {
        let program = ENV.compile(cond.source()).unwrap();
        // Everything converted, as before the reads were cut.
        let whole = Reads {
            input: WHOLE.clone(),
            steps: WHOLE.clone(),
        };
        cond.execute(vars, program.expression(), &whole)
    })
}

/// Evaluates `expr` against `input` under `budget`; also says how long it took.
pub(super) fn eval_input(
    expr: &str,
    input: &J,
    budget: Budget,
) -> (Result<bool, CondError>, std::time::Duration) {
    let cond = Condition::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let vars = CondVars {
        steps: &[],
        input,
        run_id: "r",
        scheduled_for: "",
        biz_date: "",
        trigger: "manual",
    };
    let started = Instant::now();
    let result = on_own_stack(|| cond.eval_here(&vars, &budget));
    (result, started.elapsed())
}

/// The default budget without its deadline, so a loaded machine cannot
/// change which limit a test sees first.
pub(super) fn no_deadline() -> Budget {
    Budget {
        deadline: Duration::from_secs(600),
        ..Budget::default()
    }
}

pub(super) fn budget_error(result: &Result<bool, CondError>) -> &str {
    match result {
        Err(CondError::Budget(m)) => m,
        other => panic!("expected the budget to stop it: {other:?}"),
    }
}

/// `levels` nested `.map` over a ten-item list literal, as in the probe
/// that took 15 s and +580 MB at seven levels.
pub(super) fn nested_maps(levels: usize) -> String {
    let vars = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut expr = "a".to_owned();
    for v in vars[..levels].iter().rev() {
        expr = format!("[0,1,2,3,4,5,6,7,8,9].map({v},{expr})");
    }
    format!("{expr}.size() > 0")
}

/// A random, mostly valid, expression nested up to `depth` levels.
fn random_expr(rng: &mut StdRng, depth: usize) -> String {
    const LEAVES: &[&str] = &[
        "1",
        "2.5",
        "3u",
        "'s'",
        "true",
        "null",
        "input.n",
        "input.list",
        "input.x",
        "steps.extract.output.rows",
        "steps.extract.output",
        "run.trigger",
        "x",
        "[]",
        "{}",
    ];
    const OPS: &[&str] = &[
        "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in",
    ];
    if depth == 0 || rng.random_bool(0.1) {
        return LEAVES[rng.random_range(0..LEAVES.len())].to_owned();
    }
    let kind = rng.random_range(0..11);
    let op = OPS[rng.random_range(0..OPS.len())];
    // Each operand is deep only sometimes, so the size stays polynomial.
    let sub = |rng: &mut StdRng| {
        let depth = if rng.random_bool(0.4) {
            depth - 1
        } else {
            (depth - 1).min(2)
        };
        random_expr(rng, depth)
    };
    match kind {
        0 => format!("({})", sub(rng)),
        1 => format!("{} {op} {}", sub(rng), sub(rng)),
        2 => format!("[{}, {}]", sub(rng), sub(rng)),
        3 => format!("{{{}: {}}}", sub(rng), sub(rng)),
        4 => format!("{}.rows", sub(rng)),
        5 => format!("{}[{}]", sub(rng), sub(rng)),
        6 => format!("{} ? {} : {}", sub(rng), sub(rng), sub(rng)),
        7 => format!("!{}", sub(rng)),
        8 => format!("-{}", sub(rng)),
        9 => format!("size({})", sub(rng)),
        _ => format!("{}.exists(x, {})", sub(rng), sub(rng)),
    }
}

#[test]
fn spec_example_conditions_pick_one_side() {
    let full = "steps.extract.output.rows > 800000";
    let incremental = "steps.extract.output.rows <= 800000";
    for (rows, big) in [
        (json!(900000), true),
        (json!(800000), false),
        (json!(5), false),
    ] {
        assert_eq!(eval_with_rows(rows.clone(), full), Ok(big), "{rows}");
        assert_eq!(
            eval_with_rows(rows.clone(), incremental),
            Ok(!big),
            "{rows}"
        );
    }
    // A whole number written as a float is a double; comparing still works.
    assert_eq!(eval_with_rows(json!(900000.0), full), Ok(true));
}

#[test]
fn int_and_double_compare_with_each_other() {
    assert_eq!(eval("steps.extract.output.ratio > 0"), Ok(true));
    assert_eq!(eval("steps.extract.output.rows > 0.5"), Ok(true));
    assert_eq!(eval("steps.extract.output.rows == 900000.0"), Ok(true));
    assert_eq!(
        eval("steps.extract.output.big > 1"),
        Ok(true),
        "uint vs int"
    );
    assert_eq!(eval("double(steps.extract.output.rows) > 0.5"), Ok(true));
    assert_eq!(eval("int(steps.extract.output.ratio) == 0"), Ok(true));
}

#[test]
fn status_input_and_run_are_readable() {
    assert_eq!(eval(r#"steps.extract.status == "succeeded""#), Ok(true));
    assert_eq!(eval("steps.full.status == 'skipped'"), Ok(true));
    assert_eq!(eval(r#"steps["my-step"].status == "failed""#), Ok(true));
    assert_eq!(eval("steps.empty.output == null"), Ok(true));
    assert_eq!(eval(r#"input.x == "y""#), Ok(true));
    assert_eq!(eval("input.n + 1 == 4 && 2 in input.list"), Ok(true));
    assert_eq!(eval(r#"run.trigger == "cron""#), Ok(true));
    assert_eq!(
        eval("run.id == 'r-1' && run.biz_date == '2026-02-28'"),
        Ok(true)
    );
    assert_eq!(
        eval("timestamp(run.scheduled_for) > timestamp('2026-01-01T00:00:00Z')"),
        Ok(true)
    );
    assert_eq!(eval("steps.extract.output.nested.x[1].y"), Ok(true));
}

#[test]
fn documented_examples_hold() {
    let docs = include_str!("../../../docs/TASKS.md");
    let section = &docs[docs.find("## Conditions (`when`)").unwrap()..];
    let block = section.split("```").nth(3).expect("the examples block");
    let mut seen = 0;
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        seen += 1;
        let line = line.replace("steps.a.", "steps.empty.");
        assert!(eval(&line).is_ok(), "{line}: {:?}", eval(&line));
    }
    assert!(seen >= 6, "{block}");
}

#[test]
fn has_tests_for_a_field() {
    assert_eq!(eval("has(steps.extract.output.rows)"), Ok(true));
    assert_eq!(eval("has(steps.extract.output.missing)"), Ok(false));
    assert_eq!(
        eval("steps.empty.output != null && has(steps.empty.output.rows)"),
        Ok(false)
    );
    let Err(CondError::Eval(m)) = eval("has(steps.empty.output.rows)") else {
        panic!("a field of null is an error");
    };
    assert!(m.contains("the value is null"), "{m}");
}

#[test]
fn string_functions_and_macros_work() {
    assert_eq!(
        eval("steps.extract.output.name.startsWith('orders')"),
        Ok(true)
    );
    assert_eq!(eval("steps.extract.output.name.endsWith('2026')"), Ok(true));
    assert_eq!(eval("steps.extract.output.name.contains('s-2')"), Ok(true));
    assert_eq!(
        eval(r"steps.extract.output.name.matches('^o.*\\d{4}$')"),
        Ok(true)
    );
    assert_eq!(eval("size(steps.extract.output.name) == 11"), Ok(true));
    assert_eq!(
        eval("steps.extract.output.tags.exists(t, t == 'b')"),
        Ok(true)
    );
    assert_eq!(eval("input.list.all(i, i > 0)"), Ok(true));
    assert_eq!(eval("input.list.filter(i, i > 1).size() == 2"), Ok(true));
    assert_eq!(eval("!!!!true && !!!false"), Ok(true));
}

#[test]
fn missing_field_or_wrong_type_is_an_eval_error() {
    let Err(CondError::Eval(m)) = eval("steps.extract.output.nope > 1") else {
        panic!("missing field must fail");
    };
    assert_eq!(
        m,
        "No such key: nope; test for a field that may be absent with has(x.field)"
    );
    let Err(CondError::Eval(m)) = eval("steps.extract.output.name > 1") else {
        panic!("string > int must fail");
    };
    assert!(
        m.starts_with("found no matching overload for '_>_' applied to '(string, int)'"),
        "{m}"
    );
    let Err(CondError::Eval(m)) = eval("nope == 1") else {
        panic!("unknown variable must fail");
    };
    assert!(m.contains("`steps`, `input` and `run`"), "{m}");
    let Err(CondError::Eval(m)) = eval("steps.gone.status == 'x'") else {
        panic!("a step not in the run must fail");
    };
    assert!(m.starts_with("No such key: gone"), "{m}");
    assert!(matches!(eval("input.n / 0 == 1"), Err(CondError::Eval(_))));
    assert_eq!(
        eval("steps.extract.output.nope > 1")
            .unwrap_err()
            .to_string(),
        "evaluation failed: No such key: nope; test for a field that may be absent with has(x.field)"
    );
}

#[test]
fn non_bool_result_is_not_bool() {
    let cases = [
        ("steps.extract.output.rows", "the int 900000"),
        ("steps.extract.output.ratio", "the double 0.25"),
        ("input.x", "the string \"y\""),
        ("steps.empty.output", "null"),
        ("input.list", "a list of 3 items"),
        ("input", "a map of 5 entries"),
        ("----1", "the int 1"),
    ];
    for (expr, what) in cases {
        assert_eq!(
            eval(expr),
            Err(CondError::NotBool(what.to_owned())),
            "{expr}"
        );
    }
    assert_eq!(
        CondError::NotBool("the int 1".into()).to_string(),
        "evaluated to the int 1, not a bool"
    );
}

#[test]
fn parse_and_eval_do_not_use_the_callers_stack() {
    // 32 bracket levels need ~5.5 MiB in a debug build; run from a
    // 256 KiB thread to show the work happens on a stack of its own.
    let expr = format!(
        "{}steps.extract.output.rows > 1{}",
        "(".repeat(32),
        ")".repeat(32)
    );
    let deep_chain = format!("steps.extract.output.rows{} > 0", " + 1".repeat(55));
    let result = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let a = with_run(|v| Condition::parse(&expr).unwrap().eval(v));
            let b = with_run(|v| Condition::parse(&deep_chain).unwrap().eval(v));
            (a, b)
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(result, (Ok(true), Ok(true)));
}

#[test]
fn random_text_never_crashes() {
    const ROUNDS: usize = 1000;
    const PIECES: &[&str] = &[
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "!",
        "-",
        "+",
        "*",
        "/",
        "%",
        ".",
        ",",
        ":",
        "?",
        "<",
        ">=",
        "==",
        "&&",
        "||",
        " in ",
        "'",
        "\"",
        "\\",
        "r",
        "b",
        "'''",
        "\"\"\"",
        "1",
        "0x1",
        "2.5e3",
        "3u",
        "true",
        "null",
        "steps",
        "steps.extract",
        ".output",
        ".rows",
        "input",
        "run",
        "size(",
        "has(",
        ".exists(x, ",
        ".map(x, ",
        "x",
        " ",
        "\n",
        "//",
        "`",
        "é",
        "\0",
    ];
    let mut rng = StdRng::seed_from_u64(0xC0D1);
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for round in 0..ROUNDS {
        let mut text = if round % 2 == 0 {
            // Runs of one piece make deep nesting and long chains likely.
            let target = rng.random_range(0..=MAX_LEN + 8);
            let mut text = String::new();
            while text.len() < target {
                let piece = PIECES[rng.random_range(0..PIECES.len())];
                let most = if rng.random_bool(0.2) { 60 } else { 3 };
                for _ in 0..rng.random_range(1..=most) {
                    text.push_str(piece);
                }
            }
            text
        } else {
            let depth = rng.random_range(1..80);
            random_expr(&mut rng, depth)
        };
        // Mutate some: a dropped or inserted piece breaks the structure.
        if round % 5 == 1 && !text.is_empty() {
            let mut at = rng.random_range(0..text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(at, PIECES[rng.random_range(0..PIECES.len())]);
        }
        let outcome = match Condition::parse(&text) {
            Ok(cond) => {
                let metered = with_run(|v| cond.eval(v));
                // The meters change nothing but the cost: the tree as
                // parsed, run by cel alone, gives the same answer.
                if !matches!(metered, Err(CondError::Budget(_))) {
                    let plain = with_run(|v| eval_unmetered(&cond, v));
                    assert_eq!(comparable(&metered), comparable(&plain), "{text}");
                }
                match metered {
                    Ok(_) => "bool",
                    Err(CondError::NotBool(_)) => "not bool",
                    Err(CondError::Eval(_)) => "eval error",
                    Err(CondError::Budget(_)) => "budget",
                    Err(e) => panic!("{text}: eval gave {e:?}"),
                }
            }
            Err(CondError::TooCostly(_)) => "too costly",
            Err(CondError::Internal(e)) => panic!("{text}: {e}"),
            Err(CondError::TooDeep(_)) => "too deep",
            Err(CondError::TooLong { .. }) => "too long",
            Err(_) => "syntax",
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    println!("{outcomes:?}");
    for outcome in ["bool", "eval error", "too deep", "syntax"] {
        assert!(
            outcomes.contains_key(outcome),
            "{outcome} never happened: {outcomes:?}"
        );
    }
}

#[test]
fn parsed_conditions_are_remembered_within_a_bound() {
    let first = Condition::parse_cached("input.n == 3").unwrap();
    let again = Condition::parse_cached("input.n == 3").unwrap();
    assert!(Arc::ptr_eq(&first.expr, &again.expr), "parsed once");
    assert!(Condition::parse_cached("input.n ==").is_err());
    let mut cache = Parsed::default();
    for i in 0..PARSE_CACHE + 10 {
        let text = format!("input.n == {i}");
        cache.insert(&text, Condition::parse(&text).unwrap());
    }
    assert_eq!(cache.by_text.len(), PARSE_CACHE);
    assert!(cache.get("input.n == 0").is_none());
    assert!(
        cache
            .get(&format!("input.n == {}", PARSE_CACHE + 9))
            .is_some()
    );
}

#[test]
fn condition_is_clone_send_and_sync() {
    fn check<T: Clone + Send + Sync + fmt::Debug>() {}
    check::<Condition>();
    let c = Condition::parse("input.x == 'y'").unwrap();
    assert_eq!(c.clone().source(), "input.x == 'y'");
    assert!(format!("{c:?}").contains("input.x"));
}
