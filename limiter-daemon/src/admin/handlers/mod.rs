//! The admin API's handlers, one file per resource. Engine calls may block (the Valkey store
//! makes round trips), so [`blocking`] runs them off the async workers.

pub mod clients;
pub mod config;
pub mod explain;
pub mod kernel;
pub mod keys;
pub mod lists;
pub mod lockouts;
pub mod reload;
pub mod stats;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::problem::AdminError;
use super::state::AdminState;
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

/// A wall-clock instant in milliseconds as RFC 3339 (seconds precision).
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Seconds left until `until_ms`, rounded up (a lockout with 0.4 s left is still one).
pub fn secs_left(until_ms: u64, now_ms: u64) -> u64 {
    until_ms.saturating_sub(now_ms).div_ceil(1000)
}

/// Now on the wall clock, for handlers without the engine's clock at hand.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
