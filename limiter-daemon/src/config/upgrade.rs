//! `[upgrade]`: where a 429 tells the caller to go for the next rung.

use serde::Deserialize;

use super::ConfigError;
use crate::engine::decision::Tier;

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
}

impl UpgradePaths {
    pub fn validate(raw: RawUpgrade) -> Result<Self, ConfigError> {
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
        Ok(UpgradePaths {
            login: check("upgrade.login", raw.login, "/login")?,
            account: check("upgrade.account", raw.account, "/account")?,
        })
    }

    /// The sentence naming the next rung, or `None` at the top of the ladder.
    pub fn hint(&self, tier: Tier) -> Option<String> {
        match tier {
            Tier::Anon => Some(format!(
                "Sign in at {} for the session allowance (10x the anonymous budget).",
                self.login
            )),
            Tier::Session => Some(format!(
                "Get an API key at {} for the sponsor allowance.",
                self.account
            )),
            Tier::Sponsor => None,
        }
    }
}
