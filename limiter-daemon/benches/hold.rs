//! `cargo xtask bench hold`: what a request held for a scan delay costs the daemon, and what
//! thousands of them cost everyone else.
//!
//! For each path (bodyless GET, served by the own loop, and POST with a body, held before hyper's
//! server takes the connection) a fresh
//! `bench-fast` daemon (`limiter-daemon run`, embedded store, kernel off, 2 proxy threads) is
//! started in front of a small in-process upstream, with a delay route (`/scan`, daily quota 1,
//! every delay 10 minutes) and an unmetered one (`/free`). Then:
//! 1. p99 of sequential `GET /free` on one keep-alive connection, nothing held (the baseline);
//! 2. the daemon's RSS (`/proc/<pid>/status`), then BENCH_HELD (default 10,000) connections
//!    each send one request to `/scan` and are held (the `held_requests` gauge says so), and the
//!    RSS again: the difference per held request is the table's KB figure;
//! 3. the same p99 while they are held; the ratio to (1) is the table's last column.
//!
//! BENCH_ROUNDS (default 3) rounds alternate (1) and (3), closing the held connections in
//! between; each p99 is the median over the rounds, RSS is from the first.
//!
//! Traffic is loopback only. RLIMIT_NOFILE is raised for the bench and the daemons it starts.
//! `BENCH_DAEMON=<binary>` measures another daemon binary, everything else equal.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use limiter_tests::free_port;

/// Sequential requests per p99 measurement.
const LATENCY_SAMPLES: usize = 4000;

fn rounds() -> usize {
    std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn held_count() -> usize {
    std::env::var("BENCH_HELD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

/// Raises RLIMIT_NOFILE to room for `need` descriptors (children inherit it); the hard limit
/// only when it is lower.
fn raise_nofile(need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls with a valid pointer.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_max < need {
            lim.rlim_max = need;
        }
        lim.rlim_cur = need;
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim),
            0,
            "cannot raise RLIMIT_NOFILE to {need}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Reads one HTTP/1.1 message head (and a `content-length` body) off `s`; returns the status
/// or request line's first number, or `None` at EOF.
fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let msg: Vec<u8> = buf.drain(..end + 4 + len).collect();
                return Some(msg);
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The upstream: a thread per connection answering every request `200 ok`.
fn start_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let _ = s.set_nodelay(true);
                let mut buf = Vec::new();
                while read_message(&mut s, &mut buf).is_some() {
                    if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn wait_listening(addr: SocketAddr, child: &mut Child) {
    limiter_tests::poll(Duration::from_secs(20), "the daemon to listen", || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("daemon exited early with {status}");
        }
        TcpStream::connect(addr).ok().map(|_| ())
    });
}

struct Daemon {
    child: Child,
    proxy: SocketAddr,
    metrics: SocketAddr,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        limiter_tests::process::terminate(&mut self.child, Duration::from_secs(10));
    }
}

fn daemon_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BENCH_DAEMON") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| limiter_tests::workspace_root().join("target"));
    target.join("bench-fast/limiter-daemon")
}

fn start_daemon(bin: &PathBuf, dir: &std::path::Path, up: SocketAddr) -> Daemon {
    let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let state = dir.join(format!("state-{}", free_port()));
    let bound = 4 * held_count();
    // Every connection comes from loopback, one client address: the connection caps (derived
    // from the descriptor limit, a client an eighth of the proxy's) are raised to what the bench
    // holds, as `max_held` is.
    let conns = held_count() + 512;
    // Every request here comes from loopback, one /24: with network budgets on its /24's burst
    // refused the probes (429 `network`). This bench measures holding, not metering.
    let config = format!(
        "[quota]\nanon = 1\nsoft_delay_ms = 600000\nhard_delay_ms = 600000\n\n\
         [[routes]]\nprefix = \"/scan\"\nlimits = [\"daily\"]\nover_quota = \"delay\"\n\n\
         [[routes]]\nprefix = \"/free\"\nlimits = []\n\n\
         [networks.prefix]\nenabled = false\n\n\
         [store]\nstate_dir = \"{}\"\n\n[kernel]\nmode = \"off\"\n\n\
         [metrics]\nlisten = \"{metrics}\"\n\n[admin]\nlisten = \"\"\n\n\
         [http]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{up}\"\nworker_threads = 2\n\
         max_held = {bound}\nmax_held_per_identity = {bound}\n\
         max_connections = {conns}\nmax_connections_per_client = {conns}\n",
        state.display()
    );
    let path = dir.join(format!("limiter-{}.toml", proxy.port()));
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start the daemon");
    wait_listening(proxy, &mut child);
    wait_listening(metrics, &mut child);
    Daemon {
        child,
        proxy,
        metrics,
    }
}

