//! The client address, every trust rule in one place: the TCP peer, unless the peer is a
//! trusted proxy (`[identity] trusted_proxies`); then the forwarding header (`X-Forwarded-For`
//! or `Forwarded`) is walked from the right, past trusted proxies. For nginx's `auth_request`
//! subrequests, `X-Real-IP` from a trusted peer (`[http] trusted_peers`). Headers from an
//! untrusted peer are ignored (anyone can write them). IPv6 clients are grouped by a prefix.
//!
//! A trusted proxy's field that names no usable client (unparseable, `unknown`, an obfuscated
//! `_hidden`, empty, unreadable bytes) does not make the proxy the client: the request is an
//! [`Client::Unattributed`] caller of that proxy. Metering the proxy instead let one client's
//! junk header strike the proxy into a kernel lockout, cutting off everyone behind it.

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

/// Who sent a request, as far as the trust rules can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// The client's address (the peer itself, or the one a trusted proxy named).
    Addr(IpAddr),
    /// A trusted proxy (this address) forwarded the request with a field that names no usable
    /// client. Every such request of one proxy is one shared anonymous caller, never locked.
    Unattributed(IpAddr),
}

impl Client {
    /// The address the caller is known by: the client's, or the proxy's when unattributed.
    pub fn ip(self) -> IpAddr {
        match self {
            Client::Addr(ip) | Client::Unattributed(ip) => ip,
        }
    }
}

/// Whether `ip` is in one of `proxies` (mapped IPv6 read as IPv4).
pub fn trusted(ip: IpAddr, proxies: &[IpNet]) -> bool {
    let ip = normalize(ip);
    proxies.iter().any(|n| n.contains(&ip))
}

/// Who sent a request from `peer` under `s`'s trust rules: see [`forwarded`].
pub fn client(peer: IpAddr, headers: &HeaderMap, s: &IdentitySettings) -> Client {
    forwarded(peer, headers, &s.trusted_proxies, s.forwarded_header)
}

/// Who sent a request from `peer`: its `header` field is walked when `peer` is one of
/// `proxies`. No field at all means the proxy itself is the client (its own health checks); a
/// field naming no usable client makes the request [`Client::Unattributed`].
pub fn forwarded(
    peer: IpAddr,
    headers: &HeaderMap,
    proxies: &[IpNet],
    header: ForwardedHeader,
) -> Client {
    let peer = normalize(peer);
    if !trusted(peer, proxies) {
        return Client::Addr(peer);
    }
    let name = match header {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        ForwardedHeader::Forwarded => "forwarded",
    };
    let values = headers.get_all(name).into_iter().map(|v| v.to_str().ok());
    walk(peer, values, proxies, header)
}

/// The one walk of a forwarding field: `values` are its instances in order (`None`: bytes that
/// are no text), split into hops (leftmost = original client) and read right to left from
/// `peer`, the trusted proxy that handed the request over. The first untrusted address is the
/// client; a malformed hop ends the walk: the request is an unattributed caller of the last
/// trusted proxy (the one that handed the hop over).
pub fn walk<'v>(
    peer: IpAddr,
    values: impl IntoIterator<Item = Option<&'v str>>,
    proxies: &[IpNet],
    header: ForwardedHeader,
) -> Client {
    let peer = normalize(peer);
    let mut hops: Vec<&str> = Vec::new();
    for value in values {
        let Some(text) = value else {
            // Unreadable bytes: we cannot tell who sent it.
            return Client::Unattributed(peer);
        };
        hops.extend(text.split(','));
    }
    let mut last = peer;
    for hop in hops.iter().rev() {
        let parsed = match header {
            ForwardedHeader::XForwardedFor => parse_node(hop.trim()),
            ForwardedHeader::Forwarded => forwarded_for(hop),
        };
        match parsed.map(normalize) {
            None => return Client::Unattributed(last),
            Some(ip) if !trusted(ip, proxies) => return Client::Addr(ip),
            Some(ip) => last = ip,
        }
    }
    Client::Addr(last)
}

