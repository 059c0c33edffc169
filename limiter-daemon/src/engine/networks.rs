//! Network budgets in a decision: which networks a caller also counts against (`[networks]`:
//! its prefix, and with an ASN table its autonomous system), and a network's burst becoming a
//! strike. What the strike locks is `[networks] lockout`: by default the addresses that sent in
//! the offending burst window ([`super::net_senders`]), each through the per-address lockout
//! path an address's own burst takes ([`Engine::strike`]), so an address that sent nothing is
//! never locked by its network; opt-in, the whole prefix, as an escalating deny-list entry in
//! the kernel's deny trie, with a deadline.
//!
//! Only callers metered by address count against networks (anonymous and session callers, and
//! keys not yet verified): a verified API key or bearer token is its own identity, whatever
//! network it calls from, and a verified crawler is metered on its own rung.
//!
//! Each rung counts against its own share of a network ([`NetShare`], sized by
//! [`crate::config::networks::NetworkSettings::share`]): counted, struck and locked apart. A
//! session caller that spends its whole hourly budget spends a tenth of the session share and
//! none of the anonymous one, so its neighbours (signed in or not) are still admitted; and a
//! burst of cookie-carrying addresses locks those addresses, not the anonymous readers beside
//! them. A network's strikes are kept in memory (a restart begins its escalation anew); the
//! lockouts they make persist in the store's deny list, and travel to a fleet's other hosts
//! with it.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Subnets, Ipv6Subnets};

use super::base::Engine;
use super::net_share::NetShare;
use super::strikes::{decayed_strikes, lock_duration};
use crate::clock::ceil_secs;
use crate::config::asn::AsnRange;
use crate::config::networks::NetLockout;
use crate::config::Config;
use crate::identity::hash::IdentityHasher;
use crate::identity::Caller;
use crate::model::{
    Decision, ListEntry, ListKind, LockCause, Locked, NetLevel, NetworkName, PerWindow,
    StrikeRecord, Tier, WindowKind,
};
use crate::store::count::{Limit, NetCount, NET_LEVELS};

/// Marks a deny-list entry as a network's lockout (after [`super::lockouts::CIDR_LOCKOUT_MARK`]):
/// the 429 then says so, and the admin API lists it as made by strikes.
pub const NETWORK_LOCKOUT_MARK: &str = "lockout: network ";

/// How the reason of an address's lockout made by its network's strike begins (`network
/// 203.0.113.0/24 burst`).
pub const NETWORK_REASON: &str = "network ";

/// Network strike records kept at most; past it the quietest are forgotten.
const MAX_STRIKE_RECORDS: usize = 65_536;

/// Most CIDRs one ASN range's lockout is written as (a range that is no prefix splits into
/// several).
const MAX_RANGE_CIDRS: usize = 64;

/// The networks of one caller, by [`NetLevel`] index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallerNetworks {
    pub names: [Option<NetworkName>; NET_LEVELS],
    /// The rung whose share of each network the caller counts against.
    pub tier: Tier,
    /// The ASN table's range holding the caller: what an ASN lockout locks.
    pub asn_range: Option<AsnRange>,
}

impl CallerNetworks {
    /// The caller's share of its network at `level`.
    pub fn share(&self, level: NetLevel) -> Option<NetShare> {
        self.names[level.index()].map(|name| NetShare {
            name,
            tier: self.tier,
        })
    }
}

impl CallerNetworks {
    /// The networks `caller` counts against, with their keys and windows for the store.
    pub fn of(
        cfg: &Config,
        caller: &Caller,
        hasher: &IdentityHasher,
    ) -> (CallerNetworks, [Option<NetCount>; NET_LEVELS]) {
        let mut nets = CallerNetworks {
            names: [None; NET_LEVELS],
            tier: caller.tier,
            asn_range: None,
        };
        let mut counts = [None; NET_LEVELS];
        if !caller.counts_against_networks() {
            return (nets, counts);
        }
        let n = &cfg.networks;
        let ip = caller.ip.to_canonical();
        if n.prefix.is_some() {
            let len = match ip {
                IpAddr::V4(_) => n.ipv4_prefix,
                IpAddr::V6(_) => n.ipv6_prefix,
            };
            if let Ok(net) = IpNet::new(ip, len) {
                nets.names[NetLevel::Prefix.index()] = Some(NetworkName::Prefix(net.trunc()));
            }
        }
        if let (Some(_), Some(table)) = (n.asn, &n.asn_table) {
            if let Some(r) = table.lookup(ip) {
                nets.names[NetLevel::Asn.index()] = Some(NetworkName::Asn(r.asn));
                nets.asn_range = Some(r);
            }
        }
        for level in NetLevel::ALL {
            let (Some(name), Some(b)) = (
                nets.names[level.index()],
                n.share(level, caller.tier, &cfg.tiers),
            ) else {
                continue;
            };
            counts[level.index()] = Some(NetCount {
                id: hasher.net_id(name, caller.tier),
                limits: PerWindow::default()
                    .with(WindowKind::Burst, Some(Limit::refusing(b.burst.get())))
                    .with(WindowKind::Hourly, Some(Limit::refusing(b.hourly.get()))),
            });
        }
        (nets, counts)
    }

