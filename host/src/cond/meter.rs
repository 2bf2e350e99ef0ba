//! The meters at run time: one evaluation's [`Budget`] left, held by the
//! thread evaluating it, and the meter functions the rewrite inserts, which
//! weigh the value passing through them, charge it and pass it on
//! unchanged. Over budget, a meter unwinds out of the interpreter at once
//! with the reason ([`Stop`]), so no error handling inside CEL can swallow
//! the stop.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::resume_unwind;
use std::sync::Arc;
use std::time::Instant;

use cel::ExecutionError;
use cel::common::types::{CelBytes, CelInt, CelList, CelMap, CelMapKey, CelOptional, CelString};
use cel::common::value::{CowVal, Val};

use super::pattern::Pattern;
use super::{BYTES_PER_STEP, Budget, VALUE_BYTES};

/// Wall time is checked every this many meter calls (`Instant::now` is not
/// free; a meter call between two checks is bounded by the step budget).
const CLOCK_EVERY: u32 = 32;
/// Patterns computed at run time kept compiled during one evaluation.
const MAX_COMPUTED_PATTERNS: usize = 16;
/// Steps charged per NFA state to compile a pattern at run time.
const COMPILE_STEPS_PER_STATE: u64 = 4;

// Names of the meter functions the rewrite inserts. They start with `@`,
// which CEL source cannot write, so no condition can call or shadow them.
/// Charges reading its argument (compare, search, convert).
pub(super) const READ: &str = "@ax_read";
/// Charges reading and copying its argument (`+`, list and map items).
pub(super) const COPY: &str = "@ax_copy";
/// The right side of `in`: a map is a hash lookup, a list is read.
pub(super) const LOOKUP: &str = "@ax_lookup";
/// The argument of `size()`: a string's text is walked, nothing else.
pub(super) const TEXT: &str = "@ax_text";
/// A macro's range, with the steps of one pass of its body.
pub(super) const RANGE: &str = "@ax_range";
/// `matches(text, pattern)` written as a function.
pub(super) const MATCHES: &str = "@ax_matches";
/// `text.matches(pattern)`, the same with a method's error messages.
pub(super) const MATCHES_METHOD: &str = "@ax_matches_method";
/// Every meter, for the static estimate to see through them.
pub(super) const ALL: [&str; 5] = [READ, COPY, LOOKUP, TEXT, RANGE];

/// Why an evaluation stopped; the payload it unwinds with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Steps,
    Bytes,
    Time,
}

impl Stop {
    pub(super) fn reason(self, budget: &Budget) -> String {
        match self {
            Stop::Steps => format!(
                "more than {} steps (a macro over a large list, nested macros, or long \
                 values compared or searched)",
                budget.steps
            ),
            Stop::Bytes => format!(
                "it built more than {} MiB of values",
                budget.bytes.div_ceil(1 << 20)
            ),
            Stop::Time => format!("it ran longer than {:?}", budget.deadline),
        }
    }
}

/// One evaluation's budget left, held by the thread evaluating it.
pub(super) struct Meter {
    /// The budget's steps.
    pub(super) limit: u64,
    pub(super) steps_left: u64,
    pub(super) bytes_left: u64,
    deadline: Instant,
    /// Meter calls since the clock was last read.
    calls: u32,
    /// Compiled patterns: the condition's literal ones, then any computed
    /// during this evaluation.
    patterns: Arc<HashMap<String, Arc<Pattern>>>,
    computed: HashMap<String, Arc<Pattern>>,
}

thread_local! {
    /// The budget of the evaluation running on this thread, if any. The
    /// meters are plain functions (cel's overloads carry no state), so they
    /// find it here.
    static METER: RefCell<Option<Meter>> = const { RefCell::new(None) };
}

/// Installs a meter on this thread for as long as it lives (also when the
/// evaluation unwinds).
pub(super) struct Installed;

impl Installed {
    pub(super) fn new(meter: Meter) -> Self {
        METER.with_borrow_mut(|m| *m = Some(meter));
        Installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        METER.with_borrow_mut(|m| *m = None);
    }
}

