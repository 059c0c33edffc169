//! The proxy bench's edge rows (included by `proxy.rs`): what the proxy speaks besides plain
//! HTTP/1.1, each against nginx configured alike in the same run, in interleaved rounds
//! (medians):
//! - **HTTPS/1.1**: `wrk` (the same spread script as the HTTP rows) at the daemon's
//!   `tls_listen` and at nginx `listen ssl`, both with a P-256 certificate made by openssl;
//! - **HTTP/2 over TLS**: `h2load -c64 -m10` (ALPN h2) at the same two listeners (nginx
//!   `listen ssl http2`); p50/p99 from its per-request log;
//! - **WebSocket**: messages/s echoed (one 32-byte message in flight per connection, 16
//!   connections) through the daemon, through nginx (`proxy_set_header Upgrade`), and direct;
//! - **rapid reset**: a normal client's p99 (`wrk`, HTTP/1.1) while 127.0.0.5 opens and
//!   cancels HTTP/2 streams as fast as it can at the same server (the daemon's plain listener;
//!   nginx's `listen http2` port, same workers), against the same client without the flood.
//!
//! The daemon: embedded store, kernel off, 2 workers, budgets far above the load, wrk's
//! address trusted (clients named by the script). Network budgets are off here: h2load sends
//! every request as one client, one /24, which their defaults would refuse. nginx: 2 workers,
//! `limit_req` keyed on the same client, keep-alive to the upstream, as in the HTTP rows.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_tests::free_port;
use limiter_tests::nginx::Nginx;

use crate::wrk::{median, spawn_daemon, wait_listening, wrk_with, Daemon, Run};

