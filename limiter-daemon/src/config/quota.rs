//! The daily quotas per UTC day, validated from each rung's `daily` (`[tiers.*]`) and token
//! holders' `[jwt] daily`, and the scan delay past them (`[tiers]`): the quota document's
//! `L_anon`, `L_jwt`, `T_warn`, `D_soft` for the first `soft_window` units over, `D_hard` after.

use std::num::NonZeroU32;
use std::time::Duration;

use super::tiers::{positive, RawTiers};
use super::ConfigError;
use crate::model::Tier;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaSettings {
    pub anon: NonZeroU32,
    /// Token holders (a valid JWT), whatever their rung.
    pub token: NonZeroU32,
    /// The session rung (default `anon`: a forged cookie buys no scan quota).
    pub session: NonZeroU32,
    /// The crawler rung (default `anon`).
    pub crawler: NonZeroU32,
    /// The agent rung (default 10,000).
    pub agent: NonZeroU32,
    pub sponsor: Option<NonZeroU32>,
    pub soft_delay: Duration,
    /// Units past the limit that get the soft delay; beyond them, the hard delay.
    pub soft_window: u32,
    pub hard_delay: Duration,
    /// Remaining units at or below which responses carry a reminder.
    pub warn_threshold: u32,
}

impl QuotaSettings {
    /// Daily units for a rung (token holders use [`QuotaSettings::token`] whatever their rung).
    pub fn daily_for(&self, tier: Tier) -> Option<NonZeroU32> {
        match tier {
            Tier::Anon => Some(self.anon),
            Tier::Session => Some(self.session),
            Tier::Crawler => Some(self.crawler),
            Tier::Agent => Some(self.agent),
            Tier::Sponsor => self.sponsor,
        }
    }

    /// Validates the quotas in `raw` (the environment applied); `token` is `[jwt] daily`.
    pub fn validate(raw: &RawTiers, token: Option<u32>) -> Result<Self, ConfigError> {
        let daily = |name: &str, v: Option<u32>| {
            v.map(|v| positive(&format!("tiers.{name}.daily"), Some(v), 0))
                .transpose()
        };
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
        let anon = positive("tiers.anon.daily", raw.anon.daily, 1_000)?;
        Ok(QuotaSettings {
            anon,
            session: daily("session", raw.session.daily)?.unwrap_or(anon),
            crawler: daily("crawler", raw.crawler.daily)?.unwrap_or(anon),
            agent: positive("tiers.agent.daily", raw.agent.daily, 10_000)?,
            token: positive("jwt.daily", token, 10_000)?,
            sponsor: daily("sponsor", raw.sponsor.daily)?,
            soft_delay,
            soft_window: raw.soft_window.unwrap_or(30),
            hard_delay,
            warn_threshold: raw.warn_threshold.unwrap_or(200),
        })
    }
}
