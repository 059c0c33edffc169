//! The client address, every trust rule in one place: the TCP peer, unless the peer is a
//! trusted proxy (`[identity] trusted_proxies`); then the forwarding header (`X-Forwarded-For`
//! or `Forwarded`) is walked from the right, past trusted proxies. For nginx's `auth_request`
//! subrequests, `X-Real-IP` from a trusted peer (`[http] trusted_peers`). Headers from an
//! untrusted peer are ignored (anyone can write them). IPv6 clients are grouped by a prefix.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::{HeaderMap, HeaderValue};
use ipnet::IpNet;

use crate::config::{ForwardedHeader, IdentitySettings};

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) becomes plain IPv4 so both spellings count as one client.
pub fn normalize(ip: IpAddr) -> IpAddr {
    crate::model::address::canonical_ip(ip)
}

/// The address counters are kept under: IPv4 as is, IPv6 masked to `v6_prefix` bits.
pub fn group(ip: IpAddr, v6_prefix: u8) -> IpAddr {
    match normalize(ip) {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let prefix = u32::from(v6_prefix.min(128));
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            IpAddr::V6(Ipv6Addr::from(bits & mask))
        }
        v4 => v4,
    }
}

fn trusted(ip: IpAddr, proxies: &[IpNet]) -> bool {
    proxies.iter().any(|n| n.contains(&ip))
}

/// The client address for a request from `peer` (not grouped).
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, s: &IdentitySettings) -> IpAddr {
    let peer = normalize(peer);
    if s.trusted_proxies.is_empty() || !trusted(peer, &s.trusted_proxies) {
        return peer;
    }
    let name = match s.forwarded_header {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        ForwardedHeader::Forwarded => "forwarded",
    };
    // Every instance of the header, in order, split into hops (leftmost = original client).
    let mut hops: Vec<&str> = Vec::new();
    for value in headers.get_all(name) {
        let Ok(text) = value.to_str() else {
            // Unreadable bytes: we cannot tell who sent it; stop at the proxy we trust.
            return peer;
        };
        hops.extend(text.split(','));
    }
    // Walk right to left; the first untrusted address is the client. A malformed hop ends the
    // walk at the last trusted address (the proxy that handed it over).
    let mut last = peer;
    for hop in hops.iter().rev() {
        let parsed = match s.forwarded_header {
            ForwardedHeader::XForwardedFor => parse_node(hop.trim()),
            ForwardedHeader::Forwarded => forwarded_for(hop),
        };
        match parsed {
            None => return last,
            Some(ip) => {
                let ip = normalize(ip);
                if !trusted(ip, &s.trusted_proxies) {
                    return ip;
                }
                last = ip;
            }
        }
    }
    last
}

/// The client behind an nginx `auth_request` subrequest from `peer`: the `X-Real-IP` value
/// when `peer` is one of `trusted_peers` (`[http] trusted_peers`), else the peer itself. A
/// trusted peer sending an unreadable value is a misconfiguration: the peer is metered rather
/// than every request failing, and it is logged.
pub fn real_ip(peer: IpAddr, x_real_ip: Option<&HeaderValue>, trusted_peers: &[IpNet]) -> IpAddr {
    if !trusted(normalize(peer), trusted_peers) {
        return peer;
    }
    match x_real_ip.map(|v| v.to_str().map(|s| s.trim().parse::<IpAddr>())) {
        Some(Ok(Ok(ip))) => ip,
        None => peer,
        Some(_) => {
            tracing::warn!(%peer, "unparseable X-Real-IP from a trusted peer; metering the peer");
            peer
        }
    }
}

/// `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
fn parse_node(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = text.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.parse::<IpAddr>().ok())
}

/// The `for=` parameter of one RFC 7239 element (`for=192.0.2.60;proto=http`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    for pair in element.split(';') {
        let (k, v) = pair.trim().split_once('=')?;
        if k.trim().eq_ignore_ascii_case("for") {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .unwrap_or(v);
            // `unknown` and obfuscated identifiers (`_hidden`) carry no address: malformed here.
            return parse_node(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::identity::RawIdentity;

    fn settings(trusted: &[&str], header: ForwardedHeader) -> IdentitySettings {
        IdentitySettings::validate(RawIdentity {
            trusted_proxies: Some(trusted.iter().map(|s| s.to_string()).collect()),
            forwarded_header: Some(header),
            ipv6_prefix: None,
            session_cookie: None,
        })
        .unwrap()
    }

    fn headers(name: &str, values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn forwarded_rfc7239_is_walked() {
        let s = settings(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let h = headers(
            "forwarded",
            &["for=\"[2001:db8:cafe::17]:4711\";proto=https, for=10.1.1.1;by=10.0.0.2"],
        );
        let ip = client_ip("10.0.0.1".parse().unwrap(), &h, &s);
        assert_eq!(ip, "2001:db8:cafe::17".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn obfuscated_forwarded_stops_at_the_proxy() {
        let s = settings(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let h = headers("forwarded", &["for=_hidden, for=10.9.9.9"]);
        let ip = client_ip("10.0.0.1".parse().unwrap(), &h, &s);
        assert_eq!(ip, "10.9.9.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn ipv6_grouped_by_prefix_and_mapped_v4_unwrapped() {
        let a = group("2001:db8:1:2:aaaa::1".parse().unwrap(), 64);
        let b = group("2001:db8:1:2:bbbb::9".parse().unwrap(), 64);
        assert_eq!(a, b);
        assert_eq!(a, "2001:db8:1:2::".parse::<IpAddr>().unwrap());
        assert_eq!(
            group("::ffff:192.0.2.1".parse().unwrap(), 64),
            "192.0.2.1".parse::<IpAddr>().unwrap()
        );
    }
}
