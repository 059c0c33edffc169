//! [`Talkers`]: who has been asking over the last five minutes, for the operator page's top
//! talkers and tier mix (`GET /admin/v1/stats`). Prometheus cannot answer this: a series per
//! caller would be unbounded cardinality.
//!
//! Time is cut into [`SLOTS`] slots of [`SLOT_SECS`]; a decision adds to the current slot, a
//! read sums the slots still inside the window. Callers are their hashed identity; an
//! anonymous caller's address is kept beside it, in memory only and only for the window, so the
//! operator can act on it (the store keeps hashes). Networks (/24, /48, and the ASN when the
//! config has an IP-to-ASN table) are summed from those addresses at read time. Crawlers and
//! signed agents are also tallied by the name they give (the `[crawlers] user_agents` pattern
//! their user agent matched, or the agent's directory) and their proof, fakes included, for
//! the page's crawlers and agents panel.
//!
//! Memory is bounded whatever the traffic: a slot holds at most [`MAX_CALLERS`] callers and
//! [`MAX_NAMES`] names per shard, so a spoofed flood cannot grow it; decisions past that are
//! still counted in the tier mix and in `untracked`. At most `SHARDS × SLOTS × MAX_CALLERS`
//! (655,360) callers of at most [`ENTRY_BYTES`] (181) bytes, and [`MAX_NAMES`] names a slot:
//! [`Talkers::max_bytes`], 121 MiB, with all 16 shards' ten slots full (16 busy recording
//! threads under a spoofed flood for five minutes); one recording thread's share is a
//! sixteenth. `tests/metrics_memory_bound.rs` measures the bytes really allocated: 100,000
//! distinct addresses from 16 threads over ten minutes hold 6 MB, 100,000 more inside one
//! slot 15 MB, never more than [`Talkers::approx_bytes`] reports.
//!
//! This is the one lock a decision takes on the metrics side: the table is split into
//! [`SHARDS`], one per recording thread (assigned at a thread's first decision), so the proxy's
//! threads never wait for each other nor pass the table's cache lines back and forth; a read
//! (every few seconds) sums a caller over every shard.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::metrics::registry::DecisionObserver;
use crate::model::network::NetworkName;
use crate::model::window::Reason;
use crate::model::{Action, AgentSignature, CrawlerStatus, Decision, Tier};

pub const SLOT_SECS: u64 = 30;
pub const SLOTS: usize = 10;
/// The window a read covers: 5 minutes.
pub const WINDOW_SECS: u64 = SLOT_SECS * SLOTS as u64;
/// Callers kept per slot of one shard: at most `SHARDS × SLOTS × MAX_CALLERS` entries in all
/// ([`Talkers::max_bytes`]: 121 MiB with 16 busy threads under a flood of new callers for five
/// minutes; a few MB on a small host).
pub const MAX_CALLERS: usize = 4096;
/// Independent tables, one per recording thread (threads past this share).
pub const SHARDS: usize = 16;
/// Crawler and agent names kept per slot of one shard (a name is a configured pattern or an
/// agent's directory URL; directories are many only if agents forge them, and a forged one
/// is not verified, so it never gets here).
pub const MAX_NAMES: usize = 256;
/// Bytes one caller entry costs at most: its boxed identity (`ip:` and 16 hex digits, rounded
/// up to 32), and its share of the map's buckets (key, tally and control byte). hashbrown fills
/// its power-of-two buckets at most 7/8 and doubles them, so a map has at most 16/7 buckets
/// per entry.
pub const ENTRY_BYTES: usize =
    32 + (16 * (std::mem::size_of::<(Box<str>, Tally)>() + 1)).div_ceil(7);
/// Bytes one name entry costs at most: its share of the map's buckets, and the name (a pattern
/// shared with the config, or a verified agent's directory URL: taken as 128 bytes).
pub const NAME_BYTES: usize =
    128 + (16 * (std::mem::size_of::<((Arc<String>, Proof), (u64, u64))>() + 1)).div_ceil(7);

