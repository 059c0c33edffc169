//! Lockouts other hosts of a fleet made or lifted, as this host's engine applies them: into
//! the kernel (so the address is dropped here too) and, for prefix lockouts, into the lists
//! the request path reads. The store's replica has taken them already.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::base::Engine;
use crate::model::{ListKind, Lockout, StrikeRecord};
use crate::store::lockout_events::{LockoutEvent, LockoutEvents};

pub struct FleetEvents(Weak<Engine>);

impl Engine {
    /// Applies the fleet's lockout events from now on (a store shared by a fleet delivers
    /// them; any other store never calls).
    pub fn follow_fleet(self: &Arc<Self>) {
        let sink: Arc<dyn LockoutEvents> = Arc::new(FleetEvents(Arc::downgrade(self)));
        self.store.follow_fleet(sink);
    }
}

impl LockoutEvents for FleetEvents {
    fn apply(&self, event: &LockoutEvent) {
        let Some(e) = self.0.upgrade() else { return };
        let now = e.clock.now_ms();
        match event {
            LockoutEvent::Locked { lockout, host, .. } => {
                if lockout.is_active(now) {
                    e.sink.lock(
                        lockout.ip,
                        Duration::from_millis(lockout.remaining_ms(now)),
                        lockout.level,
                    );
                    tracing::info!(event = "lockout_followed", ip = %lockout.ip, level = lockout.level, from = %host, "lockout made on another host");
                }
            }
            LockoutEvent::Lifted { ip, host, .. } => {
                e.sink.unlock(*ip);
                tracing::info!(event = "lockout_lift_followed", %ip, from = %host, "lockout lifted on another host");
            }
            LockoutEvent::NetLocked { net, until_ms, .. } => {
                if *until_ms > now {
                    let ttl = (*until_ms != u64::MAX)
                        .then(|| Duration::from_millis(until_ms.saturating_sub(now)));
                    e.sink.list_add(ListKind::Deny, *net, ttl);
                }
                reload_lists_behind(e);
            }
            LockoutEvent::NetLifted { net, .. } => {
                e.sink.list_remove(ListKind::Deny, *net);
                reload_lists_behind(e);
            }
        }
    }

    fn reload(&self, active: Vec<(Lockout, Option<StrikeRecord>)>) {
        let Some(e) = self.0.upgrade() else { return };
        let now = e.clock.now_ms();
        let mut pushed = 0;
        for (l, _) in active.iter().filter(|(l, _)| l.is_active(now)) {
            e.sink
                .lock(l.ip, Duration::from_millis(l.remaining_ms(now)), l.level);
            pushed += 1;
        }
        tracing::info!(pushed, "fleet lockouts loaded into the kernel");
    }
}

/// Re-reads the lists on a thread of its own: the events arrive on the store's I/O runtime,
/// which must not wait on its own calls.
fn reload_lists_behind(e: Arc<Engine>) {
    std::thread::spawn(move || e.reload_lists());
}
