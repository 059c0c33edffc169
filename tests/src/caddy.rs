//! A real Caddy (Debian's `/usr/bin/caddy`) for end-to-end tests and benchmarks: the shipped
//! `examples/caddy/Caddyfile` with its ports templated, run in the foreground with its data and
//! config directories in a temporary one, stopped (SIGTERM, then SIGKILL) when dropped.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const CADDY: &str = "/usr/bin/caddy";

/// True when Debian's caddy binary is installed.
pub fn available() -> bool {
    Path::new(CADDY).exists()
}

/// The shipped `examples/caddy/Caddyfile`, listening on `listen`'s port, the app at `app`, the
/// daemon's API at `daemon`.
pub fn forward_auth_example(listen: SocketAddr, app: SocketAddr, daemon: SocketAddr) -> String {
    let path = crate::workspace_root().join("examples/caddy/Caddyfile");
    let text = std::fs::read_to_string(&path).expect("read examples/caddy/Caddyfile");
    assert!(
        text.contains(":8080 {")
            && text.contains("127.0.0.1:3000")
            && text.contains("127.0.0.1:8081")
    );
    text.replace(":8080 {", &format!(":{} {{", listen.port()))
        .replace("127.0.0.1:3000", &app.to_string())
        .replace("127.0.0.1:8081", &daemon.to_string())
}

/// `caddyfile` (the shipped example) sending the daemon's API token `token` as the example's
/// comment says to (the caller's own `Authorization` in `X-Original-Authorization`).
pub fn with_token(caddyfile: &str, token: &str) -> String {
    let uri = "\t\t\turi /v1/auth\n";
    assert!(caddyfile.contains(uri));
    caddyfile.replace(
        uri,
        &format!(
            "{uri}\t\t\theader_up X-Original-Authorization {{http.request.header.Authorization}}\n\
             \t\t\theader_up Authorization \"Bearer {token}\"\n"
        ),
    )
}

/// Caddy proxying straight to `app` on `listen`, no auth: the benchmark's baseline.
pub fn plain_proxy(listen: SocketAddr, app: SocketAddr) -> String {
    format!(
        "{{\n\tadmin off\n\tauto_https off\n}}\n:{} {{\n\treverse_proxy {app}\n}}\n",
        listen.port()
    )
}

pub struct Caddy {
    child: Child,
    dir: PathBuf,
}

impl Caddy {
    /// Runs `caddyfile`; returns once `addr` accepts connections, panics with Caddy's log if
    /// it does not within 10 s.
    pub fn start(caddyfile: &str, addr: SocketAddr) -> Caddy {
        let dir = std::env::temp_dir().join(format!(
            "limiter-caddy-{}-{}",
            std::process::id(),
            addr.port()
        ));
        std::fs::create_dir_all(&dir).expect("create caddy scratch dir");
        let conf = dir.join("Caddyfile");
        std::fs::write(&conf, caddyfile).expect("write Caddyfile");
        let log = std::fs::File::create(dir.join("caddy.log")).expect("caddy log");
        let child = Command::new(CADDY)
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&conf)
            .env("HOME", &dir)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn caddy");
        let mut caddy = Caddy { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(addr).is_ok() {
                return caddy;
            }
            if let Ok(Some(status)) = caddy.child.try_wait() {
                panic!("caddy exited with {status}:\n{}", caddy.log());
            }
            if Instant::now() > deadline {
                panic!(
                    "caddy did not listen on {addr} within 10 s:\n{}",
                    caddy.log()
                );
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("caddy.log")).unwrap_or_default()
    }
}

impl Drop for Caddy {
    fn drop(&mut self) {
        crate::process::terminate(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