/// One caller's traffic within the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Talker {
    pub identity: String,
    /// The tier of its latest decision.
    pub tier: Tier,
    pub requests: u64,
    /// Requests answered with a refusal (429).
    pub refused: u64,
    /// Why its latest refusal was made (`None`: never refused in the window), so a benign
    /// `hourly` refusal is not taken for abuse.
    pub refused_for: Option<Reason>,
    /// The address of an anonymous caller (`None` for a key, token or session).
    pub address: Option<IpAddr>,
}

/// One network's traffic within the window: the callers of [`Talker::address`] grouped by
/// /24 (IPv4) or /48 (IPv6), or by ASN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetTalker {
    pub network: NetworkName,
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

/// What proves a named caller, or that it is a fake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proof {
    /// In a published range file or fetched range list.
    Ranges,
    /// Forward-confirmed reverse DNS.
    Dns,
    /// A verified Web Bot Auth signature (a signed agent).
    Signature,
    /// Claims a crawler; the DNS answer has not landed yet.
    Pending,
    /// Claims a crawler from an address no proof vouches for.
    Fake,
}

impl Proof {
    pub fn as_str(self) -> &'static str {
        match self {
            Proof::Ranges => "ranges",
            Proof::Dns => "dns",
            Proof::Signature => "signature",
            Proof::Pending => "pending",
            Proof::Fake => "fake",
        }
    }

    /// What a decision proves, if it concerns a crawler or agent at all.
    pub fn of(d: &Decision) -> Option<Proof> {
        if d.tier == Tier::Agent && d.agent == Some(AgentSignature::Verified) {
            return Some(Proof::Signature);
        }
        d.crawler.map(|c| match c {
            CrawlerStatus::Ranges => Proof::Ranges,
            CrawlerStatus::Dns => Proof::Dns,
            CrawlerStatus::Pending => Proof::Pending,
            CrawlerStatus::Fake => Proof::Fake,
        })
    }
}

/// The name a range-proved caller gets when its user agent names no crawler.
pub const UNNAMED: &str = "(no name claimed)";
/// [`UNNAMED`], made once: recording it costs a count, not an allocation.
static UNNAMED_NAME: std::sync::LazyLock<Arc<String>> =
    std::sync::LazyLock::new(|| Arc::new(UNNAMED.to_string()));

/// One crawler or agent within the window, by the name it gives and its proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedTalker {
    pub name: Arc<String>,
    pub proof: Proof,
    pub requests: u64,
    pub refused: u64,
}

/// A network's place in a stable order (ASNs after prefixes when counts tie).
fn net_key(n: NetworkName) -> (u8, Option<ipnet::IpNet>, u32) {
    match n {
        NetworkName::Prefix(p) => (0, Some(p), 0),
        NetworkName::Asn(a) => (1, None, a),
    }
}

/// What [`Talkers::read`] answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recent {
    /// Most refused first (ties: most requests), at most `n`; callers never refused are left out.
    pub by_refusals: Vec<Talker>,
    /// Most requests first, at most `n`.
    pub by_volume: Vec<Talker>,
    /// Networks with most requests first, at most `n` prefixes and `n` ASNs.
    pub networks: Vec<NetTalker>,
    /// Crawlers and agents by name and proof (fakes included), most requests first, at most `n`.
    pub named: Vec<NamedTalker>,
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
    /// The latest refusal's reason in this slot.
    refused_for: Option<Reason>,
    /// Slot index of the latest decision, to pick the newest tier when slots are summed.
    seen: u64,
    addr: Option<IpAddr>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Absolute slot number (seconds / SLOT_SECS) this slot holds; stale ones are cleared.
    index: u64,
    callers: HashMap<Box<str>, Tally, BuildHasherDefault<Fnv>>,
    /// `(name, proof)` → (requests, refused).
    named: HashMap<(Arc<String>, Proof), (u64, u64)>,
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

