//! Window arithmetic shared by every store: UTC-aligned fixed windows (hour, day) and the burst
//! window, a ring of 5-second slots.
//!
//! Burst: "at most N admitted in any 60 s span". The ring sums every slot that overlaps the
//! exact span `(now − 60 s, now]` (13 slots of 5 s), so the sum is never below the exact count;
//! admitting only while the sum is below N therefore never admits more than N in any 60 s span
//! (the property test in `tests/engine_properties.rs` checks this). The price is up to 5 s of
//! extra memory: capacity frees at slot boundaries, 60–65 s after use. 13 × u16 per identity
//! keeps a million identities in memory.
//!
//! Size: [`Fixed`] keeps the low 16 bits of its window's index (6 bytes, not 8) and
//! [`BurstRing`] is packed to 30 bytes, so one identity's windows take 52 bytes. A UTC day
//! index fits 16 bits until 2149; an hour index wraps every 65,536 hours (7.5 years), and an
//! identity is swept out within a day of its last request (and a snapshot older than two days
//! is not loaded), so a wrapped index is never read.

pub use crate::model::window::{BURST_SPAN_MS, DAY_MS, HOUR_MS};

pub const SECOND_MS: u64 = 1_000;
pub const BURST_SLOT_MS: u64 = 5_000;
/// Slots overlapping a 60 s span: 60 / 5 + 1.
pub const BURST_SLOTS: usize = (BURST_SPAN_MS / BURST_SLOT_MS) as usize + 1;

/// Number since the epoch of the fixed window of length `len_ms` containing `now_ms` (Unix time
/// has no leap seconds, so hours align to UTC and days roll over at 00:00 UTC).
pub fn index(now_ms: u64, len_ms: u64) -> u32 {
    u32::try_from(div(now_ms, len_ms)).unwrap_or(u32::MAX)
}

/// Milliseconds until the fixed window of length `len_ms` containing `now_ms` rolls over.
pub fn until_rollover(now_ms: u64, len_ms: u64) -> u64 {
    len_ms - (now_ms - div(now_ms, len_ms) * len_ms)
}

/// `now_ms / len_ms`, with the two spans every decision uses as constants: a division by a
/// constant compiles to a multiply, and a decision otherwise pays several 64-bit divisions.
#[inline]
fn div(now_ms: u64, len_ms: u64) -> u64 {
    match len_ms {
        HOUR_MS => now_ms / HOUR_MS,
        DAY_MS => now_ms / DAY_MS,
        _ => now_ms / len_ms,
    }
}

fn burst_slot(now_ms: u64) -> u32 {
    u32::try_from(now_ms / BURST_SLOT_MS).unwrap_or(u32::MAX)
}

/// The index as a [`Fixed`] keeps it (see the module doc on why 16 bits suffice).
fn narrow(index: u32) -> u16 {
    index as u16
}

/// A counter for one fixed window (the current hour or day). Packed (6 bytes): fields are
/// read and written by value only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, packed(2))]
pub struct Fixed {
    /// Low 16 bits of the window's index.
    pub index: u16,
    pub used: u32,
}

impl Fixed {
    pub fn used_at(&self, index: u32) -> u32 {
        if self.index == narrow(index) {
            self.used
        } else {
            0
        }
    }
    pub fn add(&mut self, index: u32, n: u32) {
        let index = narrow(index);
        if self.index != index {
            // A clock stepping backwards must not resurrect an old window's count as current.
            self.index = index;
            self.used = 0;
        }
        self.used = self.used.saturating_add(n);
    }
    pub fn is_stale(&self, index: u32) -> bool {
        self.used_at(index) == 0
    }
}

/// Admissions per 5 s slot over the last 13 slots. Packed (30 bytes, no tail padding).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, packed(2))]
pub struct BurstRing {
    /// The newest slot written.
    pub latest: u32,
    pub counts: [u16; BURST_SLOTS],
}

impl BurstRing {
    const SPAN: u32 = BURST_SLOTS as u32 - 1;

