//! Shared by the admin API tests: the real daemon started from outside with the admin API, the
//! proxy (in front of a tiny upstream) and the decision API on free loopback ports, stderr
//! captured to a file; a plain HTTP/1.1 client; polling with a deadline.

#![allow(
    dead_code,
    reason = "each test file uses a different part of this module"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_secs(15);

pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// Polls `f` until it returns `Some`, or panics with `what` after [`DEADLINE`].
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::park_timeout(Duration::from_millis(25));
    }
}

/// An upstream answering `200 ok` to every request, keep-alive.
pub fn upstream() -> SocketAddr {
    limiter_tests::upstream::ok()
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// One HTTP/1.1 request with `Connection: close`; `None` when the connection fails.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Option<Resp> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(Resp {
        status,
        headers,
        body: body.to_string(),
    })
}

pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    try_http(addr, method, path, headers, body)
        .unwrap_or_else(|| panic!("{method} {path} on {addr}: no answer"))
}

/// The daemon binary, run on a config written for the test.
pub struct Daemon {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub admin: SocketAddr,
    pub proxy: SocketAddr,
    pub api: SocketAddr,
    /// `/metrics`, `/readyz` (`None`: off).
    pub metrics: Option<SocketAddr>,
    pub stderr: PathBuf,
    /// Prefixed to the command (e.g. `ip netns exec NAME`).
    pub wrapper: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Daemon {
    /// Writes the config (kernel off unless `kernel` replaces that section) and starts the
    /// daemon; returns once the admin API answers.
    pub fn start(dir: &Path, kernel: &str, extra: &str) -> Daemon {
        Daemon::start_with(dir, kernel, extra, Vec::new(), Vec::new())
    }

    /// As [`Daemon::start`], the command prefixed by `wrapper`, with `env` added. With a
    /// wrapper the daemon may be in another namespace: only the token file is waited for.
    pub fn start_with(
        dir: &Path,
        kernel: &str,
        extra: &str,
        wrapper: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Daemon {
        Daemon::start_store(dir, kernel, "", extra, false, wrapper, env)
    }

    /// The daemon in `pair`'s server namespace, attached with TC to the server's interface,
    /// protecting `port`, its pins under `pins`, with `extra` config (the real object, as the
    /// kernel tests load it).
    pub fn start_in_server_ns(
        dir: &Path,
        pair: &limiter_tests::netns::VethPair,
        pins: &Path,
        port: u16,
        extra: &str,
    ) -> Daemon {
        let kernel = format!(
            "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
             protected_ports = [{port}]\n",
            pair.server_if,
            pins.display()
        );
        // `nsenter --net`, not `ip netns exec`: the latter remounts /sys, hiding the bpffs pins.
        let wrapper = vec![
            "nsenter".to_string(),
            format!("--net={}", pair.server.path().display()),
        ];
        let env = vec![(
            "LIMITER_EBPF_OBJECT".to_string(),
            limiter_tests::testrun::object_path().display().to_string(),
        )];
        Daemon::start_with(dir, &kernel, extra, wrapper, env)
    }

    /// As [`Daemon::start_with`], with `store` lines added to `[store]`, and the metrics
    /// listener (`/metrics`, `/readyz`) on a free port when `metrics`.
    pub fn start_store(
        dir: &Path,
        kernel: &str,
        store: &str,
        extra: &str,
        metrics: bool,
        wrapper: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Daemon {
        let up = upstream();
        let (admin, proxy, api) = (free_addr(), free_addr(), free_addr());
        let metrics = metrics.then(free_addr);
        let metrics_listen = metrics.map_or(String::new(), |m| m.to_string());
        let config = dir.join("limiter.toml");
        let kernel = if kernel.is_empty() {
            "[kernel]\nmode = \"off\"\n"
        } else {
            kernel
        };
        std::fs::write(
            &config,
            format!(
                "{kernel}[store]\nstate_dir = \"{}\"\n{store}\n[http]\nproxy_listen = [\"{proxy}\"]\n\
                 api_listen = [\"{api}\"]\nupstream = \"http://{up}\"\n[metrics]\nlisten = \"{metrics_listen}\"\n\
                 [admin]\nlisten = \"{admin}\"\n[[routes]]\nprefix = \"/api/feeds\"\nkey_limit = true\n{extra}",
                dir.join("state").display()
            ),
        )
        .unwrap();
        let mut d = Daemon {
            child: None,
            dir: dir.to_path_buf(),
            config,
            admin,
            proxy,
            api,
            metrics,
            stderr: dir.join("stderr.log"),
            wrapper,
            env,
        };
        d.spawn();
        d
    }

    pub fn spawn(&mut self) {
        assert!(self.child.is_none());
        let bin = env!("CARGO_BIN_EXE_limiter-daemon");
        let mut cmd = match self.wrapper.split_first() {
            None => Command::new(bin),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
        };
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr)
            .unwrap();
        cmd.args(["run", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .env_remove("LIMITER_ADMIN_TOKEN")
            .stdout(err.try_clone().unwrap())
            .stderr(err);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("start limiter-daemon"));
        let token_file = self.dir.join("state").join("admin-token");
        let proxy = self.proxy;
        let check = self.wrapper.is_empty();
        eventually("the daemon to listen", || {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!(
                    "daemon exited ({status}): {}",
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                );
            }
            let up = !check
                || (TcpStream::connect(self.admin).is_ok() && TcpStream::connect(proxy).is_ok());
            (up && token_file.exists()).then_some(())
        });
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            limiter_tests::process::terminate(&mut c, Duration::from_secs(5));
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("state").join("admin-token"))
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// An admin request with the right token.
    pub fn admin(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> Resp {
        let token = format!("Bearer {}", self.token());
        let body = body.map(|b| b.to_string());
        let mut headers = vec![("authorization", token.as_str())];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        http(
            self.admin,
            method,
            path,
            &headers,
            body.as_deref().map(str::as_bytes),
        )
    }

    /// Whether the admin API, asked from inside `ns` (where a daemon started with a
    /// namespace wrapper listens), reports the kernel dataplane attached.
    pub fn kernel_attached_in(&self, ns: &limiter_tests::netns::Netns) -> bool {
        ns.run(|| {
            try_http(
                self.admin,
                "GET",
                "/admin/v1/kernel",
                &[("authorization", &format!("Bearer {}", self.token()))],
                None,
            )
            .is_some_and(|r| r.status == 200 && r.json()["attached"] == true)
        })
    }

    /// `POST /v1/decide` for a GET of `/` from `ip`: the decision's JSON.
    pub fn decide(&self, ip: &str) -> serde_json::Value {
        let body = serde_json::json!({ "ip": ip, "method": "GET", "path": "/" }).to_string();
        http(
            self.api,
            "POST",
            "/v1/decide",
            &[("content-type", "application/json")],
            Some(body.as_bytes()),
        )
        .json()
    }

    /// limiterctl with this daemon's URL and token.
    pub fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(limiter_tests::ctl_binary())
            .args([
                "--url",
                &format!("http://{}", self.admin),
                "--token",
                &self.token(),
            ])
            .args(args)
            .env_remove("LIMITER_ADMIN_URL")
            .env_remove("LIMITER_ADMIN_TOKEN")
            .output()
            .expect("run limiterctl");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
