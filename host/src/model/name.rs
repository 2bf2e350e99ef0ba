//! Names and versions: the one rule for what a task, step, pool, plugin or
//! tenant may be called, which plugin versions exist and what a plugin tag
//! may be called. Upload, tagging, task references, the API's path checks
//! and the capability grants all call these.

/// Longest task, step, pool, plugin or tenant name.
pub const MAX_NAME_LEN: usize = 64;

/// Whether `name` is a valid task, step, pool or plugin name:
/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.
pub fn is_valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && name.len() <= MAX_NAME_LEN
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether `version` is a semver 2.0 version: `MAJOR.MINOR.PATCH` (no
/// leading zeros), then optional `-pre.release` and `+build` identifiers.
pub fn is_valid_version(version: &str) -> bool {
    fn numeric(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    }
    fn idents(s: &str, pre: bool) -> bool {
        s.split('.').all(|id| {
            !id.is_empty()
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                // Numeric pre-release identifiers must not have leading zeros.
                && (!pre || !id.bytes().all(|b| b.is_ascii_digit()) || numeric(id))
        })
    }
    if version.is_empty() || version.len() > MAX_NAME_LEN {
        return false;
    }
    let (rest, build) = match version.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (version, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| numeric(p))
        && pre.is_none_or(|p| idents(p, true))
        && build.is_none_or(|b| idents(b, false))
}

/// Whether `tag` is a valid plugin tag (`plugin@stable`): a name by
/// [`is_valid_name`] that starts with a letter and does not read as a
/// version range (`x` and `X` are wildcards), so `plugin@TEXT` means one
/// thing only.
pub fn is_valid_tag(tag: &str) -> bool {
    is_valid_name(tag)
        && tag.starts_with(|c: char| c.is_ascii_alphabetic())
        && semver::VersionReq::parse(tag).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_versions_are_recognised() {
        for ok in [
            "0.0.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-rc.1",
            "1.0.0-alpha-1.0",
            "1.0.0+build.5",
            "1.0.0-0.3.7+exp.sha.5114f85",
        ] {
            assert!(is_valid_version(ok), "{ok}");
        }
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "v1.2.3",
            "1.02.3",
            "1.2.3-",
            "1.2.3-01",
            "1.2.3+",
            "1.2.3-a..b",
            "1.2.x",
        ] {
            assert!(!is_valid_version(bad), "{bad}");
        }
    }

    #[test]
    fn tags_are_names_that_start_with_a_letter_and_are_not_ranges() {
        for ok in ["stable", "latest", "canary", "prod-1", "v1", "beta.2", "a"] {
            assert!(is_valid_tag(ok), "{ok}");
        }
        for bad in [
            "", "1", "1.x", "x", "X", "1.2.3", "-a", "_a", "a b", "a/b", "^1",
        ] {
            assert!(!is_valid_tag(bad), "{bad}");
        }
        assert!(!is_valid_tag(&"a".repeat(MAX_NAME_LEN + 1)));
    }

    #[test]
    fn names_follow_the_charset() {
        for ok in ["a", "order_report", "A.b-c_9", "9lives", &"x".repeat(64)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "_a",
            "-a",
            ".a",
            "a b",
            "a/b",
            "é",
            &"x".repeat(65),
            "a@b",
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
