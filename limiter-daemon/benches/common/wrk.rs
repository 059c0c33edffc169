//! wrk and the daemon binary for the HTTP benches (included with `#[path]` by `proxy` and
//! `store`): one wrk run parsed into a [`Run`], the `bench-fast` daemon started and stopped.

#![allow(dead_code, reason = "each bench uses a different part")]

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub non_2xx: u64,
    pub errors: u64,
    pub requests: u64,
}

/// Processes whose parent is `pid` (an nginx master's workers).
/// User + system CPU ticks used so far by every thread of `pids`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn wrk_available() -> bool {
    Command::new("wrk")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

pub fn parse_latency(v: &str) -> Option<f64> {
    let v = v.trim();
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

pub fn parse_wrk(out: &str) -> Run {
    let mut run = Run {
        rps: 0.0,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        non_2xx: 0,
        errors: 0,
        requests: 0,
    };
    for line in out.lines() {
        let t = line.trim();
        if t.contains(" requests in ") {
            run.requests = t
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        }
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            run.rps = v.trim().parse().unwrap_or(0.0);
        } else if let Some(v) = t.strip_prefix("50%") {
            run.p50_ms = parse_latency(v).unwrap_or(f64::NAN);
        } else if let Some(v) = t.strip_prefix("99%") {
            run.p99_ms = parse_latency(v).unwrap_or(f64::NAN);
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            run.non_2xx = v.trim().parse().unwrap_or(u64::MAX);
        } else if let Some(v) = t.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            run.errors = v
                .split(',')
                .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                .sum();
        }
    }
    run
}

pub fn wrk(url: &str, secs: u64) -> Run {
    wrk_with(url, secs, None)
}

/// Writes into `dir` a wrk script that sends each request with `X-Forwarded-For` naming the
/// next of 65,536 client addresses (`10.a.b.7`, each in its own /24), as many clients behind
/// one trusted proxy send, and returns its path. From wrk's one address, a daemon with network
/// budgets on (the default) would meter every request as one /24 and refuse most of them.
pub fn spread_script(dir: &Path) -> PathBuf {
    let script = dir.join("spread.lua");
    std::fs::write(
        &script,
        "local n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(nil, nil, \
         {[\"X-Forwarded-For\"] = \"10.\" .. (n % 256) .. \".\" .. (math.floor(n / 256) % 256) .. \".7\"})\nend\n",
    )
    .expect("write the wrk script");
    script
}

/// `wrk --latency -t2 -c64 -d<secs>s` at `url`, with `script` (`-s`) when given.
pub fn wrk_with(url: &str, secs: u64, script: Option<&Path>) -> Run {
    let mut cmd = Command::new("wrk");
    cmd.args(["--latency", "-t2", "-c64", &format!("-d{secs}s")]);
    if let Some(s) = script {
        cmd.arg("-s").arg(s);
    }
    let out = cmd.arg(url).output().expect("run wrk");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_wrk(&text)
}

pub fn wait_listening(addr: SocketAddr, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("daemon exited early with {status}");
        }
        assert!(Instant::now() < deadline, "daemon did not listen on {addr}");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

/// Starts `bin run --config <config>` (logging warnings only, stdout discarded).
pub fn spawn_daemon(bin: &Path, config: &Path) -> Child {
    Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start the daemon")
}

pub struct Daemon(pub Child);

/// Runs `bin run --config <config>` (`RUST_LOG=warn`) and waits until every one of `ready`
/// accepts connections.
pub fn start_daemon(bin: &Path, config: &Path, ready: &[SocketAddr]) -> Daemon {
    let mut child = spawn_daemon(bin, config);
    for &addr in ready {
        wait_listening(addr, &mut child);
    }
    Daemon(child)
}

impl Drop for Daemon {
    fn drop(&mut self) {
        limiter_tests::process::terminate(&mut self.0, Duration::from_secs(10));
    }
}

/// `BENCH_DAEMON` names another daemon binary (to compare two builds on the same bench);
/// otherwise the `bench-fast` build of this workspace.
pub fn daemon_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BENCH_DAEMON") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| limiter_tests::workspace_root().join("target"));
    target.join("bench-fast/limiter-daemon")
}
