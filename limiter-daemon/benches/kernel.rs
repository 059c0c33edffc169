//! Kernel dataplane benchmark: ns/packet of the real program under BPF_PROG_TEST_RUN, each path
//! beside a pass-only XDP program (`limiter_bench_pass`, same object) measured in the same rounds.
//!
//! Run with `cargo xtask bench kernel` (as root). Each case's verdict and counter are checked once
//! before timing, so every row measures the path it names. Results: docs/kernel-dataplane.md.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use aya::{Ebpf, EbpfLoader};
use limiter_common::config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY, MAX_PER_SEC, TIER_SPONSOR};
use limiter_common::maps::{
    AllowMark, CidrBytes, Counter, PortMark, LOCKOUT_CAPACITY, MAP_ALLOW, MAP_CONFIG, MAP_COUNTERS,
    MAP_DENY, MAP_LOCKOUT, MAP_PORTS, MAP_TIER, PROG_BENCH_PASS, PROG_XDP,
};
use limiter_common::{verdict, DenyEntry, IpKey, KernelConfig, Lockout, TierEntry};

const REPEAT: u32 = 1_000_000;
const ROUNDS: usize = 7;
const PORT: u16 = 443;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
const HOUR_NS: u64 = 3_600_000_000_000;

const CLEAN: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const OVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
const LOCKED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 12);
const TIERED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 13);

/// An Ethernet + IPv4 + TCP frame (checksums are not read by the program).
fn tcp_frame(src: Ipv4Addr, dport: u16, flags: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&[198, 51, 100, 1]);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xfa, 0xf0, 0, 0, 0, 0]);
    f
}

fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The loaded object; its maps are pinned under a private bpffs directory removed on drop.
struct Bench {
    ebpf: Ebpf,
    pin_dir: PathBuf,
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.pin_dir) {
            eprintln!("removing {}: {e}", self.pin_dir.display());
        }
    }
}

impl Bench {
    fn load() -> Self {
        let object = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../limiter-ebpf/target/bpfel-unknown-none/release/limiter-ebpf");
        assert!(
            object.exists(),
            "{} is missing: run `cargo xtask build-ebpf`",
            object.display()
        );
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/limiter-bench-{}", std::process::id()));
        std::fs::create_dir_all(&pin_dir).expect("create a pin directory in bpffs");
        let ebpf = EbpfLoader::new()
            .default_map_pin_directory(&pin_dir)
            .load_file(&object)
            .unwrap_or_else(|e| panic!("loading {}: {e:?}", object.display()));
        let mut b = Self { ebpf, pin_dir };
        for name in [PROG_XDP, PROG_BENCH_PASS] {
            let p: &mut Xdp = b.ebpf.program_mut(name).unwrap().try_into().unwrap();
            p.load().unwrap_or_else(|e| panic!("loading {name}: {e:?}"));
        }
        b
    }

    fn map(&mut self, name: &str) -> &mut aya::maps::Map {
        self.ebpf.map_mut(name).unwrap()
    }

    fn set_config(&mut self, cfg: &KernelConfig) {
        let mut m: Array<&mut MapData, KernelConfig> = self.map(MAP_CONFIG).try_into().unwrap();
        m.set(0, cfg, 0).unwrap();
    }

    fn run(&self, prog: &str, frame: &[u8], repeat: u32) -> (u32, f64) {
        let p: &Xdp = self.ebpf.program(prog).unwrap().try_into().unwrap();
        let r = p
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat,
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("TEST_RUN {prog}: {e:?}"));
        (r.return_value, r.duration.as_nanos() as f64)
    }

    fn counters(&mut self) -> Vec<u64> {
        let m: PerCpuArray<&mut MapData, Counter> = self.map(MAP_COUNTERS).try_into().unwrap();
        (0..verdict::COUNT)
            .map(|i| m.get(&i, 0).unwrap().iter().sum())
            .collect()
    }

    /// Runs the frame once and checks the action and the counter that moved.
    fn check(&mut self, case: &Case) {
        let before = self.counters();
        let (action, _) = self.run(PROG_XDP, &case.frame, 1);
        let after = self.counters();
        let moved: Vec<usize> = (0..before.len())
            .filter(|i| after[*i] != before[*i])
            .collect();
        assert_eq!(
            (action, moved.as_slice()),
            (case.action, &[case.counter as usize][..]),
            "case {:?} does not take the path it names",
            case.name
        );
    }
}