    /// What a lockout of network `level` locks: the prefix, or the ASN range as CIDRs.
    fn lock_targets(&self, level: NetLevel) -> Vec<IpNet> {
        match (self.names[level.index()], self.asn_range) {
            (Some(NetworkName::Prefix(net)), _) => vec![net],
            (Some(NetworkName::Asn(_)), Some(r)) => range_cidrs(r.start, r.end),
            _ => Vec::new(),
        }
    }
}

/// `start..=end` as the CIDRs that cover it exactly (at most [`MAX_RANGE_CIDRS`]; IPv4 no wider
/// than /8, IPv6 no wider than /16, the widest a lockout may be).
fn range_cidrs(start: IpAddr, end: IpAddr) -> Vec<IpNet> {
    all_range_cidrs(start, end)
        .into_iter()
        .take(MAX_RANGE_CIDRS)
        .collect()
}

/// `start..=end` as every CIDR that covers it exactly (IPv4 no wider than /8, IPv6 no wider
/// than /16); the caller bounds how many it takes.
pub(crate) fn all_range_cidrs(start: IpAddr, end: IpAddr) -> Vec<IpNet> {
    match (start, end) {
        (IpAddr::V4(s), IpAddr::V4(e)) => Ipv4Subnets::new(s, e, 8).map(IpNet::V4).collect(),
        (IpAddr::V6(s), IpAddr::V6(e)) => Ipv6Subnets::new(s, e, 16).map(IpNet::V6).collect(),
        _ => Vec::new(),
    }
}

impl Engine {
    /// Notes that `addr` sent a counted request in each of its networks, for a strike of one of
    /// them to find ([`super::net_senders`]).
    pub(crate) fn note_senders(&self, nets: &CallerNetworks, addr: IpAddr, now_ms: u64) {
        let span = WindowKind::Burst.spec().span_ms;
        for share in NetLevel::ALL.into_iter().filter_map(|l| nets.share(l)) {
            self.net_senders.record(share, addr, now_ms, span);
        }
    }

