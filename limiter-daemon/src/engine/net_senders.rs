//! [`NetSenders`]: which (grouped) addresses sent recently in each network share (a rung's share
//! of a network, [`NetShare`]), in memory: what a share's burst strike locks out under
//! `[networks] lockout = "addresses"`, so that an address that sent nothing is never locked by
//! its network, and one that sent on another rung is not locked by this rung's burst.
//!
//! Every counted decision of a caller metered against networks records its address under each
//! of its networks ([`NetSenders::record`]); a strike takes the network's senders of the last
//! burst span ([`NetSenders::take`]). The record is kept per host: on a fleet the host whose
//! request struck locks the senders it saw, and the lockouts reach the other hosts through the
//! store.
//!
//! # Bound
//!
//! At most [`MAX_PER_NETWORK`] addresses per network share (a whole IPv4 /24) and [`MAX_ENTRIES`]
//! (address, network) pairs in all, in [`SHARDS`] shards of `MAX_ENTRIES / SHARDS`: about
//! 50 bytes a pair plus about 250 bytes per network, so under 20 MB at worst (every pair in a
//! network of its own), 3–4 MB when networks hold many senders. Past a network's bound its
//! senders outside the burst span go first, then the half that sent least (the heaviest
//! senders are the ones a strike must find); past a shard's, its pairs outside the span go
//! first, then the networks quiet longest. Forgetting costs only lockouts: the network's budget
//! still refuses, and the request that strikes is always recorded, so it is always locked.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;

use parking_lot::Mutex;

use super::net_share::NetShare;

/// Addresses kept per network: a whole IPv4 /24.
pub const MAX_PER_NETWORK: usize = 256;

/// (address, network) pairs kept in all.
pub const MAX_ENTRIES: usize = 65_536;

/// Shards, each under its own lock: networks spread over them, so decisions of different
/// networks rarely wait on each other.
pub const SHARDS: usize = 16;

const MAX_PER_SHARD: usize = MAX_ENTRIES / SHARDS;

/// One address's sending in one network.
#[derive(Clone, Copy, Debug)]
struct Sender {
    last_ms: u64,
    /// Requests since it began sending in the span (reset when it was quiet a whole span).
    sent: u32,
}

#[derive(Default)]
struct Senders {
    by_addr: HashMap<IpAddr, Sender>,
    newest_ms: u64,
}

impl Senders {
    /// Drops the senders quiet since `horizon`, then, if still full, all but the heaviest half.
    fn make_room(&mut self, horizon: u64) {
        self.by_addr.retain(|_, s| s.last_ms > horizon);
        if self.by_addr.len() < MAX_PER_NETWORK {
            return;
        }
        let mut all: Vec<(IpAddr, Sender)> = self.by_addr.drain().collect();
        all.sort_unstable_by_key(|(_, s)| std::cmp::Reverse((s.sent, s.last_ms)));
        all.truncate(MAX_PER_NETWORK / 2);
        self.by_addr.extend(all);
    }
}

#[derive(Default)]
struct Shard {
    nets: HashMap<NetShare, Senders>,
    /// Pairs held, over every network of the shard.
    entries: usize,
}

impl Shard {
    /// Drops pairs quiet since `horizon`, then, if still over half the bound, the networks
    /// quiet longest until it is not.
    fn make_room(&mut self, horizon: u64) {
        self.nets.retain(|_, n| {
            n.by_addr.retain(|_, s| s.last_ms > horizon);
            !n.by_addr.is_empty()
        });
        self.entries = self.nets.values().map(|n| n.by_addr.len()).sum();
        if self.entries < MAX_PER_SHARD {
            return;
        }
        let mut order: Vec<(u64, NetShare)> =
            self.nets.iter().map(|(k, n)| (n.newest_ms, *k)).collect();
        order.sort_unstable_by_key(|(newest, _)| *newest);
        for (_, name) in order {
            if self.entries <= MAX_PER_SHARD / 2 {
                break;
            }
            if let Some(n) = self.nets.remove(&name) {
                self.entries -= n.by_addr.len();
            }
        }
    }
}

/// The recent senders of each network; see the module doc for the bound.
pub(crate) struct NetSenders {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for NetSenders {
    fn default() -> Self {
        NetSenders {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Default::default(),
        }
    }
}

impl NetSenders {
    fn shard(&self, net: &NetShare) -> &Mutex<Shard> {
        let i = usize::try_from(self.hasher.hash_one(net) % SHARDS as u64).unwrap_or(0);
        &self.shards[i]
    }

    /// `addr` sent a request at `now_ms` in network `net`; the burst window spans `span_ms`.
    pub fn record(&self, net: NetShare, addr: IpAddr, now_ms: u64, span_ms: u64) {
        let horizon = now_ms.saturating_sub(span_ms);
        let mut shard = self.shard(&net).lock();
        if let Some(n) = shard.nets.get_mut(&net) {
            n.newest_ms = n.newest_ms.max(now_ms);
            if let Some(s) = n.by_addr.get_mut(&addr) {
                if s.last_ms <= horizon {
                    s.sent = 0;
                }
                s.sent = s.sent.saturating_add(1);
                s.last_ms = s.last_ms.max(now_ms);
                return;
            }
        }
        if shard.entries >= MAX_PER_SHARD {
            shard.make_room(horizon);
        }
        let shard = &mut *shard;
        let n = shard.nets.entry(net).or_default();
        n.newest_ms = n.newest_ms.max(now_ms);
        if n.by_addr.len() >= MAX_PER_NETWORK {
            let before = n.by_addr.len();
            n.make_room(horizon);
            shard.entries -= before - n.by_addr.len();
        }
        n.by_addr.insert(
            addr,
            Sender {
                last_ms: now_ms,
                sent: 1,
            },
        );
        shard.entries += 1;
    }

