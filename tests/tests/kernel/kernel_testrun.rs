//! BPF_PROG_TEST_RUN tests of the real kernel program: parsing, the verdict order, the connection
//! ceiling, lockouts and lists, with every verdict and the counter it moved asserted.
//!
//! Each test loads its own private instance (`Instance::load`), so tests run in parallel. Time is
//! controlled without sleeping: deadlines are written relative to `CLOCK_BOOTTIME` (already past
//! or far ahead), and refill is exercised by moving a bucket's `last_ns` back.

use std::net::IpAddr;

use aya::maps::{MapData, RingBuf};
use limiter_common::config::{
    FLAG_HAS_ALLOW, FLAG_HAS_DENY, FLAG_LOCK_ALL_PORTS, TIER_AGENT, TIER_ANON, TIER_CRAWLER,
    TIER_SESSION, TIER_SPONSOR,
};
use limiter_common::lockout_cache::{lockout_slot, overflow_bit};
use limiter_common::maps::MAP_EVENTS;
use limiter_common::{verdict, Bucket, CeilingEvent, KernelConfig, LockoutSlot};
use limiter_tests::frames::{
    Frame, ETH_P_8021AD, ETH_P_8021Q, ETH_P_ARP, IPV6_DSTOPTS, IPV6_FRAGMENT, IPV6_HOPOPTS,
    IPV6_ROUTING, L4, TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN,
};
use limiter_tests::testrun::{
    boottime_ns, counter_name, key, Instance, TC_ACT_OK, TC_ACT_SHOT, XDP_DROP, XDP_PASS,
};

const PORT: u16 = 443;
const OTHER_PORT: u16 = 8080;
const SEC: u64 = 1_000_000_000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Ceilings small enough to reach in a test; refill slow enough not to interfere.
fn config() -> KernelConfig {
    KernelConfig {
        ceiling_burst: [3, 5, 8, 6, 7],
        ceiling_per_sec: [1, 1, 1, 1, 1],
        ..KernelConfig::default()
    }
}

fn setup_with(cfg: KernelConfig) -> Option<Instance> {
    let mut k = Instance::load()?;
    k.set_config(&cfg);
    k.protect(PORT);
    Some(k)
}

fn setup() -> Option<Instance> {
    setup_with(config())
}

fn syn(src: &str) -> Vec<u8> {
    Frame::tcp(ip(src), PORT, TCP_SYN).build()
}

#[track_caller]
fn expect(k: &mut Instance, frame: &[u8], action: u32, counter: u32) {
    let (a, c) = k.xdp_counted(frame);
    assert_eq!(
        (a, counter_name(c)),
        (action, counter_name(counter)),
        "frame of {} bytes: {:02x?}",
        frame.len(),
        frame
    );
}

/// One row of a parsing table: a frame, and the verdict and counter it must produce.
struct Row {
    what: &'static str,
    frame: Vec<u8>,
    action: u32,
    counter: u32,
}

fn row(what: &'static str, frame: Frame, action: u32, counter: u32) -> Row {
    Row {
        what,
        frame: frame.build(),
        action,
        counter,
    }
}

