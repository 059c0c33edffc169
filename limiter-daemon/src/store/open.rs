//! Opening the store `[store] backend` names: the embedded store in `state_dir`, or a Valkey
//! server behind [`FallbackStore`] (counting goes on in memory while the server is down). The
//! daemon's `run` and [`crate::engine::Engine::open`] both open their store here, so they cannot
//! drift apart.

use std::sync::Arc;

use super::embedded::EmbeddedStore;
use super::error::StoreError;
use super::fallback::FallbackStore;
use super::traits::Store;
use super::valkey::ValkeyStore;
use crate::config::store::{StoreBackend, StoreSettings};

/// The configured store, opened at `now_ms` (the embedded store sweeps what expired by then).
pub fn open(settings: &StoreSettings, now_ms: u64) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match (settings.backend, &settings.valkey_address) {
        (StoreBackend::Valkey, Some(address)) => {
            let remote = Arc::new(ValkeyStore::open(
                address,
                &settings.key_prefix,
                settings.hash,
                settings.hash_secret.as_deref(),
            )?);
            Arc::new(FallbackStore::new(remote, settings.max_identities))
        }
        // Validation refuses the Valkey backend without an address.
        _ => Arc::new(EmbeddedStore::open(settings, now_ms)?),
    })
}
