//! Instants and deadlines as the admin API writes them: RFC 3339 text, whole seconds left, and
//! the wall clock for handlers that have no engine clock at hand.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A wall-clock instant in milliseconds as RFC 3339 (seconds precision). An instant past
/// year 9999, which RFC 3339 cannot write, is written as the last second it can: no answer
/// fails for a deadline, whatever wrote it.
pub fn rfc3339(ms: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let at = UNIX_EPOCH + Duration::from_millis(ms.min(LAST_RFC3339_MS));
    match write!(out, "{}", humantime::format_rfc3339_seconds(at)) {
        Ok(()) => out,
        Err(_) => "9999-12-31T23:59:59Z".to_string(),
    }
}

/// 9999-12-31T23:59:59Z in milliseconds since the epoch.
const LAST_RFC3339_MS: u64 = 253_402_300_799_000;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_past_year_9999_is_written_not_a_panic() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(LAST_RFC3339_MS), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59Z");
    }
}
