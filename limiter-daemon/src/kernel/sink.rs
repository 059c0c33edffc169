//! The engine's [`EnforcementSink`] implemented on the kernel maps: lockouts, verified tiers and
//! allow/deny list entries become map writes (a syscall each, no waiting). Failures are logged,
//! never propagated into a request: the daemon's own L7 answer still stands when the kernel write
//! fails.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use limiter_common::config::{TIER_AGENT, TIER_ANON, TIER_CRAWLER, TIER_SESSION, TIER_SPONSOR};

use super::Dataplane;
use crate::engine::sink::EnforcementSink;
use crate::model::ListKind;
use crate::model::Tier;

/// The kernel's tier index for an engine tier.
pub fn tier_index(tier: Tier) -> u32 {
    match tier {
        Tier::Anon => TIER_ANON,
        Tier::Session => TIER_SESSION,
        Tier::Crawler => TIER_CRAWLER,
        Tier::Agent => TIER_AGENT,
        Tier::Sponsor => TIER_SPONSOR,
    }
}

impl EnforcementSink for Dataplane {
    fn lock(&self, ip: IpAddr, duration: Duration, level: u32) {
        if let Err(err) = self.maps().lock(ip, duration, level) {
            tracing::warn!(%ip, error = %super::error::chain(&err), "kernel lockout not written");
        }
    }

    fn unlock(&self, ip: IpAddr) {
        if let Err(err) = self.maps().unlock(ip) {
            tracing::warn!(%ip, error = %super::error::chain(&err), "kernel lockout not removed");
        }
    }

    fn set_tier(&self, ip: IpAddr, tier: Tier) {
        let res = match tier {
            // The anonymous ceiling is the default: no entry needed.
            Tier::Anon => self.maps().clear_tier(ip).map(drop),
            t => self
                .maps()
                .set_tier(ip, tier_index(t), self.settings().tier_ttl),
        };
        if let Err(err) = res {
            tracing::warn!(%ip, tier = tier.as_str(), error = %super::error::chain(&err), "kernel tier not written");
        }
    }

    fn list_add(&self, kind: ListKind, net: IpNet, ttl: Option<Duration>) {
        let res = match kind {
            ListKind::Allow => self.maps().allow_add(net),
            ListKind::Deny => self.maps().deny_add(net, ttl),
        };
        if let Err(err) = res {
            tracing::warn!(%net, list = ?kind, error = %super::error::chain(&err), "kernel list entry not written");
        }
    }

    fn list_remove(&self, kind: ListKind, net: IpNet) {
        let res = match kind {
            ListKind::Allow => self.maps().allow_remove(net),
            ListKind::Deny => self.maps().deny_remove(net),
        };
        if let Err(err) = res {
            tracing::warn!(%net, list = ?kind, error = %super::error::chain(&err), "kernel list entry not removed");
        }
    }
}
