//! The resolver's agent step: whether a request carries a verified Web Bot Auth signature
//! ([`super::web_bot_auth`]), read from the parts of the request the engine sees.
//!
//! - Verification happens on the request when the agent's keys are cached (one Ed25519
//!   check); an agent not known yet is unverified, and its directory is fetched once the
//!   request is admitted (the caller's `agent_fetch`, queued by the engine), like API keys.
//! - The target authority is the `Host` field (what HTTP/1.1 sends, and what the proxy and
//!   `/v1/decide` pass on), the path the request's (without its query); the scheme and query
//!   are not known to the engine, so a signature covering them is unverified (nothing is
//!   refused for what the engine cannot see). A signature covering `@path` or `@authority`
//!   verifies only for the path and host it was made for.
//! - A decision looks up and remembers the signature's nonce (a repeat is `replayed`); a dry
//!   run (explain, a caller's standing) does neither.

use std::net::IpAddr;

use http::HeaderMap;

use super::web_bot_auth::directory::DirectoryCache;
use super::web_bot_auth::{check_request, Outcome, Policy, RequestParts};
use crate::config::AgentSettings;
use crate::model::AgentSignature;

/// The request fields the agent step reads (besides `Host`).
pub const FIELDS: [&str; 3] = ["signature-input", "signature", "signature-agent"];

/// What the agent step found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCheck {
    pub signature: Option<AgentSignature>,
    /// The verified agent's directory URL (its identity).
    pub verified: Option<String>,
    /// The directory to fetch once the request is admitted.
    pub fetch: Option<String>,
}

/// The request as the agent step sees it.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    pub headers: &'a HeaderMap,
}

/// Checks the signature of a request from `source` at `now_ms`; `nonces`: whether its nonce
/// is looked up and remembered (a decision), or not (a dry run).
pub fn check(
    cfg: &AgentSettings,
    cache: &DirectoryCache,
    source: IpAddr,
    req: Seen<'_>,
    now_ms: u64,
    nonces: bool,
) -> AgentCheck {
    let Seen {
        method,
        path,
        headers,
    } = req;
    let none = AgentCheck {
        signature: None,
        verified: None,
        fetch: None,
    };
    if cfg.claims_only {
        return claimed(cfg, headers);
    }
    if !cfg.enabled || !headers.contains_key("signature-input") {
        return none;
    }
    let parts = RequestParts {
        method: Some(method),
        scheme: None,
        authority: headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok()),
        path_and_query: None,
        path: Some(path),
        headers,
    };
    let policy = Policy::of(cfg, nonces);
    let checked = check_request(&parts, cache, source, now_ms, &policy, |d| {
        cfg.may_verify(d)
    });
    let (signature, verified) = match checked.outcome {
        Outcome::None => (None, None),
        Outcome::Verified { directory } => (Some(AgentSignature::Verified), Some(directory)),
        Outcome::Unverified => (Some(AgentSignature::Unverified), None),
        Outcome::Invalid(_) => (Some(AgentSignature::Invalid), None),
        Outcome::Replayed => (Some(AgentSignature::Replayed), None),
    };
    AgentCheck {
        signature,
        verified,
        fetch: checked.fetch,
    }
}

/// Replay's reading: the agent a `Signature-Agent` field names (a dictionary's one member,
/// or the bare string), if the operator would verify it; nothing is checked (see
/// [`AgentSettings::claims_only`]).
fn claimed(cfg: &AgentSettings, headers: &HeaderMap) -> AgentCheck {
    let directory = super::web_bot_auth::fields::signature_agent(headers, "")
        .ok()
        .flatten()
        .and_then(|a| crate::model::agent::directory_url(&a))
        .filter(|d| cfg.may_verify(d));
    AgentCheck {
        signature: directory.as_ref().map(|_| AgentSignature::Unverified),
        verified: directory,
        fetch: None,
    }
}

#[cfg(test)]
mod tests {
    use ring::signature::Ed25519KeyPair;

    use super::*;
    use crate::identity::web_bot_auth::directory::Fetched;
    use crate::identity::web_bot_auth::signer;

    const AGENT: &str = "https://agent.example";
    const DIR: &str = "https://agent.example/.well-known/http-message-signatures-directory";
    const NOW_S: i64 = 1_800_000_000;
    const BOTH: &str = "\"@authority\" \"signature-agent\"";

    fn signed(k: &Ed25519KeyPair, components: &str) -> HeaderMap {
        let params = signer::params(k, NOW_S, NOW_S + 60, "web-bot-auth");
        signer::sign(k, AGENT, "site.example", components, &params)
    }

    fn seen<'a>(h: &'a HeaderMap, path: &'a str) -> Seen<'a> {
        Seen {
            method: "GET",
            path,
            headers: h,
        }
    }

