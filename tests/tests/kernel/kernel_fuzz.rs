//! Fuzz-style TEST_RUN: thousands of random and mutated frames through both entry points of the
//! real program, checked against an independent reference parser.
//!
//! Invariants: the program only ever returns PASS or DROP (never `XDP_ABORTED`), moves exactly one
//! verdict counter per frame, and never drops a frame that is not complete, unfragmented TCP to a
//! protected port. The config is hostile on purpose (anonymous burst 0, deny CIDRs, lockouts), so
//! nearly every judgeable protected-port TCP frame *could* be dropped.
//!
//! The seed is printed; set `LIMITER_FUZZ_SEED` to replay a run.

use std::net::IpAddr;

use limiter_common::config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY, TIER_SPONSOR};
use limiter_common::{verdict, KernelConfig};
use limiter_tests::frames::{
    Frame, ETH_P_8021AD, ETH_P_8021Q, IPV6_DSTOPTS, IPV6_FRAGMENT, IPV6_HOPOPTS, IPV6_ROUTING, L4,
};
use limiter_tests::testrun::{
    boottime_ns, counter_name, key, moved_counter, Instance, TC_ACT_OK, TC_ACT_SHOT, XDP_DROP,
    XDP_PASS,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PROTECTED: [u16; 3] = [80, 443, 8443];
const FRAMES: usize = 12_000;
/// One frame in this many also goes through the TC classifier.
const TC_EVERY: usize = 3;

/// Sources the generator favours, so lockouts, lists and tiers are actually hit.
const SOURCES: [&str; 10] = [
    "192.0.2.1",        // locked
    "192.0.2.2",        // allowed
    "198.51.100.7",     // denied /24
    "192.0.2.3",        // sponsor tier
    "192.0.2.4",        // clean, anonymous
    "2001:db8:1::1",    // locked /64
    "2001:db8:1::2",    // same /64
    "2001:db8:bad::1",  // denied /48
    "2001:db8:2::1",    // clean
    "::ffff:192.0.2.1", // v4-mapped form of the locked source
];

/// What the reference parser makes of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    NonIp,
    Malformed,
    Fragment,
    /// A complete IP packet that is not TCP.
    NotTcp,
    Tcp {
        dport: u16,
        syn_only: bool,
    },
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

/// An independent reading of the program's parsing rules (see docs/kernel-dataplane.md).
fn classify(f: &[u8]) -> Class {
    if f.len() < 14 {
        return Class::Malformed;
    }
    let mut ether_type = be16(f, 12);
    let mut off = 14;
    for _ in 0..2 {
        if ether_type == 0x8100 || ether_type == 0x88a8 {
            if f.len() < off + 4 {
                return Class::Malformed;
            }
            ether_type = be16(f, off + 2);
            off += 4;
        }
    }
    let (proto, l4) = match ether_type {
        0x0800 => {
            if f.len() < off + 20 {
                return Class::Malformed;
            }
            if f[off] >> 4 != 4 {
                return Class::Malformed;
            }
            let ihl = (f[off] & 0x0f) as usize * 4;
            if ihl < 20 {
                return Class::Malformed;
            }
            if be16(f, off + 6) & 0x3fff != 0 {
                return Class::Fragment;
            }
            if f.len() < off + ihl {
                return Class::Malformed;
            }
            (f[off + 9], off + ihl)
        }
        0x86dd => {
            if f.len() < off + 40 || f[off] >> 4 != 6 {
                return Class::Malformed;
            }
            let mut next = f[off + 6];
            let mut l4 = off + 40;
            for _ in 0..4 {
                match next {
                    44 => return Class::Fragment,
                    0 | 43 | 60 => {
                        if f.len() < l4 + 2 {
                            return Class::Malformed;
                        }
                        next = f[l4];
                        l4 += (f[l4 + 1] as usize + 1) * 8;
                    }
                    _ => break,
                }
            }
            match next {
                44 => return Class::Fragment,
                0 | 43 | 60 => return Class::Malformed,
                _ => (next, l4),
            }
        }
        _ => return Class::NonIp,
    };
    if proto != 6 {
        return Class::NotTcp;
    }
    if f.len() < l4 + 20 || f[l4 + 12] >> 4 < 5 {
        return Class::Malformed;
    }
    Class::Tcp {
        dport: be16(f, l4 + 2),
        syn_only: f[l4 + 13] & 0x12 == 0x02,
    }
}

/// The counters the program may move for a frame of this class under the fuzz config.
fn allowed_counters(class: Class) -> &'static [u32] {
    use verdict::*;
    match class {
        Class::NonIp => &[PASS_NON_IP],
        Class::Malformed => &[PASS_MALFORMED],
        Class::Fragment => &[PASS_FRAGMENT],
        Class::NotTcp => &[PASS_UNPROTECTED],
        Class::Tcp { dport, .. } if !PROTECTED.contains(&dport) => &[PASS_UNPROTECTED],
        Class::Tcp {
            syn_only: false, ..
        } => &[PASS_ALLOWED, DROP_LOCKED, DROP_DENIED, PASS_CLEAN],
        Class::Tcp { syn_only: true, .. } => &[
            PASS_ALLOWED,
            DROP_LOCKED,
            DROP_DENIED,
            PASS_SYN,
            DROP_CEILING,
        ],
    }
}

