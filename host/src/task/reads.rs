//! Which fields of a trigger's input a task reads, so that a trigger sending
//! fields nothing reads is warned (issue 34: `--input '{"nmae": "x"}'` ran
//! with the default and said nothing).
//!
//! A top-level field `F` of the input is read when any of these names it:
//! - a step's `input:` template, as `${input.F}` or `${input.F.more}`;
//! - a step's `when:`, as `input.F` (or `has(input.F)`, `input.F.more`);
//! - the task's `params:` (a declared param is read by definition: it is the
//!   task's interface), or `upstream` on a task with an `after` trigger.
//!
//! A task that reads the input whole — `${input}` in a template, `input`
//! other than through `.F` in a `when:` (`size(input)`, `input["a-b"]`) —
//! reads every field. So does one whose template or condition does not
//! parse (a stored task always does; the rule errs toward no warning). An
//! input that is not a mapping names no fields and is never warned about.
//! Only where the text names the field counts: a plugin that reads a field of
//! `${input}` passed whole is covered by the first rule, and nothing else in
//! a task can read the input.

use std::collections::BTreeSet;

use serde_json::Value;

use super::types::TaskSpec;
use crate::cond::Condition;
use crate::model::hint::closest;
use crate::template::{self, VarRef};

/// What a task reads of its runs' input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputReads {
    /// All of it (`${input}`, or a condition reading `input` whole).
    Whole,
    /// These top-level fields, and no others.
    Fields(BTreeSet<String>),
}

impl TaskSpec {
    /// What this task reads of its runs' input; see the module docs.
    pub fn input_reads(&self) -> InputReads {
        let mut fields: BTreeSet<String> = self.params.iter().map(|p| p.name.clone()).collect();
        if self.fires_after() {
            fields.insert(super::UPSTREAM.to_owned());
        }
        for step in &self.steps {
            let Ok(refs) = template::references(&step.input) else {
                return InputReads::Whole;
            };
            for var in refs {
                if let VarRef::Input(path) = var {
                    match path.into_iter().next() {
                        Some(field) => fields.insert(field),
                        None => return InputReads::Whole,
                    };
                }
            }
            if let Some(when) = &step.when {
                let Ok(cond) = Condition::parse_cached(when) else {
                    return InputReads::Whole;
                };
                if cond.reads_whole_input() {
                    return InputReads::Whole;
                }
                fields.extend(cond.referenced_input().into_iter().map(|(f, _)| f));
            }
        }
        InputReads::Fields(fields)
    }

    /// The top-level fields of `input` this task never reads, in name order;
    /// empty when it reads them all, reads the input whole, or the input is
    /// not a mapping.
    pub fn unread_input(&self, input: &Value) -> Vec<String> {
        let Value::Object(map) = input else {
            return Vec::new();
        };
        match self.input_reads() {
            InputReads::Whole => Vec::new(),
            InputReads::Fields(read) => map
                .keys()
                .filter(|k| !read.contains(k.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// The warning for a trigger whose `input` has fields this task never
    /// reads: the sentence naming them (with the field it may have meant),
    /// and the fields; `None` when every field is read.
    pub fn unread_input_warning(&self, input: &Value) -> Option<(String, Vec<String>)> {
        let unread = self.unread_input(input);
        if unread.is_empty() {
            return None;
        }
        let read = match self.input_reads() {
            InputReads::Fields(read) => read,
            InputReads::Whole => BTreeSet::new(),
        };
        let named: Vec<String> = unread
            .iter()
            .map(|f| {
                let f = template::shorten(f);
                match closest(&f, read.iter().map(String::as_str)) {
                    Some(best) => format!("`{f}` (did you mean `{best}`?)"),
                    None => format!("`{f}`"),
                }
            })
            .collect();
        let reads = if read.is_empty() {
            "it reads no input field".to_owned()
        } else {
            let list: Vec<String> = read.iter().map(|f| format!("`{f}`")).collect();
            format!("it reads {}", list.join(", "))
        };
        let message = format!(
            "task `{}` never reads input {} {}: no step's `input:` (`${{input.NAME}}`) or \
             `when:` (`input.NAME`) names {}, and no param declares {}; {reads}",
            self.name,
            if unread.len() == 1 { "field" } else { "fields" },
            named.join(", "),
            if unread.len() == 1 { "it" } else { "them" },
            if unread.len() == 1 { "it" } else { "them" },
        );
        Some((message, unread))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn task(yaml: &str) -> TaskSpec {
        crate::task::parse(yaml).unwrap()
    }

    #[test]
    fn fields_named_by_templates_conditions_and_params_are_read() {
        let t = task(
            "name: t\nsteps:\n  - name: a\n    plugin: p@1.0.0\n    \
             input: { who: \"hi ${input.name}\", deep: \"${input.cfg.x}\" }\n  \
             - name: b\n    plugin: p@1.0.0\n    when: \"input.n > 1 && has(input.flag)\"\n",
        );
        assert_eq!(
            t.input_reads(),
            InputReads::Fields(["cfg", "flag", "n", "name"].map(String::from).into())
        );
        let input = json!({ "name": "x", "n": 2, "nmae": "y", "zzz": 1 });
        assert_eq!(t.unread_input(&input), ["nmae", "zzz"]);
        let (message, fields) = t.unread_input_warning(&input).unwrap();
        assert_eq!(fields, ["nmae", "zzz"]);
        assert!(
            message.contains("never reads input fields `nmae` (did you mean `name`?), `zzz`"),
            "{message}"
        );
        assert!(t.unread_input_warning(&json!({ "name": "x" })).is_none());
    }

    #[test]
    fn a_task_reading_the_whole_input_reads_every_field() {
        for yaml in [
            "name: t\nplugin: p@1.0.0\ninput: \"${input}\"\n",
            "name: t\nplugin: p@1.0.0\ninput: { all: \"${input}\" }\n",
            "name: t\nsteps:\n  - name: a\n    plugin: p@1.0.0\n    when: \"size(input) > 0\"\n",
        ] {
            let t = task(yaml);
            assert_eq!(t.input_reads(), InputReads::Whole, "{yaml}");
            assert!(t.unread_input(&json!({ "anything": 1 })).is_empty());
        }
    }

    #[test]
    fn a_task_that_reads_nothing_warns_about_every_field_but_not_about_non_mappings() {
        let t = task("name: t\nplugin: p@1.0.0\ninput: { name: ax }\n");
        let (message, fields) = t.unread_input_warning(&json!({ "name": "boom" })).unwrap();
        assert_eq!(fields, ["name"]);
        assert!(message.ends_with("it reads no input field"), "{message}");
        assert!(t.unread_input(&json!([1, 2])).is_empty());
        assert!(t.unread_input(&json!({})).is_empty());
    }

    #[test]
    fn declared_params_count_as_read() {
        let t = task(
            "name: t\nparams:\n  - { name: day, type: string, default: x }\nplugin: p@1.0.0\n",
        );
        assert!(t.unread_input(&json!({ "day": "y" })).is_empty());
    }
}
