//! The pattern grammar (see the module docs): reading and writing
//! [`HttpPattern`]s and [`Destination`]s, and matching a destination
//! against a pattern or a list, or a pattern against a wider one.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    Destination, HostPattern, HttpPattern, MAX_PATTERN_LEN, MAX_PATTERNS, PortPattern, Scheme,
};

impl FromStr for HttpPattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.len() > MAX_PATTERN_LEN {
            return Err(format!("a pattern is at most {MAX_PATTERN_LEN} bytes long"));
        }
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!(
                "`{text}` is not `scheme://host[:port]` (e.g. `https://api.example.com`, `http://127.0.0.1:*`)"
            ));
        };
        let scheme = Scheme::parse(scheme).ok_or_else(|| {
            format!("`{text}`: the scheme must be `http` or `https`, not `{scheme}`")
        })?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if let Some(bad) = rest.find(['/', '?', '#', '@']) {
            return Err(format!(
                "`{text}`: a pattern names a destination only (scheme, host, port); remove `{}`",
                &rest[bad..]
            ));
        }
        let (host, port) = split_host_port(rest).map_err(|e| format!("`{text}`: {e}"))?;
        let port = match port {
            None => PortPattern::Exact(scheme.default_port()),
            Some("*") => PortPattern::Any,
            Some(p) => PortPattern::Exact(parse_port(p).map_err(|e| format!("`{text}`: {e}"))?),
        };
        let host = parse_host_pattern(host).map_err(|e| format!("`{text}`: {e}"))?;
        Ok(HttpPattern { scheme, host, port })
    }
}

/// Splits `host[:port]`, with IPv6 literals in brackets.
fn split_host_port(text: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(inner) = text.strip_prefix('[') {
        let Some(end) = inner.find(']') else {
            return Err("an IPv6 address needs its closing `]`".into());
        };
        let host = &inner[..end];
        let after = &inner[end + 1..];
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("unexpected `{after}` after the address")),
        };
    }
    match text.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => {
            Err("write an IPv6 address in brackets, e.g. `http://[::1]:8080`".into())
        }
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((text, None)),
    }
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(p) if p > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(format!("`{text}` is not a port (1-65535 or `*`)")),
    }
}

fn parse_host_pattern(text: &str) -> Result<HostPattern, String> {
    if text.is_empty() {
        return Err("the host is missing".into());
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(HostPattern::Ip(ip));
    }
    if let Some(domain) = text.strip_prefix("*.") {
        let domain = check_name(domain)?;
        if domain.split('.').count() < 2 {
            return Err(format!(
                "`*.{domain}` would allow a whole top-level domain; name at least two labels (`*.example.com`)"
            ));
        }
        return Ok(HostPattern::Under(domain));
    }
    if text.contains('*') {
        return Err(
            "a wildcard is only allowed as the whole leftmost label (`*.example.com`)".into(),
        );
    }
    Ok(HostPattern::Name(check_name(text)?))
}

/// A DNS name: labels of letters, digits and `-` (not at either end), at most
/// 63 bytes each and 253 in all, without a trailing dot. Returns it
/// lower-cased. The one check of a host name, for patterns and destinations
/// (webhook URLs, plugin requests) alike.
fn check_name(text: &str) -> Result<String, String> {
    if text.len() > 253 {
        return Err("the host name is longer than 253 bytes".into());
    }
    // The module docs ("Trailing dots") say why this is refused, not trimmed.
    if let Some(bare) = text.strip_suffix('.') {
        return Err(format!(
            "`{text}` ends in a dot: a trailing dot is refused (ax does not read a fully-qualified name as the bare one); write `{bare}`"
        ));
    }
    for label in text.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!("`{text}` is not a valid host name"));
        }
    }
    Ok(text.to_ascii_lowercase())
}

impl fmt::Display for HttpPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            HostPattern::Name(n) => write!(f, "{n}")?,
            HostPattern::Under(d) => write!(f, "*.{d}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        match self.port {
            PortPattern::Any => write!(f, ":*"),
            PortPattern::Exact(p) if p == self.scheme.default_port() => Ok(()),
            PortPattern::Exact(p) => write!(f, ":{p}"),
        }
    }
}

