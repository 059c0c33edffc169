//! Engine calls from the admin handlers. They may block (the Valkey store makes round trips),
//! so [`blocking`] runs them on the blocking pool, off the async workers.

use std::sync::Arc;

use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::engine::Engine;

/// Runs `f` on the blocking pool with the engine.
pub async fn blocking<T: Send + 'static>(
    state: &AdminState,
    f: impl FnOnce(&Engine) -> T + Send + 'static,
) -> Result<T, AdminError> {
    let engine = Arc::clone(&state.engine);
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|e| AdminError::internal("an admin task", &e))
}