    #[test]
    fn the_engines_view_verifies_settles_and_bounds_its_fetches() {
        let k = Ed25519KeyPair::from_seed_unchecked(&[9; 32]).unwrap();
        let now = NOW_S as u64 * 1000;
        let mut cfg = AgentSettings {
            enabled: true,
            ..AgentSettings::default()
        };
        let cache = DirectoryCache::new();
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        let h = signed(&k, BOTH);
        let check = |cfg: &AgentSettings, ip, h: &HeaderMap, path| {
            check(cfg, &cache, ip, seen(h, path), now, true)
        };
        assert_eq!(
            check(&AgentSettings::default(), ip, &h, "/").signature,
            None,
            "off by default"
        );
        // Unknown: unverified, a fetch due for the engine to queue; nothing queued here.
        let c = check(&cfg, ip, &h, "/");
        assert_eq!(c.signature, Some(AgentSignature::Unverified));
        assert_eq!(c.fetch.as_deref(), Some(DIR));
        assert!(cache.next_fetch().is_none());
        // An agent the operator refuses: unverified, never fetched.
        cfg.refuse = vec![DIR.into()];
        let c = check(&cfg, ip, &h, "/");
        assert_eq!(
            (c.signature, c.fetch),
            (Some(AgentSignature::Unverified), None)
        );
        cfg.refuse.clear();
        let body = signer::directory_of(&k).1.into_bytes();
        let fetched = Fetched {
            body,
            max_age_s: None,
        };
        cache.landed(DIR, ip, Ok(fetched), now).unwrap();
        let c = check(&cfg, ip, &h, "/any/path");
        assert_eq!(c.signature, Some(AgentSignature::Verified));
        assert_eq!((c.verified.as_deref(), c.fetch), (Some(DIR), None));
        // Covering `@path`: verified for the path it was made for, invalid for another.
        let params = signer::params(&k, NOW_S, NOW_S + 60, "web-bot-auth");
        let p = signer::sign_path(
            &k,
            AGENT,
            "site.example",
            Some("/page"),
            "\"@authority\" \"@path\" \"signature-agent\"",
            &params,
        );
        let c = check(&cfg, ip, &p, "/page");
        assert_eq!(c.signature, Some(AgentSignature::Verified));
        let elsewhere: IpAddr = "192.0.2.50".parse().unwrap();
        let c = check(&cfg, elsewhere, &p, "/other");
        assert_eq!(c.signature, Some(AgentSignature::Invalid));
        // Covering `@query`, which the engine is not given: neither verified nor refused.
        let q = signed(&k, "\"@authority\" \"@query\" \"signature-agent\"");
        let c = check(&cfg, ip, &q, "/");
        assert_eq!(c.signature, Some(AgentSignature::Unverified));
        // Invalid (another host): the address is refused, and gets no fetch queued after.
        let mut other = h.clone();
        other.insert("host", "other.example".parse().unwrap());
        let bad: IpAddr = "198.51.100.1".parse().unwrap();
        let c = check(&cfg, bad, &other, "/");
        assert_eq!(c.signature, Some(AgentSignature::Invalid));
        cache.request_fetch("https://new.example/d", bad, now);
        assert!(
            cache.next_fetch().is_none(),
            "no fetch for a refused address"
        );
        cache.request_fetch("https://new.example/d", ip, now);
        assert!(cache.next_fetch().is_some());
    }

    #[test]
    fn a_decision_remembers_the_nonce_and_a_dry_run_neither_looks_nor_remembers() {
        let k = Ed25519KeyPair::from_seed_unchecked(&[9; 32]).unwrap();
        let now = NOW_S as u64 * 1000;
        let cfg = AgentSettings {
            enabled: true,
            ..AgentSettings::default()
        };
        let cache = DirectoryCache::new();
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        let fetched = Fetched {
            body: signer::directory_of(&k).1.into_bytes(),
            max_age_s: None,
        };
        cache.landed(DIR, ip, Ok(fetched), now).unwrap();
        let params = format!(
            "{};nonce=\"once\"",
            signer::params(&k, NOW_S, NOW_S + 60, "web-bot-auth")
        );
        let h = signer::sign(&k, AGENT, "site.example", BOTH, &params);
        let outcome = |decision| check(&cfg, &cache, ip, seen(&h, "/"), now, decision).signature;
        assert_eq!(outcome(false), Some(AgentSignature::Verified), "dry run");
        assert_eq!(
            outcome(true),
            Some(AgentSignature::Verified),
            "first decision"
        );
        assert_eq!(
            outcome(false),
            Some(AgentSignature::Verified),
            "a dry run after"
        );
        assert_eq!(
            outcome(true),
            Some(AgentSignature::Replayed),
            "second decision"
        );
        // Not refused for it: the agent's next signature from this address verifies.
        let params = format!(
            "{};nonce=\"twice\"",
            signer::params(&k, NOW_S, NOW_S + 60, "web-bot-auth")
        );
        let h = signer::sign(&k, AGENT, "site.example", BOTH, &params);
        let c = check(&cfg, &cache, ip, seen(&h, "/"), now, true);
        assert_eq!(c.signature, Some(AgentSignature::Verified));
    }
}
