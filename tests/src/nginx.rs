//! A real nginx (Debian's `/usr/sbin/nginx`) for end-to-end tests and benchmarks: started with a
//! generated config in its own temporary directory, on a loopback port, in the foreground
//! (`-g 'daemon off;'`), and stopped (SIGTERM, then SIGKILL) when the guard is dropped.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const NGINX: &str = "/usr/sbin/nginx";

/// True when Debian's nginx binary is installed.
pub fn available() -> bool {
    Path::new(NGINX).exists()
}

/// A fresh directory under the system temp dir, removed by [`Nginx`]'s drop.
fn scratch_dir() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "limiter-nginx-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create nginx scratch dir");
    dir
}

pub struct Nginx {
    child: Child,
    pub dir: PathBuf,
    /// The address it listens on (the first `listen` port given to [`Nginx::start`]).
    pub addr: SocketAddr,
}

impl Nginx {
    /// Starts nginx with `workers` worker processes and `http_body` inside `http { }`; returns
    /// once `addr` accepts connections. Panics (with nginx's error log) if it does not start.
    pub fn start(http_body: &str, addr: SocketAddr, workers: u32) -> Nginx {
        let dir = scratch_dir();
        let d = dir.display();
        let user = if crate::is_root() { "user root;\n" } else { "" };
        let conf = format!(
            "{user}worker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             {http_body}\n}}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nginx");
        let mut nginx = Nginx { child, dir, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(addr).is_ok() {
                return nginx;
            }
            if let Ok(Some(status)) = nginx.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = nginx.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("nginx exited with {status}: {err}\n{}", nginx.error_log());
            }
            if Instant::now() > deadline {
                panic!(
                    "nginx did not listen on {addr} within 10 s:\n{}",
                    nginx.error_log()
                );
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }

    /// The master process id (its workers are its children).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its workers; SIGKILL only if it does not within 5 s.
        crate::process::terminate(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The shipped `examples/nginx/limiter-auth.conf`, pointed at the given addresses: nginx
/// listens on `listen`, the app is `app`, the daemon's API is `daemon`.
pub fn auth_example(listen: SocketAddr, app: SocketAddr, daemon: SocketAddr) -> String {
    let path = crate::workspace_root().join("examples/nginx/limiter-auth.conf");
    let text = std::fs::read_to_string(&path).expect("read examples/nginx/limiter-auth.conf");
    assert!(
        text.contains("listen 80;")
            && text.contains("127.0.0.1:3000")
            && text.contains("127.0.0.1:8081")
    );
    text.replace("listen 80;", &format!("listen {listen};"))
        .replace("127.0.0.1:3000", &app.to_string())
        .replace("127.0.0.1:8081", &daemon.to_string())
}

/// The shipped `examples/nginx/limiter-proxy.conf`, pointed at the given addresses: nginx
/// listens on `listen` in front of the daemon's reverse proxy on `daemon_proxy`.
pub fn proxy_example(listen: SocketAddr, daemon_proxy: SocketAddr) -> String {
    let path = crate::workspace_root().join("examples/nginx/limiter-proxy.conf");
    let text = std::fs::read_to_string(&path).expect("read examples/nginx/limiter-proxy.conf");
    assert!(text.contains("listen 80;") && text.contains("127.0.0.1:8080"));
    text.replace("listen 80;", &format!("listen {listen};"))
        .replace("127.0.0.1:8080", &daemon_proxy.to_string())
}

/// The token placeholder in the shipped example.
pub const EXAMPLE_TOKEN: &str = "CHANGE-ME-api-token";

/// [`auth_example`] with the daemon's API token `token` in place of the placeholder.
pub fn auth_example_with_token(
    listen: SocketAddr,
    app: SocketAddr,
    daemon: SocketAddr,
    token: &str,
) -> String {
    let text = auth_example(listen, app, daemon);
    assert!(text.contains(EXAMPLE_TOKEN));
    text.replace(EXAMPLE_TOKEN, token)
}
