//! Engine benchmark: decisions per second with the embedded store, on one core and on all
//! cores, for anonymous, keyed and signed-agent callers (a verified Web Bot Auth signature:
//! one Ed25519 verification per decision), beside a baseline that only extracts the identity
//! (client IP, cookie, bearer, key-cache check, hashing) — measured in the same run — and the
//! resident memory with 1,000,000 distinct identities tracked.
//!
//! Run: `cargo xtask bench engine` (or `cargo bench -p limiter-daemon --bench engine`).
//! `BENCH_SECS` sets the seconds per row (default 2).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use http::HeaderMap;
use limiter_daemon::clock::{Clock, SystemClock};
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::{Action, Engine, EngineOptions, KeyRefresh, RequestView, Tier};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::identity::web_bot_auth::directory::Fetched;
use limiter_daemon::identity::web_bot_auth::{directory_url, signer};
use limiter_daemon::identity::IdentityResolver;

mod common;

/// Limits high enough that every decision takes the full counting path (nothing is refused,
/// so no request short-cuts through a lockout).
const BENCH_CONFIG: &str = r#"
[tiers.anon]
burst = 65535
hourly = 4000000000
[tiers.session]
burst = 65535
multiplier = 1
[tiers.sponsor]
burst = 65535
hourly = 4000000000
[tiers.agent]
burst = 65535
hourly = 4000000000
daily = 4000000000
[agents]
enabled = true
[quota]
anon = 4000000000
token = 4000000000
[[routes]]
prefix = "/api/feeds"
key_limit = true
"#;

/// The same limits with network budgets off: the row that shows what counting each
/// anonymous caller against its /24 as well costs.
const NO_NETWORKS: &str = "\n[networks.prefix]\nenabled = false\n";

const ANON_POOL: u32 = 65_536;

/// A table row: its name, its callers and the operation measured.
type Row<'a> = (&'a str, &'a [Caller], &'a (dyn Fn(&Caller) + Sync));
const KEYS: usize = 1_000;

struct Caller {
    peer: IpAddr,
    headers: HeaderMap,
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + n))
}

fn build_engine(cfg: &Arc<Config>) -> Engine {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = Arc::new(EmbeddedStore::open(&cfg.store, clock.now_ms()).expect("store"));
    Engine::with_options(
        Arc::clone(cfg),
        store,
        Arc::new(NoKernel),
        clock,
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    )
}

/// Operations per second of `op` over `callers` (each thread starts at its own offset).
fn measure<F>(threads: usize, secs: f64, callers: &[Caller], op: F) -> f64
where
    F: Fn(&Caller) + Sync,
{
    common::ops_per_sec(threads, secs, |t, n| {
        op(&callers[(t * 7919 + n as usize) % callers.len()]);
    })
}

