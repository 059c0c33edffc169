//! `[lockout]`: strikes become lockouts of `base × 2^(strikes−1)`, capped; strikes decay after
//! a quiet period; optional jitter spreads lockout ends.

use std::time::Duration;

use serde::Deserialize;

use super::keys::duration;
use super::ConfigError;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLockout {
    pub base: Option<String>,
    pub cap: Option<String>,
    pub decay: Option<String>,
    /// Fraction in `[0, 1]`: a lockout lasts up to this much longer, at random.
    pub jitter: Option<f64>,
    /// Seed for the jitter; absent means seeded from the OS.
    pub jitter_seed: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LockoutSettings {
    pub base: Duration,
    pub cap: Duration,
    /// One strike is forgiven per `decay` of quiet after a lockout ends (zero: never).
    pub decay: Duration,
    pub jitter: f64,
    pub jitter_seed: Option<u64>,
}

impl LockoutSettings {
    pub fn validate(raw: RawLockout) -> Result<Self, ConfigError> {
        let base = duration("lockout.base", raw.base, Duration::from_secs(60))?;
        let cap = duration("lockout.cap", raw.cap, Duration::from_secs(24 * 3600))?;
        if base.is_zero() {
            return Err(ConfigError::invalid(
                "lockout.base",
                "must be longer than zero",
            ));
        }
        if cap < base {
            return Err(ConfigError::invalid(
                "lockout.cap",
                "must be at least `lockout.base`",
            ));
        }
        let jitter = raw.jitter.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(ConfigError::invalid(
                "lockout.jitter",
                format!("{jitter} is not within 0 and 1"),
            ));
        }
        Ok(LockoutSettings {
            base,
            cap,
            decay: duration("lockout.decay", raw.decay, Duration::from_secs(3600))?,
            jitter,
            jitter_seed: raw.jitter_seed,
        })
    }

    /// `base × 2^(level−1)`, capped; `level` counts from 1.
    pub fn duration_for(&self, level: u32) -> Duration {
        let shift = level.saturating_sub(1).min(63);
        let base_ms = u64::try_from(self.base.as_millis()).unwrap_or(u64::MAX);
        let ms = base_ms
            .checked_shl(shift)
            .filter(|v| v >> shift == base_ms)
            .unwrap_or(u64::MAX);
        Duration::from_millis(ms).min(self.cap)
    }
}
