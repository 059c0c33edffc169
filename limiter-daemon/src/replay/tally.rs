//! Counting one config's decisions as the replay makes them: per tier and reason, lockouts by
//! level and by why they were made (cause and reason, a few of the locked addresses or
//! prefixes named), and refusals per identity and per network. Called once per request, so it
//! keeps fixed-size counters and touches a map only for a refusal or a lockout.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{Decision, LockCause, Reason, Tier, Verdict};

/// What became of the requests of one tier and reason (`None`: admitted without delay).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcomes {
    pub allowed: u64,
    pub delayed: u64,
    /// The delays added up, in milliseconds.
    pub delay_ms: u64,
    pub refused: u64,
}

impl Outcomes {
    pub fn requests(&self) -> u64 {
        self.allowed + self.delayed + self.refused
    }

    pub fn add(&mut self, other: &Outcomes) {
        self.allowed += other.allowed;
        self.delayed += other.delayed;
        self.delay_ms += other.delay_ms;
        self.refused += other.refused;
    }
}

/// Who a refusal is reported under: a caller counted by address shows its (grouped) address;
/// one counted by a credential shows the hashed identity (never the credential).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Who {
    Addr(IpAddr),
    Hashed(String),
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Addr(ip) => write!(f, "{ip}"),
            Who::Hashed(id) => f.write_str(id),
        }
    }
}

/// Refusals of one identity or network, by reason ([`Reason::index`]).
#[derive(Clone, Debug)]
pub struct Refusals {
    pub refused: u64,
    pub by_reason: [u64; Reason::ALL.len()],
    /// The tier of its latest refusal.
    pub tier: Tier,
}

impl Refusals {
    fn new(tier: Tier) -> Self {
        Refusals {
            refused: 0,
            by_reason: [0; Reason::ALL.len()],
            tier,
        }
    }

    fn count(&mut self, reason: Reason, tier: Tier) {
        self.refused += 1;
        if let Some(n) = self.by_reason.get_mut(reason.index()) {
            *n += 1;
        }
        self.tier = tier;
    }

    /// `reason → count`, in [`Reason::ALL`] order, the reasons seen only.
    pub fn reasons(&self) -> Vec<(Reason, u64)> {
        Reason::ALL
            .iter()
            .filter_map(|r| {
                let n = *self.by_reason.get(r.index())?;
                (n > 0).then_some((*r, n))
            })
            .collect()
    }
}

/// Addresses or prefixes a group of lockouts names, at most.
pub const LOCKED_SHOWN: usize = 5;

/// Lockouts made for one cause and reason (`burst`, or `network 203.0.113.0/24 burst`).
#[derive(Clone, Debug, Default)]
pub struct LockGroup {
    pub lockouts: u64,
    /// The first [`LOCKED_SHOWN`] distinct addresses or prefixes locked.
    pub shown: Vec<IpNet>,
}

impl LockGroup {
    fn add(&mut self, net: IpNet) {
        self.lockouts += 1;
        if self.shown.len() < LOCKED_SHOWN && !self.shown.contains(&net) {
            self.shown.push(net);
        }
    }
}

/// One config's counts so far.
#[derive(Debug, Default)]
pub struct Tally {
    /// Few entries (tiers × reasons seen): a scan beats hashing.
    pub rows: Vec<(Tier, Option<Reason>, Outcomes)>,
    /// Lockouts made, by escalation level.
    pub lockouts: BTreeMap<u32, u64>,
    /// Lockouts made, by (cause, reason).
    pub locked: BTreeMap<(&'static str, String), LockGroup>,
    pub identities: HashMap<Who, Refusals>,
    pub networks: HashMap<IpNet, Refusals>,
    /// Requests that presented an API key (metered as a key whose lookup has not landed).
    pub keys_presented: u64,
}

impl Tally {
    /// The lockouts `d` made: its caller's own (a burst), or what its network's strike locked
    /// (each address that sent, or the prefix).
    fn record_lockouts(&mut self, d: &Decision, group: IpAddr) {
        let net_locked = d.network.as_ref().filter(|n| !n.locked.is_empty());
        if let Some(n) = net_locked {
            let g = self
                .locked
                .entry((
                    LockCause::Network.as_str(),
                    format!("network {} burst", n.name),
                ))
                .or_default();
            let addresses = n
                .locked
                .iter()
                .all(|l| l.net.prefix_len() == l.net.max_prefix_len());
            for l in &n.locked {
                g.add(l.net);
                if addresses {
                    *self.lockouts.entry(l.level).or_default() += 1;
                }
            }
            if !addresses {
                // One prefix lockout (an ASN range may be several CIDRs).
                if let Some(level) = d.lockout_level {
                    *self.lockouts.entry(level).or_default() += 1;
                }
            }
            return;
        }
        if let Some(level) = d.lockout_level {
            *self.lockouts.entry(level).or_default() += 1;
            let cause = match d.reason() {
                Some(Reason::Network) => LockCause::Network,
                _ => LockCause::Burst,
            };
            self.locked
                .entry((cause.as_str(), cause.as_str().to_string()))
                .or_default()
                .add(IpNet::from(group));
        }
    }

    fn row(&mut self, tier: Tier, reason: Option<Reason>) -> &mut Outcomes {
        let i = match self
            .rows
            .iter()
            .position(|(t, r, _)| *t == tier && *r == reason)
        {
            Some(i) => i,
            None => {
                self.rows.push((tier, reason, Outcomes::default()));
                self.rows.len() - 1
            }
        };
        &mut self.rows[i].2
    }

    /// Counts `d`, made for a caller at (grouped) address `group` in network `net`.
    pub fn record(&mut self, d: &Decision, group: IpAddr, net: IpNet) {
        if d.key_status.is_some() {
            self.keys_presented += 1;
        }
        self.record_lockouts(d, group);
        match d.verdict() {
            Verdict::Allow => self.row(d.tier, None).allowed += 1,
            Verdict::Delay { delay, .. } => {
                // Only the daily quota delays.
                let row = self.row(d.tier, Some(Reason::Daily));
                row.delayed += 1;
                row.delay_ms += u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            }
            Verdict::Reject { reason, .. } => {
                self.row(d.tier, Some(reason)).refused += 1;
                let who = match d.identity.strip_prefix("ip:") {
                    Some(_) => Who::Addr(group),
                    None => Who::Hashed(d.identity.to_string()),
                };
                self.identities
                    .entry(who)
                    .or_insert_with(|| Refusals::new(d.tier))
                    .count(reason, d.tier);
                self.networks
                    .entry(net)
                    .or_insert_with(|| Refusals::new(d.tier))
                    .count(reason, d.tier);
            }
        }
    }
}