fn run_table(k: &mut Instance, rows: &[Row]) {
    let mut failures = Vec::new();
    for r in rows {
        let (a, c) = k.xdp_counted(&r.frame);
        if (a, c) != (r.action, r.counter) {
            failures.push(format!(
                "{}: got ({a}, {}), want ({}, {})",
                r.what,
                counter_name(c),
                r.action,
                counter_name(r.counter)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn parses_families_encapsulations_and_protocols() {
    let cfg = KernelConfig {
        ceiling_burst: [1000; 5],
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    let v4 = ip("192.0.2.7");
    let v6 = ip("2001:db8:1:2::7");
    use verdict::*;
    let rows = [
        row("v4 SYN", Frame::tcp(v4, PORT, TCP_SYN), XDP_PASS, PASS_SYN),
        row(
            "v4 ACK",
            Frame::tcp(v4, PORT, TCP_ACK),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "v4 SYN-ACK",
            Frame::tcp(v4, PORT, TCP_SYN | TCP_ACK),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "v4 PSH-ACK",
            Frame::tcp(v4, PORT, TCP_PSH | TCP_ACK),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "v4 FIN",
            Frame::tcp(v4, PORT, TCP_FIN | TCP_ACK),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "v4 RST",
            Frame::tcp(v4, PORT, TCP_RST),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "v4 SYN other port",
            Frame::tcp(v4, OTHER_PORT, TCP_SYN),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row(
            "v4 ACK other port",
            Frame::tcp(v4, OTHER_PORT, TCP_ACK),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row("v6 SYN", Frame::tcp(v6, PORT, TCP_SYN), XDP_PASS, PASS_SYN),
        row(
            "v6 ACK",
            Frame::tcp(v6, PORT, TCP_ACK),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "v6 SYN other port",
            Frame::tcp(v6, OTHER_PORT, TCP_SYN),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row(
            "v4-mapped v6 SYN",
            Frame::tcp(ip("::ffff:192.0.2.9"), PORT, TCP_SYN),
            XDP_PASS,
            PASS_SYN,
        ),
        row(
            "one 802.1Q tag",
            Frame::tcp(v4, PORT, TCP_SYN).vlan(ETH_P_8021Q, 10),
            XDP_PASS,
            PASS_SYN,
        ),
        row(
            "one 802.1ad tag",
            Frame::tcp(v6, PORT, TCP_SYN).vlan(ETH_P_8021AD, 10),
            XDP_PASS,
            PASS_SYN,
        ),
        row(
            "QinQ",
            Frame::tcp(v4, PORT, TCP_SYN)
                .vlan(ETH_P_8021AD, 10)
                .vlan(ETH_P_8021Q, 20),
            XDP_PASS,
            PASS_SYN,
        ),
        row(
            "two tags, v6 ACK",
            Frame::tcp(v6, PORT, TCP_ACK)
                .vlan(ETH_P_8021Q, 10)
                .vlan(ETH_P_8021Q, 20),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "three tags",
            Frame::tcp(v4, PORT, TCP_SYN)
                .vlan(ETH_P_8021AD, 1)
                .vlan(ETH_P_8021Q, 2)
                .vlan(ETH_P_8021Q, 3),
            XDP_PASS,
            PASS_NON_IP,
        ),
        row(
            "ARP",
            Frame::udp(v4, 1).ether_type(ETH_P_ARP),
            XDP_PASS,
            PASS_NON_IP,
        ),
        row(
            "ARP in a tag",
            Frame::udp(v4, 1).vlan(ETH_P_8021Q, 5).ether_type(ETH_P_ARP),
            XDP_PASS,
            PASS_NON_IP,
        ),
        row(
            "v4 options (4 bytes)",
            Frame::tcp(v4, PORT, TCP_SYN).v4_options(&[1, 1, 1, 1]),
            XDP_PASS,
            PASS_SYN,
        ),
        row(
            "v4 options (40 bytes)",
            Frame::tcp(v4, PORT, TCP_SYN).v4_options(&[1; 40]),
            XDP_PASS,
            PASS_SYN,
        ),
        row(
            "v4 options, ACK",
            Frame::tcp(v4, PORT, TCP_ACK)
                .v4_options(&[1; 12])
                .vlan(ETH_P_8021Q, 9),
            XDP_PASS,
            PASS_CLEAN,
        ),
        row(
            "v4 first fragment",
            Frame::tcp(v4, PORT, TCP_SYN).v4_fragment(0, true),
            XDP_PASS,
            PASS_FRAGMENT,
        ),
        row(
            "v4 later fragment",
            Frame::tcp(v4, PORT, TCP_SYN).v4_fragment(185, false),
            XDP_PASS,
            PASS_FRAGMENT,
        ),
        row(
            "v4 UDP fragment",
            Frame::udp(v4, PORT).v4_fragment(3, true),
            XDP_PASS,
            PASS_FRAGMENT,
        ),
        row(
            "v6 fragment header",
            Frame::tcp(v6, PORT, TCP_SYN).v6_ext(IPV6_FRAGMENT, 6),
            XDP_PASS,
            PASS_FRAGMENT,
        ),
        row(
            "v6 fragment after dstopts",
            Frame::tcp(v6, PORT, TCP_SYN)
                .v6_ext(IPV6_DSTOPTS, 6)
                .v6_ext(IPV6_FRAGMENT, 6),
            XDP_PASS,
            PASS_FRAGMENT,
        ),
        row(
            "v6 SYN behind hop-by-hop, routing, dstopts",
            Frame::tcp(v6, PORT, TCP_SYN)
                .v6_ext(IPV6_HOPOPTS, 6)
                .v6_ext(IPV6_ROUTING, 22)
                .v6_ext(IPV6_DSTOPTS, 100),
            XDP_PASS,
            PASS_SYN,
        ),
        row(
            "v6 SYN behind five extension headers",
            Frame::tcp(v6, PORT, TCP_SYN)
                .v6_ext(IPV6_HOPOPTS, 6)
                .v6_ext(IPV6_DSTOPTS, 6)
                .v6_ext(IPV6_ROUTING, 6)
                .v6_ext(IPV6_DSTOPTS, 6)
                .v6_ext(IPV6_DSTOPTS, 6),
            XDP_PASS,
            PASS_MALFORMED,
        ),
        row(
            "v4 UDP to a protected port number",
            Frame::udp(v4, PORT),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row("v6 UDP", Frame::udp(v6, PORT), XDP_PASS, PASS_UNPROTECTED),
        row("ICMP echo", Frame::icmp(v4), XDP_PASS, PASS_UNPROTECTED),
        row("ICMPv6 echo", Frame::icmp(v6), XDP_PASS, PASS_UNPROTECTED),
        row(
            "ICMP in QinQ",
            Frame::icmp(v4).vlan(ETH_P_8021AD, 1).vlan(ETH_P_8021Q, 2),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row(
            "GRE",
            Frame::new(
                v4,
                L4::Raw {
                    proto: 47,
                    bytes: vec![0; 8],
                },
            ),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row(
            "TCP with no header bytes",
            Frame::new(
                v4,
                L4::Raw {
                    proto: 6,
                    bytes: vec![],
                },
            ),
            XDP_PASS,
            PASS_MALFORMED,
        ),
    ];
    run_table(&mut k, &rows);
}

/// Header fields a parser must reject rather than trust.
#[test]
fn malformed_headers_pass_as_malformed() {
    let Some(mut k) = setup() else { return };
    let good = syn("192.0.2.7");
    let ip_at = 14;
    let tcp_at = 14 + 20;
    let cases: [(&str, usize, u8); 5] = [
        ("IPv4 version 5", ip_at, 0x55),
        ("IPv4 IHL 4", ip_at, 0x44),
        ("IPv4 IHL 0", ip_at, 0x40),
        ("TCP data offset 4", tcp_at + 12, 0x40),
        ("TCP data offset 0", tcp_at + 12, 0x00),
    ];
    for (what, at, byte) in cases {
        let mut f = good.clone();
        f[at] = byte;
        let (a, c) = k.xdp_counted(&f);
        assert_eq!(
            (a, counter_name(c)),
            (XDP_PASS, counter_name(verdict::PASS_MALFORMED)),
            "{what}"
        );
    }
    // IHL 15 on a 20-byte header: the options run past the frame.
    let mut f = Frame::udp(ip("192.0.2.7"), 53).build();
    f[ip_at] = 0x4f;
    f.truncate(14 + 40);
    expect(&mut k, &f, XDP_PASS, verdict::PASS_MALFORMED);
    let mut f = Frame::tcp(ip("2001:db8::1"), PORT, TCP_SYN).build();
    f[ip_at] = 0x40;
    expect(&mut k, &f, XDP_PASS, verdict::PASS_MALFORMED);
}

/// Every prefix of valid SYN frames: the kernel refuses frames shorter than Ethernet; every other
/// truncation passes as malformed; only the whole frame is judged (and counted) as a SYN.
#[test]
fn every_truncation_of_a_syn_passes_as_malformed() {
    let Some(mut k) = setup() else { return };
    let frames = [
        ("v4", syn("192.0.2.7")),
        ("v6", syn("2001:db8::7")),
        (
            "v4 options in QinQ",
            Frame::tcp(ip("192.0.2.8"), PORT, TCP_SYN)
                .v4_options(&[1; 8])
                .vlan(ETH_P_8021AD, 1)
                .vlan(ETH_P_8021Q, 2)
                .build(),
        ),
        (
            "v6 dstopts in a tag",
            Frame::tcp(ip("2001:db8::8"), PORT, TCP_SYN)
                .v6_ext(IPV6_DSTOPTS, 14)
                .vlan(ETH_P_8021Q, 2)
                .build(),
        ),
    ];
    for (what, frame) in frames {
        for len in 0..frame.len() {
            let cut = &frame[..len];
            if len < 14 {
                assert!(
                    k.try_xdp(cut).is_err(),
                    "{what}: the kernel accepted a {len}-byte frame"
                );
                continue;
            }
            let (a, c) = k.xdp_counted(cut);
            assert_eq!(
                (a, counter_name(c)),
                (XDP_PASS, counter_name(verdict::PASS_MALFORMED)),
                "{what} cut to {len} of {} bytes",
                frame.len()
            );
            if len < skb_min_len(&frame) {
                // An skb whose EtherType is IPv4/IPv6 must hold that header: the kernel refuses
                // shorter ones before the program runs.
                assert!(
                    k.try_tc(cut).is_err(),
                    "{what}: tc TEST_RUN accepted {len} bytes"
                );
                continue;
            }
            let (a, c) = k.tc_counted(cut);
            assert_eq!(
                (a, counter_name(c)),
                (TC_ACT_OK, counter_name(verdict::PASS_MALFORMED)),
                "{what} cut to {len} bytes (tc)"
            );
        }
        expect(&mut k, &frame, XDP_PASS, verdict::PASS_SYN);
    }
}

/// Shortest frame the kernel's skb TEST_RUN accepts: Ethernet plus the IPv4/IPv6 header its
/// outer EtherType announces (nothing more for a VLAN tag, whose inner headers it does not check).
fn skb_min_len(frame: &[u8]) -> usize {
    14 + match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => 20,
        0x86dd => 40,
        _ => 0,
    }
}

#[test]
fn ceiling_passes_burst_then_drops_and_spares_other_sources() {
    let Some(mut k) = setup() else { return };
    let a = syn("192.0.2.10");
    for _ in 0..3 {
        expect(&mut k, &a, XDP_PASS, verdict::PASS_SYN);
    }
    expect(&mut k, &a, XDP_DROP, verdict::DROP_CEILING);
    expect(&mut k, &a, XDP_DROP, verdict::DROP_CEILING);
    // Established traffic and handshakes from the same source are not new connections.
    expect(
        &mut k,
        &Frame::tcp(ip("192.0.2.10"), PORT, TCP_ACK).build(),
        XDP_PASS,
        verdict::PASS_CLEAN,
    );
    expect(
        &mut k,
        &Frame::tcp(ip("192.0.2.10"), PORT, TCP_SYN | TCP_ACK).build(),
        XDP_PASS,
        verdict::PASS_CLEAN,
    );
    // Nor is a SYN to a port that is not protected.
    expect(
        &mut k,
        &Frame::tcp(ip("192.0.2.10"), OTHER_PORT, TCP_SYN).build(),
        XDP_PASS,
        verdict::PASS_UNPROTECTED,
    );
    let b = syn("192.0.2.11");
    for _ in 0..3 {
        expect(&mut k, &b, XDP_PASS, verdict::PASS_SYN);
    }
    expect(&mut k, &b, XDP_DROP, verdict::DROP_CEILING);
}

#[test]
fn acks_do_not_spend_the_ceiling() {
    let Some(mut k) = setup() else { return };
    let ack = Frame::tcp(ip("192.0.2.12"), PORT, TCP_ACK).build();
    for _ in 0..10 {
        expect(&mut k, &ack, XDP_PASS, verdict::PASS_CLEAN);
    }
    let s = syn("192.0.2.12");
    for _ in 0..3 {
        expect(&mut k, &s, XDP_PASS, verdict::PASS_SYN);
    }
    expect(&mut k, &s, XDP_DROP, verdict::DROP_CEILING);
}

#[test]
fn tier_elevated_source_gets_its_tier_ceiling() {
    let Some(mut k) = setup() else { return };
    let now = boottime_ns();
    let sponsor = "192.0.2.20";
    let session = "2001:db8:20::1";
    let expired = "192.0.2.21";
    let bogus = "192.0.2.22";
    let crawler = "192.0.2.23";
    let agent = "192.0.2.24";
    k.set_tier(key(ip(sponsor), 64), TIER_SPONSOR, now + 3600 * SEC);
    k.set_tier(key(ip(crawler), 64), TIER_CRAWLER, now + 3600 * SEC);
    k.set_tier(key(ip(agent), 64), TIER_AGENT, now + 3600 * SEC);
    k.set_tier(key(ip(session), 64), TIER_SESSION, now + 3600 * SEC);
    k.set_tier(key(ip(expired), 64), TIER_SPONSOR, now - SEC);
    // A tier index the program does not know is treated as anonymous, not trusted.
    k.set_tier(key(ip(bogus), 64), 7, now + 3600 * SEC);
    let cfg = config();
    for (src, tier) in [
        (sponsor, TIER_SPONSOR),
        (session, TIER_SESSION),
        (crawler, TIER_CRAWLER),
        (agent, TIER_AGENT),
        (expired, TIER_ANON),
        (bogus, TIER_ANON),
    ] {
        let f = syn(src);
        for i in 0..cfg.ceiling_burst[tier as usize] {
            let (a, c) = k.xdp_counted(&f);
            assert_eq!(
                (a, c),
                (XDP_PASS, verdict::PASS_SYN),
                "{src} SYN {i} at tier {tier}"
            );
        }
        expect(&mut k, &f, XDP_DROP, verdict::DROP_CEILING);
    }
}

#[test]
fn ipv6_sources_in_one_prefix_share_a_bucket() {
    let Some(mut k) = setup() else { return };
    // Three SYNs from three addresses of one /64 spend its whole burst of 3.
    for src in ["2001:db8:1:1::1", "2001:db8:1:1::2", "2001:db8:1:1:ffff::3"] {
        expect(&mut k, &syn(src), XDP_PASS, verdict::PASS_SYN);
    }
    expect(
        &mut k,
        &syn("2001:db8:1:1::4"),
        XDP_DROP,
        verdict::DROP_CEILING,
    );
    // The neighbouring /64 has its own bucket.
    expect(&mut k, &syn("2001:db8:1:2::1"), XDP_PASS, verdict::PASS_SYN);
    let masked = key(ip("2001:db8:1:1::9"), 64);
    assert!(
        k.bucket(masked).is_some(),
        "bucket keyed by the /64 prefix {masked:?}"
    );
}

#[test]
fn v6_prefix_length_comes_from_the_config() {
    let cfg = KernelConfig {
        v6_prefix_len: 128,
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    for src in ["2001:db8:1:1::1", "2001:db8:1:1::2"] {
        for _ in 0..3 {
            expect(&mut k, &syn(src), XDP_PASS, verdict::PASS_SYN);
        }
        expect(&mut k, &syn(src), XDP_DROP, verdict::DROP_CEILING);
    }
}

#[test]
fn v4_mapped_ipv6_source_is_keyed_as_its_ipv4_address() {
    let Some(mut k) = setup() else { return };
    for _ in 0..3 {
        expect(
            &mut k,
            &syn("::ffff:192.0.2.30"),
            XDP_PASS,
            verdict::PASS_SYN,
        );
    }
    // Same bucket as the plain IPv4 source…
    expect(&mut k, &syn("192.0.2.30"), XDP_DROP, verdict::DROP_CEILING);
    // …and not shared with other mapped sources (which would all mask to `::/64`).
    expect(
        &mut k,
        &syn("::ffff:192.0.2.31"),
        XDP_PASS,
        verdict::PASS_SYN,
    );
    k.lock(key(ip("192.0.2.32"), 64), boottime_ns() + 60 * SEC, 1);
    expect(
        &mut k,
        &Frame::tcp(ip("::ffff:192.0.2.32"), PORT, TCP_ACK).build(),
        XDP_DROP,
        verdict::DROP_LOCKED,
    );
}

#[test]
fn bucket_refills_as_time_passes() {
    let Some(mut k) = setup() else { return };
    let src = "192.0.2.40";
    let s = syn(src);
    for _ in 0..3 {
        expect(&mut k, &s, XDP_PASS, verdict::PASS_SYN);
    }
    expect(&mut k, &s, XDP_DROP, verdict::DROP_CEILING);
    // Two seconds at one SYN per second: move the last refill back instead of waiting.
    let b = k.bucket(key(ip(src), 64)).expect("bucket after SYNs");
    assert!(b.tokens < limiter_common::bucket::TOKEN_SCALE, "{b:?}");
    k.set_bucket(
        key(ip(src), 64),
        Bucket {
            tokens: b.tokens,
            last_ns: b.last_ns - 2 * SEC,
        },
    );
    expect(&mut k, &s, XDP_PASS, verdict::PASS_SYN);
    expect(&mut k, &s, XDP_PASS, verdict::PASS_SYN);
    expect(&mut k, &s, XDP_DROP, verdict::DROP_CEILING);
    // A long absence refills to the burst, never beyond.
    let b = k.bucket(key(ip(src), 64)).unwrap();
    k.set_bucket(
        key(ip(src), 64),
        Bucket {
            tokens: b.tokens,
            last_ns: b.last_ns.saturating_sub(3600 * SEC),
        },
    );
    for _ in 0..3 {
        expect(&mut k, &s, XDP_PASS, verdict::PASS_SYN);
    }
    expect(&mut k, &s, XDP_DROP, verdict::DROP_CEILING);
}

#[test]
fn zero_burst_admits_no_new_connection() {
    let cfg = KernelConfig {
        ceiling_burst: [0, 5, 8, 6, 7],
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    expect(&mut k, &syn("192.0.2.50"), XDP_DROP, verdict::DROP_CEILING);
    expect(&mut k, &syn("192.0.2.50"), XDP_DROP, verdict::DROP_CEILING);
    expect(
        &mut k,
        &Frame::tcp(ip("192.0.2.50"), PORT, TCP_ACK).build(),
        XDP_PASS,
        verdict::PASS_CLEAN,
    );
}

#[test]
fn missing_config_falls_back_to_defaults() {
    let Some(mut k) = Instance::load() else {
        return;
    };
    k.protect(PORT);
    let burst = KernelConfig::default().ceiling_burst[TIER_ANON as usize];
    let s = syn("192.0.2.60");
    for _ in 0..burst {
        expect(&mut k, &s, XDP_PASS, verdict::PASS_SYN);
    }
    expect(&mut k, &s, XDP_DROP, verdict::DROP_CEILING);
}

#[test]
fn over_ceiling_drops_are_sampled_to_the_ring_buffer() {
    let cfg = KernelConfig {
        sample_every: 2,
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    // The sampling countdown is per CPU: keep every run of this test on one.
    pin_to_one_cpu();
    let now = boottime_ns();
    k.set_tier(key(ip("192.0.2.70"), 64), TIER_SESSION, now + 3600 * SEC);
    let s = syn("192.0.2.70");
    for _ in 0..5 {
        expect(&mut k, &s, XDP_PASS, verdict::PASS_SYN);
    }
    for _ in 0..6 {
        expect(&mut k, &s, XDP_DROP, verdict::DROP_CEILING);
    }
    let map = k.ebpf().map_mut(MAP_EVENTS).unwrap();
    let mut ring: RingBuf<&mut MapData> = RingBuf::try_from(map).unwrap();
    let mut events = Vec::new();
    while let Some(item) = ring.next() {
        assert_eq!(item.len(), size_of::<CeilingEvent>());
        // SAFETY: the program writes whole CeilingEvents; read_unaligned copes with any alignment.
        events.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<CeilingEvent>()) });
    }
    // TEST_RUN runs on one CPU, whose countdown samples drops 1, 3 and 5 of the six.
    assert_eq!(events.len(), 3, "{events:?}");
    for e in &events {
        assert_eq!(e.addr, key(ip("192.0.2.70"), 64).addr);
        assert_eq!((e.tier, e.dport), (TIER_SESSION, PORT as u32));
        assert!(
            e.ts_ns >= now,
            "event time {} before the test's {now}",
            e.ts_ns
        );
    }
}

/// Pins the calling thread to the CPU it is on (TEST_RUN runs the program on the caller's CPU).
fn pin_to_one_cpu() {
    // SAFETY: plain libc calls on a zeroed cpu_set_t owned by this frame.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        let rc = libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "sched_setaffinity");
    }
}

#[test]
fn sampling_zero_sends_no_events() {
    let cfg = KernelConfig {
        sample_every: 0,
        ceiling_burst: [0; 5],
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    for _ in 0..4 {
        expect(&mut k, &syn("192.0.2.71"), XDP_DROP, verdict::DROP_CEILING);
    }
    let map = k.ebpf().map_mut(MAP_EVENTS).unwrap();
    let mut ring: RingBuf<&mut MapData> = RingBuf::try_from(map).unwrap();
    assert!(ring.next().is_none());
}

#[test]
fn lockout_drops_until_its_deadline() {
    let Some(mut k) = setup() else { return };
    let src = "192.0.2.80";
    k.lock(key(ip(src), 64), boottime_ns() + 60 * SEC, 1);
    expect(&mut k, &syn(src), XDP_DROP, verdict::DROP_LOCKED);
    let ack = Frame::tcp(ip(src), PORT, TCP_ACK).build();
    expect(&mut k, &ack, XDP_DROP, verdict::DROP_LOCKED);
    // Only protected ports, unless widened.
    expect(
        &mut k,
        &Frame::tcp(ip(src), OTHER_PORT, TCP_SYN).build(),
        XDP_PASS,
        verdict::PASS_UNPROTECTED,
    );
    expect(
        &mut k,
        &Frame::icmp(ip(src)).build(),
        XDP_PASS,
        verdict::PASS_UNPROTECTED,
    );
    // Another source is not affected.
    expect(&mut k, &syn("192.0.2.81"), XDP_PASS, verdict::PASS_SYN);
    // A deadline already past: the lockout has expired and packets pass. (The program reads the
    // clock at most once per jiffy, so "past" is by more than a jiffy.)
    k.lock(key(ip(src), 64), boottime_ns() - SEC, 2);
    expect(&mut k, &ack, XDP_PASS, verdict::PASS_CLEAN);
    expect(&mut k, &syn(src), XDP_PASS, verdict::PASS_SYN);
}

/// The program's clock moves: a lockout a few jiffies ahead drops now and passes once the kernel
/// clock has reached its deadline, never before. (Polled with a deadline, no fixed sleep.)
#[test]
fn lockout_expires_as_the_kernel_clock_advances() {
    let Some(mut k) = setup() else { return };
    let src = "192.0.2.82";
    let ack = Frame::tcp(ip(src), PORT, TCP_ACK).build();
    let deadline = boottime_ns() + 50_000_000;
    k.lock(key(ip(src), 64), deadline, 1);
    expect(&mut k, &ack, XDP_DROP, verdict::DROP_LOCKED);
    let passed_at = limiter_tests::poll(
        std::time::Duration::from_secs(5),
        "the lockout to expire in the program",
        || (k.xdp(&ack) == XDP_PASS).then(boottime_ns),
    );
    assert!(
        passed_at >= deadline,
        "passed {} ns before the deadline",
        deadline - passed_at
    );
    expect(&mut k, &ack, XDP_PASS, verdict::PASS_CLEAN);
}

#[test]
fn unlock_takes_effect_at_once() {
    let Some(mut k) = setup() else { return };
    let src = "2001:db8:80::1";
    k.lock(key(ip(src), 64), boottime_ns() + 3600 * SEC, 3);
    // The lockout covers the source's whole /64.
    expect(
        &mut k,
        &syn("2001:db8:80::2"),
        XDP_DROP,
        verdict::DROP_LOCKED,
    );
    k.unlock(key(ip(src), 64));
    expect(&mut k, &syn(src), XDP_PASS, verdict::PASS_SYN);
}

/// An IPv4 source other than `src` whose key has the same lockout-cache slot, searched upward
/// from `from`.
fn collider(src: &str, from: [u8; 4]) -> String {
    let want = lockout_slot(&key(ip(src), 64));
    (u32::from_be_bytes(from)..)
        .map(|n| std::net::Ipv4Addr::from(n).to_string())
        .find(|c| c != src && lockout_slot(&key(ip(c), 64)) == want)
        .unwrap()
}

fn ack(src: &str) -> Vec<u8> {
    Frame::tcp(ip(src), PORT, TCP_ACK).build()
}

/// Two locked sources sharing a cache slot: the first owns the slot, the second is found through
/// the overflow fallback to the hash; each unlock lifts exactly its own lockout.
#[test]
fn colliding_lockouts_are_both_enforced_and_lifted_separately() {
    let Some(mut k) = setup() else { return };
    let owner = "192.0.2.100";
    let other = collider(owner, [198, 51, 100, 0]);
    let index = lockout_slot(&key(ip(owner), 64));
    k.lock(key(ip(owner), 64), boottime_ns() + 60 * SEC, 1);
    k.lock(key(ip(&other), 64), boottime_ns() + 60 * SEC, 2);
    let slot = k.slot(index);
    assert_eq!(
        (slot.key, slot.flags),
        (key(ip(owner), 64), overflow_bit(&key(ip(&other), 64))),
        "the first lock owns the slot, the second overflowed"
    );
    expect(&mut k, &ack(owner), XDP_DROP, verdict::DROP_LOCKED);
    expect(&mut k, &ack(&other), XDP_DROP, verdict::DROP_LOCKED);
    expect(&mut k, &syn(&other), XDP_DROP, verdict::DROP_LOCKED);
    k.unlock(key(ip(owner), 64));
    expect(&mut k, &ack(owner), XDP_PASS, verdict::PASS_CLEAN);
    expect(&mut k, &ack(&other), XDP_DROP, verdict::DROP_LOCKED);
    k.unlock(key(ip(&other), 64));
    expect(&mut k, &ack(owner), XDP_PASS, verdict::PASS_CLEAN);
    expect(&mut k, &ack(&other), XDP_PASS, verdict::PASS_CLEAN);
}

/// The program trusts the slot: a source whose slot holds another locked key, with no overflow
/// bit of its own, is not locked (the hash is not consulted, even if it has an entry nobody
/// cached); with its bit set, the hash decides.
#[test]
fn a_slot_without_overflow_spares_the_hash_lookup() {
    let Some(mut k) = setup() else { return };
    let owner = "192.0.2.101";
    let other = collider(owner, [198, 51, 100, 0]);
    let index = lockout_slot(&key(ip(owner), 64));
    k.lock(key(ip(owner), 64), boottime_ns() + 60 * SEC, 1);
    // Another source of the same slot, never locked: passes.
    expect(&mut k, &ack(&other), XDP_PASS, verdict::PASS_CLEAN);
    // In the hash but not announced by the slot (a state the daemon never leaves): passes.
    k.lock_hash_only(key(ip(&other), 64), boottime_ns() + 60 * SEC, 1);
    expect(&mut k, &ack(&other), XDP_PASS, verdict::PASS_CLEAN);
    expect(&mut k, &ack(owner), XDP_DROP, verdict::DROP_LOCKED);
    // Every overflow bit but the source's own: still no hash lookup.
    let mut slot = k.slot(index);
    let bit = overflow_bit(&key(ip(&other), 64));
    slot.flags = !bit;
    k.set_slot(index, slot);
    expect(&mut k, &ack(&other), XDP_PASS, verdict::PASS_CLEAN);
    // The source's own overflow bit sends the lookup to the hash.
    slot.flags = bit;
    k.set_slot(index, slot);
    expect(&mut k, &ack(&other), XDP_DROP, verdict::DROP_LOCKED);
    expect(&mut k, &ack(owner), XDP_DROP, verdict::DROP_LOCKED);
}

/// A clean source whose slot is overflowed by other locked sources passes without the hash unless
/// its own bit is set; locked sources behind the filter are all found.
#[test]
fn the_overflow_filter_separates_colliding_sources() {
    let Some(mut k) = setup() else { return };
    let owner = "192.0.2.104";
    let bit_of = |src: &str| overflow_bit(&key(ip(src), 64));
    // Two more locked sources of the owner's slot, then a clean one with a bit neither set.
    let first = collider(owner, [198, 51, 100, 0]);
    let second = collider(owner, next_after(&first));
    let mut clean = collider(owner, next_after(&second));
    while bit_of(&clean) & (bit_of(&first) | bit_of(&second)) != 0 {
        clean = collider(owner, next_after(&clean));
    }
    for (src, level) in [(owner, 1), (first.as_str(), 2), (second.as_str(), 3)] {
        k.lock(key(ip(src), 64), boottime_ns() + 60 * SEC, level);
    }
    let slot = k.slot(lockout_slot(&key(ip(owner), 64)));
    assert_eq!(slot.flags, bit_of(&first) | bit_of(&second));
    for src in [owner, first.as_str(), second.as_str()] {
        expect(&mut k, &ack(src), XDP_DROP, verdict::DROP_LOCKED);
    }
    expect(&mut k, &ack(&clean), XDP_PASS, verdict::PASS_CLEAN);
    // Proof that the clean source skipped the hash: an uncached entry for it changes nothing.
    k.lock_hash_only(key(ip(&clean), 64), boottime_ns() + 60 * SEC, 1);
    expect(&mut k, &ack(&clean), XDP_PASS, verdict::PASS_CLEAN);
}

fn next_after(src: &str) -> [u8; 4] {
    let a: std::net::Ipv4Addr = src.parse().unwrap();
    (u32::from(a) + 1).to_be_bytes()
}

/// The program finds a slot exactly where `lockout_slot` puts it, for IPv4 and for an IPv6 /64
/// (the slot alone decides: nothing is in the hash), and an expired slot entry passes.
#[test]
fn the_program_and_the_daemon_agree_on_slots() {
    let Some(mut k) = setup() else { return };
    for src in ["192.0.2.102", "2001:db8:102:7::1"] {
        let k64 = key(ip(src), 64);
        let index = lockout_slot(&k64);
        k.set_slot(
            index,
            LockoutSlot {
                key: k64,
                deadline_ns: boottime_ns() + 60 * SEC,
                level: 1,
                flags: 0,
            },
        );
        assert!(!k.locked(&k64));
        expect(&mut k, &syn(src), XDP_DROP, verdict::DROP_LOCKED);
        expect(&mut k, &ack(src), XDP_DROP, verdict::DROP_LOCKED);
        k.set_slot(index, LockoutSlot::default());
        expect(&mut k, &ack(src), XDP_PASS, verdict::PASS_CLEAN);
    }
    // An expired lockout in its slot (the sweep has not run yet) passes.
    let src = "192.0.2.103";
    k.lock(key(ip(src), 64), boottime_ns() - SEC, 1);
    assert!(k
        .slot(lockout_slot(&key(ip(src), 64)))
        .holds(&key(ip(src), 64)));
    expect(&mut k, &ack(src), XDP_PASS, verdict::PASS_CLEAN);
    expect(&mut k, &syn(src), XDP_PASS, verdict::PASS_SYN);
}

#[test]
fn allow_list_beats_lockout_deny_and_ceiling() {
    let cfg = KernelConfig {
        flags: FLAG_HAS_ALLOW | FLAG_HAS_DENY,
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    let src = "192.0.2.90";
    k.allow(ip("192.0.2.0"), 24);
    k.lock(key(ip(src), 64), boottime_ns() + 60 * SEC, 1);
    k.deny(ip("192.0.0.0"), 16, 0);
    for _ in 0..10 {
        expect(&mut k, &syn(src), XDP_PASS, verdict::PASS_ALLOWED);
    }
    // Outside the allowed /24, the deny /16 applies.
    expect(&mut k, &syn("192.0.3.1"), XDP_DROP, verdict::DROP_DENIED);
    // With the allow flag clear the trie is not consulted at all.
    k.set_config(&KernelConfig {
        flags: FLAG_HAS_DENY,
        ..config()
    });
    expect(&mut k, &syn(src), XDP_DROP, verdict::DROP_LOCKED);
}

#[test]
fn lockout_is_checked_before_deny() {
    let cfg = KernelConfig {
        flags: FLAG_HAS_DENY,
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    k.deny(ip("192.0.2.0"), 24, 0);
    k.lock(key(ip("192.0.2.91"), 64), boottime_ns() + 60 * SEC, 1);
    expect(&mut k, &syn("192.0.2.91"), XDP_DROP, verdict::DROP_LOCKED);
    expect(&mut k, &syn("192.0.2.92"), XDP_DROP, verdict::DROP_DENIED);
}

#[test]
fn deny_cidr_drops_until_its_deadline() {
    let cfg = KernelConfig {
        flags: FLAG_HAS_DENY,
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    let now = boottime_ns();
    k.deny(ip("203.0.113.0"), 24, 0);
    k.deny(ip("198.18.0.0"), 15, now + 60 * SEC);
    k.deny(ip("198.51.100.0"), 24, now - SEC);
    k.deny(ip("2001:db8:bad::"), 48, 0);
    // Longer than the v6 key prefix: the lists match whole addresses.
    k.deny(ip("2001:db8:1:1::66"), 128, 0);
    use verdict::*;
    let rows = [
        Row {
            what: "deny /24 forever",
            frame: syn("203.0.113.9"),
            action: XDP_DROP,
            counter: DROP_DENIED,
        },
        Row {
            what: "deny /24, ACK",
            frame: Frame::tcp(ip("203.0.113.9"), PORT, TCP_ACK).build(),
            action: XDP_DROP,
            counter: DROP_DENIED,
        },
        Row {
            what: "deny /15 with a future deadline",
            frame: syn("198.19.4.4"),
            action: XDP_DROP,
            counter: DROP_DENIED,
        },
        Row {
            what: "deny expired",
            frame: syn("198.51.100.9"),
            action: XDP_PASS,
            counter: PASS_SYN,
        },
        Row {
            what: "deny v6 /48",
            frame: syn("2001:db8:bad:7::1"),
            action: XDP_DROP,
            counter: DROP_DENIED,
        },
        Row {
            what: "deny v6 /128",
            frame: syn("2001:db8:1:1::66"),
            action: XDP_DROP,
            counter: DROP_DENIED,
        },
        Row {
            what: "v6 /128 neighbour",
            frame: syn("2001:db8:1:1::67"),
            action: XDP_PASS,
            counter: PASS_SYN,
        },
        Row {
            what: "not denied",
            frame: syn("192.0.2.1"),
            action: XDP_PASS,
            counter: PASS_SYN,
        },
        Row {
            what: "denied, other port",
            frame: Frame::tcp(ip("203.0.113.9"), OTHER_PORT, TCP_SYN).build(),
            action: XDP_PASS,
            counter: PASS_UNPROTECTED,
        },
    ];
    run_table(&mut k, &rows);
    // With the deny flag clear the trie is not consulted.
    k.set_config(&config());
    expect(&mut k, &syn("203.0.113.9"), XDP_PASS, verdict::PASS_SYN);
}

#[test]
fn lock_all_ports_widens_lockouts_and_deny_to_every_packet() {
    let cfg = KernelConfig {
        flags: FLAG_LOCK_ALL_PORTS | FLAG_HAS_DENY,
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    let locked = ip("192.0.2.100");
    k.lock(key(locked, 64), boottime_ns() + 60 * SEC, 1);
    k.deny(ip("203.0.113.0"), 24, 0);
    let denied = ip("203.0.113.1");
    let clean = ip("192.0.2.101");
    use verdict::*;
    let rows = [
        row(
            "locked, other port",
            Frame::tcp(locked, OTHER_PORT, TCP_SYN),
            XDP_DROP,
            DROP_LOCKED,
        ),
        row("locked, UDP", Frame::udp(locked, 53), XDP_DROP, DROP_LOCKED),
        row("locked, ICMP", Frame::icmp(locked), XDP_DROP, DROP_LOCKED),
        row("denied, UDP", Frame::udp(denied, 53), XDP_DROP, DROP_DENIED),
        row(
            "clean, UDP",
            Frame::udp(clean, 53),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row(
            "clean, other port",
            Frame::tcp(clean, OTHER_PORT, TCP_SYN),
            XDP_PASS,
            PASS_UNPROTECTED,
        ),
        row(
            "clean, SYN",
            Frame::tcp(clean, PORT, TCP_SYN),
            XDP_PASS,
            PASS_SYN,
        ),
        // Fragments and non-IP are never judged, even when widened.
        row(
            "locked, fragment",
            Frame::udp(locked, 53).v4_fragment(1, false),
            XDP_PASS,
            PASS_FRAGMENT,
        ),
        row(
            "locked, ARP",
            Frame::udp(locked, 53).ether_type(ETH_P_ARP),
            XDP_PASS,
            PASS_NON_IP,
        ),
    ];
    run_table(&mut k, &rows);
}

/// The classifier runs the same core: same verdicts (as TC actions) and the same counters.
#[test]
fn classifier_entry_point_matches_xdp() {
    let cfg = KernelConfig {
        flags: FLAG_HAS_DENY,
        ..config()
    };
    let Some(mut k) = setup_with(cfg) else { return };
    k.lock(key(ip("192.0.2.110"), 64), boottime_ns() + 60 * SEC, 1);
    k.deny(ip("2001:db8:dead::"), 48, 0);
    use verdict::*;
    let cases: Vec<(Vec<u8>, i32, u32)> = vec![
        (syn("192.0.2.110"), TC_ACT_SHOT, DROP_LOCKED),
        (syn("2001:db8:dead::1"), TC_ACT_SHOT, DROP_DENIED),
        (
            Frame::tcp(ip("192.0.2.111"), PORT, TCP_ACK).build(),
            TC_ACT_OK,
            PASS_CLEAN,
        ),
        (
            Frame::tcp(ip("192.0.2.111"), PORT, TCP_SYN)
                .vlan(ETH_P_8021Q, 4)
                .build(),
            TC_ACT_OK,
            PASS_SYN,
        ),
        (
            Frame::udp(ip("192.0.2.111"), 53).build(),
            TC_ACT_OK,
            PASS_UNPROTECTED,
        ),
        (
            Frame::icmp(ip("192.0.2.111")).v4_fragment(0, true).build(),
            TC_ACT_OK,
            PASS_FRAGMENT,
        ),
        (
            Frame::udp(ip("192.0.2.111"), 53)
                .ether_type(ETH_P_ARP)
                .build(),
            TC_ACT_OK,
            PASS_NON_IP,
        ),
    ];
    for (frame, action, counter) in &cases {
        let (a, c) = k.tc_counted(frame);
        assert_eq!((a, counter_name(c)), (*action, counter_name(*counter)));
    }
    // The ceiling is shared state: two more SYNs pass, the next is shot.
    let s = syn("192.0.2.111");
    for _ in 0..2 {
        let (a, c) = k.tc_counted(&s);
        assert_eq!((a, counter_name(c)), (TC_ACT_OK, counter_name(PASS_SYN)));
    }
    let (a, c) = k.tc_counted(&s);
    assert_eq!(
        (a, counter_name(c)),
        (TC_ACT_SHOT, counter_name(DROP_CEILING))
    );
    expect(&mut k, &s, XDP_DROP, DROP_CEILING);
}
