//! Outbound HTTP allow-lists: the pattern grammar, matching a request against
//! a list, the tenant ceiling check, and which resolved addresses a pattern
//! may reach. Pure: no sockets, no DNS (the runtime and the alert sender
//! resolve, then ask here: [`pick_address`]).
//!
//! Two callers go out to the network on a tenant's behalf, and both decide
//! here: plugins (`wasi:http`, `runtime/http.rs`) and webhook alerts
//! (`scheduler::alerts`, whose task webhooks must be granted by the tenant's ceiling:
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
//!   is refused (see "Trailing dots").
//! - No port means the scheme's default (80 or 443) — `https://api.example.com`
//!   does not allow `https://api.example.com:8443`. `:*` allows every port.
//! - `*.example.com` allows every name *under* `example.com` (`a.example.com`,
//!   `a.b.example.com`) but not `example.com` itself: list both if both are
//!   meant. The wildcard must be the whole leftmost label and sit above at
//!   least two labels (`*.com` is refused: it would grant a whole TLD).
//!
//! # Trailing dots
//!
//! A host written with a trailing dot (`example.com.`, `127.0.0.1.`) is
//! refused everywhere a host is read — in a pattern, in a webhook URL, in a
//! plugin's request — with a message that says to write it without the dot.
//! It is not trimmed: a webhook is checked on the trimmed name but POSTed by
//! its URL as written, so trimming in the check let `http://127.0.0.1.:8080`
//! be saved (it read as the granted literal `127.0.0.1`) and then fail at
//! every delivery, where the resolver is handed `127.0.0.1.`. Refusing in the
//! one name check (`pattern::check_name`) makes the save refuse what a
//! delivery would, and keeps every caller's reading of a host the same: one
//! spelling per destination, no name that resolves as a name in one place and
//! reads as an address literal in another. The cost is small: a
//! fully-qualified `example.com.` means `example.com` to every resolver ax
//! uses, so dropping the dot loses nothing. A webhook saved before this rule
//! is refused at delivery by the same check (`dead`, with the reason).
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
//!
//! # Layout
//! - here: the types ([`HttpPattern`], [`Destination`]) and their bounds;
//! - `pattern`: the grammar, and matching ([`find_match`], [`parse_list`]);
//! - `ceiling`: the tenant ceiling ([`within_ceiling`], [`granting`]);
//! - `address`: resolved addresses ([`pick_address`], [`address_allowed`]).

use std::net::IpAddr;

mod address;
mod ceiling;
mod pattern;
#[cfg(test)]
mod tests;

pub use self::address::{address_allowed, pick_address};
pub use self::ceiling::{granting, within_ceiling};
pub use self::pattern::{find_match, parse_list};

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
