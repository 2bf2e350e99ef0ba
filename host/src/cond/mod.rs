//! `when` conditions: side-effect-free CEL expressions (the `cel` crate)
//! deciding whether a step runs.
//!
//! This module owns the bounds a condition must meet, its parsing, the step
//! names it reads (for validation on save), its cost budget and its
//! evaluation against a run's state. It does not decide what a false
//! condition or an evaluation error does to the step, nor where evaluation
//! runs (the scheduler does both: off its own thread, see
//! `scheduler::cond_pool`), nor which steps are upstream ([`crate::task`]
//! checks [`Condition::referenced_steps`] against the DAG).
//!
//! # Why the bounds and the threads
//! `cel` 0.15 has no cost budget and recurses deeply. Measured in a debug
//! build: its ANTLR parser takes ~160 KiB of stack per bracket level (32
//! levels need ~5.5 MiB, more than a 2 MiB tokio or test thread has) and
//! stops by itself only at 96 levels (~17 MiB); its evaluator takes ~38 KiB
//! per level of the expression tree (`1+1+…+1` with 511 operators needs
//! ~19 MiB). A stack overflow aborts the whole process. So:
//! - the text is checked first — at most [`MAX_LEN`] bytes and [`MAX_DEPTH`]
//!   levels of `()`, `[]`, `{}` — by a scanner that skips string literals and
//!   comments the way CEL's lexer does;
//! - the parsed tree may be at most [`MAX_EXPR_DEPTH`] levels deep (a chain
//!   `a + b + c…` or `a.b.c…` nests one level per operator; `&&` and `||`
//!   chains are balanced by the parser and nest little);
//! - parsing and evaluation run on a thread with a stack sized for the worst
//!   case those bounds allow ([`EVAL_STACK`]), several times over, so the
//!   caller's stack does not matter.
//!
//! Unary chains (`!!!!x`, `----1`) are folded by the parser and cost
//! nothing.
//!
//! # The budget
//! A short condition can still do unbounded work: seven nested `.map` over a
//! ten-item list literal build 10⁷ values (15 s and +580 MB measured), and
//! `input.l.all(x, input.l.all(y, input.l.all(z, …)))` does n³ steps over an
//! input list of n items. Every evaluation is therefore metered, and stops
//! with [`CondError::Budget`] past [`Budget`]'s limits: [`MAX_EVAL_STEPS`]
//! steps, [`MAX_EVAL_BYTES`] of values built, [`EVAL_DEADLINE`] of wall
//! time.
//!
//! Why meters in cel's own evaluation rather than the alternatives: a bound
//! computed before evaluating, from the input's sizes, cannot know the
//! sizes of intermediate values (a `map` result feeding another macro,
//! strings doubled by `+`), so it would be either loose by orders of
//! magnitude or open to a cleverer expression; an interpreter of our own
//! would have to re-implement CEL's semantics (mixed-number comparisons,
//! errors forgiven by `||`, `all` and `exists`, …) and drift from them.
//!
//! How, given that the interpreter has no hooks: on parse, the tree is
//! rewritten with calls to meter functions of our own around the operands
//! whose size makes work (an operand of `+` is copied, one of `==` compared,
//! a macro's range iterated and cloned…), and cel's own interpreter then
//! evaluates the rewritten tree, so conditions keep cel's exact semantics.
//! A meter measures the value passing through it (values and text bytes,
//! stopping early once over what is left), charges it to a per-evaluation
//! [`Budget`] held by the evaluating thread, and passes the value on
//! unchanged; a macro's meter also charges its range's length times the
//! nodes of its body before the first iteration. Over budget, the meter
//! unwinds out of the interpreter at once, so no error handling inside CEL
//! (`error || true`, a later `all` element) can swallow the stop.
//!
//! Why this bound holds whatever the expression:
//! - Every node evaluation is a step: the nodes outside any macro are
//!   charged once up front, a macro's body nodes once per item of its range
//!   (also when `all`/`exists` stop early: the bound is on the worst case).
//!   Nodes without a meter (names, `.field`, `[index]`, `size()`, `&&`,
//!   `? :`, literals) do O(1) work.
//! - Every operation whose work grows with a value — compare, `in`, `+`,
//!   conversions, string functions, iterating, building a list or map —
//!   has a meter on that value and is charged its values plus its text
//!   bytes / [`BYTES_PER_STEP`] before the work happens, so steps bound time.
//! - Values are only ever built by `+`, list and map literals, `map()`/
//!   `filter()` results and conversions, and each copies operands whose
//!   meter also charges their estimated heap size ([`VALUE_BYTES`] per value
//!   plus text bytes) to the bytes meter first. No CEL function here makes
//!   more than it is given (the extension libraries, with `repeat`-like
//!   functions, are not loaded), so `.map` feeding another macro, strings
//!   doubled in a chain of `+` or nested lists in the input are all charged
//!   as they grow, and memory stays within [`MAX_EVAL_BYTES`] (twice that at
//!   the worst moment: one operation's output is built before it is
//!   measured) plus the run's own data and one clone per nested macro.
//! - `matches` is replaced by a function of ours with the same semantics
//!   (the same `regex` crate): the pattern's Thompson NFA is limited to
//!   [`MAX_REGEX_BYTES`] and each match is charged as the worst case of the
//!   engine's fallback, text bytes × NFA states. Literal patterns are
//!   compiled (and refused if invalid) on save.
//! - The run's data is converted to CEL values before evaluating: only the
//!   parts the condition names (`steps.a.output.rows` is one field, whatever
//!   else `a` returned; a name compared, iterated or passed on whole is read
//!   whole), and that conversion is charged like building values. The
//!   scheduler copies those parts out of the run on its own thread
//!   ([`Condition::extract`]) and the copy stops at the step budget, so a
//!   condition naming many large outputs costs it a bounded copy.
//!
//! On save, a static estimate of the same steps — counting list and map
//! literals at their size and anything read from the run as one item —
//! refuses conditions that would exceed the budget whatever the input
//! (nested macros over literal lists) with [`CondError::TooCostly`].

// The budget stops an evaluation by unwinding out of the interpreter; with
// `panic = "abort"` that would abort the host instead.
#[cfg(panic = "abort")]
compile_error!("cond's budget unwinds out of the CEL interpreter: build with panic = \"unwind\"");

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr,
    StructExpr, operators,
};
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelOptional,
    CelString, CelUInt, DYN_TYPE, INT_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{Context, Env, ExecutionError, ParseErrors, Value};

