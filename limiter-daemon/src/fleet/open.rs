//! Opening the store `[store] backend` names: the embedded store in `state_dir`, or a Valkey
//! server behind [`FleetStore`] (lockout replica, deadline per decision, counting in memory while the server is down). The
//! daemon's `run` and [`crate::engine::Engine::open`] both open their store here, so they cannot
//! drift apart.

use std::sync::Arc;

use super::{FleetSettings, FleetStore};
use crate::config::store::{StoreBackend, StoreSettings};
use crate::embedded::EmbeddedStore;
use crate::store::error::StoreError;
use crate::store::traits::Store;
use crate::valkey::ValkeyStore;

/// How long `open` waits for a remote store's first connect.
const STARTUP_CONNECT: std::time::Duration = std::time::Duration::from_secs(2);

/// The configured store, opened at `now_ms` (the embedded store sweeps what expired by then).
pub fn open(settings: &StoreSettings, now_ms: u64) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match (settings.backend, &settings.valkey_address) {
        (StoreBackend::Valkey, Some(_)) => {
            // Built without the server: a daemon starts, and serves, while Valkey is down.
            let remote = Arc::new(ValkeyStore::from_settings(settings)?);
            let store = FleetStore::start(remote, FleetSettings::from_store(settings));
            // A moment for the first connect, so a normal start counts in Valkey from the
            // first request; past it, decisions follow on_failure until it answers.
            if !store.wait_connected(STARTUP_CONNECT) {
                tracing::error!(
                    event = "store_degraded",
                    "Valkey did not answer at start: decisions follow on_failure until it does"
                );
            }
            store
        }
        // Validation refuses the Valkey backend without an address.
        _ => Arc::new(EmbeddedStore::open(settings, now_ms)?),
    })
}
