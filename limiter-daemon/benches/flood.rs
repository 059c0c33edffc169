//! Flood benchmark: packets dropped per receiver CPU-second for a SYN flood from locked sources,
//! with this project's XDP program (native mode), an nftables set as fail2ban and CrowdSec's
//! firewall bouncer install it, nftables at its earliest hook, and no filter, in one run.
//!
//! Run with `cargo xtask bench flood` (as root; needs nftables and ethtool, which
//! `scripts/setup.sh` installs). `BENCH_SECS` sets the seconds each case floods (default 3).
//! Method and results: docs/kernel-dataplane.md ("Flood: XDP vs nftables").

#[expect(dead_code, reason = "the flood needs only `bench_secs`")]
mod common;
#[path = "common/flood/mod.rs"]
mod flood;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use flood::cpu::{self, ReceiverCpu};
use flood::filter::{Installed, Kind};
use flood::live::LiveSender;
use flood::sender::{Sender, Sent};
use flood::topology::Topology;

/// The target: XDP drops at least this many times more packets per receiver
/// CPU-second than the nftables set the tools install.
const TARGET: f64 = 3.0;
const SIZES: [usize; 2] = [10, 100_000];
/// The baseline first, so every later row has its ratio.
const ORDER: [Kind; 4] = [Kind::NftInput, Kind::NftIngress, Kind::Xdp, Kind::None];

/// Copies of one source's frame per live-frames run (one NAPI batch).
const LIVE_REPEAT: u32 = 1 << 18;

/// The two generators: the AF_PACKET sender, and the kernel's live-frames mode.
enum Gen {
    AfPacket(Sender),
    Live(LiveSender),
}

impl Gen {
    fn label(&self) -> &'static str {
        match self {
            Gen::AfPacket(_) => "AF_PACKET",
            Gen::Live(_) => "XDP live frames",
        }
    }

    fn flood(&mut self, topo: &Topology, secs: Duration, tx_cpu: usize) -> Sent {
        match self {
            Gen::AfPacket(s) => s.flood(secs),
            // The redirect target is looked up in the running thread's namespace.
            Gen::Live(s) => topo.sender.run(|| {
                cpu::pin(0, tx_cpu);
                cpu::realtime();
                s.flood(secs)
            }),
        }
    }
}

struct Row {
    sender: &'static str,
    locked: usize,
    kind: Kind,
    load_secs: f64,
    secs: f64,
    offered: u64,
    handled: u64,
    dropped: u64,
    cpu_ns: u64,
}

impl Row {
    /// Packets the filter dropped (for no filter: the packets the stack handled) per receiver
    /// CPU-second.
    fn per_cpu_sec(&self) -> f64 {
        let n = if self.kind == Kind::None {
            self.handled
        } else {
            self.dropped
        };
        n as f64 / (self.cpu_ns as f64 / 1e9)
    }
}

