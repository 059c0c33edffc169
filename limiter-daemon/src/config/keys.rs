//! `[keys]`: API key shape and verification cache. A key reads `<prefix>_<8 hex>_<20+ chars>`.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;

use super::tiers::positive;
use super::ConfigError;
use crate::model::duration_text::{self, Units};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeys {
    pub prefix: Option<String>,
    /// Header carrying a key besides `Authorization: Bearer` (default `x-api-key`).
    pub header: Option<String>,
    pub default_hourly_limit: Option<u32>,
    /// How long a verified answer is served before it is refreshed behind the request.
    pub cache_ttl: Option<String>,
    /// How long an unknown/revoked answer is kept.
    pub negative_ttl: Option<String>,
    /// Most key ids the cache remembers.
    pub cache_capacity: Option<usize>,
    /// Most lookups in flight for keys presented from one source address (grouped).
    pub max_pending_per_source: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySettings {
    pub prefix: String,
    pub header: http::HeaderName,
    pub default_hourly_limit: NonZeroU32,
    pub cache_ttl: Duration,
    pub negative_ttl: Duration,
    pub cache_capacity: usize,
    /// Lookups in flight per source address; past it a new key counts as no key until they
    /// land, so invented key ids cannot buy store lookups without bound.
    pub max_pending_per_source: NonZeroU32,
}

pub(crate) fn duration(
    field: &str,
    v: Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) => duration_text::parse(&s, Units::Config)
            .map_err(|e| ConfigError::invalid(field, e.to_string())),
    }
}

impl KeySettings {
    pub fn validate(raw: RawKeys) -> Result<Self, ConfigError> {
        let prefix = raw.prefix.unwrap_or_else(|| "rsa".to_string());
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(ConfigError::invalid(
                "keys.prefix",
                format!("{prefix:?} must be one or more ASCII letters or digits"),
            ));
        }
        let header_text = raw.header.unwrap_or_else(|| "x-api-key".to_string());
        let header = http::HeaderName::from_bytes(header_text.as_bytes()).map_err(|_| {
            ConfigError::invalid(
                "keys.header",
                format!("{header_text:?} is not a header name"),
            )
        })?;
        let cache_capacity = raw.cache_capacity.unwrap_or(100_000);
        if cache_capacity == 0 {
            return Err(ConfigError::invalid(
                "keys.cache_capacity",
                "must be at least 1",
            ));
        }
        Ok(KeySettings {
            prefix,
            header,
            default_hourly_limit: positive(
                "keys.default_hourly_limit",
                raw.default_hourly_limit,
                5_000,
            )?,
            cache_ttl: duration("keys.cache_ttl", raw.cache_ttl, Duration::from_secs(60))?,
            negative_ttl: duration(
                "keys.negative_ttl",
                raw.negative_ttl,
                Duration::from_secs(10),
            )?,
            cache_capacity,
            max_pending_per_source: positive(
                "keys.max_pending_per_source",
                raw.max_pending_per_source,
                8,
            )?,
        })
    }
}
