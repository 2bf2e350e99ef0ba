//! Which resolved addresses a matched pattern may reach (DNS rebinding, see
//! "Addresses" in the module docs): the class of an address, and the
//! address picked to connect to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{HostPattern, HttpPattern};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::http::Destination;
    use crate::capability::http::tests::p;

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
}
