//! The daemon binary on a real `valkey-server` that goes away: killed under load, frozen with
//! SIGSTOP under load, and not there at all when the daemon starts. No request fails and none
//! gets a 5xx; `/readyz` and `<ns>_store_degraded` say degraded meanwhile; decisions are back on
//! Valkey soon after it is; lockouts made meanwhile reach it. Latencies are printed: what they
//! must be is measured by `cargo xtask bench store`, the assertions here only rule out a
//! request waiting on the store past its deadline.

mod admin_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use admin_support::{eventually, try_http, Daemon};
use limiter_tests::valkey::{free_port, start_on, Server};
use serde_json::json;

fn daemon(dir: &std::path::Path, valkey_port: u16) -> Daemon {
    daemon_with(dir, valkey_port, "")
}

/// With `store` lines added to `[store]`.
fn daemon_with(dir: &std::path::Path, valkey_port: u16, store: &str) -> Daemon {
    let store = format!(
        "backend = \"valkey\"\nvalkey_address = \"127.0.0.1:{valkey_port}\"\nkey_prefix = \"out:\"\n\
         decision_timeout = \"50ms\"\nprobe_interval = \"500ms\"\n{store}"
    );
    // The load comes from many addresses (through a trusted proxy): each stays far under its
    // budgets, so every answer is a 200 counted in the store.
    let extra = "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
                 [tiers.anon]\nburst = 60000\nhourly = 10000000\n";
    Daemon::start_store(dir, "", &store, extra, true, Vec::new(), Vec::new())
}

fn degraded(d: &Daemon) -> Option<bool> {
    let r = try_http(d.metrics.unwrap(), "GET", "/metrics", &[], None)?;
    let line = r
        .body
        .lines()
        .find(|l| l.starts_with("limiter_store_degraded "))?;
    Some(line.ends_with(" 1"))
}

/// Requests through the proxy from four threads until stopped: (status, latency) of each.
struct Load {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(u16, Duration)>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(d: &Daemon) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..4)
            .map(|thread| {
                let (stop, seen, proxy) = (Arc::clone(&stop), Arc::clone(&seen), d.proxy);
                std::thread::spawn(move || {
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let xff = format!("10.{thread}.{}.{}", (n / 256) % 4, n % 256);
                        let t = Instant::now();
                        let status =
                            try_http(proxy, "GET", "/", &[("x-forwarded-for", &xff)], None)
                                .map_or(0, |r| r.status);
                        seen.lock().unwrap().push((status, t.elapsed()));
                    }
                })
            })
            .collect();
        Load {
            stop,
            seen,
            threads,
        }
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Stops it: every (status, latency) seen.
    fn finish(self) -> Vec<(u16, Duration)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        Arc::try_unwrap(self.seen).unwrap().into_inner().unwrap()
    }
}

fn p99(v: &[(u16, Duration)]) -> Duration {
    let mut l: Vec<Duration> = v.iter().map(|(_, d)| *d).collect();
    l.sort();
    l[(l.len() * 99 / 100).min(l.len() - 1)]
}

fn assert_all_ok(seen: &[(u16, Duration)]) {
    let bad: Vec<_> = seen.iter().filter(|(s, _)| *s != 200).collect();
    assert!(
        bad.is_empty(),
        "{} of {} failed or not 200: {:?}",
        bad.len(),
        seen.len(),
        &bad[..bad.len().min(5)]
    );
}

