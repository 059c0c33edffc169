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
use std::time::Duration;

use serde::Deserialize;

use super::env::{read_u32, EnvMap};
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
    /// file's `[tiers.session] multiplier` ([`super::renamed`]) or `"TIER_AUTH_MULTIPLIER"`.
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
    /// Units per UTC day (`None`: no daily quota). Token holders have `[jwt] daily` instead.
    pub daily: Option<NonZeroU32>,
}

/// The validated ladder.
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
    pub(crate) fn apply_env(
        raw: &mut RawTiers,
        env: &EnvMap,
        applied: &mut Vec<(&'static str, u32)>,
    ) -> Result<(), ConfigError> {
        type Slot = fn(&mut RawTiers) -> &mut Option<u32>;
        // The variable named as its key, the seed's (or an older) name for it, zero allowed.
        #[rustfmt::skip]
        let slots: [(&'static str, Option<&'static str>, bool, Slot); 19] = [
            ("TIER_ANON_BURST",      Some("TIER_FREE_BURST"),  false, |r| &mut r.anon.burst),
            ("TIER_ANON_HOURLY",     Some("TIER_FREE_HOURLY"), false, |r| &mut r.anon.hourly),
            ("TIER_ANON_DAILY",      Some("QUOTA_ANON"),       false, |r| &mut r.anon.daily),
            ("TIER_SESSION_BURST",   Some("TIER_AUTH_BURST"),  false, |r| &mut r.session.burst),
            ("TIER_SESSION_HOURLY",  None,                     false, |r| &mut r.session.hourly),
            ("TIER_SESSION_DAILY",   None,                     false, |r| &mut r.session.daily),
            ("TIER_CRAWLER_BURST",   None,                     false, |r| &mut r.crawler.burst),
            ("TIER_CRAWLER_HOURLY",  None,                     false, |r| &mut r.crawler.hourly),
            ("TIER_CRAWLER_DAILY",   Some("QUOTA_CRAWLER"),    false, |r| &mut r.crawler.daily),
            ("TIER_AGENT_BURST",     None,                     false, |r| &mut r.agent.burst),
            ("TIER_AGENT_HOURLY",    None,                     false, |r| &mut r.agent.hourly),
            ("TIER_AGENT_DAILY",     Some("QUOTA_AGENT"),      false, |r| &mut r.agent.daily),
            ("TIER_SPONSOR_BURST",   None,                     false, |r| &mut r.sponsor.burst),
            ("TIER_SPONSOR_HOURLY",  None,                     false, |r| &mut r.sponsor.hourly),
            ("TIER_SPONSOR_DAILY",   None,                     false, |r| &mut r.sponsor.daily),
            ("DELAY_SOFT_MS",        None,                     true,  |r| &mut r.soft_delay_ms),
            ("DELAY_SOFT_WINDOW",    None,                     true,  |r| &mut r.soft_window),
            ("DELAY_HARD_MS",        None,                     true,  |r| &mut r.hard_delay_ms),
            ("QUOTA_WARN_THRESHOLD", None,                     true,  |r| &mut r.warn_threshold),
        ];
        // The seed's multiplier stands for the session hourly budget (anonymous × it).
        let multiplier = ("TIER_AUTH_MULTIPLIER", "TIER_SESSION_HOURLY");
        for (var, alias, zero, slot) in slots {
            let alias = alias.or((var == multiplier.1).then_some(multiplier.0));
            let found = match (read_u32(env, var, zero)?, alias) {
                (Some(_), Some(a)) if env.contains_key(a) => {
                    return Err(ConfigError::Env {
                        var: a.to_string(),
                        message: format!("{var} sets the same budget: set one of them"),
                    })
                }
                (Some(v), _) => Some((var, v)),
                (None, Some(a)) => read_u32(env, a, zero)?.map(|v| (a, v)),
                (None, None) => None,
            };
            if let Some((var, v)) = found {
                applied.push((var, v));
                if var == multiplier.0 {
                    raw.session_multiplier = Some(v);
                    raw.session.hourly = None;
                } else {
                    *slot(raw) = Some(v);
                }
            }
        }
        Ok(())
    }

    pub fn validate(raw: &RawTiers) -> Result<Self, ConfigError> {
        let rung = |name: &str, r: &RawTier, b: u32, h: u32, d: Option<NonZeroU32>| {
            let field = |w: &str| format!("tiers.{name}.{w}");
            Ok::<_, ConfigError>(TierLimits {
                burst: burst(&field("burst"), r.burst, b)?,
                hourly: positive(&field("hourly"), r.hourly, h)?,
                daily: match r.daily {
                    Some(v) => Some(positive(&field("daily"), Some(v), 0)?),
                    None => d,
                },
            })
        };
        let anon = rung("anon", &raw.anon, 120, 600, NonZeroU32::new(1_000))?;
        let m = positive("tiers.session.multiplier", raw.session_multiplier, 10)?;
        let times = anon.hourly.get().saturating_mul(m.get());
        // A session's and a crawler's daily quota is the anonymous one unless set: a cookie
        // is forgeable.
        let session = rung("session", &raw.session, 300, times, anon.daily)?;
        let crawler_hourly = session.hourly.get();
        Ok(TierTable {
            anon,
            session,
            crawler: rung("crawler", &raw.crawler, 300, crawler_hourly, anon.daily)?,
            agent: rung("agent", &raw.agent, 600, 20_000, NonZeroU32::new(10_000))?,
            sponsor: rung("sponsor", &raw.sponsor, 2000, 120_000, None)?,
        })
    }
}

/// Past a daily quota: the quota document's `T_warn`, `D_soft` for the first `soft_window`
/// units over, `D_hard` after; and token holders' own quota, `L_jwt` (`[jwt] daily`).
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

/// `v`, else `d`, refused when 0.
pub(crate) fn positive(field: &str, v: Option<u32>, d: u32) -> Result<NonZeroU32, ConfigError> {
    NonZeroU32::new(v.unwrap_or(d)).ok_or_else(|| ConfigError::invalid(field, "must be at least 1"))
}

pub(crate) fn burst(field: &str, v: Option<u32>, d: u32) -> Result<NonZeroU32, ConfigError> {
    let v = positive(field, v, d)?;
    if v.get() > MAX_BURST {
        let message = format!("{v} is above the largest supported burst {MAX_BURST}");
        return Err(ConfigError::invalid(field, message));
    }
    Ok(v)
}