impl Serialize for HttpPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HttpPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Destination {
    /// Reads the destination of a request from its scheme and authority
    /// (`host[:port]`, IPv6 in brackets).
    pub fn parse(scheme: &str, authority: &str) -> Result<Destination, String> {
        let scheme = Scheme::parse(scheme)
            .ok_or_else(|| format!("the scheme `{scheme}` is not allowed (http or https only)"))?;
        if authority.contains('@') {
            return Err("user info in the URL is not allowed".into());
        }
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            None => scheme.default_port(),
            Some(p) => parse_port(p)?,
        };
        if host.is_empty() {
            return Err("the URL has no host".into());
        }
        let host = match host.parse::<IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => check_name(host)?,
        };
        Ok(Destination { scheme, host, port })
    }

    /// Reads the destination of a whole URL (`scheme://authority[/path…]`),
    /// as a webhook is written.
    pub fn from_url(url: &str) -> Result<Destination, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err("the URL has no scheme (http:// or https://)".into());
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        Destination::parse(scheme, authority)
    }

    /// The host as an address, when it is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip() {
            Some(IpAddr::V6(ip)) => write!(f, "{}://[{ip}]:{}", self.scheme.as_str(), self.port),
            _ => write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port),
        }
    }
}

impl HttpPattern {
    /// The pattern granting exactly `dest`: its scheme, host (name or
    /// address) and port. What a destination the admin wrote down grants
    /// itself (the admin's own alert webhooks).
    pub fn exact(dest: &Destination) -> HttpPattern {
        HttpPattern {
            scheme: dest.scheme,
            host: match dest.ip() {
                Some(ip) => HostPattern::Ip(ip),
                None => HostPattern::Name(dest.host.clone()),
            },
            port: PortPattern::Exact(dest.port),
        }
    }

    /// Whether this pattern allows `dest` (before any address check).
    pub fn matches(&self, dest: &Destination) -> bool {
        if self.scheme != dest.scheme {
            return false;
        }
        if let PortPattern::Exact(p) = self.port
            && p != dest.port
        {
            return false;
        }
        match &self.host {
            HostPattern::Ip(ip) => dest.ip() == Some(*ip),
            HostPattern::Name(name) => dest.ip().is_none() && *name == dest.host,
            HostPattern::Under(domain) => {
                dest.ip().is_none()
                    && dest.host.len() > domain.len() + 1
                    && dest.host.ends_with(domain.as_str())
                    && dest.host.as_bytes()[dest.host.len() - domain.len() - 1] == b'.'
            }
        }
    }

    /// Whether this pattern allows everything `other` allows.
    pub fn covers(&self, other: &HttpPattern) -> bool {
        if self.scheme != other.scheme {
            return false;
        }
        let port_ok = match (self.port, other.port) {
            (PortPattern::Any, _) => true,
            (PortPattern::Exact(a), PortPattern::Exact(b)) => a == b,
            (PortPattern::Exact(_), PortPattern::Any) => false,
        };
        let host_ok = match (&self.host, &other.host) {
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            (HostPattern::Name(a), HostPattern::Name(b)) => a == b,
            (HostPattern::Under(d), HostPattern::Name(n)) => is_strictly_under(n, d),
            (HostPattern::Under(d), HostPattern::Under(e)) => d == e || is_strictly_under(e, d),
            _ => false,
        };
        port_ok && host_ok
    }
}

fn is_strictly_under(name: &str, domain: &str) -> bool {
    name.len() > domain.len() + 1
        && name.ends_with(domain)
        && name.as_bytes()[name.len() - domain.len() - 1] == b'.'
}

/// The first pattern of `list` allowing `dest`, if any.
pub fn find_match<'a>(list: &'a [HttpPattern], dest: &Destination) -> Option<&'a HttpPattern> {
    list.iter().find(|p| p.matches(dest))
}