/// Longest condition accepted, in bytes.
pub const MAX_LEN: usize = 1024;
/// Deepest nesting of `()`, `[]`, `{}` accepted (checked on the raw text,
/// outside string literals and comments, before the CEL parser sees it).
pub const MAX_DEPTH: usize = 32;
/// Deepest parsed expression tree accepted: each operator, field access,
/// index or call is a level. Bounds the evaluator's recursion (~38 KiB of
/// stack per level in a debug build).
pub const MAX_EXPR_DEPTH: usize = 64;
/// Deepest JSON value (trigger input, step output) a condition can read;
/// serde_json itself refuses to parse more than 128 levels.
pub const MAX_VALUE_DEPTH: usize = 256;

/// Most steps one evaluation may take (see the module docs for what a step
/// is). The costliest conditions it lets through took 25–50 ms in a release
/// build on 2 cores (maps built per item, time zones, regexes, n³ macros).
pub const MAX_EVAL_STEPS: u64 = 1_000_000;
/// Most bytes of values one evaluation may build (estimated heap size:
/// [`VALUE_BYTES`] per value plus the bytes of text).
pub const MAX_EVAL_BYTES: u64 = 32 << 20;
/// Longest one evaluation may run, whatever its steps: a guard for a slow or
/// overloaded machine (the step budget alone takes well under it).
pub const EVAL_DEADLINE: Duration = Duration::from_secs(1);
/// Bytes of text (compared, copied, searched) that count as one step.
pub const BYTES_PER_STEP: u64 = 64;
/// Estimated heap bytes of one CEL value besides its text (its box, its
/// slot in a list, a map entry's key and hash slot).
pub const VALUE_BYTES: u64 = 64;
/// Largest Thompson NFA a `matches` pattern may compile to, in bytes.
pub const MAX_REGEX_BYTES: usize = 256 << 10;

/// Stack of a thread that evaluates (or parses) a condition. The parser
/// stops by itself at 96 bracket levels, which needs ~17 MiB in a debug
/// build; the text check allows 32 (~6 MiB); evaluating [`MAX_EXPR_DEPTH`]
/// levels, doubled by the meters, needs ~5 MiB. Only touched pages are
/// committed, so a large size costs nothing.
pub const EVAL_STACK: usize = 64 << 20;
/// Longest CEL message kept in an error (messages may quote whole values).
const MAX_MESSAGE_CHARS: usize = 240;
/// Wall time is checked every this many meter calls (`Instant::now` is not
/// free; a meter call between two checks is bounded by the step budget).
const CLOCK_EVERY: u32 = 32;
/// Patterns computed at run time kept compiled during one evaluation.
const MAX_COMPUTED_PATTERNS: usize = 16;
/// Steps charged per NFA state to compile a pattern at run time.
const COMPILE_STEPS_PER_STATE: u64 = 4;
/// A match costs text bytes × NFA states / this in steps: the engine's
/// worst case (its lazy DFA giving up, then a PikeVM walking every state for
/// every byte) does about this many byte-states in the time of one step.
const BYTE_STATES_PER_STEP: u64 = 64;

/// The limits of one evaluation. [`Budget::default`] is what the scheduler
/// uses and what the check on save assumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most steps ([`MAX_EVAL_STEPS`]).
    pub steps: u64,
    /// Most bytes of values built ([`MAX_EVAL_BYTES`]).
    pub bytes: u64,
    /// Longest wall time ([`EVAL_DEADLINE`]).
    pub deadline: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            steps: MAX_EVAL_STEPS,
            bytes: MAX_EVAL_BYTES,
            deadline: EVAL_DEADLINE,
        }
    }
}

/// Names of the meter functions the rewrite inserts. They start with `@`,
/// which CEL source cannot write, so no condition can call or shadow them.
mod meter {
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
}

/// The standard CEL environment plus the meters, built once (it registers
/// every function overload). Optional syntax (`a.?b`) is off: conditions do
/// not need it.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib().with_optional_support(false);
    let meters: [(
        &str,
        Vec<cel::common::types::Type>,
        cel::common::functions::Function,
    ); 7] = [
        (meter::READ, vec![DYN_TYPE], meter_read),
        (meter::COPY, vec![DYN_TYPE], meter_copy),
        (meter::LOOKUP, vec![DYN_TYPE], meter_lookup),
        (meter::TEXT, vec![DYN_TYPE], meter_text),
        (meter::RANGE, vec![DYN_TYPE, INT_TYPE], meter_range),
        (meter::MATCHES, vec![DYN_TYPE, DYN_TYPE], meter_matches),
        (
            meter::MATCHES_METHOD,
            vec![DYN_TYPE, DYN_TYPE],
            meter_matches_method,
        ),
    ];
    for (name, args, f) in meters {
        env.add_overload(name, name, args, f)
            .expect("meter names are unique and start with `@`");
    }
    Arc::new(env)
});

/// Conditions [`Condition::parse_cached`] keeps: a parsed condition of
/// [`MAX_LEN`] bytes takes up to ~50 KiB, so this is at most ~12 MiB.
pub const PARSE_CACHE: usize = 256;

/// The conditions parsed last, by text, oldest first out.
static PARSED: LazyLock<std::sync::Mutex<Parsed>> =
    LazyLock::new(|| std::sync::Mutex::new(Parsed::default()));

#[derive(Default)]
struct Parsed {
    by_text: HashMap<Arc<str>, Condition>,
    order: std::collections::VecDeque<Arc<str>>,
}

impl Parsed {
    fn get(&self, text: &str) -> Option<Condition> {
        self.by_text.get(text).cloned()
    }

    fn insert(&mut self, text: &str, parsed: Condition) {
        if self.by_text.contains_key(text) {
            return;
        }
        while self.order.len() >= PARSE_CACHE {
            if let Some(old) = self.order.pop_front() {
                self.by_text.remove(&old);
            }
        }
        let text: Arc<str> = text.into();
        self.order.push_back(Arc::clone(&text));
        self.by_text.insert(text, parsed);
    }
}

