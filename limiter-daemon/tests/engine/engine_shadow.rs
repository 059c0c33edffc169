//! Shadow mode (`[engine] shadow = true`, or `shadow = true` on a route): every decision is
//! made and counted, and says what enforcing would have done, but nothing is rejected, delayed,
//! struck or locked, and nothing reaches the kernel. One test per reason, against the real
//! engine and embedded store with an injected clock.

use std::time::Duration;

use crate::rig::*;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::{Action, Decision, Reason, WindowKind};
use limiter_daemon::model::{ListEntry, ListKind};

/// `d` was let through and would have been `action` for `reason`.
fn shadowed(d: &Decision, action: Action, reason: Option<Reason>) {
    assert_eq!(
        d.action(),
        Action::Allow,
        "shadow mode lets it through: {d:?}"
    );
    assert_eq!(d.delay(), Duration::ZERO, "nothing is held: {d:?}");
    assert_eq!(d.lockout_level, None, "nothing is struck: {d:?}");
    let s = d
        .shadowed()
        .expect("the decision says what would have happened");
    assert_eq!((s.action(), s.reason()), (action, reason), "{d:?}");
}

fn nothing_enforced(r: &Rig, peer: &str) {
    assert_eq!(r.engine.lockouts().strikes(ip(peer)).unwrap(), 0);
    assert!(r.engine.lockouts().get(ip(peer)).unwrap().is_none());
    assert!(r.sink.locks().is_empty(), "{:?}", r.sink.events());
}

#[test]
fn a_burst_in_shadow_mode_is_admitted_and_labelled() {
    let r = rig("[engine]\nshadow = true\n[tiers.anon]\nburst = 3\n");
    let peer = "198.51.100.1";
    for _ in 0..3 {
        shadowed(&r.get(peer, "/"), Action::Allow, None);
    }
    for n in 4..=20 {
        let d = r.get(peer, "/");
        shadowed(&d, Action::Reject, Some(Reason::Burst));
        assert!(d.shadowed().unwrap().would_strike(), "request {n}");
        // Counted like an enforced decision: the burst window is full.
        assert_eq!(d.window(WindowKind::Burst).unwrap().remaining, 0);
    }
    nothing_enforced(&r, peer);
}

#[test]
fn shadow_hourly() {
    let r = rig("[engine]\nshadow = true\n[tiers.anon]\nhourly = 3\n");
    let peer = "198.51.100.2";
    for _ in 0..3 {
        shadowed(&r.get(peer, "/"), Action::Allow, None);
    }
    let d = r.get(peer, "/");
    shadowed(&d, Action::Reject, Some(Reason::Hourly));
    assert!(!d.shadowed().unwrap().would_strike());
    nothing_enforced(&r, peer);
}

#[test]
fn shadow_daily() {
    let r = rig("[engine]\nshadow = true\n[quota]\nanon = 3\n");
    let peer = "198.51.100.3";
    for _ in 0..3 {
        shadowed(&r.get(peer, "/"), Action::Allow, None);
    }
    shadowed(&r.get(peer, "/"), Action::Reject, Some(Reason::Daily));
    nothing_enforced(&r, peer);
}

#[test]
fn shadow_delay() {
    let r = rig("[engine]\nshadow = true\n[quota]\nanon = 3\n\
         [[routes]]\nprefix = \"/scan\"\nlimits = [\"daily\"]\nover_quota = \"delay\"\n");
    let peer = "198.51.100.4";
    for _ in 0..3 {
        shadowed(&r.get(peer, "/scan"), Action::Allow, None);
    }
    let d = r.get(peer, "/scan");
    shadowed(&d, Action::Delay, Some(Reason::Daily));
    assert_eq!(d.shadowed().unwrap().delay(), Duration::from_millis(5_000));
    for _ in 0..30 {
        r.get(peer, "/scan");
    }
    let d = r.get(peer, "/scan");
    assert_eq!(d.shadowed().unwrap().delay(), Duration::from_millis(60_000));
    assert_eq!(d.delay(), Duration::ZERO);
}

#[test]
fn shadow_key_hourly() {
    let r = rig("[engine]\nshadow = true\n[[routes]]\nprefix = \"/api/feeds\"\nkey_limit = true\n");
    let key = r
        .engine
        .keys()
        .issue(IssueKey {
            hourly_limit: Some(2),
            ..IssueKey::default()
        })
        .unwrap();
    let h = headers(&[("x-api-key", &key.token)]);
    let peer = "198.51.100.5";
    r.request(peer, "GET", "/", &h);
    r.land_lookups();
    for _ in 0..2 {
        let d = r.request(peer, "GET", "/api/feeds", &h);
        shadowed(&d, Action::Allow, None);
    }
    let d = r.request(peer, "GET", "/api/feeds", &h);
    shadowed(&d, Action::Reject, Some(Reason::KeyHourly));
    nothing_enforced(&r, peer);
    assert!(
        !r.sink
            .events()
            .iter()
            .any(|e| matches!(e, SinkEvent::SetTier { .. })),
        "no verified tier is pushed to the kernel in shadow mode: {:?}",
        r.sink.events()
    );
}

#[test]
fn shadow_locked_and_denied() {
    let r = rig("[engine]\nshadow = true\n");
    let locked = "198.51.100.6";
    r.engine
        .lockouts()
        .lock(ip(locked), Duration::from_secs(300))
        .unwrap();
    let d = r.get(locked, "/");
    shadowed(&d, Action::Reject, Some(Reason::Locked));
    assert_eq!(
        d.hourly_limit(),
        Some(600),
        "a lockout still names the budget"
    );

    let denied = "198.51.100.7";
    r.engine
        .lists()
        .add(
            ListKind::Deny,
            ListEntry {
                net: format!("{denied}/32").parse().unwrap(),
                until_ms: None,
                comment: String::new(),
            },
        )
        .unwrap();
    shadowed(&r.get(denied, "/"), Action::Reject, Some(Reason::Locked));
}

#[test]
fn a_route_in_shadow_mode_leaves_the_other_routes_enforcing() {
    let r = rig("[tiers.anon]\nburst = 2\n\
         [[routes]]\nprefix = \"/try\"\nshadow = true\n");
    let trying = "198.51.100.8";
    for _ in 0..2 {
        shadowed(&r.get(trying, "/try/new"), Action::Allow, None);
    }
    for _ in 0..5 {
        shadowed(
            &r.get(trying, "/try/new"),
            Action::Reject,
            Some(Reason::Burst),
        );
    }
    nothing_enforced(&r, trying);

    let other = "198.51.100.9";
    for _ in 0..2 {
        let d = r.get(other, "/");
        assert_eq!((d.action(), d.shadowed()), (Action::Allow, None));
    }
    let d = r.get(other, "/");
    assert_eq!(
        (d.action(), d.reason(), d.lockout_level, d.shadowed()),
        (Action::Reject, Some(Reason::Burst), Some(1), None),
        "enforced: struck and locked"
    );
    assert_eq!(r.sink.locks().len(), 1);
}
