//! The descriptor limit (`RLIMIT_NOFILE`) the daemon runs with: at start its soft limit is
//! raised to the hard one, and the figure is logged.
//!
//! Why: every connection on every listener, every upstream and store connection, the state
//! files and the kernel's maps are descriptors. systemd's default soft limit is 1,024 (the
//! hard one 524,288), so a daemon that kept its soft limit could be starved by one client's
//! idle connections; the listeners' caps ([`crate::edge::listen::budget`]) are derived from
//! the limit in force once it is raised.

use std::io;

/// The limit before and after [`raise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nofile {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

fn get() -> io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct it is given, which outlives it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim)
}

/// `/proc/sys/fs/nr_open`: the most a soft limit may be set to when the hard one is
/// `RLIM_INFINITY` (setrlimit refuses more).
fn nr_open() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20)
}

/// Raises the soft limit to the hard one (or to `nr_open` when the hard one is infinite).
pub fn raise() -> io::Result<Nofile> {
    let lim = get()?;
    let target = if lim.rlim_max == libc::RLIM_INFINITY {
        nr_open()
    } else {
        lim.rlim_max
    };
    let mut found = Nofile {
        soft_before: lim.rlim_cur,
        soft: lim.rlim_cur,
        hard: lim.rlim_max,
    };
    if lim.rlim_cur >= target {
        return Ok(found);
    }
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the struct it is given, which outlives the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    found.soft = target;
    Ok(found)
}

/// [`raise`], logged: the figure operators compare with the listeners' caps.
pub fn raise_and_log() {
    match raise() {
        Ok(n) if n.soft != n.soft_before => tracing::info!(
            soft = n.soft,
            was = n.soft_before,
            hard = n.hard,
            "descriptor limit (RLIMIT_NOFILE) raised to the hard limit"
        ),
        Ok(n) => tracing::info!(
            soft = n.soft,
            hard = n.hard,
            "descriptor limit (RLIMIT_NOFILE) already at the hard limit"
        ),
        Err(err) => tracing::warn!(
            error = %err,
            "cannot raise the descriptor limit (RLIMIT_NOFILE); the listeners' caps follow the \
             limit in force"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raising leaves the soft limit at the hard one (or nr_open); raising again changes
    /// nothing.
    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let first = raise().unwrap();
        let lim = get().unwrap();
        assert_eq!(lim.rlim_cur, first.soft);
        assert!(first.soft >= first.soft_before);
        if lim.rlim_max != libc::RLIM_INFINITY {
            assert_eq!(lim.rlim_cur, lim.rlim_max);
        }
        let again = raise().unwrap();
        assert_eq!(again.soft, again.soft_before);
        assert_eq!(
            crate::edge::listen::budget::nofile_soft_limit().unwrap(),
            first.soft
        );
    }
}
