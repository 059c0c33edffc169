//! The lockout stream follower's sink on a fleet host: an event from another host goes into
//! the replica first (what the request path answers lockouts from), then to the engine
//! (kernel, lists); a reload replaces the replica but keeps what this host made and the store
//! has not got yet.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::fleet_store::FleetStore;
use super::writer::Write;
use crate::model::{Lockout, StrikeRecord};
use crate::store::lockout_events::{LockoutEvent, LockoutEvents};

impl FleetStore {
    /// Starts following the fleet's lockout stream once the engine is downstream (at most
    /// once).
    pub(super) fn start_following(&self) {
        if self.downstream.get().is_none() || self.following.swap(true, Ordering::AcqRel) {
            return;
        }
        let sink: Arc<dyn LockoutEvents> = Arc::new(ReplicaSink(self.me.clone()));
        self.remote.follow(sink, self.cancel.child_token());
    }
}

/// The follower's sink: the replica first, then the engine.
struct ReplicaSink(Weak<FleetStore>);

impl LockoutEvents for ReplicaSink {
    fn apply(&self, event: &LockoutEvent) {
        let Some(s) = self.0.upgrade() else { return };
        if event.host() == s.remote.host() {
            // Applied when it was made; replaying it could undo a later lift.
            return;
        }
        let changed = match event {
            LockoutEvent::Locked {
                lockout, strikes, ..
            } => s.replica.put(lockout.clone(), *strikes),
            LockoutEvent::Lifted {
                ip, forget_strikes, ..
            } => {
                if *forget_strikes {
                    s.replica.forget_strikes(*ip);
                }
                s.replica.remove(*ip).is_some()
            }
            LockoutEvent::NetLocked { .. } | LockoutEvent::NetLifted { .. } => true,
        };
        s.stats.events_applied.fetch_add(1, Ordering::Relaxed);
        if changed {
            if let Some(d) = s.downstream.get() {
                d.apply(event);
            }
        }
    }

    fn reload(&self, active: Vec<(Lockout, Option<StrikeRecord>)>) {
        let Some(s) = self.0.upgrade() else { return };
        s.replica.replace(active);
        // What this host made and the store has not got yet stays in force.
        for w in s.writer.pending() {
            match w {
                Write::Put(l, st) => {
                    s.replica.put(l, st);
                }
                Write::Remove(ip) => {
                    s.replica.remove(ip);
                }
                Write::Publish(_) => {}
            }
        }
        if let Some(d) = s.downstream.get() {
            // Every known lockout: the engine keeps those still active by its own clock.
            let all = s
                .replica
                .active(0)
                .into_iter()
                .map(|l| {
                    let st = s.replica.strikes(l.ip);
                    (l, st)
                })
                .collect();
            d.reload(all);
        }
    }
}
