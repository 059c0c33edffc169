//! Forward-confirmed reverse DNS: the address's PTR names, kept when they end with a configured
//! suffix, each looked up forward (A for an IPv4 caller, AAAA for IPv6); confirmed when one of
//! them resolves back to the address. A PTR record alone proves nothing: whoever owns the
//! address's reverse zone can write `crawl-1.googlebot.com` into it, but only Google can make
//! that name resolve to the address.
//!
//! [`Dns`] is the two lookups, so the procedure is tested on a table; [`HickoryDns`] asks a
//! real server (the configured `resolver`, or the system's).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::future::BoxFuture;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;

/// At most this many suffix-matching PTR names are checked forward: a reverse zone listing
/// hundreds of names must not buy hundreds of lookups.
const MAX_CANDIDATES: usize = 4;

/// A lookup that got no answer (timeout, refused, server failure). "No such name" and "no
/// records" are answers: an empty list.
#[derive(Debug, thiserror::Error)]
#[error("DNS lookup failed: {0}")]
pub struct DnsFailed(pub String);

/// The two lookups forward-confirmed reverse DNS needs.
pub trait Dns: Send + Sync + 'static {
    /// The PTR names of `ip`, as written (any case, maybe with a trailing dot).
    fn reverse(&self, ip: IpAddr) -> BoxFuture<'_, Result<Vec<String>, DnsFailed>>;
    /// The A (`v6 = false`) or AAAA records of `name`.
    fn forward<'a>(
        &'a self,
        name: &'a str,
        v6: bool,
    ) -> BoxFuture<'a, Result<Vec<IpAddr>, DnsFailed>>;
}

/// What the check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fcrdns {
    /// `name` is under a suffix and resolves back to the address.
    Confirmed { name: String },
    /// No PTR name under a suffix resolves back to the address.
    Refuted,
    /// A lookup got no answer.
    Failed(String),
}

/// Whether `name` (any case, trailing dot or not) is under one of `suffixes` (normalised:
/// lower case, leading dot).
pub fn under_suffix(name: &str, suffixes: &[String]) -> bool {
    let name = name.trim_end_matches('.');
    suffixes.iter().any(|s| {
        name.len() > s.len()
            && name.is_char_boundary(name.len() - s.len())
            && name[name.len() - s.len()..].eq_ignore_ascii_case(s)
    })
}

/// Runs the check for `ip` against `dns`.
pub async fn check(dns: &dyn Dns, ip: IpAddr, suffixes: &[String]) -> Fcrdns {
    // A mapped address is the IPv4 caller it carries: its PTR lives in in-addr.arpa.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let names = match dns.reverse(ip).await {
        Ok(n) => n,
        Err(e) => return Fcrdns::Failed(e.0),
    };
    let candidates = names
        .into_iter()
        .filter(|n| under_suffix(n, suffixes))
        .take(MAX_CANDIDATES);
    for name in candidates {
        match dns.forward(&name, ip.is_ipv6()).await {
            Ok(addrs) if addrs.contains(&ip) => {
                return Fcrdns::Confirmed {
                    name: name.trim_end_matches('.').to_ascii_lowercase(),
                }
            }
            Ok(_) => {}
            Err(e) => return Fcrdns::Failed(e.0),
        }
    }
    Fcrdns::Refuted
}

/// [`Dns`] over hickory's resolver.
pub struct HickoryDns(TokioResolver);

impl HickoryDns {
    /// Asks `server` (UDP, then TCP for truncated answers), or the system's resolvers when
    /// `None`. Each query is bounded by `timeout` and tried once: the whole check has its own
    /// deadline, and a caller waiting on it is metered as what it otherwise is meanwhile.
    pub fn new(server: Option<SocketAddr>, timeout: Duration) -> Result<Self, DnsFailed> {
        let mut builder = match server {
            Some(addr) => {
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![ns]),
                    TokioRuntimeProvider::default(),
                )
            }
            None => TokioResolver::builder_tokio()
                .map_err(|e| DnsFailed(format!("reading the system's resolver config: {e}")))?,
        };
        let opts = builder.options_mut();
        opts.timeout = timeout;
        opts.attempts = 1;
        // Names are looked up as written (fully qualified), never with search domains.
        opts.ndots = 0;
        builder
            .build()
            .map(HickoryDns)
            .map_err(|e| DnsFailed(e.to_string()))
    }
}

fn answer<T>(
    res: Result<hickory_resolver::lookup::Lookup, hickory_resolver::net::NetError>,
    pick: impl Fn(&RData) -> Option<T>,
) -> Result<Vec<T>, DnsFailed> {
    match res {
        Ok(lookup) => Ok(lookup
            .answers()
            .iter()
            .filter_map(|r| pick(&r.data))
            .collect()),
        Err(e) if e.is_no_records_found() => Ok(Vec::new()),
        Err(e) => Err(DnsFailed(e.to_string())),
    }
}

