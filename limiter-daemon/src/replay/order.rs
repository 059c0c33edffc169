//! Which lines move the replay's clock. The engine's windows, strikes and lockouts all read
//! the clock, so one line stamped far off must not move it: a single line dated 9999-12-31 in
//! the middle of 3,000 clean lines used to jump the clock there, and every line after it was
//! decided in the year 9999 against the budgets of its first second (2,900 refusals and 5
//! lockouts, out of a log where every request was allowed).
//!
//! The rule, with a bound of [`BOUND_MS`] (10 minutes):
//! - a line stamped after the replay's own time plus a day (a log cannot come from the future;
//!   the day covers clocks and zones set wrong) is malformed ([`Malformed::Future`]);
//! - a line at most the bound earlier than the clock is decided at the clock (the clock never
//!   goes backwards) and counted as out of order, as before;
//! - a line more than the bound earlier is malformed ([`Malformed::Behind`]);
//! - a line more than the bound later (a gap in the log, or one bad stamp) is held until the
//!   next line says which: the jump is real when the next line is not itself more than the
//!   bound earlier than the held one, and the held line is then decided at its time; otherwise
//!   it is malformed ([`Malformed::Ahead`]) and the clock stays. A held line at the very end
//!   is decided: nothing contradicts it, and it is the last decision anyway.
//!
//! A quiet night in a log is a gap like any other: the first line after it is confirmed by the
//! second. What this cannot tell apart is two or more consecutive lines agreeing on a bad
//! time in the past; they are taken as a real jump.
//!
//! Pure over the timestamps, generic over what is held (the run loop holds a copy of the
//! line's text), so the rule is tested without an engine.

use super::line::Malformed;

/// How far a line's time may be from the clock before it is treated as suspect.
pub const BOUND_MS: u64 = 10 * 60 * 1000;
/// How far past the replay's own time a line may be stamped.
pub const FUTURE_SLACK_MS: u64 = 24 * 3600 * 1000;

/// Where a line goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Decide it now at `at` (`late`: it was stamped earlier than the clock).
    Now { at: u64, late: bool },
    /// Too far ahead to trust yet: hand it to [`Order::hold`].
    Hold,
    /// Not replayed.
    Skip(Malformed),
}

/// The clock and the line held for confirmation.
#[derive(Debug)]
pub struct Order<T> {
    clock: Option<u64>,
    held: Option<(u64, T)>,
    /// Lines stamped later than this are malformed.
    latest: u64,
}

impl<T> Order<T> {
    /// An empty clock for a replay run at `now_ms` (the machine's time).
    pub fn new(now_ms: u64) -> Self {
        Order {
            clock: None,
            held: None,
            latest: now_ms.saturating_add(FUTURE_SLACK_MS),
        }
    }

    /// The latest time a line was decided at.
    pub fn clock(&self) -> Option<u64> {
        self.clock
    }

    /// Called first for every line stamped `t`: settles the held line, if any. `Ok(at)`: decide
    /// it at `at` (the clock is there now); `Err`: it is malformed.
    pub fn settle(&mut self, t: u64) -> Option<(T, Result<u64, Malformed>)> {
        // A line from the future is malformed itself; it says nothing about the held one.
        if t > self.latest {
            return None;
        }
        let (held_t, line) = self.held.take()?;
        if t.saturating_add(BOUND_MS) >= held_t {
            self.clock = Some(self.clock.map_or(held_t, |c| c.max(held_t)));
            Some((line, Ok(held_t)))
        } else {
            Some((line, Err(Malformed::Ahead)))
        }
    }

    /// Where the line stamped `t` goes (after [`Order::settle`]).
    pub fn place(&mut self, t: u64) -> Place {
        match self.clock {
            _ if t > self.latest => Place::Skip(Malformed::Future),
            // The first line: nothing to compare it with yet, so the next line confirms it.
            None => Place::Hold,
            Some(c) if t > c.saturating_add(BOUND_MS) => Place::Hold,
            Some(c) if t.saturating_add(BOUND_MS) < c => Place::Skip(Malformed::Behind),
            Some(c) if t < c => Place::Now { at: c, late: true },
            Some(_) => {
                self.clock = Some(t);
                Place::Now { at: t, late: false }
            }
        }
    }

    /// Keeps the line [`Order::place`] answered [`Place::Hold`] for.
    pub fn hold(&mut self, t: u64, line: T) {
        self.held = Some((t, line));
    }

