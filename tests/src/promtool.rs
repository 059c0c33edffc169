//! Prometheus' `promtool` (Debian's prometheus package) for the tests that check what the
//! daemon exports and what `examples/prometheus/` ships.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `promtool` on `PATH`, if installed.
pub fn binary() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("promtool"))
            .find(|p| p.is_file())
    })
}

/// Runs `promtool check metrics` on `exposition` (the classic text format); panics with what
/// it said unless it exits 0 and says nothing.
pub fn check_metrics(bin: &Path, exposition: &str) {
    let mut check = Command::new(bin)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), exposition.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}\n{exposition}"
    );
}
