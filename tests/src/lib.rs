//! Shared harness for the end-to-end tests in `tests/tests/`: locating built binaries, deciding
//! whether a privileged test may skip (never under `CI=true`), and polling with deadlines.

pub mod caddy;
pub mod frames;
pub mod haproxy;
pub mod http1;
pub mod isolated;
pub mod netns;
pub mod nginx;
pub mod process;
pub mod promtool;
pub mod testrun;
pub mod upstream;
pub mod valkey;

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
