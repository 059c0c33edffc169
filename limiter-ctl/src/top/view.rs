//! The frame of `limiterctl top`, drawn from a [`View`] and nothing else: the title and keys,
//! decisions per second by tier and action, two sparklines of the last 15 minutes (admitted
//! and refused per second, from `/admin/v1/history`), the top callers (the selected one
//! marked), the top networks with their lockouts, the crawlers and agents (fakes under the
//! name they claim) beside the active lockouts, and the message line. The live view
//! and `--once` (a [`TestBackend`] turned into text) draw the same frame.

use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Sparkline, Table, TableState};
use ratatui::{Frame, Terminal};

use super::state::{View, ACTIONS, TIERS};

/// How many callers, networks, crawlers and lockouts a frame lists.
pub const ROWS: usize = 10;

/// `1h2m`, `9m58s`, `42s`.
pub fn left(secs: u64) -> String {
    match secs {
        s if s >= 3600 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

fn rate(v: &View, tier: &str, action: &str) -> String {
    match &v.rates {
        None => "-".into(),
        Some(r) => {
            let x = r
                .get(&(tier.to_string(), action.to_string()))
                .copied()
                .unwrap_or(0.0);
            format!("{x:.1}")
        }
    }
}

/// Rows of each part, so the frame asks only for the height it fills.
fn parts(v: &View) -> [u16; 7] {
    let callers = v.snap.callers.len().clamp(1, ROWS) as u16;
    let networks = v.snap.networks.len().clamp(1, ROWS) as u16;
    let side = v
        .snap
        .crawlers
        .len()
        .max(v.snap.lockouts.len())
        .clamp(1, ROWS) as u16;
    [
        1,
        TIERS.len() as u16 + 3,
        4,
        callers + 3,
        networks + 3,
        side + 3,
        1,
    ]
}

/// The height a whole frame takes.
pub fn height(v: &View) -> u16 {
    parts(v).iter().sum()
}

/// [`parts`] in `avail` lines: on a short terminal the crawlers and lockouts give up their
/// rows first, then the networks, the sparklines and the tier table; the callers (whose
/// selection `l` and `u` act on), the title and the message line are kept. A bordered table
/// shrunk below one row is left out.
fn fitted(v: &View, avail: u16) -> [u16; 7] {
    let mut p = parts(v);
    // (part, the least it keeps while drawn: borders, header and one row)
    for (i, least) in [(5, 4), (4, 4), (2, 3), (1, 4), (3, 4)] {
        let over = p.iter().sum::<u16>().saturating_sub(avail);
        if over == 0 {
            break;
        }
        let keep = p[i].saturating_sub(over);
        p[i] = match (i, keep >= least) {
            (_, true) => keep,
            // The callers keep their selected row.
            (3, false) => least.min(p[i]),
            (_, false) => 0,
        };
    }
    p
}

/// The parts a terminal of `avail` lines leaves out, by name, and what shows them: an
/// operator must not take a hidden panel for an empty one.
fn hidden_note(v: &View, avail: u16) -> Option<String> {
    let (full, fitted) = (parts(v), fitted(v, avail));
    let names = [
        (1, "tiers"),
        (2, "sparklines"),
        (4, "networks"),
        (5, "crawlers and lockouts"),
    ];
    let gone: Vec<&str> = names
        .iter()
        .filter(|&&(i, _)| full[i] > 0 && fitted[i] == 0)
        .map(|&(_, name)| name)
        .collect();
    (!gone.is_empty()).then(|| {
        format!(
            "hidden for height: {} (a terminal of {} lines shows them; or limiterctl top --once)",
            gone.join(", "),
            height(v)
        )
    })
}

fn decisions(v: &View) -> Table<'static> {
    let rows = TIERS.iter().map(|t| {
        let total: u64 = ACTIONS
            .iter()
            .map(|a| {
                v.snap
                    .decisions
                    .get(&(t.to_string(), a.to_string()))
                    .copied()
                    .unwrap_or(0)
            })
            .sum();
        let mut cells = vec![t.to_string()];
        cells.extend(ACTIONS.iter().map(|a| rate(v, t, a)));
        cells.push(total.to_string());
        Row::new(cells)
    });
    let widths = [
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(12),
    ];
    Table::new(rows, widths)
        .header(
            Row::new(["tier", "allow/s", "delay/s", "reject/s", "since start"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(" decisions by tier and action "))
}

fn spark<'a>(title: String, data: &'a [u64]) -> Sparkline<'a> {
    Sparkline::default()
        .block(Block::bordered().title(title))
        .data(data)
}

fn hundredths(xs: &[f64]) -> Vec<u64> {
    xs.iter()
        .map(|x| (x * 100.0).round().max(0.0) as u64)
        .collect()
}

fn summary(name: &str, xs: &[f64]) -> String {
    let now = xs.last().copied().unwrap_or(0.0);
    let max = xs.iter().copied().fold(0.0, f64::max);
    format!(" {name}/s, 15 min: now {now:.1}, max {max:.1} ")
}

fn callers(v: &View) -> Table<'static> {
    // Every caller polled: the table is at most ROWS high and scrolls to the selection.
    let rows = v.snap.callers.iter().enumerate().map(|(i, c)| {
        let lock = v.snap.lockout_of(c).map_or("-".to_string(), |l| {
            format!("locked {} L{}", left(l.remaining_secs), l.level)
        });
        let mark = if i == v.selected { ">" } else { " " };
        Row::new([
            mark.to_string(),
            c.name().to_string(),
            c.tier.clone(),
            c.requests.to_string(),
            c.refused.to_string(),
            c.refused_for.clone().unwrap_or_else(|| "-".to_string()),
            c.strikes.map_or("-".to_string(), |s| s.to_string()),
            lock,
        ])
    });
    let widths = [
        Constraint::Length(1),
        Constraint::Min(20),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(16),
    ];
    Table::new(rows, widths)
        .header(
            Row::new([
                "", "caller", "tier", "requests", "refused", "why", "strikes", "lockout",
            ])
            .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(" top callers, last 5 min (up/down to select) "))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
}