/// WebSocket connections and message size.
const WS_CONNS: usize = 16;
const WS_MESSAGE: usize = 32;

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// A WebSocket echo server (tungstenite, a thread per connection).
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = conn.set_nodelay(true);
                let Ok(mut ws) = tungstenite::accept(conn) else {
                    return;
                };
                while let Ok(msg) = ws.read() {
                    if msg.is_close() || ws.send(msg).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Messages per second echoed at `url` (`ws://…/ws`) over [`WS_CONNS`] connections for `secs`.
fn ws_rate(addr: SocketAddr, secs: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..WS_CONNS)
        .map(|_| {
            let (stop, total) = (Arc::clone(&stop), Arc::clone(&total));
            std::thread::spawn(move || {
                let tcp = TcpStream::connect(addr).unwrap();
                tcp.set_nodelay(true).unwrap();
                let (mut ws, _) = tungstenite::client(format!("ws://{addr}/ws"), tcp)
                    .unwrap_or_else(|e| panic!("WebSocket handshake at {addr}: {e}"));
                let payload = vec![b'x'; WS_MESSAGE];
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    ws.send(tungstenite::Message::binary(payload.clone()))
                        .unwrap();
                    let back = ws.read().unwrap();
                    assert_eq!(back.len(), WS_MESSAGE);
                    n += 1;
                }
                total.fetch_add(n, Ordering::Relaxed);
                let _ = ws.close(None);
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    for t in threads {
        t.join().unwrap();
    }
    total.load(Ordering::Relaxed) as f64 / elapsed
}

/// `h2load -c64 -m10 -t2 -D<secs>` at `url`: requests/s, p50 and p99 (ms) from its log.
fn h2load(url: &str, secs: u64, scratch: &Path) -> Run {
    let log = scratch.join("h2load.log");
    let out = Command::new("h2load")
        .args(["-c", "64", "-m", "10", "-t", "2", "--warm-up-time", "1"])
        .arg(format!("-D{secs}"))
        .arg(format!("--log-file={}", log.display()))
        .arg(url)
        .output()
        .expect("h2load (nghttp2-client, scripts/setup.sh)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "h2load failed: {text}");
    assert!(
        text.contains("Application protocol: h2"),
        "not HTTP/2: {text}"
    );
    let codes = text
        .lines()
        .find_map(|l| l.strip_prefix("status codes: "))
        .unwrap_or_else(|| panic!("no status codes: {text}"));
    let count = |what: &str| -> u64 {
        codes
            .split(", ")
            .find_map(|p| p.strip_suffix(what))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("finished in "))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|r| r.strip_suffix(" req/s"))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no req/s: {text}"));
    let mut us: Vec<f64> = BufReader::new(std::fs::File::open(&log).unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    us.sort_by(f64::total_cmp);
    let pct = |p: f64| us.get(((us.len() as f64 * p) as usize).min(us.len().saturating_sub(1)));
    let ms = |p: f64| pct(p).map_or(f64::NAN, |v| v / 1000.0);
    let ok = count(" 2xx");
    let errored = text
        .lines()
        .find_map(|l| l.strip_prefix("requests: "))
        .and_then(|l| l.split(", ").find_map(|p| p.strip_suffix(" errored")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    Run {
        rps,
        p50_ms: ms(0.50),
        p99_ms: ms(0.99),
        non_2xx: count(" 3xx") + count(" 4xx") + count(" 5xx"),
        errors: errored,
        requests: ok,
    }
}

/// `run` while 127.0.0.5 floods `target` with rapid resets; the flood's streams sent.
fn during_flood<T>(target: SocketAddr, run: impl FnOnce() -> T) -> (T, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let flood = std::thread::spawn(move || {
        limiter_tests::h2::rapid_reset(target, "127.0.0.5", usize::MAX, &flag).0
    });
    let out = run();
    stop.store(true, Ordering::Relaxed);
    (out, flood.join().unwrap())
}

fn start_daemon(
    bin: &Path,
    scratch: &Path,
    name: &str,
    upstream: SocketAddr,
    extra: &str,
) -> Daemon {
    let big = 400_000_000u32;
    let config = format!(
        "[tiers.anon]\nhourly = {big}\n\n[quota]\nanon = {big}\n\n\
         [default_route]\nlimits = [\"hourly\", \"daily\"]\n\n\
         [networks.prefix]\nenabled = false\n\n\
         [identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n\
         [store]\nstate_dir = \"{}\"\n\n[kernel]\nmode = \"off\"\n\n\
         [metrics]\nlisten = \"\"\n\n[admin]\nlisten = \"\"\n\n\
         [http]\napi_listen = [\"{}\"]\nupstream = \"http://{upstream}\"\nworker_threads = 2\n{extra}",
        scratch.join(format!("state-{name}")).display(),
        local(),
    );
    let path = scratch.join(format!("limiter-{name}.toml"));
    std::fs::write(&path, config).unwrap();
    Daemon(spawn_daemon(bin, &path))
}

/// One row's samples: (daemon, nginx, direct when there is one).
#[derive(Default)]
struct Samples(Vec<Run>, Vec<Run>, Vec<Run>);

/// The edge rows against `upstream` (the HTTP rows' nginx serving `/index.html`), `rounds`
/// rounds of `secs` each; prints their table.
pub fn run(
    bin: &Path,
    scratch: &Path,
    upstream: SocketAddr,
    script: &Path,
    secs: u64,
    rounds: usize,
) {
    let certs = scratch.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    limiter_tests::tls::ca(&certs, "ca");
    limiter_tests::tls::leaf(
        &certs,
        "ca",
        "edge",
        "localhost",
        "IP:127.0.0.1,DNS:localhost",
    );
    let (cert, key) = (certs.join("edge.pem"), certs.join("edge.key"));
    let echo = echo_server();

    let (ng_tls, ng_plain, ng_h2c) = (local(), local(), local());
    let location = "limit_req zone=edge burst=1000000 nodelay;\n\
         proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\";\n\
         proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;";
    let nginx = Nginx::start(
        &format!(
            "limit_req_zone $binary_remote_addr zone=edge:10m rate=1000000r/s;\n\
             upstream app {{ server {upstream}; keepalive 128; }}\n\
             upstream ws {{ server {echo}; }}\n\
             set_real_ip_from 127.0.0.1; real_ip_header X-Forwarded-For;\n\
             keepalive_requests 1000000;\n\
             server {{ listen {ng_tls} ssl http2 backlog=4096;\n\
               ssl_certificate {}; ssl_certificate_key {};\n\
               location / {{ {location} }} }}\n\
             server {{ listen {ng_h2c} http2 backlog=4096; location / {{ {location} }} }}\n\
             server {{ listen {ng_plain} backlog=4096; location / {{ {location} }}\n\
               location /ws {{ proxy_pass http://ws; proxy_http_version 1.1;\n\
                 proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection \"upgrade\";\n\
                 proxy_read_timeout 3600s; }} }}",
            cert.display(),
            key.display()
        ),
        ng_plain,
        2,
    );

    let (dm_plain, dm_tls, ws_plain) = (local(), local(), local());
    let mut daemon = start_daemon(
        bin,
        scratch,
        "edge",
        upstream,
        &format!(
            "proxy_listen = [\"{dm_plain}\"]\ntls_listen = [\"{dm_tls}\"]\n\
             [[http.tls]]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            cert.display(),
            key.display()
        ),
    );
    wait_listening(dm_tls, &mut daemon.0);
    let mut ws_daemon = start_daemon(
        bin,
        scratch,
        "ws",
        echo,
        &format!("proxy_listen = [\"{ws_plain}\"]\nmax_tunnels_per_identity = 256\n"),
    );
    wait_listening(ws_plain, &mut ws_daemon.0);

    let wrk = |url: &str, secs: u64| wrk_with(url, secs, Some(script));
    let ws_run = |addr, secs| Run {
        rps: ws_rate(addr, secs),
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        non_2xx: 0,
        errors: 0,
        requests: 0,
    };
    let https = |a: SocketAddr| format!("https://127.0.0.1:{}/index.html", a.port());
    let http = |a: SocketAddr| format!("http://{a}/index.html");
    // Warm-up: TLS session set-up, pools to the upstream.
    let _ = wrk(&https(dm_tls), 2);
    let _ = wrk(&https(ng_tls), 2);
    let _ = h2load(&https(dm_tls), 1, scratch);
    let _ = h2load(&https(ng_tls), 1, scratch);

    let (mut tls1, mut h2, mut ws, mut calm, mut flood) = Default::default();
    let (mut sent_dm, mut sent_ng) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let Samples(d, n, _): &mut Samples = &mut tls1;
        d.push(wrk(&https(dm_tls), secs));
        n.push(wrk(&https(ng_tls), secs));
        let Samples(d, n, _): &mut Samples = &mut h2;
        d.push(h2load(&https(dm_tls), secs, scratch));
        n.push(h2load(&https(ng_tls), secs, scratch));
        let Samples(d, n, direct): &mut Samples = &mut ws;
        d.push(ws_run(ws_plain, secs));
        n.push(ws_run(ng_plain, secs));
        direct.push(ws_run(echo, secs));
        let Samples(d, n, _): &mut Samples = &mut calm;
        d.push(wrk(&http(dm_plain), secs));
        n.push(wrk(&http(ng_plain), secs));
        let Samples(d, n, _): &mut Samples = &mut flood;
        let (r, sent) = during_flood(dm_plain, || wrk(&http(dm_plain), secs));
        d.push(r);
        sent_dm.push(sent as f64);
        let (r, sent) = during_flood(ng_h2c, || wrk(&http(ng_plain), secs));
        n.push(r);
        sent_ng.push(sent as f64);
    }
    drop((daemon, ws_daemon, nginx));
    for (name, s) in [("HTTPS/1.1", &tls1), ("HTTP/2 over TLS", &h2)] {
        for r in s.0.iter().chain(&s.1) {
            assert_eq!(r.non_2xx, 0, "{name}: {} answers were not 2xx", r.non_2xx);
        }
    }
    for r in calm.0.iter().chain(&calm.1).chain(&flood.0).chain(&flood.1) {
        assert_eq!(
            r.non_2xx, 0,
            "the normal client was refused {} times",
            r.non_2xx
        );
    }

    let m = |v: &[Run], f: fn(&Run) -> f64| median(v.iter().map(f).collect());
    let rps = |r: &Run| r.rps;
    let p50 = |r: &Run| r.p50_ms;
    let p99 = |r: &Run| r.p99_ms;
    println!();
    println!(
        "edge rows: {secs} s each, median of {rounds} interleaved rounds; the daemon and nginx \
         (2 workers each) with the same certificate and upstream"
    );
    println!();
    println!("| row | limiter-daemon | nginx | daemon / nginx | p50 ms daemon / nginx | p99 ms daemon / nginx |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, s) in [
        ("HTTPS/1.1, wrk -t2 -c64 (req/s)", &tls1),
        ("HTTP/2 over TLS, h2load -c64 -m10 (req/s)", &h2),
        ("normal client, wrk -t2 -c64, no flood (req/s)", &calm),
        ("normal client during a rapid-reset flood (req/s)", &flood),
    ] {
        let (d, n) = (m(&s.0, rps), m(&s.1, rps));
        println!(
            "| {name} | {d:.0} | {n:.0} | {:.2} | {:.2} / {:.2} | {:.2} / {:.2} |",
            d / n,
            m(&s.0, p50),
            m(&s.1, p50),
            m(&s.0, p99),
            m(&s.1, p99)
        );
    }
    let (d, n, direct) = (m(&ws.0, rps), m(&ws.1, rps), m(&ws.2, rps));
    println!(
        "| WebSocket echo, {WS_CONNS} connections, {WS_MESSAGE} B (messages/s; direct {direct:.0}) | {d:.0} | {n:.0} | {:.2} | | |",
        d / n
    );
    println!();
    println!(
        "WebSocket through the proxy / direct: daemon {:.2}, nginx {:.2}",
        d / direct,
        n / direct
    );
    println!(
        "p99 of the normal client, flood / no flood: daemon {:.2}, nginx {:.2}; flood streams sent per round: daemon {:.0}, nginx {:.0}",
        m(&flood.0, p99) / m(&calm.0, p99),
        m(&flood.1, p99) / m(&calm.1, p99),
        median(sent_dm),
        median(sent_ng)
    );
}
