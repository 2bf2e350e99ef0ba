//! Text → JSON tree. YAML is read with serde-saphyr (YAML 1.2 booleans, bounded
//! aliases and nesting), JSON with serde_json when the text starts with `{`;
//! both go through one visitor that refuses duplicate keys and counts values.
//! This is the only place that parses text and the place of document-level
//! refusals (size, emptiness, alias bombs); the tree's fields are read, with
//! their paths, by `task::convert`.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::error::{Result, SpecError};
use super::{MAX_SPEC_BYTES, MAX_SPEC_NODES};

/// A JSON tree read through [`TreeSeed`]: duplicate keys refused, nodes counted.
pub(super) struct Tree(pub(super) Value);

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let nodes = Cell::new(0);
        TreeSeed { nodes: &nodes }.deserialize(d).map(Tree)
    }
}

/// Builds a `serde_json::Value` from any self-describing format, refusing
/// duplicate keys (serde_json would keep the last silently) and more than
/// [`MAX_SPEC_NODES`] values.
#[derive(Clone, Copy)]
struct TreeSeed<'n> {
    nodes: &'n Cell<usize>,
}

impl TreeSeed<'_> {
    fn count<E: de::Error>(self) -> Result<(), E> {
        let n = self.nodes.get() + 1;
        if n > MAX_SPEC_NODES {
            return Err(E::custom(format!(
                "more than {MAX_SPEC_NODES} values in one definition"
            )));
        }
        self.nodes.set(n);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for TreeSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TreeSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-compatible value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.count()?;
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a finite number")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// Reads YAML or JSON text into a JSON tree.
pub(super) fn read_tree(text: &str) -> Result<Value> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(SpecError::new(
            "",
            format!(
                "the definition is {} bytes; the limit is {MAX_SPEC_BYTES} (1 MiB)",
                text.len()
            ),
        ));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(SpecError::new("", "the definition is empty"));
    }
    if text.trim_start().starts_with('{') {
        return serde_json::from_str::<Tree>(text)
            .map(|t| t.0)
            .map_err(|e| SpecError::new("", format!("invalid JSON: {e}")));
    }
    let options = serde_saphyr::options! {
        // YAML 1.2 booleans only: `no`, `on`, `yes` stay strings (the Norway problem).
        strict_booleans: true,
        // Messages go into API responses: a location, not a multi-line snippet.
        with_snippet: false,
        // A real task has a few hundred values and no reason for many anchors;
        // these bounds sit far above that and far below what hurts the host.
        budget: serde_saphyr::budget! {
            max_events: 4 * MAX_SPEC_NODES,
            max_nodes: MAX_SPEC_NODES,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_recorded_anchor_events: MAX_SPEC_NODES,
            max_recorded_anchor_bytes: MAX_SPEC_BYTES,
            max_total_scalar_bytes: MAX_SPEC_BYTES,
            max_depth: 64,
            max_merge_keys: 100,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_SPEC_NODES,
            max_replay_stack_depth: 16,
            max_alias_expansions_per_anchor: 1_000,
        },
    };
    serde_saphyr::from_str_with_options::<Tree>(text, options)
        .map(|t| t.0)
        .map_err(|e| {
            // The user-facing wording drops hints meant for programmers
            // ("set DuplicateKeyPolicy in Options").
            let message = e.render_with_formatter(&serde_saphyr::UserMessageFormatter);
            SpecError::new("", format!("invalid YAML: {message}"))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::task::test_support::{CAPS, parse_err};
    use crate::task::{load, parse};

    #[test]
    fn json_is_detected_by_its_leading_brace() {
        let e = parse_err("  \n {\"name\": \"t\", \"plugin\": \"p@1.0.0\",}");
        assert!(e.message.starts_with("invalid JSON:"), "{e}");
        assert!(e.message.contains("line 2"), "{e}");
    }

    #[test]
    fn a_byte_order_mark_is_ignored() {
        assert!(parse("\u{feff}name: t\nplugin: p@1.0.0\n").is_ok());
    }

    #[test]
    fn yaml_1_1_booleans_stay_text() {
        // `no` is a name, not `false`; `on` is a key, not `true`.
        let spec = load("name: no\nplugin: p@1.0.0\ninput: {on: yes}\n", &CAPS).unwrap();
        assert_eq!(spec.name, "no");
        assert_eq!(spec.steps[0].input, json!({"on": "yes"}));
    }

    #[test]
    fn numbers_written_with_exponent_or_underscores_are_accepted() {
        let spec = load(
            "name: t\nplugin: p@1.0.0\nlimits: {fuel: 5e7, memory_mb: 1_28}\n",
            &CAPS,
        )
        .unwrap();
        assert_eq!(spec.steps[0].limits.fuel, Some(50_000_000));
        assert_eq!(spec.steps[0].limits.memory_mb, Some(128));
    }

    #[test]
    fn oversized_definition_is_refused_before_parsing() {
        let text = format!(
            "name: t\nplugin: p@1.0.0\ndescription: \"{}\"\n",
            "x".repeat(MAX_SPEC_BYTES)
        );
        let e = parse_err(&text);
        assert_eq!(e.path, "");
        assert!(e.message.contains("the limit is 1048576 (1 MiB)"), "{e}");
    }

    #[test]
    fn yaml_alias_bomb_is_refused() {
        let bomb = "
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
name: t
plugin: p@1.0.0
";
        let e = parse_err(bomb);
        assert_eq!(e.path, "");
        assert!(e.message.starts_with("invalid YAML:"), "{e}");
    }

    #[test]
    fn too_many_json_values_are_refused() {
        let list = vec!["0"; MAX_SPEC_NODES + 1].join(",");
        let e = parse_err(&format!(
            r#"{{"name": "t", "plugin": "p@1.0.0", "input": [{list}]}}"#
        ));
        assert!(e.message.contains("more than 100000 values"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!(
            "name: t\nplugin: p@1.0.0\ninput: {}1{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(parse_err(&deep).message.starts_with("invalid YAML"));
        let deep = format!(
            r#"{{"name": "t", "plugin": "p@1.0.0", "input": {}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(parse_err(&deep).message.starts_with("invalid JSON"));
    }

    #[test]
    fn duplicate_keys_are_refused_in_yaml_and_json() {
        let e = parse_err("name: a\nname: b\nplugin: p@1.0.0\n");
        assert!(e.message.contains("duplicate"), "{e}");
        assert!(e.message.contains("line 2"), "{e}");
        let e = parse_err(r#"{"name": "a", "plugin": "p@1.0.0", "input": {"k": 1, "k": 2}}"#);
        assert!(e.message.contains("duplicate key `k`"), "{e}");
    }

    #[test]
    fn empty_and_non_mapping_documents_are_refused() {
        assert_eq!(parse_err("").message, "the definition is empty");
        let e = parse_err("- a\n- b\n");
        assert_eq!(
            e.message,
            "a task definition is a mapping (name, trigger, steps…), found a list"
        );
        assert!(
            parse_err("---\nname: a\n---\nname: b\n")
                .message
                .starts_with("invalid YAML")
        );
        assert!(parse_err("name: [unclosed\n").message.contains("line 1"));
    }

    #[test]
    fn comment_only_document_is_refused() {
        let e = parse_err("# just a comment\n");
        assert_eq!(e.path, "");
        assert!(e.message.contains("found nothing"), "{e}");
    }
}