/// Charges this thread's meter with `f`; over budget, unwinds out of the
/// interpreter with the [`Stop`]. Without a meter (never the case in an
/// evaluation) it charges nothing.
pub(super) fn charge<T: Default>(f: impl FnOnce(&mut Meter) -> Result<T, Stop>) -> T {
    let outcome = METER.with_borrow_mut(|m| m.as_mut().map(f));
    match outcome {
        Some(Ok(t)) => t,
        // Unwinding skips the panic hook: this is not a bug to report.
        Some(Err(stop)) => resume_unwind(Box::new(stop)),
        None => T::default(),
    }
}

/// What a value weighs: its values (a scalar, a string, a list, a map entry
/// each count one) and the bytes of its text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Weight {
    values: u64,
    text: u64,
}

impl Weight {
    /// Steps to read (compare, search, clone) it.
    fn steps(self) -> u64 {
        self.values.saturating_add(self.text / BYTES_PER_STEP)
    }

    /// Estimated heap bytes of a copy.
    fn bytes(self) -> u64 {
        self.values
            .saturating_mul(VALUE_BYTES)
            .saturating_add(self.text)
    }
}

/// Weighs `v`, stopping once it weighs more than `cap` in steps or `bytes`
/// (so weighing a huge value costs no more than the budget left).
fn weigh(v: &dyn Val, cap_steps: u64, cap_bytes: u64) -> Weight {
    let mut w = Weight::default();
    // Allocated only for a list or map: most values met are scalars.
    let mut stack: Vec<&dyn Val> = Vec::new();
    let mut next = Some(v);
    while let Some(v) = next.take().or_else(|| stack.pop()) {
        w.values += 1;
        if let Some(s) = v.downcast_ref::<CelString>() {
            w.text += s.inner().len() as u64;
        } else if let Some(b) = v.downcast_ref::<CelBytes>() {
            w.text += b.inner().len() as u64;
        } else if let Some(l) = v.downcast_ref::<CelList>() {
            stack.extend(l.inner().iter().map(|item| item.as_ref()));
        } else if let Some(m) = v.downcast_ref::<CelMap>() {
            for (key, value) in m.inner() {
                w.values += 1;
                if let CelMapKey::String(s) = key {
                    w.text += s.inner().len() as u64;
                }
                stack.push(value.as_ref());
            }
        } else if let Some(inner) = v.downcast_ref::<CelOptional>().and_then(|o| o.inner()) {
            stack.push(inner);
        }
        if w.steps() > cap_steps || w.bytes() > cap_bytes {
            break;
        }
    }
    w
}

impl Meter {
    pub(super) fn new(budget: &Budget, patterns: Arc<HashMap<String, Arc<Pattern>>>) -> Self {
        Self {
            limit: budget.steps,
            steps_left: budget.steps,
            bytes_left: budget.bytes,
            deadline: Instant::now() + budget.deadline,
            calls: 0,
            patterns,
            computed: HashMap::new(),
        }
    }

    /// Takes `steps`; also reads the clock now and then.
    pub(super) fn spend(&mut self, steps: u64) -> Result<(), Stop> {
        self.steps_left = self.steps_left.checked_sub(steps).ok_or(Stop::Steps)?;
        self.calls += 1;
        if self.calls >= CLOCK_EVERY {
            self.calls = 0;
            if Instant::now() > self.deadline {
                return Err(Stop::Time);
            }
        }
        Ok(())
    }

    /// Takes `bytes` of values built.
    pub(super) fn build(&mut self, bytes: u64) -> Result<(), Stop> {
        self.bytes_left = self.bytes_left.checked_sub(bytes).ok_or(Stop::Bytes)?;
        Ok(())
    }

    /// Charges reading `v`.
    fn read(&mut self, v: &dyn Val) -> Result<Weight, Stop> {
        let w = weigh(v, self.steps_left, u64::MAX);
        self.spend(1 + w.steps())?;
        Ok(w)
    }

    /// Charges reading and copying `v`.
    fn copy(&mut self, v: &dyn Val) -> Result<(), Stop> {
        let w = weigh(v, self.steps_left, self.bytes_left);
        self.spend(1 + w.steps())?;
        self.build(w.bytes())
    }