fn is_drop(counter: u32) -> bool {
    matches!(
        counter,
        verdict::DROP_LOCKED | verdict::DROP_DENIED | verdict::DROP_CEILING
    )
}

fn random_src(rng: &mut StdRng) -> IpAddr {
    if rng.gen_bool(0.6) {
        SOURCES[rng.gen_range(0..SOURCES.len())].parse().unwrap()
    } else if rng.gen_bool(0.5) {
        IpAddr::from(rng.gen::<[u8; 4]>())
    } else {
        IpAddr::from(rng.gen::<[u8; 16]>())
    }
}

/// A well-formed frame with random structure.
fn structured(rng: &mut StdRng) -> Vec<u8> {
    let src = random_src(rng);
    let dport = if rng.gen_bool(0.7) {
        PROTECTED[rng.gen_range(0..PROTECTED.len())]
    } else {
        rng.gen()
    };
    let mut f = match rng.gen_range(0..10) {
        0..=5 => Frame::tcp(src, dport, rng.gen()),
        6 => Frame::udp(src, dport),
        7 => Frame::icmp(src),
        _ => {
            let len = rng.gen_range(0..24);
            let bytes = (0..len).map(|_| rng.gen()).collect();
            Frame::new(
                src,
                L4::Raw {
                    proto: rng.gen(),
                    bytes,
                },
            )
        }
    };
    for _ in 0..rng.gen_range(0..=3) {
        let tpid = if rng.gen_bool(0.5) {
            ETH_P_8021Q
        } else {
            ETH_P_8021AD
        };
        f = f.vlan(tpid, rng.gen());
    }
    if src.is_ipv4() {
        if rng.gen_bool(0.2) {
            let n = rng.gen_range(1..=40);
            let opts: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            f = f.v4_options(&opts);
        }
        if rng.gen_bool(0.1) {
            f = f.v4_fragment(rng.gen_range(0..4), rng.gen());
        }
    } else {
        for _ in 0..rng.gen_range(0..=5) {
            let kinds = [IPV6_HOPOPTS, IPV6_ROUTING, IPV6_DSTOPTS, IPV6_FRAGMENT];
            let kind = if rng.gen_bool(0.9) {
                kinds[rng.gen_range(0..3)]
            } else {
                kinds[3]
            };
            f = f.v6_ext(kind, rng.gen_range(0..40));
        }
    }
    if rng.gen_bool(0.3) {
        let n = rng.gen_range(0..64);
        let payload: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
        f = f.payload(&payload);
    }
    f.build()
}

/// A random or mutated frame (at least Ethernet-sized: the kernel refuses anything shorter).
fn frame(rng: &mut StdRng) -> Vec<u8> {
    let mut f = if rng.gen_bool(0.15) {
        let len = rng.gen_range(14..200);
        let mut f: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        // Half of the pure noise gets an IP EtherType so it reaches the IP parsers.
        if rng.gen_bool(0.5) {
            let t: u16 = if rng.gen_bool(0.5) { 0x0800 } else { 0x86dd };
            f[12..14].copy_from_slice(&t.to_be_bytes());
        }
        f
    } else {
        structured(rng)
    };
    match rng.gen_range(0..4) {
        0 => {} // as built
        1 => {
            for _ in 0..rng.gen_range(1..=4) {
                let at = rng.gen_range(0..f.len());
                f[at] = rng.gen();
            }
        }
        2 => {
            for _ in 0..rng.gen_range(1..=3) {
                let at = rng.gen_range(0..f.len());
                f[at] ^= 1 << rng.gen_range(0..8);
            }
        }
        _ => {
            let len = rng.gen_range(14..=f.len());
            f.truncate(len);
        }
    }
    f
}

/// Shortest frame the kernel's skb TEST_RUN accepts (see kernel_testrun.rs).
fn skb_min_len(f: &[u8]) -> usize {
    14 + match be16(f, 12) {
        0x0800 => 20,
        0x86dd => 40,
        _ => 0,
    }
}

