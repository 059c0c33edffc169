//! The proofs the daemon fetches itself: `[crawlers] range_urls` (the range lists the search
//! engines and AI crawlers publish, each naming the crawler its ranges prove) and
//! `[networks] asn_url` (the gzipped iptoasn TSV), and how they are fetched (`[crawlers]
//! refresh`, `ca_file`, `allow_private_sources`). Nothing here is fetched unless configured:
//! a daemon makes no outbound call of its own by default.

use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::keys::duration;
use super::ConfigError;

/// How often a source is fetched by default: the publishers change their lists a few times a
/// week, and a conditional request that comes back 304 costs one round trip.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(6 * 3600);

/// The shortest `refresh` a config may ask for: a publisher's file is no feed to poll.
pub const MIN_REFRESH: Duration = Duration::from_secs(60);

/// One `[crawlers] range_urls` entry as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRangeUrl {
    pub url: String,
    /// The crawler the list's ranges prove (`googlebot`, `bingbot`, `gptbot`, …).
    pub crawler: String,
}

/// A validated range list source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeUrl {
    /// An `https://` URL.
    pub url: String,
    pub crawler: String,
}

/// How the sources are fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFetch {
    /// Between two fetches of one source (each wait is jittered by up to a tenth).
    pub refresh: Duration,
    /// PEM certificates trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Targets allowed even though private, loopback or link-local (tests serve from
    /// loopback).
    pub allow: Vec<IpNet>,
}

impl Default for SourceFetch {
    fn default() -> Self {
        SourceFetch {
            refresh: DEFAULT_REFRESH,
            ca_file: None,
            allow: Vec::new(),
        }
    }
}

/// `s` as an `https://` URL with a host, or an error naming `field`.
pub fn https_url(field: &str, s: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| ConfigError::invalid(field, format!("{s:?} {why}"));
    let uri: http::Uri = s.parse().map_err(|_| bad("is not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad(
            "is not an https:// URL (the daemon fetches proofs over HTTPS only)",
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("names no host"));
    }
    Ok(s.to_string())
}

/// Validates the `range_urls` list: HTTPS URLs, each once, each naming its crawler.
pub fn range_urls(raw: Option<Vec<RawRangeUrl>>) -> Result<Vec<RangeUrl>, ConfigError> {
    let mut out: Vec<RangeUrl> = Vec::new();
    for r in raw.unwrap_or_default() {
        let url = https_url("crawlers.range_urls", &r.url)?;
        let name = r.crawler.trim();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            return Err(ConfigError::invalid(
                "crawlers.range_urls",
                format!(
                    "crawler {:?} (for {url}) is not a crawler name like \"googlebot\" \
                     (letters, digits, '-', '_', '.')",
                    r.crawler
                ),
            ));
        }
        if out.iter().any(|o| o.url == url) {
            return Err(ConfigError::invalid(
                "crawlers.range_urls",
                format!("{url} is listed twice"),
            ));
        }
        out.push(RangeUrl {
            url,
            crawler: name.to_string(),
        });
    }
    Ok(out)
}

impl SourceFetch {
    pub fn validate(
        refresh: Option<String>,
        ca_file: Option<PathBuf>,
        allow: Option<Vec<String>>,
    ) -> Result<Self, ConfigError> {
        let refresh = duration("crawlers.refresh", refresh, DEFAULT_REFRESH)?;
        if refresh < MIN_REFRESH {
            return Err(ConfigError::invalid(
                "crawlers.refresh",
                "must be at least 1m (the publishers' files change a few times a week)",
            ));
        }
        if let Some(path) = &ca_file {
            std::fs::metadata(path).map_err(|e| {
                ConfigError::invalid(
                    "crawlers.ca_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
        }
        let allow =
            super::nets::parse("crawlers.allow_private_sources", &allow.unwrap_or_default())?;
        Ok(SourceFetch {
            refresh,
            ca_file,
            allow,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(url: &str, crawler: &str) -> RawRangeUrl {
        RawRangeUrl {
            url: url.into(),
            crawler: crawler.into(),
        }
    }

    #[test]
    fn urls_must_be_https_once_each_with_a_crawler_name() {
        let ok = range_urls(Some(vec![entry(
            "https://www.bing.com/toolbox/bingbot.json",
            "bingbot",
        )]))
        .unwrap();
        assert_eq!(ok[0].crawler, "bingbot");
        for (url, crawler, want) in [
            (
                "http://www.bing.com/toolbox/bingbot.json",
                "bingbot",
                "https",
            ),
            ("https:///x.json", "bingbot", "URL"),
            ("https://openai.com/gptbot.json", "", "crawler"),
            ("https://openai.com/gptbot.json", "gpt bot", "crawler"),
        ] {
            let err = range_urls(Some(vec![entry(url, crawler)]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("crawlers.range_urls") && err.contains(want),
                "{err}"
            );
        }
        let twice = range_urls(Some(vec![
            entry("https://openai.com/gptbot.json", "gptbot"),
            entry("https://openai.com/gptbot.json", "gptbot"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(twice.contains("twice"), "{twice}");
    }

    #[test]
    fn refresh_has_a_floor_and_allow_takes_addresses_and_cidrs() {
        assert_eq!(
            SourceFetch::validate(None, None, None).unwrap().refresh,
            DEFAULT_REFRESH
        );
        let err = SourceFetch::validate(Some("5s".into()), None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("crawlers.refresh"), "{err}");
        let f = SourceFetch::validate(None, None, Some(vec!["127.0.0.1".into(), "::1/128".into()]))
            .unwrap();
        assert_eq!(f.allow.len(), 2);
        let err = SourceFetch::validate(None, None, Some(vec!["localhost".into()]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("crawlers.allow_private_sources"), "{err}");
        let err = SourceFetch::validate(None, Some("/nonexistent/ca.pem".into()), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("crawlers.ca_file"), "{err}");
    }
}