struct Case {
    name: &'static str,
    frame: Vec<u8>,
    action: u32,
    counter: u32,
    /// The config in force while this case runs.
    cfg: KernelConfig,
    target: Option<f64>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> ExitCode {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "the kernel benchmark loads a BPF program: run it as root (`cargo xtask bench kernel`)"
        );
        return ExitCode::from(2);
    }
    let mut b = Bench::load();
    let now = boottime_ns();
    // Anonymous sources effectively unlimited, so "SYN under the ceiling" stays under it for every
    // repetition; the sponsor tier likewise for the tiered row.
    let base_cfg = KernelConfig {
        ceiling_burst: [u32::MAX, 200, u32::MAX],
        ceiling_per_sec: [MAX_PER_SEC, 50, MAX_PER_SEC],
        ..KernelConfig::default()
    };
    // One SYN per source, refilling at one a second: OVER spends its token before timing starts.
    let over_cfg = KernelConfig {
        ceiling_burst: [1, 200, 1000],
        ceiling_per_sec: [1, 50, 200],
        ..KernelConfig::default()
    };
    let lists_cfg = KernelConfig {
        flags: FLAG_HAS_ALLOW | FLAG_HAS_DENY,
        ..base_cfg
    };
    b.set_config(&base_cfg);
    {
        let mut ports: Array<&mut MapData, PortMark> = b.map(MAP_PORTS).try_into().unwrap();
        ports.set(PORT as u32, 1, 0).unwrap();
    }
    {
        let mut tiers: HashMap<&mut MapData, IpKey, TierEntry> =
            b.map(MAP_TIER).try_into().unwrap();
        let t = TierEntry {
            expires_ns: now + HOUR_NS,
            tier: TIER_SPONSOR,
            _reserved: 0,
        };
        tiers.insert(IpKey::from_v4(TIERED.octets()), t, 0).unwrap();
    }
    // The lockout map at capacity: LOCKED plus distinct other sources.
    let fill = LOCKOUT_CAPACITY;
    {
        let mut locks: HashMap<&mut MapData, IpKey, Lockout> =
            b.map(MAP_LOCKOUT).try_into().unwrap();
        let lock = Lockout {
            deadline_ns: now + HOUR_NS,
            level: 1,
            _reserved: 0,
        };
        locks
            .insert(IpKey::from_v4(LOCKED.octets()), lock, 0)
            .unwrap();
        for i in 0..fill - 1 {
            let a = (10u32 << 24) | i;
            locks
                .insert(IpKey::from_v4(a.to_be_bytes()), lock, 0)
                .unwrap();
        }
    }
    {
        let mut allow: LpmTrie<&mut MapData, CidrBytes, AllowMark> =
            b.map(MAP_ALLOW).try_into().unwrap();
        let k = Key::new(96 + 24, IpKey::from_v4([203, 0, 113, 0]).addr);
        allow.insert(&k, 1, 0).unwrap();
        let mut deny: LpmTrie<&mut MapData, CidrBytes, DenyEntry> =
            b.map(MAP_DENY).try_into().unwrap();
        let k = Key::new(96 + 15, IpKey::from_v4([198, 18, 0, 0]).addr);
        deny.insert(&k, DenyEntry { deadline_ns: 0 }, 0).unwrap();
    }
    // OVER spends its one token now, so every timed SYN from it is over the ceiling.
    b.set_config(&over_cfg);
    b.run(PROG_XDP, &tcp_frame(OVER, PORT, TCP_SYN), 1);

    let cases = [
        Case {
            name: "established ACK",
            frame: tcp_frame(CLEAN, PORT, TCP_ACK),
            action: XDP_PASS,
            counter: verdict::PASS_CLEAN,
            cfg: base_cfg,
            target: Some(2.5),
        },
        Case {
            name: "SYN under the ceiling",
            frame: tcp_frame(CLEAN, PORT, TCP_SYN),
            action: XDP_PASS,
            counter: verdict::PASS_SYN,
            cfg: base_cfg,
            target: Some(5.0),
        },
        Case {
            name: "SYN over the ceiling",
            frame: tcp_frame(OVER, PORT, TCP_SYN),
            action: XDP_DROP,
            counter: verdict::DROP_CEILING,
            cfg: over_cfg,
            target: Some(5.0),
        },
        Case {
            name: "SYN under the ceiling, tiered",
            frame: tcp_frame(TIERED, PORT, TCP_SYN),
            action: XDP_PASS,
            counter: verdict::PASS_SYN,
            cfg: base_cfg,
            target: Some(5.0),
        },
        Case {
            name: "locked source (ACK)",
            frame: tcp_frame(LOCKED, PORT, TCP_ACK),
            action: XDP_DROP,
            counter: verdict::DROP_LOCKED,
            cfg: base_cfg,
            target: Some(2.5),
        },
        Case {
            name: "ACK to an unprotected port",
            frame: tcp_frame(CLEAN, 8080, TCP_ACK),
            action: XDP_PASS,
            counter: verdict::PASS_UNPROTECTED,
            cfg: base_cfg,
            target: None,
        },
        Case {
            name: "established ACK, lists in use",
            frame: tcp_frame(CLEAN, PORT, TCP_ACK),
            action: XDP_PASS,
            counter: verdict::PASS_CLEAN,
            cfg: lists_cfg,
            target: None,
        },
    ];
    for c in &cases {
        b.set_config(&c.cfg);
        b.check(c);
    }

    let mut base = Vec::new();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..ROUNDS {
        // The baseline runs the first case's frame; a pass-only program never reads it.
        base.push(b.run(PROG_BENCH_PASS, &cases[0].frame, REPEAT).1);
        for (c, t) in cases.iter().zip(times.iter_mut()) {
            b.set_config(&c.cfg);
            t.push(b.run(PROG_XDP, &c.frame, REPEAT).1);
        }
    }
    let base = median(&mut base);

    println!(
        "kernel dataplane: BPF_PROG_TEST_RUN (XDP), repeat {REPEAT}, median of {ROUNDS} rounds, \
         lockout map {fill}/{LOCKOUT_CAPACITY} entries"
    );
    println!(
        "{:<32} {:>8} {:>9} {:>7} {:>8}",
        "case", "ns/pkt", "baseline", "ratio", "target"
    );
    println!(
        "{:<32} {:>8.1} {:>9.1} {:>6.2}x {:>8}",
        "pass-only baseline", base, base, 1.0, ""
    );
    let mut missed = 0;
    let mut meds = Vec::new();
    for (c, t) in cases.iter().zip(times.iter_mut()) {
        let m = median(t);
        meds.push(m);
        let ratio = m / base;
        let target = match c.target {
            Some(limit) if ratio <= limit => format!("<={limit}x ok"),
            Some(limit) => {
                missed += 1;
                format!("<={limit}x MISS")
            }
            None => String::new(),
        };
        println!(
            "{:<32} {:>8.1} {:>9.1} {:>6.2}x {:>8}",
            c.name, m, base, ratio, target
        );
    }
    println!(
        "empty allow/deny lists: established ACK costs {:.1} ns with both lists empty and \
         {:.1} ns with one entry in each (the trie lookups an empty list skips)",
        meds[0],
        meds[cases.len() - 1]
    );
    if missed > 0 {
        println!("{missed} case(s) missed their target (see docs/kernel-dataplane.md)");
    }
    ExitCode::SUCCESS
}
