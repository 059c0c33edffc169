//! Shared by the operator-surface tests (reload, lifecycle, logs, self-service, API token):
//! the real `limiter-daemon` binary on a config file the test writes and rewrites, its stderr
//! kept in a file the test reads, a small blocking HTTP/1.1 client, and polling with deadlines.

#![allow(
    dead_code,
    reason = "each test file uses a different part of this module"
)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// The running daemon; dropping it stops it (SIGTERM, then a kill after 5 s).
pub struct Daemon {
    pub child: Child,
    pub config: PathBuf,
    pub stderr: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        limiter_tests::process::terminate(&mut self.child, Duration::from_secs(5));
    }
}

/// `[kernel] mode = "off"` and state under `dir`, then `rest` (the test's own sections).
pub fn config_text(dir: &Path, rest: &str) -> String {
    format!(
        "[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{}\"\n{rest}",
        dir.join("state").display()
    )
}

impl Daemon {
    /// Starts the binary with `args` before `run --config FILE`, `text` as the file; returns
    /// once `ready` accepts connections.
    pub fn start(dir: &Path, text: &str, args: &[&str], ready: SocketAddr) -> Daemon {
        Daemon::start_with_env(dir, text, args, &[], ready)
    }

    /// [`Daemon::start`] with `env` added to the daemon's environment.
    pub fn start_with_env(
        dir: &Path,
        text: &str,
        args: &[&str],
        env: &[(&str, &Path)],
        ready: SocketAddr,
    ) -> Daemon {
        Daemon::start_as(dir, text, args, env, None, ready)
    }

    /// [`Daemon::start`] with the descriptor limit (`RLIMIT_NOFILE`) set to `soft` and `hard`
    /// before the binary runs, as `prlimit --nofile=SOFT:HARD limiter-daemon …` would.
    pub fn start_with_nofile(
        dir: &Path,
        text: &str,
        (soft, hard): (u64, u64),
        ready: SocketAddr,
    ) -> Daemon {
        Daemon::start_as(dir, text, &[], &[], Some((soft, hard)), ready)
    }

    fn start_as(
        dir: &Path,
        text: &str,
        args: &[&str],
        env: &[(&str, &Path)],
        nofile: Option<(u64, u64)>,
        ready: SocketAddr,
    ) -> Daemon {
        let config = dir.join("limiter.toml");
        std::fs::write(&config, text).unwrap();
        let stderr = dir.join("stderr.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"));
        cmd.args(args)
            .args(["run", "--config"])
            .arg(&config)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        if let Some((soft, hard)) = nofile {
            use std::os::unix::process::CommandExt;
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: setrlimit is async-signal-safe, and `lim` is copied into the closure.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd.spawn().expect("start limiter-daemon");
        let mut d = Daemon {
            child,
            config,
            stderr,
        };
        d.wait_listening(ready);
        d
    }

    pub fn wait_listening(&mut self, addr: SocketAddr) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("daemon exited with {status}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "daemon not listening on {addr}:\n{}",
                self.log()
            );
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn pid(&self) -> libc::pid_t {
        libc::pid_t::try_from(self.child.id()).unwrap()
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on the child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until the log holds `n` lines containing `needle`; returns the log.
    pub fn wait_log(&mut self, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.lines().filter(|l| l.contains(needle)).count() >= n {
                return log;
            }
            assert!(self.running(), "daemon exited; log:\n{log}");
            assert!(
                Instant::now() < deadline,
                "no {n}× {needle:?} in the log:\n{log}"
            );
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }

    pub fn rewrite(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }
}

/// One answer: status, fields (lower-case names), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One request on its own connection (`Connection: close`), read to the end.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    parse(&out)
}

fn parse(out: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `POST /v1/decide` for `ip` on `path`.
pub fn decide(api: SocketAddr, ip: &str, path: &str, auth: Option<&str>) -> Answer {
    let body = format!("{{\"ip\":\"{ip}\",\"method\":\"GET\",\"path\":\"{path}\"}}");
    let bearer = auth.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    request(api, "POST", "/v1/decide", &headers, &body)
}

/// The `/metrics` text.
pub fn metrics(addr: SocketAddr) -> String {
    request(addr, "GET", "/metrics", &[], "").body
}

/// Polls `f` until it returns `Some`, for at most 10 s.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

/// A keep-alive HTTP/1.1 upstream on a thread: answers every (bodyless) request `200 ok` and
/// writes down each request's target.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { continue };
                let seen = std::sync::Arc::clone(&s2);
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            buf.drain(..end + 4);
                            let target = head.split(' ').nth(1).unwrap_or("").to_string();
                            seen.lock().unwrap().push(target);
                            let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                            if conn.write_all(ok).is_err() {
                                return;
                            }
                        }
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        Upstream { addr, seen }
    }

    pub fn targets(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// `"burst";r=9;t=60, …` (the `RateLimit` field) as (name, r, t).
pub fn ratelimit_field(v: &str) -> Vec<(String, u64, u64)> {
    v.split(", ")
        .filter(|s| !s.is_empty())
        .map(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap().trim_matches('"').to_string();
            let mut r = 0;
            let mut t = 0;
            for p in parts {
                if let Some(x) = p.strip_prefix("r=") {
                    r = x.parse().unwrap();
                } else if let Some(x) = p.strip_prefix("t=") {
                    t = x.parse().unwrap();
                }
            }
            (name, r, t)
        })
        .collect()
}
