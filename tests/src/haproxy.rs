//! A real HAProxy (Debian's `/usr/sbin/haproxy`) for end-to-end tests: the shipped
//! `examples/haproxy/haproxy.cfg` with its ports templated, run in the foreground (`-db`),
//! stopped (SIGTERM, then SIGKILL) when dropped.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const HAPROXY: &str = "/usr/sbin/haproxy";

/// True when Debian's haproxy binary is installed.
pub fn available() -> bool {
    Path::new(HAPROXY).exists()
}

/// The shipped `examples/haproxy/haproxy.cfg`, its HTTP frontend on `listen`, its TCP
/// (`send-proxy-v2`) one on `tcp`, in front of the daemon's proxy at `daemon`, with the app
/// (the backup server when the daemon is down) at `app`.
pub fn example(listen: SocketAddr, tcp: SocketAddr, daemon: SocketAddr, app: SocketAddr) -> String {
    let path = crate::workspace_root().join("examples/haproxy/haproxy.cfg");
    let text = std::fs::read_to_string(&path).expect("read examples/haproxy/haproxy.cfg");
    assert!(
        text.contains("bind :80\n")
            && text.contains("bind :81\n")
            && text.contains("127.0.0.1:8080")
            && text.contains("127.0.0.1:3000")
    );
    text.replace("bind :80\n", &format!("bind {listen}\n"))
        .replace("bind :81\n", &format!("bind {tcp}\n"))
        .replace("127.0.0.1:8080", &daemon.to_string())
        .replace("127.0.0.1:3000", &app.to_string())
}

pub struct Haproxy {
    child: Child,
    dir: PathBuf,
}

impl Haproxy {
    /// Runs `cfg`; returns once `addr` accepts connections, panics with HAProxy's output if it
    /// does not within 10 s.
    pub fn start(cfg: &str, addr: SocketAddr) -> Haproxy {
        let dir = std::env::temp_dir().join(format!(
            "limiter-haproxy-{}-{}",
            std::process::id(),
            addr.port()
        ));
        std::fs::create_dir_all(&dir).expect("create haproxy scratch dir");
        let conf = dir.join("haproxy.cfg");
        std::fs::write(&conf, cfg).expect("write haproxy.cfg");
        let log = std::fs::File::create(dir.join("haproxy.log")).expect("haproxy log");
        let child = Command::new(HAPROXY)
            .arg("-db")
            .arg("-f")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn haproxy");
        let mut h = Haproxy { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(addr).is_ok() {
                return h;
            }
            if let Ok(Some(status)) = h.child.try_wait() {
                panic!("haproxy exited with {status}:\n{}", h.log());
            }
            if Instant::now() > deadline {
                panic!("haproxy did not listen on {addr} within 10 s:\n{}", h.log());
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        crate::process::terminate(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