fn main() {
    let secs = common::bench_secs(2.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = Config::from_toml_str(BENCH_CONFIG, "bench.toml".as_ref(), &EnvMap::new())
        .expect("bench config");
    cfg.store.state_dir = dir.path().to_path_buf();
    let cfg = Arc::new(cfg);
    let engine = build_engine(&cfg);
    let mut cfg_nonet = Config::from_toml_str(
        &format!("{BENCH_CONFIG}{NO_NETWORKS}"),
        "bench.toml".as_ref(),
        &EnvMap::new(),
    )
    .expect("bench config without networks");
    let dir_nonet = tempfile::tempdir().expect("tempdir");
    cfg_nonet.store.state_dir = dir_nonet.path().to_path_buf();
    let engine_nonet = build_engine(&Arc::new(cfg_nonet));

    let anon: Vec<Caller> = (0..ANON_POOL)
        .map(|n| Caller {
            peer: ip(n),
            headers: HeaderMap::new(),
        })
        .collect();
    let keyed: Vec<Caller> = (0..KEYS)
        .map(|n| {
            let key = engine.keys().issue(IssueKey::default()).expect("issue");
            let mut h = HeaderMap::new();
            h.insert("x-api-key", key.token.parse().expect("header"));
            Caller {
                peer: ip(1_000_000 + n as u32),
                headers: h,
            }
        })
        .collect();
    // Present every key once and land the lookups: keyed callers are verified sponsors.
    for c in &keyed {
        decide(&engine, c, "/api/feeds");
    }
    engine.keys().process_pending();
    let check = decide(&engine, &keyed[0], "/api/feeds");
    assert_eq!(check.tier, Tier::Sponsor, "keyed callers must be verified");

    // One agent signing from 1,000 addresses, its directory already fetched: every decision
    // verifies its signature (a cached key, one Ed25519 check).
    let key = ring::signature::Ed25519KeyPair::from_seed_unchecked(&[7; 32]).expect("key");
    let agent = "https://agent.example";
    let now_s = (SystemClock.now_ms() / 1000) as i64;
    let signed = signer::sign(
        &key,
        agent,
        "site.example",
        "\"@authority\" \"signature-agent\"",
        &signer::params(&key, now_s, now_s + 300, "web-bot-auth"),
    );
    let directory = directory_url(agent).expect("agent");
    engine
        .agent_directories()
        .landed(
            &directory,
            ip(0),
            Ok(Fetched {
                body: signer::directory_of(&key).1.into_bytes(),
                max_age_s: Some(86_400),
            }),
            SystemClock.now_ms(),
        )
        .expect("directory");
    let agents: Vec<Caller> = (0..KEYS)
        .map(|n| Caller {
            peer: ip(2_000_000 + n as u32),
            headers: signed.clone(),
        })
        .collect();
    let check = decide(&engine, &agents[0], "/api/feeds");
    assert_eq!(check.tier, Tier::Agent, "signed callers must be verified");

    let resolver = IdentityResolver::new(&cfg);
    let cache = Arc::clone(engine.keys().cache());
    let dirs = Arc::clone(engine.agent_directories());
    let hasher = engine.store().hasher();
    let clock = SystemClock;
    let baseline = |c: &Caller| {
        let caller = resolver.resolve(
            &cfg,
            &cache,
            &dirs,
            Client::Addr(c.peer),
            "GET",
            "/",
            &c.headers,
            clock.now_ms(),
            true,
        );
        std::hint::black_box(caller.id_key(&hasher));
    };
    let full = |c: &Caller| {
        let d = decide(&engine, c, "/api/feeds");
        debug_assert_ne!(d.action(), Action::Reject);
        std::hint::black_box(d);
    };
    let full_nonet = |c: &Caller| {
        let d = decide(&engine_nonet, c, "/api/feeds");
        debug_assert_ne!(d.action(), Action::Reject);
        std::hint::black_box(d);
    };

    println!("engine benchmark: embedded store, {cores} core(s) available, {secs} s per row");
    println!("anonymous: {ANON_POOL} distinct IPv4 callers; keyed: {KEYS} verified API keys on a key_limit route");
    println!();
    println!(
        "{:<18} {:>7} {:>18} {:>18} {:>9}",
        "callers", "threads", "identity only/s", "decide/s", "ratio"
    );
    let mut one_core = Vec::new();
    let mut ns = Vec::new();
    let mut thread_counts = vec![1];
    if cores > 1 {
        thread_counts.push(cores);
    }
    for &threads in &thread_counts {
        let rows: [Row<'_>; 4] = [
            ("anonymous", &anon, &full),
            ("anon, no networks", &anon, &full_nonet),
            ("keyed", &keyed, &full),
            ("signed agent", &agents, &full),
        ];
        for (name, callers, op) in rows {
            let base = measure(threads, secs, callers, baseline);
            let dec = measure(threads, secs, callers, op);
            if threads == 1 {
                one_core.push((name, dec / base));
                ns.push((name, 1e9 / dec));
            }
            println!(
                "{:<18} {:>7} {:>18.0} {:>18.0} {:>8.2}x",
                name,
                threads,
                base,
                dec,
                dec / base
            );
        }
    }
    println!("(ratio = decide throughput / identity-extraction throughput, same run)");
    for (name, ratio) in &one_core {
        let target = if *name == "anonymous" {
            " (target >= 0.50x)"
        } else {
            ""
        };
        println!("ratio on one core, {name}: {ratio:.2}x{target}");
    }
    let ns_of = |n: &str| {
        ns.iter()
            .find(|(name, _)| *name == n)
            .map_or(0.0, |(_, v)| *v)
    };
    let (keyed_ns, agent_ns) = (ns_of("keyed"), ns_of("signed agent"));
    println!(
        "one decision on one core: keyed {keyed_ns:.0} ns, signed agent {agent_ns:.0} ns \
         ({:.2}x a keyed decision; target <= 2.00x)",
        agent_ns / keyed_ns.max(1e-9)
    );
    drop(engine);
    drop(engine_nonet);

    // Memory: 1,000,000 distinct identities tracked (one anonymous request each, default
    // limits so the burst, hourly and daily windows are all live).
    let dir2 = tempfile::tempdir().expect("tempdir");
    let mut cfg2 = Config::default();
    cfg2.store.state_dir = dir2.path().to_path_buf();
    let cfg2 = Arc::new(cfg2);
    let engine = build_engine(&cfg2);
    let empty = HeaderMap::new();
    let before = rss_kib();
    let started = Instant::now();
    for n in 0..1_000_000u32 {
        let d = engine.decide(&RequestView {
            client: Client::Addr(IpAddr::V4(Ipv4Addr::from(0x2000_0000 + n))),
            method: &http::Method::GET,
            path: "/",
            headers: &empty,
        });
        std::hint::black_box(d);
    }
    let fill = started.elapsed();
    let after = rss_kib();
    let tracked = engine.store().identity_count();
    println!();
    let grown_kib = after.saturating_sub(before);
    println!(
        "memory: {tracked} identities tracked; VmRSS {:.1} MB before, {:.1} MB after, {:.1} MB for the identities (target <= 80 MB); filled in {:.2} s",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        grown_kib as f64 / 1024.0,
        fill.as_secs_f64()
    );
    println!(
        "bytes per identity: {:.1} (MB = 2^20 bytes; target <= 80 MB per 1,000,000)",
        grown_kib as f64 * 1024.0 / tracked.max(1) as f64
    );
}

fn decide(engine: &Engine, c: &Caller, path: &str) -> limiter_daemon::engine::Decision {
    engine.decide(&RequestView {
        client: Client::Addr(c.peer),
        method: &http::Method::GET,
        path,
        headers: &c.headers,
    })
}