    /// The compiled `pattern`, compiling (and charging) it if new.
    pub(super) fn pattern(&mut self, pattern: &str) -> Result<Result<Arc<Pattern>, String>, Stop> {
        if let Some(p) = self.patterns.get(pattern).or(self.computed.get(pattern)) {
            return Ok(Ok(Arc::clone(p)));
        }
        // Compiling costs about as much as the NFA's size, which the
        // compiler's own limit bounds; charged once it is known.
        let compiled = Pattern::compile(pattern).map(Arc::new);
        if let Ok(p) = &compiled {
            self.spend(1 + COMPILE_STEPS_PER_STATE.saturating_mul(p.states))?;
            // Kept for this evaluation, a few of them: many distinct
            // patterns are each compiled (and charged) again instead.
            if self.computed.len() < MAX_COMPUTED_PATTERNS {
                self.build(p.bytes)?;
                self.computed.insert(pattern.to_owned(), Arc::clone(p));
            }
        }
        Ok(compiled)
    }
}

/// Takes the single argument a meter is called with.
fn only<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    args.into_iter()
        .next()
        .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))
}

/// `@ax_read(x)`: charges reading `x`, gives `x`.
pub(super) fn meter_read<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = only(args)?;
    charge(|m| m.read(v.as_ref()).map(|_| ()));
    Ok(v)
}

/// `@ax_copy(x)`: charges reading and copying `x`, gives `x`.
pub(super) fn meter_copy<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = only(args)?;
    charge(|m| m.copy(v.as_ref()));
    Ok(v)
}

/// `@ax_lookup(c)`: the right side of `in`; a map is a hash lookup, anything
/// else is read.
pub(super) fn meter_lookup<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = only(args)?;
    if v.downcast_ref::<CelMap>().is_some() {
        charge(|m| m.spend(1));
    } else {
        charge(|m| m.read(v.as_ref()).map(|_| ()));
    }
    Ok(v)
}

/// `@ax_text(x)`: the argument of `size()`, which counts a string's
/// characters and reads nothing else.
pub(super) fn meter_text<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = only(args)?;
    let text = v.downcast_ref::<CelString>().map_or(0, |s| s.inner().len());
    charge(|m| m.spend(1 + text as u64 / BYTES_PER_STEP));
    Ok(v)
}