/// Why a condition was refused or could not be evaluated. The `Display` text
/// follows the field's path: `steps[2].when: is 1100 bytes; the limit is 1024`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CondError {
    /// Only white space.
    #[error("is empty; remove `when` or write a condition")]
    Empty,
    /// Longer than [`MAX_LEN`].
    #[error("is {len} bytes; the limit is {MAX_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Nested deeper than [`MAX_DEPTH`] brackets or [`MAX_EXPR_DEPTH`]
    /// expression levels; the message says which.
    #[error("{0}")]
    TooDeep(String),
    /// Refused on save: even on the smallest input it would take more than
    /// [`MAX_EVAL_STEPS`] (macros nested over literal lists).
    #[error("{0}")]
    TooCostly(String),
    /// Not a valid condition: the message says what and, from the CEL
    /// parser, where (`syntax error at column 7: …`).
    #[error("{0}")]
    Syntax(String),
    /// Evaluation failed: a missing field, mismatched types, division by
    /// zero… The CEL message, with a hint for the common cases.
    #[error("evaluation failed: {0}")]
    Eval(String),
    /// Evaluated to something other than a bool (described in the message).
    #[error("evaluated to {0}, not a bool")]
    NotBool(String),
    /// Evaluation stopped: it took more steps, built more values or ran
    /// longer than its [`Budget`] allows (the message says which).
    #[error("exceeded its budget: {0}")]
    Budget(String),
    /// The host could not run the check (no thread could be started, or the
    /// CEL library panicked). Not the condition's fault.
    #[error("could not be checked: {0}")]
    Internal(String),
}

/// A parsed, bounded condition. Cheap to clone: the tree is shared.
#[derive(Clone)]
pub struct Condition {
    /// The text, for messages and `Debug`.
    source: Arc<str>,
    /// The parsed tree with the meters inserted (see "The budget").
    expr: Arc<IdedExpr>,
    /// Steps charged once per evaluation: the nodes outside any macro body.
    base_steps: u64,
    /// The literal `matches` patterns, compiled on parse.
    patterns: Arc<HashMap<String, Arc<Pattern>>>,
    /// Steps read as `steps.NAME` / `steps["NAME"]`, in order, each once.
    /// The only steps put into `steps` at evaluation time.
    steps: Vec<String>,
    /// The parts of `input` and of those steps it reads.
    reads: Arc<Reads>,
    /// Whether `input` appears, so it is converted only when read.
    uses_input: bool,
    /// Whether `run` appears.
    uses_run: bool,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condition")
            .field("source", &self.source)
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

/// The state of a run a condition is evaluated against.
#[derive(Debug, Clone, Copy)]
pub struct CondVars<'a> {
    /// Upstream (and all other) steps of the run: status as its snake_case
    /// name ("succeeded", "skipped", …) and output (None when the step has
    /// none). Only the steps the condition names are converted.
    pub steps: &'a [(&'a str, &'a str, Option<&'a serde_json::Value>)],
    /// The trigger input.
    pub input: &'a serde_json::Value,
    /// `run.id`.
    pub run_id: &'a str,
    /// `run.scheduled_for` (RFC 3339).
    pub scheduled_for: &'a str,
    /// `run.biz_date` (yyyy-MM-dd).
    pub biz_date: &'a str,
    /// `run.trigger`: what started the run ("cron", "manual", …).
    pub trigger: &'a str,
}

impl Condition {
    /// Checks the bounds (emptiness, [`MAX_LEN`], [`MAX_DEPTH`] on the text,
    /// then [`MAX_EXPR_DEPTH`] on the parsed tree), parses, inserts the
    /// meters and refuses a condition whose static estimate exceeds
    /// [`MAX_EVAL_STEPS`] ([`CondError::TooCostly`]) or whose literal
    /// `matches` pattern does not compile. `steps` may only be used to name
    /// a step (`steps.NAME`, `steps["NAME"]`), so every step a condition
    /// reads is known before it runs. Never panics or overflows the stack,
    /// whatever the input: parsing runs on a thread of its own.
    pub fn parse(expr: &str) -> Result<Self, CondError> {
        check_text(expr)?;
        let parsed = on_own_stack(|| {
            let program = ENV.compile(expr).map_err(|e| syntax_error(&e))?;
            // A rejected tree is dropped here, on the large stack.
            let found = analyze(program.expression())?;
            let mut reads = Reads::default();
            collect_reads(program.expression(), &mut reads);
            let mut rewrite = Rewrite::default();
            let tree = rewrite.node(program.expression().clone());
            if let Some(e) = rewrite.error {
                return Err(e);
            }
            let estimate = static_steps(&tree);
            if estimate > u128::from(MAX_EVAL_STEPS) {
                return Err(CondError::TooCostly(format!(
                    "would take about {estimate} steps evaluated over its literal lists \
                     (nested macros multiply); a condition may take at most {MAX_EVAL_STEPS}; \
                     nest fewer macros or use shorter lists"
                )));
            }
            Ok((tree, found, reads, rewrite.patterns))
        })?;
        let (tree, found, reads, patterns) = parsed;
        Ok(Self {
            source: expr.into(),
            base_steps: steps_outside_bodies(&tree),
            expr: Arc::new(tree),
            patterns: Arc::new(patterns),
            steps: found.steps,
            reads: Arc::new(reads),
            uses_input: found.uses_input,
            uses_run: found.uses_run,
        })
    }

    /// [`Condition::parse`], remembering the last [`PARSE_CACHE`] conditions
    /// parsed (by text): parsing takes a thread and the ANTLR parser
    /// (~0.3–3 ms), which the scheduler's thread should not pay per run.
    /// Saving a task parses through here, so runs find theirs ready.
    pub fn parse_cached(expr: &str) -> Result<Self, CondError> {
        if let Some(found) = PARSED.lock().unwrap_or_else(|e| e.into_inner()).get(expr) {
            return Ok(found);
        }
        let parsed = Self::parse(expr)?;
        PARSED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(expr, parsed.clone());
        Ok(parsed)
    }

    /// The condition's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Step names the expression references as `steps.NAME` or
    /// `steps["NAME"]`, in order of appearance, each once (for validation:
    /// they must be upstream).
    pub fn referenced_steps(&self) -> Vec<String> {
        self.steps.clone()
    }

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

    /// [`Condition::eval_here`] on what [`Condition::extract`] copied.
    pub fn eval_extract(&self, data: &Extract, budget: &Budget) -> Result<bool, CondError> {
        if data.over {
            return Err(CondError::Budget(reads_too_large(budget.steps)));
        }
        let steps: Vec<(&str, &str, Option<&serde_json::Value>)> = data
            .steps
            .iter()
            .map(|(name, status, output)| (name.as_str(), status.as_str(), output.as_ref()))
            .collect();
        let vars = CondVars {
            steps: &steps,
            input: &data.input,
            run_id: &data.run_id,
            scheduled_for: &data.scheduled_for,
            biz_date: &data.biz_date,
            trigger: &data.trigger,
        };
        self.eval_here(&vars, budget)
    }

