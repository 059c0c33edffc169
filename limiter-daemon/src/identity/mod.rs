//! Who a request comes from: the client address ([`client_ip`]), and the best credential it
//! carries — a verified API key ([`api_key`], [`key_cache`]), a valid bearer JWT ([`jwt`]), a
//! session cookie ([`session`]) — or none. Malformed cookies, headers and tokens leave the
//! caller anonymous: never elevated, never an error. [`hash`] turns subjects into store keys.
//! A caller without a verified credential may still be a verified crawler ([`crawler`]: the
//! published ranges, or forward-confirmed reverse DNS from [`crawler_dns`] over
//! [`crawler_fcrdns`]), or a verified signed agent ([`agent`] over [`web_bot_auth`]).

pub mod agent;
pub mod api_key;
pub mod client_ip;
pub mod crawler;
pub mod crawler_dns;
pub mod crawler_fcrdns;
pub mod hash;
pub mod jwt;
pub mod key_cache;
pub mod session;
pub mod web_bot_auth;

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderMap;

use self::crawler::CrawlerRules;
use self::crawler_dns::CrawlerDns;
use self::hash::{IdKey, IdentityHasher, Namespace};
use self::jwt::JwtVerifier;
use self::key_cache::{KeyCache, KeyCheck};
use self::web_bot_auth::directory::DirectoryCache;
use crate::config::Config;
use crate::model::KeyRecord;
use crate::model::{AgentSignature, CrawlerStatus, KeyStatus, Tier};

/// What the caller is counted as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// Its (grouped) client address: anonymous and session callers, unverified keys.
    Ip,
    /// A verified bearer token's ID (raw here; hashed before it is stored).
    Token(String),
    /// A verified API key.
    Key(Arc<KeyRecord>),
    /// A verified signed agent: its directory URL, whatever address it calls from.
    Agent(Arc<str>),
    /// The unattributed callers of one trusted proxy (the caller's `ip`): requests whose
    /// forwarding field named no usable client. One shared anonymous identity per proxy;
    /// refusable, never struck or locked (locking it would lock the proxy).
    Unattributed,
}

/// A resolved caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The client address (after trusted-proxy walking), not grouped.
    pub ip: IpAddr,
    /// The address counters and lockouts use (IPv6 masked to the configured prefix).
    pub group: IpAddr,
    pub tier: Tier,
    pub subject: Subject,
    /// What became of a presented API key, if one was presented.
    pub key_status: Option<KeyStatus>,
    /// Set when the address is in a published crawler range or the user agent claims a
    /// crawler (and no verified credential came first): the proof, or why there is none.
    pub crawler: Option<CrawlerStatus>,
    /// What became of a Web Bot Auth signature, if one was presented.
    pub agent: Option<AgentSignature>,
    /// An agent directory to fetch (behind the request) once this request is admitted.
    pub agent_fetch: Option<Box<str>>,
    /// The crawler its user agent names (the matched pattern) or the verified agent's
    /// directory: what the operator page lists it under.
    pub claim: Option<std::sync::Arc<String>>,
}

impl Caller {
    /// A verified credential (key or token) or a verified crawler: its tier is pushed into
    /// the kernel's tier map.
    pub fn is_verified(&self) -> bool {
        matches!(
            self.subject,
            Subject::Token(_) | Subject::Key(_) | Subject::Agent(_)
        ) || self.crawler.is_some_and(CrawlerStatus::is_verified)
    }

    /// Whether this caller also counts against its network's budgets: anonymous and session
    /// callers do; a verified credential (key, token), a verified crawler or a verified agent
    /// does not (a search engine's many addresses are one crawler, an agent's are one agent,
    /// each metered on its own rung). Unattributed callers
    /// have no network of their own (the proxy's is not theirs).
    pub fn counts_against_networks(&self) -> bool {
        !self.is_verified() && self.subject != Subject::Unattributed
    }

    /// Whether a burst of this caller may strike its address: not when the address is a
    /// trusted proxy's, standing for callers it could not name.
    pub fn may_be_struck(&self) -> bool {
        self.subject != Subject::Unattributed
    }

    /// The hashed identity the store counts.
    pub fn id_key(&self, hasher: &IdentityHasher) -> IdKey {
        match &self.subject {
            Subject::Ip => hasher.ip_id(self.group),
            Subject::Token(t) => hasher.id(Namespace::Token, t.as_bytes()),
            Subject::Key(k) => hasher.id(Namespace::Key, k.id.as_bytes()),
            Subject::Agent(d) => hasher.id(Namespace::Agent, d.as_bytes()),
            Subject::Unattributed => hasher.id(Namespace::Via, self.group.to_string().as_bytes()),
        }
    }
}

