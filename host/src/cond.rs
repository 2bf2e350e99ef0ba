//! `when` conditions: side-effect-free CEL expressions (the `cel` crate)
//! deciding whether a step runs.
//!
//! This module owns the bounds a condition must meet, its parsing, the step
//! names it reads (for validation on save) and its evaluation against a run's
//! state. It does not decide what a false condition or an evaluation error
//! does to the step (the scheduler does), nor which steps are upstream
//! ([`crate::task`] checks [`Condition::referenced_steps`] against the DAG).
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
//! - parsing and evaluation run on a thread of their own with a stack sized
//!   for the worst case those bounds allow, several times over, so the
//!   caller's stack does not matter.
//!
//! Unary chains (`!!!!x`, `----1`) are folded by the parser and cost
//! nothing. Evaluation time still grows with the data a condition walks
//! (a macro over a list, `in` on a list): only the size of the expression is
//! bounded, not the work per byte of step output.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, MapExpr, StructExpr, operators};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::{Context, Env, ExecutionError, ParseErrors, Program, Value};

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

/// Stack for the parsing thread. The parser stops by itself at 96 bracket
/// levels, which needs ~17 MiB in a debug build; the text check allows 32
/// (~6 MiB). Only touched pages are committed, so a large size costs nothing.
const PARSE_STACK: usize = 64 << 20;
/// Stack for the evaluation thread: [`MAX_EXPR_DEPTH`] levels need ~2.5 MiB
/// in a debug build, converting JSON values very little.
const EVAL_STACK: usize = 16 << 20;
/// Longest CEL message kept in an error (messages may quote whole values).
const MAX_MESSAGE_CHARS: usize = 240;

/// The standard CEL environment, built once (it registers every function
/// overload). Optional syntax (`a.?b`) is off: conditions do not need it.
static ENV: LazyLock<Arc<Env>> =
    LazyLock::new(|| Arc::new(Env::stdlib().with_optional_support(false)));

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
    /// The host could not run the check (no thread could be started, or the
    /// CEL library panicked). Not the condition's fault.
    #[error("could not be checked: {0}")]
    Internal(String),
}

/// A parsed, bounded condition. Cheap to clone: the program is shared.
#[derive(Clone)]
pub struct Condition {
    /// The text, for messages and `Debug`.
    source: Arc<str>,
    /// The compiled CEL program; `Arc` because `cel::Program` is not `Clone`.
    program: Arc<Program>,
    /// Steps read as `steps.NAME` / `steps["NAME"]`, in order, each once.
    /// The only steps put into `steps` at evaluation time.
    steps: Vec<String>,
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
    /// then [`MAX_EXPR_DEPTH`] on the parsed tree) and parses. `steps` may
    /// only be used to name a step (`steps.NAME`, `steps["NAME"]`), so every
    /// step a condition reads is known before it runs. Never panics or
    /// overflows the stack, whatever the input: parsing runs on a thread of
    /// its own.
    pub fn parse(expr: &str) -> Result<Self, CondError> {
        check_text(expr)?;
        let (program, found) = on_own_stack(PARSE_STACK, || {
            let program = ENV.compile(expr).map_err(|e| syntax_error(&e))?;
            // A rejected tree is dropped here, on the large stack.
            let found = analyze(program.expression())?;
            Ok((program, found))
        })?;
        Ok(Self {
            source: expr.into(),
            program: Arc::new(program),
            steps: found.steps,
            uses_input: found.uses_input,
            uses_run: found.uses_run,
        })
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

    /// Evaluates against the run's state. Anything but a bool is
    /// [`CondError::NotBool`]; a missing field or a type mismatch is
    /// [`CondError::Eval`] with the CEL message (never silently false).
    /// Runs on a thread of its own, like [`Condition::parse`], and blocks
    /// until done: typically well under a millisecond, longer only for a
    /// macro or `in` over a large output.
    pub fn eval(&self, vars: &CondVars<'_>) -> Result<bool, CondError> {
        on_own_stack(EVAL_STACK, || self.eval_here(vars))
    }

    fn eval_here(&self, vars: &CondVars<'_>) -> Result<bool, CondError> {
        let mut ctx = Context::with_env(Arc::clone(&ENV));
        if !self.steps.is_empty() {
            let mut map: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = HashMap::new();
            for name in &self.steps {
                // A step missing from `vars` stays missing: reading it is an
                // evaluation error naming it.
                if let Some((name, status, output)) = vars.steps.iter().find(|s| s.0 == name) {
                    let output = match output {
                        Some(v) => json_to_val(v, 1)?,
                        None => Box::new(CelNull),
                    };
                    let step: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = HashMap::from([
                        (
                            CelMapKey::from("status"),
                            Box::new(CelString::from(*status)) as Box<dyn Val>,
                        ),
                        (CelMapKey::from("output"), output),
                    ]);
                    map.insert(CelMapKey::from(*name), Box::new(CelMap::from(step)));
                }
            }
            ctx.add_variable_as_val("steps", Box::new(CelMap::from(map)));
        }
        if self.uses_input {
            ctx.add_variable_as_val("input", json_to_val(vars.input, 1)?);
        }
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
        match self.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CondError::NotBool(describe(&other))),
            Err(e) => Err(CondError::Eval(eval_message(&e))),
        }
    }
}

/// Runs `f` on a new thread with a `stack`-byte stack and waits for it. The
/// CEL library recurses deeply (see the module docs): the caller's own stack
/// — 2 MiB on a tokio worker — is not enough for what the bounds allow.
fn on_own_stack<T: Send>(
    stack: usize,
    f: impl FnOnce() -> Result<T, CondError> + Send,
) -> Result<T, CondError> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("ax-cond".to_owned())
            .stack_size(stack)
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
// Evaluation

/// Converts JSON to a CEL value borrowing its strings: whole numbers become
/// `int` (or `uint` above `i64::MAX`), others `double`.
fn json_to_val(v: &serde_json::Value, depth: usize) -> Result<Box<dyn Val + '_>, CondError> {
    use serde_json::Value as J;
    if depth > MAX_VALUE_DEPTH {
        return Err(CondError::Eval(format!(
            "a value nests more than {MAX_VALUE_DEPTH} levels deep"
        )));
    }
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
        J::String(s) => Box::new(CelString::from(s.as_str())),
        J::Array(items) => Box::new(CelList::from(
            items
                .iter()
                .map(|item| json_to_val(item, depth + 1))
                .collect::<Result<Vec<_>, _>>()?,
        )),
        J::Object(fields) => Box::new(CelMap::from(
            fields
                .iter()
                .map(|(k, v)| Ok((CelMapKey::from(k.as_str()), json_to_val(v, depth + 1)?)))
                .collect::<Result<HashMap<_, _>, CondError>>()?,
        )),
    })
}

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
        let docs = include_str!("../../docs/TASKS.md");
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
                Ok(cond) => match with_run(|v| cond.eval(v)) {
                    Ok(_) => "bool",
                    Err(CondError::NotBool(_)) => "not bool",
                    Err(CondError::Eval(_)) => "eval error",
                    Err(e) => panic!("{text}: eval gave {e:?}"),
                },
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
    fn condition_is_clone_send_and_sync() {
        fn check<T: Clone + Send + Sync + fmt::Debug>() {}
        check::<Condition>();
        let c = Condition::parse("input.x == 'y'").unwrap();
        assert_eq!(c.clone().source(), "input.x == 'y'");
        assert!(format!("{c:?}").contains("input.x"));
    }
}
