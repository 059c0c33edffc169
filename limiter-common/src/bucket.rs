//! The connection-ceiling token bucket, shared so the kernel's arithmetic has host unit tests.

/// One token is `TOKEN_SCALE` units, so a refill is simply `elapsed_ns × per_sec` units.
pub const TOKEN_SCALE: u64 = 1_000_000_000;
/// Elapsed time is clamped to an hour; with `per_sec ≤ MAX_PER_SEC` the product fits a `u64`.
pub const MAX_REFILL_NS: u64 = 3_600 * 1_000_000_000;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Tokens × [`TOKEN_SCALE`].
    pub tokens: u64,
    /// `CLOCK_BOOTTIME` ns of the last refill.
    pub last_ns: u64,
}
const _: () = assert!(core::mem::size_of::<Bucket>() == 16);

impl Bucket {
    /// A bucket for a source seen for the first time, after taking its first token.
    #[inline(always)]
    pub fn first(now_ns: u64, burst: u32) -> Self {
        Self {
            tokens: (burst as u64).saturating_sub(1) * TOKEN_SCALE,
            last_ns: now_ns,
        }
    }

    /// Refills for the time since the last call, then takes one token if there is one.
    /// Returns whether the connection may pass. A clock that goes backwards refills nothing.
    #[inline(always)]
    pub fn take(&mut self, now_ns: u64, burst: u32, per_sec: u32) -> bool {
        let cap = burst as u64 * TOKEN_SCALE;
        let mut elapsed = now_ns.saturating_sub(self.last_ns);
        if elapsed > MAX_REFILL_NS {
            elapsed = MAX_REFILL_NS;
        }
        let mut tokens = self.tokens + elapsed * per_sec as u64;
        if tokens > cap {
            tokens = cap;
        }
        self.last_ns = now_ns;
        if tokens >= TOKEN_SCALE {
            self.tokens = tokens - TOKEN_SCALE;
            true
        } else {
            self.tokens = tokens;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let mut b = Bucket::first(0, 3);
        assert!(b.take(0, 3, 1));
        assert!(b.take(0, 3, 1));
        assert!(
            !b.take(0, 3, 1),
            "fourth SYN within the same instant is over a burst of 3"
        );
        assert!(
            !b.take(500_000_000, 3, 1),
            "half a second refills half a token"
        );
        assert!(b.take(1_000_000_000, 3, 1));
        assert!(!b.take(1_000_000_000, 3, 1));
    }

    #[test]
    fn refill_caps_at_burst_and_survives_huge_gaps() {
        let mut b = Bucket::first(0, 2);
        assert!(b.take(u64::MAX, 2, crate::config::MAX_PER_SEC));
        assert!(b.take(u64::MAX, 2, crate::config::MAX_PER_SEC));
        assert!(!b.take(u64::MAX, 2, crate::config::MAX_PER_SEC));
    }

    #[test]
    fn clock_going_backwards_refills_nothing() {
        let mut b = Bucket::first(10, 1);
        assert!(!b.take(5, 1, 1000));
    }
}