/// Whether resolving a caller under `cfg` may read the request field `name` (any case): the
/// session cookie, `Authorization` (tokens and keys), the key header, the forwarding header
/// when any proxy is trusted, `User-Agent` when user agents may claim a crawler, and the
/// signature fields and `Host` when signed agents are verified.
pub fn reads_header(cfg: &Config, name: &[u8]) -> bool {
    (!cfg.crawlers.user_agents.is_empty() && name.eq_ignore_ascii_case(b"user-agent"))
        || (cfg.agents.enabled
            && (name.eq_ignore_ascii_case(b"host")
                || agent::FIELDS
                    .iter()
                    .any(|f| name.eq_ignore_ascii_case(f.as_bytes()))))
        || name.eq_ignore_ascii_case(b"cookie")
        || name.eq_ignore_ascii_case(b"authorization")
        || name.eq_ignore_ascii_case(cfg.keys.header.as_str().as_bytes())
        || (!cfg.identity.trusted_proxies.is_empty()
            && name.eq_ignore_ascii_case(cfg.identity.forwarded_header.as_str().as_bytes()))
}

/// Resolves callers for one configuration (holds what is derived from it: the JWT verifier,
/// the crawler rules).
pub struct IdentityResolver {
    jwt: Option<JwtVerifier>,
    crawlers: CrawlerRules,
}

impl IdentityResolver {
    /// Without reverse DNS: crawlers are proven by their ranges only.
    pub fn new(cfg: &Config) -> Self {
        IdentityResolver::with_crawler_dns(cfg, None)
    }

    /// With the engine's reverse-DNS cache (`None`: ranges only).
    pub fn with_crawler_dns(cfg: &Config, dns: Option<Arc<CrawlerDns>>) -> Self {
        IdentityResolver {
            jwt: cfg.jwt.as_ref().map(JwtVerifier::new),
            crawlers: CrawlerRules::new(&cfg.crawlers, dns),
        }
    }

    /// Who `client` (resolved where the request came in) with `method`, `path` and `headers`
    /// is at `now_ms`. API keys are checked against `keys`, agents' signatures against
    /// `agents`. `decision`: resolving for a decision, which remembers an agent signature's
    /// nonce; a dry run (explain, standing) does not.
    #[allow(clippy::too_many_arguments)]
    pub fn resolve(
        &self,
        cfg: &Config,
        keys: &KeyCache,
        agents: &DirectoryCache,
        client: client_ip::Client,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        now_ms: u64,
        decision: bool,
    ) -> Caller {
        let ip = client_ip::normalize(client.ip());
        let group = client_ip::group(ip, cfg.identity.ipv6_prefix);
        let cookie = session::has_session_cookie(headers, &cfg.identity.session_cookie);
        let mut caller = Caller {
            ip,
            group,
            tier: if cookie { Tier::Session } else { Tier::Anon },
            subject: Subject::Ip,
            key_status: None,
            crawler: None,
            agent: None,
            agent_fetch: None,
            claim: None,
        };
        let bearer = jwt::bearer(headers);
        let key_prefix_len = cfg.keys.prefix.len();
        let bearer_is_key = bearer.is_some_and(|b| {
            b.len() > key_prefix_len
                && b.starts_with(cfg.keys.prefix.as_str())
                && b.as_bytes()[key_prefix_len] == b'_'
        });
        if let (Some(verifier), Some(token), false) = (&self.jwt, bearer, bearer_is_key) {
            if let Some(holder) = verifier.verify(token, now_ms) {
                caller.tier = caller.tier.max(holder.tier);
                caller.subject = Subject::Token(holder.token_id);
            }
        }
        let presented = headers
            .get(&cfg.keys.header)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .or(bearer.filter(|_| bearer_is_key));
        if let Some(text) = presented {
            // The shape is checked first: a wrong shape never reaches the cache.
            match api_key::parse_key(text, &cfg.keys.prefix) {
                None => caller.key_status = Some(KeyStatus::Malformed),
                Some(k) => match keys.check(k.id, k.secret, group, now_ms) {
                    KeyCheck::Verified(record) => {
                        caller.tier = record.tier;
                        caller.subject = Subject::Key(record);
                        caller.key_status = Some(KeyStatus::Verified);
                    }
                    KeyCheck::Pending => {
                        // One rung below what a key buys, while the lookup lands.
                        caller.tier = caller.tier.max(Tier::Sponsor.below());
                        caller.key_status = Some(KeyStatus::Pending);
                    }
                    // Lookups for this address are bounded: the key adds nothing until they
                    // land (the status says the key is not settled yet).
                    KeyCheck::Deferred => caller.key_status = Some(KeyStatus::Pending),
                    KeyCheck::Invalid => caller.key_status = Some(KeyStatus::Invalid),
                },
            }
        }
        if caller.subject == Subject::Ip && matches!(client, client_ip::Client::Unattributed(_)) {
            // Nothing names this caller: anonymous limits (a cookie is forgeable), and no
            // crawler proof (the address is the proxy's).
            caller.tier = Tier::Anon;
            caller.subject = Subject::Unattributed;
            return caller;
        }
        // A verified credential says who the caller is; only the rest may prove an agent (a
        // signature names who is calling, wherever from), then a crawler.
        if caller.subject == Subject::Ip {
            let seen = agent::Seen {
                method,
                path,
                headers,
            };
            let checked = agent::check(&cfg.agents, agents, group, seen, now_ms, decision);
            caller.agent = checked.signature;
            caller.agent_fetch = checked.fetch.map(String::into_boxed_str);
            if let Some(directory) = checked.verified {
                caller.tier = Tier::Agent;
                caller.subject = Subject::Agent(directory.as_str().into());
                caller.claim = Some(std::sync::Arc::new(directory));
                return caller;
            }
        }
        if caller.subject == Subject::Ip {
            caller.crawler = self.crawlers.check(ip, group, headers, now_ms);
            if caller.crawler.is_some() {
                caller.claim = self.crawlers.claimed_name(headers);
            }
            if caller.crawler.is_some_and(CrawlerStatus::is_verified) {
                caller.tier = caller.tier.max(Tier::Crawler);
            }
        }
        caller
    }
}