fn networks(v: &View) -> Table<'static> {
    let rows = v.snap.networks.iter().take(ROWS).map(|n| {
        Row::new([
            n.network.clone(),
            n.callers.to_string(),
            n.requests.to_string(),
            n.refused.to_string(),
            n.lockout.as_ref().map_or("-".to_string(), |l| {
                format!("locked {} L{}", left(l.remaining_secs), l.level)
            }),
        ])
    });
    let widths = [
        Constraint::Min(18),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(16),
    ];
    Table::new(rows, widths)
        .header(
            Row::new(["network", "callers", "requests", "refused", "lockout"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(" top networks, last 5 min "))
}

fn crawlers(v: &View) -> Table<'static> {
    let rows = v.snap.crawlers.iter().take(ROWS).map(|c| {
        Row::new([
            c.name.clone(),
            c.proof.clone(),
            c.requests.to_string(),
            c.refused.to_string(),
            format!("{:.2}", c.per_second),
        ])
    });
    let widths = [
        Constraint::Min(12),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(6),
    ];
    Table::new(rows, widths)
        .header(
            Row::new(["name", "proof", "requests", "refused", "req/s"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(" crawlers and agents "))
}

fn lockouts(v: &View) -> Table<'static> {
    let rows = v.snap.lockouts.iter().take(ROWS).map(|l| {
        Row::new([
            l.ip.clone(),
            left(l.remaining_secs),
            l.cause.clone(),
            l.reason.clone(),
        ])
    });
    let widths = [
        Constraint::Min(18),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Min(10),
    ];
    let more = v.snap.lockouts.len().saturating_sub(ROWS);
    let title = if more > 0 {
        format!(
            " lockouts ({} active, {more} not shown) ",
            v.snap.lockouts.len()
        )
    } else {
        format!(" lockouts ({} active) ", v.snap.lockouts.len())
    };
    Table::new(rows, widths)
        .header(
            Row::new(["address", "left", "cause", "reason"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(title))
}

/// Draws the frame into `area`.
pub fn draw_in(f: &mut Frame, area: Rect, v: &View) {
    let rows = Layout::vertical(fitted(v, area.height).map(Constraint::Length)).split(area);
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "limiterctl top  {}  every 2 s  up/down select  l lock {}  u unlock  q quit",
            v.url, v.lock_for
        )))
        .style(Style::new().add_modifier(Modifier::BOLD)),
        rows[0],
    );
    f.render_widget(decisions(v), rows[1]);
    let sparks = Layout::horizontal([Constraint::Ratio(1, 2); 2]).split(rows[2]);
    let admitted = hundredths(&v.snap.admitted_history);
    let refused = hundredths(&v.snap.refused_history);
    f.render_widget(
        spark(summary("admitted", &v.snap.admitted_history), &admitted),
        sparks[0],
    );
    f.render_widget(
        spark(summary("refused", &v.snap.refused_history), &refused),
        sparks[1],
    );
    // Drawn with the selection as its state, so a table shorter than its rows scrolls to it.
    let mut selected = TableState::default().with_selected(Some(v.selected));
    f.render_stateful_widget(callers(v), rows[3], &mut selected);
    f.render_widget(networks(v), rows[4]);
    let side = Layout::horizontal([Constraint::Ratio(1, 2); 2]).split(rows[5]);
    f.render_widget(crawlers(v), side[0]);
    f.render_widget(lockouts(v), side[1]);
    // An action's message wins; otherwise the line says which panels the height hid.
    let last = match (v.message.is_empty(), hidden_note(v, area.height)) {
        (true, Some(note)) => note,
        _ => v.message.clone(),
    };
    f.render_widget(Paragraph::new(last), rows[6]);
}