    /// Evaluates against the run's state under the default [`Budget`] on a
    /// thread of its own with [`EVAL_STACK`], and blocks until done. See
    /// [`Condition::eval_here`].
    pub fn eval(&self, vars: &CondVars<'_>) -> Result<bool, CondError> {
        let budget = Budget::default();
        on_own_stack(|| self.eval_here(vars, &budget))
    }

    /// Evaluates against the run's state on the calling thread, which must
    /// have [`EVAL_STACK`] bytes of stack (the scheduler's evaluation
    /// threads do). Anything but a bool is [`CondError::NotBool`]; a missing
    /// field or a type mismatch is [`CondError::Eval`] with the CEL message
    /// (never silently false); past `budget`, [`CondError::Budget`].
    pub fn eval_here(&self, vars: &CondVars<'_>, budget: &Budget) -> Result<bool, CondError> {
        let meter = Meter::new(budget, Arc::clone(&self.patterns));
        let _installed = Installed::new(meter);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            charge(|m| m.spend(self.base_steps));
            self.execute(vars, &self.expr, &self.reads)
        }));
        match outcome {
            Ok(result) => result,
            Err(payload) => match payload.downcast::<Stop>() {
                Ok(stop) => Err(CondError::Budget(stop.reason(budget))),
                Err(_) => Err(CondError::Internal("the CEL library panicked".to_owned())),
            },
        }
    }

    /// Builds the variables — converting only the parts of the run's data
    /// the condition reads, charged to the meter — and runs `tree` (the
    /// metered one, inside the meter; tests compare it with the tree as
    /// parsed).
    fn execute(
        &self,
        vars: &CondVars<'_>,
        tree: &IdedExpr,
        reads: &Reads,
    ) -> Result<bool, CondError> {
        let (cap_steps, cap_bytes, limit) =
            charge(|m| Ok(Some((m.steps_left, m.bytes_left, m.limit)))).unwrap_or((
                u64::MAX,
                u64::MAX,
                u64::MAX,
            ));
        let mut conv = Convert {
            steps: 0,
            bytes: 0,
            cap_steps,
            cap_bytes,
            limit,
        };
        let mut ctx = Context::with_env(Arc::clone(&ENV));
        if !self.steps.is_empty() {
            let mut map: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = HashMap::new();
            for name in &self.steps {
                // A step missing from `vars` stays missing: reading it is an
                // evaluation error naming it.
                let Some((name, status, output)) = vars.steps.iter().find(|s| s.0 == name) else {
                    continue;
                };
                let read = reads.steps.fields.get(*name).unwrap_or(&WHOLE);
                let mut step: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = HashMap::new();
                if read.full || read.fields.contains_key("status") {
                    step.insert(
                        CelMapKey::from("status"),
                        Box::new(CelString::from(*status)),
                    );
                }
                let output_read = if read.full {
                    Some(&WHOLE)
                } else {
                    read.fields.get("output")
                };
                if let Some(output_read) = output_read {
                    let output = match output {
                        Some(v) => conv.cut(v, output_read, 1)?,
                        None => Box::new(CelNull),
                    };
                    step.insert(CelMapKey::from("output"), output);
                }
                map.insert(CelMapKey::from(*name), Box::new(CelMap::from(step)));
            }
            ctx.add_variable_as_val("steps", Box::new(CelMap::from(map)));
        }
        if self.uses_input {
            ctx.add_variable_as_val("input", conv.cut(vars.input, &reads.input, 1)?);
        }
        charge(|m| {
            m.spend(conv.steps)?;
            m.build(conv.bytes)
        });
        if self.uses_run {
            let run: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = [
                ("id", vars.run_id),
                ("scheduled_for", vars.scheduled_for),
                ("biz_date", vars.biz_date),
                ("trigger", vars.trigger),
            ]
            .into_iter()
            .map(|(k, v)| {
                (
                    CelMapKey::from(k),
                    Box::new(CelString::from(v)) as Box<dyn Val>,
                )
            })
            .collect();
            ctx.add_variable_as_val("run", Box::new(CelMap::from(run)));
        }
        match Value::resolve(tree, &ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CondError::NotBool(describe(&other))),
            Err(e) => Err(CondError::Eval(eval_message(&e))),
        }
    }
}

/// Runs `f` on a new thread with [`EVAL_STACK`] of stack and waits for it.
/// The CEL library recurses deeply (see the module docs): the caller's own
/// stack — 2 MiB on a tokio worker — is not enough for what the bounds allow.
fn on_own_stack<T: Send>(f: impl FnOnce() -> Result<T, CondError> + Send) -> Result<T, CondError> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("ax-cond".to_owned())
            .stack_size(EVAL_STACK)
            .spawn_scoped(scope, f)
            .map_err(|e| CondError::Internal(format!("cannot start a thread: {e}")))?;
        // Joined here, so a panic comes back as an error instead of being
        // re-raised by `scope`.
        handle
            .join()
            .unwrap_or_else(|_| Err(CondError::Internal("the CEL library panicked".to_owned())))
    })
}

// ---------------------------------------------------------------------------
// The text check

