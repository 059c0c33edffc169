//! Addresses and CIDRs as the kernel's map keys: IPv4 as `::ffff:a.b.c.d`, IPv6 masked to the
//! configured prefix; an IPv4 CIDR becomes a v4-mapped prefix of `96 + len` bits in the tries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use aya::maps::lpm_trie::Key;
use ipnet::IpNet;
use limiter_common::key::v4_prefix_in_v6;
use limiter_common::IpKey;

/// The lockout/tier/bucket key for `ip`, IPv6 grouped by `v6_prefix` bits.
pub fn ip_key(ip: IpAddr, v6_prefix: u32) -> IpKey {
    match canonical(ip) {
        IpAddr::V4(v4) => IpKey::from_v4(v4.octets()),
        IpAddr::V6(v6) => IpKey::from_v6(v6.octets(), v6_prefix),
    }
}

/// An address written as `::ffff:a.b.c.d` is the IPv4 address (that is how the kernel sees it).
pub fn canonical(ip: IpAddr) -> IpAddr {
    crate::model::address::canonical_ip(ip)
}

/// The address a key stands for (IPv6 keys show the masked network address).
pub fn key_ip(key: &IpKey) -> IpAddr {
    let v6 = Ipv6Addr::from(key.addr);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The LPM-trie key for a CIDR. Host bits are masked off (the trie ignores them anyway, but a
/// removal must name exactly the stored key).
pub fn cidr_key(net: IpNet) -> Key<[u8; 16]> {
    match net.trunc() {
        IpNet::V4(v4) => Key::new(
            v4_prefix_in_v6(u32::from(v4.prefix_len())),
            IpKey::from_v4(v4.network().octets()).addr,
        ),
        IpNet::V6(v6) => Key::new(u32::from(v6.prefix_len()), v6.network().octets()),
    }
}

/// The CIDR an LPM key stands for.
pub fn key_cidr(key: &Key<[u8; 16]>) -> Option<IpNet> {
    let len = key.prefix_len();
    let v6 = Ipv6Addr::from(key.data());
    if len >= 96 {
        if let Some(v4) = v6.to_ipv4_mapped() {
            return ipnet::Ipv4Net::new(v4, (len - 96) as u8)
                .ok()
                .map(IpNet::V4);
        }
    }
    ipnet::Ipv6Net::new(v6, u8::try_from(len).ok()?)
        .ok()
        .map(IpNet::V6)
}

/// An IPv4 address as an IpAddr (helper for tests and CLI output).
pub fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_and_v4_mapped_give_the_same_key() {
        let a = ip_key(v4(192, 0, 2, 7), 64);
        let b = ip_key("::ffff:192.0.2.7".parse().unwrap(), 64);
        assert_eq!(a, b);
        assert_eq!(&a.addr[10..], &[0xff, 0xff, 192, 0, 2, 7]);
        assert_eq!(key_ip(&a), v4(192, 0, 2, 7));
    }

    #[test]
    fn v6_is_grouped_by_prefix() {
        let a = ip_key("2001:db8:1:2:aaaa::1".parse().unwrap(), 64);
        let b = ip_key("2001:db8:1:2:bbbb::9".parse().unwrap(), 64);
        let c = ip_key("2001:db8:1:3::1".parse().unwrap(), 64);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(key_ip(&a), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn v4_cidr_is_a_mapped_prefix() {
        let k = cidr_key("10.1.2.3/24".parse().unwrap());
        assert_eq!(k.prefix_len(), 120);
        assert_eq!(&k.data()[10..], &[0xff, 0xff, 10, 1, 2, 0]);
        assert_eq!(key_cidr(&k), Some("10.1.2.0/24".parse().unwrap()));
        let k6 = cidr_key("2001:db8::/32".parse().unwrap());
        assert_eq!(k6.prefix_len(), 32);
        assert_eq!(key_cidr(&k6), Some("2001:db8::/32".parse().unwrap()));
    }
}
