//! `[tiers]`: per-rung burst (per 60 s) and hourly budget. The session budget is the anonymous
//! budget times a multiplier, as the seed defines it; the crawler rung's defaults are the
//! session's (burst 300, hourly = anonymous × multiplier), each settable on its own.
//!
//! The agent rung (a verified Web Bot Auth signature, `[agents]`) defaults between session
//! and sponsor: burst 600, hourly 20,000, daily 10,000 (`[quota] token`'s default). More than
//! a session's, because the signature proves one agent across every address it calls from
//! (it cannot be had by deleting a cookie or moving address), and one agent is many users'
//! traffic on one budget; less than a sponsor's, because nobody here issued it anything: an
//! API key is still the way up.

use std::num::NonZeroU32;

use serde::Deserialize;

use super::env::{self, EnvMap};
use super::ConfigError;
use crate::model::Tier;

/// The largest burst a tier may have: the embedded store counts burst slots in `u16`.
pub const MAX_BURST: u32 = u16::MAX as u32;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTier {
    pub burst: Option<u32>,
    pub hourly: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSessionTier {
    pub burst: Option<u32>,
    /// Session budget = anonymous budget × this.
    pub multiplier: Option<u32>,
    /// Daily quota of the session rung; absent means `[quota] anon` (`QUOTA_ANON`): a cookie
    /// is presence only and forgeable. Raise it only where sessions are verified upstream.
    pub daily: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCrawlerTier {
    pub burst: Option<u32>,
    /// Absent: the session budget (anonymous × `[tiers.session] multiplier`).
    pub hourly: Option<u32>,
    /// Daily quota of verified crawlers; absent means `[quota] anon` (`QUOTA_ANON`).
    pub daily: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgentTier {
    pub burst: Option<u32>,
    pub hourly: Option<u32>,
    /// Daily quota of verified agents; absent means 10,000.
    pub daily: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTiers {
    #[serde(default)]
    pub anon: RawTier,
    #[serde(default)]
    pub session: RawSessionTier,
    #[serde(default)]
    pub crawler: RawCrawlerTier,
    #[serde(default)]
    pub agent: RawAgentTier,
    #[serde(default)]
    pub sponsor: RawTier,
}

/// One rung's windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierLimits {
    /// Admitted requests in any 60-second span.
    pub burst: NonZeroU32,
    /// Units per UTC clock hour.
    pub hourly: NonZeroU32,
}

/// The validated ladder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierTable {
    pub anon: TierLimits,
    pub session: TierLimits,
    pub crawler: TierLimits,
    pub agent: TierLimits,
    pub sponsor: TierLimits,
    pub auth_multiplier: NonZeroU32,
}

impl TierTable {
    pub fn get(&self, tier: Tier) -> &TierLimits {
        match tier {
            Tier::Anon => &self.anon,
            Tier::Session => &self.session,
            Tier::Crawler => &self.crawler,
            Tier::Agent => &self.agent,
            Tier::Sponsor => &self.sponsor,
        }
    }

    /// Applies the environment (which wins) onto the raw section, recording what it changed.
    pub(crate) fn apply_env(
        raw: &mut RawTiers,
        env: &EnvMap,
        applied: &mut Vec<(&'static str, u32)>,
    ) -> Result<(), ConfigError> {
        let mut set = |var: &'static str, slot: &mut Option<u32>| -> Result<(), ConfigError> {
            if let Some(v) = env::read_u32(env, var, false)? {
                *slot = Some(v);
                applied.push((var, v));
            }
            Ok(())
        };
        set(env::TIER_FREE_HOURLY, &mut raw.anon.hourly)?;
        set(env::TIER_FREE_BURST, &mut raw.anon.burst)?;
        set(env::TIER_AUTH_MULTIPLIER, &mut raw.session.multiplier)?;
        set(env::TIER_AUTH_BURST, &mut raw.session.burst)?;
        set(env::TIER_CRAWLER_HOURLY, &mut raw.crawler.hourly)?;
        set(env::TIER_CRAWLER_BURST, &mut raw.crawler.burst)?;
        set(env::QUOTA_CRAWLER, &mut raw.crawler.daily)?;
        set(env::TIER_AGENT_HOURLY, &mut raw.agent.hourly)?;
        set(env::TIER_AGENT_BURST, &mut raw.agent.burst)?;
        set(env::QUOTA_AGENT, &mut raw.agent.daily)?;
        set(env::TIER_SPONSOR_HOURLY, &mut raw.sponsor.hourly)?;
        set(env::TIER_SPONSOR_BURST, &mut raw.sponsor.burst)?;
        Ok(())
    }

    pub fn validate(raw: RawTiers) -> Result<Self, ConfigError> {
        let anon = TierLimits {
            burst: burst("tiers.anon.burst", raw.anon.burst, 120)?,
            hourly: positive("tiers.anon.hourly", raw.anon.hourly, 600)?,
        };
        let auth_multiplier = positive("tiers.session.multiplier", raw.session.multiplier, 10)?;
        let session_hourly = anon.hourly.checked_mul(auth_multiplier).ok_or_else(|| {
            ConfigError::invalid(
                "tiers.session.multiplier",
                format!(
                    "{} × {} overflows the hourly budget",
                    anon.hourly, auth_multiplier
                ),
            )
        })?;
        let session = TierLimits {
            burst: burst("tiers.session.burst", raw.session.burst, 300)?,
            hourly: session_hourly,
        };
        let crawler = TierLimits {
            burst: burst("tiers.crawler.burst", raw.crawler.burst, 300)?,
            hourly: match raw.crawler.hourly {
                None => session_hourly,
                Some(v) => positive("tiers.crawler.hourly", Some(v), 0)?,
            },
        };
        let agent = TierLimits {
            burst: burst("tiers.agent.burst", raw.agent.burst, 600)?,
            hourly: positive("tiers.agent.hourly", raw.agent.hourly, 20_000)?,
        };
        let sponsor = TierLimits {
            burst: burst("tiers.sponsor.burst", raw.sponsor.burst, 2000)?,
            hourly: positive("tiers.sponsor.hourly", raw.sponsor.hourly, 120_000)?,
        };
        Ok(TierTable {
            anon,
            session,
            crawler,
            agent,
            sponsor,
            auth_multiplier,
        })
    }
}

pub(crate) fn positive(
    field: &str,
    value: Option<u32>,
    default: u32,
) -> Result<NonZeroU32, ConfigError> {
    NonZeroU32::new(value.unwrap_or(default))
        .ok_or_else(|| ConfigError::invalid(field, "must be at least 1"))
}

pub(crate) fn burst(
    field: &str,
    value: Option<u32>,
    default: u32,
) -> Result<NonZeroU32, ConfigError> {
    let v = positive(field, value, default)?;
    if v.get() > MAX_BURST {
        return Err(ConfigError::invalid(
            field,
            format!("{v} is above the largest supported burst {MAX_BURST}"),
        ));
    }
    Ok(v)
}
