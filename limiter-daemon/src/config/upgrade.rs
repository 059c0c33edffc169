//! `[upgrade]`: where a 429 tells the caller to go for the next rung.

use std::sync::Arc;

use serde::Deserialize;

use super::tiers::TierTable;
use super::ConfigError;
use crate::model::Tier;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpgrade {
    pub login: Option<String>,
    pub account: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradePaths {
    /// anon → session: sign in here.
    pub login: String,
    /// session → sponsor: get an API key here.
    pub account: String,
    /// The two sentences, rendered once: every decision carries one, and cloning an `Arc` is
    /// all that costs per request.
    anon_hint: Arc<str>,
    session_hint: Arc<str>,
    crawler_hint: Arc<str>,
    agent_hint: Arc<str>,
}

impl UpgradePaths {
    /// Validates `raw`; the anonymous sentence quotes the session budget from `tiers`.
    pub fn validate(raw: RawUpgrade, tiers: &TierTable) -> Result<Self, ConfigError> {
        let (session, anon) = (tiers.session.hourly.get(), tiers.anon.hourly.get());
        let allowance = match session % anon {
            0 => format!("{}x the anonymous budget", session / anon),
            _ => format!("{session} an hour"),
        };
        let check = |field: &str, v: Option<String>, d: &str| -> Result<String, ConfigError> {
            let v = v.unwrap_or_else(|| d.to_string());
            if v.is_empty() || v.chars().any(char::is_control) {
                return Err(ConfigError::invalid(
                    field,
                    format!("{v:?} is not a path or URL"),
                ));
            }
            Ok(v)
        };
        let login = check("upgrade.login", raw.login, "/login")?;
        let account = check("upgrade.account", raw.account, "/account")?;
        Ok(UpgradePaths {
            anon_hint: format!("Sign in at {login} for the session allowance ({allowance}).")
                .into(),
            session_hint: format!("Get an API key at {account} for the sponsor allowance.").into(),
            // A search engine has no account to sign in with: it is told to pace itself by
            // the rate-limit fields, and where more is to be had.
            crawler_hint: format!(
                "Verified crawler: pace requests by Retry-After and the RateLimit fields; \
                 for more, the site owner can issue an API key at {account}."
            )
            .into(),
            // A signed agent acts for someone who may have an account: it is told to pace
            // itself, or that its user can get a key.
            agent_hint: format!(
                "Verified agent: pace requests by Retry-After and the RateLimit fields, or get \
                 an API key at {account} for the sponsor allowance."
            )
            .into(),
            login,
            account,
        })
    }

    /// The sentence naming the next rung, or `None` at the top of the ladder.
    pub fn hint(&self, tier: Tier) -> Option<Arc<str>> {
        match tier {
            Tier::Anon => Some(Arc::clone(&self.anon_hint)),
            Tier::Session => Some(Arc::clone(&self.session_hint)),
            Tier::Crawler => Some(Arc::clone(&self.crawler_hint)),
            Tier::Agent => Some(Arc::clone(&self.agent_hint)),
            Tier::Sponsor => None,
        }
    }
}
