//! Environment overrides: the seed's variable names, read from an injected map so tests never
//! touch the process environment. The environment wins over the file; a malformed value is an
//! error naming the variable, never a silent default.

use std::collections::HashMap;

use super::ConfigError;

/// Variable name → value. Build it with [`env_from_process`] in the binary, by hand in tests.
pub type EnvMap = HashMap<String, String>;

/// Every variable the configuration reads, in the order `check-config` reports them: one per
/// `[tiers]` key, named as it (`TIER_<RUNG>_<BURST|HOURLY|DAILY>`), then the aliases: the seed's
/// names (`free` is `anon`, `auth` is `session`) and the older daily ones.
pub const ENV_VARS: &[&str] = &[
    "TIER_ANON_BURST",
    "TIER_ANON_HOURLY",
    "TIER_ANON_DAILY",
    "TIER_SESSION_BURST",
    "TIER_SESSION_HOURLY",
    "TIER_SESSION_DAILY",
    "TIER_CRAWLER_BURST",
    "TIER_CRAWLER_HOURLY",
    "TIER_CRAWLER_DAILY",
    "TIER_AGENT_BURST",
    "TIER_AGENT_HOURLY",
    "TIER_AGENT_DAILY",
    "TIER_SPONSOR_BURST",
    "TIER_SPONSOR_HOURLY",
    "TIER_SPONSOR_DAILY",
    "QUOTA_TOKEN",
    "DELAY_SOFT_MS",
    "DELAY_SOFT_WINDOW",
    "DELAY_HARD_MS",
    "QUOTA_WARN_THRESHOLD",
    "TIER_FREE_BURST",
    "TIER_FREE_HOURLY",
    "TIER_AUTH_BURST",
    "TIER_AUTH_MULTIPLIER",
    "QUOTA_ANON",
    "QUOTA_CRAWLER",
    "QUOTA_AGENT",
];

/// The known variables from the process environment (only those; nothing else is read).
pub fn env_from_process() -> EnvMap {
    ENV_VARS
        .iter()
        .filter_map(|var| {
            // A non-UTF-8 value is kept (lossily) so that parsing reports it instead of ignoring it.
            std::env::var_os(var).map(|v| (var.to_string(), v.to_string_lossy().into_owned()))
        })
        .collect()
}

/// Reads `var` as an unsigned integer. `allow_zero = false` for limits, which must be positive.
pub(crate) fn read_u32(
    env: &EnvMap,
    var: &'static str,
    allow_zero: bool,
) -> Result<Option<u32>, ConfigError> {
    let Some(text) = env.get(var) else {
        return Ok(None);
    };
    let value: u32 = text.trim().parse().map_err(|_| ConfigError::Env {
        var: var.to_string(),
        message: format!(
            "{text:?} is not a non-negative integer (at most {})",
            u32::MAX
        ),
    })?;
    if value == 0 && !allow_zero {
        return Err(ConfigError::Env {
            var: var.to_string(),
            message: "must be at least 1".to_string(),
        });
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// What `apply_env` reads is what `env_from_process` takes from the process.
    #[test]
    fn every_variable_applied_is_listed() {
        let src = include_str!("tiers.rs").to_string() + include_str!("file.rs");
        let named: std::collections::BTreeSet<&str> = src
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|w| w.len() > 8 && w.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
            .collect();
        assert_eq!(named, ENV_VARS.iter().copied().collect());
    }

    #[test]
    fn malformed_value_names_the_variable() {
        let err = read_u32(&env(&[("QUOTA_ANON", "lots")]), "QUOTA_ANON", false).unwrap_err();
        assert!(err.to_string().contains("QUOTA_ANON"), "{err}");
    }

    #[test]
    fn zero_limit_is_refused_but_zero_threshold_is_not() {
        assert!(read_u32(&env(&[("QUOTA_ANON", "0")]), "QUOTA_ANON", false).is_err());
        assert_eq!(
            read_u32(
                &env(&[("QUOTA_WARN_THRESHOLD", "0")]),
                "QUOTA_WARN_THRESHOLD",
                true
            )
            .unwrap(),
            Some(0)
        );
    }
}
