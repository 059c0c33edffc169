//! A session cookie is presence only, so forgeable: the session rung's daily quota is
//! `L_anon` (`QUOTA_ANON`) unless the operator raises it (`[tiers.session] daily`) because
//! sessions are verified upstream. Real engine and embedded store, injected clock.

use crate::rig::*;
use limiter_daemon::engine::{Action, DelayKind, Tier, WindowKind};

const SCAN: &str = "[quota]\nanon = 5\ntoken = 500\n\
                    [[routes]]\nprefix = \"/scan\"\nlimits = [\"daily\"]\nover_quota = \"delay\"\n";

#[test]
fn a_forged_cookie_is_delayed_at_l_anon_plus_one() {
    let r = rig(SCAN);
    let forged = headers(&[("cookie", "session=forged-by-anyone")]);
    for n in 1..=5 {
        let d = r.request("198.51.100.20", "POST", "/scan", &forged);
        assert_eq!(
            (d.tier, d.action()),
            (Tier::Session, Action::Allow),
            "n = {n}"
        );
        assert_eq!(d.window(WindowKind::Daily).unwrap().limit, 5, "L_anon");
    }
    let d = r.request("198.51.100.20", "POST", "/scan", &forged);
    assert_eq!(
        (d.action(), d.delay_kind(), d.delay().as_millis()),
        (Action::Delay, Some(DelayKind::Soft), 5_000),
        "n = L_anon + 1: {d:?}"
    );
}

#[test]
fn an_operator_who_verifies_sessions_upstream_can_raise_the_session_quota() {
    let r = rig(&format!("{SCAN}[tiers.session]\ndaily = 8\n"));
    let cookie = headers(&[("cookie", "session=verified-upstream")]);
    for n in 1..=8 {
        let d = r.request("198.51.100.21", "POST", "/scan", &cookie);
        assert_eq!(d.action(), Action::Allow, "n = {n}");
    }
    let d = r.request("198.51.100.21", "POST", "/scan", &cookie);
    assert_eq!(d.delay_kind(), Some(DelayKind::Soft));
    // Anonymous callers keep L_anon.
    for _ in 0..5 {
        r.request("198.51.100.22", "POST", "/scan", &headers(&[]));
    }
    let d = r.request("198.51.100.22", "POST", "/scan", &headers(&[]));
    assert_eq!(d.delay_kind(), Some(DelayKind::Soft));
}

#[test]
fn a_zero_session_quota_names_the_field_and_line() {
    let err = limiter_daemon::config::Config::from_toml_str(
        "[tiers.session]\nburst = 300\ndaily = 0\n",
        std::path::Path::new("limiter.toml"),
        &limiter_daemon::config::EnvMap::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("tiers.session.daily"), "{err}");
    assert!(err.contains("line 3") || err.contains(":3"), "{err}");
}
