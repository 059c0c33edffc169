//! The IP-to-ASN table (`[networks] asn_table`): load time for 500,000 ranges in the iptoasn
//! TSV format, and ns per lookup, beside a `BTreeMap` range lookup over the same ranges
//! measured in the same run (the baseline).
//!
//! Run with `cargo xtask bench asn`. Targets (issue 15): the load under 2 s, a lookup under
//! 1 µs. Results: docs/networks.md.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use limiter_daemon::config::asn::AsnTable;

const RANGES: u32 = 500_000;
const LOOKUPS: u32 = 2_000_000;

/// xorshift: the same addresses every run, no dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn main() {
    // 500,000 ranges of 256 to 4,096 addresses, with gaps, from 1.0.0.0 up (as the real
    // table: sorted, IPv4 and IPv6 rows, some unrouted).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ip2asn-combined.tsv");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut at: u32 = u32::from(Ipv4Addr::new(1, 0, 0, 0));
    let mut btree: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for i in 0..RANGES {
        let len = 256 << (next(&mut rng) % 5);
        let (start, end) = (at, at + len - 1);
        let asn = 1 + (next(&mut rng) % 60_000) as u32;
        if i % 10 == 9 {
            writeln!(
                f,
                "{}\t{}\t0\tNone\tNot routed",
                Ipv4Addr::from(start),
                Ipv4Addr::from(end)
            )
        } else {
            btree.insert(start, (end, asn));
            writeln!(
                f,
                "{}\t{}\t{asn}\tZZ\tAS-{asn}",
                Ipv4Addr::from(start),
                Ipv4Addr::from(end)
            )
        }
        .expect("write");
        at = end + 1 + if i % 3 == 0 { 256 } else { 0 };
    }
    for i in 0..20_000u32 {
        writeln!(
            f,
            "2001:db8:{:x}::\t2001:db8:{:x}:ffff:ffff:ffff:ffff:ffff\t{}\tZZ\tV6",
            i,
            i,
            64_500 + i % 100
        )
        .expect("write");
    }
    drop(f);
    let top = at;

    let t = Instant::now();
    let table = AsnTable::load(&path).expect("the generated table loads");
    let load = t.elapsed();

    let addrs: Vec<IpAddr> = {
        let mut rng = 7u64;
        let span = u64::from(top - u32::from(Ipv4Addr::new(1, 0, 0, 0)));
        (0..4096)
            .map(|_| {
                let a = u32::from(Ipv4Addr::new(1, 0, 0, 0)) + (next(&mut rng) % span) as u32;
                IpAddr::V4(Ipv4Addr::from(a))
            })
            .collect()
    };
    // The two must agree before either is timed.
    for a in &addrs {
        let IpAddr::V4(v4) = a else { continue };
        let x = u32::from(*v4);
        let want = btree
            .range(..=x)
            .next_back()
            .filter(|(_, (end, _))| x <= *end)
            .map(|(_, (_, asn))| *asn);
        assert_eq!(table.lookup(*a).map(|r| r.asn), want, "{a}");
    }

    let time = |f: &dyn Fn(IpAddr) -> Option<u32>| {
        let t = Instant::now();
        let mut found = 0u32;
        for i in 0..LOOKUPS {
            if f(black_box(addrs[(i % 4096) as usize])).is_some() {
                found += 1;
            }
        }
        black_box(found);
        t.elapsed().as_nanos() as f64 / f64::from(LOOKUPS)
    };
    let ours = time(&|a| table.lookup(a).map(|r| r.asn));
    let base = time(&|a| {
        let IpAddr::V4(v4) = a else { return None };
        let x = u32::from(v4);
        btree
            .range(..=x)
            .next_back()
            .filter(|(_, (end, _))| x <= *end)
            .map(|(_, (_, asn))| *asn)
    });

    println!(
        "ASN table: {} ranges loaded (of {} lines)",
        table.len(),
        RANGES + 20_000
    );
    println!();
    println!("| what | figure | target |");
    println!("|---|---|---|");
    println!(
        "| load {} lines (`AsnTable::load`) | {:.0} ms | < 2,000 ms |",
        RANGES + 20_000,
        load.as_secs_f64() * 1e3
    );
    println!("| lookup, sorted arrays (ours) | {ours:.0} ns | < 1,000 ns |");
    println!("| lookup, `BTreeMap` range (baseline) | {base:.0} ns | |");
    println!("| ours / baseline | {:.2}× the time | |", ours / base);
}