/// `@ax_range(r, body)`: a macro's range: charges reading `r` (each item is
/// cloned in turn) and `body` steps per item, before the first one.
pub(super) fn meter_range<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut args = args.into_iter();
    let (Some(range), Some(body)) = (args.next(), args.next()) else {
        return Err(ExecutionError::invalid_argument_count(2, 0));
    };
    let body = body
        .downcast_ref::<CelInt>()
        .map_or(0, |b| u64::try_from(*b.inner()).unwrap_or(0));
    let items = if let Some(l) = range.downcast_ref::<CelList>() {
        l.inner().len()
    } else if let Some(m) = range.downcast_ref::<CelMap>() {
        m.inner().len()
    } else {
        0
    };
    charge(|m| {
        m.read(range.as_ref())?;
        m.spend((items as u64).saturating_mul(body))?;
        // However small the steps, a long loop reads the clock.
        if Instant::now() > m.deadline {
            return Err(Stop::Time);
        }
        Ok(())
    });
    Ok(range)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use crate::cond::tests::{budget_error, eval_input, no_deadline};
    use crate::cond::{Budget, CondError};

    #[test]
    fn cubic_macros_over_a_large_input_stop_quickly() {
        let cubic = "input.l.all(x, input.l.all(y, input.l.all(z, x + y + z >= 0)))";
        for n in [150, 1000] {
            let input = json!({ "l": (0..n).collect::<Vec<_>>() });
            let (result, took) = eval_input(cubic, &input, no_deadline());
            assert!(
                budget_error(&result).starts_with("more than 1000000 steps"),
                "{result:?}"
            );
            // 1,000 items would take ~13 minutes unbounded (150: ~1.6 s).
            assert!(took < Duration::from_secs(10), "{n} items: {took:?}");
        }
        // Small inputs still work.
        let input = json!({ "l": [1, 2, 3] });
        assert_eq!(eval_input(cubic, &input, Budget::default()).0, Ok(true));
        // The step ends with this text after `condition `.
        assert_eq!(
            CondError::Budget("x".into()).to_string(),
            "exceeded its budget: x"
        );
    }

    #[test]
    fn values_built_are_bounded() {
        let budget = no_deadline();
        // A string doubled by each `map` of a chain.
        let doubling = format!("[input.s]{}.size() > 0", ".map(s, s + s)".repeat(20));
        let input = json!({ "s": "x".repeat(1 << 10) });
        let (result, _) = eval_input(&doubling, &input, budget);
        assert_eq!(budget_error(&result), "it built more than 32 MiB of values");
        // A copy of the list per item: n² values.
        let square = "input.l.map(x, input.l).size() > 0";
        let input = json!({ "l": (0..1000).collect::<Vec<_>>() });
        let (result, _) = eval_input(square, &input, budget);
        assert_eq!(budget_error(&result), "it built more than 32 MiB of values");
        // Nested lists in the input are weighed whole, with their text.
        let nested = "input.l.all(x, [x] == [x])";
        let row = json!([["a".repeat(1000)], [["b"], ["c".repeat(1000)]]]);
        let input = json!({ "l": vec![row; 5000] });
        let (result, _) = eval_input(nested, &input, budget);
        assert!(budget_error(&result).starts_with("more than"), "{result:?}");
        // A smaller budget stops sooner; a larger one lets it finish.
        let input = json!({ "l": (0..100).collect::<Vec<_>>() });
        let tight = Budget {
            bytes: 1 << 16,
            ..budget
        };
        assert!(eval_input(square, &input, tight).0.is_err());
        assert_eq!(eval_input(square, &input, budget).0, Ok(true));
    }

    #[test]
    fn maps_feeding_macros_sizes_and_errors_cannot_escape_the_budget() {
        let budget = no_deadline();
        let input = json!({ "l": (0..400).collect::<Vec<_>>(), "big": "y".repeat(1 << 20) });
        for expr in [
            // `.map` producing the ranges of another macro.
            "input.l.map(x, input.l).all(y, y.all(z, y.all(w, true)))",
            // A long string compared over and over.
            "input.l.all(x, input.big == input.big + 'z' || true)",
            "input.l.all(x, input.big.contains('z') || x >= 0)",
            // The budget running out where an error would be swallowed:
            // `error || true` is true in CEL, a stop is not.
            "input.l.all(x, input.l.all(y, input.l.all(z, z >= 0))) || true",
            "input.l.exists(x, input.l.exists(y, input.l.exists(z, z < 0)) || x < 0) || true",
            // `size()` reads nothing, but building what it measures does.
            "input.l.map(x, [input.l, input.l]).size() > 0",
        ] {
            let (result, took) = eval_input(expr, &input, budget);
            budget_error(&result);
            assert!(took < Duration::from_secs(10), "{expr}: {took:?}");
        }
        // `size()` of a string counts its characters.
        let (result, _) = eval_input(
            "input.l.all(x, input.l.all(y, size(input.big) > 0))",
            &input,
            budget,
        );
        budget_error(&result);
        // Reading a large value without walking it costs little.
        for cheap in [
            "size(input.big) > 0 && size(input.l) == 400",
            "input.l[399] == 399 && 'y' in {'y': 1}",
            "input.l.exists(x, x == 3)",
        ] {
            assert_eq!(eval_input(cheap, &input, budget).0, Ok(true), "{cheap}");
        }
    }

    #[test]
    fn the_deadline_stops_an_evaluation_in_progress() {
        let input = json!({ "l": (0..150).collect::<Vec<_>>() });
        let expr = "input.l.all(x, input.l.all(y, x + y >= 0))";
        let now = Budget {
            deadline: Duration::ZERO,
            ..Budget::default()
        };
        let (result, _) = eval_input(expr, &input, now);
        assert_eq!(budget_error(&result), "it ran longer than 0ns");
        assert_eq!(eval_input(expr, &input, Budget::default()).0, Ok(true));
    }
}