/// Checks length and bracket nesting on the raw text, skipping string
/// literals and `//` comments exactly as CEL's lexer delimits them (a
/// mistake here could hide brackets from the count).
fn check_text(expr: &str) -> Result<(), CondError> {
    if expr.trim().is_empty() {
        return Err(CondError::Empty);
    }
    if expr.len() > MAX_LEN {
        return Err(CondError::TooLong { len: expr.len() });
    }
    let b = expr.as_bytes();
    let mut open: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' | b'\'' => {
                i = string_end(b, i, false).map_err(|e| string_error(expr, i, e))?;
            }
            b'0'..=b'9' => i = number_end(b, i),
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while b
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    i += 1;
                }
                // `r"…"`, `b"…"`, `br"…"`: the lexer takes the longest
                // token, so a prefix glued to a quote makes one literal; if
                // that literal does not lex, it falls back to the
                // identifier and the quote is scanned next.
                let word = &b[start..i];
                let prefix = matches!(
                    word,
                    b"r" | b"R" | b"b" | b"B" | b"br" | b"bR" | b"Br" | b"BR"
                );
                if prefix && matches!(b.get(i), Some(b'"' | b'\'')) {
                    let raw = word.iter().any(|c| matches!(c, b'r' | b'R'));
                    if let Ok(end) = string_end(b, i, raw) {
                        i = end;
                    }
                }
            }
            c @ (b'(' | b'[' | b'{') => {
                open.push(c);
                if open.len() > MAX_DEPTH {
                    return Err(CondError::TooDeep(format!(
                        "nests brackets more than {MAX_DEPTH} deep"
                    )));
                }
                i += 1;
            }
            c @ (b')' | b']' | b'}') => {
                let want = match c {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                if open.pop() != Some(want) {
                    return Err(CondError::Syntax(format!(
                        "has a `{}` that closes nothing",
                        c as char
                    )));
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    if let Some(c) = open.last() {
        return Err(CondError::Syntax(format!(
            "has an unclosed `{}`",
            *c as char
        )));
    }
    Ok(())
}

/// Why a string literal does not lex.
#[derive(Debug, Clone, Copy, PartialEq)]
enum BadString {
    /// A line break or the end came before the closing quote.
    Unterminated,
    /// A backslash not starting a valid escape, at this byte offset.
    Escape(usize),
}

/// The end (exclusive) of the string literal whose opening quote is at
/// `start`, following CEL's `STRING` lexer rule: single-line `'…'`/`"…"`,
/// multi-line `'''…'''`/`"""…"""`, raw (no escapes) when `raw`. An opening
/// triple quote that is never closed lexes as the empty literal `""` (the
/// longest token that matched), as in the lexer.
fn string_end(b: &[u8], start: usize, raw: bool) -> Result<usize, BadString> {
    let q = b[start];
    let triple = b.get(start + 1) == Some(&q) && b.get(start + 2) == Some(&q);
    if triple {
        let mut i = start + 3;
        while i < b.len() {
            if b[i] == q && b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                return Ok(i + 3);
            }
            if b[i] == b'\\' && !raw {
                match escape_len(&b[i..]) {
                    Some(n) => i += n,
                    None => return Ok(start + 2),
                }
            } else {
                i += 1;
            }
        }
        return Ok(start + 2);
    }
    let mut i = start + 1;
    loop {
        match b.get(i) {
            None | Some(b'\n' | b'\r') => return Err(BadString::Unterminated),
            Some(&c) if c == q => return Ok(i + 1),
            Some(b'\\') if !raw => match escape_len(&b[i..]) {
                Some(n) => i += n,
                None => return Err(BadString::Escape(i)),
            },
            Some(_) => i += 1,
        }
    }
}

/// The length of the escape sequence at the start of `b` (a backslash), or
/// `None` if it is not one CEL accepts.
fn escape_len(b: &[u8]) -> Option<usize> {
    let hex = |from: usize, n: usize| {
        b.get(from..from + n)
            .is_some_and(|d| d.iter().all(u8::is_ascii_hexdigit))
            .then_some(from + n)
    };
    match *b.get(1)? {
        b'a' | b'b' | b'f' | b'n' | b'r' | b't' | b'v' | b'"' | b'\'' | b'\\' | b'?' | b'`' => {
            Some(2)
        }
        b'x' | b'X' => hex(2, 2),
        b'u' => hex(2, 4),
        b'U' => hex(2, 8),
        b'0'..=b'3' => (b.get(2).is_some_and(|c| (b'0'..=b'7').contains(c))
            && b.get(3).is_some_and(|c| (b'0'..=b'7').contains(c)))
        .then_some(4),
        _ => None,
    }
}

/// The end of the number literal starting at `start` (a digit): the longest
/// of CEL's `NUM_INT`, `NUM_UINT`, `NUM_FLOAT`, so that a letter after it
/// (`0xbr"…"`) is split off as the lexer does.
fn number_end(b: &[u8], start: usize) -> usize {
    let digits = |mut i: usize, ok: fn(&u8) -> bool| {
        while b.get(i).is_some_and(ok) {
            i += 1;
        }
        i
    };
    if b[start] == b'0' && b.get(start + 1) == Some(&b'x') {
        let end = digits(start + 2, u8::is_ascii_hexdigit);
        if end > start + 2 {
            return end + usize::from(matches!(b.get(end), Some(b'u' | b'U')));
        }
    }
    let mut i = digits(start, u8::is_ascii_digit);
    let mut float = false;
    if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i = digits(i + 1, u8::is_ascii_digit);
        float = true;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
        if b.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
            return digits(i + 1 + sign, u8::is_ascii_digit);
        }
    }
    if !float && matches!(b.get(i), Some(b'u' | b'U')) {
        i += 1;
    }
    i
}

