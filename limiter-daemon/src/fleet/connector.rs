//! The fleet store's connector: connects to the shared store in the background (so a daemon
//! starts while it is down), and again whenever the breaker opens; starts following the lockout
//! stream after the first success. While the breaker is open and a connection is made, it is
//! also the breaker's probe: it asks the store every `probe_interval`, so the store's return
//! closes the breaker (and `/readyz` says ready) whether or not a request arrives. A balancer
//! that health-checks `/readyz` sends none to an unready host: recovery found only by traffic
//! would never be found.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use super::fleet_store::FleetStore;

/// Connects in the background, and again whenever the breaker opens; starts following the
/// stream after the first success; probes the store while the breaker is open.
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
                s.start_following();
                drop(s);
                logged = false;
                match probe_while_open(&store, &cancel).await {
                    Probe::Closed => {}
                    // Connect again: `connect` keeps a connection that answers and replaces
                    // one that does not (a password the server now refuses).
                    Probe::Failed => continue,
                    Probe::Stop => return,
                }
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

/// What [`probe_while_open`] found.
enum Probe {
    /// The breaker is closed (it was, or the probe's answer closed it).
    Closed,
    /// The store did not answer in time; one probe interval has passed since.
    Failed,
    /// Cancelled, or the store is gone.
    Stop,
}

/// While the breaker is open, asks the store (`PING` on the decisions' connection, under
/// `decision_timeout`, the deadline a decision has); an answer closes the breaker. The connect
/// alone does not: a reconnecting client may say "connected" before the server answers again.
/// A connect has just succeeded when this runs, so the probe goes at once; after a failed one
/// the caller connects again one interval later, and probes again.
async fn probe_while_open(store: &Weak<FleetStore>, cancel: &CancellationToken) -> Probe {
    let Some(s) = store.upgrade() else {
        return Probe::Stop;
    };
    if !s.breaker.is_open() {
        return Probe::Closed;
    }
    let (remote, probe, deadline) = (
        Arc::clone(&s.remote),
        s.settings.probe_interval,
        s.settings.decision_timeout,
    );
    drop(s);
    if let Ok(Ok(())) = tokio::time::timeout(deadline, remote.ping()).await {
        let Some(s) = store.upgrade() else {
            return Probe::Stop;
        };
        s.recovered();
        return Probe::Closed;
    }
    tokio::select! {
        () = tokio::time::sleep(probe) => Probe::Failed,
        () = cancel.cancelled() => Probe::Stop,
    }
}
