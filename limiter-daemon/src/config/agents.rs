//! `[agents]`: agents that sign their requests (Web Bot Auth), metered on the `agent` rung
//! (`[tiers.agent]`) as themselves, wherever they call from.
//!
//! - `enabled`: off by default. Verifying means fetching each new agent's key directory over
//!   HTTPS, an outbound call a caller causes; a daemon makes none unless configured.
//! - `allow`: when not empty, only these agents' directories are fetched and verified; other
//!   signed requests are unverified (metered as what they otherwise are).
//! - `refuse`: these agents are never fetched nor verified (unverified, like the above).
//! - `[[agents.budgets]]`: one agent's own burst, hourly budget and daily quota, over the
//!   rung's.
//! - `fetch_timeout`, `allow_internal`: the directory fetch's bound, and the private,
//!   loopback or link-local targets it may reach anyway (none by default; tests serve from
//!   loopback).
//! - `max_signature_lifetime`: the longest a signature lives (`expires − created`, and its
//!   age since `created`); 5 min by default, as the Web Bot Auth draft recommends.
//! - `nonce_capacity`: nonces of verified signatures remembered at most (a nonce verifies
//!   once within its signature's life; past the bound new ones are unverified).
//!
//! Agents are written as their origin (`https://chatgpt.com`) or their directory URL; both
//! are kept as the directory URL, the agent's identity.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::keys::duration;
use super::tiers::positive;
use super::ConfigError;
use crate::model::agent::directory_url;

/// `max_signature_lifetime`'s default: the Web Bot Auth draft's recommendation.
pub const DEFAULT_MAX_SIGNATURE_LIFETIME: Duration = Duration::from_secs(300);
/// `nonce_capacity`'s default (about 20 bytes each: 4 MB).
pub const DEFAULT_NONCE_CAPACITY: usize = 200_000;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgents {
    pub enabled: Option<bool>,
    pub allow: Option<Vec<String>>,
    pub refuse: Option<Vec<String>>,
    pub fetch_timeout: Option<String>,
    pub allow_internal: Option<Vec<String>>,
    pub max_signature_lifetime: Option<String>,
    pub nonce_capacity: Option<usize>,
    pub budgets: Option<Vec<RawAgentBudget>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgentBudget {
    pub agent: String,
    pub burst: Option<u32>,
    pub hourly: Option<u32>,
    pub daily: Option<u32>,
}

/// One agent's own windows; `None`: the rung's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentBudget {
    pub burst: Option<NonZeroU32>,
    pub hourly: Option<NonZeroU32>,
    pub daily: Option<NonZeroU32>,
}

/// The validated `[agents]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSettings {
    pub enabled: bool,
    /// Directory URLs; empty: any agent.
    pub allow: Vec<String>,
    /// Directory URLs never fetched nor verified.
    pub refuse: Vec<String>,
    pub fetch_timeout: Duration,
    pub allow_internal: Vec<IpNet>,
    /// The longest a signature lives: `expires − created`, and its age since `created`.
    pub max_signature_lifetime: Duration,
    /// Nonces of verified signatures remembered at most.
    pub nonce_capacity: usize,
    /// By directory URL.
    pub budgets: HashMap<String, AgentBudget>,
    /// Replay only (never read from a file): a `Signature-Agent` naming a directory is taken
    /// as the agent, unverified. A log keeps no signature to verify, nor its time to check.
    pub claims_only: bool,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings::validate(RawAgents::default()).expect("defaults are valid")
    }
}

fn directory(field: &str, agent: &str) -> Result<String, ConfigError> {
    directory_url(agent).ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!("{agent:?} is not an agent: write its https origin or directory URL"),
        )
    })
}

fn directories(field: &str, list: Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    list.unwrap_or_default()
        .iter()
        .map(|a| directory(field, a))
        .collect()
}

impl AgentSettings {
    /// Whether the agent of directory URL `dir` may be verified.
    pub fn may_verify(&self, dir: &str) -> bool {
        self.enabled
            && !self.refuse.iter().any(|r| r == dir)
            && (self.allow.is_empty() || self.allow.iter().any(|a| a == dir))
    }

