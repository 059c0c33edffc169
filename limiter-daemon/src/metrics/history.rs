//! [`History`]: the last 15 minutes at 5 s resolution, for the operator page's charts
//! (`GET /admin/v1/history`), so a page opened mid-incident shows how the storm went.
//!
//! A sampler task ([`super::sampler`]) reads the counters that already exist (decisions by action and refusal
//! reason, kernel verdicts, held requests) every [`STEP_SECS`] and pushes the totals into a
//! ring of [`POINTS`] + 1 entries; a read turns consecutive totals into per-second rates.
//! Nothing is recorded per request: the cost is the ring (allocated once at its full size,
//! [`History::max_bytes`], 30 KB) and one read of each counter per step.

use std::collections::VecDeque;
use std::sync::Mutex;

use limiter_common::verdict;

use crate::model::Reason;

/// Seconds between samples.
pub const STEP_SECS: u64 = 5;
/// Points kept: 15 minutes at [`STEP_SECS`].
pub const POINTS: usize = 180;
/// Kernel verdicts sampled (`verdict::NAMES` order).
pub const VERDICTS: usize = verdict::COUNT as usize;

/// The counters' totals at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Wall time of the sample (ms since the epoch).
    pub at_ms: u64,
    pub allow: u64,
    pub delay: u64,
    /// Refusals by reason, in [`Reason::ALL`] order.
    pub rejects: [u64; Reason::ALL.len()],
    /// Kernel packets by verdict; zeros when the kernel is not attached.
    pub verdicts: [u64; VERDICTS],
    /// Requests held right now (a gauge, not a total).
    pub held: u64,
}

/// One chart point: rates over the step ending at `at_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub at_ms: u64,
    pub allow: f64,
    pub delay: f64,
    pub reject: f64,
    pub rejects: [f64; Reason::ALL.len()],
    pub verdicts: [f64; VERDICTS],
    pub held: u64,
}

/// The ring of samples.
#[derive(Debug)]
pub struct History {
    ring: Mutex<VecDeque<Totals>>,
}

impl Default for History {
    /// The whole ring up front: a deque left to grow would double past it (to 256 samples).
    fn default() -> Self {
        History {
            ring: Mutex::new(VecDeque::with_capacity(POINTS + 1)),
        }
    }
}

fn rate(now: u64, before: u64, secs: f64) -> f64 {
    // A counter that went back (a restart of its source) reads as no traffic, not negative.
    now.saturating_sub(before) as f64 / secs
}

impl History {
    /// Adds a sample, forgetting the oldest past [`POINTS`] + 1 (one more than the points, the
    /// first point's base).
    pub fn record(&self, t: Totals) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == POINTS + 1 {
            ring.pop_front();
        }
        ring.push_back(t);
    }

    /// Samples held now (at most [`POINTS`] + 1).
    pub fn len(&self) -> usize {
        self.ring.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the ring holds at most: its bound, whatever the traffic.
    pub const fn max_bytes() -> usize {
        (POINTS + 1) * std::mem::size_of::<Totals>()
    }

    /// The points, oldest first: at most [`POINTS`].
    pub fn read(&self) -> Vec<Point> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter()
            .zip(ring.iter().skip(1))
            .map(|(a, b)| {
                let secs = (b.at_ms.saturating_sub(a.at_ms) as f64 / 1000.0).max(0.001);
                let mut rejects = [0.0; Reason::ALL.len()];
                for (i, r) in rejects.iter_mut().enumerate() {
                    *r = rate(b.rejects[i], a.rejects[i], secs);
                }
                let mut verdicts = [0.0; VERDICTS];
                for (i, v) in verdicts.iter_mut().enumerate() {
                    *v = rate(b.verdicts[i], a.verdicts[i], secs);
                }
                Point {
                    at_ms: b.at_ms,
                    allow: rate(b.allow, a.allow, secs),
                    delay: rate(b.delay, a.delay, secs),
                    reject: rejects.iter().sum(),
                    rejects,
                    verdicts,
                    held: b.held,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, allow: u64, burst: u64) -> Totals {
        let mut t = Totals {
            at_ms: secs * 1000,
            allow,
            ..Totals::default()
        };
        t.rejects[Reason::Burst.index()] = burst;
        t
    }

    #[test]
    fn points_are_rates_between_samples() {
        let h = History::default();
        assert!(h.read().is_empty());
        h.record(at(0, 0, 0));
        h.record(at(5, 50, 10));
        h.record(at(10, 50, 10));
        let p = h.read();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].at_ms, p[0].allow, p[0].reject), (5000, 10.0, 2.0));
        assert_eq!(p[0].rejects[Reason::Burst.index()], 2.0);
        assert_eq!((p[1].allow, p[1].reject), (0.0, 0.0));
    }

    #[test]
    fn the_ring_keeps_fifteen_minutes_and_no_more() {
        let h = History::default();
        for i in 0..10 * POINTS as u64 {
            h.record(at(i * STEP_SECS, i, 0));
        }
        assert_eq!(h.len(), POINTS + 1);
        let p = h.read();
        assert_eq!(p.len(), POINTS);
        let span = p.last().unwrap().at_ms - p[0].at_ms;
        assert_eq!(span, (POINTS as u64 - 1) * STEP_SECS * 1000);
        assert!(History::max_bytes() < 64 * 1024, "{}", History::max_bytes());
    }
}
