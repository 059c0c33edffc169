//! Instants and deadlines as the admin API writes them: RFC 3339 text, whole seconds left, and
//! the wall clock for handlers that have no engine clock at hand.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