/// Draws the frame over the whole terminal.
pub fn draw(f: &mut Frame, v: &View) {
    let area = f.area();
    draw_in(f, area, v);
}

/// The frame as plain text, `width` columns, trailing blanks and blank last lines trimmed
/// (what `--once` prints).
pub fn text(v: &View, width: u16) -> String {
    text_in(v, width, height(v))
}

/// [`text`] on a terminal of `width` × `lines`.
pub fn text_in(v: &View, width: u16, lines: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(width, lines)).expect("a test backend");
    // Drawing into memory cannot fail.
    drop(t.draw(|f| draw(f, v)));
    let buf = t.backend().buffer();
    buf.content
        .chunks(usize::from(buf.area.width))
        .map(|line| {
            let s: String = line.iter().map(|c| c.symbol()).collect();
            s.trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::super::state::{Caller, Crawler, Lockout, Network, Snapshot};
    use super::*;

    #[test]
    fn the_frame_shows_callers_networks_crawlers_lockouts_and_the_selection() {
        let mut v = View::new("http://127.0.0.1:9465", "10m");
        v.update(Snapshot {
            at_ms: 1,
            callers: vec![Caller {
                address: Some("198.51.100.7".into()),
                identity: "ip:aa".into(),
                tier: "anon".into(),
                requests: 42,
                refused: 3,
                refused_for: Some("hourly".into()),
                strikes: Some(2),
                lockout: None,
            }],
            lockouts: vec![Lockout {
                ip: "198.51.100.7".into(),
                remaining_secs: 598,
                level: "1".into(),
                cause: "manual".into(),
                reason: "limiterctl top".into(),
            }],
            networks: vec![Network {
                network: "203.0.113.0/24".into(),
                callers: 5,
                requests: 161,
                refused: 11,
                lockout: Some(Lockout {
                    ip: "203.0.113.0/24".into(),
                    remaining_secs: 300,
                    level: "1".into(),
                    cause: "manual".into(),
                    reason: "AS64497: storm".into(),
                }),
            }],
            crawlers: vec![Crawler {
                name: "Googlebot".into(),
                proof: "fake".into(),
                requests: 3,
                refused: 0,
                per_second: 0.01,
            }],
            admitted_history: vec![0.0, 4.0, 8.0],
            ..Snapshot::default()
        });
        let t = text(&v, 100);
        // All but the message line, empty here.
        assert_eq!(t.lines().count(), usize::from(height(&v)) - 1, "{t}");
        assert!(t.lines().all(|l| l.chars().count() <= 100), "{t}");
        assert!(t.lines().next().unwrap().ends_with("q quit"), "{t}");
        assert!(t.contains("since start"), "{t}");
        let row = t.lines().find(|l| l.contains("198.51.100.7 ")).unwrap();
        assert!(
            row.contains('>')
                && row.contains("42")
                && row.contains(" 2 ")
                && row.contains(" hourly ")
                && row.contains("locked 9m58s L1"),
            "{t}"
        );
        assert!(t.contains("lockouts (1 active)"), "{t}");
        let net = t.lines().find(|l| l.contains("203.0.113.0/24 ")).unwrap();
        assert!(
            net.contains(" 161 ") && net.contains("locked 5m0s L1"),
            "{t}"
        );
        let fake = t.lines().find(|l| l.contains("Googlebot ")).unwrap();
        assert!(fake.contains(" fake ") && fake.contains(" 3 "), "{t}");
        assert!(t.contains("admitted/s, 15 min: now 8.0, max 8.0"), "{t}");
        assert!(t.contains('█'), "the sparkline is drawn: {t}");
        assert!(t.contains("anon"), "{t}");
        assert_eq!(left(3700), "1h1m");
    }

    fn busy_view() -> View {
        let mut v = View::new("http://127.0.0.1:9465", "10m");
        let n = |i: usize| format!("198.51.100.{i}");
        v.update(Snapshot {
            at_ms: 1,
            callers: (0..25)
                .map(|i| Caller {
                    address: Some(n(i)),
                    identity: format!("ip:{i}"),
                    tier: "anon".into(),
                    requests: 1_000 - i as u64,
                    refused: 0,
                    refused_for: None,
                    strikes: None,
                    lockout: None,
                })
                .collect(),
            networks: (0..10)
                .map(|i| Network {
                    network: format!("203.0.{i}.0/24"),
                    callers: 1,
                    requests: 10,
                    refused: 0,
                    lockout: None,
                })
                .collect(),
            lockouts: (0..10)
                .map(|i| Lockout {
                    ip: format!("192.0.2.{i}"),
                    remaining_secs: 60,
                    level: "1".into(),
                    cause: "burst".into(),
                    reason: "burst".into(),
                })
                .collect(),
            ..Snapshot::default()
        });
        v
    }

    /// On a 24-line terminal the frame fits, and the selected caller (which `l` and `u` act
    /// on) stays on the screen however far down it is: with every part at its full height
    /// (53 lines here), the callers were squeezed and the selection scrolled out of sight.
    #[test]
    fn on_a_short_terminal_the_frame_fits_and_the_selection_stays_in_sight() {
        let mut v = busy_view();
        assert!(height(&v) > 40, "{}", height(&v));
        for _ in 0..14 {
            v.key(super::super::state::Key::Down);
        }
        assert_eq!(
            v.selected_caller().unwrap().address.as_deref(),
            Some("198.51.100.14")
        );
        v.key(super::super::state::Key::Char('l'));
        let t = text_in(&v, 100, 24);
        assert!(t.lines().count() <= 24, "{t}");
        // The other parts give way to the callers: all ten rows, not the two a squeeze left.
        let shown = t
            .lines()
            .filter(|l| l.contains("198.51.100.") && l.contains(" anon "))
            .count();
        assert_eq!(shown, ROWS, "{t}");
        assert!(t.lines().next().unwrap().ends_with("q quit"), "{t}");
        let row = t.lines().find(|l| l.contains("198.51.100.14 "));
        assert!(
            row.is_some_and(|r| r.contains('>')),
            "the selection is shown: {t}"
        );
        assert!(
            t.lines()
                .last()
                .unwrap()
                .contains("lock 198.51.100.14 for 10m? y to confirm"),
            "the prompt is on the last line: {t}"
        );
        // Without a prompt or a message, the last line names the panels the height hid.
        v.key(super::super::state::Key::Char('n'));
        v.message.clear();
        let t = text_in(&v, 100, 24);
        let last = t.lines().last().unwrap();
        assert!(
            last.contains("hidden for height:")
                && last.contains("networks")
                && last.contains("crawlers and lockouts"),
            "{t}"
        );
        assert!(!text(&v, 100).contains("hidden for height"), "all shown");
        // At full height, ten callers from the top; the 14th (selected) scrolled into them.
        let full = text(&v, 100);
        assert!(
            full.contains("198.51.100.14 ") && full.contains("lockouts (10 active)"),
            "{full}"
        );
    }
}