/// Parses a list of patterns, naming the index of the first bad one.
pub fn parse_list(items: &[String]) -> Result<Vec<HttpPattern>, (usize, String)> {
    if items.len() > MAX_PATTERNS {
        return Err((
            MAX_PATTERNS,
            format!("at most {MAX_PATTERNS} patterns may be listed"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, s)| s.parse().map_err(|e| (i, e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::http::tests::{dest, p};
    use crate::capability::http::{Destination, Scheme};

    #[test]
    fn patterns_round_trip_in_canonical_form() {
        for (text, canonical) in [
            ("https://api.example.com", "https://api.example.com"),
            ("HTTPS://API.Example.COM/", "https://api.example.com"),
            ("https://api.example.com:443", "https://api.example.com"),
            ("http://127.0.0.1:*", "http://127.0.0.1:*"),
            ("http://[::1]:8080", "http://[::1]:8080"),
            ("https://*.example.com:8443", "https://*.example.com:8443"),
        ] {
            assert_eq!(p(text).to_string(), canonical);
            assert_eq!(p(canonical), p(text));
        }
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for (text, why) in [
            ("api.example.com", "scheme://host"),
            ("ftp://example.com", "`http` or `https`"),
            ("https://example.com/path", "remove `/path`"),
            ("https://user@example.com", "remove `@example.com`"),
            ("https://example.com:0", "not a port"),
            ("https://example.com:70000", "not a port"),
            ("https://example.com:+80", "not a port"),
            ("https://*.com", "top-level domain"),
            ("https://a*.example.com", "leftmost label"),
            ("https://*", "whole leftmost label"),
            ("https://exa_mple.com", "not a valid host name"),
            ("https://example.com.", "write `example.com`"),
            ("http://127.0.0.1.:8080", "write `127.0.0.1`"),
            ("https://*.example.com.", "trailing dot"),
            ("https://", "host is missing"),
            ("http://::1", "brackets"),
            ("http://[::1", "closing"),
        ] {
            let err = text.parse::<HttpPattern>().unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn exact_patterns_match_scheme_host_and_default_port_only() {
        let pat = p("https://api.example.com");
        assert!(pat.matches(&dest("https://api.example.com")));
        assert!(pat.matches(&dest("https://API.example.com:443")));
        assert!(!pat.matches(&dest("http://api.example.com")));
        assert!(!pat.matches(&dest("https://api.example.com:8443")));
        assert!(!pat.matches(&dest("https://other.example.com")));
        assert!(!pat.matches(&dest("https://api.example.com.evil.net")));
    }

    #[test]
    fn any_port_and_address_literals() {
        let pat = p("http://127.0.0.1:*");
        assert!(pat.matches(&dest("http://127.0.0.1:1")));
        assert!(pat.matches(&dest("http://127.0.0.1:65535")));
        assert!(!pat.matches(&dest("http://localhost:8080")));
        assert!(!pat.matches(&dest("https://127.0.0.1:8080")));
        assert!(!pat.matches(&dest("http://127.0.0.2:8080")));
        let v6 = p("http://[::1]:8080");
        assert!(v6.matches(&dest("http://[::1]:8080")));
        assert!(!v6.matches(&dest("http://[::2]:8080")));
    }

    #[test]
    fn wildcard_matches_strict_subdomains_only() {
        let pat = p("https://*.example.com");
        assert!(pat.matches(&dest("https://a.example.com")));
        assert!(pat.matches(&dest("https://a.b.example.com")));
        assert!(!pat.matches(&dest("https://example.com")));
        assert!(!pat.matches(&dest("https://badexample.com")));
        assert!(!pat.matches(&dest("https://a.example.com.evil.net")));
    }

    #[test]
    fn destinations_are_read_from_authorities() {
        assert_eq!(
            dest("https://API.example.com"),
            Destination {
                scheme: Scheme::Https,
                host: "api.example.com".into(),
                port: 443
            }
        );
        assert_eq!(dest("http://[::1]:81").host, "::1");
        assert!(Destination::parse("ftp", "example.com").is_err());
        assert!(Destination::parse("http", "user@example.com").is_err());
        assert!(Destination::parse("http", "").is_err());
        assert!(Destination::parse("http", "a.com:99999").is_err());
    }

    #[test]
    fn urls_give_their_destination() {
        let d = Destination::from_url("http://[::1]:9000/hook?x=1").unwrap();
        assert_eq!((d.host.as_str(), d.port), ("::1", 9000));
        let d = Destination::from_url("https://Chat.Example.com/h#f").unwrap();
        assert_eq!(
            (d.scheme, d.host.as_str(), d.port),
            (Scheme::Https, "chat.example.com", 443)
        );
        for bad in ["ftp://x", "http://", "http://u:p@h/", "nope", "http://a b/"] {
            assert!(Destination::from_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_trailing_dot_is_refused_in_destinations_too() {
        // Not trimmed: `127.0.0.1.` would read as the literal here while a
        // resolver is handed the name with its dot (module docs).
        for (url, bare) in [
            ("http://127.0.0.1.:8080/hook", "127.0.0.1"),
            ("https://hooks.example.com./x", "hooks.example.com"),
            ("http://localhost./", "localhost"),
        ] {
            let err = Destination::from_url(url).unwrap_err();
            assert!(
                err.contains("trailing dot") && err.contains(&format!("write `{bare}`")),
                "{url}: {err}"
            );
        }
        assert!(Destination::parse("https", "example.com.:443").is_err());
        assert!(Destination::parse("https", "example.com:443").is_ok());
    }

    #[test]
    fn list_errors_name_the_index() {
        let (i, e) = parse_list(&["https://a.com".into(), "nope".into()]).unwrap_err();
        assert_eq!(i, 1);
        assert!(e.contains("scheme://host"));
    }
}