    /// The slots still in the ring that overlap `(now − 60 s, now]` (empty when none do).
    fn live_slots(&self, now_ms: u64) -> std::ops::RangeInclusive<u32> {
        let slot = burst_slot(now_ms);
        let lo = slot
            .saturating_sub(Self::SPAN)
            .max(self.latest.saturating_sub(Self::SPAN));
        lo..=slot.min(self.latest)
    }

    fn count(&self, slot: u32) -> u16 {
        self.counts[slot as usize % BURST_SLOTS]
    }

    /// Admissions counted in slots overlapping `(now − 60 s, now]`.
    pub fn used(&self, now_ms: u64) -> u32 {
        self.live_slots(now_ms)
            .map(|s| u32::from(self.count(s)))
            .sum()
    }

    /// Counts one admission at `now_ms`.
    pub fn admit(&mut self, now_ms: u64) {
        self.add(now_ms, 1);
    }

    /// Counts `n` admissions at `now_ms` (a slot holds at most `u16::MAX`).
    pub fn add(&mut self, now_ms: u64, n: u32) {
        let slot = burst_slot(now_ms);
        if slot > self.latest {
            let gap = slot - self.latest;
            if gap as usize >= BURST_SLOTS {
                self.counts = [0; BURST_SLOTS];
            } else {
                for s in self.latest + 1..=slot {
                    self.counts[s as usize % BURST_SLOTS] = 0;
                }
            }
            self.latest = slot;
        }
        // A clock stepping backwards counts into the newest slot: never lost, never early.
        let at = slot.min(self.latest) as usize % BURST_SLOTS;
        let n = u16::try_from(n).unwrap_or(u16::MAX);
        self.counts[at] = self.counts[at].saturating_add(n);
    }

    /// Milliseconds until the oldest counted slot leaves the span (capacity frees), or the
    /// span length when nothing is counted.
    pub fn reset_ms(&self, now_ms: u64) -> u64 {
        match self.live_slots(now_ms).find(|&s| self.count(s) > 0) {
            Some(oldest) => {
                let frees_at = (u64::from(oldest) + BURST_SLOTS as u64) * BURST_SLOT_MS;
                frees_at.saturating_sub(now_ms).max(1)
            }
            None => BURST_SPAN_MS,
        }
    }

    pub fn is_stale(&self, now_ms: u64) -> bool {
        self.used(now_ms) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_forgets_after_65_seconds_at_most() {
        let mut r = BurstRing::default();
        let t0 = 1_000_000_000_000;
        r.admit(t0);
        assert_eq!(r.used(t0), 1);
        assert_eq!(r.used(t0 + 59_999), 1);
        assert_eq!(r.used(t0 + 65_000), 0);
    }

    #[test]
    fn reset_is_when_the_oldest_counted_slot_leaves() {
        let mut r = BurstRing::default();
        let slot0 = 200_000_000_000; // a slot boundary
        assert_eq!(r.reset_ms(slot0), BURST_SPAN_MS, "nothing counted");
        r.admit(slot0 + 2_700);
        r.admit(slot0 + 31_000);
        let now = slot0 + 40_000;
        let reset = r.reset_ms(now);
        assert_eq!(reset, 65_000 - 40_000);
        // Just before, the oldest admission still counts; at the reset it no longer does.
        assert_eq!(r.used(now + reset - 1), 2);
        assert_eq!(r.used(now + reset), 1);
        assert_eq!(
            r.reset_ms(now + reset),
            slot0 + 30_000 + 65_000 - (now + reset)
        );
    }

    #[test]
    fn rollover_is_exact() {
        let h = 1_000 * HOUR_MS;
        assert_eq!(index(h - 1, HOUR_MS) + 1, index(h, HOUR_MS));
        assert_eq!(until_rollover(h - 1, HOUR_MS), 1);
        assert_eq!(until_rollover(h, HOUR_MS), HOUR_MS);
    }
}
