//! The run's JSON converted to CEL values, borrowing its strings, counted
//! like building values and stopped past the budget left: only the parts a
//! condition reads ([`Trie`]) are converted.

use std::collections::HashMap;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;

use super::reads::{Trie, reads_too_large};
use super::{BYTES_PER_STEP, CondError, MAX_VALUE_DEPTH, VALUE_BYTES};

/// Converts JSON to CEL, borrowing its strings. Counts what it builds in
/// `w` and stops (with the reason) past `cap_steps` or `cap_bytes`.
/// Strings are borrowed, so they cost steps (to walk) but no bytes.
pub(super) struct Convert {
    pub(super) steps: u64,
    pub(super) bytes: u64,
    pub(super) cap_steps: u64,
    pub(super) cap_bytes: u64,
    /// The budget's steps, for the message.
    pub(super) limit: u64,
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
    pub(super) fn cut<'a>(
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
