//! Outbound HTTP allow-lists: the pattern grammar, matching a request against
//! a list, the tenant ceiling check, and which resolved addresses a pattern
//! may reach. Pure: no sockets, no DNS (the runtime and the alert sender
//! resolve, then ask here: [`pick_address`]).
//!
//! Two callers go out to the network on a tenant's behalf, and both decide
//! here: plugins (`wasi:http`, `runtime/http.rs`) and webhook alerts
//! (`alerts.rs`, whose task webhooks must be granted by the tenant's ceiling:
//! [`granting`]).
//!
//! # Grammar
//!
//! ```text
//! pattern = scheme "://" host [ ":" port ]
//! scheme  = "http" | "https"
//! host    = name | "*." name | ipv4 | "[" ipv6 "]"
//! port    = 1..65535 | "*"
//! ```
//!
//! - No path, query, user info or trailing text: an allow-list grants a
//!   destination, not a URL (`https://api.example.com/` with only a slash is
//!   accepted and means the same as without it).
//! - Names are compared case-insensitively (stored lower-case); a trailing dot
//!   is refused rather than guessed at.
//! - No port means the scheme's default (80 or 443) — `https://api.example.com`
//!   does not allow `https://api.example.com:8443`. `:*` allows every port.
//! - `*.example.com` allows every name *under* `example.com` (`a.example.com`,
//!   `a.b.example.com`) but not `example.com` itself: list both if both are
//!   meant. The wildcard must be the whole leftmost label and sit above at
//!   least two labels (`*.com` is refused: it would grant a whole TLD).
//!
//! # Addresses (DNS rebinding)
//!
//! The host resolves a name once, checks every address with [`address_allowed`]
//! and connects to a checked address, so a name cannot pass the check and then
//! resolve elsewhere. The rules:
//! - a pattern that names an IP literal reaches exactly that address, whatever
//!   its class (this is how loopback and internal services are granted:
//!   `http://127.0.0.1:*`, `http://10.0.0.5:8080`);
//! - a pattern that names a host may reach public addresses, and private
//!   network addresses (RFC 1918, IPv6 unique-local) only when it is an exact
//!   name — somebody named that internal host on purpose;
//! - a wildcard pattern reaches public addresses only: a subdomain somebody
//!   else controls must not be pointed at the internal network;
//! - loopback, link-local (cloud metadata at 169.254.169.254), unspecified,
//!   multicast, broadcast, shared (100.64/10) and reserved addresses are never
//!   reached through a name.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A URL scheme an allow-list can grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Plain HTTP (default port 80).
    Http,
    /// HTTP over TLS (default port 443).
    Https,
}

impl Scheme {
    /// The port used when a URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// Parses `http`/`https`, case-insensitively.
    pub fn parse(text: &str) -> Option<Scheme> {
        if text.eq_ignore_ascii_case("http") {
            Some(Scheme::Http)
        } else if text.eq_ignore_ascii_case("https") {
            Some(Scheme::Https)
        } else {
            None
        }
    }
}

/// The host part of a pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostPattern {
    /// Exactly this name (lower-case).
    Name(String),
    /// Any name strictly under this domain (`*.example.com` stores `example.com`).
    Under(String),
    /// Exactly this address.
    Ip(IpAddr),
}

/// The port part of a pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortPattern {
    /// Exactly this port (the scheme's default when the pattern names none).
    Exact(u16),
    /// `:*`, any port.
    Any,
}

/// One allowed destination: `scheme://host[:port|:*]`. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HttpPattern {
    /// The scheme, matched exactly.
    pub scheme: Scheme,
    /// The host, a name, a subdomain wildcard or an address.
    pub host: HostPattern,
    /// The port.
    pub port: PortPattern,
}

/// Where a request goes, as the host sees it before connecting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The request's scheme.
    pub scheme: Scheme,
    /// The host: a lower-case name or an address literal (IPv6 without brackets).
    pub host: String,
    /// The port (the scheme's default filled in).
    pub port: u16,
}

