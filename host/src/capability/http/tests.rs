//! What the tests of every part write: a pattern and a destination from text.

use super::{Destination, HttpPattern};

pub(super) fn p(text: &str) -> HttpPattern {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

pub(super) fn dest(url: &str) -> Destination {
    let (scheme, authority) = url.split_once("://").unwrap();
    Destination::parse(scheme, authority).unwrap()
}
