//! What a replay found under one config, as a value: the text and JSON renderings and the
//! comparison are made from it. Rows come in a stable order (tier, then [`Reason::ALL`]), so a
//! reason the engine learns shows up here without a change.

use std::collections::BTreeMap;

use serde::Serialize;

use super::tally::{Outcomes, Refusals, Tally};
use super::time::format_rfc3339;
use crate::model::Reason;
use limiter_common::args::net_text;

/// A line that was not replayed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkippedLine {
    pub file: String,
    pub line: u64,
    pub why: &'static str,
}

/// Where reading stopped early: a log that could not be read past a line (a truncated gzip,
/// an I/O error). The report covers the lines before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CutShort {
    pub file: String,
    /// The last line read whole.
    pub after_line: u64,
    pub error: String,
}

/// What reading the logs found, whatever the config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    /// Lines read, blank ones left out.
    pub lines: u64,
    /// Lines replayed (decided).
    pub requests: u64,
    /// Lines not replayed.
    pub malformed: u64,
    /// The first few of them.
    pub malformed_first: Vec<SkippedLine>,
    /// Lines stamped earlier than one before them: replayed at the latest time seen (the
    /// clock never goes backwards).
    pub out_of_order: u64,
    /// The first and last timestamps replayed (RFC 3339, UTC).
    pub from: Option<String>,
    pub to: Option<String>,
    /// `Some` when a log could not be read to its end; the replay stopped there.
    pub cut_short: Option<CutShort>,
}

/// One tier × reason (`reason` absent: admitted at once).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub tier: &'static str,
    pub reason: Option<&'static str>,
    #[serde(flatten)]
    pub outcomes: Outcomes,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockoutRow {
    pub level: u32,
    pub count: u64,
}

/// Lockouts made for one cause and reason, and the first few addresses or prefixes locked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockedRow {
    /// `burst` (the address's own) or `network` (its network's burst).
    pub cause: &'static str,
    /// `burst`, or the network: `network 203.0.113.0/24 burst`.
    pub reason: String,
    pub lockouts: u64,
    /// The first few locked (an address bare, a prefix with its length).
    pub locked: Vec<String>,
}

/// An identity or network among those refused most.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Top {
    /// The address, network, or hashed identity.
    pub name: String,
    pub tier: &'static str,
    pub refused: u64,
    /// Refusals by reason.
    pub reasons: BTreeMap<&'static str, u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The config file replayed under.
    pub config: String,
    pub input: Input,
    pub decisions: Vec<Row>,
    pub totals: Outcomes,
    /// Lockouts earned, by escalation level.
    pub lockouts: Vec<LockoutRow>,
    /// Lockouts earned, by why (most first; the `top` groups).
    pub locked: Vec<LockedRow>,
    /// Requests that presented an API key.
    pub keys_presented: u64,
    pub top_identities: Vec<Top>,
    pub top_networks: Vec<Top>,
}

fn top<K: ToString + Ord>(entries: impl Iterator<Item = (K, Refusals)>, n: usize) -> Vec<Top> {
    let mut all: Vec<(K, Refusals)> = entries.collect();
    // Most refused first; ties by name, so a report is the same every run.
    all.sort_by(|(ka, a), (kb, b)| b.refused.cmp(&a.refused).then_with(|| ka.cmp(kb)));
    all.into_iter()
        .take(n)
        .map(|(k, r)| Top {
            name: k.to_string(),
            tier: r.tier.as_str(),
            refused: r.refused,
            reasons: r
                .reasons()
                .into_iter()
                .map(|(reason, n)| (reason.as_str(), n))
                .collect(),
        })
        .collect()
}

fn reason_rank(r: Option<Reason>) -> usize {
    r.map_or(0, |r| {
        1 + Reason::ALL
            .iter()
            .position(|x| *x == r)
            .unwrap_or(Reason::ALL.len())
    })
}

impl Report {
    /// The report of `tally` over `input`, keeping the `top` most refused identities and
    /// networks.
    pub fn new(config: String, input: Input, tally: Tally, top_n: usize) -> Report {
        let mut rows = tally.rows;
        rows.sort_by_key(|(tier, reason, _)| (*tier, reason_rank(*reason)));
        let mut totals = Outcomes::default();
        for (_, _, o) in &rows {
            totals.add(o);
        }
        Report {
            config,
            input,
            decisions: rows
                .into_iter()
                .map(|(tier, reason, outcomes)| Row {
                    tier: tier.as_str(),
                    reason: reason.map(Reason::as_str),
                    outcomes,
                })
                .collect(),
            totals,
            lockouts: tally
                .lockouts
                .into_iter()
                .map(|(level, count)| LockoutRow { level, count })
                .collect(),
            locked: {
                let mut groups: Vec<LockedRow> = tally
                    .locked
                    .into_iter()
                    .map(|((cause, reason), g)| LockedRow {
                        cause,
                        reason,
                        lockouts: g.lockouts,
                        locked: g.shown.iter().map(net_text).collect(),
                    })
                    .collect();
                groups.sort_by(|a, b| {
                    b.lockouts
                        .cmp(&a.lockouts)
                        .then_with(|| a.reason.cmp(&b.reason))
                });
                groups.truncate(top_n);
                groups
            },
            keys_presented: tally.keys_presented,
            top_identities: top(tally.identities.into_iter(), top_n),
            top_networks: top(tally.networks.into_iter(), top_n),
        }
    }

    /// The row of `tier` and `reason` (`None`: admitted at once), if any request fell in it.
    pub fn row(&self, tier: &str, reason: Option<&str>) -> Option<&Outcomes> {
        self.decisions
            .iter()
            .find(|r| r.tier == tier && r.reason == reason)
            .map(|r| &r.outcomes)
    }
}

impl Input {
    pub fn set_span(&mut self, first_ms: Option<u64>, last_ms: Option<u64>) {
        self.from = first_ms.map(format_rfc3339);
        self.to = last_ms.map(format_rfc3339);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Decision, Tier};

    #[test]
    fn every_reason_the_engine_has_gets_its_row_in_order() {
        let mut tally = Tally::default();
        let ip: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let net = super::super::client::network(ip);
        // Backwards, so the order below is the report's doing.
        for reason in Reason::ALL.iter().rev() {
            let d = Decision::builder(Tier::Anon, "ip:00")
                .reject(*reason, 1)
                .build();
            tally.record(&d, ip, net);
        }
        tally.record(&Decision::builder(Tier::Session, "ip:00").build(), ip, net);
        let r = Report::new("t.toml".into(), Input::default(), tally, 20);
        let rows: Vec<(&str, Option<&str>)> = r
            .decisions
            .iter()
            .map(|row| (row.tier, row.reason))
            .collect();
        let mut want: Vec<(&str, Option<&str>)> = Reason::ALL
            .iter()
            .map(|reason| ("anon", Some(reason.as_str())))
            .collect();
        want.push(("session", None));
        assert_eq!(rows, want);
        assert_eq!(r.totals.refused, Reason::ALL.len() as u64);
        assert_eq!(r.top_identities[0].name, "192.0.2.1");
        assert_eq!(r.top_identities[0].reasons.len(), Reason::ALL.len());
    }
}