/// The client behind an nginx `auth_request` subrequest from `peer`: the `X-Real-IP` value
/// when `peer` is one of `trusted_peers` (`[http] trusted_peers`), else the peer itself. A
/// trusted peer sending a value that is no address (empty, `unknown`, unreadable) makes the
/// request an unattributed caller of that peer, as a forwarding header does.
pub fn real_ip(peer: IpAddr, x_real_ip: Option<&HeaderValue>, trusted_peers: &[IpNet]) -> Client {
    let peer = normalize(peer);
    if !trusted(peer, trusted_peers) {
        return Client::Addr(peer);
    }
    match x_real_ip.map(|v| v.to_str().map(|s| parse_node(s.trim()))) {
        Some(Ok(Some(ip))) => Client::Addr(normalize(ip)),
        None => Client::Addr(peer),
        Some(_) => Client::Unattributed(peer),
    }
}

/// `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
pub fn parse_node(text: &str) -> Option<IpAddr> {
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
        let ip = client("10.0.0.1".parse().unwrap(), &h, &s).ip();
        assert_eq!(ip, "2001:db8:cafe::17".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn obfuscated_forwarded_is_an_unattributed_caller_of_the_proxy_that_sent_it() {
        let s = settings(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let h = headers("forwarded", &["for=_hidden, for=10.9.9.9"]);
        let c = client("10.0.0.1".parse().unwrap(), &h, &s);
        assert_eq!(c, Client::Unattributed("10.9.9.9".parse().unwrap()));
    }

    #[test]
    fn a_field_naming_no_client_is_unattributed_never_the_proxy_itself() {
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        let xff = settings(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        for junk in [
            "not-an-ip",
            "",
            " ",
            "unknown",
            "_hidden",
            "1.2.3.4.5",
            "203.0.113.9, ",
        ] {
            let c = client(proxy, &headers("x-forwarded-for", &[junk]), &xff);
            assert_eq!(c, Client::Unattributed(proxy), "X-Forwarded-For: {junk:?}");
        }
        let fwd = settings(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        for junk in [
            "for=unknown",
            "for=_hidden",
            "for=\"_gazonk\"",
            "for=",
            "proto=https",
            "",
        ] {
            let c = client(proxy, &headers("forwarded", &[junk]), &fwd);
            assert_eq!(c, Client::Unattributed(proxy), "Forwarded: {junk:?}");
        }
        // Unreadable bytes name no one either.
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert_eq!(client(proxy, &h, &xff), Client::Unattributed(proxy));
        // A usable hop to the right of the junk is the client: the junk came from further out.
        let h = headers("x-forwarded-for", &["not-an-ip, 198.51.100.11"]);
        assert_eq!(
            client(proxy, &h, &xff),
            Client::Addr("198.51.100.11".parse().unwrap())
        );
        // No field at all: the proxy's own request (health checks), metered as the proxy.
        assert_eq!(client(proxy, &HeaderMap::new(), &xff), Client::Addr(proxy));
        // From an untrusted peer the junk is not read at all.
        let outsider: IpAddr = "192.0.2.1".parse().unwrap();
        let h = headers("x-forwarded-for", &["not-an-ip"]);
        assert_eq!(client(outsider, &h, &xff), Client::Addr(outsider));
    }

    #[test]
    fn x_real_ip_naming_no_client_is_unattributed() {
        let peers: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let nginx: IpAddr = "10.1.2.3".parse().unwrap();
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(
            real_ip(nginx, Some(&v("198.51.100.20")), &peers),
            Client::Addr("198.51.100.20".parse().unwrap())
        );
        for junk in ["not-an-ip", "", "unknown"] {
            assert_eq!(
                real_ip(nginx, Some(&v(junk)), &peers),
                Client::Unattributed(nginx),
                "{junk:?}"
            );
        }
        assert_eq!(real_ip(nginx, None, &peers), Client::Addr(nginx));
        let outsider: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(
            real_ip(outsider, Some(&v("not-an-ip")), &peers),
            Client::Addr(outsider)
        );
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
