//! `[quota]`: daily quotas per UTC day and the scan-delay parameters of the quota document
//! (`L_anon`, `L_jwt`, `T_warn`, `D_soft` for the first `soft_window` units over, `D_hard` after).

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;

use super::env::{self, EnvMap};
use super::tiers::positive;
use super::ConfigError;
use crate::model::Tier;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuota {
    /// `L_anon`.
    pub anon: Option<u32>,
    /// `L_jwt`: token holders (a valid JWT), whatever their rung.
    pub token: Option<u32>,
    /// Sponsor daily quota; absent means none.
    pub sponsor: Option<u32>,
    pub soft_delay_ms: Option<u32>,
    pub soft_window: Option<u32>,
    pub hard_delay_ms: Option<u32>,
    pub warn_threshold: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaSettings {
    pub anon: NonZeroU32,
    pub token: NonZeroU32,
    /// The session rung (`[tiers.session] daily`, default `anon`: a forged cookie buys no
    /// scan quota).
    pub session: NonZeroU32,
    /// The crawler rung (`[tiers.crawler] daily`, `QUOTA_CRAWLER`; default `anon`).
    pub crawler: NonZeroU32,
    /// The agent rung (`[tiers.agent] daily`, `QUOTA_AGENT`; default 10,000).
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

    pub(crate) fn apply_env(
        raw: &mut RawQuota,
        env: &EnvMap,
        applied: &mut Vec<(&'static str, u32)>,
    ) -> Result<(), ConfigError> {
        let mut set = |var: &'static str,
                       allow_zero: bool,
                       slot: &mut Option<u32>|
         -> Result<(), ConfigError> {
            if let Some(v) = env::read_u32(env, var, allow_zero)? {
                *slot = Some(v);
                applied.push((var, v));
            }
            Ok(())
        };
        set(env::QUOTA_ANON, false, &mut raw.anon)?;
        set(env::QUOTA_TOKEN, false, &mut raw.token)?;
        set(env::DELAY_SOFT_MS, true, &mut raw.soft_delay_ms)?;
        set(env::DELAY_SOFT_WINDOW, true, &mut raw.soft_window)?;
        set(env::DELAY_HARD_MS, true, &mut raw.hard_delay_ms)?;
        set(env::QUOTA_WARN_THRESHOLD, true, &mut raw.warn_threshold)?;
        Ok(())
    }

    /// Validates `raw`; `session_daily` and `crawler_daily` are `[tiers.session] daily` and
    /// `[tiers.crawler] daily`, `agent_daily` `[tiers.agent] daily` (the environment already
    /// applied).
    pub fn validate(
        raw: RawQuota,
        session_daily: Option<u32>,
        crawler_daily: Option<u32>,
        agent_daily: Option<u32>,
    ) -> Result<Self, ConfigError> {
        let sponsor = match raw.sponsor {
            None => None,
            Some(v) => Some(positive("quota.sponsor", Some(v), 0)?),
        };
        let soft_delay = Duration::from_millis(raw.soft_delay_ms.unwrap_or(5_000).into());
        let hard_delay = Duration::from_millis(raw.hard_delay_ms.unwrap_or(60_000).into());
        if hard_delay < soft_delay {
            return Err(ConfigError::invalid(
                "quota.hard_delay_ms",
                format!(
                    "{} ms is shorter than the soft delay {} ms",
                    hard_delay.as_millis(),
                    soft_delay.as_millis()
                ),
            ));
        }
        let anon = positive("quota.anon", raw.anon, 1_000)?;
        Ok(QuotaSettings {
            anon,
            session: match session_daily {
                None => anon,
                Some(v) => positive("tiers.session.daily", Some(v), 0)?,
            },
            crawler: match crawler_daily {
                None => anon,
                Some(v) => positive("tiers.crawler.daily", Some(v), 0)?,
            },
            agent: positive("tiers.agent.daily", agent_daily, 10_000)?,
            token: positive("quota.token", raw.token, 10_000)?,
            sponsor,
            soft_delay,
            soft_window: raw.soft_window.unwrap_or(30),
            hard_delay,
            warn_threshold: raw.warn_threshold.unwrap_or(200),
        })
    }
}
