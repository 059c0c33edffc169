//! `cargo xtask bench overload`: the ladder under overload, side by side with what it replaces.
//!
//! One app of fixed capacity (8 slots of 50 ms, the rest waiting in line: 160 req/s) behind a
//! `bench-fast` daemon (embedded store, kernel off), and one seeded open-loop trace of about 3×
//! that: a sponsor with an API key and a signed-in user at 20 req/s each, anonymous callers at
//! 440 req/s from 200 addresses, Poisson arrivals, BENCH_SECS seconds (default 5). Three
//! variants see the same trace:
//! 1. no shedding (`[overload]` off): everyone waits in the app's line;
//! 2. shedding blind to tier: `max_inflight = "auto"`, every share 1.0 (what Envoy's adaptive
//!    concurrency filter and Netflix's concurrency-limits do);
//! 3. the ladder: `"auto"` with the default shares.
//!
//! Printed per variant and tier: offered req/s, goodput (answered 200, per second), success %,
//! p50 and p99 (a request unanswered after 10 s counts as failed, at 10 s); the app's
//! utilisation; for the shedding variants the limit over time (every 0.5 s). Before each load
//! the sponsor runs alone for a second (warming the daemon up; an adaptive limit measures its
//! baseline then): its p99 under the ladder's daemon is the yardstick of the target, the
//! sponsor keeping ≥ 0.95× its offered load as goodput at a p99 ≤ 2× that.
//!
//! `BENCH_DAEMON=<binary>` measures another daemon binary (e.g. `target/debug/limiter-daemon`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use limiter_tests::free_port;
use limiter_tests::overload::{quantile, run, trace, App, Outcome, Who};

const SEED: u64 = 38;
const TIMEOUT: Duration = Duration::from_secs(10);

fn daemon_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BENCH_DAEMON") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| limiter_tests::workspace_root().join("target"));
    target.join("bench-fast/limiter-daemon")
}

/// A plain HTTP/1.1 exchange: status, head (lower-case) and body.
fn http(addr: SocketAddr, method: &str, path: &str, auth: &str, body: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: b\r\nconnection: close\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, out)
}

