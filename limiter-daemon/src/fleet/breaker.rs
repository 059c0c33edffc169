//! The circuit breaker in front of a remote store: while the store fails, one decision per
//! probe interval tries it (and pays at most one deadline); every other decision is answered
//! locally at once. The first success closes it again, a decision's or the connector's own
//! probe's (`super::connector`), which runs whether or not any decision arrives.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where one decision's store work goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The store is healthy: ask it.
    Remote,
    /// The store is failing, and this decision is the interval's probe: ask it.
    Probe,
    /// The store is failing: answer locally without asking.
    Local,
}

pub struct Breaker {
    probe_ms: u64,
    open: AtomicBool,
    next_probe_ms: AtomicU64,
}

impl Breaker {
    /// Closed (healthy) when `healthy`, else open with a probe due at once.
    pub fn new(probe_ms: u64, healthy: bool) -> Self {
        Breaker {
            probe_ms: probe_ms.max(1),
            open: AtomicBool::new(!healthy),
            next_probe_ms: AtomicU64::new(0),
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    pub fn probe_ms(&self) -> u64 {
        self.probe_ms
    }

    /// The path for a decision at `now_ms`. Of all the decisions that see a probe due, exactly
    /// one wins it.
    pub fn path(&self, now_ms: u64) -> Path {
        if !self.is_open() {
            return Path::Remote;
        }
        let due = self.next_probe_ms.load(Ordering::Acquire);
        if now_ms >= due
            && self
                .next_probe_ms
                .compare_exchange(
                    due,
                    now_ms.saturating_add(self.probe_ms),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Path::Probe;
        }
        Path::Local
    }

    /// The store answered. `true` when that closed the breaker (the store is back).
    pub fn success(&self) -> bool {
        self.open.swap(false, Ordering::AcqRel)
    }

    /// The store failed at `now_ms`. `true` when that opened the breaker.
    pub fn failure(&self, now_ms: u64) -> bool {
        self.next_probe_ms
            .store(now_ms.saturating_add(self.probe_ms), Ordering::Release);
        !self.open.swap(true, Ordering::AcqRel)
    }

    /// Makes the next decision a probe (a reconnect has just succeeded).
    pub fn probe_now(&self) {
        self.next_probe_ms.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_store_is_probed_once_per_interval() {
        let b = Breaker::new(1000, true);
        assert_eq!(b.path(0), Path::Remote);
        assert!(b.failure(10));
        assert!(!b.failure(20), "already open");
        assert_eq!(b.path(500), Path::Local);
        assert_eq!(b.path(1020), Path::Probe);
        assert_eq!(b.path(1021), Path::Local, "one probe per interval");
        assert_eq!(b.path(2019), Path::Local);
        assert_eq!(b.path(2020), Path::Probe);
        assert!(b.success());
        assert!(!b.success());
        assert_eq!(b.path(2021), Path::Remote);
    }

    #[test]
    fn starting_unhealthy_probes_at_once_and_probe_now_brings_the_next_forward() {
        let b = Breaker::new(1000, false);
        assert_eq!(b.path(5), Path::Probe);
        assert_eq!(b.path(6), Path::Local);
        b.probe_now();
        assert_eq!(b.path(7), Path::Probe);
    }
}
