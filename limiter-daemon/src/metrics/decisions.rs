//! Counters and the delay histogram fed from each decision, on the request path.
//!
//! Every series is created up front (histograms are lock-free, see [`super::histogram`]) and its handle kept in a fixed table, so recording a
//! decision is an array index and an atomic add: no label hashing, no family lock per request.
//! Series that exist from the start also read 0 instead of being absent, which is what
//! `increase(...)` alerts need.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::histogram::DurationHistogram;
use crate::model::{
    Action, AgentSignature, CrawlerStatus, Decision, DelayKind, KeyStatus, Reason, Tier,
};

/// Upper bounds (seconds) of the delay histogram: 0 (never held) lands in the first bucket;
/// the default soft (5 s) and hard (60 s) delays each have a bucket edge.
pub const DELAY_BUCKETS: [f64; 10] = [0.001, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// Upper bounds (seconds) of the decision-time histogram: an embedded-store decision takes
/// microseconds, a Valkey one a round trip, a store timing out up to its timeout.
pub const DECIDE_BUCKETS: [f64; 10] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05, 0.25,
];

const TIERS: [Tier; Tier::ALL.len()] = Tier::ALL;
const REASONS: [Reason; Reason::ALL.len()] = Reason::ALL;
const KEY_STATUSES: [KeyStatus; 4] = [
    KeyStatus::Malformed,
    KeyStatus::Pending,
    KeyStatus::Verified,
    KeyStatus::Invalid,
];
/// Outcomes per tier: allow, delay, then reject by each reason.
const OUTCOMES: usize = 2 + REASONS.len();

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub tier: &'static str,
    pub action: &'static str,
    /// `none` unless the action is `reject`.
    pub reason: &'static str,
    /// `true`: made in shadow mode; action and reason are what enforcing would have done.
    pub shadow: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    pub tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CrawlerLabel {
    pub proof: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabel {
    pub level: String,
}

/// Handles to the per-decision series.
#[derive(Debug)]
pub struct DecisionMetrics {
    /// `[shadow][tier][outcome]`, see [`OUTCOMES`].
    decisions: [[[Counter; OUTCOMES]; Tier::ALL.len()]; 2],
    soft_hits: Counter,
    hard_hits: Counter,
    delay: DurationHistogram,
    decide_time: DurationHistogram,
    keys: [Counter; 4],
    /// Verified crawlers by proof (`ranges`, `dns`), then `pending`: indexed by
    /// [`CrawlerStatus::index`] (the fake slot is unused; fakes have their own series).
    crawlers: [Counter; 3],
    fake_crawlers: Counter,
    /// Web Bot Auth signatures by outcome, indexed by [`AgentSignature::index`].
    agent_signatures: [Counter; AgentSignature::ALL.len()],
    strikes: Counter,
    /// Strikes shadow mode would have recorded (none was).
    shadow_strikes: Counter,
    /// Levels are unbounded in principle (capped durations, not capped levels), so this one
    /// stays a family; it is touched only when a lockout is made.
    lockouts: Family<LevelLabel, Counter>,
}

fn outcome_index(action: Action, reason: Option<Reason>) -> usize {
    match (action, reason) {
        (Action::Allow, _) => 0,
        (Action::Delay, _) => 1,
        (Action::Reject, r) => 2 + r.unwrap_or(Reason::Burst).index(),
    }
}

fn key_index(k: KeyStatus) -> usize {
    match k {
        KeyStatus::Malformed => 0,
        KeyStatus::Pending => 1,
        KeyStatus::Verified => 2,
        KeyStatus::Invalid => 3,
    }
}

impl DecisionMetrics {
    /// Registers the families in `reg` and creates every fixed series.
    pub fn register(reg: &mut Registry) -> Self {
        let decisions_family = Family::<DecisionLabels, Counter>::default();
        reg.register(
            "decisions",
            "Decisions made, by tier, action (allow, delay, reject), reject reason and shadow \
             (true: what shadow mode would have done)",
            decisions_family.clone(),
        );
        let decisions = ["false", "true"].map(|shadow| {
            TIERS.map(|tier| {
                std::array::from_fn(|i| {
                    let (action, reason) = match i {
                        0 => ("allow", "none"),
                        1 => ("delay", "none"),
                        n => ("reject", REASONS[n - 2].as_str()),
                    };
                    decisions_family
                        .get_or_create(&DecisionLabels {
                            tier: tier.as_str(),
                            action,
                            reason,
                            shadow,
                        })
                        .clone()
                })
            })
        });
        let soft_hits = Counter::default();
        reg.register(
            "quota_soft_hits",
            "Requests over the daily quota within the soft window (held for the soft delay)",
            soft_hits.clone(),
        );
        let hard_hits = Counter::default();
        reg.register(
            "quota_hard_hits",
            "Requests past the daily quota's soft window (held for the hard delay)",
            hard_hits.clone(),
        );
        let delay = DurationHistogram::new(&DELAY_BUCKETS);
        reg.register_with_unit(
            "request_delay",
            "Scan delay decided per request (0 when not delayed)",
            Unit::Seconds,
            delay.clone(),
        );
        let decide_time = DurationHistogram::new(&DECIDE_BUCKETS);
        reg.register_with_unit(
            "decision_duration",
            "Time the engine took to decide a request, store round trips included",
            Unit::Seconds,
            decide_time.clone(),
        );
        let keys_family = Family::<ResultLabel, Counter>::default();
        reg.register(
            "key_checks",
            "Presented API keys by key-cache result (verified, pending, invalid, malformed)",
            keys_family.clone(),
        );
        let keys = KEY_STATUSES.map(|k| {
            keys_family
                .get_or_create(&ResultLabel { result: k.as_str() })
                .clone()
        });
        let crawler_family = Family::<CrawlerLabel, Counter>::default();
        reg.register(
            "crawler_requests",
            "Decisions for callers proven crawlers, by proof (ranges: a published range file; \
             dns: forward-confirmed reverse DNS), and claims still being checked (pending: \
             metered as what they otherwise are)",
            crawler_family.clone(),
        );
        let crawlers = [
            CrawlerStatus::Ranges,
            CrawlerStatus::Dns,
            CrawlerStatus::Pending,
        ]
        .map(|c| {
            crawler_family
                .get_or_create(&CrawlerLabel { proof: c.as_str() })
                .clone()
        });
        let agent_family = Family::<OutcomeLabel, Counter>::default();
        reg.register(
            "agent_signatures",
            "Decisions for requests carrying a Web Bot Auth signature, by outcome (verified: \
             metered as the agent; invalid: forged, expired or otherwise refused, metered as \
             the address; unverified: the agent's keys are not known yet or it is not verified \
             here, metered as what it otherwise is; replayed: verifies, but its nonce was seen \
             within its life, metered as what it otherwise is)",
            agent_family.clone(),
        );
        let agent_signatures = AgentSignature::ALL.map(|s| {
            agent_family
                .get_or_create(&OutcomeLabel {
                    outcome: s.as_str(),
                })
                .clone()
        });
        let fake_crawlers = Counter::default();
        reg.register(
            "fake_crawlers",
            "Decisions for callers whose user agent claims a crawler from an address no proof \
             vouches for (not in a range file, reverse DNS not confirmed): metered as what they are",
            fake_crawlers.clone(),
        );
        let strikes = Counter::default();
        reg.register(
            "strikes",
            "Strikes recorded (burst violations; each one locks the caller out)",
            strikes.clone(),
        );
        let shadow_strikes = Counter::default();
        reg.register(
            "shadow_strikes",
            "Strikes shadow mode would have recorded (nothing was struck or locked)",
            shadow_strikes.clone(),
        );
        let lockouts = Family::<LevelLabel, Counter>::default();
        reg.register(
            "lockouts",
            "Lockouts made by strikes, by escalation level",
            lockouts.clone(),
        );
        DecisionMetrics {
            decisions,
            soft_hits,
            hard_hits,
            delay,
            decide_time,
            keys,
            crawlers,
            fake_crawlers,
            agent_signatures,
            strikes,
            shadow_strikes,
            lockouts,
        }
    }

    /// Decisions made so far (not shadowed), per tier and action, rejects of every reason
    /// summed: `(tier, action, count)` in tier then allow, delay, reject order.
    pub fn totals(&self) -> Vec<(Tier, Action, u64)> {
        let mut out = Vec::with_capacity(9);
        for (tier, row) in TIERS.iter().zip(&self.decisions[0]) {
            let rejects: u64 = row[2..].iter().map(Counter::get).sum();
            out.push((*tier, Action::Allow, row[0].get()));
            out.push((*tier, Action::Delay, row[1].get()));
            out.push((*tier, Action::Reject, rejects));
        }
        out
    }

    /// Decisions made so far (not shadowed), summed over tiers: `(allow, delay, rejects by
    /// reason in [`Reason::ALL`] order)`, what the history ring samples.
    pub fn outcome_totals(&self) -> (u64, u64, [u64; REASONS.len()]) {
        let (mut allow, mut delay, mut reasons) = (0, 0, [0u64; REASONS.len()]);
        for row in &self.decisions[0] {
            allow += row[0].get();
            delay += row[1].get();
            for (r, c) in reasons.iter_mut().zip(&row[2..]) {
                *r += c.get();
            }
        }
        (allow, delay, reasons)
    }

    /// Records how long deciding took.
    pub fn observe_decide_time(&self, took: Duration) {
        self.decide_time.observe(took);
    }

    /// Records one decision.
    pub fn observe(&self, d: &Decision) {
        let tier = d.tier.index();
        match d.shadowed() {
            None => self.decisions[0][tier][outcome_index(d.action(), d.reason())].inc(),
            Some(s) => {
                let reason = (s.action() == Action::Reject).then(|| s.reason()).flatten();
                if s.would_strike() {
                    self.shadow_strikes.inc();
                }
                self.decisions[1][tier][outcome_index(s.action(), reason)].inc()
            }
        };
        if d.action() == Action::Delay {
            match d.delay_kind() {
                Some(DelayKind::Soft) => self.soft_hits.inc(),
                Some(DelayKind::Hard) => self.hard_hits.inc(),
                None => 0,
            };
        }
        self.delay.observe(d.delay());
        if let Some(k) = d.key_status {
            self.keys[key_index(k)].inc();
        }
        match d.crawler {
            Some(CrawlerStatus::Fake) => self.fake_crawlers.inc(),
            Some(c) => self.crawlers[c.index()].inc(),
            None => 0,
        };
        match d.agent {
            Some(s) => self.agent_signatures[s.index()].inc(),
            None => 0,
        };
        // A network's strike under `lockout = "addresses"` locks each address that sent, each a
        // strike and a lockout at its own level; any other strike is one lockout.
        let senders = d.network.as_ref().map(|n| n.locked.as_slice()).filter(|l| {
            !l.is_empty()
                && l.iter()
                    .all(|l| l.net.prefix_len() == l.net.max_prefix_len())
        });
        let levels: &mut dyn Iterator<Item = u32> = match senders {
            Some(l) => &mut l.iter().map(|l| l.level),
            None => &mut d.lockout_level.into_iter(),
        };
        for level in levels {
            self.strikes.inc();
            self.lockouts
                .get_or_create(&LevelLabel {
                    level: level.to_string(),
                })
                .inc();
        }
    }
}
