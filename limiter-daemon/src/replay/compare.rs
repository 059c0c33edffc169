//! Two reports of the same log under two configs, side by side: every count either config
//! has, with both values, so what a change of numbers does is read off one table.

use serde::Serialize;

use super::report::Report;

/// One count under both configs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Line {
    /// What is counted: `anon hourly refused`, `lockouts level 2`, ….
    pub what: String,
    pub a: u64,
    pub b: u64,
}

impl Line {
    pub fn differs(&self) -> bool {
        self.a != self.b
    }

    /// `b − a` as signed text (`+12`, `-3`, `` for no change).
    pub fn change(&self) -> String {
        match self.b.cmp(&self.a) {
            std::cmp::Ordering::Equal => String::new(),
            std::cmp::Ordering::Greater => format!("+{}", self.b - self.a),
            std::cmp::Ordering::Less => format!("-{}", self.a - self.b),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Comparison {
    pub a: Report,
    pub b: Report,
    /// Every count either side has, in the order of the report.
    pub lines: Vec<Line>,
    /// How many of them differ.
    pub differences: usize,
}

/// The counts of `r`, named.
fn counts(r: &Report) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for row in &r.decisions {
        let name = format!("{} {}", row.tier, row.reason.unwrap_or("-"));
        let o = &row.outcomes;
        for (what, n) in [
            ("allowed", o.allowed),
            ("delayed", o.delayed),
            ("delay ms", o.delay_ms),
            ("refused", o.refused),
        ] {
            if n > 0 {
                out.push((format!("{name} {what}"), n));
            }
        }
    }
    for (what, n) in [
        ("total allowed", r.totals.allowed),
        ("total delayed", r.totals.delayed),
        ("total refused", r.totals.refused),
    ] {
        out.push((what.to_string(), n));
    }
    for l in &r.lockouts {
        out.push((format!("lockouts level {}", l.level), l.count));
    }
    out
}

impl Comparison {
    pub fn new(a: Report, b: Report) -> Comparison {
        let (ca, cb) = (counts(&a), counts(&b));
        let mut lines: Vec<Line> = ca
            .iter()
            .map(|(what, n)| Line {
                what: what.clone(),
                a: *n,
                b: cb.iter().find(|(w, _)| w == what).map_or(0, |(_, n)| *n),
            })
            .collect();
        // What only B has goes after A's, in B's order.
        for (what, n) in &cb {
            if !ca.iter().any(|(w, _)| w == what) {
                lines.push(Line {
                    what: what.clone(),
                    a: 0,
                    b: *n,
                });
            }
        }
        let differences = lines.iter().filter(|l| l.differs()).count();
        Comparison {
            a,
            b,
            lines,
            differences,
        }
    }
}
