//! [`SpecError`]: the one error of reading and validating a task definition,
//! located by the path of its field in the document (`steps[1].limits.fuel`).

/// A definition error, located by its path in the document: `steps[1].limits.fuel`,
/// `trigger.cron`, or `""` for the document as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", path_prefix(path))]
pub struct SpecError {
    /// Where: dotted fields and `[index]` for list items; empty for the whole document.
    pub path: String,
    /// What is wrong, naming the offending value.
    pub message: String,
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

impl SpecError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A result whose error is a [`SpecError`].
pub(super) type Result<T, E = SpecError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_error_without_path_displays_its_message_only() {
        assert_eq!(SpecError::new("", "bad").to_string(), "bad");
        assert_eq!(SpecError::new("a.b", "bad").to_string(), "a.b: bad");
    }
}
