//! Bounds on requests held for a scan delay.
//!
//! A delayed request costs a task and a timer (never a thread), but a scanner could still open
//! thousands of them. [`HoldGate`] admits a hold only while the total and the caller's own count
//! are under their bounds; a [`HoldPermit`] gives the slot back when dropped (the request was
//! forwarded, failed, or its client went away). Refusals are counted for metrics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

#[derive(Debug)]
pub struct HoldGate {
    /// Atomics: a config reload changes them while requests are held ([`HoldGate::set_bounds`]).
    max_total: AtomicUsize,
    max_per_identity: AtomicUsize,
    total: AtomicUsize,
    /// Holds per identity; an entry is removed when its count returns to zero, so the map never
    /// holds more entries than there are held requests.
    per_identity: Mutex<HashMap<String, usize>>,
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
            max_total: AtomicUsize::new(max_total),
            max_per_identity: AtomicUsize::new(max_per_identity),
            total: AtomicUsize::new(0),
            per_identity: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
        })
    }

    /// New bounds (a reload). Requests already held keep their slots; lower bounds only refuse
    /// new holds until enough of them end.
    pub fn set_bounds(&self, max_total: usize, max_per_identity: usize) {
        // Under the map lock, like every admission: no hold sees one bound old, one new.
        let _map = self.per_identity.lock();
        self.max_total.store(max_total, Ordering::Relaxed);
        self.max_per_identity
            .store(max_per_identity, Ordering::Relaxed);
    }

    /// A slot for `identity`, or `None` (counted) when either bound is reached.
    pub fn try_hold(self: &Arc<Self>, identity: &str) -> Option<HoldPermit> {
        let mut map = self.per_identity.lock();
        let mine = map.get(identity).copied().unwrap_or(0);
        if mine >= self.max_per_identity.load(Ordering::Relaxed)
            || self.total.load(Ordering::Relaxed) >= self.max_total.load(Ordering::Relaxed)
        {
            drop(map);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        map.insert(identity.to_owned(), mine + 1);
        // Changed under the map lock, so the total bound is exact.
        self.total.fetch_add(1, Ordering::Relaxed);
        self.admitted.fetch_add(1, Ordering::Relaxed);
        Some(HoldPermit {
            gate: Arc::clone(self),
            identity: identity.to_owned(),
        })
    }

    /// Requests held right now.
    pub fn held(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Requests held right now for `identity`.
    pub fn held_for(&self, identity: &str) -> usize {
        self.per_identity.lock().get(identity).copied().unwrap_or(0)
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
        self.per_identity.lock().len()
    }
}

impl Drop for HoldPermit {
    fn drop(&mut self) {
        let mut map = self.gate.per_identity.lock();
        if let Some(n) = map.get_mut(&self.identity) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.identity);
            }
        }
        self.gate.total.fetch_sub(1, Ordering::Relaxed);
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