/// Longest pattern accepted, in bytes.
pub const MAX_PATTERN_LEN: usize = 300;
/// Most patterns one step (or one tenant) may list.
pub const MAX_PATTERNS: usize = 100;

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
/// 63 bytes each and 253 in all. Returns it lower-cased.
fn check_name(text: &str) -> Result<String, String> {
    if text.len() > 253 {
        return Err("the host name is longer than 253 bytes".into());
    }
    if text.ends_with('.') {
        return Err(format!("`{text}`: write the name without a trailing dot"));
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
            Err(_) => check_name(host.strip_suffix('.').unwrap_or(host))?,
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

/// The address to connect to for `host`, resolved (once, by the caller) to
/// `addrs` for a destination `pattern` matched: the first address the
/// pattern may reach ([`address_allowed`]). The caller connects to exactly
/// this address, never resolving again, so a name cannot pass the check and
/// then point elsewhere. `Err` gives every refused address's reason.
pub fn pick_address(
    pattern: &HttpPattern,
    host: &str,
    addrs: &[SocketAddr],
) -> Result<SocketAddr, String> {
    let mut reasons = Vec::new();
    for addr in addrs {
        match address_allowed(pattern, addr.ip()) {
            Ok(()) => return Ok(*addr),
            Err(why) => reasons.push(why),
        }
    }
    Err(if reasons.is_empty() {
        format!("{host} resolves to no address")
    } else {
        reasons.join("; ")
    })
}

/// Whether `ip`, resolved for a destination matched by `pattern`, may be
/// connected to. `Err` says why not. See the module docs for the rules.
pub fn address_allowed(pattern: &HttpPattern, ip: IpAddr) -> Result<(), String> {
    let ip = canonical(ip);
    match &pattern.host {
        HostPattern::Ip(allowed) => {
            if canonical(*allowed) == ip && !never_reachable(ip) {
                Ok(())
            } else {
                Err(format!("{ip} is not the address the allow-list names"))
            }
        }
        host => {
            let class = classify(ip);
            match class {
                AddressClass::Public => Ok(()),
                AddressClass::Private if matches!(host, HostPattern::Name(_)) => Ok(()),
                AddressClass::Private => Err(format!(
                    "the name resolves to {ip}, a private address, and a wildcard pattern (`{pattern}`) reaches public addresses only; list the host exactly"
                )),
                AddressClass::Special(what) => Err(format!(
                    "the name resolves to {ip} ({what}), which is never reached through a name; allow the address itself (e.g. `{}://{}`) if it is meant",
                    pattern.scheme.as_str(),
                    match ip {
                        IpAddr::V6(v6) => format!("[{v6}]"),
                        IpAddr::V4(v4) => v4.to_string(),
                    }
                )),
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum AddressClass {
    Public,
    Private,
    Special(&'static str),
}

/// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Addresses nothing may connect to, even when named literally.
fn never_reachable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_unspecified() || v6.is_multicast(),
    }
}

fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        AddressClass::Special("loopback")
    } else if ip.is_link_local() {
        AddressClass::Special("link-local, where cloud metadata services live")
    } else if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || a == 0 {
        AddressClass::Special("not a unicast host address")
    } else if a == 100 && (64..128).contains(&b) {
        AddressClass::Special("carrier-grade shared address space")
    } else if a >= 240 || ip.is_documentation() || (a == 198 && (b == 18 || b == 19)) {
        AddressClass::Special("reserved")
    } else if ip.is_private() {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        AddressClass::Special("loopback")
    } else if ip.is_unspecified() || ip.is_multicast() {
        AddressClass::Special("not a unicast host address")
    } else if first & 0xffc0 == 0xfe80 {
        AddressClass::Special("link-local")
    } else if first & 0xfe00 == 0xfc00 {
        AddressClass::Private
    } else if first == 0x2001 && ip.segments()[1] == 0x0db8 {
        AddressClass::Special("reserved")
    } else {
        AddressClass::Public
    }
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

    fn p(text: &str) -> HttpPattern {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn dest(url: &str) -> Destination {
        let (scheme, authority) = url.split_once("://").unwrap();
        Destination::parse(scheme, authority).unwrap()
    }

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
            ("https://example.com.", "trailing dot"),
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
    fn names_never_reach_loopback_or_metadata() {
        let exact = p("https://api.example.com");
        for ip in [
            "127.0.0.1",
            "::1",
            "169.254.169.254",
            "0.0.0.0",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            let err = address_allowed(&exact, ip.parse().unwrap()).unwrap_err();
            assert!(err.contains("never reached through a name"), "{ip}: {err}");
        }
        assert!(address_allowed(&exact, "93.184.216.34".parse().unwrap()).is_ok());
        assert!(address_allowed(&exact, "2606:2800:220:1::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn private_addresses_need_an_exact_name() {
        let exact = p("http://orders.internal:8080");
        let wild = p("http://*.corp.example");
        for ip in ["10.1.2.3", "192.168.1.1", "172.16.0.9", "fd00::1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(address_allowed(&exact, ip).is_ok(), "{ip}");
            let err = address_allowed(&wild, ip).unwrap_err();
            assert!(err.contains("public addresses only"), "{ip}: {err}");
        }
    }

    #[test]
    fn literal_patterns_reach_exactly_their_address() {
        let pat = p("http://127.0.0.1:*");
        assert!(address_allowed(&pat, "127.0.0.1".parse().unwrap()).is_ok());
        assert!(address_allowed(&pat, "::ffff:127.0.0.1".parse().unwrap()).is_ok());
        assert!(address_allowed(&pat, "127.0.0.2".parse().unwrap()).is_err());
        let any = p("http://0.0.0.0:*");
        assert!(address_allowed(&any, "0.0.0.0".parse().unwrap()).is_err());
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

    #[test]
    fn the_first_allowed_address_is_picked_and_refusals_are_explained() {
        let named = p("https://hooks.example.com");
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.1:443".parse().unwrap(),
            "93.184.216.34:443".parse().unwrap(),
        ];
        assert_eq!(
            pick_address(&named, "hooks.example.com", &addrs).unwrap(),
            addrs[1]
        );
        let err = pick_address(&named, "hooks.example.com", &addrs[..1]).unwrap_err();
        assert!(err.contains("never reached through a name"), "{err}");
        let err = pick_address(&named, "hooks.example.com", &[]).unwrap_err();
        assert!(err.contains("resolves to no address"), "{err}");
        // An admin's exact address grants that address, loopback included.
        let exact = HttpPattern::exact(&Destination::from_url("http://127.0.0.1:9").unwrap());
        assert!(pick_address(&exact, "127.0.0.1", &["127.0.0.1:9".parse().unwrap()]).is_ok());
        assert!(pick_address(&exact, "127.0.0.1", &["127.0.0.2:9".parse().unwrap()]).is_err());
    }

    #[test]
    fn list_errors_name_the_index() {
        let (i, e) = parse_list(&["https://a.com".into(), "nope".into()]).unwrap_err();
        assert_eq!(i, 1);
        assert!(e.contains("scheme://host"));
    }
}