    pub fn validate(raw: RawAgents) -> Result<Self, ConfigError> {
        let allow = directories("agents.allow", raw.allow)?;
        let refuse = directories("agents.refuse", raw.refuse)?;
        if let Some(both) = allow.iter().find(|a| refuse.contains(a)) {
            return Err(ConfigError::invalid(
                "agents.refuse",
                format!("{both} is also in agents.allow"),
            ));
        }
        let fetch_timeout = duration(
            "agents.fetch_timeout",
            raw.fetch_timeout,
            Duration::from_secs(5),
        )?;
        if fetch_timeout.is_zero() || fetch_timeout > Duration::from_secs(60) {
            return Err(ConfigError::invalid(
                "agents.fetch_timeout",
                "must be more than 0 and at most 60s",
            ));
        }
        let max_signature_lifetime = duration(
            "agents.max_signature_lifetime",
            raw.max_signature_lifetime,
            DEFAULT_MAX_SIGNATURE_LIFETIME,
        )?;
        if max_signature_lifetime < Duration::from_secs(1)
            || max_signature_lifetime > Duration::from_secs(24 * 3600)
        {
            return Err(ConfigError::invalid(
                "agents.max_signature_lifetime",
                "must be at least 1s and at most 24h",
            ));
        }
        let nonce_capacity = raw.nonce_capacity.unwrap_or(DEFAULT_NONCE_CAPACITY);
        if nonce_capacity == 0 {
            return Err(ConfigError::invalid(
                "agents.nonce_capacity",
                "must be at least 1",
            ));
        }
        let allow_internal = super::nets::parse(
            "agents.allow_internal",
            &raw.allow_internal.unwrap_or_default(),
        )?;
        let mut budgets = HashMap::new();
        for (i, b) in raw.budgets.unwrap_or_default().into_iter().enumerate() {
            let field = |name: &str| format!("agents.budgets[{i}].{name}");
            let dir = directory(&field("agent"), &b.agent)?;
            let opt = |name: &str, v: Option<u32>| {
                v.map(|v| positive(&field(name), Some(v), 0)).transpose()
            };
            let budget = AgentBudget {
                burst: opt("burst", b.burst)?,
                hourly: opt("hourly", b.hourly)?,
                daily: opt("daily", b.daily)?,
            };
            if let Some(burst) = budget.burst {
                super::tiers::burst(&field("burst"), Some(burst.get()), 0)?;
            }
            if budgets.insert(dir.clone(), budget).is_some() {
                return Err(ConfigError::invalid(
                    field("agent"),
                    format!("{dir} has a budget already"),
                ));
            }
        }
        Ok(AgentSettings {
            enabled: raw.enabled.unwrap_or(false),
            allow,
            refuse,
            fetch_timeout,
            allow_internal,
            max_signature_lifetime,
            nonce_capacity,
            budgets,
            claims_only: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::env::EnvMap;
    use crate::config::{Config, ConfigError};

    fn config(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(text, Path::new("a.toml"), &EnvMap::new())
    }

    #[test]
    fn agents_are_kept_as_their_directory_and_budgets_override_the_rung() {
        let cfg = config(
            "[agents]\nenabled = true\nrefuse = [\"https://bad.example\"]\n\
             [[agents.budgets]]\nagent = \"https://Chatgpt.com\"\nhourly = 50000\n",
        )
        .unwrap();
        let a = &cfg.agents;
        let chatgpt = "https://chatgpt.com/.well-known/http-message-signatures-directory";
        assert_eq!(a.budgets[chatgpt].hourly.unwrap().get(), 50000);
        assert_eq!(a.budgets[chatgpt].burst, None);
        assert!(a.may_verify(chatgpt));
        assert!(!a.may_verify("https://bad.example/.well-known/http-message-signatures-directory"));
        let off = config("").unwrap();
        assert!(!off.agents.may_verify(chatgpt), "off by default");
        assert_eq!(
            (
                off.agents.max_signature_lifetime.as_secs(),
                off.agents.nonce_capacity
            ),
            (300, 200_000),
            "minutes, not hours"
        );
        let short =
            config("[agents]\nmax_signature_lifetime = \"90s\"\nnonce_capacity = 7\n").unwrap();
        assert_eq!(
            (
                short.agents.max_signature_lifetime.as_secs(),
                short.agents.nonce_capacity
            ),
            (90, 7)
        );
        let only = config("[agents]\nenabled = true\nallow = [\"https://chatgpt.com\"]\n").unwrap();
        assert!(only.agents.may_verify(chatgpt));
        assert!(!only.agents.may_verify("https://x.example/.well-known/x"));
    }

    #[test]
    fn a_bad_entry_is_an_error_naming_field_and_line() {
        for (text, field, line) in [
            ("[agents]\nallow = [\"http://plain.example\"]\n", "agents.allow", 2),
            (
                "[agents]\nenabled = true\n\n[[agents.budgets]]\nagent = \"https://a.example\"\nhourly = 0\n",
                "agents.budgets[0].hourly",
                6,
            ),
            (
                "[[agents.budgets]]\nagent = \"https://a.example\"\n[[agents.budgets]]\nagent = \"https://a.example/\"\n",
                "agents.budgets[1].agent",
                4,
            ),
            ("[agents]\nfetch_timeout = \"0s\"\n", "agents.fetch_timeout", 2),
            (
                "[agents]\nmax_signature_lifetime = \"25h\"\n",
                "agents.max_signature_lifetime",
                2,
            ),
            ("[agents]\n\nnonce_capacity = 0\n", "agents.nonce_capacity", 3),
            ("[agents]\nallow_internal = [\"lo\"]\n", "agents.allow_internal", 2),
            (
                "[agents]\nallow = [\"https://a.example\"]\nrefuse = [\"https://a.example\"]\n",
                "agents.refuse",
                3,
            ),
        ] {
            match config(text) {
                Err(ConfigError::InvalidAt { field: f, line: l, .. }) => {
                    assert_eq!((f.as_str(), l), (field, line), "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