struct Daemon {
    child: Child,
    proxy: SocketAddr,
    metrics: SocketAddr,
    key: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A daemon in front of `app` with `overload` as its `[overload]` section, and a verified
/// sponsor key.
fn start(bin: &PathBuf, dir: &std::path::Path, app: SocketAddr, overload: &str) -> Daemon {
    let port = |_| SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (proxy, metrics, admin) = (port(0), port(1), port(2));
    let state = dir.join(format!("state-{}", proxy.port()));
    // Every request comes from loopback through a trusted proxy's `X-Forwarded-For`; budgets
    // this load never spends (the bench measures shedding, not metering); connection caps
    // raised to the thousands the no-shedding variant keeps waiting.
    let config = format!(
        "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
         [tiers.anon]\nburst = 1000\nhourly = 1000000\n[tiers.session]\nburst = 1000\n\
         [tiers.sponsor]\nburst = 5000\nhourly = 1000000\n[networks.prefix]\nenabled = false\n\
         [store]\nstate_dir = \"{}\"\n[kernel]\nmode = \"off\"\n\
         [metrics]\nlisten = \"{metrics}\"\n[admin]\nlisten = \"{admin}\"\n\
         [http]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{app}\"\n\
         max_connections = 8000\nmax_connections_per_client = 8000\n\
         [overload]\n{overload}\n",
        state.display()
    );
    let path = dir.join(format!("limiter-{}.toml", proxy.port()));
    std::fs::write(&path, config).unwrap();
    let child = Command::new(bin)
        .args(["run", "--config"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start the daemon");
    let mut d = Daemon {
        child,
        proxy,
        metrics,
        key: String::new(),
    };
    wait_for("the daemon", || {
        TcpStream::connect(admin).is_ok() && state.join("admin-token").exists()
    });
    let token = std::fs::read_to_string(state.join("admin-token")).unwrap();
    let auth = format!("authorization: Bearer {}\r\n", token.trim());
    let (status, out) = http(
        admin,
        "POST",
        "/admin/v1/keys",
        &auth,
        r#"{"tier":"sponsor"}"#,
    );
    assert_eq!(status, 201, "{out}");
    let body = out.split_once("\r\n\r\n").unwrap().1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    d.key = v["key"].as_str().unwrap().to_string();
    let bearer = format!("authorization: Bearer {}\r\n", d.key);
    wait_for("the key verified", || {
        http(proxy, "GET", "/", &bearer, "")
            .1
            .to_ascii_lowercase()
            .contains("x-ratelimit-tier: sponsor")
    });
    d
}

fn limit(metrics: SocketAddr) -> Option<u32> {
    let (_, out) = http(metrics, "GET", "/metrics", "", "");
    out.lines()
        .find_map(|l| l.strip_prefix("limiter_overload_limit "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u32)
}

/// Raises RLIMIT_NOFILE to the hard limit (the no-shedding variant keeps thousands waiting).
fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls with a valid pointer.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

struct Row {
    offered: f64,
    goodput: f64,
    success: f64,
    p50: Duration,
    p99: Duration,
}

fn row(out: &[Outcome], secs: f64, who: impl Fn(Who) -> bool + Copy) -> Row {
    let mine: Vec<_> = out.iter().filter(|o| who(o.who)).collect();
    let ok = mine.iter().filter(|o| o.status == 200).count() as f64;
    Row {
        offered: mine.len() as f64 / secs,
        goodput: ok / secs,
        success: ok / mine.len().max(1) as f64,
        p50: quantile(out, who, 0.5),
        p99: quantile(out, who, 0.99),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let bin = daemon_binary();
    assert!(
        bin.exists(),
        "{} is missing: run `cargo xtask bench overload` (it builds the daemon with --profile bench-fast)",
        bin.display()
    );
    raise_nofile();
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().expect("temp dir");
    let app = rt.block_on(App::start(8, Duration::from_millis(50)));
    let load = trace(SEED, secs, 20.0, 20.0, 440.0);
    let ladder = "enabled = true\nmax_inflight = \"auto\"\n";
    // Before each variant's load, the sponsor alone for a second: the daemon warms up (and an
    // adaptive limit measures its baseline); the ladder's is the unloaded p99.
    let warm = trace(SEED + 1, 1.0, 20.0, 0.0, 0.0);
    println!(
        "overload: app 8 slots × 50 ms (160 req/s); trace seed {SEED}, {secs} s, {} requests \
         ({:.0} req/s offered)",
        load.len(),
        load.len() as f64 / secs,
    );
    println!(
        "{:<22} {:<8} {:>9} {:>9} {:>8} {:>9} {:>9}",
        "variant", "tier", "offered/s", "goodput/s", "success", "p50 ms", "p99 ms"
    );
    let mut sponsor_rows = Vec::new();
    for (name, overload) in [
        ("no shedding", "enabled = false\n"),
        (
            "tier-blind (shares 1)",
            "enabled = true\nmax_inflight = \"auto\"\n\
             shares = { anon = 1.0, session = 1.0, crawler = 1.0, agent = 1.0, sponsor = 1.0 }\n",
        ),
        ("ladder", ladder),
    ] {
        let d = start(&bin, scratch.path(), app.addr, overload);
        let alone = rt.block_on(run(d.proxy, &d.key, &warm, TIMEOUT));
        let unloaded = quantile(&alone, |w| w == Who::Sponsor, 0.99);
        let metrics = d.metrics;
        let watching = overload.contains("true");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = std::sync::Arc::clone(&stop);
        let watch = std::thread::spawn(move || {
            let mut limits = Vec::new();
            while watching && !s2.load(std::sync::atomic::Ordering::Relaxed) {
                limits.extend(limit(metrics));
                std::thread::sleep(Duration::from_millis(500));
            }
            limits
        });
        let (busy, began) = (app.busy(), Instant::now());
        let out = rt.block_on(run(d.proxy, &d.key, &load, TIMEOUT));
        let wall = began.elapsed().as_secs_f64();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let limits = watch.join().unwrap();
        for (tier, who) in [
            ("sponsor", (|w| w == Who::Sponsor) as fn(Who) -> bool),
            ("session", |w| w == Who::Session),
            ("anon", Who::is_anon),
        ] {
            let r = row(&out, secs, who);
            println!(
                "{name:<22} {tier:<8} {:>9.1} {:>9.1} {:>7.1}% {:>9.1} {:>9.1}",
                r.offered,
                r.goodput,
                100.0 * r.success,
                ms(r.p50),
                ms(r.p99)
            );
            if tier == "sponsor" {
                sponsor_rows.push((name, r, unloaded));
            }
        }
        let used = (app.busy() - busy).as_secs_f64() / (8.0 * wall);
        print!(
            "{name:<22} app utilisation {:.0}% over {wall:.1} s",
            100.0 * used
        );
        if watching {
            print!("; limit every 0.5 s: {limits:?}");
        }
        println!();
        drop(d);
    }
    let (_, ladder, unloaded) = &sponsor_rows[2];
    let (_, blind, _) = &sponsor_rows[1];
    let unloaded = *unloaded;
    println!(
        "target (ladder, sponsor): goodput {:.2}× offered (≥ 0.95), p99 {:.2}× unloaded (≤ 2); \
         tier-blind gives the sponsor {:.2}× at {:.2}×",
        ladder.goodput / ladder.offered,
        ms(ladder.p99) / ms(unloaded),
        blind.goodput / blind.offered,
        ms(blind.p99) / ms(unloaded)
    );
}
