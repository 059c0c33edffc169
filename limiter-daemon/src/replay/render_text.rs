//! The report as text for a terminal: the input's summary, the tier × reason table, lockouts
//! by level and by why (cause, reason, what was locked), the most refused identities and networks, and for `--compare` one table of every
//! count under both configs.

use std::fmt::Write as _;
use std::time::Duration;

use super::compare::Comparison;
use super::report::{Input, Report, Top};

/// Columns padded to their widest cell; numbers (the columns `numbers` names, by index)
/// right-aligned, text left-aligned.
fn table(head: &[&str], rows: &[Vec<String>], numbers: std::ops::Range<usize>) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let head: Vec<String> = head.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&head).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            let pad = w.saturating_sub(cell.chars().count());
            if i > 0 {
                line.push_str("  ");
            }
            if !numbers.contains(&i) {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            } else {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn delay(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    humantime::format_duration(Duration::from_secs(ms.div_ceil(1000))).to_string()
}

fn input(i: &Input, out: &mut String) {
    let span = match (&i.from, &i.to) {
        (Some(a), Some(b)) => format!(", {a} to {b}"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "{} lines{span}: {} replayed, {} malformed, {} out of order (replayed at the latest time seen)",
        i.lines, i.requests, i.malformed, i.out_of_order
    );
    if let Some(c) = &i.cut_short {
        let _ = writeln!(
            out,
            "INCOMPLETE: {} could not be read past line {} ({}); the report covers the lines before it",
            c.file, c.after_line, c.error
        );
    }
    if !i.malformed_first.is_empty() {
        let _ = writeln!(
            out,
            "malformed lines, the first {}:",
            i.malformed_first.len()
        );
        for s in &i.malformed_first {
            let _ = writeln!(out, "  {}:{}: {}", s.file, s.line, s.why);
        }
    }
}

fn tops(title: &str, name: &str, list: &[Top], out: &mut String) {
    if list.is_empty() {
        let _ = writeln!(out, "\n{title}: none refused");
        return;
    }
    let _ = writeln!(out, "\n{title}:");
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|t| {
            let reasons: Vec<String> = t.reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
            vec![
                t.name.clone(),
                t.tier.to_string(),
                t.refused.to_string(),
                reasons.join(", "),
            ]
        })
        .collect();
    out.push_str(&table(&[name, "tier", "refused", "reasons"], &rows, 2..3));
}

/// Every part after the input summary.
fn body(r: &Report, out: &mut String) {
    let mut rows: Vec<Vec<String>> = r
        .decisions
        .iter()
        .map(|row| {
            let o = &row.outcomes;
            vec![
                row.tier.to_string(),
                row.reason.unwrap_or("-").to_string(),
                o.allowed.to_string(),
                o.delayed.to_string(),
                delay(o.delay_ms),
                o.refused.to_string(),
            ]
        })
        .collect();
    let t = &r.totals;
    rows.push(vec![
        "total".into(),
        String::new(),
        t.allowed.to_string(),
        t.delayed.to_string(),
        delay(t.delay_ms),
        t.refused.to_string(),
    ]);
    out.push('\n');
    out.push_str(&table(
        &[
            "tier",
            "reason",
            "allowed",
            "delayed",
            "delay total",
            "refused",
        ],
        &rows,
        2..6,
    ));
    if r.decisions.iter().any(|row| row.tier == "agent") {
        out.push_str(
            "agent: claimed by a logged Signature-Agent, not verified (a log keeps no signature to check)\n",
        );
    }
    if r.lockouts.is_empty() {
        out.push_str("\nlockouts earned: none\n");
    } else {
        let levels: Vec<String> = r
            .lockouts
            .iter()
            .map(|l| format!("level {}: {}", l.level, l.count))
            .collect();
        let _ = writeln!(out, "\nlockouts earned: {}", levels.join(", "));
        let rows: Vec<Vec<String>> = r
            .locked
            .iter()
            .map(|g| {
                vec![
                    g.cause.to_string(),
                    g.reason.clone(),
                    g.lockouts.to_string(),
                    g.locked.join(", "),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push_str("lockouts by why:\n");
            out.push_str(&table(
                &["cause", "reason", "lockouts", "first locked"],
                &rows,
                2..3,
            ));
        }
    }
    if r.keys_presented > 0 {
        let _ = writeln!(
            out,
            "{} requests presented an API key: metered one rung down (a key a log cannot verify)",
            r.keys_presented
        );
    }
    tops(
        "identities refused most",
        "identity",
        &r.top_identities,
        out,
    );
    tops("networks refused most", "network", &r.top_networks, out);
}

pub fn report(r: &Report) -> String {
    let mut out = format!("replay under {}\n", r.config);
    input(&r.input, &mut out);
    body(r, &mut out);
    out
}

pub fn comparison(c: &Comparison) -> String {
    let mut out = format!("replay compared: A = {}, B = {}\n", c.a.config, c.b.config);
    input(&c.a.input, &mut out);
    let rows: Vec<Vec<String>> = c
        .lines
        .iter()
        .map(|l| vec![l.what.clone(), l.a.to_string(), l.b.to_string(), l.change()])
        .collect();
    let _ = writeln!(
        out,
        "\n{} of {} counts differ:",
        c.differences,
        c.lines.len()
    );
    out.push_str(&table(&["count", "A", "B", "B-A"], &rows, 1..4));
    for (side, r) in [("A", &c.a), ("B", &c.b)] {
        let _ = writeln!(out, "\n== {side}: {} ==", r.config);
        body(r, &mut out);
    }
    out
}
