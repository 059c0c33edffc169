//! A spent budget is a pricing question, a burst is misbehaviour: every request that arrives
//! counts toward the burst test, refused ones included, so a loop hammering after its budget is
//! spent is struck and locked out (and escalates), while a crawler politely at its limit never
//! earns a strike. Real engine and embedded store, injected clock. The same schedules run
//! through the Valkey store in `engine_valkey.rs`.

use crate::rig::*;
use limiter_daemon::engine::{Action, Reason, WindowKind};

#[test]
fn a_crawler_politely_at_its_hourly_limit_earns_no_strike() {
    let r = rig("");
    let peer = "198.51.100.7";
    let spent = spend_the_hour_politely().len();
    let decisions = drive(&r.engine, &r.clock, peer, &polite_crawler_after_budget());
    assert!(decisions[..spent]
        .iter()
        .all(|d| d.action() == Action::Allow));
    let after = &decisions[spent..];
    let refused = after
        .iter()
        .filter(|d| d.action() == Action::Reject)
        .count();
    assert!(refused > 4_000, "the budgets stay spent: {refused} refused");
    for (i, d) in after.iter().enumerate() {
        assert!(
            matches!(
                d.reason(),
                None | Some(Reason::Hourly) | Some(Reason::Daily)
            ),
            "request {i} after exhaustion: {d:?}"
        );
        assert_eq!(d.lockout_level, None, "request {i}: {d:?}");
        // Refused requests are counted toward the burst test: at 100 a minute the window holds
        // about 100 of its 120 (up to 65 s of 5 s slots), never more than 120.
        let burst = d.window(WindowKind::Burst).expect("burst applies");
        if i > 120 {
            assert!(
                (2..=25).contains(&burst.remaining),
                "request {i}: the refused requests count toward the burst: {burst:?}"
            );
        }
    }
    assert_eq!(r.engine.lockouts().strikes(ip(peer)).unwrap(), 0);
    assert!(r.engine.lockouts().get(ip(peer)).unwrap().is_none());
    assert!(r.sink.locks().is_empty(), "nothing reached the kernel");
}

#[test]
fn a_runaway_loop_after_its_budget_is_spent_is_locked_out() {
    let r = rig("");
    let peer = "198.51.100.8";
    let spent = spend_the_hour_politely().len();
    let decisions = drive(&r.engine, &r.clock, peer, &runaway_loop_after_budget());
    assert!(decisions[..spent]
        .iter()
        .all(|d| d.action() == Action::Allow));
    let after = &decisions[spent..];
    assert_eq!(
        after[0].reason(),
        Some(Reason::Hourly),
        "first: the budget is spent, no burst yet"
    );

    // The strikes, in order: the first, then the next burst after the lockout ends.
    let struck: Vec<(usize, &limiter_daemon::engine::Decision)> = after
        .iter()
        .enumerate()
        .filter(|(_, d)| d.lockout_level.is_some())
        .collect();
    assert!(struck.len() >= 2, "strikes: {}", struck.len());
    let (first_at, first) = struck[0];
    assert_eq!(
        (first.action(), first.reason(), first.lockout_level),
        (Action::Reject, Some(Reason::Burst), Some(1)),
        "{first:?}"
    );
    // Retry-After is the later of the lockout and the hourly rollover still ahead.
    let hour_left = first.window(WindowKind::Hourly).unwrap().reset_secs;
    assert_eq!(first.retry_after_secs(), Some(hour_left.max(65).max(60)));
    assert!(
        first_at < 25,
        "about 100 in the window already: struck within 25"
    );
    // While locked out: `locked`, no further strike.
    let (second_at, second) = struck[1];
    assert!(after[first_at + 1..second_at]
        .iter()
        .all(|d| d.reason() == Some(Reason::Locked) || d.reason() == Some(Reason::Hourly)));
    assert_eq!(after[first_at + 1].reason(), Some(Reason::Locked));
    assert_eq!(
        (second.reason(), second.lockout_level),
        (Some(Reason::Burst), Some(2)),
        "the escalation continues at the next burst: {second:?}"
    );
    assert_eq!(
        r.engine.lockouts().strikes(ip(peer)).unwrap(),
        struck.len() as u32
    );

    // Each lockout reached the kernel with its level, doubling.
    let locks = r.sink.locks();
    assert_eq!(locks.len(), struck.len(), "{locks:?}");
    assert_eq!(locks[0].1, 1);
    assert!((60..=65).contains(&locks[0].0), "{locks:?}");
    assert_eq!(locks[1], (120, 2));
    assert!(r.sink.events().contains(&SinkEvent::Lock {
        ip: ip(peer),
        secs: locks[0].0,
        level: 1
    }));
}