    /// At the end of the logs: the held line, decided (no line after it says otherwise).
    pub fn finish(&mut self) -> Option<(T, Result<u64, Malformed>)> {
        let (held_t, line) = self.held.take()?;
        self.clock = Some(self.clock.map_or(held_t, |c| c.max(held_t)));
        Some((line, Ok(held_t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    /// Runs `times` through the rule; what each line became, in the order decided or skipped.
    /// 2026-12-02, when these tests were written.
    const NOW: u64 = 1_796_169_600_000;

    fn run(times: &[u64]) -> Vec<(usize, Result<u64, Malformed>)> {
        let mut o = Order::new(NOW);
        let mut out = Vec::new();
        for (i, &t) in times.iter().enumerate() {
            if let Some(settled) = o.settle(t) {
                out.push(settled);
            }
            match o.place(t) {
                Place::Now { at, .. } => out.push((i, Ok(at))),
                Place::Hold => o.hold(t, i),
                Place::Skip(why) => out.push((i, Err(why))),
            }
        }
        out.extend(o.finish());
        out
    }

    #[test]
    fn one_line_far_ahead_is_malformed_and_the_clock_stays() {
        let far = NOW - 86_400_000; // the past, but years after the log's other lines
        let got = run(&[1000, 2000, far, 3000, 4000]);
        assert_eq!(
            got,
            [
                (0, Ok(1000)),
                (1, Ok(2000)),
                (2, Err(Malformed::Ahead)),
                (3, Ok(3000)),
                (4, Ok(4000))
            ]
        );
        // At the end nothing contradicts it: decided (it is the last decision anyway).
        assert_eq!(run(&[1000, 2000, far])[2], (2, Ok(far)));
        // In the future, it is malformed wherever it stands, even twice in a row.
        let future = 253_402_300_799_000; // 9999-12-31T23:59:59Z
        assert_eq!(
            run(&[1000, future, future, 2000]),
            [
                (1, Err(Malformed::Future)),
                (2, Err(Malformed::Future)),
                (0, Ok(1000)),
                (3, Ok(2000))
            ]
        );
        assert_eq!(run(&[1000, future])[0], (1, Err(Malformed::Future)));
        // As the first line: the second contradicts it.
        assert_eq!(
            run(&[far, 1000, 2000]),
            [(0, Err(Malformed::Ahead)), (1, Ok(1000)), (2, Ok(2000))]
        );
    }

    #[test]
    fn a_gap_confirmed_by_the_next_line_moves_the_clock() {
        let gap = 8 * 60 * MIN;
        assert_eq!(
            run(&[0, MIN, gap, gap + 1, gap - 5 * MIN]),
            [
                (0, Ok(0)),
                (1, Ok(MIN)),
                (2, Ok(gap)),
                (3, Ok(gap + 1)),
                (4, Ok(gap + 1))
            ]
        );
        // Two gaps in a row: the second line after the first gap confirms it by being later.
        assert_eq!(
            run(&[0, gap, 2 * gap, 2 * gap]),
            [(0, Ok(0)), (1, Ok(gap)), (2, Ok(2 * gap)), (3, Ok(2 * gap))]
        );
        assert_eq!(run(&[5]), [(0, Ok(5))], "a log of one line");
        // A sparse log, one line an hour: every line is a gap, the last one included.
        let hour = 60 * MIN;
        assert_eq!(
            run(&[0, hour, 2 * hour]),
            [(0, Ok(0)), (1, Ok(hour)), (2, Ok(2 * hour))]
        );
    }

    #[test]
    fn earlier_lines_within_the_bound_are_late_past_it_malformed() {
        let mut o: Order<()> = Order::new(NOW);
        o.place(60 * MIN);
        o.hold(60 * MIN, ());
        assert!(o.settle(60 * MIN).unwrap().1.is_ok());
        assert_eq!(
            o.place(60 * MIN),
            Place::Now {
                at: 60 * MIN,
                late: false
            }
        );
        assert_eq!(
            o.place(50 * MIN),
            Place::Now {
                at: 60 * MIN,
                late: true
            }
        );
        assert_eq!(o.place(50 * MIN - 1), Place::Skip(Malformed::Behind));
        assert_eq!(
            o.place(70 * MIN),
            Place::Now {
                at: 70 * MIN,
                late: false
            }
        );
        assert_eq!(o.place(80 * MIN + 1), Place::Hold);
        assert_eq!(o.clock(), Some(70 * MIN));
    }

    #[test]
    fn the_reasons_quote_the_bound() {
        assert_eq!(BOUND_MS, 10 * MIN);
        assert!(Malformed::Ahead.as_str().contains("10 minutes"));
        assert!(Malformed::Behind.as_str().contains("10 minutes"));
        assert_eq!(FUTURE_SLACK_MS, 24 * 60 * MIN);
        assert!(Malformed::Future.as_str().contains("a day"));
    }
}
