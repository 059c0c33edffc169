//! Who a log line's request came from, and the network it is counted under in the report.
//!
//! The log's address is the TCP peer its server saw. Its `X-Forwarded-For` field is believed
//! the way the daemon believes the header: when that peer is one of `[identity]
//! trusted_proxies`, the field is walked from the right past trusted proxies and the first
//! other address is the client. `--xff` also believes it when the logged peer is not listed
//! (a log written behind a load balancer the daemon's config does not name). A hop that is not
//! an address ends the walk at the last address trusted, as in the daemon.
//!
//! The walk is the daemon's own ([`walk`]); only whom it believes differs: `--xff` trusts a
//! peer the config does not list, because the log's producer may sit behind a balancer this
//! config never names. A hop naming no client ends the walk at the last trusted address (the
//! replay meters it as that address: a log has no unattributed callers to keep apart). The
//! replay hands the engine the client it found.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::config::{ForwardedHeader, IdentitySettings};
use crate::identity::client_ip::{normalize, parse_node, trusted, walk};

/// Networks in the report by default: an IPv4 /24 and an IPv6 /48 (the network budgets'
/// defaults; a replay uses its config's `[networks]` prefixes).
pub const V4_NETWORK: u8 = 24;
pub const V6_NETWORK: u8 = 48;

/// `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
pub fn parse_addr(text: &str) -> Option<IpAddr> {
    parse_node(text.trim()).map(normalize)
}

/// The client of a request logged from `peer` with `xff`, by the daemon's own walk; `always_xff`:
/// believe the field whoever the peer is (`--xff`).
pub fn client(peer: IpAddr, xff: Option<&str>, s: &IdentitySettings, always_xff: bool) -> IpAddr {
    let Some(xff) = xff else { return peer };
    if !always_xff && !trusted(peer, &s.trusted_proxies) {
        return peer;
    }
    walk(
        peer,
        [Some(xff)],
        &s.trusted_proxies,
        ForwardedHeader::XForwardedFor,
    )
    .ip()
}

/// The network `ip` is reported under, with the default prefixes.
pub fn network(ip: IpAddr) -> IpNet {
    network_of(ip, V4_NETWORK, V6_NETWORK)
}

/// The network `ip` is reported under: its IPv4 `/v4` or IPv6 `/v6` prefix.
pub fn network_of(ip: IpAddr, v4_len: u8, v6_len: u8) -> IpNet {
    match ip {
        IpAddr::V4(v4) => IpNet::V4(
            Ipv4Net::new(v4, v4_len).map_or(Ipv4Net::from(Ipv4Addr::UNSPECIFIED), |n| n.trunc()),
        ),
        IpAddr::V6(v6) => IpNet::V6(
            Ipv6Net::new(v6, v6_len).map_or(Ipv6Net::from(Ipv6Addr::UNSPECIFIED), |n| n.trunc()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(trusted: &[&str]) -> IdentitySettings {
        IdentitySettings {
            trusted_proxies: trusted.iter().map(|t| t.parse().unwrap()).collect(),
            ..crate::config::Config::default().identity
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_field_is_believed_from_trusted_peers_only() {
        let s = settings(&["10.0.0.0/8"]);
        let xff = Some("198.51.100.9, 10.0.0.3");
        assert_eq!(client(ip("10.0.0.2"), xff, &s, false), ip("198.51.100.9"));
        assert_eq!(client(ip("203.0.113.1"), xff, &s, false), ip("203.0.113.1"));
        assert_eq!(client(ip("10.0.0.2"), None, &s, false), ip("10.0.0.2"));
    }

    #[test]
    fn xff_flag_believes_any_peer_and_a_bad_hop_stops_the_walk() {
        let s = settings(&[]);
        let xff = Some("192.0.2.1, 198.51.100.9");
        assert_eq!(client(ip("203.0.113.1"), xff, &s, true), ip("198.51.100.9"));
        let s = settings(&["10.0.0.0/8"]);
        assert_eq!(
            client(ip("10.0.0.2"), Some("unknown, 10.0.0.3"), &s, true),
            ip("10.0.0.3")
        );
        assert_eq!(
            client(ip("10.0.0.2"), Some("[2001:db8::1]:443"), &s, false),
            ip("2001:db8::1")
        );
    }

    #[test]
    fn addresses_and_networks() {
        assert_eq!(parse_addr("::ffff:1.2.3.4"), Some(ip("1.2.3.4")));
        assert_eq!(parse_addr("1.2.3.4:80"), Some(ip("1.2.3.4")));
        assert_eq!(parse_addr("host.example"), None);
        assert_eq!(network(ip("203.0.113.77")).to_string(), "203.0.113.0/24");
        assert_eq!(
            network(ip("2001:db8:1:2::5")).to_string(),
            "2001:db8:1::/48"
        );
    }
}
