//! The tenant ceiling: a task may only narrow its tenant's allow-list, and
//! a destination named outside any step (an alert webhook) must be granted
//! by one of the tenant's patterns.

use super::pattern::find_match;
use super::{Destination, HttpPattern};

/// A task may only narrow its tenant's allow-list: every pattern of `step` must
/// be covered by one pattern of `ceiling`. The error names the first pattern
/// that is not, and what the tenant allows.
pub fn within_ceiling(ceiling: &[HttpPattern], step: &[HttpPattern]) -> Result<(), String> {
    for pattern in step {
        if !ceiling.iter().any(|c| c.covers(pattern)) {
            return Err(format!(
                "`{pattern}` is outside the tenant's allow-list: {}",
                what_ceiling_allows(ceiling)
            ));
        }
    }
    Ok(())
}

/// The tenant pattern granting one destination a task names outside any
/// step (an alert webhook): the first of `ceiling` matching it. The error
/// reads like [`within_ceiling`]'s. (For a destination, "a ceiling pattern
/// matches it" and "covers its [`HttpPattern::exact`]" are the same rule.)
pub fn granting<'a>(
    ceiling: &'a [HttpPattern],
    dest: &Destination,
) -> Result<&'a HttpPattern, String> {
    find_match(ceiling, dest).ok_or_else(|| {
        format!(
            "`{}` is outside the tenant's allow-list: {}",
            HttpPattern::exact(dest),
            what_ceiling_allows(ceiling)
        )
    })
}

fn what_ceiling_allows(ceiling: &[HttpPattern]) -> String {
    if ceiling.is_empty() {
        "the tenant allows no outbound HTTP".to_owned()
    } else {
        format!(
            "the tenant allows only {}",
            ceiling
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::http::tests::p;

    #[test]
    fn ceiling_allows_narrowing() {
        let ceiling = [
            p("https://*.example.com"),
            p("http://127.0.0.1:*"),
            p("https://hooks.chat.io"),
        ];
        for narrower in [
            "https://api.example.com",
            "https://a.b.example.com",
            "https://*.eu.example.com",
            "https://*.example.com",
            "http://127.0.0.1:8080",
            "http://127.0.0.1:*",
            "https://hooks.chat.io:443",
        ] {
            within_ceiling(&ceiling, &[p(narrower)]).unwrap_or_else(|e| panic!("{narrower}: {e}"));
        }
        assert!(within_ceiling(&ceiling, &[]).is_ok());
    }

    #[test]
    fn ceiling_refuses_widening_and_names_the_pattern() {
        let ceiling = [p("https://*.example.com"), p("http://127.0.0.1:8080")];
        for wider in [
            "https://example.com",
            "http://api.example.com",
            "https://api.example.com:8443",
            "https://*.com.example",
            "http://127.0.0.1:*",
            "http://127.0.0.1:9090",
            "http://localhost:8080",
            "https://evil.net",
        ] {
            let err =
                within_ceiling(&ceiling, &[p("https://api.example.com"), p(wider)]).unwrap_err();
            assert!(err.contains(&format!("`{}`", p(wider))), "{wider}: {err}");
            assert!(err.contains("`https://*.example.com`"), "{err}");
        }
        let err = within_ceiling(&[], &[p("https://a.example.com")]).unwrap_err();
        assert!(err.contains("allows no outbound HTTP"), "{err}");
    }

    #[test]
    fn exact_port_ceiling_covers_the_default_port_spelled_out() {
        let ceiling = [p("https://api.example.com:443")];
        assert!(within_ceiling(&ceiling, &[p("https://api.example.com")]).is_ok());
        let ceiling = [p("https://api.example.com")];
        assert!(within_ceiling(&ceiling, &[p("https://api.example.com:443")]).is_ok());
        assert!(within_ceiling(&ceiling, &[p("https://api.example.com:*")]).is_err());
    }

    #[test]
    fn a_destination_is_granted_by_the_ceiling_pattern_matching_it() {
        let ceiling = [p("https://*.example.com"), p("http://127.0.0.1:*")];
        let d = Destination::from_url("https://hooks.example.com/x").unwrap();
        assert_eq!(granting(&ceiling, &d).unwrap(), &ceiling[0]);
        let d = Destination::from_url("http://127.0.0.1:9/x").unwrap();
        assert_eq!(granting(&ceiling, &d).unwrap(), &ceiling[1]);
        for outside in [
            "http://127.0.0.2:9",
            "http://[::1]:9",
            "http://localhost:9",
            "https://example.com",
        ] {
            let d = Destination::from_url(outside).unwrap();
            let err = granting(&ceiling, &d).unwrap_err();
            assert!(
                err.contains("outside the tenant's allow-list"),
                "{outside}: {err}"
            );
            // The same answer the ceiling gives for the destination's own pattern.
            assert!(within_ceiling(&ceiling, &[HttpPattern::exact(&d)]).is_err());
        }
        let d = Destination::from_url("http://127.0.0.1:80").unwrap();
        assert!(
            granting(&[], &d)
                .unwrap_err()
                .contains("allows no outbound HTTP")
        );
    }
}
