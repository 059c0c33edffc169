//! The proxy threads' scheduling policy: each proxy thread asks for `SCHED_BATCH` (no setting
//! since the removed `[http] batch_scheduling`): a proxy thread woken by a packet then does not preempt what is
//! running on that CPU, which on a single host is usually the upstream app or the clients, and
//! it finds more events ready when it does run, so it sleeps and wakes less often.
//!
//! Measured (docs/http.md): context switches per request about halved, with matching system
//! time saved, and the upstream preempted about a fifth as often. The cost is latency when a
//! CPU is saturated: a woken proxy thread waits for the running task's time slice instead of
//! preempting it; `cargo xtask bench proxy` measures it against nginx under both policies.

use std::io;

/// Switches the calling thread to `SCHED_BATCH` (no privilege needed from `SCHED_OTHER`).
pub fn use_batch_policy() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` with pid 0 acts on the calling thread only; `param` is a
    // valid, initialised struct that outlives the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
