//! Strategies the targets share: JSON values built from a target's field
//! names, text put together from a target's tokens, and text mutations.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Scalars that tend to sit on edges: zero, negatives, huge and fractional
/// numbers, empty, long and non-ASCII strings, durations, templates.
pub(crate) fn scalar(strings: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![
            Just(0.5f64),
            Just(-0.0),
            Just(1e300),
            Just(2158935532043897.0),
            any::<f64>()
        ]
        .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        proptest::sample::select(strings).prop_map(Value::from),
        proptest::sample::select(EDGE_STRINGS).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ]
    .boxed()
}

/// Strings every target gets among its values.
const EDGE_STRINGS: &[&str] = &[
    "",
    " ",
    "0",
    "-1",
    "1.5",
    "30s",
    "2m",
    "1h",
    "7d",
    "0s",
    "100000000000000000000s",
    "24h",
    "${bizDate}",
    "${input}",
    "${steps.a.output}",
    "$${",
    "${",
    "}",
    "a@1.0.0",
    "a",
    "A-b_c",
    "é",
    "\u{0}",
    "\u{202e}",
    "null",
    "true",
    "[]",
    "{}",
    "*",
    "&a",
    "*a",
    "<<",
];

/// An object with some of `fields`, each present with probability `weight`
/// and its value drawn from its strategy.
pub(crate) fn object(
    weight: f64,
    fields: Vec<(&'static str, BoxedStrategy<Value>)>,
) -> BoxedStrategy<Value> {
    let parts: Vec<BoxedStrategy<Option<(&'static str, Value)>>> = fields
        .into_iter()
        .map(|(k, v)| proptest::option::weighted(weight, v.prop_map(move |v| (k, v))).boxed())
        .collect();
    parts
        .prop_map(|pairs| {
            Value::Object(
                pairs
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            )
        })
        .boxed()
}

/// JSON trees whose object keys come from `keys` (mostly) and whose leaves
/// come from `strings` and the edge values.
pub(crate) fn json(
    keys: &'static [&'static str],
    strings: &'static [&'static str],
) -> BoxedStrategy<Value> {
    let key = prop_oneof![
        8 => proptest::sample::select(keys).prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
    ];
    scalar(strings)
        .prop_recursive(4, 48, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..8)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
            ]
        })
        .boxed()
}

/// One edit of a text or byte string, at a position taken modulo its length.
#[derive(Clone, Debug)]
pub(crate) enum Edit {
    /// Removes up to this many bytes.
    Delete(prop::sample::Index, usize),
    /// Inserts these bytes.
    Insert(prop::sample::Index, Vec<u8>),
    /// Replaces one byte.
    Set(prop::sample::Index, u8),
    /// Keeps only what comes before.
    Truncate(prop::sample::Index),
    /// Repeats a range of bytes in place, up to this many times.
    Repeat(prop::sample::Index, usize, usize),
}

/// Edits whose insertions come from `tokens` or are random bytes.
pub(crate) fn edits(tokens: &'static [&'static str], most: usize) -> BoxedStrategy<Vec<Edit>> {
    let insert = prop_oneof![
        3 => proptest::sample::select(tokens).prop_map(|t| t.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 1..8),
    ];
    let edit = prop_oneof![
        3 => (any::<prop::sample::Index>(), 1usize..16).prop_map(|(i, n)| Edit::Delete(i, n)),
        3 => (any::<prop::sample::Index>(), insert).prop_map(|(i, b)| Edit::Insert(i, b)),
        3 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        1 => any::<prop::sample::Index>().prop_map(Edit::Truncate),
        1 => (any::<prop::sample::Index>(), 1usize..32, 1usize..64).prop_map(|(i, n, k)| Edit::Repeat(i, n, k)),
    ];
    prop::collection::vec(edit, 1..=most).boxed()
}

/// `bytes` with the edits applied in order.
pub(crate) fn apply(bytes: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for edit in edits {
        let at = |i: &prop::sample::Index, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
        match edit {
            Edit::Delete(i, n) => {
                let start = at(i, out.len()).min(out.len());
                let end = (start + n).min(out.len());
                out.drain(start..end);
            }
            Edit::Insert(i, b) => {
                let start = at(i, out.len());
                out.splice(start..start, b.iter().copied());
            }
            Edit::Set(i, b) => {
                if !out.is_empty() {
                    let len = out.len();
                    out[i.index(len)] = *b;
                }
            }
            Edit::Truncate(i) => out.truncate(at(i, out.len())),
            Edit::Repeat(i, n, k) => {
                let start = at(i, out.len()).min(out.len());
                let end = (start + n).min(out.len());
                let piece = out[start..end].to_vec();
                for _ in 0..*k {
                    out.splice(end..end, piece.iter().copied());
                }
            }
        }
    }
    out
}

/// A text input: garbage, a seed from the corpus edited, or tokens joined.
#[derive(Clone, Debug)]
pub(crate) enum Text {
    /// Any string.
    Garbage(String),
    /// A corpus seed (by index) with edits.
    Mutated(prop::sample::Index, Vec<Edit>),
    /// Tokens concatenated.
    Tokens(Vec<&'static str>),
}

/// [`Text`] cases over a corpus and a token list.
pub(crate) fn text(tokens: &'static [&'static str]) -> BoxedStrategy<Text> {
    prop_oneof![
        1 => "\\PC{0,64}".prop_map(Text::Garbage),
        1 => any::<String>().prop_map(Text::Garbage),
        3 => (any::<prop::sample::Index>(), edits(tokens, 6)).prop_map(|(i, e)| Text::Mutated(i, e)),
        2 => prop::collection::vec(proptest::sample::select(tokens), 1..24).prop_map(Text::Tokens),
    ]
    .boxed()
}

impl Text {
    /// The text itself, seeds taken from `corpus` (lossy where an edit cut a
    /// UTF-8 sequence: the targets take `&str`, as the API does after
    /// checking the body is UTF-8).
    pub(crate) fn render(&self, corpus: &[Vec<u8>]) -> String {
        match self {
            Text::Garbage(s) => s.clone(),
            Text::Mutated(i, edits) => {
                String::from_utf8_lossy(&apply(&corpus[i.index(corpus.len())], edits)).into_owned()
            }
            Text::Tokens(t) => t.concat(),
        }
    }
}
