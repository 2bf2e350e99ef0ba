//! A stored task definition, shared: its JSON, its digest and its typed form,
//! each worked out once for every record that holds it.
//!
//! A task record and every run made from it hold one [`Definition`] (a
//! pointer; cloning a run at each write does not copy it), and a store
//! reading runs back gives the runs of one definition the same one
//! (sled's `definitions.rs`). What is derived from the JSON is kept beside
//! it the first time it is asked for:
//! - the digest ([`Definition::digest`]), the sha256 of its JSON, which
//!   stores name a definition by (sled's `def/{digest}`, PostgreSQL's
//!   `spec_digest`), so a write does not encode and hash it again;
//! - the typed form, [`TaskSpec`](crate::task::TaskSpec), which lives in a
//!   layer above this one (`task` names `model`, not the reverse). It is
//!   held here without its type ([`Definition::typed`]) and read through
//!   `TaskSpec::stored`, so a scheduler, a service or a retention sweep
//!   reading a run's definition parses it once, not once per run and call.
//!
//! Serialised as the JSON itself, so records on disk and on the wire are
//! unchanged; equal when the JSON is.

use std::any::Any;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock, Weak};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::digest::digest_of;

/// A task definition as stored (see the module comment). Cheap to clone.
#[derive(Clone, Default)]
pub struct Definition(Arc<Held>);

#[derive(Default)]
struct Held {
    json: Value,
    digest: OnceLock<String>,
    typed: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl Definition {
    /// A definition of this JSON (a validated `TaskSpec` as JSON, or what a
    /// store read back).
    pub fn new(json: Value) -> Self {
        Self(Arc::new(Held {
            json,
            ..Held::default()
        }))
    }

    /// The JSON.
    pub fn json(&self) -> &Value {
        &self.0.json
    }

    /// The sha256 of the JSON's compact encoding (`serde_json::to_vec`), in
    /// lower-case hex, computed once.
    pub fn digest(&self) -> &str {
        self.0.digest.get_or_init(|| {
            // A `Value` always encodes: its map keys are strings.
            let bytes = serde_json::to_vec(&self.0.json).unwrap_or_default();
            digest_of(&bytes)
        })
    }

    /// The digest if it was computed already.
    pub fn known_digest(&self) -> Option<&str> {
        self.0.digest.get().map(String::as_str)
    }

    /// The typed form `parse` makes of the JSON, made once and kept: the
    /// first call parses, the others clone what it kept (two threads asking
    /// at once may both parse; one result is kept). Only one type is kept
    /// (the `task` layer's); asked for another, this parses without keeping.
    pub fn typed<T: Any + Send + Sync + Clone>(&self, parse: impl FnOnce(&Value) -> T) -> T {
        if let Some(kept) = self.0.typed.get().and_then(|held| held.downcast_ref::<T>()) {
            return kept.clone();
        }
        let value = parse(&self.0.json);
        // Refused when another call kept its result first: nothing to do.
        let _ = self.0.typed.set(Arc::new(value.clone()));
        value
    }

    /// Whether `a` and `b` are the same definition in memory (not only
    /// equal): records made from one another share it.
    pub fn same(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// A handle that does not keep the definition alive (a store's cache of
    /// the definitions its records hold).
    pub fn downgrade(&self) -> WeakDefinition {
        WeakDefinition(Arc::downgrade(&self.0))
    }
}

/// A [`Definition`] that is not kept alive by this handle.
#[derive(Clone)]
pub struct WeakDefinition(Weak<Held>);

impl WeakDefinition {
    /// The definition, while any record still holds it.
    pub fn upgrade(&self) -> Option<Definition> {
        self.0.upgrade().map(Definition)
    }

    /// Whether no record holds the definition any more.
    pub fn is_dropped(&self) -> bool {
        self.0.strong_count() == 0
    }
}

impl Deref for Definition {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.0.json
    }
}

impl AsRef<Value> for Definition {
    fn as_ref(&self) -> &Value {
        &self.0.json
    }
}

impl From<Value> for Definition {
    fn from(json: Value) -> Self {
        Self::new(json)
    }
}

impl PartialEq for Definition {
    fn eq(&self, other: &Self) -> bool {
        Definition::same(self, other) || self.0.json == other.0.json
    }
}

impl fmt::Debug for Definition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0.json, f)
    }
}

impl Serialize for Definition {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.json.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Definition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_digest_is_the_sha256_of_the_compact_json() {
        let json = json!({"steps": [{"name": "a", "plugin": "p@1"}], "description": "d"});
        let def = Definition::new(json.clone());
        assert_eq!(def.known_digest(), None);
        assert_eq!(def.digest(), digest_of(&serde_json::to_vec(&json).unwrap()));
        assert_eq!(def.known_digest(), Some(def.digest()));
    }

    #[test]
    fn the_typed_form_is_parsed_once_and_shared_by_clones() {
        let def = Definition::new(json!({"n": 3}));
        let copy = def.clone();
        let mut parses = 0;
        let mut parse = |json: &Value| {
            parses += 1;
            Arc::new(json["n"].as_u64().unwrap())
        };
        let a: Arc<u64> = def.typed(&mut parse);
        let b: Arc<u64> = copy.typed(&mut parse);
        assert_eq!(parses, 1);
        assert!(Arc::ptr_eq(&a, &b));
        // Another type is parsed each time, not kept over the first.
        let s: String = def.typed(|json| json.to_string());
        assert_eq!(s, r#"{"n":3}"#);
        let c: Arc<u64> = def.typed(|_| unreachable!("kept"));
        assert!(Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn it_serialises_as_its_json_and_compares_by_it() {
        let json = json!({"steps": [], "b": [1, 2]});
        let def = Definition::new(json.clone());
        assert_eq!(serde_json::to_value(&def).unwrap(), json);
        let back: Definition = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, def);
        assert!(!Definition::same(&back, &def));
        assert!(Definition::same(&def.clone(), &def));
        assert_ne!(Definition::new(json!({})), def);
    }

    #[test]
    fn a_weak_handle_lets_the_definition_go() {
        let def = Definition::new(json!(1));
        let weak = def.downgrade();
        assert!(weak.upgrade().is_some_and(|d| Definition::same(&d, &def)));
        drop(def);
        assert!(weak.is_dropped());
        assert!(weak.upgrade().is_none());
    }
}
