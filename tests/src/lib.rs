//! The one harness of the integration tests (`limiter-daemon/tests/<area>/`, `tests/tests/`):
//! free ports, the daemon binary run from outside ([`daemon`]), polling with a deadline, a
//! plain HTTP/1.1 client ([`client`]), TLS material and an HTTPS server ([`tls`]), a headless
//! browser, and the Valkey, nginx, Caddy and HAProxy launchers; deciding whether a privileged
//! test may skip (never under `CI=true`).

pub mod browser;
pub mod caddy;
pub mod client;
pub mod daemon;
pub mod frames;
pub mod h2;
pub mod haproxy;
pub mod isolated;
pub mod netns;
pub mod nginx;
pub mod overload;
pub mod process;
pub mod promtool;
pub mod testrun;
pub mod tls;
pub mod upstream;
pub mod valkey;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// True when running in CI, where a missing capability must fail a test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI")
        .map(|v| v == "true" || v == "1")
        .unwrap_or(false)
}

/// Returns `false` (and says why) when a test needing `what` should skip; panics under CI.
pub fn require(cond: bool, what: &str) -> bool {
    if cond {
        return true;
    }
    if in_ci() {
        panic!("CI=true and this test needs {what}, which is missing");
    }
    eprintln!("SKIP: this test needs {what}; run as root via `cargo xtask test` to include it");
    false
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Workspace root (the directory holding the top-level Cargo.toml).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The daemon binary the end-to-end tests run (a debug build, which `cargo xtask test` makes);
/// panics naming the build command when it is missing.
pub fn daemon_binary() -> PathBuf {
    let bin = workspace_root().join("target/debug/limiter-daemon");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p limiter-daemon --bins` (`cargo xtask test` does)",
        bin.display()
    );
    bin
}

/// The limiterctl binary (crate `limiter-ctl`) the end-to-end tests run, a debug build like
/// [`daemon_binary`]; panics naming the build command when it is missing.
pub fn ctl_binary() -> PathBuf {
    let bin = workspace_root().join("target/debug/limiterctl");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p limiter-ctl` (`cargo xtask test` does)",
        bin.display()
    );
    bin
}

/// A loopback address nothing listens on at the time of the call.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// The port of [`free_addr`].
pub fn free_port() -> u16 {
    free_addr().port()
}

/// How long [`eventually`] waits: generous, for a loaded 2-core CI machine.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// [`poll`] with the default [`DEADLINE`].
pub fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll(DEADLINE, what, f)
}

/// Polls `f` until it returns `Some`, or panics with `what` after `timeout`.
pub fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::yield_now();
        std::thread::park_timeout(Duration::from_millis(20));
    }
}
