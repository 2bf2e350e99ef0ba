//! Identifiers that cross module boundaries, as types: a run id cannot be
//! passed where a task name is expected, and a `(tenant, task)` pair is one
//! [`TaskKey`], not a tuple of two strings in some order.
//!
//! Each is a `String` inside, serialized as that string (`#[serde(transparent)]`),
//! so records on disk and JSON on the wire are unchanged. They deref to `str`
//! and borrow as `str`, so maps keyed by them are looked up with a `&str`.
//! What a valid name is stays [`super::name`]'s rule: these types carry a
//! value that came through it, they do not check it again.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a value already checked where it entered ax.
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }

            /// The text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self(value)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }

        impl From<&$name> for String {
            fn from(value: &$name) -> String {
                value.0.clone()
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == &other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

string_id!(
    /// A run's id: `r` + creation instant and a counter in hex, so ids sort
    /// by creation (`store::new_id`).
    RunId
);
string_id!(
    /// A tenant's name.
    TenantId
);
string_id!(
    /// A task's name, unique within its tenant.
    TaskName
);

/// A task of a tenant: the key of task records, schedules, timers and
/// retention policies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskKey {
    /// The tenant.
    pub tenant: TenantId,
    /// The task.
    pub task: TaskName,
}

impl TaskKey {
    /// The key of `task` of `tenant`.
    pub fn new(tenant: impl Into<String>, task: impl Into<String>) -> Self {
        Self {
            tenant: TenantId::new(tenant),
            task: TaskName::new(task),
        }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.task)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn ids_serialize_as_their_text_and_look_up_by_str() {
        let id = RunId::new("r0001");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"r0001\"");
        let back: RunId = serde_json::from_str("\"r0001\"").unwrap();
        assert_eq!(back, id);
        let mut map = HashMap::new();
        map.insert(id.clone(), 1);
        assert_eq!(map.get("r0001"), Some(&1));
        assert_eq!(id, "r0001");
        assert_eq!(id.len(), 5, "derefs to str");
    }

    #[test]
    fn task_keys_order_by_tenant_then_task() {
        let mut keys = [
            TaskKey::new("b", "a"),
            TaskKey::new("a", "z"),
            TaskKey::new("a", "b"),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["a/b", "a/z", "b/a"]);
    }
}