#[cfg(test)]
mod network_tests {
    use super::*;

    fn caller(tier: Tier, subject: Subject, crawler: Option<CrawlerStatus>) -> Caller {
        let ip: IpAddr = "66.249.66.1".parse().unwrap();
        Caller {
            ip,
            group: ip,
            tier,
            subject,
            key_status: None,
            crawler,
            agent: None,
            agent_fetch: None,
            claim: None,
        }
    }

    #[test]
    fn only_callers_without_a_proof_count_against_their_network() {
        for (c, counts) in [
            (caller(Tier::Anon, Subject::Ip, None), true),
            (caller(Tier::Session, Subject::Ip, None), true),
            (
                caller(Tier::Anon, Subject::Ip, Some(CrawlerStatus::Fake)),
                true,
            ),
            (
                caller(Tier::Anon, Subject::Ip, Some(CrawlerStatus::Pending)),
                true,
            ),
            (
                caller(Tier::Crawler, Subject::Ip, Some(CrawlerStatus::Ranges)),
                false,
            ),
            (
                caller(Tier::Crawler, Subject::Ip, Some(CrawlerStatus::Dns)),
                false,
            ),
            (
                caller(Tier::Session, Subject::Token("t".into()), None),
                false,
            ),
            (
                caller(
                    Tier::Agent,
                    Subject::Agent("https://a.example/d".into()),
                    None,
                ),
                false,
            ),
        ] {
            assert_eq!(c.counts_against_networks(), counts, "{c:?}");
            assert_eq!(c.is_verified(), !counts, "{c:?}");
        }
    }
}

#[cfg(test)]
mod reads_header_tests {
    use std::path::Path;

    use super::*;
    use crate::config::env::EnvMap;

    fn config(text: &str) -> Config {
        Config::from_toml_str(text, Path::new("test.toml"), &EnvMap::new()).unwrap()
    }

    #[test]
    fn the_fields_a_caller_is_resolved_from_and_no_others() {
        let cfg = config("");
        for name in ["Cookie", "authorization", "X-API-Key"] {
            assert!(reads_header(&cfg, name.as_bytes()), "{name}");
        }
        // Forwarding headers are read only when a proxy is trusted.
        for name in ["x-forwarded-for", "forwarded", "host", "x-real-ip"] {
            assert!(!reads_header(&cfg, name.as_bytes()), "{name}");
        }
        // The user agent only while some may claim a crawler.
        assert!(reads_header(&cfg, b"User-Agent"));
        let no_claims = config("[crawlers]\nuser_agents = []\n");
        assert!(!reads_header(&no_claims, b"user-agent"));
        let cfg =
            config("[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\n[keys]\nheader = \"x-key\"\n");
        assert!(reads_header(&cfg, b"X-Forwarded-For"));
        assert!(reads_header(&cfg, b"x-key"));
        assert!(!reads_header(&cfg, b"x-api-key"));
        let cfg = config(
            "[identity]\ntrusted_proxies = [\"10.0.0.1\"]\nforwarded_header = \"forwarded\"\n",
        );
        assert!(reads_header(&cfg, b"forwarded"));
        assert!(!reads_header(&cfg, b"x-forwarded-for"));
    }
}
