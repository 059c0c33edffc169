//! The sampler behind [`super::history`]: every step it reads the counters that already exist
//! (decisions by action and refusal reason, kernel verdicts, held requests) into the ring.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::history::{Totals, STEP_SECS, VERDICTS};
use super::registry::Metrics;

/// The counters' totals now, stamped `at_ms`.
pub fn sample(metrics: &Metrics, at_ms: u64) -> Totals {
    let (allow, delay, mut rejects) = metrics.decisions.outcome_totals();
    // Sheds are no decisions; the charts show them beside the refusals all the same.
    if let Some(o) = metrics.sources.http.get().and_then(|h| h.overload.as_ref()) {
        rejects[crate::model::Reason::Overload.index()] += crate::model::Tier::ALL
            .into_iter()
            .map(|t| o.sheds(t))
            .sum::<u64>();
    }
    let mut verdicts = [0u64; VERDICTS];
    if let Some(k) = metrics
        .sources
        .kernel
        .get()
        .and_then(|k| k.attached.as_ref())
    {
        if let Ok(c) = k.maps.counters() {
            verdicts = c.0;
        }
    }
    let held = metrics
        .sources
        .http
        .get()
        .map_or(0, |h| h.gate.held() as u64);
    Totals {
        at_ms,
        allow,
        delay,
        rejects,
        verdicts,
        held,
    }
}

/// How the sampler keeps time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// A sample every [`STEP_SECS`] of wall time, stamped with the wall clock.
    Real,
    /// Test only (`LIMITER_TEST_HISTORY_TICK_MS`): a sample every `tick` of wall time, each
    /// stamped [`STEP_SECS`] after the previous one, so a test sees 15 minutes of points
    /// without waiting for them.
    Compressed { tick: Duration },
}

/// Samples into `metrics.history` until `stop`.
pub async fn run(metrics: Arc<Metrics>, pace: Pace, start_ms: u64, stop: CancellationToken) {
    let tick = match pace {
        Pace::Real => Duration::from_secs(STEP_SECS),
        Pace::Compressed { tick } => tick,
    };
    let started = std::time::Instant::now();
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        let at_ms = match pace {
            Pace::Real => start_ms + started.elapsed().as_millis() as u64,
            Pace::Compressed { .. } => start_ms + n * STEP_SECS * 1000,
        };
        n += 1;
        metrics.history.record(sample(&metrics, at_ms));
    }
}
