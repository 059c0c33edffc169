//! The embedded store's memory stays bounded while identities churn.

use crate::rig::T0;
use limiter_daemon::embedded::counters::Counters;
use limiter_daemon::identity::hash::{IdentityHasher, Namespace};
use limiter_daemon::model::{PerWindow, WindowKind};
use limiter_daemon::store::count::{CountRequest, Limit};

fn req(h: &IdentityHasher, n: u64, now_ms: u64, daily: bool) -> CountRequest {
    CountRequest {
        networks: Default::default(),
        id: h.id(Namespace::Ip, &n.to_le_bytes()),
        now_ms,
        cost: 1,
        limits: PerWindow::default()
            .with(WindowKind::Burst, Some(Limit::refusing(120)))
            .with(WindowKind::Hourly, Some(Limit::refusing(600)))
            .with(WindowKind::Daily, daily.then_some(Limit::refusing(1000))),
    }
}

#[test]
fn idle_identities_are_swept_while_identities_churn() {
    let h = IdentityHasher::hmac(b"0123456789abcdef0123");
    let c = Counters::new(2_000_000, 60_000);
    let mut now = T0;
    let mut peak = 0;
    // 300,000 distinct one-shot identities over ~8 hours: 100 new ones per 10 s.
    for n in 0..300_000u64 {
        if n % 100 == 0 {
            now += 10_000;
        }
        c.check_and_count(&req(&h, n, now, false));
        peak = peak.max(c.len());
    }
    // Without a daily window an identity is forgettable once its hour and burst are over:
    // at most ~1 hour of arrivals (36,000) plus a sweep interval are alive at any time.
    assert!(peak <= 40_000, "peak {peak}");
    c.sweep_all(now + 3_600_000);
    assert_eq!(c.len(), 0, "all idle identities are gone");
    assert_eq!(c.forced_evictions(), 0);
}

#[test]
fn the_identity_ceiling_holds_even_within_one_day() {
    let h = IdentityHasher::hmac(b"0123456789abcdef0123");
    let c = Counters::new(64 * 1024, 60_000);
    let now = T0;
    for n in 0..500_000u64 {
        c.check_and_count(&req(&h, n, now + n, true));
        assert!(c.len() <= 64 * 1024, "at {n}: {}", c.len());
    }
    assert!(c.forced_evictions() > 0);
    // Daily counts keep identities alive until 00:00 UTC; after it they can all go.
    c.sweep_all(T0 + 86_400_000);
    assert_eq!(c.len(), 0);
}

#[test]
fn counts_survive_sweeps_while_live() {
    let h = IdentityHasher::hmac(b"0123456789abcdef0123");
    let c = Counters::new(2_000_000, 1);
    let r = req(&h, 7, T0, true);
    c.check_and_count(&r);
    c.sweep_all(T0 + 3_000_000);
    // Still the same UTC day: the daily count is kept.
    let u = c.usage(&r.id, T0 + 3_000_000).expect("kept");
    assert_eq!(u.used[WindowKind::Daily], 1);
}