/// The message for a string literal that does not lex, with its position.
fn string_error(expr: &str, start: usize, e: BadString) -> CondError {
    let (line, col) = line_col(expr, start);
    let at = position(line, col);
    CondError::Syntax(match e {
        BadString::Unterminated => {
            format!("has a string starting {at} that is not closed on its line")
        }
        BadString::Escape(i) => {
            let text: String = expr[i..].chars().take(2).collect();
            let (line, col) = line_col(expr, i);
            format!(
                "has an invalid escape `{text}` {}; write `\\\\` for a backslash",
                position(line, col)
            )
        }
    })
}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_col(expr: &str, at: usize) -> (usize, usize) {
    let before = &expr[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// "at column 7", or "at line 2, column 7" for a multi-line condition.
fn position(line: usize, col: usize) -> String {
    if line == 1 {
        format!("at column {col}")
    } else {
        format!("at line {line}, column {col}")
    }
}

// ---------------------------------------------------------------------------
// The parsed tree

/// What [`analyze`] finds in a parsed condition.
struct Found {
    steps: Vec<String>,
    uses_input: bool,
    uses_run: bool,
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
fn analyze(root: &IdedExpr) -> Result<Found, CondError> {
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
fn syntax_error(errors: &ParseErrors) -> CondError {
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

// ---------------------------------------------------------------------------
// The budget: the rewrite that inserts the meters

/// Inserts the meters into a parsed tree (see "The budget" in the module
/// docs). Recursive: the tree was checked to be at most [`MAX_EXPR_DEPTH`]
/// deep, and this runs on the parsing thread's large stack.
#[derive(Default)]
struct Rewrite {
    /// The variables of the macros around the node being rewritten.
    scope: Vec<String>,
    /// The literal `matches` patterns, compiled.
    patterns: HashMap<String, Arc<Pattern>>,
    /// The first literal pattern that does not compile.
    error: Option<CondError>,
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
fn is_internal(e: &IdedExpr) -> bool {
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
    fn node(&mut self, e: IdedExpr) -> IdedExpr {
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

/// The children of `e` in evaluation terms: those evaluated once per
/// evaluation of `e`, and a macro's body (evaluated once per item).
fn children(e: &IdedExpr) -> (Vec<&IdedExpr>, Vec<&IdedExpr>) {
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
fn steps_outside_bodies(e: &IdedExpr) -> u64 {
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
fn static_steps(root: &IdedExpr) -> u128 {
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

// ---------------------------------------------------------------------------
// The budget: the meters at run time

/// Why an evaluation stopped; the payload it unwinds with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Steps,
    Bytes,
    Time,
}

impl Stop {
    fn reason(self, budget: &Budget) -> String {
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
struct Meter {
    /// The budget's steps.
    limit: u64,
    steps_left: u64,
    bytes_left: u64,
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
struct Installed;

impl Installed {
    fn new(meter: Meter) -> Self {
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
fn charge<T: Default>(f: impl FnOnce(&mut Meter) -> Result<T, Stop>) -> T {
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
    fn new(budget: &Budget, patterns: Arc<HashMap<String, Arc<Pattern>>>) -> Self {
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
    fn spend(&mut self, steps: u64) -> Result<(), Stop> {
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
    fn build(&mut self, bytes: u64) -> Result<(), Stop> {
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
    fn pattern(&mut self, pattern: &str) -> Result<Result<Arc<Pattern>, String>, Stop> {
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
fn meter_read<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = only(args)?;
    charge(|m| m.read(v.as_ref()).map(|_| ()));
    Ok(v)
}

/// `@ax_copy(x)`: charges reading and copying `x`, gives `x`.
fn meter_copy<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = only(args)?;
    charge(|m| m.copy(v.as_ref()));
    Ok(v)
}

/// `@ax_lookup(c)`: the right side of `in`; a map is a hash lookup, anything
/// else is read.
fn meter_lookup<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
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
fn meter_text<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = only(args)?;
    let text = v.downcast_ref::<CelString>().map_or(0, |s| s.inner().len());
    charge(|m| m.spend(1 + text as u64 / BYTES_PER_STEP));
    Ok(v)
}

/// `@ax_range(r, body)`: a macro's range: charges reading `r` (each item is
/// cloned in turn) and `body` steps per item, before the first one.
fn meter_range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
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

/// `matches(text, pattern)`.
fn meter_matches<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    matches_of(args, false)
}

/// `text.matches(pattern)`.
fn meter_matches_method<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    matches_of(args, true)
}

/// cel's `matches` (`regex::Regex::new(pattern)?.is_match(text)`, with its
/// error messages), metered: the pattern is compiled once per evaluation
/// within [`MAX_REGEX_BYTES`], and each match charged as the engine's worst
/// case.
fn matches_of<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    method: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let strings = match args.as_slice() {
        [text, pattern] => text
            .downcast_ref::<CelString>()
            .zip(pattern.downcast_ref::<CelString>()),
        _ => None,
    };
    let Some((text, pattern)) = strings else {
        let types = args
            .iter()
            .map(|a| a.get_type().name().to_owned())
            .collect();
        return Err(if method {
            ExecutionError::no_such_member_overload("matches", types)
        } else {
            ExecutionError::no_such_overload("matches", types)
        });
    };
    let (text, pattern) = (text.inner(), pattern.inner());
    let compiled = charge(|m| {
        m.spend(1 + (pattern.len() as u64) / BYTES_PER_STEP)?;
        let compiled = m.pattern(pattern)?;
        if let Ok(p) = &compiled {
            let byte_states = (text.len() as u64 + 1).saturating_mul(p.states);
            m.spend(byte_states / BYTE_STATES_PER_STEP + text.len() as u64 / BYTES_PER_STEP)?;
        }
        Ok(Some(compiled))
    });
    match compiled {
        Some(Ok(p)) => Ok(CowVal::owned(CelBool::from(p.regex.is_match(text)))),
        Some(Err(message)) => Err(ExecutionError::function_error("matches", message)),
        // No meter (not inside an evaluation): compile without one.
        None => match Pattern::compile(pattern) {
            Ok(p) => Ok(CowVal::owned(CelBool::from(p.regex.is_match(text)))),
            Err(message) => Err(ExecutionError::function_error("matches", message)),
        },
    }
}

/// A compiled `matches` pattern and the size of its NFA.
struct Pattern {
    regex: regex::Regex,
    /// States of its Thompson NFA: the engine's work per byte in the worst
    /// case.
    states: u64,
    /// Estimated heap size: the NFA's, four times over (the engine builds
    /// several automata from it).
    bytes: u64,
}

impl Pattern {
    /// Compiles `pattern` as cel does (`regex::Regex::new`), refusing an NFA
    /// over [`MAX_REGEX_BYTES`]. The error reads after "the pattern …".
    fn compile(pattern: &str) -> Result<Self, String> {
        use regex_automata::nfa::thompson;
        let too_large = || {
            format!(
                "'{pattern}' compiles to more than {} KiB (large counted repetitions \
                 such as `{{1000}}` multiply); simplify it",
                MAX_REGEX_BYTES >> 10
            )
        };
        // First as cel compiles it, for the same messages on a bad pattern.
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(MAX_REGEX_BYTES)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => too_large(),
                e => format!("'{pattern}' not a valid regex:\n{e}"),
            })?;
        let nfa = thompson::Compiler::new()
            .configure(thompson::Config::new().nfa_size_limit(Some(MAX_REGEX_BYTES)))
            .build(pattern)
            .map_err(|_| too_large())?;
        Ok(Self {
            regex,
            states: nfa.states().len() as u64,
            bytes: 4 * nfa.memory_usage() as u64,
        })
    }
}

// ---------------------------------------------------------------------------
// The run's data a condition reads

/// The parts of a JSON value a condition reads: the whole of it (`full`),
/// or only some fields of it, each read in part or whole.
#[derive(Clone, Debug, Default, PartialEq)]
struct Trie {
    full: bool,
    fields: std::collections::BTreeMap<String, Trie>,
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
struct Reads {
    input: Trie,
    /// Level one: step names.
    steps: Trie,
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
fn collect_reads(e: &IdedExpr, reads: &mut Reads) {
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
    steps: Vec<(String, String, Option<serde_json::Value>)>,
    /// The parts of the input it reads (`null` if none).
    input: serde_json::Value,
    run_id: String,
    scheduled_for: String,
    biz_date: String,
    trigger: String,
    /// Set when the parts read were too large to copy within the budget:
    /// evaluating stops at once with [`CondError::Budget`].
    over: bool,
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

/// Converts JSON to CEL, borrowing its strings. Counts what it builds in
/// `w` and stops (with the reason) past `cap_steps` or `cap_bytes`.
/// Strings are borrowed, so they cost steps (to walk) but no bytes.
struct Convert {
    steps: u64,
    bytes: u64,
    cap_steps: u64,
    cap_bytes: u64,
    /// The budget's steps, for the message.
    limit: u64,
}

impl Convert {
    fn count(&mut self, values: u64, text: usize) -> Result<(), CondError> {
        self.steps = self
            .steps
            .saturating_add(values + text as u64 / BYTES_PER_STEP);
        self.bytes = self.bytes.saturating_add(values * VALUE_BYTES);
        if self.steps > self.cap_steps || self.bytes > self.cap_bytes {
            return Err(CondError::Budget(reads_too_large(self.limit)));
        }
        Ok(())
    }

    /// The parts of `v` that `trie` reads.
    fn cut<'a>(
        &mut self,
        v: &'a serde_json::Value,
        trie: &Trie,
        depth: usize,
    ) -> Result<Box<dyn Val + 'a>, CondError> {
        use serde_json::Value as J;
        if trie.full {
            return self.val(v, depth);
        }
        Ok(match v {
            J::Object(fields) => {
                self.count(1, 0)?;
                let mut map: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> = HashMap::new();
                for (k, t) in &trie.fields {
                    if let Some((k, v)) = fields.get_key_value(k) {
                        self.count(1, k.len())?;
                        map.insert(CelMapKey::from(k.as_str()), self.cut(v, t, depth + 1)?);
                    }
                }
                Box::new(CelMap::from(map))
            }
            // As in `cut`: reading a field of these fails naming the type.
            J::Array(_) => {
                self.count(1, 0)?;
                Box::new(CelList::from(Vec::new()))
            }
            J::String(_) => {
                self.count(1, 0)?;
                Box::new(CelString::from(""))
            }
            other => self.val(other, depth)?,
        })
    }

    /// The whole of `v`: whole numbers become `int` (or `uint` above
    /// `i64::MAX`), others `double`.
    fn val<'a>(
        &mut self,
        v: &'a serde_json::Value,
        depth: usize,
    ) -> Result<Box<dyn Val + 'a>, CondError> {
        use serde_json::Value as J;
        if depth > MAX_VALUE_DEPTH {
            return Err(CondError::Eval(format!(
                "a value nests more than {MAX_VALUE_DEPTH} levels deep"
            )));
        }
        self.count(1, 0)?;
        Ok(match v {
            J::Null => Box::new(CelNull),
            J::Bool(b) => Box::new(CelBool::from(*b)),
            J::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Box::new(CelInt::from(i))
                } else if let Some(u) = n.as_u64() {
                    Box::new(CelUInt::from(u))
                } else {
                    Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
                }
            }
            J::String(s) => {
                self.count(0, s.len())?;
                Box::new(CelString::from(s.as_str()))
            }
            J::Array(items) => Box::new(CelList::from(
                items
                    .iter()
                    .map(|item| self.val(item, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?,
            )),
            J::Object(fields) => {
                let mut map: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> =
                    HashMap::with_capacity(fields.len());
                for (k, v) in fields {
                    self.count(1, k.len())?;
                    map.insert(CelMapKey::from(k.as_str()), self.val(v, depth + 1)?);
                }
                Box::new(CelMap::from(map))
            }
        })
    }
}

/// The reason when the data a condition reads exceeds the budget.
fn reads_too_large(steps: u64) -> String {
    format!(
        "the run's data it reads (the input and step outputs it names) is more than \
         {steps} steps' worth; read fewer fields or smaller outputs"
    )
}

/// A read of the whole value.
static WHOLE: Trie = Trie {
    full: true,
    fields: std::collections::BTreeMap::new(),
};

// ---------------------------------------------------------------------------
// Evaluation

/// The CEL error message (cut to [`MAX_MESSAGE_CHARS`]), with a hint for
/// the common mistakes.
fn eval_message(e: &ExecutionError) -> String {
    let hint = match e {
        ExecutionError::NoSuchKey(_) => "; test for a field that may be absent with has(x.field)",
        ExecutionError::UndeclaredReference(_) => {
            "; a condition can read `steps`, `input` and `run`"
        }
        ExecutionError::NoSuchOverload(o) => match o.argument_types() {
            [first, ..] if o.function() == "_._" && first == "null_type" => {
                "; the value is null (a step without output, or a JSON null): \
                 test it with `!= null` first"
            }
            _ if ["_<_", "_<=_", "_>_", "_>=_"].contains(&o.function()) => {
                "; compare values of the same kind, converting with int(), double() or string()"
            }
            _ => "",
        },
        _ => "",
    };
    // The CEL text may quote whole values; the hint is kept whole.
    format!("{}{hint}", truncate(&e.to_string()))
}

/// Names the type (and for a scalar, the value) of a non-bool result.
fn describe(v: &Value) -> String {
    let quoted = |s: &str| truncate(&format!("{s:?}"));
    match v {
        Value::Int(i) => format!("the int {i}"),
        Value::UInt(u) => format!("the uint {u}u"),
        Value::Float(f) => format!("the double {f:?}"),
        Value::String(s) => format!("the string {}", quoted(s)),
        Value::Null => "null".to_owned(),
        Value::List(l) => format!("a list of {} items", l.len()),
        Value::Map(m) => format!("a map of {} entries", m.map.len()),
        other => format!("a value of type {}", other.type_of()),
    }
}

/// Cuts `s` to [`MAX_MESSAGE_CHARS`] characters.
fn truncate(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::{Value as J, json};

    use super::*;

    /// A run with `extract` succeeded (`rows`, `ratio`, `name`, `tags`, …),
    /// `empty` succeeded without output, `full` skipped, `my-step` failed and
    /// `load-users` succeeded with `files`.
    fn with_run<T>(f: impl FnOnce(&CondVars<'_>) -> T) -> T {
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

    fn eval(expr: &str) -> Result<bool, CondError> {
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
    fn bounds_are_checked_before_parsing() {
        assert_eq!(Condition::parse(" \n ").unwrap_err(), CondError::Empty);
        let long = format!("true || {}", "1 == 1 || ".repeat(120));
        assert_eq!(
            Condition::parse(&long).unwrap_err(),
            CondError::TooLong { len: long.len() }
        );
        assert_eq!(
            Condition::parse(&long).unwrap_err().to_string(),
            format!("is {} bytes; the limit is 1024", long.len())
        );
        let deep = |n: usize, open: &str, close: &str| {
            format!("{}true{}", open.repeat(n), close.repeat(n))
        };
        let too_deep = CondError::TooDeep("nests brackets more than 32 deep".to_owned());
        for (open, close) in [("(", ")"), ("[", "][0]"), ("{1: ", "}[1]"), ("size(", ")")] {
            assert_eq!(
                Condition::parse(&deep(33, open, close)).unwrap_err(),
                too_deep
            );
        }
        assert_eq!(eval(&deep(32, "(", ")")), Ok(true));
        assert_eq!(
            eval(&deep(32, "[", "]")),
            Err(CondError::NotBool("a list of 1 items".to_owned()))
        );
        // Brackets inside literals and comments do not count.
        let quoted = format!(
            "'{}' != '' // {}\n&& r'\\' == \"\\\\\"",
            "(".repeat(40),
            "[".repeat(40)
        );
        assert_eq!(eval(&quoted), Ok(true));
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

    #[test]
    fn scanner_delimits_literals_like_the_lexer() {
        // Raw strings have no escapes: `r"\"` is a complete literal, so the
        // brackets after it are code and must be counted.
        let hidden = format!(r#"r"\" + "{}" == 'x'"#, "(".repeat(40));
        assert!(
            check_text(&hidden).is_ok(),
            "the ( are inside the second literal"
        );
        let code = format!(
            r#"r"\" == r"\" || {}true{}"#,
            "(".repeat(33),
            ")".repeat(33)
        );
        assert!(matches!(check_text(&code), Err(CondError::TooDeep(_))));
        // Triple quotes span lines; escapes are honoured in them.
        assert!(check_text("'''a\n(\n\\''' ''' == ''").is_ok());
        // An unclosed triple quote lexes as `""` followed by a quote.
        assert!(matches!(check_text(r#""""abc"#), Err(CondError::Syntax(_))));
        // A letter glued to a number is not a raw prefix unless the lexer
        // splits it so: `0xb` is hex, then `r"\"` raw.
        assert_eq!(number_end(b"0xbr", 0), 3);
        assert_eq!(number_end(b"1.5e-3u", 0), 6);
        assert_eq!(number_end(b"12u", 0), 3);
        assert_eq!(number_end(b"1e", 0), 1);
        assert!(check_text(r#"br'\' == b'\\'"#).is_ok());
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

    /// An outcome, with a message quoting a map cut where the map starts
    /// (its entries print in hash order, which differs between two maps).
    fn comparable(r: &Result<bool, CondError>) -> Result<bool, CondError> {
        match r {
            Err(CondError::Eval(m)) => Err(CondError::Eval(
                m.find("Map(").map_or(m.clone(), |at| m[..at].to_owned()),
            )),
            other => other.clone(),
        }
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

    /// Evaluates the tree as parsed, without meters, by cel alone.
    fn eval_unmetered(cond: &Condition, vars: &CondVars<'_>) -> Result<bool, CondError> {
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
    fn eval_input(
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
    fn no_deadline() -> Budget {
        Budget {
            deadline: Duration::from_secs(600),
            ..Budget::default()
        }
    }

    fn budget_error(result: &Result<bool, CondError>) -> &str {
        match result {
            Err(CondError::Budget(m)) => m,
            other => panic!("expected the budget to stop it: {other:?}"),
        }
    }

    /// `levels` nested `.map` over a ten-item list literal, as in the probe
    /// that took 15 s and +580 MB at seven levels.
    fn nested_maps(levels: usize) -> String {
        let vars = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let mut expr = "a".to_owned();
        for v in vars[..levels].iter().rev() {
            expr = format!("[0,1,2,3,4,5,6,7,8,9].map({v},{expr})");
        }
        format!("{expr}.size() > 0")
    }

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

    #[test]
    fn matches_patterns_are_checked_on_save_and_metered() {
        let syntax = |e: &str| match Condition::parse(e) {
            Err(CondError::Syntax(m)) => m,
            other => panic!("{e}: {other:?}"),
        };
        let m = syntax("input.x.matches('(foo')");
        assert!(
            m.starts_with("the pattern of matches() '(foo' not a valid regex:"),
            "{m}"
        );
        let m = syntax("matches(input.x, '(?:a{1000}){1000}')");
        assert!(m.contains("compiles to more than 256 KiB"), "{m}");
        // A pattern read from the run is compiled when evaluated, with cel's
        // messages.
        let input = json!({ "x": "orders-2026", "p": "^orders-[0-9]{4}$", "bad": "(foo" });
        let ok = no_deadline();
        assert_eq!(
            eval_input("input.x.matches(input.p)", &input, ok).0,
            Ok(true)
        );
        assert_eq!(
            eval_input("matches(input.x, input.p)", &input, ok).0,
            Ok(true)
        );
        let Err(CondError::Eval(m)) = eval_input("input.x.matches(input.bad)", &input, ok).0 else {
            panic!("a bad pattern fails the evaluation");
        };
        assert!(
            m.starts_with("Error executing function 'matches': '(foo' not a valid regex"),
            "{m}"
        );
        let Err(CondError::Eval(m)) = eval_input("input.x.matches(1)", &input, ok).0 else {
            panic!("a pattern must be a string");
        };
        assert_eq!(
            m,
            "found no matching overload for 'matches' applied to 'string.(int)'"
        );
        // Unicode classes fit the limit.
        assert!(
            Condition::parse(r"input.x.matches('^\\w+@\\w+\\.com$') || input.x.matches('\\d{4}')")
                .is_ok()
        );
        // A new pattern per item is compiled (and charged) per item.
        let many = json!({ "l": (0..100_000).map(|i| format!("^a{i}$")).collect::<Vec<_>>() });
        let (result, took) = eval_input("input.l.all(p, !'zzz'.matches(p))", &many, ok);
        budget_error(&result);
        assert!(took < Duration::from_secs(10), "{took:?}");
        // Each match is charged as the engine's worst case: text × states.
        let long = json!({ "s": "a".repeat(1 << 20), "l": (0..100).collect::<Vec<_>>() });
        let expr = "input.l.all(i, !input.s.matches('[a-z]{200}b'))";
        let (result, took) = eval_input(expr, &long, ok);
        budget_error(&result);
        assert!(took < Duration::from_secs(10), "{took:?}");
    }

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
}
