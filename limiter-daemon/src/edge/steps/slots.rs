//! Slots bounded in total and per identity: what a held request ([`super::hold`]) and an open
//! tunnel ([`super::tunnel::registry`]) each take for their life. The per-identity map drops an
//! entry when its count returns to zero, so it never holds more entries than slots taken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

#[derive(Debug)]
pub struct Slots {
    /// Atomics: a config reload changes them while slots are taken ([`Slots::set_bounds`]).
    max_total: AtomicUsize,
    max_per_identity: AtomicUsize,
    total: AtomicUsize,
    per_identity: Mutex<HashMap<String, usize>>,
}

impl Slots {
    pub fn new(max_total: usize, max_per_identity: usize) -> Self {
        Slots {
            max_total: AtomicUsize::new(max_total),
            max_per_identity: AtomicUsize::new(max_per_identity),
            total: AtomicUsize::new(0),
            per_identity: Mutex::new(HashMap::new()),
        }
    }

    /// New bounds (a reload). Slots taken stay taken; lower bounds only refuse new ones until
    /// enough are given back.
    pub fn set_bounds(&self, max_total: usize, max_per_identity: usize) {
        // Under the map lock, like every take: none sees one bound old, one new.
        let _map = self.per_identity.lock();
        self.max_total.store(max_total, Ordering::Relaxed);
        self.max_per_identity
            .store(max_per_identity, Ordering::Relaxed);
    }

    /// Takes a slot for `identity`; `false` when either bound is reached.
    pub fn try_take(&self, identity: &str) -> bool {
        let mut map = self.per_identity.lock();
        let mine = map.get(identity).copied().unwrap_or(0);
        if mine >= self.max_per_identity.load(Ordering::Relaxed)
            || self.total.load(Ordering::Relaxed) >= self.max_total.load(Ordering::Relaxed)
        {
            return false;
        }
        map.insert(identity.to_owned(), mine + 1);
        // Changed under the map lock, so the total bound is exact.
        self.total.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Gives back a slot [`Slots::try_take`] took for `identity`.
    pub fn give_back(&self, identity: &str) {
        let mut map = self.per_identity.lock();
        if let Some(n) = map.get_mut(identity) {
            *n -= 1;
            if *n == 0 {
                map.remove(identity);
            }
        }
        self.total.fetch_sub(1, Ordering::Relaxed);
    }

    /// Slots taken now.
    pub fn taken(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Slots taken now by `identity`.
    pub fn taken_by(&self, identity: &str) -> usize {
        self.per_identity.lock().get(identity).copied().unwrap_or(0)
    }

    /// Distinct identities holding a slot.
    pub fn identities(&self) -> usize {
        self.per_identity.lock().len()
    }
}
