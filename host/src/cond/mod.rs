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
//!
//! # Layout
//! - here: the bounds, [`Budget`], [`Condition`] and its parsing pipeline
//!   (text check → CEL parser → tree check → reads → rewrite → estimate),
//!   the parse cache, the large-stack thread;
//! - `text`: the length and bracket check on the raw text (a lexer's scanner);
//! - `tree`: the parsed tree's depth, the steps and variables it names, parse errors;
//! - `rewrite`: the meters inserted into the tree;
//! - `estimate`: the static cost estimate on save;
//! - `meter`: the meters at run time, the per-thread budget left;
//! - `pattern`: `matches` with a bounded, metered regex;
//! - `reads`: the parts of the run a condition reads, and their copy ([`Extract`]);
//! - `convert`: JSON to CEL values, counted;
//! - `eval`: evaluating against a run ([`CondVars`]);
//! - `error`: [`CondError`] and its messages.

// The budget stops an evaluation by unwinding out of the interpreter; with
// `panic = "abort"` that would abort the host instead.
#[cfg(panic = "abort")]
compile_error!("cond's budget unwinds out of the CEL interpreter: build with panic = \"unwind\"");

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use cel::Env;
use cel::common::ast::IdedExpr;
use cel::common::types::{DYN_TYPE, INT_TYPE};

mod convert;
mod error;
mod estimate;
mod eval;
mod meter;
mod pattern;
mod reads;
mod rewrite;
#[cfg(test)]
mod tests;
mod text;
mod tree;

pub use self::error::CondError;
use self::estimate::{static_steps, steps_outside_bodies};
pub use self::eval::CondVars;
use self::meter::{meter_copy, meter_lookup, meter_range, meter_read, meter_text};
use self::pattern::{Pattern, meter_matches, meter_matches_method};
pub use self::reads::Extract;
use self::reads::{Reads, collect_reads};
use self::rewrite::Rewrite;
use self::text::check_text;
use self::tree::{analyze, syntax_error};

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

    /// The fields of `input` the expression names as `input.NAME` (or
    /// `has(input.NAME)`), in name order, each with whether a path below it
    /// is read (`input.NAME.x`). Empty when `input` is read only whole or
    /// by a computed key (`input["a-b"]`), which names no field.
    pub fn referenced_input(&self) -> Vec<(String, bool)> {
        self.reads
            .input
            .fields
            .iter()
            .map(|(name, below)| (name.clone(), !below.full))
            .collect()
    }

    /// Whether the expression reads `input` whole: names it other than
    /// through `.NAME` (`input == {}`, `size(input)`, `input["a-b"]`), so
    /// every field of it may matter.
    pub fn reads_whole_input(&self) -> bool {
        self.reads.input.full
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
