//! The addresses strikes never lock: a trusted proxy's (`[identity] trusted_proxies`), whose
//! lockout would cut off every client behind it, and an allow-listed one. An operator may not lock a trusted proxy either: the admin API
//! refuses it naming the field, so a lockout meant for one client cannot take a whole front end
//! out of service. Callers behind a proxy are metered on their own; the proxy stays reachable.
//!
//! `[http] trusted_peers` (the forward-auth front ends, loopback by default) are not exempt: they
//! name their client in `X-Real-IP`, and one that names none is an unattributed caller, never
//! struck; the peer's own requests are metered and struck like anyone's.

use std::net::IpAddr;

use ipnet::IpNet;

use super::base::Engine;
use crate::config::Config;

/// Why a lockout of an address or range is not made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exemption {
    /// It holds this `[identity] trusted_proxies` entry.
    TrustedProxy(IpNet),
    /// It holds this allow-list entry.
    Allowed(IpNet),
}

impl std::fmt::Display for Exemption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exemption::TrustedProxy(n) => write!(f, "trusted proxy {n}"),
            Exemption::Allowed(n) => write!(f, "allow-listed {n}"),
        }
    }
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The range a lockout of the grouped address `group` covers (IPv6 groups are prefixes).
pub fn group_net(cfg: &Config, group: IpAddr) -> IpNet {
    let len = match group {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => cfg.identity.ipv6_prefix.min(128),
    };
    IpNet::new(group, len).map_or_else(|_| IpNet::from(group), |n| n.trunc())
}

/// The `[identity] trusted_proxies` entry that `net` overlaps, if any.
pub fn trusted_proxy_in(cfg: &Config, net: &IpNet) -> Option<IpNet> {
    cfg.identity
        .trusted_proxies
        .iter()
        .find(|p| overlaps(p, net))
        .copied()
}

impl Engine {
    /// Why strikes may not lock the grouped address `group`, if they may not.
    pub(crate) fn strike_exemption(&self, cfg: &Config, group: IpAddr) -> Option<Exemption> {
        let net = group_net(cfg, group);
        if let Some(p) = trusted_proxy_in(cfg, &net) {
            return Some(Exemption::TrustedProxy(p));
        }
        self.with_runtime(|rt| {
            rt.lists
                .allow
                .iter()
                .find(|e| overlaps(&e.net, &net))
                .map(|e| Exemption::Allowed(e.net))
        })
    }
}
