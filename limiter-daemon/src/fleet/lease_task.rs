//! The leases' background task ([`run`]): refills, give-backs, the heartbeat and the sweep,
//! batched every millisecond or every 64 holders, each call bounded by a timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::leases::{Leases, BACKGROUND_TIMEOUT, BATCH};
use crate::identity::hash::IdKey;
use crate::store::count::CountRequest;
use crate::store::fleet_remote::FleetRemote;
use crate::store::lease::{Asks, Unspent, HOLDERS};

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The background task: refills, give-backs, the heartbeat and the sweep, until `cancel`.
pub async fn run(leases: Arc<Leases>, remote: Arc<dyn FleetRemote>, cancel: CancellationToken) {
    let mut tick = tokio::time::Instant::now();
    loop {
        let wait = tick.saturating_duration_since(tokio::time::Instant::now());
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = leases.wake.notified() => {
                if leases.refills.lock().len() < BATCH {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
        if tokio::time::Instant::now() >= tick {
            tick = tokio::time::Instant::now() + Duration::from_secs(1);
            if let Ok(Ok(n)) =
                tokio::time::timeout(BACKGROUND_TIMEOUT, remote.heartbeat_async(wall_ms())).await
            {
                leases.hosts.store(n, Ordering::Relaxed);
            }
            leases.sweep(leases.latest_ms.load(Ordering::Relaxed));
        }
        let refills: Vec<CountRequest> = std::mem::take(&mut *leases.refills.lock());
        // Taken off the queue and counted in flight under the queue's lock: `pending` reads
        // both under it, so a give-back is never in neither (a request refused then would not
        // wait for the units on their way back, and the window under-admits).
        let returns: Vec<Unspent> = {
            let mut queue = leases.returns.lock();
            let returns = std::mem::take(&mut *queue);
            leases
                .in_flight
                .fetch_add(u32::from(!returns.is_empty()), Ordering::AcqRel);
            returns
        };
        let want = |r: &CountRequest| {
            let s = leases.shard(&r.id).lock();
            s.get(&r.id).map_or(1, |h| h.k)
        };
        let asks = refills.iter().map(|r| {
            let mut ask: Asks = [None; HOLDERS];
            ask[0] = Some((*r, want(r)));
            let remote = &remote;
            async move {
                let call = remote.refill_async(ask);
                let a = tokio::time::timeout(BACKGROUND_TIMEOUT, call).await;
                (r, a.unwrap_or(Err(crate::store::error::StoreError::Open)))
            }
        });
        let ids: Vec<IdKey> = returns.iter().map(|u| u.id).collect();
        let back = async {
            if !returns.is_empty() {
                let call = remote.give_back_async(returns);
                let r = tokio::time::timeout(BACKGROUND_TIMEOUT, call)
                    .await
                    .unwrap_or(Err(crate::store::error::StoreError::Open));
                // A refusal the store made while these were on their way is stale now.
                for id in &ids {
                    leases.over_limit.forget(id);
                }
                leases.returned(&ids);
                leases.in_flight.fetch_sub(1, Ordering::AcqRel);
                if let Err(e) = r {
                    tracing::debug!(error = %e, "lease give-back failed (the counts expire)");
                }
                leases.refills_landed();
            }
        };
        let (answers, ()) =
            futures_util::future::join(futures_util::future::join_all(asks), back).await;
        for (r, a) in answers {
            match a {
                Ok([Some((o, g)), ..]) => leases.install_refill(r, &o, g),
                _ => {
                    if let Some(h) = leases.shard(&r.id).lock().get_mut(&r.id) {
                        h.refilling = false;
                    }
                }
            }
        }
        if !refills.is_empty() {
            leases.refills_landed();
        }
    }
}