    /// Strikes network `level` of the caller at (grouped) address `caller` for a burst refused
    /// at `now_ms` whose window frees capacity in `frees_ms`, locks out what `[networks]
    /// lockout` says (the addresses that sent in the window, or the prefix), and makes `d` say
    /// so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn network_strike(
        &self,
        cfg: &Config,
        d: &mut Decision,
        caller: IpAddr,
        nets: &CallerNetworks,
        level: NetLevel,
        now_ms: u64,
        frees_ms: u64,
    ) {
        let Some(share) = nets.share(level) else {
            return;
        };
        let name = share.name;
        let prefix = cfg.networks.lockout == NetLockout::Prefix;
        let (level_no, duration) = {
            let _serial = self.strike_lock.lock();
            let mut strikes = self.net_strikes.lock();
            let prev = strikes.0.get(&share).copied();
            if let Some(p) = prev.filter(|p| p.quiet_from_ms > now_ms) {
                // Struck already (another request of the same burst): that lockout holds. Under
                // `addresses`, a newcomer is refused by the spent budget, and never locked.
                if prefix {
                    d.lockout_level = Some(p.strikes);
                }
                return;
            }
            let level_no = prev.map_or(0, |r| decayed_strikes(&r, now_ms, cfg.lockout.decay)) + 1;
            let r = if cfg.lockout.jitter > 0.0 {
                use rand::Rng;
                self.rng.lock().gen::<f64>()
            } else {
                0.0
            };
            let duration =
                lock_duration(&cfg.lockout, level_no, r).max(Duration::from_millis(frees_ms));
            // A prefix's strike holds while the prefix is locked; an address strike's, while the
            // offending burst window is full (after it, a new burst is a new offence).
            let holds = if prefix {
                duration
            } else {
                Duration::from_millis(frees_ms.max(1000))
            };
            let until = now_ms.saturating_add(u64::try_from(holds.as_millis()).unwrap_or(u64::MAX));
            if strikes.0.len() >= MAX_STRIKE_RECORDS {
                let horizon = now_ms.saturating_sub(crate::embedded::STRIKE_RETENTION_MS);
                strikes.0.retain(|_, s| s.quiet_from_ms > horizon);
                if strikes.0.len() >= MAX_STRIKE_RECORDS {
                    strikes.0.clear();
                }
            }
            strikes.0.insert(
                share,
                StrikeRecord {
                    strikes: level_no,
                    last_strike_ms: now_ms,
                    quiet_from_ms: until,
                },
            );
            (level_no, duration)
        };
        if prefix {
            self.lock_prefix(d, nets, name, level, level_no, now_ms, duration);
        } else {
            self.lock_senders(cfg, d, caller, share, now_ms, frees_ms);
        }
    }

    /// `lockout = "addresses"`: every address that sent in the share's burst window, the
    /// caller among them, is struck through [`Engine::strike`], the path of an address's own
    /// burst, each at its own escalation.
    fn lock_senders(
        &self,
        cfg: &Config,
        d: &mut Decision,
        caller: IpAddr,
        share: NetShare,
        now_ms: u64,
        frees_ms: u64,
    ) {
        let name = share.name;
        let span = WindowKind::Burst.spec().span_ms;
        let mut senders = self.net_senders.take(&share, now_ms, span);
        if !senders.contains(&caller) {
            senders.push(caller);
        }
        let reason = format!("{NETWORK_REASON}{name} burst");
        let mut locked = Vec::with_capacity(senders.len());
        let mut own = None;
        for ip in senders {
            // A trusted proxy or allow-listed address is never locked ([`super::exempt`]).
            let Some(l) = self.strike(cfg, ip, now_ms, frees_ms, LockCause::Network, Some(&reason))
            else {
                continue;
            };
            // An address locked already (its own burst) keeps that lockout: not this strike's.
            let made = l.since_ms == now_ms && l.reason.as_deref() == Some(reason.as_str());
            if made {
                locked.push(Locked {
                    net: IpNet::from(ip),
                    level: l.level,
                });
            }
            if ip == caller {
                own = Some((l.level, l.remaining_ms(now_ms)));
            }
        }
        tracing::info!(
            event = "network_strike",
            network = %name,
            addresses = locked.len(),
            cause = "network",
            "network burst exceeded: the addresses that sent in its burst window locked out"
        );
        if let Some(n) = d.network.as_mut() {
            n.locked = locked;
        }
        if let Some((level, remaining_ms)) = own {
            d.lockout_level = Some(level);
            if let (Some(reason), Some(before)) = (d.reason(), d.retry_after_secs()) {
                d.reject(reason, ceil_secs(remaining_ms).max(1).max(before));
            }
        }
    }

    /// `lockout = "prefix"`: the prefix (or ASN range) goes to the deny list and the kernel's
    /// deny trie until the network escalation's deadline.
    #[allow(clippy::too_many_arguments)]
    fn lock_prefix(
        &self,
        d: &mut Decision,
        nets: &CallerNetworks,
        name: NetworkName,
        level: NetLevel,
        level_no: u32,
        now_ms: u64,
        duration: Duration,
    ) {
        let until = now_ms.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        let mut locked = Vec::new();
        for net in nets.lock_targets(level) {
            let entry = ListEntry {
                net,
                until_ms: Some(until),
                comment: format!("{NETWORK_LOCKOUT_MARK}{name} burst, level {level_no}"),
            };
            match self.lists().add(ListKind::Deny, entry) {
                Ok(_) => locked.push(Locked {
                    net,
                    level: level_no,
                }),
                Err(err) => tracing::error!(error = %err, %net, "cannot persist a network lockout"),
            }
        }
        tracing::info!(
            event = "lockout_made",
            network = %name,
            level = level_no,
            secs = duration.as_secs(),
            cause = "network",
            "network burst exceeded: network locked out"
        );
        if let Some(n) = d.network.as_mut() {
            n.locked = locked;
        }
        d.lockout_level = Some(level_no);
        if let (Some(reason), Some(before)) = (d.reason(), d.retry_after_secs()) {
            d.reject(reason, ceil_secs(duration.as_millis() as u64).max(before));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_asn_range_locks_as_the_cidrs_that_cover_it() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let nets = range_cidrs(ip("1.0.4.0"), ip("1.0.7.255"));
        assert_eq!(nets, vec!["1.0.4.0/22".parse::<IpNet>().unwrap()]);
        let nets = range_cidrs(ip("1.0.4.0"), ip("1.0.8.255"));
        assert_eq!(nets.len(), 2);
        assert!(nets.iter().all(|n| n.prefix_len() >= 8));
        let wide = range_cidrs(ip("0.0.0.0"), ip("255.255.255.255"));
        assert_eq!(wide.len(), MAX_RANGE_CIDRS);
        assert!(wide.iter().all(|n| n.prefix_len() == 8));
    }
}
