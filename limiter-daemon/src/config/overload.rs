//! `[overload]`: the ladder when the app saturates. How many requests the proxy lets reach the
//! upstream at once (a fixed number, or `"auto"`: learned from its latency within
//! `min_limit`..=`max_limit`), the share of that limit each tier may fill, and the routes never
//! shed. The proxy's side lives in `crate::edge::overload`.

use serde::Deserialize;

use super::ConfigError;
use crate::model::request_path;
use crate::model::Tier;

/// `max_inflight` as written: a number, or `"auto"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum MaxInflightText {
    Fixed(i64),
    Named(String),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShares {
    pub anon: Option<f64>,
    pub session: Option<f64>,
    pub crawler: Option<f64>,
    pub agent: Option<f64>,
    pub sponsor: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOverload {
    pub enabled: Option<bool>,
    pub max_inflight: Option<MaxInflightText>,
    pub min_limit: Option<u32>,
    pub max_limit: Option<u32>,
    #[serde(default)]
    pub shares: RawShares,
    pub never_shed: Option<Vec<String>>,
}

/// How the limit on requests in flight is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InflightLimit {
    Fixed(u32),
    /// Learned from the upstream's latency, within the bounds.
    Auto {
        min: u32,
        max: u32,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct OverloadSettings {
    pub enabled: bool,
    pub limit: InflightLimit,
    /// The fraction of the limit each tier may fill, by [`Tier::index`].
    pub shares: [f64; Tier::ALL.len()],
    /// Path prefixes (normal form) whose requests are never shed.
    pub never_shed: Vec<String>,
}

// The shares are checked to lie in (0, 1]: never NaN, so equality is total.
impl Eq for OverloadSettings {}

impl Default for OverloadSettings {
    fn default() -> Self {
        OverloadSettings::validate(RawOverload::default()).expect("defaults are valid")
    }
}

impl OverloadSettings {
    pub fn validate(raw: RawOverload) -> Result<Self, ConfigError> {
        let bound = |field: &str, v: Option<u32>, default: u32| match v {
            Some(0) => Err(ConfigError::invalid(field, "must be at least 1")),
            v => Ok(v.unwrap_or(default)),
        };
        let min = bound("overload.min_limit", raw.min_limit, 4)?;
        let max = bound("overload.max_limit", raw.max_limit, 1000)?;
        if max < min {
            return Err(ConfigError::invalid(
                "overload.max_limit",
                format!("{max} is below `overload.min_limit` ({min})"),
            ));
        }
        let limit = match raw.max_inflight {
            None => InflightLimit::Auto { min, max },
            Some(MaxInflightText::Named(s)) if s == "auto" => InflightLimit::Auto { min, max },
            Some(MaxInflightText::Fixed(n)) if n >= 1 => {
                InflightLimit::Fixed(u32::try_from(n).unwrap_or(u32::MAX))
            }
            Some(other) => {
                return Err(ConfigError::invalid(
                    "overload.max_inflight",
                    format!("{other:?} is neither a number of at least 1 nor \"auto\""),
                ))
            }
        };
        let s = raw.shares;
        let mut shares = [0.0; Tier::ALL.len()];
        for (tier, v, default) in [
            (Tier::Anon, s.anon, 0.6),
            (Tier::Session, s.session, 0.85),
            (Tier::Crawler, s.crawler, 0.7),
            (Tier::Agent, s.agent, 0.7),
            (Tier::Sponsor, s.sponsor, 1.0),
        ] {
            let v = v.unwrap_or(default);
            if !(v > 0.0 && v <= 1.0) {
                return Err(ConfigError::invalid(
                    format!("overload.shares.{}", tier.as_str()),
                    format!("{v} is not above 0 and at most 1"),
                ));
            }
            shares[tier.index()] = v;
        }
        let mut never_shed = Vec::new();
        for p in raw.never_shed.unwrap_or_default() {
            if !p.starts_with('/') {
                return Err(ConfigError::invalid(
                    "overload.never_shed",
                    format!("{p:?} is not a path (it must start with `/`)"),
                ));
            }
            never_shed.push(request_path::normal(&p).trim_end_matches('/').to_string());
        }
        Ok(OverloadSettings {
            enabled: raw.enabled.unwrap_or(false),
            limit,
            shares,
            never_shed,
        })
    }

    /// Whether `path` (as the request names it) is under a never-shed prefix: the prefix
    /// itself, or below it at a segment boundary (`/login`, `/login/x`, not `/loginx`).
    pub fn never_sheds(&self, path: &str) -> bool {
        if self.never_shed.is_empty() {
            return false;
        }
        let path = request_path::normal(path);
        self.never_shed.iter().any(|p| {
            path.strip_prefix(p.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<OverloadSettings, ConfigError> {
        OverloadSettings::validate(toml::from_str(text).unwrap())
    }

    #[test]
    fn defaults_off_auto_and_the_ladder_shares() {
        let s = OverloadSettings::default();
        assert!(!s.enabled);
        assert_eq!(s.limit, InflightLimit::Auto { min: 4, max: 1000 });
        assert_eq!(s.shares, [0.6, 0.85, 0.7, 0.7, 1.0]);
    }

    #[test]
    fn fixed_auto_and_bad_values() {
        let s = parse("max_inflight = 8\nnever_shed = [\"/login\", \"/account/\"]").unwrap();
        assert_eq!(s.limit, InflightLimit::Fixed(8));
        assert!(s.never_sheds("/login") && s.never_sheds("/account/me"));
        assert!(s.never_sheds("/x/../login?next=/"));
        assert!(!s.never_sheds("/loginx") && !s.never_sheds("/"));
        let s = parse("max_inflight = \"auto\"\nmin_limit = 2\nmax_limit = 9").unwrap();
        assert_eq!(s.limit, InflightLimit::Auto { min: 2, max: 9 });
        for (text, field) in [
            ("max_inflight = 0", "overload.max_inflight"),
            ("max_inflight = \"lots\"", "overload.max_inflight"),
            ("min_limit = 5\nmax_limit = 4", "overload.max_limit"),
            ("shares = { anon = 1.5 }", "overload.shares.anon"),
            ("shares = { sponsor = 0 }", "overload.shares.sponsor"),
            ("never_shed = [\"login\"]", "overload.never_shed"),
        ] {
            match parse(text) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
