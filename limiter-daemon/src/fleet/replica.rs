//! This host's copy of the fleet's active address lockouts and their strike records: what
//! every counted decision's lockout check reads (no round trip), kept current by this host's
//! own lockouts at once and by the lockout stream for everyone else's.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;

use crate::model::{Lockout, StrikeRecord};

#[derive(Clone, Debug, Default)]
struct Known {
    lockout: Option<Lockout>,
    strikes: Option<StrikeRecord>,
}

#[derive(Default)]
pub struct Replica {
    map: RwLock<HashMap<IpAddr, Known>>,
    /// Active-or-not lockouts held: a decision skips the lock while it is 0.
    lockouts: AtomicUsize,
}

impl Replica {
    /// `ip`'s lockout, if one is known (active or not: callers check the time).
    pub fn lockout(&self, ip: IpAddr) -> Option<Lockout> {
        if self.lockouts.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map.read().get(&ip).and_then(|k| k.lockout.clone())
    }

    pub fn strikes(&self, ip: IpAddr) -> Option<StrikeRecord> {
        self.map.read().get(&ip).and_then(|k| k.strikes)
    }

    /// Records `lockout` (the longer wins over one already known) and its strikes. `true`
    /// when it changed what is enforced.
    pub fn put(&self, lockout: Lockout, strikes: Option<StrikeRecord>) -> bool {
        let mut m = self.map.write();
        let k = m.entry(lockout.ip).or_default();
        if let Some(s) = strikes {
            k.strikes = Some(match k.strikes {
                Some(old) if old.last_strike_ms > s.last_strike_ms => old,
                _ => s,
            });
        }
        let longer = k
            .lockout
            .as_ref()
            .is_none_or(|old| lockout.until_ms > old.until_ms);
        if longer {
            k.lockout = Some(lockout);
        }
        self.recount(&m);
        longer
    }

    /// Lifts `ip`'s lockout (its strikes stay: decay forgives them).
    pub fn remove(&self, ip: IpAddr) -> Option<Lockout> {
        let mut m = self.map.write();
        let old = m.get_mut(&ip).and_then(|k| k.lockout.take());
        self.recount(&m);
        old
    }

    /// Forgets `ip`'s strike record; `true` when there was one.
    pub fn forget_strikes(&self, ip: IpAddr) -> bool {
        let mut m = self.map.write();
        let Some(k) = m.get_mut(&ip) else {
            return false;
        };
        let had = k.strikes.take().is_some();
        if k.lockout.is_none() {
            m.remove(&ip);
        }
        had
    }

    /// Lockouts active at `now_ms`, oldest first.
    pub fn active(&self, now_ms: u64) -> Vec<Lockout> {
        let mut v: Vec<Lockout> = self
            .map
            .read()
            .values()
            .filter_map(|k| k.lockout.clone())
            .filter(|l| l.is_active(now_ms))
            .collect();
        v.sort_by_key(|l| (l.since_ms, l.ip));
        v
    }

    /// Replaces everything known with `active` (the store's whole set).
    pub fn replace(&self, active: Vec<(Lockout, Option<StrikeRecord>)>) {
        let mut m = self.map.write();
        m.clear();
        for (l, s) in active {
            m.insert(
                l.ip,
                Known {
                    lockout: Some(l),
                    strikes: s,
                },
            );
        }
        self.recount(&m);
    }

    /// Drops what ended before `now_ms` and carries no strikes worth keeping.
    pub fn sweep(&self, now_ms: u64, keep_strikes_ms: u64) {
        let mut m = self.map.write();
        m.retain(|_, k| {
            if k.lockout.as_ref().is_some_and(|l| !l.is_active(now_ms)) {
                k.lockout = None;
            }
            k.lockout.is_some()
                || k.strikes
                    .is_some_and(|s| s.quiet_from_ms.saturating_add(keep_strikes_ms) > now_ms)
        });
        self.recount(&m);
    }

    fn recount(&self, m: &HashMap<IpAddr, Known>) {
        let n = m.values().filter(|k| k.lockout.is_some()).count();
        self.lockouts.store(n, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LockCause;

    fn lock(ip: &str, until_ms: u64) -> Lockout {
        Lockout {
            ip: ip.parse().unwrap(),
            since_ms: 0,
            until_ms,
            level: 1,
            cause: LockCause::Burst,
            reason: None,
        }
    }

    #[test]
    fn the_longer_lockout_wins_and_a_lift_removes_it() {
        let r = Replica::default();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(r.lockout(ip).is_none());
        assert!(r.put(lock("192.0.2.1", 10_000), None));
        assert!(!r.put(lock("192.0.2.1", 5_000), None), "shorter loses");
        assert_eq!(r.lockout(ip).unwrap().until_ms, 10_000);
        assert!(r.put(lock("192.0.2.1", 20_000), None));
        assert_eq!(r.active(1).len(), 1);
        assert_eq!(r.remove(ip).unwrap().until_ms, 20_000);
        assert!(r.lockout(ip).is_none());
        assert!(r.active(1).is_empty());
    }

    #[test]
    fn replace_takes_the_stores_set() {
        let r = Replica::default();
        r.put(lock("192.0.2.1", 10_000), None);
        r.replace(vec![(lock("192.0.2.2", 10_000), None)]);
        assert!(r.lockout("192.0.2.1".parse().unwrap()).is_none());
        assert!(r.lockout("192.0.2.2".parse().unwrap()).is_some());
    }
}