fn lockout_keys(port: u16) -> usize {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let Ok(mut c) = client.get_connection() else {
        return 0;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("out:lockout*")
        .query(&mut c)
        .unwrap_or_default();
    keys.len()
}

/// The daemon on the Valkey at `port`, counting there, under [`Load`].
fn loaded(dir: &std::path::Path, port: u16) -> (Daemon, Load) {
    let d = daemon(dir, port);
    eventually("the store to be used", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    let load = Load::start(&d);
    eventually("some load", || (load.count() > 200).then_some(()));
    (d, load)
}

#[test]
fn valkey_killed_under_load_fails_no_request_and_its_return_is_used() {
    let port = free_port();
    let Some(valkey) = start_on(port) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (d, load) = loaded(dir.path(), port);

    drop(valkey);
    eventually("degraded in the metrics", || {
        (degraded(&d) == Some(true)).then_some(())
    });
    let ready = try_http(d.metrics.unwrap(), "GET", "/readyz", &[], None).unwrap();
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.contains("degraded"), "{}", ready.body);
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "192.0.2.77", "for": "10m", "reason": "made while Valkey was down"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let during = load.count();
    eventually("load while degraded", || {
        (load.count() > during + 200).then_some(())
    });

    let _back = start_on(port).unwrap();
    let restarted = Instant::now();
    eventually("decisions back on Valkey", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    let took = restarted.elapsed();
    println!("back on Valkey {took:?} after it restarted");
    assert!(took < Duration::from_secs(2), "{took:?}");
    eventually("the lockout made meanwhile in Valkey", || {
        (lockout_keys(port) > 0).then_some(())
    });
    let seen = load.finish();
    assert_all_ok(&seen);
    println!("{} requests, p99 {:?}", seen.len(), p99(&seen));
}

#[test]
fn a_frozen_valkey_costs_each_request_at_most_the_decision_deadline() {
    let port = free_port();
    let Some(valkey) = start_on(port) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (d, load) = loaded(dir.path(), port);
    let before = load.count();
    signal(&valkey, "STOP");
    let frozen_at = Instant::now();
    eventually("degraded in the metrics", || {
        (degraded(&d) == Some(true)).then_some(())
    });
    while frozen_at.elapsed() < Duration::from_secs(10) {
        std::thread::park_timeout(Duration::from_millis(100));
    }
    let after_freeze = load.count();
    signal(&valkey, "CONT");
    eventually("decisions back on Valkey", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    let seen = load.finish();
    assert_all_ok(&seen);
    let frozen = &seen[before..after_freeze];
    let p = p99(frozen);
    let max = frozen.iter().map(|(_, d)| *d).max().unwrap();
    println!(
        "{} requests during a 10 s freeze: p99 {p:?}, slowest {max:?} (decision_timeout 50 ms)",
        frozen.len()
    );
    assert!(frozen.len() > 100, "the load went on during the freeze");
    // No request waits on the frozen store past its deadline (the margin is for a loaded CI
    // machine; a request blocked on the store would take the connection timeout, seconds).
    assert!(
        max < Duration::from_secs(1),
        "slowest {max:?} during the freeze"
    );
}

fn signal(s: &Server, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &s.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

#[test]
fn the_daemon_starts_while_valkey_is_down_and_switches_to_it() {
    let port = free_port();
    if limiter_tests::valkey::binary().is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "valkey-server is required under CI=true"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), port);
    let r = admin_support::http(d.proxy, "GET", "/", &[], None);
    assert_eq!(r.status, 200, "served while the store is down: {}", r.body);
    assert_eq!(degraded(&d), Some(true));
    let _valkey = start_on(port).unwrap();
    eventually("the switch to Valkey", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    let r = admin_support::http(d.proxy, "GET", "/", &[], None);
    assert_eq!(r.status, 200);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("out:quota*").query(&mut c).unwrap();
    assert!(!keys.is_empty(), "the request was counted in Valkey");
}

#[test]
fn on_failure_open_admits_and_closed_answers_503_while_valkey_is_down() {
    if limiter_tests::valkey::binary().is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "valkey-server is required under CI=true"
        );
        return;
    }
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon_with(dir.path(), port, "on_failure = \"closed\"\n");
    let r = admin_support::http(d.proxy, "GET", "/", &[], None);
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(
        r.header("retry-after"),
        Some("1"),
        "the probe interval, rounded up"
    );
    let problem: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(problem["reason"], "unavailable", "{problem}");
    let dir = tempfile::tempdir().unwrap();
    let d = daemon_with(dir.path(), port, "on_failure = \"open\"\n");
    let r = admin_support::http(d.proxy, "GET", "/", &[], None);
    assert_eq!(r.status, 200, "admitted uncounted: {}", r.body);
    assert!(
        r.header("x-ratelimit-limit").is_none(),
        "nothing was counted"
    );
}