#[test]
fn random_and_mutated_frames_never_abort_and_never_drop_what_is_not_judgeable() {
    let Some(mut k) = Instance::load() else {
        return;
    };
    let now = boottime_ns();
    k.set_config(&KernelConfig {
        ceiling_burst: [0, 2, 1000, 2, 2],
        ceiling_per_sec: [0, 1, 1000, 1, 1],
        flags: FLAG_HAS_ALLOW | FLAG_HAS_DENY,
        sample_every: 7,
        ..KernelConfig::default()
    });
    for p in PROTECTED {
        k.protect(p);
    }
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    k.lock(key(ip("192.0.2.1"), 64), now + 3600 * 1_000_000_000, 1);
    k.lock(key(ip("2001:db8:1::"), 64), now + 3600 * 1_000_000_000, 2);
    k.allow(ip("192.0.2.2"), 32);
    k.deny(ip("198.51.100.0"), 24, 0);
    k.deny(ip("2001:db8:bad::"), 48, 0);
    k.set_tier(
        key(ip("192.0.2.3"), 64),
        TIER_SPONSOR,
        now + 3600 * 1_000_000_000,
    );

    let seed = std::env::var("LIMITER_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x11_1111_7e57u64);
    eprintln!("fuzz seed {seed} (LIMITER_FUZZ_SEED to replay)");
    let mut rng = StdRng::seed_from_u64(seed);

    let mut seen = [0u64; verdict::COUNT as usize];
    let mut tc_runs = 0;
    for i in 0..FRAMES {
        let f = frame(&mut rng);
        let class = classify(&f);
        let allowed = allowed_counters(class);

        let before = k.counters();
        let action = k.xdp(&f);
        let counter = moved_counter(&before, &k.counters());
        let ctx = || {
            format!(
                "frame {i} (seed {seed}), {class:?}, {} bytes: {f:02x?}",
                f.len()
            )
        };
        assert!(
            action == XDP_PASS || action == XDP_DROP,
            "XDP returned {action}: {}",
            ctx()
        );
        assert!(
            allowed.contains(&counter),
            "counter {} not in {:?}: {}",
            counter_name(counter),
            allowed.iter().map(|c| counter_name(*c)).collect::<Vec<_>>(),
            ctx()
        );
        assert_eq!(
            action == XDP_DROP,
            is_drop(counter),
            "action {action} disagrees with counter {}: {}",
            counter_name(counter),
            ctx()
        );
        seen[counter as usize] += 1;

        if i % TC_EVERY == 0 && f.len() >= skb_min_len(&f) {
            let before = k.counters();
            let tc = k.tc(&f);
            let counter = moved_counter(&before, &k.counters());
            assert!(
                tc == TC_ACT_OK || tc == TC_ACT_SHOT,
                "TC returned {tc}: {}",
                ctx()
            );
            assert!(
                allowed.contains(&counter),
                "tc counter {}: {}",
                counter_name(counter),
                ctx()
            );
            assert_eq!(tc == TC_ACT_SHOT, is_drop(counter), "tc: {}", ctx());
            tc_runs += 1;
        }
    }
    let summary: Vec<String> = seen
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{}={n}", counter_name(i as u32)))
        .collect();
    eprintln!("{FRAMES} XDP + {tc_runs} TC runs: {}", summary.join(" "));
    // The generator must reach every verdict, or the invariants above were checked on too little.
    for (i, n) in seen.iter().enumerate() {
        assert!(
            *n >= 10,
            "only {n} frames reached {}: {}",
            counter_name(i as u32),
            summary.join(" ")
        );
    }
}

/// The reference parser itself, on frames whose class is known.
#[test]
fn reference_parser_agrees_with_the_frame_builder() {
    let v4: IpAddr = "192.0.2.1".parse().unwrap();
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(
        classify(&Frame::tcp(v4, 443, 0x02).build()),
        Class::Tcp {
            dport: 443,
            syn_only: true
        }
    );
    assert_eq!(
        classify(&Frame::tcp(v6, 80, 0x12).vlan(ETH_P_8021Q, 1).build()),
        Class::Tcp {
            dport: 80,
            syn_only: false
        }
    );
    assert_eq!(classify(&Frame::udp(v4, 53).build()), Class::NotTcp);
    assert_eq!(
        classify(&Frame::udp(v4, 53).v4_fragment(1, false).build()),
        Class::Fragment
    );
    assert_eq!(
        classify(&Frame::tcp(v6, 80, 2).v6_ext(IPV6_FRAGMENT, 6).build()),
        Class::Fragment
    );
    assert_eq!(
        classify(&Frame::udp(v4, 53).ether_type(0x0806).build()),
        Class::NonIp
    );
    assert_eq!(
        classify(&Frame::tcp(v4, 443, 2).build()[..40]),
        Class::Malformed
    );
}
