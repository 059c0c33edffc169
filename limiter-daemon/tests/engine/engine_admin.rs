//! Management calls around the decision path: dry-run explain, allow/deny lists, manual
//! lockouts, forgetting strikes, jitter, tier pushes, reload, and the background key refresher.
//! Part of the store conformance suite (embedded, Valkey, Valkey Cluster).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::rig::*;
use limiter_daemon::clock::{Clock, ManualClock};
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::{Action, Engine, Reason, RequestView, Tier, WindowKind};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::model::{ListEntry, ListKind};

#[test]
fn explain_counts_nothing() {
    let r = rig("[tiers.anon]\nhourly = 2\n");
    let h = headers(&[]);
    let req = RequestView {
        client: Client::Addr(ip("192.0.2.1")),
        method: &http::Method::GET,
        path: "/",
        headers: &h,
    };
    for _ in 0..5 {
        let d = r.engine.explain(&req);
        assert_eq!(d.action(), Action::Allow);
        assert_eq!(d.window(WindowKind::Hourly).unwrap().remaining, 1);
    }
    r.engine.decide(&req);
    r.engine.decide(&req);
    let d = r.engine.explain(&req);
    assert_eq!(
        d.reason(),
        Some(Reason::Hourly),
        "explain sees the real counts"
    );
    assert!(r.engine.client(ip("192.0.2.1")).unwrap().usage.is_some());
    assert_eq!(
        r.engine
            .client(ip("192.0.2.1"))
            .unwrap()
            .usage
            .unwrap()
            .used[WindowKind::Hourly],
        2
    );
}

#[test]
fn allow_list_skips_metering_and_deny_list_rejects() {
    let r = rig("[tiers.anon]\nburst = 1\n");
    let entry = |net: &str, until_ms: Option<u64>| ListEntry {
        net: net.parse().unwrap(),
        until_ms,
        comment: String::new(),
    };
    r.engine
        .lists()
        .add(ListKind::Allow, entry("192.0.2.0/28", None))
        .unwrap();
    for _ in 0..10 {
        let d = r.get("192.0.2.5", "/");
        assert_eq!(d.action(), Action::Allow);
        assert!(d.windows.is_empty(), "not metered");
    }
    let until = r.clock_now() + 30_000;
    r.engine
        .lists()
        .add(ListKind::Deny, entry("198.51.100.0/24", Some(until)))
        .unwrap();
    let d = r.get("198.51.100.9", "/");
    assert_eq!(
        (d.reason(), d.retry_after_secs()),
        (Some(Reason::Locked), Some(30))
    );
    r.advance_secs(30);
    assert_eq!(
        r.get("198.51.100.9", "/").action(),
        Action::Allow,
        "deny entry expired"
    );
    assert!(r
        .engine
        .lists()
        .remove(ListKind::Allow, &"192.0.2.0/28".parse().unwrap())
        .unwrap());
    r.get("192.0.2.5", "/");
    assert_eq!(
        r.get("192.0.2.5", "/").reason(),
        Some(Reason::Burst),
        "metered again"
    );
}

#[test]
fn manual_lockout_reaches_store_and_kernel() {
    let r = rig("");
    let l = r
        .engine
        .lockouts()
        .lock(ip("2001:db8::1"), Duration::from_secs(90))
        .unwrap();
    assert_eq!(l.ip, ip("2001:db8::"), "IPv6 locked per /64");
    assert!(r.sink.events().contains(&SinkEvent::Lock {
        ip: ip("2001:db8::"),
        secs: 90,
        level: 1
    }));
    let d = r.get("2001:db8::ffff", "/");
    assert_eq!(
        (d.reason(), d.retry_after_secs()),
        (Some(Reason::Locked), Some(90))
    );
    assert!(r
        .engine
        .lockouts()
        .lock(ip("192.0.2.1"), Duration::ZERO)
        .is_err());
}

/// Bursts from `addr` until one is refused; the lockout level that refusal earned.
fn burst_until_struck(r: &Rig, addr: &str) -> Option<u32> {
    for _ in 0..10 {
        let d = r.get(addr, "/");
        if d.action() == Action::Reject {
            assert_eq!(d.reason(), Some(Reason::Burst), "{d:?}");
            return d.lockout_level;
        }
    }
    panic!("{addr} was never refused");
}

