//! [`Talkers`]: who has been asking over the last five minutes, for the operator page's top
//! talkers and tier mix (`GET /admin/v1/stats`). Prometheus cannot answer this: a series per
//! caller would be unbounded cardinality.
//!
//! Time is cut into [`SLOTS`] slots of [`SLOT_SECS`]; a decision adds to the current slot, a
//! read sums the slots still inside the window. Callers are their hashed identity; an
//! anonymous caller's address is kept beside it, in memory only and only for the window, so the
//! operator can act on it (the store keeps hashes). Networks (/24, /48) are summed from those
//! addresses at read time. A slot holds at most [`MAX_CALLERS`] callers per shard so a spoofed flood cannot grow
//! memory without bound; decisions past that are still counted in the tier mix and in
//! `untracked`.
//!
//! This is the one lock a decision takes on the metrics side: the table is split into
//! [`SHARDS`], one per recording thread (assigned at a thread's first decision), so the proxy's
//! threads never wait for each other nor pass the table's cache lines back and forth; a read
//! (every few seconds) sums a caller over every shard.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::model::{Action, Decision, Tier};

pub const SLOT_SECS: u64 = 30;
pub const SLOTS: usize = 10;
/// The window a read covers: 5 minutes.
pub const WINDOW_SECS: u64 = SLOT_SECS * SLOTS as u64;
/// Callers kept per slot of one shard: at most `SHARDS × SLOTS × MAX_CALLERS` entries in all
/// (about 50 MB with 16 busy threads under a flood of new callers; a few MB on a small host).
pub const MAX_CALLERS: usize = 4096;
/// Independent tables, one per recording thread (threads past this share).
pub const SHARDS: usize = 16;

/// One caller's traffic within the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Talker {
    pub identity: String,
    /// The tier of its latest decision.
    pub tier: Tier,
    pub requests: u64,
    /// Requests answered with a refusal (429).
    pub refused: u64,
    /// The address of an anonymous caller (`None` for a key, token or session).
    pub address: Option<IpAddr>,
}

/// One network's traffic within the window: the callers of [`Talker::address`] grouped by
/// /24 (IPv4) or /48 (IPv6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetTalker {
    pub network: ipnet::IpNet,
    pub requests: u64,
    pub refused: u64,
    /// Distinct addresses seen in it.
    pub callers: u64,
}

/// The /24 or /48 an address is metered in on the page.
pub fn network_of(ip: IpAddr) -> ipnet::IpNet {
    let len = if ip.is_ipv4() { 24 } else { 48 };
    ipnet::IpNet::new(ip, len).map_or_else(|_| ipnet::IpNet::from(ip), |n| n.trunc())
}

/// What [`Talkers::read`] answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recent {
    /// Most refused first (ties: most requests), at most `n`; callers never refused are left out.
    pub by_refusals: Vec<Talker>,
    /// Most requests first, at most `n`.
    pub by_volume: Vec<Talker>,
    /// Networks with most requests first, at most `n`.
    pub networks: Vec<NetTalker>,
    /// Decisions per tier, in [`Tier::ALL`] order (anon, session, crawler, agent, sponsor).
    pub tier_mix: [u64; Tier::ALL.len()],
    /// Decisions whose caller did not fit in a full slot.
    pub untracked: u64,
}

#[derive(Clone, Copy, Debug)]
struct Tally {
    tier: Tier,
    requests: u64,
    refused: u64,
    /// Slot index of the latest decision, to pick the newest tier when slots are summed.
    seen: u64,
    addr: Option<IpAddr>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Absolute slot number (seconds / SLOT_SECS) this slot holds; stale ones are cleared.
    index: u64,
    callers: HashMap<Box<str>, Tally, BuildHasherDefault<Fnv>>,
    tiers: [u64; Tier::ALL.len()],
    untracked: u64,
}

#[derive(Debug)]
pub struct Talkers {
    epoch: Instant,
    /// `[shard]` → that shard's `[slot]`.
    shards: Vec<Shard>,
}

/// One thread's table, on cache lines of its own: neighbouring shards' locks must not share
/// one, or two threads would bounce it between cores on every decision.
#[derive(Debug)]
#[repr(align(128))]
struct Shard(Mutex<Vec<Slot>>);

impl Default for Talkers {
    fn default() -> Self {
        Talkers {
            epoch: Instant::now(),
            shards: (0..SHARDS)
                .map(|_| Shard(Mutex::new((0..SLOTS).map(|_| Slot::default()).collect())))
                .collect(),
        }
    }
}

/// FNV-1a: identities are hashes already (and bounded per slot), so a cheap hash spreads
/// them well; SipHash's flood resistance buys nothing here.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// This thread's shard, picked round-robin at its first decision.
fn my_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

impl Talkers {
    fn now_secs(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }

    /// Records one decision now.
    /// `addr` is the client's address, kept when the caller is anonymous (`ip:` identity).
    pub fn observe(&self, d: &Decision, addr: IpAddr) {
        let id = d.identity.as_str();
        let addr = id.starts_with("ip:").then_some(addr);
        self.observe_at(self.now_secs(), id, d.tier, d.action(), addr);
    }

    /// Records one decision at `secs` (seconds since any fixed start, never going back).
    pub fn observe_at(
        &self,
        secs: u64,
        identity: &str,
        tier: Tier,
        action: Action,
        addr: Option<IpAddr>,
    ) {
        let index = secs / SLOT_SECS;
        let refused = u64::from(action == Action::Reject);
        // A poisoned lock only means another decision panicked mid-count: the counts are
        // still usable, and the request path must not fail on them.
        let mut slots = self.shards[my_shard()]
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let slot = &mut slots[(index % SLOTS as u64) as usize];
        if slot.index != index {
            *slot = Slot {
                index,
                ..Slot::default()
            };
        }
        slot.tiers[tier.index()] += 1;
        if let Some(t) = slot.callers.get_mut(identity) {
            t.tier = tier;
            t.requests += 1;
            t.refused += refused;
        } else if slot.callers.len() < MAX_CALLERS {
            slot.callers.insert(
                identity.into(),
                Tally {
                    tier,
                    requests: 1,
                    refused,
                    seen: index,
                    addr,
                },
            );
        } else {
            slot.untracked += 1;
        }
    }