impl Dns for HickoryDns {
    fn reverse(&self, ip: IpAddr) -> BoxFuture<'_, Result<Vec<String>, DnsFailed>> {
        Box::pin(async move {
            let name = hickory_resolver::proto::rr::Name::from(ip);
            answer(self.0.reverse_lookup(name).await, |d| match d {
                RData::PTR(p) => Some(p.0.to_ascii()),
                _ => None,
            })
        })
    }

    fn forward<'a>(
        &'a self,
        name: &'a str,
        v6: bool,
    ) -> BoxFuture<'a, Result<Vec<IpAddr>, DnsFailed>> {
        Box::pin(async move {
            // Fully qualified: one query, no search-domain guesses.
            let fqdn = format!("{}.", name.trim_end_matches('.'));
            let pick = |d: &RData| match d {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                _ => None,
            };
            if v6 {
                answer(self.0.ipv6_lookup(fqdn.as_str()).await, pick)
            } else {
                answer(self.0.ipv4_lookup(fqdn.as_str()).await, pick)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[derive(Default)]
    struct Table {
        ptr: HashMap<IpAddr, Vec<String>>,
        addr: HashMap<String, Vec<IpAddr>>,
        broken: bool,
    }

    impl Dns for Table {
        fn reverse(&self, ip: IpAddr) -> BoxFuture<'_, Result<Vec<String>, DnsFailed>> {
            let r = if self.broken {
                Err(DnsFailed("timed out".into()))
            } else {
                Ok(self.ptr.get(&ip).cloned().unwrap_or_default())
            };
            Box::pin(async move { r })
        }
        fn forward<'a>(
            &'a self,
            name: &'a str,
            _v6: bool,
        ) -> BoxFuture<'a, Result<Vec<IpAddr>, DnsFailed>> {
            let r = Ok(self
                .addr
                .get(&name.trim_end_matches('.').to_ascii_lowercase())
                .cloned()
                .unwrap_or_default());
            Box::pin(async move { r })
        }
    }

    fn suffixes() -> Vec<String> {
        vec![".googlebot.com".into(), ".search.msn.com".into()]
    }

    #[test]
    fn suffixes_match_whole_labels_in_any_case() {
        let s = suffixes();
        assert!(under_suffix("crawl-66-249-66-1.googlebot.com.", &s));
        assert!(under_suffix("CRAWL-1.GoogleBot.COM", &s));
        assert!(under_suffix("msnbot-1.search.msn.com", &s));
        assert!(!under_suffix("evilgooglebot.com", &s));
        assert!(
            !under_suffix("googlebot.com", &s),
            "the suffix itself is no host"
        );
        assert!(!under_suffix("googlebot.com.evil.net", &s));
    }

    #[tokio::test]
    async fn confirmed_only_when_the_name_resolves_back() {
        let ip: IpAddr = "66.249.66.1".parse().unwrap();
        let liar: IpAddr = "203.0.113.9".parse().unwrap();
        let mut t = Table::default();
        t.ptr
            .insert(ip, vec!["crawl-66-249-66-1.googlebot.com.".into()]);
        t.addr
            .insert("crawl-66-249-66-1.googlebot.com".into(), vec![ip]);
        // The liar's reverse zone says Googlebot; Google's forward zone does not agree.
        t.ptr
            .insert(liar, vec!["crawl-66-249-66-1.googlebot.com.".into()]);
        let other: IpAddr = "198.51.100.7".parse().unwrap();
        t.ptr.insert(other, vec!["host.example.net.".into()]);
        t.addr.insert("host.example.net".into(), vec![other]);
        assert_eq!(
            check(&t, ip, &suffixes()).await,
            Fcrdns::Confirmed {
                name: "crawl-66-249-66-1.googlebot.com".into()
            }
        );
        assert_eq!(
            check(&t, "::ffff:66.249.66.1".parse().unwrap(), &suffixes()).await,
            Fcrdns::Confirmed {
                name: "crawl-66-249-66-1.googlebot.com".into()
            }
        );
        assert_eq!(check(&t, liar, &suffixes()).await, Fcrdns::Refuted);
        assert_eq!(
            check(&t, other, &suffixes()).await,
            Fcrdns::Refuted,
            "resolves back, but under no suffix"
        );
        assert_eq!(
            check(&t, "192.0.2.1".parse().unwrap(), &suffixes()).await,
            Fcrdns::Refuted
        );
        t.broken = true;
        assert!(matches!(
            check(&t, ip, &suffixes()).await,
            Fcrdns::Failed(_)
        ));
    }
}
