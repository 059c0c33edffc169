//! The local over-limit cache (Envoy's local cache, for a shared store): an identity the
//! store refused until T, with every refusing window spent, is answered here until T without
//! a round trip. Only spent fixed windows are kept (hourly, daily, key hourly): no request of
//! any cost fits them before they roll over, so the local answer is the store's. The burst is
//! still counted, locally, so a loop hammering a spent budget is struck as it would be
//! remotely. Memory is bounded by a ceiling on entries.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::identity::hash::IdKey;
use crate::model::{PerWindow, Shape, WindowKind};
use crate::store::count::{CountOutcome, CountRequest, Limit};

const SHARDS: usize = 16;

struct Held {
    until_ms: u64,
    at_ms: u64,
    /// The limits the store refused under: other limits (a reload, another route) ask again.
    limits: PerWindow<Option<Limit>>,
    outcome: CountOutcome,
}

pub struct OverLimit {
    shards: Box<[Mutex<HashMap<IdKey, Held>>]>,
    per_shard: usize,
}

impl OverLimit {
    pub fn new(max_entries: usize) -> Self {
        OverLimit {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: (max_entries / SHARDS).max(16),
        }
    }

    fn shard(&self, id: &IdKey) -> &Mutex<HashMap<IdKey, Held>> {
        &self.shards[id.0[5] as usize % SHARDS]
    }

    /// Remembers `outcome`, the store's answer at `now_ms`, when it is a refusal that holds
    /// until a known time: every refusing window is fixed and spent, and the burst is not
    /// among them.
    pub fn remember(&self, req: &CountRequest, outcome: &CountOutcome) {
        let (id, now_ms) = (req.id, req.now_ms);
        if outcome.admitted {
            return;
        }
        let mut until = None::<u64>;
        for k in outcome.refusing() {
            let Some(w) = outcome.uses[k] else { return };
            if k.spec().shape != Shape::Fixed || w.used < w.limit {
                return;
            }
            until = Some(until.unwrap_or(0).max(now_ms.saturating_add(w.reset_ms)));
        }
        let Some(until_ms) = until else { return };
        let mut m = self.shard(&id).lock();
        if m.len() >= self.per_shard {
            m.retain(|_, h| h.until_ms > now_ms);
            if m.len() >= self.per_shard {
                // Still full of live refusals: this one goes to the store each time.
                return;
            }
        }
        m.insert(
            id,
            Held {
                until_ms,
                at_ms: now_ms,
                limits: req.limits,
                outcome: *outcome,
            },
        );
    }

    /// The store's refusal of `req`'s identity, aged to its time, while it holds and the limits
    /// are the same. The burst window is left out: the caller counts it.
    pub fn refusal(&self, req: &CountRequest) -> Option<CountOutcome> {
        let (id, now_ms) = (&req.id, req.now_ms);
        let mut m = self.shard(id).lock();
        let held = m.get(id)?;
        if now_ms >= held.until_ms || held.limits != req.limits {
            m.remove(id);
            return None;
        }
        let aged = now_ms.saturating_sub(held.at_ms);
        let mut o = held.outcome;
        for k in WindowKind::ALL {
            if let Some(w) = &mut o.uses[k] {
                w.reset_ms = w.reset_ms.saturating_sub(aged).max(1);
            }
        }
        o.uses[WindowKind::Burst] = None;
        o.refused[WindowKind::Burst] = false;
        // The caller's own spent budget refuses it whatever its networks hold; their windows
        // are not asked while the refusal holds.
        o.networks = Default::default();
        Some(o)
    }

    /// Forgets `id` (a key revoked, a lockout lifted by hand: its next answer is the store's).
    pub fn forget(&self, id: &IdKey) {
        self.shard(id).lock().remove(id);
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::count::WindowUse;

    fn at(id: IdKey, now_ms: u64) -> CountRequest {
        CountRequest {
            networks: Default::default(),
            id,
            now_ms,
            cost: 1,
            limits: PerWindow::default().with(WindowKind::Hourly, Some(Limit::refusing(10))),
        }
    }

    fn id(n: u8) -> IdKey {
        let mut k = [0u8; 33];
        k[0] = 1;
        k[5] = n;
        k[6] = n;
        IdKey(k)
    }

    fn refused(kind: WindowKind, used: u32, limit: u32, reset_ms: u64) -> CountOutcome {
        let mut refused = PerWindow::<bool>::default();
        refused[kind] = true;
        let mut uses = PerWindow::<Option<WindowUse>>::default();
        uses[kind] = Some(WindowUse {
            limit,
            used,
            reset_ms,
        });
        uses[WindowKind::Burst] = Some(WindowUse {
            limit: 100,
            used: 3,
            reset_ms: 60_000,
        });
        CountOutcome {
            networks: Default::default(),
            admitted: false,
            refused,
            uses,
        }
    }

    #[test]
    fn a_spent_hour_is_answered_locally_until_it_rolls_over() {
        let c = OverLimit::new(1024);
        c.remember(
            &at(id(1), 1_000),
            &refused(WindowKind::Hourly, 10, 10, 5_000),
        );
        let o = c.refusal(&at(id(1), 3_000)).expect("held");
        assert!(o.refused[WindowKind::Hourly] && !o.admitted);
        assert_eq!(o.uses[WindowKind::Hourly].unwrap().reset_ms, 3_000);
        assert_eq!(
            o.uses[WindowKind::Burst],
            None,
            "the caller counts the burst"
        );
        assert!(c.refusal(&at(id(1), 6_000)).is_none(), "rolled over");
        assert!(c.is_empty());
    }

    #[test]
    fn other_limits_ask_the_store_again() {
        let c = OverLimit::new(1024);
        c.remember(&at(id(4), 0), &refused(WindowKind::Hourly, 10, 10, 5_000));
        let mut raised = at(id(4), 1);
        raised.limits = raised
            .limits
            .with(WindowKind::Hourly, Some(Limit::refusing(20)));
        assert!(c.refusal(&raised).is_none(), "a reload raised the budget");
        assert!(c.refusal(&at(id(4), 2)).is_none(), "and the entry is gone");
    }

    #[test]
    fn only_spent_fixed_refusals_are_kept() {
        let c = OverLimit::new(1024);
        // A costly request refused while 2 units are left: a cheaper one may still fit.
        c.remember(&at(id(2), 0), &refused(WindowKind::Daily, 98, 100, 9_000));
        // A burst is sliding: it frees up slot by slot.
        c.remember(&at(id(3), 0), &refused(WindowKind::Burst, 100, 100, 9_000));
        assert!(c.refusal(&at(id(2), 1)).is_none());
        assert!(c.refusal(&at(id(3), 1)).is_none());
    }

    #[test]
    fn memory_is_bounded() {
        let c = OverLimit::new(16 * 16);
        for n in 0..=255u8 {
            c.remember(&at(id(n), 0), &refused(WindowKind::Hourly, 1, 1, 1_000_000));
        }
        let mut k = [0u8; 33];
        k[0] = 1;
        for n in 0..2000u32 {
            k[5] = (n % 256) as u8;
            k[7..11].copy_from_slice(&n.to_le_bytes());
            c.remember(
                &at(IdKey(k), 0),
                &refused(WindowKind::Hourly, 1, 1, 1_000_000),
            );
        }
        assert!(c.len() <= 16 * 16, "{}", c.len());
    }
}