/// Issue 35: the README's first five minutes, run twice in an hour, ended at a level-2
/// lockout: strikes outlive a lift (and a lockout that runs out) until they decay. Forgetting
/// them (`limiterctl lockouts remove IP --forget-strikes`) starts the next lockout at level 1.
#[test]
fn forgetting_strikes_starts_the_next_lockout_at_level_one() {
    let r = rig("[tiers.anon]\nburst = 3\n[lockout]\nbase = \"60s\"\njitter = 0.0\n");
    let a = "192.0.2.44";
    let m = r.engine.lockouts();
    assert_eq!(burst_until_struck(&r, a), Some(1));
    assert!(m.lift(ip(a)).unwrap().is_some());
    assert_eq!(m.strikes(ip(a)).unwrap(), 1, "a lift keeps the strikes");
    r.advance_secs(61);
    assert_eq!(
        burst_until_struck(&r, a),
        Some(2),
        "so the escalation goes on"
    );

    // Lifted and forgotten: the next burst locks at level 1 again.
    assert!(m.lift(ip(a)).unwrap().is_some());
    assert_eq!(m.forget_strikes(ip(a)).unwrap(), Some(2));
    assert_eq!(m.strikes(ip(a)).unwrap(), 0);
    assert!(m.get(ip(a)).unwrap().is_none());
    r.advance_secs(61);
    assert_eq!(r.get(a, "/").action(), Action::Allow, "served again");
    assert_eq!(burst_until_struck(&r, a), Some(1));

    // The strikes of a lockout that ran out are forgotten too; then there is nothing to forget.
    r.advance_secs(200);
    assert!(m.get(ip(a)).unwrap().is_none(), "ran out");
    assert_eq!(m.forget_strikes(ip(a)).unwrap(), Some(1));
    assert_eq!(m.forget_strikes(ip(a)).unwrap(), None);
    assert_eq!(m.forget_strikes(ip("192.0.2.45")).unwrap(), None);
    r.advance_secs(61);
    assert_eq!(burst_until_struck(&r, a), Some(1));
}

#[test]
fn jitter_lengthens_within_bounds_and_is_reproducible_with_a_seed() {
    let cfg = "[default_route]\nlimits = [\"burst\"]\n[tiers.anon]\nburst = 1\n\
               [lockout]\njitter = 0.5\njitter_seed = 7\n";
    let run = || {
        let r = rig(cfg);
        let mut out = Vec::new();
        for n in 0..20 {
            let peer = format!("192.0.2.{n}");
            r.get(&peer, "/");
            out.push(r.get(&peer, "/").retry_after_secs().unwrap());
        }
        out
    };
    let a = run();
    assert_eq!(a, run(), "same seed, same lockouts");
    assert!(a.iter().all(|&s| (60..=90).contains(&s)), "{a:?}");
    assert!(a.iter().any(|&s| s > 61), "jitter applied: {a:?}");
}

#[test]
fn verified_tier_is_pushed_once_per_refresh_interval() {
    let r = rig("[kernel]\ntier_ttl = \"10m\"\n");
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    let h = headers(&[("x-api-key", &key.token)]);
    r.request("198.51.100.1", "GET", "/", &h);
    r.land_lookups();
    for _ in 0..50 {
        r.request("198.51.100.1", "GET", "/", &h);
    }
    let pushes = |r: &Rig| {
        r.sink
            .events()
            .iter()
            .filter(|e| matches!(e, SinkEvent::SetTier { .. }))
            .count()
    };
    assert_eq!(pushes(&r), 1);
    r.advance_secs(301);
    r.request("198.51.100.1", "GET", "/", &h);
    assert_eq!(pushes(&r), 2, "refreshed after half the tier TTL");
}

#[test]
fn reload_swaps_limits_and_keeps_counts() {
    let r = rig("[tiers.anon]\nhourly = 5\n");
    for _ in 0..5 {
        r.get("192.0.2.1", "/");
    }
    assert_eq!(r.get("192.0.2.1", "/").reason(), Some(Reason::Hourly));
    let bigger = config("[tiers.anon]\nhourly = 8\n", r.dir.path());
    r.engine.reload(Arc::new(bigger));
    let d = r.get("192.0.2.1", "/");
    assert_eq!(d.action(), Action::Allow);
    assert_eq!(d.window(WindowKind::Hourly).unwrap().remaining, 2);
}

#[test]
fn background_refresher_lands_lookups_behind_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Arc::new(config("", dir.path()));
    let clock = ManualClock::new(T0);
    let store = Arc::new(EmbeddedStore::open(&cfg.store, T0).unwrap());
    let engine = Engine::new(cfg, store, Arc::new(NoKernel), Arc::new(clock.clone()));
    let key = engine.keys().issue(IssueKey::default()).unwrap();
    let h = headers(&[("x-api-key", &key.token)]);
    let req = RequestView {
        client: Client::Addr(ip("198.51.100.2")),
        method: &http::Method::GET,
        path: "/",
        headers: &h,
    };
    assert_eq!(engine.decide(&req).tier, Tier::Session, "pending at first");
    // Poll with a deadline (the lookup runs on the refresher thread).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if engine.decide(&req).tier == Tier::Sponsor {
            break;
        }
        assert!(Instant::now() < deadline, "key never settled");
        std::thread::yield_now();
    }
    assert_eq!(engine.keys().cache().lookups(), 1);
    assert_eq!(clock.now_ms(), T0);
    drop(engine); // joins the refresher thread
}
