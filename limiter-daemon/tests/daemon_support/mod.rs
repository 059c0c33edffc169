//! Shared by the tests that start the real `limiter-daemon` binary from outside: a free
//! loopback address, and the daemon run on a config file written for the test (kernel off,
//! admin API off so parallel daemons never share its default port, state in the test's
//! directory), stopped with SIGTERM when dropped.

#![allow(
    dead_code,
    reason = "each test file uses a different part of this module"
)]

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The running daemon; dropping it stops it (SIGTERM, then a kill after 5 s).
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        limiter_tests::process::terminate(&mut self.0, Duration::from_secs(5));
    }
}

pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// Starts the binary with the API on `api`, state under `dir`, and `metrics` as the whole
/// `[metrics]` section; every other limit at its default.
pub fn start(dir: &Path, api: SocketAddr, metrics: &str) -> Daemon {
    let config = dir.join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{}\"\n[http]\napi_listen = [\"{api}\"]\n\
             [admin]\nlisten = \"\"\n[metrics]\n{metrics}\n",
            dir.join("state").display()
        ),
    )
    .unwrap();
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
            .args(["run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start limiter-daemon"),
    )
}
