//! Bounds on requests held for a scan delay.
//!
//! A delayed request costs a task and a timer (never a thread), but a scanner could still open
//! thousands of them. [`HoldGate`] admits a hold only while the total and the caller's own count
//! are under their bounds ([`super::slots`]); a [`HoldPermit`] gives the slot back when dropped (the request was
//! forwarded, failed, or its client went away). Refusals are counted for metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::slots::Slots;

#[derive(Debug)]
pub struct HoldGate {
    slots: Slots,
    refused: AtomicU64,
    admitted: AtomicU64,
}

/// One held request's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct HoldPermit {
    gate: Arc<HoldGate>,
    identity: String,
}

impl HoldGate {
    pub fn new(max_total: usize, max_per_identity: usize) -> Arc<Self> {
        Arc::new(HoldGate {
            slots: Slots::new(max_total, max_per_identity),
            refused: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
        })
    }

    /// New bounds (a reload). Requests already held keep their slots; lower bounds only refuse
    /// new holds until enough of them end.
    pub fn set_bounds(&self, max_total: usize, max_per_identity: usize) {
        self.slots.set_bounds(max_total, max_per_identity);
    }

    /// A slot for `identity`, or `None` (counted) when either bound is reached.
    pub fn try_hold(self: &Arc<Self>, identity: &str) -> Option<HoldPermit> {
        if !self.slots.try_take(identity) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.admitted.fetch_add(1, Ordering::Relaxed);
        Some(HoldPermit {
            gate: Arc::clone(self),
            identity: identity.to_owned(),
        })
    }

    /// Requests held right now.
    pub fn held(&self) -> usize {
        self.slots.taken()
    }

    /// Requests held right now for `identity`.
    pub fn held_for(&self, identity: &str) -> usize {
        self.slots.taken_by(identity)
    }

    /// Delayed requests refused with 503 because a bound was reached (since start).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Delayed requests admitted to be held (since start).
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Distinct identities with a held request (bounded by [`HoldGate::held`]).
    pub fn identities(&self) -> usize {
        self.slots.identities()
    }
}

impl Drop for HoldPermit {
    fn drop(&mut self) {
        self.gate.slots.give_back(&self.identity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_identity_bound_refuses_and_counts() {
        let gate = HoldGate::new(10, 2);
        let a1 = gate.try_hold("a").unwrap();
        let _a2 = gate.try_hold("a").unwrap();
        assert!(gate.try_hold("a").is_none());
        assert_eq!(gate.refused(), 1);
        let _b = gate.try_hold("b").expect("another caller is not affected");
        assert_eq!(gate.held(), 3);
        drop(a1);
        assert_eq!(gate.held_for("a"), 1);
        assert!(gate.try_hold("a").is_some());
    }

    #[test]
    fn total_bound_refuses_everyone() {
        let gate = HoldGate::new(2, 2);
        let _x = gate.try_hold("x").unwrap();
        let _y = gate.try_hold("y").unwrap();
        assert!(gate.try_hold("z").is_none());
        assert_eq!(gate.refused(), 1);
        assert_eq!(gate.admitted(), 2);
    }

    #[test]
    fn memory_is_released_with_the_last_permit() {
        let gate = HoldGate::new(100_000, 1);
        let permits: Vec<_> = (0..1000)
            .map(|i| gate.try_hold(&format!("id{i}")).unwrap())
            .collect();
        assert_eq!(gate.identities(), 1000);
        drop(permits);
        assert_eq!(gate.identities(), 0);
        assert_eq!(gate.held(), 0);
    }
}
