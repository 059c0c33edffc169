//! The flood rig that `benches/flood.rs` measures with and `tests/flood_filters.rs` checks: two
//! namespaces joined by a veth pair ([`topology`]), an AF_PACKET SYN sender ([`sender`], frames
//! from [`frames`]), the three filters on the receiver ([`filter`]: this project's XDP program,
//! an nftables set as fail2ban and CrowdSec's bouncer install it, nothing), and the receiver's CPU
//! time ([`cpu`]).
//!
//! Included with `#[path]` by both, so neither uses every item.
#![allow(
    dead_code,
    reason = "shared by a bench and a test, each using part of it"
)]

pub mod cpu;
pub mod filter;
pub mod frames;
pub mod live;
pub mod sender;
pub mod topology;

use std::collections::HashSet;
use std::net::Ipv4Addr;

/// `n` distinct pseudo-random public-looking IPv4 sources (splitmix64, fixed seed), outside the
/// rig's own 10.0.0.0/8 and outside 0/8, 127/8 and 224/3, which the receiver's stack would
/// discard as martians before any filter saw them.
pub fn locked_sources(n: usize) -> Vec<Ipv4Addr> {
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    let mut x: u64 = 0xf100d;
    while out.len() < n {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let a = Ipv4Addr::from((z ^ (z >> 31)) as u32);
        let first = a.octets()[0];
        if matches!(first, 0 | 10 | 127) || first >= 224 {
            continue;
        }
        if seen.insert(a) {
            out.push(a);
        }
    }
    out
}
