//! The adaptive limit (`max_inflight = "auto"`): a gradient controller on the upstream's
//! latency. Pure: times are microseconds the caller passes in, so tests drive it without a
//! clock.
//!
//! What it borrows, and from whom:
//! - Envoy's adaptive concurrency filter measures the no-load latency by *probing*: the limit
//!   drops to its minimum until a batch of requests has run alone, and that batch's latency is
//!   the baseline (`minRTT`), re-measured on a schedule. A baseline learned under load instead
//!   (Netflix Gradient2's long-term average) drifts up with the queue it should detect, and the
//!   limit drifts up with it. So: a probe at start and every [`PROBE_EVERY_US`]; only requests
//!   sent after the probe began count in it (earlier ones ran under load).
//! - Both then compare a window's latency with the baseline: `gradient = baseline ×
//!   tolerance / latency`, clamped to [0.5, 2], and `limit = limit × gradient + headroom`.
//!   Envoy takes the window's p90, a 25 % tolerance and √limit headroom, Gradient2 an average,
//!   a 1.5 tolerance and a queue allowance; here the window's mean, no tolerance and a headroom
//!   of a sixteenth of the limit (at least one request: a limit back at the baseline's latency
//!   doubles in about a second). At equilibrium `limit × gradient` is the requests the upstream serves at
//!   baseline latency (Little's law), so with every request at the limit it settles just above
//!   the upstream's real concurrency. Under the ladder fewer are in flight than the limit
//!   (anonymous callers stop at 0.6 of it), and it settles higher, near the concurrency over
//!   the fraction in use: about 1.6× with anonymous load alone. That is what keeps the app
//!   busy when only anonymous callers are left; a tolerance on top (Envoy's 25 %) took it past
//!   twice the app's concurrency in our tests.
//! - Gradient2's "app-limited" rule: the limit only grows when requests actually came close to
//!   it (half the limit in flight), so an idle hour does not leave it at `max_limit`.

/// Latency is averaged over at least this long…
pub const WINDOW_US: u64 = 100_000;
/// …and at least this many requests.
const MIN_SAMPLES: u32 = 5;
/// How often the baseline is measured again.
pub const PROBE_EVERY_US: u64 = 30_000_000;
/// Latency up to this multiple of the baseline is no reason to shrink (see the module docs).
const TOLERANCE: f64 = 1.0;

/// The controller's state.
#[derive(Debug)]
pub struct Gradient {
    min: u32,
    max: u32,
    limit: u32,
    /// The no-load latency (µs), once a probe measured it.
    baseline: Option<f64>,
    /// The current window: when it began, latencies summed, requests, most in flight.
    start: u64,
    sum: u64,
    count: u32,
    peak: u32,
    /// The current window is a probe (the limit is `min`).
    probing: bool,
    next_probe: u64,
}

