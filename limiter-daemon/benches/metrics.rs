//! Metrics benchmark: what recording every decision costs. Decisions per second through the
//! engine alone (the baseline) and through [`MeteredDecider`] (counters, two lock-free
//! histograms, two clock reads), measured in the same run, on one thread and on every core,
//! plus the time one `/metrics` render takes.
//!
//! Run: `cargo bench -p limiter-daemon --bench metrics --profile bench-fast`.
//! `BENCH_SECS` sets the seconds per variant and row (default 4, split into alternating rounds).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderMap, Method};
use limiter_daemon::clock::{Clock, SystemClock};
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::decider::{Decider, RequestView};
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::{Engine, EngineOptions, KeyRefresh};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::metrics::{MeteredDecider, Metrics};

mod common;

/// Nothing is refused, so every decision takes the full counting path.
/// Alternating rounds per row.
const ROUNDS: usize = 8;

const CONFIG: &str = r#"
[tiers.anon]
burst = 65535
hourly = 400000000
[quota]
anon = 4000000000
"#;

fn engine(dir: &std::path::Path) -> Arc<Engine> {
    let text = format!("{CONFIG}\n[store]\nstate_dir = \"{}\"\n", dir.display());
    let cfg = Config::from_toml_str(&text, std::path::Path::new("bench.toml"), &EnvMap::new())
        .expect("bench config");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = EmbeddedStore::open(&cfg.store, clock.now_ms()).expect("store");
    Arc::new(Engine::with_options(
        Arc::new(cfg),
        Arc::new(store),
        Arc::new(NoKernel),
        clock,
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    ))
}

/// Decisions per second by `threads` threads for `secs` (each thread its own 65,536 callers).
fn run(decider: &Arc<dyn Decider>, threads: usize, secs: f64) -> f64 {
    let headers = HeaderMap::new();
    let method = Method::GET;
    common::ops_per_sec(threads, secs, |t, n| {
        let ip = (t as u32) << 16 | (n as u32 & 0xffff);
        let view = RequestView {
            client: Client::Addr(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | ip))),
            method: &method,
            path: "/",
            headers: &headers,
        };
        std::hint::black_box(decider.decide(&view));
    })
}

fn main() {
    let secs = common::bench_secs(4.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().expect("tempdir");
    let metrics = Metrics::new("limiter");
    println!("| threads | engine alone (decisions/s, baseline) | metered (decisions/s) | metered / engine |");
    println!("|---:|---:|---:|---:|");
    for threads in [1, cores] {
        // One engine behind both variants, measured in alternating short rounds, best of each:
        // the machine is shared, and best-of-rounds is what survives other load.
        let e = engine(&dir.path().join(format!("e{threads}")));
        let plain: Arc<dyn Decider> = e.clone();
        let metered: Arc<dyn Decider> = Arc::new(MeteredDecider::new(e, Arc::clone(&metrics)));
        let (mut base, mut with) = (0f64, 0f64);
        for _ in 0..ROUNDS {
            base = base.max(run(&plain, threads, secs / ROUNDS as f64));
            with = with.max(run(&metered, threads, secs / ROUNDS as f64));
        }
        println!("| {threads} | {base:.0} | {with:.0} | {:.3} |", with / base);
    }
    let t = Instant::now();
    let mut bytes = 0;
    for _ in 0..100 {
        bytes += std::hint::black_box(metrics.render()).len();
    }
    println!(
        "\n/metrics render: {:.1} µs ({} bytes)",
        t.elapsed().as_secs_f64() * 1e6 / 100.0,
        bytes / 100
    );
}
