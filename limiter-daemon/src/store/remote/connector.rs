//! The fleet store's connector: connects to the shared store in the background (so a daemon
//! starts while it is down), and again whenever the breaker opens; starts following the lockout
//! stream after the first success.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use super::fleet_store::FleetStore;

/// Connects in the background, and again whenever the breaker opens; starts following the
/// stream after the first success.
pub(super) async fn run(store: Weak<FleetStore>, cancel: CancellationToken) {
    let mut logged = false;
    loop {
        let Some(s) = store.upgrade() else { return };
        let (remote, probe, reconnect) = (
            Arc::clone(&s.remote),
            s.settings.probe_interval,
            Arc::clone(&s.reconnect),
        );
        drop(s);
        let wake = reconnect.notified();
        match remote.connect().await {
            Ok(()) => {
                let Some(s) = store.upgrade() else { return };
                if !s.connected.swap(true, Ordering::AcqRel) {
                    tracing::info!("store connected");
                    // It answered just now: decisions go to it from the first.
                    s.breaker.success();
                    let (lock, cv) = &s.first_connect;
                    *lock.lock() = true;
                    cv.notify_all();
                }
                // After a failure a reconnecting client may say "connected" before the server
                // answers again: the breaker's next probe, at its interval, decides.
                s.start_following();
                drop(s);
                logged = false;
                tokio::select! {
                    () = wake => {}
                    () = cancel.cancelled() => return,
                }
            }
            Err(err) => {
                if !logged {
                    tracing::error!(event = "store_degraded", error = %err, "store unreachable: decisions follow on_failure (degraded) until it answers");
                    logged = true;
                }
                tokio::select! {
                    () = tokio::time::sleep(probe) => {}
                    () = cancel.cancelled() => return,
                }
            }
        }
    }
}