impl Gradient {
    /// Starts with a probe at `min`.
    pub fn new(min: u32, max: u32, now: u64) -> Self {
        Gradient {
            min,
            max,
            limit: min,
            baseline: None,
            start: now,
            sum: 0,
            count: 0,
            peak: 0,
            probing: true,
            next_probe: now + PROBE_EVERY_US,
        }
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// A request sent at `sent` was answered at `now`, with `inflight` requests in flight when
    /// it was sent; returns the limit from now on.
    pub fn sample(&mut self, sent: u64, now: u64, inflight: u32) -> u32 {
        if self.probing && sent < self.start {
            return self.limit;
        }
        self.sum += now.saturating_sub(sent);
        self.count += 1;
        self.peak = self.peak.max(inflight);
        if now.saturating_sub(self.start) < WINDOW_US || self.count < MIN_SAMPLES {
            return self.limit;
        }
        let latency = (self.sum as f64 / f64::from(self.count)).max(1.0);
        match self.baseline {
            // The baseline comes from probes only: the least of many noisy windows would be an
            // underestimate, and the limit would sink with it.
            Some(base) if !self.probing => {
                let gradient = (base * TOLERANCE / latency).clamp(0.5, 2.0);
                let app_limited = self.peak < self.limit / 2;
                if gradient < 1.0 || !app_limited {
                    let limit = f64::from(self.limit);
                    let headroom = (limit / 16.0).max(1.0);
                    let next = (limit * gradient + headroom).round() as u32;
                    self.limit = next.clamp(self.min, self.max);
                }
            }
            _ => {
                self.baseline = Some(latency);
                self.probing = false;
            }
        }
        if now >= self.next_probe {
            self.probing = true;
            self.limit = self.min;
            self.next_probe = now + PROBE_EVERY_US;
        }
        self.start = now;
        self.sum = 0;
        self.count = 0;
        self.peak = 0;
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream with `slots` slots of `service` µs and a queue: driven closed-loop at the
    /// controller's limit (the proxy always has more waiting), one window at a time; returns
    /// the limits seen.
    fn drive(g: &mut Gradient, slots: u32, service: u64, from: u64, windows: u64) -> Vec<u32> {
        let mut now = from;
        let mut seen = Vec::new();
        for _ in 0..windows {
            let l = g.limit();
            // Little's law: `l` in flight through `slots` servers (a FIFO queue before them)
            // take max(1, l/slots) services each.
            let latency = (service as f64 * (f64::from(l) / f64::from(slots)).max(1.0)) as u64;
            let per_window = (WINDOW_US / latency + 1) * u64::from(l);
            for i in 0..per_window {
                let done = now + latency + i;
                g.sample(now + i, done, l);
            }
            now += latency.max(WINDOW_US) + per_window;
            seen.push(g.limit());
        }
        seen
    }

    #[test]
    fn probes_first_then_settles_within_twice_the_real_concurrency() {
        let mut g = Gradient::new(4, 1000, 0);
        let seen = drive(&mut g, 8, 50_000, 0, 60);
        let settled = &seen[20..];
        assert!(
            settled.iter().all(|&l| (4..=16).contains(&l)),
            "limits: {seen:?}"
        );
    }

    #[test]
    fn latency_rising_shrinks_the_limit_and_falling_lets_it_recover() {
        let mut g = Gradient::new(4, 1000, 0);
        drive(&mut g, 64, 10_000, 0, 40);
        let high = g.limit();
        assert!(high >= 64, "{high}");
        // The upstream slows to 8 slots: the limit falls within a few windows.
        let seen = drive(&mut g, 8, 10_000, 10_000_000, 20);
        assert!(*seen.last().unwrap() <= 16, "{seen:?}");
        let seen = drive(&mut g, 64, 10_000, 20_000_000, 40);
        assert!(*seen.last().unwrap() >= 64, "{seen:?}");
    }

    #[test]
    fn an_idle_upstream_does_not_raise_the_limit_and_bounds_hold() {
        let mut g = Gradient::new(4, 10, 0);
        // One request at a time, fast: app-limited, never grown past the probe's.
        for i in 0..200u64 {
            g.sample(i * 20_000, i * 20_000 + 1_000, 1);
        }
        assert_eq!(g.limit(), 4);
        drive(&mut g, 1000, 1_000, 5_000_000, 50);
        assert_eq!(g.limit(), 10, "max_limit bounds it");
    }

    #[test]
    fn a_probe_ignores_requests_sent_before_it() {
        let mut g = Gradient::new(2, 100, 0);
        drive(&mut g, 8, 50_000, 0, 30);
        assert!(g.limit() > 2);
        // Past the probe time, the next window closes into a probe at `min`.
        let t = PROBE_EVERY_US + 1;
        for i in 0..10 {
            g.sample(t - 60_000 + i, t + WINDOW_US + i, 8);
        }
        assert_eq!(g.limit(), 2);
        let base = g.baseline;
        // Slow requests sent before the probe began leave its window alone.
        g.sample(t, t + 10 * WINDOW_US, 8);
        assert_eq!((g.count, g.baseline), (0, base));
    }
}