/// The daemon's resident set, kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// The `held_requests` gauge.
fn held_now(metrics: SocketAddr) -> Option<u64> {
    let mut s = TcpStream::connect(metrics).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: m\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("limiter_held_requests "))
        .and_then(|v| v.trim().parse().ok())
}

/// p99 of sequential `GET /free` on one keep-alive connection, ms.
fn p99_ms(proxy: SocketAddr) -> f64 {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut times = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_SAMPLES + 200 {
        let t0 = Instant::now();
        s.write_all(b"GET /free HTTP/1.1\r\nhost: bench\r\n\r\n")
            .unwrap();
        let msg = read_message(&mut s, &mut buf).expect("an answer");
        assert!(
            msg.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&msg)
        );
        // The first 200 warm the path up.
        if i >= 200 {
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() * 99 / 100]
}

struct Row {
    path: &'static str,
    rss_before_kb: u64,
    rss_held_kb: u64,
    p99_idle: f64,
    p99_held: f64,
}

fn measure(
    bin: &PathBuf,
    dir: &std::path::Path,
    up: SocketAddr,
    path: &'static str,
    request: &[u8],
) -> Row {
    let n = held_count();
    let d = start_daemon(bin, dir, up);
    // The daily quota's one request goes through; every later one is held.
    let mut first = TcpStream::connect(d.proxy).unwrap();
    first.write_all(request).unwrap();
    let answer = read_message(&mut first, &mut Vec::new()).expect("the first request answered");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(first);
    let pid = d.child.id();
    // Rounds alternate nothing held and N held, so load from elsewhere drifts over both
    // alike; RSS is taken in the first round, before anything was ever held.
    let (mut idle, mut busy) = (Vec::new(), Vec::new());
    let (mut rss_before_kb, mut rss_held_kb) = (0, 0);
    for round in 0..rounds() {
        idle.push(p99_ms(d.proxy));
        if round == 0 {
            rss_before_kb = rss_kb(pid);
        }
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            let mut s = TcpStream::connect(d.proxy).expect("connect (RLIMIT_NOFILE?)");
            s.write_all(request).unwrap();
            held.push(s);
        }
        limiter_tests::poll(Duration::from_secs(60), "every request held", || {
            (held_now(d.metrics) == Some(n as u64)).then_some(())
        });
        if round == 0 {
            rss_held_kb = rss_kb(pid);
        }
        busy.push(p99_ms(d.proxy));
        drop(held);
        limiter_tests::poll(Duration::from_secs(60), "held requests gone", || {
            (held_now(d.metrics) == Some(0)).then_some(())
        });
    }
    drop(d);
    Row {
        path,
        rss_before_kb,
        rss_held_kb,
        p99_idle: median(idle),
        p99_held: median(busy),
    }
}

fn main() {
    let bin = daemon_binary();
    assert!(
        bin.exists(),
        "{} is missing: run `cargo xtask bench hold` (it builds the daemon with --profile bench-fast)",
        bin.display()
    );
    let n = held_count();
    // The bench holds the client ends and the daemon (its own process) the server ends.
    raise_nofile(n as u64 + 1024);
    let scratch = tempfile::tempdir().expect("temp dir");
    let up = start_upstream();
    const GET: &[u8] = b"GET /scan/x HTTP/1.1\r\nhost: bench\r\n\r\n";
    const POST: &[u8] = b"POST /scan/x HTTP/1.1\r\nhost: bench\r\ncontent-length: 2\r\n\r\nhi";
    let rows = [
        measure(&bin, scratch.path(), up, "GET, own loop", GET),
        measure(&bin, scratch.path(), up, "POST, held before hyper", POST),
    ];
    println!();
    println!(
        "hold benchmark: {n} held requests per path, each on its own connection; p99 of {LATENCY_SAMPLES} \
         sequential unmetered GETs on one keep-alive connection, nothing held vs {n} held, \
         median of {} alternating rounds; daemon {}",
        rounds(),
        bin.display()
    );
    println!();
    println!("| path | RSS before (MB) | RSS with {n} held (MB) | KB per held request | p99 nothing held (ms) | p99 with {n} held (ms) | p99 ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.1} | {:.2} | {:.3} | {:.3} | {:.2} |",
            r.path,
            r.rss_before_kb as f64 / 1024.0,
            r.rss_held_kb as f64 / 1024.0,
            (r.rss_held_kb.saturating_sub(r.rss_before_kb)) as f64 / n as f64,
            r.p99_idle,
            r.p99_held,
            r.p99_held / r.p99_idle
        );
    }
}