    /// The addresses that sent in `net` within `span_ms` before `now_ms`, heaviest first; the
    /// network's record is emptied (they are being locked out).
    pub fn take(&self, net: &NetShare, now_ms: u64, span_ms: u64) -> Vec<IpAddr> {
        let horizon = now_ms.saturating_sub(span_ms);
        let mut shard = self.shard(net).lock();
        let Some(n) = shard.nets.remove(net) else {
            return Vec::new();
        };
        shard.entries -= n.by_addr.len();
        drop(shard);
        let mut recent: Vec<(IpAddr, Sender)> = n
            .by_addr
            .into_iter()
            .filter(|(_, s)| s.last_ms > horizon)
            .collect();
        recent.sort_unstable_by(|a, b| b.1.sent.cmp(&a.1.sent).then_with(|| a.0.cmp(&b.0)));
        recent.into_iter().map(|(ip, _)| ip).collect()
    }

    /// (address, network) pairs held: what the bound limits.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().entries).sum()
    }

    /// Networks held.
    #[cfg(test)]
    pub fn networks(&self) -> usize {
        self.shards.iter().map(|s| s.lock().nets.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NetworkName, Tier};

    const SPAN: u64 = 60_000;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::from([a, b, c, d])
    }

    fn anon(name: NetworkName) -> NetShare {
        NetShare {
            name,
            tier: Tier::Anon,
        }
    }

    fn net24(a: u8, b: u8, c: u8) -> NetShare {
        anon(NetworkName::Prefix(
            format!("{a}.{b}.{c}.0/24").parse().unwrap(),
        ))
    }

    #[test]
    fn a_strike_takes_only_the_addresses_that_sent_in_the_span() {
        let s = NetSenders::default();
        let net = net24(203, 0, 113);
        s.record(net, v4(203, 0, 113, 1), 1_000, SPAN);
        s.record(net, v4(203, 0, 113, 2), 50_000, SPAN);
        for _ in 0..5 {
            s.record(net, v4(203, 0, 113, 3), 90_000, SPAN);
        }
        s.record(net24(198, 51, 100), v4(198, 51, 100, 9), 90_000, SPAN);
        // At 100 s the span began at 40 s: .1 sent before it.
        let got = s.take(&net, 100_000, SPAN);
        assert_eq!(got, vec![v4(203, 0, 113, 3), v4(203, 0, 113, 2)]);
        assert!(s.take(&net, 100_000, SPAN).is_empty(), "taken once");
        assert_eq!(s.len(), 1, "the other network's sender stays");
    }

    #[test]
    fn memory_stays_bounded_under_a_spray_of_addresses_and_networks() {
        let s = NetSenders::default();
        // Two million requests, each from a new address, within one burst span: 8,192 /24s of
        // 256 addresses each, and one IPv6 /48 spraying /64s.
        let mut now = 1_000_000;
        for i in 0..2_000_000u32 {
            let [_, b, c, d] = i.to_be_bytes();
            let (net, addr) = if i % 4 == 0 {
                let a6 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 7, i as u16, 0, 0, 0, 0);
                (
                    anon(NetworkName::Prefix("2001:db8:7::/48".parse().unwrap())),
                    IpAddr::V6(a6),
                )
            } else {
                (net24(10, b, c), v4(10, b, c, d))
            };
            s.record(net, addr, now, SPAN);
            if i % 100 == 0 {
                now += 1;
            }
            if i % 65_536 == 0 {
                assert!(s.len() <= MAX_ENTRIES, "{} pairs at request {i}", s.len());
            }
        }
        assert!(s.len() <= MAX_ENTRIES, "{} pairs", s.len());
        assert!(s.networks() <= MAX_ENTRIES);
        for shard in s.shards.iter() {
            let shard = shard.lock();
            assert!(shard.entries <= MAX_PER_SHARD);
            assert_eq!(
                shard.entries,
                shard.nets.values().map(|n| n.by_addr.len()).sum::<usize>(),
                "the count is the truth"
            );
            assert!(shard
                .nets
                .values()
                .all(|n| n.by_addr.len() <= MAX_PER_NETWORK));
        }
    }

    #[test]
    fn past_a_networks_bound_the_heaviest_senders_are_kept() {
        let s = NetSenders::default();
        let net = anon(NetworkName::Prefix("2001:db8:7::/48".parse().unwrap()));
        let heavy: IpAddr = "2001:db8:7:ffff::".parse().unwrap();
        for _ in 0..10 {
            s.record(net, heavy, 1_000, SPAN);
        }
        for i in 0..10_000u16 {
            let a = std::net::Ipv6Addr::new(0x2001, 0xdb8, 7, i, 0, 0, 0, 0);
            s.record(net, IpAddr::V6(a), 2_000, SPAN);
        }
        let got = s.take(&net, 3_000, SPAN);
        assert!(got.len() <= MAX_PER_NETWORK, "{}", got.len());
        assert_eq!(got[0], heavy, "the heaviest sender is still known");
        assert_eq!(s.len(), 0);
    }
}
