//! A set of IP prefixes answering "is this address inside any of them" in a few hash lookups:
//! one per distinct prefix length (a published crawler range file has a handful), never a
//! walk over every prefix. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are looked up as the
//! IPv4 address they carry.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::address::{canonical_ip, canonical_net};

#[derive(Clone, Default, PartialEq, Eq)]
pub struct PrefixSet {
    /// `(prefix length, networks of that length as masked integers)`, longest first.
    v4: Vec<(u8, HashSet<u32>)>,
    v6: Vec<(u8, HashSet<u128>)>,
    len: usize,
}

impl std::fmt::Debug for PrefixSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Thousands of fetched prefixes say nothing in a config dump; their count does.
        write!(f, "PrefixSet({} prefixes)", self.len)
    }
}

fn mask4(bits: u32, len: u8) -> u32 {
    match len {
        0 => 0,
        n => bits & (u32::MAX << (32 - u32::from(n))),
    }
}

fn mask6(bits: u128, len: u8) -> u128 {
    match len {
        0 => 0,
        n => bits & (u128::MAX << (128 - u32::from(n))),
    }
}

impl PrefixSet {
    /// The set of `nets` (host bits are ignored: `66.249.64.7/27` is `66.249.64.0/27`; an
    /// IPv4-mapped range is the IPv4 range it carries).
    pub fn from_nets(nets: impl IntoIterator<Item = IpNet>) -> Self {
        let mut set = PrefixSet::default();
        for net in nets {
            let added = match canonical_net(net) {
                IpNet::V4(n) => {
                    let len = n.prefix_len();
                    let bits = mask4(u32::from(n.addr()), len);
                    insert(&mut set.v4, len, bits)
                }
                IpNet::V6(n) => {
                    let len = n.prefix_len();
                    let bits = mask6(u128::from(n.addr()), len);
                    insert(&mut set.v6, len, bits)
                }
            };
            set.len += usize::from(added);
        }
        set.v4.sort_by_key(|(len, _)| std::cmp::Reverse(*len));
        set.v6.sort_by_key(|(len, _)| std::cmp::Reverse(*len));
        set
    }

    /// Distinct prefixes held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match canonical_ip(ip) {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                self.v4
                    .iter()
                    .any(|(len, nets)| nets.contains(&mask4(bits, *len)))
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                self.v6
                    .iter()
                    .any(|(len, nets)| nets.contains(&mask6(bits, *len)))
            }
        }
    }
}

fn insert<T: std::hash::Hash + Eq>(by_len: &mut Vec<(u8, HashSet<T>)>, len: u8, bits: T) -> bool {
    match by_len.iter_mut().find(|(l, _)| *l == len) {
        Some((_, nets)) => nets.insert(bits),
        None => {
            by_len.push((len, HashSet::from([bits])));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nets: &[&str]) -> PrefixSet {
        PrefixSet::from_nets(nets.iter().map(|n| n.parse::<IpNet>().unwrap()))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_is_inside_when_any_prefix_holds_it() {
        let s = set(&[
            "66.249.64.0/27",
            "66.249.64.7/27",
            "157.55.39.0/24",
            "2001:4860:4801:10::/64",
            "0.0.0.0/0",
        ]);
        assert_eq!(s.len(), 4, "host bits are ignored, duplicates counted once");
        let s = set(&["66.249.64.0/27", "157.55.39.0/24", "2001:4860:4801:10::/64"]);
        assert!(s.contains(ip("66.249.64.31")));
        assert!(!s.contains(ip("66.249.64.32")));
        assert!(s.contains(ip("157.55.39.200")));
        assert!(s.contains(ip("2001:4860:4801:10::99")));
        assert!(!s.contains(ip("2001:4860:4801:11::1")));
        assert!(
            s.contains(ip("::ffff:66.249.64.1")),
            "a mapped address is its IPv4"
        );
        assert!(!s.contains(ip("203.0.113.9")));
        assert!(!PrefixSet::default().contains(ip("66.249.64.1")));
    }

    #[test]
    fn zero_and_full_length_prefixes() {
        let s = set(&["0.0.0.0/0", "2001:db8::1/128"]);
        assert!(s.contains(ip("198.51.100.1")));
        assert!(s.contains(ip("2001:db8::1")));
        assert!(!s.contains(ip("2001:db8::2")));
        let s = set(&["192.0.2.1/32"]);
        assert!(s.contains(ip("192.0.2.1")) && !s.contains(ip("192.0.2.0")));
    }
}
