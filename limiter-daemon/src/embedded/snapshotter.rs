//! The background job that snapshots the counters: every `store.snapshot_interval`, and once
//! more when `stop` is cancelled (SIGTERM/SIGINT reach it through the app's one shutdown), so a
//! clean stop loses nothing and a crash at most one interval.
//!
//! Each write runs on tokio's blocking pool: no async worker, and so no request, waits on the
//! disk. The store layer takes a plain [`CancellationToken`]; `app` hands in a child of its
//! shutdown and tracks the task, so the drain waits for the final write.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::store::traits::CountStore;

/// Snapshots `store` every `every` until `stop`, then once more. Returns at once for a store
/// that keeps its counters elsewhere.
pub async fn run<S: CountStore + ?Sized>(
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    // A slow disk delays the next write instead of queueing a burst of them.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {
                if !write(&store, &clock, "periodic").await {
                    return;
                }
            }
        }
    }
    write(&store, &clock, "final").await;
}

/// One snapshot on the blocking pool. False when the store has nothing to snapshot.
async fn write<S: CountStore + ?Sized>(
    store: &Arc<S>,
    clock: &Arc<dyn Clock>,
    which: &'static str,
) -> bool {
    let (store, now) = (Arc::clone(store), clock.now_ms());
    match tokio::task::spawn_blocking(move || store.persist_counters(now)).await {
        Ok(Ok(Some(n))) => {
            tracing::debug!(identities = n, which, "counters snapshotted");
            true
        }
        Ok(Ok(None)) => false,
        Ok(Err(err)) => {
            tracing::error!(error = %err, which, "counter snapshot failed; will retry");
            true
        }
        Err(err) => {
            tracing::error!(error = %err, which, "counter snapshot task failed");
            true
        }
    }
}
