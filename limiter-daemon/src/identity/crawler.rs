//! Whether a caller is a verified crawler: the source is in a published range file, or its
//! user agent claims a crawler and forward-confirmed reverse DNS says so
//! ([`super::crawler_dns`]). A claim no proof vouches for is a fake: the caller is metered as
//! what it otherwise is, and the decision says so (`CrawlerStatus::Fake`, counted in
//! `<ns>_fake_crawlers_total`).
//!
//! Only a claiming user agent is looked up in DNS: an anonymous caller that does not say it is
//! a crawler costs no query. Here the DNS answer is only read, per caller (the grouped
//! address); the engine queues the lookup once the request is admitted
//! ([`CrawlerDns::request_if_due`]), so a refused or locked caller costs none. The range check
//! costs a few hash lookups and needs no claim (the ranges say who is behind the address,
//! whatever it sends).

use std::net::IpAddr;
use std::sync::Arc;

use aho_corasick::AhoCorasick;
use http::HeaderMap;

use super::crawler_dns::{CrawlerDns, DnsCheck};
use crate::config::crawler_ranges::CrawlerRanges;
use crate::config::CrawlerSettings;
use crate::model::prefix_set::PrefixSet;
use crate::model::CrawlerStatus;

/// The crawler rules of one configuration (the ranges as read for it, the claim patterns) and
/// the engine's DNS cache, which outlives reloads.
pub struct CrawlerRules {
    ranges: Arc<CrawlerRanges>,
    /// The lists fetched from `range_urls` (last good of each).
    fetched: Arc<PrefixSet>,
    /// `None`: no user agent claims a crawler.
    claims: Option<AhoCorasick>,
    /// The patterns of `claims` by index: the name a claim is listed under.
    names: Vec<Arc<String>>,
    dns: Option<Arc<CrawlerDns>>,
}

impl CrawlerRules {
    /// `dns`: `None` when no lookups can land (then every claim outside the ranges is a fake).
    pub fn new(cfg: &CrawlerSettings, dns: Option<Arc<CrawlerDns>>) -> Self {
        let claims = (!cfg.user_agents.is_empty())
            .then(|| {
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .build(&cfg.user_agents)
            })
            .and_then(|built| match built {
                Ok(ac) => Some(ac),
                Err(err) => {
                    // Patterns are validated non-empty strings; a build failure means too many
                    // or too long, and claims are then ignored rather than the config refused.
                    tracing::error!(error = %err, "crawlers.user_agents: cannot build the matcher");
                    None
                }
            });
        CrawlerRules {
            ranges: Arc::clone(&cfg.ranges),
            fetched: Arc::clone(&cfg.fetched),
            claims,
            names: cfg
                .user_agents
                .iter()
                .map(|u| Arc::new(u.clone()))
                .collect(),
            dns: dns.filter(|d| d.enabled()),
        }
    }

    /// Whether the request's user agent claims a crawler.
    pub fn claims(&self, headers: &HeaderMap) -> bool {
        match (&self.claims, headers.get(http::header::USER_AGENT)) {
            (Some(ac), Some(ua)) => ac.is_match(ua.as_bytes()),
            _ => false,
        }
    }

    /// The crawler the request's user agent names: the first configured pattern it matches
    /// (`Googlebot`), shared with the config, not copied.
    pub fn claimed_name(&self, headers: &HeaderMap) -> Option<Arc<String>> {
        let ua = headers.get(http::header::USER_AGENT)?;
        let found = self.claims.as_ref()?.find(ua.as_bytes())?;
        self.names.get(found.pattern().as_usize()).cloned()
    }

    /// What `ip` (the caller `group`) with `headers` proves at `now_ms`; `None`: neither in a
    /// range nor claiming. Reads the DNS answer of `group`, queues nothing.
    pub fn check(
        &self,
        ip: IpAddr,
        group: IpAddr,
        headers: &HeaderMap,
        now_ms: u64,
    ) -> Option<CrawlerStatus> {
        if self.ranges.contains(ip) || self.fetched.contains(ip) {
            return Some(CrawlerStatus::Ranges);
        }
        if !self.claims(headers) {
            return None;
        }
        let Some(dns) = &self.dns else {
            return Some(CrawlerStatus::Fake);
        };
        Some(match dns.peek(group, now_ms).0 {
            DnsCheck::Confirmed => CrawlerStatus::Dns,
            DnsCheck::Refuted => CrawlerStatus::Fake,
            DnsCheck::Pending | DnsCheck::Deferred => CrawlerStatus::Pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str, dir: &std::path::Path) -> CrawlerRules {
        let f = dir.join("googlebot.json");
        std::fs::write(
            &f,
            r#"{"creationTime":"2026-11-30","prefixes":[{"ipv4Prefix":"66.249.64.0/27"},{"ipv6Prefix":"2001:4860:4801:10::/64"}]}"#,
        )
        .unwrap();
        let text = format!("range_files = [{:?}]\n{text}", f.display().to_string());
        let raw: crate::config::crawlers::RawCrawlers = toml::from_str(&text).unwrap();
        CrawlerRules::new(&CrawlerSettings::validate(raw).unwrap(), None)
    }

    fn ua(s: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::USER_AGENT, s.parse().unwrap());
        h
    }

    const GOOGLEBOT: &str =
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

    #[test]
    fn a_source_in_a_range_file_is_a_crawler_whatever_it_sends() {
        let dir = tempfile::tempdir().unwrap();
        let r = rules("", dir.path());
        let none = HeaderMap::new();
        for inside in ["66.249.64.5", "2001:4860:4801:10::7", "::ffff:66.249.64.31"] {
            assert_eq!(
                r.check(inside.parse().unwrap(), inside.parse().unwrap(), &none, 0),
                Some(CrawlerStatus::Ranges),
                "{inside}"
            );
        }
        assert_eq!(
            r.check(
                "66.249.64.32".parse().unwrap(),
                "66.249.64.32".parse().unwrap(),
                &none,
                0
            ),
            None
        );
    }

    #[test]
    fn a_claim_from_outside_the_ranges_without_dns_is_a_fake() {
        let dir = tempfile::tempdir().unwrap();
        let r = rules("", dir.path());
        let outside = "203.0.113.9".parse().unwrap();
        assert_eq!(
            r.check(outside, outside, &ua(GOOGLEBOT), 0),
            Some(CrawlerStatus::Fake)
        );
        assert_eq!(
            r.check(
                outside,
                outside,
                &ua("Mozilla/5.0 (compatible; BINGBOT/2.0)"),
                0
            ),
            Some(CrawlerStatus::Fake),
            "claims match in any case"
        );
        assert_eq!(r.check(outside, outside, &ua("curl/8.5.0"), 0), None);
        assert_eq!(
            r.claimed_name(&ua(GOOGLEBOT))
                .as_deref()
                .map(String::as_str),
            Some("Googlebot")
        );
        assert_eq!(
            r.claimed_name(&ua("Mozilla/5.0 (compatible; BINGBOT/2.0)"))
                .as_deref()
                .map(String::as_str),
            Some("bingbot")
        );
        assert_eq!(r.claimed_name(&ua("curl/8.5.0")), None);
        let r = rules("user_agents = []", dir.path());
        assert_eq!(
            r.check(outside, outside, &ua(GOOGLEBOT), 0),
            None,
            "nothing claims"
        );
    }
}