impl DecisionObserver for Talkers {
    fn observe(&self, d: &Decision, addr: IpAddr) {
        Talkers::observe(self, d, addr);
    }
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
        let named = Proof::of(d).map(|p| {
            let name = d.claim.clone().unwrap_or_else(|| Arc::clone(&UNNAMED_NAME));
            (name, p)
        });
        let refused_for = (d.action() == Action::Reject).then(|| d.reason()).flatten();
        self.record(
            self.now_secs(),
            id,
            d.tier,
            (d.action(), refused_for),
            addr,
            named,
        );
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
        self.record(secs, identity, tier, (action, None), addr, None);
    }

    /// As [`Self::observe_at`], for a crawler or agent `named` with its proof.
    pub fn observe_named_at(
        &self,
        secs: u64,
        identity: &str,
        action: Action,
        addr: Option<IpAddr>,
        named: (Arc<String>, Proof),
    ) {
        let tier = match named.1 {
            Proof::Ranges | Proof::Dns => Tier::Crawler,
            Proof::Signature => Tier::Agent,
            Proof::Pending | Proof::Fake => Tier::Anon,
        };
        self.record(secs, identity, tier, (action, None), addr, Some(named));
    }

    fn record(
        &self,
        secs: u64,
        identity: &str,
        tier: Tier,
        (action, refused_for): (Action, Option<Reason>),
        addr: Option<IpAddr>,
        named: Option<(Arc<String>, Proof)>,
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
        if let Some(key) = named {
            if let Some(c) = slot.named.get_mut(&key) {
                c.0 += 1;
                c.1 += refused;
            } else if slot.named.len() < MAX_NAMES {
                slot.named.insert(key, (1, refused));
            }
        }
        if let Some(t) = slot.callers.get_mut(identity) {
            t.tier = tier;
            t.requests += 1;
            t.refused += refused;
            t.refused_for = refused_for.or(t.refused_for);
        } else if slot.callers.len() < MAX_CALLERS {
            slot.callers.insert(
                identity.into(),
                Tally {
                    tier,
                    requests: 1,
                    refused,
                    refused_for,
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

    /// About the bytes the table holds now, at most: [`ENTRY_BYTES`] per caller and
    /// [`NAME_BYTES`] per name.
    pub fn approx_bytes(&self) -> usize {
        let names: usize = self
            .shards
            .iter()
            .map(|s| {
                let g = s.0.lock().unwrap_or_else(|e| e.into_inner());
                g.iter().map(|slot| slot.named.len()).sum::<usize>()
            })
            .sum();
        self.entries() * ENTRY_BYTES + names * NAME_BYTES
    }

    /// The most the table holds, whatever the traffic: every slot of every shard full.
    pub const fn max_bytes() -> usize {
        SHARDS * SLOTS * (MAX_CALLERS * ENTRY_BYTES + MAX_NAMES * NAME_BYTES)
    }

    /// The window ending now, top `n` of each list; `asn` names an address's autonomous
    /// system (`|_| None` without an IP-to-ASN table).
    pub fn read(&self, n: usize, asn: impl Fn(IpAddr) -> Option<u32>) -> Recent {
        self.read_at(self.now_secs(), n, asn)
    }

    /// The window ending at `secs`.
    pub fn read_at(&self, secs: u64, n: usize, asn: impl Fn(IpAddr) -> Option<u32>) -> Recent {
        let now = secs / SLOT_SECS;
        let oldest = now.saturating_sub(SLOTS as u64 - 1);
        let mut out = Recent::default();
        let mut sum: HashMap<&str, Tally> = HashMap::new();
        let mut named: HashMap<(Arc<String>, Proof), (u64, u64)> = HashMap::new();
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
            for (k, (req, refused)) in &slot.named {
                let e = named.entry(k.clone()).or_default();
                e.0 += req;
                e.1 += refused;
            }
            for (id, t) in &slot.callers {
                let e = sum.entry(id).or_insert(Tally {
                    requests: 0,
                    refused: 0,
                    refused_for: None,
                    ..*t
                });
                e.requests += t.requests;
                e.refused += t.refused;
                if t.seen >= e.seen {
                    e.seen = t.seen;
                    e.tier = t.tier;
                    e.refused_for = t.refused_for.or(e.refused_for);
                } else if e.refused_for.is_none() {
                    e.refused_for = t.refused_for;
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
                refused_for: t.refused_for,
                address: t.addr,
            })
            .collect();
        drop(guards);
        let mut nets: HashMap<NetworkName, NetTalker> = HashMap::new();
        for (t, a) in all.iter().filter_map(|t| t.address.map(|a| (t, a))) {
            let names = [
                Some(NetworkName::Prefix(network_of(a))),
                asn(a).map(NetworkName::Asn),
            ];
            for network in names.into_iter().flatten() {
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
        }
        let order = |a: &NetTalker, b: &NetTalker| {
            (b.requests, b.refused, net_key(a.network)).cmp(&(
                a.requests,
                a.refused,
                net_key(b.network),
            ))
        };
        // The top `n` of each kind: an AS holds its prefixes' traffic and would crowd them out.
        let (mut prefixes, mut asns): (Vec<NetTalker>, Vec<NetTalker>) = nets
            .into_values()
            .partition(|t| matches!(t.network, NetworkName::Prefix(_)));
        prefixes.sort_by(order);
        prefixes.truncate(n);
        asns.sort_by(order);
        asns.truncate(n);
        prefixes.append(&mut asns);
        prefixes.sort_by(order);
        out.networks = prefixes;
        let mut named: Vec<NamedTalker> = named
            .into_iter()
            .map(|((name, proof), (requests, refused))| NamedTalker {
                name,
                proof,
                requests,
                refused,
            })
            .collect();
        named.sort_by(|a, b| (b.requests, &a.name, a.proof).cmp(&(a.requests, &b.name, b.proof)));
        named.truncate(n);
        out.named = named;
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

    fn no_asn(_: IpAddr) -> Option<u32> {
        None
    }

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
        let r = t.read_at(10, 2, no_asn);
        assert_eq!(names(&r.by_volume), [("ip:a", 5, 0), ("ip:b", 3, 3)]);
        assert_eq!(names(&r.by_refusals), [("ip:b", 3, 3)]);
        assert_eq!(r.tier_mix, [8, 0, 0, 0, 1]);
    }

    /// A caller shows why it was last refused, across slots: a benign `hourly` is told apart
    /// from a `burst`.
    #[test]
    fn a_caller_carries_its_latest_refusal_reason() {
        let t = Talkers::default();
        let reject = |r| (Action::Reject, Some(r));
        t.record(0, "ip:a", Tier::Anon, reject(Reason::Burst), None, None);
        t.record(40, "ip:a", Tier::Anon, (Action::Allow, None), None, None);
        t.record(40, "ip:b", Tier::Anon, (Action::Allow, None), None, None);
        let r = t.read_at(40, 5, no_asn);
        let of = |r: &Recent, id: &str| {
            r.by_volume
                .iter()
                .find(|x| x.identity == id)
                .unwrap()
                .refused_for
        };
        assert_eq!(
            of(&r, "ip:a"),
            Some(Reason::Burst),
            "an older slot's refusal"
        );
        assert_eq!(of(&r, "ip:b"), None, "never refused");
        t.record(70, "ip:a", Tier::Anon, reject(Reason::Hourly), None, None);
        assert_eq!(of(&t.read_at(70, 5, no_asn), "ip:a"), Some(Reason::Hourly));
    }

    #[test]
    fn sums_slots_inside_five_minutes_and_forgets_older_ones() {
        let t = Talkers::default();
        t.observe_at(0, "ip:a", Tier::Anon, Action::Reject, None);
        t.observe_at(100, "ip:a", Tier::Session, Action::Allow, None);
        let r = t.read_at(299, 5, no_asn);
        assert_eq!(names(&r.by_volume), [("ip:a", 2, 1)]);
        assert_eq!(r.by_volume[0].tier, Tier::Session, "the newest tier wins");
        let r = t.read_at(300, 5, no_asn);
        assert_eq!(names(&r.by_volume), [("ip:a", 1, 0)]);
        assert_eq!(r.tier_mix, [0, 1, 0, 0, 0]);
        // A slot reused 5 minutes later starts empty.
        t.observe_at(330, "ip:b", Tier::Anon, Action::Allow, None);
        let r = t.read_at(330, 5, no_asn);
        assert_eq!(names(&r.by_volume), [("ip:a", 1, 0), ("ip:b", 1, 0)]);
        assert!(t.read_at(1000, 5, no_asn).by_volume.is_empty());
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
        let r = t.read_at(0, usize::MAX, no_asn);
        let tracked = r.by_volume.len();
        assert_eq!(tracked, MAX_CALLERS, "one thread fills its own shard");
        assert_eq!(r.untracked as usize, flood + 1 - tracked);
        assert_eq!(r.tier_mix[0], flood as u64 + 2);
        // A caller seen before the flood keeps being counted.
        assert_eq!(names(&r.by_volume[..1]), [("ip:first", 2, 0)]);
    }

    #[test]
    fn networks_group_by_asn_beside_the_prefixes_and_crawlers_by_name_and_proof() {
        let t = Talkers::default();
        let asn = |ip: IpAddr| match ip {
            IpAddr::V4(v4) if v4.octets()[0] == 198 => Some(64500),
            _ => None,
        };
        for (ip, id) in [("198.51.100.1", "ip:1"), ("198.51.101.1", "ip:2")] {
            t.observe_at(0, id, Tier::Anon, Action::Allow, Some(ip.parse().unwrap()));
        }
        t.observe_at(
            0,
            "ip:3",
            Tier::Anon,
            Action::Reject,
            Some("203.0.113.9".parse().unwrap()),
        );
        let r = t.read_at(0, 10, asn);
        let nets: Vec<(String, u64, u64)> = r
            .networks
            .iter()
            .map(|n| (n.network.to_string(), n.requests, n.callers))
            .collect();
        assert_eq!(
            nets,
            [
                ("AS64500".into(), 2, 2),
                ("203.0.113.0/24".into(), 1, 1),
                ("198.51.100.0/24".into(), 1, 1),
                ("198.51.101.0/24".into(), 1, 1),
            ]
        );
        // One of each kind asked for: the AS does not crowd the prefixes out.
        let r = t.read_at(0, 1, asn);
        assert_eq!(r.networks.len(), 2, "{:?}", r.networks);

        let google = Arc::new("Googlebot".to_string());
        let a = Some("203.0.113.50".parse().unwrap());
        for _ in 0..3 {
            t.observe_named_at(5, "ip:f", Action::Reject, a, (google.clone(), Proof::Fake));
        }
        t.observe_named_at(
            5,
            "ip:g",
            Action::Allow,
            None,
            (google.clone(), Proof::Ranges),
        );
        let agent = Arc::new(
            "https://agent.example/.well-known/http-message-signatures-directory".to_string(),
        );
        t.observe_named_at(
            5,
            "agent:x",
            Action::Allow,
            None,
            (agent.clone(), Proof::Signature),
        );
        let r = t.read_at(5, 10, asn);
        let named: Vec<(&str, Proof, u64, u64)> = r
            .named
            .iter()
            .map(|n| (n.name.as_str(), n.proof, n.requests, n.refused))
            .collect();
        assert_eq!(
            named,
            [
                ("Googlebot", Proof::Fake, 3, 3),
                ("Googlebot", Proof::Ranges, 1, 0),
                (agent.as_str(), Proof::Signature, 1, 0),
            ]
        );
        assert_eq!(r.tier_mix[Tier::Crawler.index()], 1);
        assert_eq!(r.tier_mix[Tier::Agent.index()], 1);
    }

    #[test]
    fn a_decision_names_its_proof_and_claim() {
        let mut d = Decision::new(Tier::Anon, "ip:f", None);
        assert_eq!(Proof::of(&d), None);
        d.crawler = Some(CrawlerStatus::Fake);
        assert_eq!(Proof::of(&d), Some(Proof::Fake));
        d.crawler = Some(CrawlerStatus::Dns);
        assert_eq!(Proof::of(&d), Some(Proof::Dns));
        let mut a = Decision::new(Tier::Agent, "agent:x", None);
        a.agent = Some(AgentSignature::Verified);
        assert_eq!(Proof::of(&a), Some(Proof::Signature));
        // Recorded under its claim, or as unnamed when it gives none.
        let t = Talkers::default();
        d.claim = Some(Arc::new("Googlebot".to_string()));
        t.observe(&d, "66.249.66.1".parse().unwrap());
        t.observe(&a, "192.0.2.1".parse().unwrap());
        let r = t.read(10, no_asn);
        let named: Vec<(&str, Proof)> =
            r.named.iter().map(|n| (n.name.as_str(), n.proof)).collect();
        assert_eq!(
            named,
            [(UNNAMED, Proof::Signature), ("Googlebot", Proof::Dns)]
        );
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
        let r = t.read_at(0, 10, no_asn);
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