    /// Callers held now over every shard and slot: at most `SHARDS × SLOTS × MAX_CALLERS`.
    pub fn entries(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let g = s.0.lock().unwrap_or_else(|e| e.into_inner());
                g.iter().map(|slot| slot.callers.len()).sum::<usize>()
            })
            .sum()
    }

    /// The window ending now, top `n` of each list.
    pub fn read(&self, n: usize) -> Recent {
        self.read_at(self.now_secs(), n)
    }

    /// The window ending at `secs`.
    pub fn read_at(&self, secs: u64, n: usize) -> Recent {
        let now = secs / SLOT_SECS;
        let oldest = now.saturating_sub(SLOTS as u64 - 1);
        let mut out = Recent::default();
        let mut sum: HashMap<&str, Tally> = HashMap::new();
        let guards: Vec<_> = self
            .shards
            .iter()
            .map(|s| s.0.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        for slot in guards
            .iter()
            .flat_map(|g| g.iter())
            .filter(|s| (oldest..=now).contains(&s.index))
        {
            for (i, v) in slot.tiers.iter().enumerate() {
                out.tier_mix[i] += v;
            }
            out.untracked += slot.untracked;
            for (id, t) in &slot.callers {
                let e = sum.entry(id).or_insert(Tally {
                    requests: 0,
                    refused: 0,
                    ..*t
                });
                e.requests += t.requests;
                e.refused += t.refused;
                if t.seen >= e.seen {
                    e.seen = t.seen;
                    e.tier = t.tier;
                }
            }
        }
        let mut all: Vec<Talker> = sum
            .into_iter()
            .map(|(id, t)| Talker {
                identity: id.to_string(),
                tier: t.tier,
                requests: t.requests,
                refused: t.refused,
                address: t.addr,
            })
            .collect();
        drop(guards);
        let mut nets: HashMap<ipnet::IpNet, NetTalker> = HashMap::new();
        for (t, a) in all.iter().filter_map(|t| t.address.map(|a| (t, a))) {
            let network = network_of(a);
            let e = nets.entry(network).or_insert(NetTalker {
                network,
                requests: 0,
                refused: 0,
                callers: 0,
            });
            e.requests += t.requests;
            e.refused += t.refused;
            e.callers += 1;
        }
        let mut nets: Vec<NetTalker> = nets.into_values().collect();
        nets.sort_by(|a, b| {
            (b.requests, b.refused, a.network).cmp(&(a.requests, a.refused, b.network))
        });
        nets.truncate(n);
        out.networks = nets;
        // Identity breaks ties so the order is stable from one poll to the next.
        all.sort_by(|a, b| {
            (b.requests, b.refused, &a.identity).cmp(&(a.requests, a.refused, &b.identity))
        });
        out.by_volume = all.iter().take(n).cloned().collect();
        all.retain(|t| t.refused > 0);
        all.sort_by(|a, b| {
            (b.refused, b.requests, &a.identity).cmp(&(a.refused, a.requests, &b.identity))
        });
        all.truncate(n);
        out.by_refusals = all;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ts: &[Talker]) -> Vec<(&str, u64, u64)> {
        ts.iter()
            .map(|t| (t.identity.as_str(), t.requests, t.refused))
            .collect()
    }

    #[test]
    fn ranks_by_refusals_and_by_volume() {
        let t = Talkers::default();
        for _ in 0..5 {
            t.observe_at(10, "ip:a", Tier::Anon, Action::Allow, None);
        }
        for _ in 0..3 {
            t.observe_at(10, "ip:b", Tier::Anon, Action::Reject, None);
        }
        t.observe_at(10, "key:c", Tier::Sponsor, Action::Delay, None);
        let r = t.read_at(10, 2);
        assert_eq!(names(&r.by_volume), [("ip:a", 5, 0), ("ip:b", 3, 3)]);
        assert_eq!(names(&r.by_refusals), [("ip:b", 3, 3)]);
        assert_eq!(r.tier_mix, [8, 0, 0, 0, 1]);
    }

    #[test]
    fn sums_slots_inside_five_minutes_and_forgets_older_ones() {
        let t = Talkers::default();
        t.observe_at(0, "ip:a", Tier::Anon, Action::Reject, None);
        t.observe_at(100, "ip:a", Tier::Session, Action::Allow, None);
        let r = t.read_at(299, 5);
        assert_eq!(names(&r.by_volume), [("ip:a", 2, 1)]);
        assert_eq!(r.by_volume[0].tier, Tier::Session, "the newest tier wins");
        let r = t.read_at(300, 5);
        assert_eq!(names(&r.by_volume), [("ip:a", 1, 0)]);
        assert_eq!(r.tier_mix, [0, 1, 0, 0, 0]);
        // A slot reused 5 minutes later starts empty.
        t.observe_at(330, "ip:b", Tier::Anon, Action::Allow, None);
        let r = t.read_at(330, 5);
        assert_eq!(names(&r.by_volume), [("ip:a", 1, 0), ("ip:b", 1, 0)]);
        assert!(t.read_at(1000, 5).by_volume.is_empty());
    }

    #[test]
    fn a_full_slot_counts_new_callers_as_untracked() {
        let t = Talkers::default();
        t.observe_at(0, "ip:first", Tier::Anon, Action::Allow, None);
        let flood = 3 * MAX_CALLERS;
        for i in 0..flood {
            t.observe_at(0, &format!("ip:{i:016x}"), Tier::Anon, Action::Allow, None);
        }
        t.observe_at(0, "ip:first", Tier::Anon, Action::Allow, None);
        let r = t.read_at(0, usize::MAX);
        let tracked = r.by_volume.len();
        assert_eq!(tracked, MAX_CALLERS, "one thread fills its own shard");
        assert_eq!(r.untracked as usize, flood + 1 - tracked);
        assert_eq!(r.tier_mix[0], flood as u64 + 2);
        // A caller seen before the flood keeps being counted.
        assert_eq!(names(&r.by_volume[..1]), [("ip:first", 2, 0)]);
    }

    #[test]
    fn addresses_stay_bounded_under_a_hundred_thousand_callers_and_group_by_network() {
        let t = Talkers::default();
        // Four recording threads, 100,000 distinct addresses over ten minutes of slots.
        std::thread::scope(|s| {
            for w in 0..4u32 {
                let t = &t;
                s.spawn(move || {
                    for i in 0..25_000u32 {
                        let n = w * 25_000 + i;
                        let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 | n));
                        let secs = u64::from(i) * 600 / 25_000;
                        t.observe_at(
                            secs,
                            &format!("ip:{n:016x}"),
                            Tier::Anon,
                            Action::Allow,
                            Some(ip),
                        );
                    }
                });
            }
        });
        let bound = SHARDS * SLOTS * MAX_CALLERS;
        let held = t.entries();
        assert!(
            held <= 4 * SLOTS * MAX_CALLERS && held <= bound,
            "{held} > {bound}"
        );
        // Each entry: the boxed identity (21 bytes), its tally with the address, the map's slot.
        let per_entry = 21 + std::mem::size_of::<(Box<str>, Tally)>() + 8;
        eprintln!(
            "talkers: {held} entries of at most {bound}, about {} KB now, {} MB at the bound",
            held * per_entry / 1024,
            bound * per_entry / (1024 * 1024)
        );
        assert!(bound * per_entry < 64 * 1024 * 1024);
        // Networks are summed from the addresses kept.
        let t = Talkers::default();
        for h in 1..=3u8 {
            let a: IpAddr = format!("198.51.100.{h}").parse().unwrap();
            t.observe_at(0, &format!("ip:{h}"), Tier::Anon, Action::Reject, Some(a));
        }
        let b: IpAddr = "2001:db8:1:2::9".parse().unwrap();
        t.observe_at(0, "ip:v6", Tier::Anon, Action::Allow, Some(b));
        t.observe_at(0, "key:k", Tier::Sponsor, Action::Allow, None);
        let r = t.read_at(0, 10);
        let nets: Vec<(String, u64, u64, u64)> = r
            .networks
            .iter()
            .map(|n| (n.network.to_string(), n.requests, n.refused, n.callers))
            .collect();
        assert_eq!(
            nets,
            [
                ("198.51.100.0/24".into(), 3, 3, 3),
                ("2001:db8:1::/48".into(), 1, 0, 1)
            ]
        );
    }
}
