//! One spelling per address: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) or CIDR
//! (`::ffff:203.0.113.0/120`) is the IPv4 address or CIDR it carries (`203.0.113.0/24`).
//!
//! Every place that accepts an address or a CIDR (the admin API, limiterctl, `limiter-daemon
//! kernel`, the config's address lists, the decision API's `ip`) goes through these functions,
//! so a bound written for IPv4 (a lockout no wider than /8) cannot be walked around by writing
//! IPv4 as IPv6 (`::ffff:0:0/96` is all of IPv4), and a record made under one spelling is found
//! under the other. The kernel keys IPv4 as `::ffff:a.b.c.d`, so an IPv6 range that takes in
//! the mapped block (`::/80`, `::/16`) would cover IPv4 there too: [`mapped_overlap`] names it.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The IPv4-mapped block, `::ffff:0:0/96`.
pub fn mapped_block() -> Ipv6Net {
    Ipv6Net::new(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96).expect("96 ≤ 128")
}

/// `ip` with an IPv4-mapped IPv6 address written as the IPv4 address.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// `net` with host bits cleared, and a CIDR inside the IPv4-mapped block written as IPv4
/// (`::ffff:203.0.113.0/120` → `203.0.113.0/24`).
pub fn canonical_net(net: IpNet) -> IpNet {
    match net.trunc() {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => IpNet::V4(Ipv4Net::new(v4, v6.prefix_len() - 96).expect("len - 96 ≤ 32")),
            None => IpNet::V6(v6),
        },
        n => n,
    }
}

/// `true` for an IPv6 range shorter than /96 that takes in the IPv4-mapped block: the kernel
/// keys IPv4 under that block, so the range would also match every IPv4 address.
pub fn mapped_overlap(net: IpNet) -> bool {
    match net {
        IpNet::V6(v6) => v6.prefix_len() < 96 && v6.contains(&mapped_block()),
        IpNet::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn mapped_addresses_and_cidrs_are_ipv4() {
        assert_eq!(
            canonical_ip("::ffff:203.0.113.7".parse().unwrap()),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            canonical_ip("2001:db8::1".parse().unwrap()),
            "2001:db8::1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            canonical_net(net("::ffff:203.0.113.0/120")),
            net("203.0.113.0/24")
        );
        assert_eq!(canonical_net(net("::ffff:0:0/96")), net("0.0.0.0/0"));
        assert_eq!(
            canonical_net(net("::ffff:192.0.2.7/128")),
            net("192.0.2.7/32")
        );
        // Host bits go; IPv6 outside the block stays IPv6.
        assert_eq!(canonical_net(net("10.1.2.3/8")), net("10.0.0.0/8"));
        assert_eq!(canonical_net(net("2001:db8::/32")), net("2001:db8::/32"));
        assert_eq!(canonical_net(net("::/96")), net("::/96"));
    }

    #[test]
    fn ipv6_ranges_over_the_mapped_block_are_named() {
        assert!(mapped_overlap(net("::/16")));
        assert!(mapped_overlap(net("::/80")));
        assert!(mapped_overlap(net("::/0")));
        assert!(!mapped_overlap(net("::ffff:0:0/96")));
        assert!(!mapped_overlap(net("2001:db8::/16")));
        assert!(!mapped_overlap(net("0.0.0.0/0")));
    }
}
