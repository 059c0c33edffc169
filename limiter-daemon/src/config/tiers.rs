//! `[tiers]`: the ladder, one table per rung with its three budgets (`burst` per 60 s, `hourly`
//! per UTC hour, `daily` per UTC day), and the scan delay past a daily quota, shared by every
//! rung. The session hourly budget defaults to ten times the anonymous one, as the seed defines
//! it; the crawler rung's defaults are the session's (burst 300, the session hourly budget, the
//! anonymous daily quota), each settable on its own.
//!
//! The agent rung (a verified Web Bot Auth signature, `[agents]`) defaults between session
//! and sponsor: burst 600, hourly 20,000, daily 10,000. More than a session's, because the
//! signature proves one agent across every address it calls from (it cannot be had by deleting
//! a cookie or moving address), and one agent is many users' traffic on one budget; less than a
//! sponsor's, because nobody here issued it anything: an API key is still the way up.

use std::num::NonZeroU32;

use serde::Deserialize;

use super::env::{self, EnvMap};
use super::ConfigError;
use crate::model::Tier;

/// The largest burst a tier may have: the embedded store counts burst slots in `u16`.
pub const MAX_BURST: u32 = u16::MAX as u32;

/// One rung as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTier {
    pub burst: Option<u32>,
    pub hourly: Option<u32>,
    pub daily: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTiers {
    #[serde(default)]
    pub anon: RawTier,
    #[serde(default)]
    pub session: RawTier,
    #[serde(default)]
    pub crawler: RawTier,
    #[serde(default)]
    pub agent: RawTier,
    #[serde(default)]
    pub sponsor: RawTier,
    pub soft_delay_ms: Option<u32>,
    pub soft_window: Option<u32>,
    pub hard_delay_ms: Option<u32>,
    pub warn_threshold: Option<u32>,
    /// Session hourly = anonymous hourly × this, when `session.hourly` is not set: an old
    /// file's `[tiers.session] multiplier` ([`super::renamed`]) or `TIER_AUTH_MULTIPLIER`.
    #[serde(skip)]
    pub(crate) session_multiplier: Option<u32>,
}

/// One rung's windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierLimits {
    /// Admitted requests in any 60-second span.
    pub burst: NonZeroU32,
    /// Units per UTC clock hour.
    pub hourly: NonZeroU32,
}

/// The validated ladder (the daily quotas are [`super::QuotaSettings`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierTable {
    pub anon: TierLimits,
    pub session: TierLimits,
    pub crawler: TierLimits,
    pub agent: TierLimits,
    pub sponsor: TierLimits,
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
    /// Each slot has its canonical variable and, for the seed's and older names, an alias.
    pub(crate) fn apply_env(
        raw: &mut RawTiers,
        env: &EnvMap,
        applied: &mut Vec<(&'static str, u32)>,
    ) -> Result<(), ConfigError> {
        use env::*;
        let mut set = |vars: &[&'static str], zero: bool, slot: &mut Option<u32>| {
            let mut found = None;
            for &var in vars {
                if let Some(v) = read_u32(env, var, zero)? {
                    if let Some((first, _)) = found {
                        return Err(ConfigError::Env {
                            var: var.to_string(),
                            message: format!("{first} sets the same value: set one of them"),
                        });
                    }
                    found = Some((var, v));
                }
            }
            if let Some((var, v)) = found {
                *slot = Some(v);
                applied.push((var, v));
            }
            Ok(found.is_some())
        };
        set(
            &[TIER_ANON_BURST, TIER_FREE_BURST],
            false,
            &mut raw.anon.burst,
        )?;
        set(
            &[TIER_ANON_HOURLY, TIER_FREE_HOURLY],
            false,
            &mut raw.anon.hourly,
        )?;
        set(&[TIER_ANON_DAILY, QUOTA_ANON], false, &mut raw.anon.daily)?;
        set(
            &[TIER_SESSION_BURST, TIER_AUTH_BURST],
            false,
            &mut raw.session.burst,
        )?;
        // The seed's multiplier stands for the session hourly budget: set, it replaces the
        // file's, and setting both is ambiguous.
        let mut m = None;
        if set(&[TIER_AUTH_MULTIPLIER, TIER_SESSION_HOURLY], false, &mut m)? {
            if env.contains_key(TIER_AUTH_MULTIPLIER) {
                raw.session_multiplier = m;
                raw.session.hourly = None;
            } else {
                raw.session.hourly = m;
            }
        }
        set(&[TIER_SESSION_DAILY], false, &mut raw.session.daily)?;
        set(&[TIER_CRAWLER_BURST], false, &mut raw.crawler.burst)?;
        set(&[TIER_CRAWLER_HOURLY], false, &mut raw.crawler.hourly)?;
        set(
            &[TIER_CRAWLER_DAILY, QUOTA_CRAWLER],
            false,
            &mut raw.crawler.daily,
        )?;
        set(&[TIER_AGENT_BURST], false, &mut raw.agent.burst)?;
        set(&[TIER_AGENT_HOURLY], false, &mut raw.agent.hourly)?;
        set(
            &[TIER_AGENT_DAILY, QUOTA_AGENT],
            false,
            &mut raw.agent.daily,
        )?;
        set(&[TIER_SPONSOR_BURST], false, &mut raw.sponsor.burst)?;
        set(&[TIER_SPONSOR_HOURLY], false, &mut raw.sponsor.hourly)?;
        set(&[TIER_SPONSOR_DAILY], false, &mut raw.sponsor.daily)?;
        set(&[DELAY_SOFT_MS], true, &mut raw.soft_delay_ms)?;
        set(&[DELAY_SOFT_WINDOW], true, &mut raw.soft_window)?;
        set(&[DELAY_HARD_MS], true, &mut raw.hard_delay_ms)?;
        set(&[QUOTA_WARN_THRESHOLD], true, &mut raw.warn_threshold)?;
        Ok(())
    }

    pub fn validate(raw: &RawTiers) -> Result<Self, ConfigError> {
        let rung = |name: &str, r: &RawTier, burst_d: u32, hourly_d: Option<NonZeroU32>| {
            let hourly = format!("tiers.{name}.hourly");
            Ok::<_, ConfigError>(TierLimits {
                burst: burst(&format!("tiers.{name}.burst"), r.burst, burst_d)?,
                hourly: match (r.hourly, hourly_d) {
                    (None, Some(d)) => d,
                    (v, _) => positive(&hourly, v, 0)?,
                },
            })
        };
        let anon = rung("anon", &raw.anon, 120, NonZeroU32::new(600))?;
        let m = positive("tiers.session.multiplier", raw.session_multiplier, 10)?;
        let times = anon.hourly.checked_mul(m).ok_or_else(|| {
            ConfigError::invalid(
                "tiers.session.multiplier",
                format!("{} × {m} overflows the hourly budget", anon.hourly),
            )
        });
        let session_hourly = match raw.session.hourly {
            Some(_) => None,
            None => Some(times?),
        };
        let session = rung("session", &raw.session, 300, session_hourly)?;
        Ok(TierTable {
            anon,
            session,
            crawler: rung("crawler", &raw.crawler, 300, Some(session.hourly))?,
            agent: rung("agent", &raw.agent, 600, NonZeroU32::new(20_000))?,
            sponsor: rung("sponsor", &raw.sponsor, 2000, NonZeroU32::new(120_000))?,
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
