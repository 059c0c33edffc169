//! `[crawlers]`: how a search engine or archive proves it is one, and so is metered on the
//! `crawler` rung (`[tiers.crawler]`).
//!
//! - `range_files`: the JSON range files the engines publish ([`super::crawler_ranges`]). A
//!   source inside one is a crawler, whatever its user agent. Read here, at start and on every
//!   reload (a broken file is a config error naming the field and line, so a reload keeps the
//!   old ranges), and re-read when a file changes on disk (every `range_poll`).
//! - `range_urls`, `refresh`, `ca_file`, `allow_private_sources`: the published lists the
//!   daemon fetches itself ([`super::proof_sources`]); what was fetched is `fetched`, set by the
//!   engine (empty as validated here).
//! - `user_agents`: what claims a crawler (case-insensitive substrings). Only a claiming caller
//!   is looked up in DNS (otherwise every anonymous caller would cost a PTR query), and only a
//!   claiming caller can be a fake.
//! - `rdns_suffixes`, `resolver`, `dns_*`: forward-confirmed reverse DNS, looked up behind the
//!   request and cached. `rdns_suffixes = []` turns DNS proof off.

use std::net::{IpAddr, SocketAddr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::crawler_ranges::{self, CrawlerRanges};
use super::keys::duration;
use super::proof_sources::{self, RangeUrl, RawRangeUrl, SourceFetch};
use super::ConfigError;
use crate::model::prefix_set::PrefixSet;

/// The crawlers of the default suffixes: Google's and Bing's own names for their fetchers.
pub const DEFAULT_USER_AGENTS: &[&str] = &[
    "Googlebot",
    "Google-InspectionTool",
    "GoogleOther",
    "Storebot-Google",
    "AdsBot-Google",
    "bingbot",
    "BingPreview",
    "msnbot",
    "adidxbot",
];

pub const DEFAULT_RDNS_SUFFIXES: &[&str] = &[".googlebot.com", ".google.com", ".search.msn.com"];

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCrawlers {
    pub range_files: Option<Vec<PathBuf>>,
    pub range_poll: Option<String>,
    /// `[{ url = "https://…", crawler = "googlebot" }, …]`: fetched on a schedule.
    pub range_urls: Option<Vec<RawRangeUrl>>,
    /// Between two fetches of one source (range lists and `[networks] asn_url`).
    pub refresh: Option<String>,
    /// PEM certificates trusted for the sources besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Addresses or CIDRs a source may resolve to although private or loopback.
    pub allow_private_sources: Option<Vec<String>>,
    pub user_agents: Option<Vec<String>>,
    pub rdns_suffixes: Option<Vec<String>>,
    pub resolver: Option<String>,
    pub dns_timeout: Option<String>,
    pub dns_ttl: Option<String>,
    pub dns_negative_ttl: Option<String>,
    pub dns_cache_capacity: Option<usize>,
    pub dns_max_in_flight: Option<u32>,
    /// New lookups one network (`[networks]` prefix) may cause per hour.
    pub dns_lookups_per_network: Option<u32>,
}

/// The validated `[crawlers]` section.
#[derive(Clone, Debug)]
pub struct CrawlerSettings {
    pub range_files: Vec<PathBuf>,
    /// The files' prefixes as read when this config was validated.
    pub ranges: Arc<CrawlerRanges>,
    /// How often the files' size and modification time are checked.
    pub range_poll: Duration,
    /// The lists fetched on a schedule, each with the crawler its ranges prove.
    pub range_urls: Vec<RangeUrl>,
    /// How they (and `[networks] asn_url`) are fetched.
    pub sources: SourceFetch,
    /// The last good prefixes of every `range_urls` source, set by the engine when a fetch
    /// lands (and at start from the copies on disk); empty as validated.
    pub fetched: Arc<PrefixSet>,
    /// Substrings (any case) of a user agent that claims a crawler.
    pub user_agents: Vec<String>,
    /// Lower case, with a leading dot and no trailing one: `.googlebot.com`.
    pub rdns_suffixes: Vec<String>,
    /// `None`: the system's resolvers (`/etc/resolv.conf`).
    pub resolver: Option<SocketAddr>,
    /// Bound on one whole check (PTR plus the forward lookups).
    pub dns_timeout: Duration,
    /// How long a confirmed address stays a crawler before it is checked again.
    pub dns_ttl: Duration,
    /// How long a refuted (or failed) address stays unverified before it is checked again.
    pub dns_negative_ttl: Duration,
    pub dns_cache_capacity: NonZeroUsize,
    /// Checks in flight at once; past it a claiming caller stays pending (metered as what it
    /// otherwise is) until one lands.
    pub dns_max_in_flight: NonZeroU32,
    /// New lookups (not a confirmed crawler's refresh) one network, the `[networks]` prefix
    /// (IPv4 /24, IPv6 /48 by default), may cause per hour; past it its claiming callers stay
    /// pending.
    pub dns_lookups_per_network: NonZeroU32,
}

impl Default for CrawlerSettings {
    fn default() -> Self {
        CrawlerSettings::validate(RawCrawlers::default()).expect("defaults are valid")
    }
}

impl CrawlerSettings {
    /// Whether any caller can be checked: ranges, or user agents with DNS proof.
    pub fn enabled(&self) -> bool {
        !self.ranges.set.is_empty() || !self.range_urls.is_empty() || !self.user_agents.is_empty()
    }

    pub fn validate(raw: RawCrawlers) -> Result<Self, ConfigError> {
        let range_files = raw.range_files.unwrap_or_default();
        let ranges = crawler_ranges::load(&range_files)
            .map_err(|e| ConfigError::invalid("crawlers.range_files", e.to_string()))?;
        let range_poll = duration(
            "crawlers.range_poll",
            raw.range_poll,
            Duration::from_secs(30),
        )?;
        if range_poll < Duration::from_millis(100) {
            return Err(ConfigError::invalid(
                "crawlers.range_poll",
                "must be at least 100ms",
            ));
        }
        let user_agents = match raw.user_agents {
            None => DEFAULT_USER_AGENTS.iter().map(|s| s.to_string()).collect(),
            Some(list) => list,
        };
        if let Some(bad) = user_agents
            .iter()
            .find(|p| p.trim().is_empty() || p.chars().any(char::is_control))
        {
            return Err(ConfigError::invalid(
                "crawlers.user_agents",
                format!("{bad:?} is not a user-agent pattern (empty, or a control character)"),
            ));
        }
        let rdns_suffixes = match raw.rdns_suffixes {
            None => DEFAULT_RDNS_SUFFIXES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Some(list) => list,
        }
        .into_iter()
        .map(|s| normalize_suffix(&s))
        .collect::<Result<Vec<_>, _>>()?;
        let resolver = raw.resolver.as_deref().map(parse_resolver).transpose()?;
        let dns_timeout = duration(
            "crawlers.dns_timeout",
            raw.dns_timeout,
            Duration::from_secs(2),
        )?;
        if dns_timeout.is_zero() {
            return Err(ConfigError::invalid(
                "crawlers.dns_timeout",
                "must be longer than zero",
            ));
        }
        let range_urls = proof_sources::range_urls(raw.range_urls)?;
        let sources = SourceFetch::validate(raw.refresh, raw.ca_file, raw.allow_private_sources)?;
        Ok(CrawlerSettings {
            range_files,
            ranges: Arc::new(ranges),
            range_poll,
            range_urls,
            sources,
            fetched: Arc::new(PrefixSet::default()),
            user_agents,
            rdns_suffixes,
            resolver,
            dns_timeout,
            dns_ttl: duration("crawlers.dns_ttl", raw.dns_ttl, Duration::from_secs(3600))?,
            dns_negative_ttl: duration(
                "crawlers.dns_negative_ttl",
                raw.dns_negative_ttl,
                Duration::from_secs(600),
            )?,
            dns_cache_capacity: NonZeroUsize::new(raw.dns_cache_capacity.unwrap_or(10_000))
                .ok_or_else(|| {
                    ConfigError::invalid("crawlers.dns_cache_capacity", "must be at least 1")
                })?,
            dns_max_in_flight: NonZeroU32::new(raw.dns_max_in_flight.unwrap_or(32)).ok_or_else(
                || ConfigError::invalid("crawlers.dns_max_in_flight", "must be at least 1"),
            )?,
            dns_lookups_per_network: NonZeroU32::new(
                raw.dns_lookups_per_network
                    .unwrap_or(DEFAULT_LOOKUPS_PER_NETWORK),
            )
            .ok_or_else(|| {
                ConfigError::invalid("crawlers.dns_lookups_per_network", "must be at least 1")
            })?,
        })
    }
}

/// New reverse-DNS lookups a network may cause per hour, by default.
pub const DEFAULT_LOOKUPS_PER_NETWORK: u32 = 50;

/// `.googlebot.com`, `googlebot.com` and `GoogleBot.com.` all mean names under
/// `googlebot.com`: the leading dot is what stops `evilgooglebot.com` from matching.
fn normalize_suffix(s: &str) -> Result<String, ConfigError> {
    let name = s.trim().trim_start_matches('.').trim_end_matches('.');
    let valid = !name.is_empty()
        && name.contains('.')
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !valid {
        return Err(ConfigError::invalid(
            "crawlers.rdns_suffixes",
            format!("{s:?} is not a domain suffix like \".googlebot.com\""),
        ));
    }
    Ok(format!(".{}", name.to_ascii_lowercase()))
}

fn parse_resolver(s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| {
            ConfigError::invalid(
                "crawlers.resolver",
                format!("{s:?} is not an address (\"127.0.0.1:53\", or an IP for port 53)"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawCrawlers {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_claim_google_and_bing_and_check_their_names() {
        let c = CrawlerSettings::default();
        assert!(c.user_agents.iter().any(|u| u == "Googlebot"));
        assert_eq!(
            c.rdns_suffixes,
            [".googlebot.com", ".google.com", ".search.msn.com"]
        );
        assert_eq!(c.resolver, None);
        assert!(c.ranges.set.is_empty());
        assert!(c.enabled());
    }

    #[test]
    fn suffixes_and_resolver_are_normalised() {
        let c = CrawlerSettings::validate(raw(
            "rdns_suffixes = [\"GoogleBot.com.\", \".search.msn.com\"]\nresolver = \"127.0.0.1\"\n",
        ))
        .unwrap();
        assert_eq!(c.rdns_suffixes, [".googlebot.com", ".search.msn.com"]);
        assert_eq!(c.resolver, Some("127.0.0.1:53".parse().unwrap()));
    }

    #[test]
    fn bad_values_name_the_field() {
        for (text, field) in [
            ("rdns_suffixes = [\"com\"]", "crawlers.rdns_suffixes"),
            (
                "rdns_suffixes = [\"bad name.com\"]",
                "crawlers.rdns_suffixes",
            ),
            ("resolver = \"dns.google\"", "crawlers.resolver"),
            ("user_agents = [\"\"]", "crawlers.user_agents"),
            ("dns_ttl = \"forever\"", "crawlers.dns_ttl"),
            ("dns_timeout = \"0s\"", "crawlers.dns_timeout"),
            ("range_poll = \"1ms\"", "crawlers.range_poll"),
            ("dns_cache_capacity = 0", "crawlers.dns_cache_capacity"),
            ("dns_max_in_flight = 0", "crawlers.dns_max_in_flight"),
            (
                "range_files = [\"/nonexistent/googlebot.json\"]",
                "crawlers.range_files",
            ),
        ] {
            let err = CrawlerSettings::validate(raw(text))
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
    }
}
