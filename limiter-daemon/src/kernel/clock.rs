//! The kernel's clock: `CLOCK_BOOTTIME`, which `bpf_ktime_get_boot_ns` reads. Deadlines written
//! into the maps are on this clock (it keeps counting through suspend, unlike CLOCK_MONOTONIC).

use std::time::Duration;

use super::KernelError;

/// Nanoseconds of `CLOCK_BOOTTIME` now.
pub fn boot_ns() -> Result<u64, KernelError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes to it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return Err(KernelError::Clock(std::io::Error::last_os_error()));
    }
    Ok((ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64)
}

/// A deadline `after` from now on the kernel clock (saturating: "forever" stays far away).
pub fn deadline_after(after: Duration) -> Result<u64, KernelError> {
    let add = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
    Ok(boot_ns()?.saturating_add(add))
}

/// Time left until `deadline_ns`, `None` once it has passed.
pub fn remaining(deadline_ns: u64, now_ns: u64) -> Option<Duration> {
    deadline_ns
        .checked_sub(now_ns)
        .filter(|left| *left > 0)
        .map(Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward_and_deadlines_are_ahead() {
        let a = boot_ns().unwrap();
        let d = deadline_after(Duration::from_secs(60)).unwrap();
        assert!(d >= a + 60_000_000_000);
        assert!(boot_ns().unwrap() >= a);
        assert_eq!(remaining(10, 4), Some(Duration::from_nanos(6)));
        assert_eq!(remaining(10, 10), None);
        assert_eq!(remaining(10, 11), None);
        assert_eq!(
            deadline_after(Duration::MAX).unwrap(),
            u64::MAX,
            "saturates"
        );
    }
}
