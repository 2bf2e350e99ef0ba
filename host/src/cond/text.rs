//! The text check that runs before the CEL parser sees a condition: its
//! length ([`MAX_LEN`]) and bracket nesting ([`MAX_DEPTH`]), counted by a
//! scanner that delimits string literals, numbers and comments exactly as
//! CEL's lexer does (a mistake here could hide brackets from the count),
//! and the positions (line, column) messages quote.

use super::{CondError, MAX_DEPTH, MAX_LEN};

/// Checks length and bracket nesting on the raw text, skipping string
/// literals and `//` comments exactly as CEL's lexer delimits them (a
/// mistake here could hide brackets from the count).
pub(super) fn check_text(expr: &str) -> Result<(), CondError> {
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
pub(super) fn position(line: usize, col: usize) -> String {
    if line == 1 {
        format!("at column {col}")
    } else {
        format!("at line {line}, column {col}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cond::Condition;
    use crate::cond::tests::eval;

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
}