/// Polls until the receiver has taken in everything in flight (its counter holds still).
fn settle(topo: &Topology) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = topo.receiver_rx_packets();
    loop {
        let now = topo.receiver_rx_packets();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

fn measure(
    topo: &Topology,
    sender: &mut Gen,
    kind: Kind,
    locked: &[std::net::Ipv4Addr],
    secs: f64,
    (tx_cpu, rx_cpu): (usize, usize),
) -> Row {
    let started = Instant::now();
    let filter = Installed::install(kind, topo, locked);
    let load_secs = started.elapsed().as_secs_f64();
    // Attaching or removing XDP turns the veth's NAPI off and on: find and pin the threads anew.
    let rx = ReceiverCpu::pinned(topo.receiver_napi(), rx_cpu);
    cpu::pin(topo.sender_napi(), tx_cpu);
    sender.flood(topo, Duration::from_millis(300), tx_cpu);
    settle(topo);
    let (cpu0, drop0, rx0) = (rx.ns(), filter.dropped(), topo.receiver_rx_packets());
    let sent = sender.flood(topo, Duration::from_secs_f64(secs), tx_cpu);
    let rx1 = settle(topo);
    let (cpu1, drop1) = (rx.ns(), filter.dropped());
    Row {
        sender: sender.label(),
        locked: locked.len(),
        kind,
        load_secs,
        secs: sent.secs,
        offered: sent.frames,
        handled: rx1 - rx0,
        dropped: drop1 - drop0,
        cpu_ns: cpu1 - cpu0,
    }
}

fn main() -> ExitCode {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("the flood benchmark creates namespaces and attaches XDP: run it as root (`cargo xtask bench flood`)");
        return ExitCode::from(2);
    }
    // SAFETY: set before any other thread exists; the loader looks the object up through it.
    unsafe { std::env::set_var("LIMITER_EBPF_OBJECT", limiter_tests::testrun::object_path()) };
    let secs = common::bench_secs(3.0);
    let ncpu = cpu::cpus();
    // The sender on the first CPU, the receiver's thread on the last: with two CPUs, one each.
    let cpus = (0, ncpu - 1);
    cpu::pin(0, cpus.0);
    cpu::realtime();
    let topo = Topology::new("fld");
    let mut rows = Vec::new();
    for n in SIZES {
        let locked = flood::locked_sources(n);
        let dest = topo.dest();
        let mut gens = [
            Gen::AfPacket(Sender::new(&topo.sender, &topo.sender_if, &locked, &dest)),
            Gen::Live(LiveSender::new(
                &topo.sender,
                &topo.sender_if,
                &locked,
                &dest,
                LIVE_REPEAT,
            )),
        ];
        for gen in &mut gens {
            for kind in ORDER {
                let row = measure(&topo, gen, kind, &locked, secs, cpus);
                eprintln!("flood: {}, {n} locked, {}: done", gen.label(), kind.label());
                rows.push(row);
            }
        }
    }

    println!(
        "flood: SYNs from locked sources over a veth pair (AF_PACKET: sendmmsg of {}, \
         PACKET_QDISC_BYPASS, every locked source in turn; XDP live frames: {LIVE_REPEAT} copies \
         of one source a run, sources in turn), {secs} s a case; sender on CPU {}, the receiver's threaded \
         NAPI on CPU {} ({ncpu} CPUs); receiver CPU = its NAPI thread + ksoftirqd/{}",
        flood::sender::BATCH,
        cpus.0,
        cpus.1,
        cpus.1
    );
    println!(
        "{:<15} {:>7} {:<24} {:>7} {:>10} {:>10} {:>10} {:>6} {:>7} {:>12} {:>8} {:>10}",
        "sender",
        "locked",
        "filter",
        "load s",
        "offered/s",
        "handled/s",
        "dropped/s",
        "rx CPU",
        "ns/pkt",
        "drops/CPU-s",
        "vs nft",
        "target"
    );
    let mut missed = 0;
    let groups: Vec<(&str, usize)> = ["AF_PACKET", "XDP live frames"]
        .into_iter()
        .flat_map(|g| SIZES.map(|n| (g, n)))
        .collect();
    for (gen, n) in groups {
        let of_size: Vec<&Row> = rows
            .iter()
            .filter(|r| r.locked == n && r.sender == gen)
            .collect();
        let base = of_size
            .iter()
            .find(|r| r.kind == Kind::NftInput)
            .map(|r| r.per_cpu_sec())
            .unwrap();
        for r in of_size {
            let ratio = r.per_cpu_sec() / base;
            let target = match r.kind {
                Kind::Xdp if ratio >= TARGET => format!(">={TARGET}x ok"),
                Kind::Xdp => {
                    missed += 1;
                    format!(">={TARGET}x MISS")
                }
                _ => String::new(),
            };
            let per = |v: u64| v as f64 / r.secs;
            println!(
                "{:<15} {:>7} {:<24} {:>7.2} {:>10.0} {:>10.0} {:>10.0} {:>5.0}% {:>7.0} {:>11.2}M {:>7.2}x {:>10}",
                r.sender,
                r.locked,
                r.kind.label(),
                r.load_secs,
                per(r.offered),
                per(r.handled),
                per(r.dropped),
                r.cpu_ns as f64 / 1e9 / r.secs * 100.0,
                r.cpu_ns as f64 / r.handled.max(1) as f64,
                r.per_cpu_sec() / 1e6,
                ratio,
                target
            );
        }
    }
    println!(
        "drops/CPU-s: packets the filter dropped per second of receiver CPU (for no filter: \
         packets the stack handled); vs nft: against the nft input-hook set of the same size"
    );
    if missed > 0 {
        println!("{missed} case(s) missed the target (see docs/kernel-dataplane.md)");
    }
    ExitCode::SUCCESS
}
