//! The scan delay past a daily quota (`[tiers]`), and token holders' daily quota (`[jwt]
//! daily`): the quota document's `L_jwt`, `T_warn`, `D_soft` for the first `soft_window` units
//! over, `D_hard` after. The rungs' own quotas are their `daily` ([`super::TierLimits`]).

use std::num::NonZeroU32;
use std::time::Duration;

use super::tiers::{positive, RawTiers};
use super::ConfigError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaSettings {
    /// Token holders (a valid JWT), whatever their rung.
    pub token: NonZeroU32,
    pub soft_delay: Duration,
    /// Units past the limit that get the soft delay; beyond them, the hard delay.
    pub soft_window: u32,
    pub hard_delay: Duration,
    /// Remaining units at or below which responses carry a reminder.
    pub warn_threshold: u32,
}

impl QuotaSettings {
    /// Validates the delay in `raw` (the environment applied); `token` is `[jwt] daily`.
    pub fn validate(raw: &RawTiers, token: Option<u32>) -> Result<Self, ConfigError> {
        let soft_delay = Duration::from_millis(raw.soft_delay_ms.unwrap_or(5_000).into());
        let hard_delay = Duration::from_millis(raw.hard_delay_ms.unwrap_or(60_000).into());
        if hard_delay < soft_delay {
            return Err(ConfigError::invalid(
                "tiers.hard_delay_ms",
                format!(
                    "{} ms is shorter than the soft delay {} ms",
                    hard_delay.as_millis(),
                    soft_delay.as_millis()
                ),
            ));
        }
        Ok(QuotaSettings {
            token: positive("jwt.daily", token, 10_000)?,
            soft_delay,
            soft_window: raw.soft_window.unwrap_or(30),
            hard_delay,
            warn_threshold: raw.warn_threshold.unwrap_or(200),
        })
    }
}
