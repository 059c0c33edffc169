//! Starting a [`FleetStore`]: the store is built not yet connected and its two background tasks
//! (the [`super::writer`]'s queue and the [`super::connector`]) are spawned on the remote's
//! I/O runtime. Apart from the store's own file, so the connector, which reads the store,
//! and the store do not import each other.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::breaker::Breaker;
use super::connector;
use super::fleet_store::{FleetSettings, FleetStats, FleetStore};
use super::over_limit::OverLimit;
use super::replica::Replica;
use super::writer::Writer;
use crate::embedded::counters::Counters;
use crate::store::fleet_remote::FleetRemote;

/// Identities the over-limit cache holds at most.
const OVER_LIMIT_ENTRIES: usize = 65_536;
/// How long a lockout write may take before the writer retries it.
const WRITE_DEADLINE: Duration = Duration::from_secs(2);

impl FleetStore {
    /// Wraps `remote` (not yet connected) and starts the writer and the connector on its I/O
    /// runtime. Decisions are counted locally (degraded) until the first connect succeeds.
    pub fn start(remote: Arc<dyn FleetRemote>, settings: FleetSettings) -> Arc<Self> {
        let probe_ms = u64::try_from(settings.probe_interval.as_millis()).unwrap_or(1000);
        let over_limit = Arc::new(OverLimit::new(OVER_LIMIT_ENTRIES));
        let store = Arc::new_cyclic(|me| FleetStore {
            me: me.clone(),
            breaker: Breaker::new(probe_ms, false),
            connected: AtomicBool::new(false),
            local: Counters::new(settings.max_identities, 60_000),
            over_limit: Arc::clone(&over_limit),
            replica: Replica::default(),
            writer: Arc::new(Writer::default()),
            downstream: OnceLock::new(),
            following: AtomicBool::new(false),
            first_connect: Default::default(),
            reconnect: Arc::new(Notify::new()),
            errors: AtomicU64::new(0),
            stats: FleetStats::default(),
            cancel: CancellationToken::new(),
            leases: (settings.leases && remote.leases()).then(|| {
                Arc::new(super::leases::Leases::new(
                    settings.lease_max,
                    u64::try_from(settings.lease_ttl.as_millis()).unwrap_or(1000),
                    settings.max_identities,
                    Arc::clone(&over_limit),
                ))
            }),
            remote,
            settings,
        });
        if let Some(l) = &store.leases {
            store.remote.spawn(Box::pin(super::lease_task::run(
                Arc::clone(l),
                Arc::clone(&store.remote),
                store.cancel.child_token(),
            )));
        }
        store.remote.spawn(Box::pin(Arc::clone(&store.writer).run(
            Arc::clone(&store.remote),
            WRITE_DEADLINE,
            settings.probe_interval,
            store.cancel.child_token(),
        )));
        store.remote.spawn(Box::pin(connector::run(
            Arc::downgrade(&store),
            store.cancel.child_token(),
        )));
        store
    }
}
