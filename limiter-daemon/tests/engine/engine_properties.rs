//! Property tests of the window semantics: no identity is admitted more than N times in any
//! 60 s span; hourly and daily windows reset exactly at UTC boundaries.

use crate::rig::*;
use limiter_daemon::engine::{Action, Reason};
use limiter_daemon::identity::hash::IdKey;
use limiter_daemon::model::{PerWindow, WindowKind};
use limiter_daemon::store::count::{apply, CountRequest, Entry, Limit};
use limiter_daemon::store::windows::{DAY_MS, HOUR_MS};
use proptest::prelude::*;

fn burst_req(now_ms: u64, n: u32) -> CountRequest {
    CountRequest {
        networks: Default::default(),
        id: IdKey::from_prefix(&[1; 16]),
        now_ms,
        cost: 1,
        limits: PerWindow::default().with(WindowKind::Burst, Some(Limit::refusing(n))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any arrival pattern, any N: every 60 s span holds at most N admissions.
    #[test]
    fn never_more_than_n_admitted_in_any_60s_span(
        n in 1u32..40,
        gaps in proptest::collection::vec(0u64..4_000, 1..600),
        start in 1_700_000_000_000u64..1_800_000_000_000,
    ) {
        let mut e = Entry::default();
        let mut now = start;
        let mut admitted: Vec<u64> = Vec::new();
        for g in gaps {
            now += g;
            if apply(&mut e, &burst_req(now, n)).admitted {
                admitted.push(now);
            }
        }
        // The worst span ends at an admission; count admissions in (t − 60 s, t].
        for (i, &t) in admitted.iter().enumerate() {
            let in_span = admitted[..=i].iter().filter(|&&a| a + 60_000 > t).count();
            prop_assert!(in_span as u32 <= n, "{in_span} admitted in the 60 s ending at {t}");
        }
    }

    /// The same through the engine (strikes and lockouts on), with the injected clock.
    #[test]
    fn engine_never_admits_more_than_the_burst_in_any_60s_span(
        gaps in proptest::collection::vec(0u64..1_500, 1..400),
    ) {
        let r = rig("[tiers.anon]\nburst = 7\n[default_route]\nlimits = [\"burst\"]\n[lockout]\nbase = \"1s\"\n");
        let mut admitted: Vec<u64> = Vec::new();
        for g in gaps {
            r.clock.advance_ms(g);
            if r.get("192.0.2.1", "/").action() == Action::Allow {
                admitted.push(r.clock_now());
            }
        }
        for (i, &t) in admitted.iter().enumerate() {
            let in_span = admitted[..=i].iter().filter(|&&a| a + 60_000 > t).count();
            prop_assert!(in_span <= 7, "{in_span} admitted in the 60 s ending at {t}");
        }
    }

    /// Spending the hourly budget at any moment of an hour: refused up to the last
    /// millisecond of that hour, admitted at its first millisecond after.
    #[test]
    fn hourly_window_resets_exactly_at_the_utc_hour(
        hour in 480_000u64..500_000,
        offset in 0u64..HOUR_MS,
        limit in 1u32..50,
    ) {
        let now = hour * HOUR_MS + offset;
        let mut e = Entry::default();
        let req = |t: u64| CountRequest {
            networks: Default::default(),
            id: IdKey::from_prefix(&[2; 16]), now_ms: t, cost: 1,
            limits: PerWindow::default().with(WindowKind::Hourly, Some(Limit::refusing(limit))),
        };
        for _ in 0..limit {
            prop_assert!(apply(&mut e, &req(now)).admitted);
        }
        let refused = apply(&mut e, &req(now));
        prop_assert!(!refused.admitted);
        let end = (hour + 1) * HOUR_MS;
        prop_assert_eq!(refused.uses[WindowKind::Hourly].unwrap().reset_ms, end - now);
        prop_assert!(!apply(&mut e, &req(end - 1)).admitted);
        prop_assert!(apply(&mut e, &req(end)).admitted);
    }

    #[test]
    fn daily_window_resets_exactly_at_00_00_utc(
        day in 19_000u64..21_000,
        offset in 0u64..DAY_MS,
        limit in 1u32..50,
    ) {
        let now = day * DAY_MS + offset;
        let mut e = Entry::default();
        let req = |t: u64| CountRequest {
            networks: Default::default(),
            id: IdKey::from_prefix(&[3; 16]), now_ms: t, cost: 1,
            limits: PerWindow::default().with(WindowKind::Daily, Some(Limit::refusing(limit))),
        };
        for _ in 0..limit {
            prop_assert!(apply(&mut e, &req(now)).admitted);
        }
        let end = (day + 1) * DAY_MS;
        prop_assert!(!apply(&mut e, &req(end - 1)).admitted);
        let after = apply(&mut e, &req(end));
        prop_assert!(after.admitted);
        prop_assert_eq!(after.uses[WindowKind::Daily].unwrap().used, 1);
    }
}

#[test]
fn engine_retry_after_is_the_seconds_to_the_hour_rollover() {
    let r = rig("[tiers.anon]\nhourly = 3\n");
    r.clock.set_ms(NEW_YEAR_MS + 59 * 60_000 + 15_000); // 00:59:15 UTC
    for _ in 0..3 {
        assert_eq!(r.get("192.0.2.9", "/").action(), Action::Allow);
    }
    let d = r.get("192.0.2.9", "/");
    assert_eq!(
        (d.reason(), d.retry_after_secs()),
        (Some(Reason::Hourly), Some(45))
    );
    r.clock.set_ms(NEW_YEAR_MS + HOUR_MS - 1);
    assert_eq!(r.get("192.0.2.9", "/").reason(), Some(Reason::Hourly));
    r.clock.set_ms(NEW_YEAR_MS + HOUR_MS);
    assert_eq!(r.get("192.0.2.9", "/").action(), Action::Allow);
}
