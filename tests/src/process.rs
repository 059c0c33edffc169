//! Stopping the child processes a test started (nginx, the daemon binary): SIGTERM first so
//! they shut down as in production, SIGKILL only when they outlive a grace period.

use std::process::Child;
use std::time::{Duration, Instant};

/// Sends SIGTERM to `child`, waits up to `grace` for it to exit, then kills and reaps it.
pub fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on a child this test spawned and has not reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::park_timeout(Duration::from_millis(20));
    }
    let _killed = child.kill();
    let _reaped = child.wait();
}
