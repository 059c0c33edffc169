//! The daemon binary on a real `valkey-server` that goes away: killed under load, frozen with
//! SIGSTOP under load, and not there at all when the daemon starts. No request fails and none
//! gets a 5xx; `/readyz` and `<ns>_store_degraded` say degraded meanwhile; decisions are back on
//! Valkey soon after it is; lockouts made meanwhile reach it. After a `kill -9` and restart, or
//! a password rotation, the host is ready again with no request sent (a balancer sends none to
//! an unready host). Latencies are printed: what they must be is measured by
//! `cargo xtask bench store`, the assertions here only rule out a request waiting on the store
//! past its deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use limiter_tests::client::try_http;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::free_port;
use limiter_tests::valkey::{start_on, start_with, Server};
use serde_json::json;

fn daemon(dir: &std::path::Path, valkey_port: u16) -> Daemon {
    daemon_with(dir, valkey_port, "")
}

/// A Valkey with `requirepass old-pw` and a daemon reading that password from a file: what a
/// password rotation starts from (`None`: no valkey-server here, outside CI).
struct Rotating {
    port: u16,
    valkey: Server,
    dir: tempfile::TempDir,
    pw_file: std::path::PathBuf,
    d: Daemon,
}

fn rotating() -> Option<Rotating> {
    let port = free_port();
    let valkey = start_with(port, &["--requirepass", "old-pw"])?;
    let dir = tempfile::tempdir().unwrap();
    let pw_file = dir.path().join("valkey-password");
    std::fs::write(&pw_file, "old-pw\n").unwrap();
    let d = daemon_with(
        dir.path(),
        port,
        &format!("valkey_password_file = \"{}\"\n", pw_file.display()),
    );
    Some(Rotating {
        port,
        valkey,
        dir,
        pw_file,
        d,
    })
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
    let r = limiter_tests::client::http(d.proxy, "GET", "/", &[], None);
    assert_eq!(r.status, 200, "served while the store is down: {}", r.body);
    assert_eq!(degraded(&d), Some(true));
    let _valkey = start_on(port).unwrap();
    eventually("the switch to Valkey", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    let r = limiter_tests::client::http(d.proxy, "GET", "/", &[], None);
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
    let r = limiter_tests::client::http(d.proxy, "GET", "/", &[], None);
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
    let r = limiter_tests::client::http(d.proxy, "GET", "/", &[], None);
    assert_eq!(r.status, 200, "admitted uncounted: {}", r.body);
    assert!(
        r.header("x-ratelimit-limit").is_none(),
        "nothing was counted"
    );
}

/// A connection to the server at `port` with `password`.
fn valkey_as(port: u16, password: &str) -> redis::Connection {
    redis::Client::open(format!("redis://:{password}@127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Changes the password the server requires, and drops every client's connection (as an
/// operator rotating it would), so each must authenticate again.
fn rotate(port: u16, from: &str, to: &str) {
    let mut c = valkey_as(port, from);
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(to)
        .exec(&mut c)
        .unwrap();
    // Our own connection goes too: the reply may not arrive.
    let _killed = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .exec(&mut c);
}

#[test]
fn a_refused_or_missing_password_at_start_is_the_documented_error_not_a_panic() {
    let port = free_port();
    let Some(_valkey) = start_with(port, &["--requirepass", "right-horse"]) else {
        return;
    };
    for (password, says) in [
        (Some("wrong-horse"), "refused the password (WRONGPASS)"),
        (None, "requires a password (NOAUTH)"),
    ] {
        // A fresh state_dir: no fleet-secret, so the daemon asks Valkey for the fleet's at start.
        let dir = tempfile::tempdir().unwrap();
        let pw_line = match password {
            Some(p) => {
                let f = dir.path().join("valkey-password");
                std::fs::write(&f, format!("{p}\n")).unwrap();
                format!("valkey_password_file = \"{}\"\n", f.display())
            }
            None => String::new(),
        };
        let config = dir.path().join("limiter.toml");
        std::fs::write(
            &config,
            format!(
                "[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{}\"\nbackend = \"valkey\"\n\
                 valkey_address = \"127.0.0.1:{port}\"\n{pw_line}[http]\nproxy_listen = [\"{}\"]\n\
                 upstream = \"http://{}\"\n[admin]\nlisten = \"{}\"\n",
                dir.path().join("state").display(),
                limiter_tests::free_addr(),
                limiter_tests::upstream::ok(),
                limiter_tests::free_addr(),
            ),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
            .args(["run", "--config"])
            .arg(&config)
            .env_remove("LIMITER_VALKEY_PASSWORD")
            .env_remove("LIMITER_ADMIN_TOKEN")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(
            stderr.contains("store.valkey_password_file: the server at 127.0.0.1:")
                && stderr.contains(says),
            "{stderr}"
        );
        assert!(
            !stderr.contains("wrong-horse"),
            "the password is never shown: {stderr}"
        );
        assert!(
            !dir.path().join("state/fleet-secret").exists(),
            "no fresh fleet secret was made behind the refusal"
        );
    }
}

#[test]
fn after_a_password_rotation_the_daemon_is_back_on_valkey_within_seconds() {
    let Some(Rotating {
        port,
        valkey: _valkey,
        dir: _dir,
        pw_file,
        d,
    }) = rotating()
    else {
        return;
    };
    let sent = std::cell::Cell::new(0u32);
    // One more request from a new address: 200 whatever the store does (on_failure = local).
    let request = || {
        sent.set(sent.get() + 1);
        let n = sent.get();
        let xff = format!("10.9.{}.{}", n / 256 % 256, n % 256);
        let status = try_http(d.proxy, "GET", "/", &[("x-forwarded-for", &xff)], None)
            .map_or(0, |r| r.status);
        assert_eq!(status, 200);
    };
    let until = |what: &str, degraded_now: bool| {
        let t = Instant::now();
        eventually(what, || {
            request();
            (degraded(&d) == Some(degraded_now)).then_some(())
        });
        t.elapsed()
    };
    until("the store to be used", false);

    // The server's password changes under the daemon; the file still holds the old one.
    rotate(port, "old-pw", "new-pw");
    until("degraded while the password is refused", true);
    // Two seconds of decisions on the refused password, then the old one back.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        request();
    }
    let mut c = valkey_as(port, "new-pw");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("old-pw")
        .exec(&mut c)
        .unwrap();
    let took = until("back on Valkey with the old password", false);
    println!("back on Valkey {took:?} after the old password was");
    assert!(took < Duration::from_secs(5), "{took:?}");

    // A real rotation: the file first, then the server. The next connections read the file.
    std::fs::write(&pw_file, "rotated-pw\n").unwrap();
    rotate(port, "old-pw", "rotated-pw");
    let mut c = valkey_as(port, "rotated-pw");
    let before: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    let t = Instant::now();
    eventually(
        "decisions counted in Valkey with the rotated password",
        || {
            request();
            let now: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
            (now > before && degraded(&d) == Some(false)).then_some(())
        },
    );
    println!("on Valkey {:?} after the rotation", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The key admin API answers again too (it was 500 for good).
    let r = d.admin("GET", "/admin/v1/keys", None);
    assert_eq!(r.status, 200, "{}", r.body);
}

/// `[store] probe_interval` of [`daemon`].
const PROBE: Duration = Duration::from_millis(500);

/// `/readyz`'s status and body.
fn readyz(d: &Daemon) -> Option<(u16, String)> {
    let r = try_http(d.metrics.unwrap(), "GET", "/readyz", &[], None)?;
    Some((r.status, r.body))
}

/// Ready on Valkey: `/readyz` 200 and `store_degraded 0`.
fn ready(d: &Daemon) -> bool {
    readyz(d).is_some_and(|(s, _)| s == 200) && degraded(d) == Some(false)
}

/// Requests from new addresses until the store's failure is seen (`/readyz` 503 "store
/// degraded", `store_degraded 1`): the traffic a balancer sends meanwhile. Every one is a 200.
fn until_degraded(d: &Daemon) {
    let mut n = 0u32;
    eventually("degraded under traffic", || {
        n += 1;
        let xff = format!("10.8.{}.{}", n / 256 % 256, n % 256);
        let status = try_http(d.proxy, "GET", "/", &[("x-forwarded-for", &xff)], None)
            .map_or(0, |r| r.status);
        assert_eq!(status, 200);
        (degraded(d) == Some(true)).then_some(())
    });
    let (status, body) = readyz(d).unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("store degraded"), "{body}");
}

/// Sends no request: how long `/readyz` and `store_degraded` took to say ready, failing past
/// the probe interval plus a second (a balancer that only health-checks must see it rejoin).
fn ready_again_without_traffic(d: &Daemon, what: &str) -> Duration {
    let t = Instant::now();
    let within = PROBE + Duration::from_secs(1);
    limiter_tests::poll(within, what, || ready(d).then_some(()));
    let took = t.elapsed();
    println!("{what}: {took:?}");
    took
}

#[test]
fn valkey_killed_and_restarted_makes_the_host_ready_again_without_a_request() {
    let port = free_port();
    let Some(valkey) = start_on(port) else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), port);
    eventually("ready on Valkey", || ready(&d).then_some(()));
    // `Server`'s drop is SIGKILL: the `kill -9` of the report.
    drop(valkey);
    until_degraded(&d);
    let _back = start_on(port).unwrap();
    ready_again_without_traffic(&d, "ready after Valkey's restart, no request sent");
    // Decisions are counted on Valkey again.
    let r = limiter_tests::client::http(d.proxy, "GET", "/", &[], None);
    assert_eq!(r.status, 200);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("out:quota*").query(&mut c).unwrap();
    assert!(!keys.is_empty(), "the request was counted in Valkey");
}

#[test]
fn a_password_rotation_makes_the_host_ready_again_once_the_file_has_it_without_a_request() {
    let Some(Rotating {
        port,
        valkey: _valkey,
        dir: _dir,
        pw_file,
        d,
    }) = rotating()
    else {
        return;
    };
    eventually("ready on Valkey", || ready(&d).then_some(()));
    // The server's password changes and every client is dropped; the file still holds the old.
    rotate(port, "old-pw", "new-pw");
    until_degraded(&d);
    // What the operator does: the file gets the new password (read for every new connection,
    // no reload). Then no request at all.
    std::fs::write(&pw_file, "new-pw\n").unwrap();
    ready_again_without_traffic(
        &d,
        "ready after the password file caught up, no request sent",
    );
    let r = d.admin("GET", "/admin/v1/keys", None);
    assert_eq!(r.status, 200, "{}", r.body);
}

/// `valkey-cli`-like commands on the daemon's Valkey (no password).
fn valkey_cmd(port: u16, args: &[&str]) {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.exec(&mut c).unwrap();
}

fn metric(d: &Daemon, line_start: &str) -> Option<String> {
    let r = try_http(d.metrics.unwrap(), "GET", "/metrics", &[], None)?;
    r.body
        .lines()
        .find(|l| l.starts_with(line_start))
        .map(str::to_string)
}

#[test]
fn an_unreadable_deny_entry_or_key_record_takes_nothing_with_it_and_the_admin_api_deletes_it() {
    let port = free_port();
    let Some(_valkey) = start_on(port) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut d = daemon(dir.path(), port);
    eventually("the store to be used", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    let deny = |cidr: &str| {
        let r = d.admin("POST", "/admin/v1/lists/deny", Some(&json!({"cidr": cidr})));
        assert_eq!(r.status, 201, "{}", r.body);
    };
    deny("198.51.100.0/24");
    let issued = d.admin("POST", "/admin/v1/keys", Some(&json!({"owner": "acme"})));
    assert_eq!(issued.status, 201, "{}", issued.body);
    valkey_cmd(port, &["HSET", "out:list:deny", "garbage", "not json"]);
    valkey_cmd(port, &["HSET", "out:key:deadbeef", "id", "deadbeef"]);
    // Any list change reads the whole list again.
    deny("203.0.113.0/24");
    let refused = |d: &Daemon, ip: &str| {
        d.decide(ip)["action"]
            .as_str()
            .is_some_and(|a| a != "allow")
    };
    assert!(!refused(&d, "192.0.2.200"), "not on the list");
    assert!(refused(&d, "203.0.113.5"), "{}", d.decide("203.0.113.5"));
    assert!(refused(&d, "198.51.100.5"));

    let r = d.admin("GET", "/admin/v1/lists/deny", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["items"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["unreadable"][0]["field"], "garbage", "{v}");
    assert_eq!(v["unreadable"][0]["key"], "out:list:deny", "{v}");
    let r = d.admin("GET", "/admin/v1/lockouts", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = d.admin("GET", "/admin/v1/keys", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["items"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["unreadable"][0]["id"], "deadbeef", "{v}");
    assert!(metric(
        &d,
        "limiter_store_records_unreadable_total{kind=\"list_deny\"} 1"
    )
    .is_some());

    // After a restart, the list still applies.
    d.restart();
    eventually("the store to be used", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    assert!(refused(&d, "203.0.113.5"));
    assert!(refused(&d, "198.51.100.5"));

    // Deleted by the raw field and id; the readable records stay.
    let r = d.admin("DELETE", "/admin/v1/lists/deny/garbage", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["removed"], true);
    let r = d.admin("DELETE", "/admin/v1/lists/deny/garbage", None);
    assert_eq!(r.status, 400, "gone, and not a CIDR: {}", r.body);
    let r = d.admin("DELETE", "/admin/v1/keys/deadbeef", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["removed"], true);
    let v = d.admin("GET", "/admin/v1/lists/deny", None).json();
    assert_eq!(v["unreadable"], json!([]), "{v}");
    assert_eq!(v["items"].as_array().unwrap().len(), 2, "{v}");
    let v = d.admin("GET", "/admin/v1/keys", None).json();
    assert_eq!(v["unreadable"], json!([]), "{v}");
    assert_eq!(v["items"].as_array().unwrap().len(), 1, "{v}");
}

#[test]
fn an_unreadable_lockout_record_leaves_fleet_lockouts_enforced_and_readyz_says_when_not_following()
{
    let port = free_port();
    let Some(_valkey) = start_on(port) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut d = daemon(dir.path(), port);
    eventually("the store to be used", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "192.0.2.77", "for": "10m"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    eventually("the lockout in Valkey", || {
        (lockout_keys(port) > 0).then_some(())
    });
    let junk = format!("out:lockout:{{ip:{}}}", "f".repeat(64));
    valkey_cmd(port, &["SET", &junk, "not json"]);
    valkey_cmd(port, &["DEL", "out:lockouts"]);
    d.restart();
    eventually("the store to be used", || {
        (degraded(&d) == Some(false)).then_some(())
    });
    eventually("the lockout reloaded from Valkey", || {
        (d.decide("192.0.2.77")["reason"] == "locked").then_some(())
    });
    let v = d.admin("GET", "/admin/v1/lockouts", None).json();
    assert_eq!(v["items"][0]["ip"], "192.0.2.77", "{v}");
    let ready = try_http(d.metrics.unwrap(), "GET", "/readyz", &[], None).unwrap();
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(metric(
        &d,
        "limiter_store_records_unreadable_total{kind=\"lockout\"} 1"
    )
    .is_some());
    assert_eq!(
        d.logs().matches("store_record_unreadable").count(),
        1,
        "logged once"
    );

    // A stream the follower cannot read: not ready, and the page's stats say why.
    valkey_cmd(port, &["DEL", "out:lockouts"]);
    valkey_cmd(port, &["SET", "out:lockouts", "not a stream"]);
    let ready = eventually("/readyz to say not following", || {
        let r = try_http(d.metrics.unwrap(), "GET", "/readyz", &[], None)?;
        (r.status == 503).then_some(r)
    });
    assert!(
        ready.body.contains("lockout stream not followed"),
        "{}",
        ready.body
    );
    let stats = d.admin("GET", "/admin/v1/stats", None).json();
    assert!(
        stats["store"]["followerError"]
            .as_str()
            .is_some_and(|e| e.contains("WRONGTYPE")),
        "{stats}"
    );
    assert!(metric(&d, "limiter_store_stream_following 0").is_some());
    valkey_cmd(port, &["DEL", "out:lockouts"]);
    eventually("ready again", || {
        let r = try_http(d.metrics.unwrap(), "GET", "/readyz", &[], None)?;
        (r.status == 200).then_some(())
    });
}
