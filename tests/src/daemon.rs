//! The real `limiter-daemon` binary run from outside, on a config file written for the test,
//! its output kept in a file the test reads; stopped with SIGTERM (then a kill) when dropped.
//!
//! Two ways to start it: [`Daemon::start`] writes the usual config (kernel off unless given,
//! the proxy in front of a `200 ok` upstream, the decision API, the admin API, all on free
//! loopback ports) and waits for the admin token; [`Daemon::run`] takes the whole config text
//! and waits for one address to accept connections.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::client::{http, try_http, Resp};
use crate::{eventually, free_addr};

/// The daemon binary of this workspace (`target/debug/limiter-daemon`).
fn binary() -> PathBuf {
    crate::daemon_binary()
}

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub config: PathBuf,
    /// The daemon's stdout and stderr.
    pub stderr: PathBuf,
    /// The listeners of [`Daemon::start`]'s config; for [`Daemon::run`] all three are the
    /// address waited for.
    pub admin: SocketAddr,
    pub proxy: SocketAddr,
    pub api: SocketAddr,
    /// `/metrics`, `/readyz` (`None`: off).
    pub metrics: Option<SocketAddr>,
    /// Prefixed to the command (e.g. `nsenter --net=…`).
    pub wrapper: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Before `run --config FILE`.
    pub args: Vec<String>,
    /// `RLIMIT_NOFILE` (soft, hard) set before the binary runs, as `prlimit` would.
    pub nofile: Option<(u64, u64)>,
    /// Wait for the admin token file (a [`Daemon::start`] config), not only `ready`.
    token_file: bool,
    ready: Vec<SocketAddr>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
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
    /// The daemon on `text`, not started yet (set [`Daemon::wrapper`], [`Daemon::env`], …,
    /// then [`Daemon::spawn`]); `ready` is the address waited for.
    pub fn prepare(dir: &Path, text: &str, ready: SocketAddr) -> Daemon {
        let d = Daemon::new(dir, ready);
        std::fs::write(&d.config, text).unwrap();
        std::fs::write(&d.stderr, "").unwrap();
        d
    }

    /// The decision API on `api`, `metrics` as the whole `[metrics]` section, the admin API
    /// off (parallel daemons never share its default port); returns once the API accepts.
    pub fn with_api(dir: &Path, api: SocketAddr, metrics: &str) -> Daemon {
        let rest = format!(
            "[http]\napi_listen = [\"{api}\"]\n[admin]\nlisten = \"\"\n[metrics]\n{metrics}\n"
        );
        Daemon::run(dir, &config_text(dir, &rest), &[], api)
    }

    fn new(dir: &Path, addr: SocketAddr) -> Daemon {
        Daemon {
            child: None,
            dir: dir.to_path_buf(),
            config: dir.join("limiter.toml"),
            stderr: dir.join("stderr.log"),
            admin: addr,
            proxy: addr,
            api: addr,
            metrics: None,
            wrapper: Vec::new(),
            env: Vec::new(),
            args: Vec::new(),
            nofile: None,
            token_file: false,
            ready: vec![addr],
        }
    }

    /// Runs the binary with `args` before `run --config FILE`, `text` as the file; returns
    /// once `ready` accepts connections.
    pub fn run(dir: &Path, text: &str, args: &[&str], ready: SocketAddr) -> Daemon {
        Daemon::run_with_env(dir, text, args, &[], ready)
    }

    /// [`Daemon::run`] with `env` added to the daemon's environment.
    pub fn run_with_env(
        dir: &Path,
        text: &str,
        args: &[&str],
        env: &[(&str, &Path)],
        ready: SocketAddr,
    ) -> Daemon {
        let mut d = Daemon::new(dir, ready);
        d.args = args.iter().map(|a| a.to_string()).collect();
        d.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.display().to_string()))
            .collect();
        d.launch(text);
        d
    }

    /// [`Daemon::run`] under a descriptor limit of `soft`:`hard`.
    pub fn run_with_nofile(
        dir: &Path,
        text: &str,
        (soft, hard): (u64, u64),
        ready: SocketAddr,
    ) -> Daemon {
        let mut d = Daemon::new(dir, ready);
        d.nofile = Some((soft, hard));
        d.launch(text);
        d
    }

    /// Writes the usual config (kernel off unless `kernel` replaces that section, `extra`
    /// appended) and starts the daemon; returns once the admin API answers.
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
        pair: &crate::netns::VethPair,
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
            crate::testrun::object_path().display().to_string(),
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
        let up = crate::upstream::ok();
        let mut d = Daemon::new(dir, free_addr());
        (d.proxy, d.api) = (free_addr(), free_addr());
        d.metrics = metrics.then(free_addr);
        let metrics_listen = d.metrics.map_or(String::new(), |m| m.to_string());
        let kernel = if kernel.is_empty() {
            "[kernel]\nmode = \"off\"\n"
        } else {
            kernel
        };
        let text = format!(
            "{kernel}[store]\nstate_dir = \"{}\"\n{store}\n[http]\nproxy_listen = [\"{}\"]\n\
             api_listen = [\"{}\"]\nupstream = \"http://{up}\"\n[metrics]\nlisten = \"{metrics_listen}\"\n\
             [admin]\nlisten = \"{}\"\n[[routes]]\nprefix = \"/api/feeds\"\nkey_limit = true\n{extra}",
            dir.join("state").display(),
            d.proxy,
            d.api,
            d.admin,
        );
        // With a wrapper the listeners may be in another namespace: the token file says the
        // daemon is up.
        d.ready = if wrapper.is_empty() {
            vec![d.admin, d.proxy]
        } else {
            Vec::new()
        };
        d.token_file = true;
        d.wrapper = wrapper;
        d.env = env;
        d.env.push(("RUST_LOG".to_string(), "info".to_string()));
        d.launch(&text);
        d
    }

    /// Writes the config, empties the output file and spawns.
    fn launch(&mut self, text: &str) {
        self.rewrite(text);
        std::fs::write(&self.stderr, "").unwrap();
        self.spawn();
    }

    /// Starts the binary on the config file as it is now and waits until it is ready.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none());
        let bin = binary();
        let mut cmd = match self.wrapper.split_first() {
            None => Command::new(&bin),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&bin);
                c
            }
        };
        let out = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.stderr)
            .unwrap();
        cmd.args(&self.args)
            .args(["run", "--config"])
            .arg(&self.config)
            .env_remove("LIMITER_ADMIN_TOKEN")
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some((soft, hard)) = self.nofile {
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
        self.child = Some(cmd.spawn().expect("start limiter-daemon"));
        let token_file = self.dir.join("state").join("admin-token");
        let ready = self.ready.clone();
        eventually("the daemon to listen", || {
            if let Some(status) = self.try_wait() {
                panic!("daemon exited ({status}): {}", self.logs());
            }
            let up = ready.iter().all(|a| TcpStream::connect(a).is_ok());
            (up && (!self.token_file || token_file.exists())).then_some(())
        });
    }

    /// Waits until `addr` accepts connections (the daemon still running).
    pub fn wait_listening(&mut self, addr: SocketAddr) {
        eventually(&format!("the daemon to listen on {addr}"), || {
            if let Some(status) = self.try_wait() {
                panic!("daemon exited with {status}:\n{}", self.logs());
            }
            TcpStream::connect(addr).is_ok().then_some(())
        });
    }

    /// SIGTERM, then a kill after 5 s.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            crate::process::terminate(&mut c, Duration::from_secs(5));
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The exit status once the daemon has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().unwrap()
    }

    pub fn running(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }

    pub fn pid(&self) -> libc::pid_t {
        libc::pid_t::try_from(self.child.as_ref().expect("running").id()).unwrap()
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on the child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// What the daemon wrote so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until the log holds `n` lines containing `needle`; returns the log.
    pub fn wait_log(&mut self, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.logs();
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

    /// Replaces the config file (for a reload).
    pub fn rewrite(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("state").join("admin-token"))
            .unwrap()
            .trim()
            .to_string()
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
    pub fn kernel_attached_in(&self, ns: &crate::netns::Netns) -> bool {
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
        crate::client::decide(self.api, ip, "/", None).json()
    }

    /// limiterctl with this daemon's URL and token.
    pub fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(crate::ctl_binary())
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
