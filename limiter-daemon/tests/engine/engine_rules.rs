//! The seed rules, each as a named test, against the real engine and embedded store with an
//! injected clock (nothing sleeps).

use crate::rig::*;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::{Action, DelayKind, KeyStatus, Reason, Tier, WindowKind};
use limiter_daemon::identity::api_key::parse_key;

fn secs_to_hour_end(now_ms: u64) -> u64 {
    3600 - (now_ms / 1000) % 3600
}

#[test]
fn exhausted_hourly_budget_earns_no_strike() {
    let r = rig("");
    // 600/hour at 120 per burst window: five full bursts, spaced so no burst is exceeded.
    for batch in 0..5 {
        for i in 0..120 {
            let d = r.get("198.51.100.1", "/");
            assert_eq!(
                d.action(),
                Action::Allow,
                "batch {batch} request {i}: {d:?}"
            );
        }
        r.advance_secs(66);
    }
    let d = r.get("198.51.100.1", "/");
    assert_eq!(d.action(), Action::Reject);
    assert_eq!(d.reason(), Some(Reason::Hourly));
    assert_eq!(d.retry_after_secs(), Some(secs_to_hour_end(r.clock_now())));
    assert_eq!(d.window(WindowKind::Hourly).unwrap().remaining, 0);
    // Knocking on the closed door below the burst rate is still "hourly": no strike, no
    // lockout, nothing to the kernel (a loop above it is struck: engine_burst_after_budget.rs).
    for _ in 0..500 {
        r.advance_secs(1);
        let d = r.get("198.51.100.1", "/");
        assert_eq!(d.reason(), Some(Reason::Hourly));
        assert_eq!(d.lockout_level, None);
    }
    assert_eq!(r.engine.lockouts().strikes(ip("198.51.100.1")).unwrap(), 0);
    assert!(r
        .engine
        .lockouts()
        .get(ip("198.51.100.1"))
        .unwrap()
        .is_none());
    assert!(r.sink.locks().is_empty());
    // The rollover opens the budget again.
    r.clock.advance_ms(secs_to_hour_end(r.clock_now()) * 1000);
    assert_eq!(r.get("198.51.100.1", "/").action(), Action::Allow);
}

/// Sends requests until one is refused for burst; returns that decision.
fn burst_until_struck(r: &Rig, peer: &str) -> limiter_daemon::engine::Decision {
    for _ in 0..10_000 {
        let d = r.get(peer, "/");
        if d.reason() == Some(Reason::Burst) {
            return d;
        }
        assert_eq!(d.action(), Action::Allow, "{d:?}");
    }
    panic!("burst never exceeded");
}

#[test]
fn burst_strikes_escalate_60_120_240_and_stop_at_the_cap() {
    // Only the burst window applies, so hourly and daily never interfere over many hours.
    let r = rig("[default_route]\nlimits = [\"burst\"]\n");
    let mut expected = Vec::new();
    let mut seen = Vec::new();
    for level in 1..=13u32 {
        let d = burst_until_struck(&r, "192.0.2.10");
        // A lockout lasts at least until the burst window has room again (60–65 s).
        let frees = d.window(WindowKind::Burst).unwrap().reset_secs;
        let want = (60u64 << (level - 1)).min(24 * 3600).max(frees);
        expected.push(want);
        assert_eq!(d.lockout_level, Some(level));
        assert_eq!(d.retry_after_secs(), Some(want));
        // While locked: reason "locked", retry-after = what is left.
        r.advance_secs(want / 2);
        let locked = r.get("192.0.2.10", "/");
        assert_eq!(locked.reason(), Some(Reason::Locked));
        assert_eq!(locked.retry_after_secs(), Some(want - want / 2));
        seen.push(d.retry_after_secs().unwrap());
        r.advance_secs(want - want / 2);
    }
    // T0 is slot-aligned: the first rung (60 s) waits for the burst's slot to leave (65 s).
    assert_eq!(&seen[..3], &[65, 120, 240]);
    assert_eq!(seen, expected);
    assert_eq!(
        seen[11], 86_400,
        "level 12 would be 122,880 s: capped at 24 h"
    );
    assert_eq!(seen[12], 86_400);
    // Every lockout reached the kernel with its level.
    let locks = r.sink.locks();
    assert_eq!(locks.len(), 13);
    assert_eq!(locks[0], (65, 1));
    assert_eq!(locks[2], (240, 3));
    assert_eq!(locks[12], (86_400, 13));
}

#[test]
fn strikes_decay_after_a_quiet_period() {
    let r = rig("[default_route]\nlimits = [\"burst\"]\n");
    let peer = "192.0.2.20";
    // First rung: 60 s, lengthened to 65 s until the slot-aligned burst leaves the window.
    assert_eq!(burst_until_struck(&r, peer).retry_after_secs(), Some(65));
    r.advance_secs(65);
    assert_eq!(burst_until_struck(&r, peer).retry_after_secs(), Some(120));
    assert_eq!(r.engine.lockouts().strikes(ip(peer)).unwrap(), 2);
    // One hour of quiet after the lockout ends forgives one strike.
    r.advance_secs(120 + 3600);
    assert_eq!(r.engine.lockouts().strikes(ip(peer)).unwrap(), 1);
    assert_eq!(burst_until_struck(&r, peer).retry_after_secs(), Some(120));
    // Two quiet hours forgive both: back to the first rung.
    r.advance_secs(120 + 2 * 3600);
    assert_eq!(r.engine.lockouts().strikes(ip(peer)).unwrap(), 0);
    assert_eq!(burst_until_struck(&r, peer).retry_after_secs(), Some(65));
}

#[test]
fn a_locked_caller_is_rejected_with_the_remaining_lockout() {
    let r = rig("");
    burst_until_struck(&r, "192.0.2.30");
    r.advance_secs(20);
    let d = r.get("192.0.2.30", "/");
    assert_eq!(
        (d.action(), d.reason()),
        (Action::Reject, Some(Reason::Locked))
    );
    // 65 s (the burst's slot-aligned window) less the 20 s gone.
    assert_eq!(d.retry_after_secs(), Some(45));
    // A different client is unaffected.
    assert_eq!(r.get("192.0.2.31", "/").action(), Action::Allow);
    // Lifting clears store and kernel.
    assert!(r
        .engine
        .lockouts()
        .lift(ip("192.0.2.30"))
        .unwrap()
        .is_some());
    assert!(r.sink.events().contains(&SinkEvent::Unlock {
        ip: ip("192.0.2.30")
    }));
    assert_ne!(r.get("192.0.2.30", "/").reason(), Some(Reason::Locked));
}

#[test]
fn forged_cookie_buys_only_the_session_allowance() {
    let r = rig("");
    let forged = headers(&[("cookie", "session=not-a-real-session-at-all")]);
    for i in 0..300 {
        let d = r.request("198.51.100.40", "GET", "/", &forged);
        assert_eq!(d.tier, Tier::Session);
        assert_eq!(d.action(), Action::Allow, "request {i}");
    }
    let d = r.request("198.51.100.40", "GET", "/", &forged);
    assert_eq!(d.reason(), Some(Reason::Burst), "301st in a minute");
    assert_eq!(d.window(WindowKind::Burst).unwrap().limit, 300);
    assert_eq!(d.window(WindowKind::Hourly).unwrap().limit, 6_000);
    // A cookie is not a verified credential: nothing is written into the kernel's tier map.
    assert!(!r
        .sink
        .events()
        .iter()
        .any(|e| matches!(e, SinkEvent::SetTier { .. })));
    // Without the cookie the anonymous rung applies.
    let d = r.get("198.51.100.41", "/");
    assert_eq!(d.tier, Tier::Anon);
    assert_eq!(d.window(WindowKind::Burst).unwrap().limit, 120);
}

#[test]
fn wrong_shape_key_is_rejected_before_the_cache() {
    let r = rig("");
    for bad in [
        "rsa_0123abcd_short",
        "rsa_0123ABCD_abcdefghijklmnopqrstuvwxyz",
        "sk_live_0123abcd_abcdefghijklmnopqrstuvwxyz",
        "rsa-0123abcd-abcdefghijklmnopqrstuvwxyz",
    ] {
        for h in [
            headers(&[("x-api-key", bad)]),
            headers(&[("authorization", &format!("Bearer {bad}"))]),
        ] {
            let d = r.request("198.51.100.50", "GET", "/", &h);
            assert_eq!(d.tier, Tier::Anon, "{bad}");
            if h.contains_key("x-api-key") || bad.starts_with("rsa_") {
                assert_eq!(d.key_status, Some(KeyStatus::Malformed), "{bad}");
            }
        }
    }
    let cache = r.engine.keys().cache().clone();
    assert_eq!(
        cache.consultations(),
        0,
        "a wrong shape must never reach the cache"
    );
    assert_eq!(r.land_lookups(), 0);
    assert_eq!(cache.lookups(), 0);
}

#[test]
fn freshly_issued_key_is_metered_one_rung_down_until_verified_then_as_sponsor() {
    let r = rig("");
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    let h = headers(&[("authorization", &format!("Bearer {}", key.token))]);
    let d = r.request("198.51.100.60", "GET", "/", &h);
    assert_eq!(d.key_status, Some(KeyStatus::Pending));
    assert_eq!(d.tier, Tier::Session, "pending: one rung below sponsor");
    assert_eq!(r.engine.keys().cache().consultations(), 1);
    assert_eq!(r.land_lookups(), 1, "the lookup lands behind the request");
    let d = r.request("198.51.100.60", "GET", "/", &h);
    assert_eq!(d.key_status, Some(KeyStatus::Verified));
    assert_eq!(d.tier, Tier::Sponsor);
    assert_eq!(d.window(WindowKind::Burst).unwrap().limit, 2_000);
    assert!(d.identity.starts_with("key:"), "{}", d.identity);
    // A verified credential raises the address's tier in the kernel.
    assert!(r.sink.events().contains(&SinkEvent::SetTier {
        ip: ip("198.51.100.60"),
        tier: Tier::Sponsor
    }));
}

#[test]
fn invented_key_is_metered_down() {
    let r = rig("");
    let invented = headers(&[("x-api-key", "rsa_deadbeef_abcdefghijklmnopqrstuvwxyz012345")]);
    let first = r.request("198.51.100.70", "GET", "/", &invented);
    assert_ne!(first.tier, Tier::Sponsor);
    assert_eq!(first.key_status, Some(KeyStatus::Pending));
    r.land_lookups();
    for _ in 0..5 {
        let d = r.request("198.51.100.70", "GET", "/", &invented);
        assert_eq!(d.tier, Tier::Anon, "unknown key: metered down, never up");
        assert_eq!(d.key_status, Some(KeyStatus::Invalid));
        assert!(
            d.identity.starts_with("ip:"),
            "counted by address, not by invented id"
        );
    }
    // The negative answer is cached: no new lookup is queued within negative_ttl.
    assert_eq!(r.land_lookups(), 0);
    // A real key id with a wrong secret is no better.
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    let id = &key.record.id;
    let wrong = headers(&[(
        "x-api-key",
        &format!("rsa_{id}_wrongsecretwrongsecretwrong"),
    )]);
    r.request("198.51.100.70", "GET", "/", &wrong);
    r.land_lookups();
    let d = r.request("198.51.100.70", "GET", "/", &wrong);
    assert_eq!(
        (d.tier, d.key_status),
        (Tier::Anon, Some(KeyStatus::Invalid))
    );
}

#[test]
fn revoked_key_is_metered_down_at_once() {
    let r = rig("");
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    let h = headers(&[("x-api-key", &key.token)]);
    r.request("198.51.100.75", "GET", "/", &h);
    r.land_lookups();
    assert_eq!(
        r.request("198.51.100.75", "GET", "/", &h).tier,
        Tier::Sponsor
    );
    assert!(r.engine.keys().revoke(&key.record.id).unwrap());
    let d = r.request("198.51.100.75", "GET", "/", &h);
    assert_eq!(
        (d.tier, d.key_status),
        (Tier::Anon, Some(KeyStatus::Invalid))
    );
    // Also after the negative answer expires and the store is asked again.
    r.advance_secs(30);
    r.request("198.51.100.75", "GET", "/", &h);
    assert_eq!(r.land_lookups(), 1);
    assert_eq!(r.request("198.51.100.75", "GET", "/", &h).tier, Tier::Anon);
}

#[test]
fn sponsor_tier_is_actually_reachable_with_a_verified_key() {
    let r = rig("");
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    // The real shape: rsa_<8 hex>_<20+ url-safe chars>.
    let parsed = parse_key(&key.token, "rsa").expect("issued key has the key shape");
    assert_eq!(parsed.id.len(), 8);
    assert!(parsed.secret.len() >= 20);
    let h = headers(&[("authorization", &format!("Bearer {}", key.token))]);
    r.request("198.51.100.80", "GET", "/", &h);
    r.land_lookups();
    // Far past the anonymous (120) and session (300) bursts within one second.
    for i in 0..1_000 {
        let d = r.request("198.51.100.80", "GET", "/", &h);
        assert_eq!(
            (d.action(), d.tier),
            (Action::Allow, Tier::Sponsor),
            "request {i}"
        );
    }
}

#[test]
fn key_limit_vs_tier_budget_tighter_wins() {
    let cfg = "[[routes]]\nprefix = \"/api/feeds\"\nkey_limit = true\n\
               [tiers.sponsor]\nhourly = 8\n";
    let r = rig(cfg);
    // Key limit (5) tighter than the tier budget (8) on a key_limit route.
    let tight = r
        .engine
        .keys()
        .issue(IssueKey {
            hourly_limit: Some(5),
            ..IssueKey::default()
        })
        .unwrap();
    let h = headers(&[("x-api-key", &tight.token)]);
    r.request("198.51.100.90", "GET", "/", &h);
    r.land_lookups();
    for _ in 0..5 {
        assert_eq!(
            r.request("198.51.100.90", "GET", "/api/feeds", &h).action(),
            Action::Allow
        );
    }
    let d = r.request("198.51.100.90", "GET", "/api/feeds", &h);
    assert_eq!(d.reason(), Some(Reason::KeyHourly));
    assert_eq!(d.hourly_limit(), Some(5));
    assert_eq!(d.lockout_level, None, "no strike for a spent budget");

    // Tier budget (8) tighter than the key limit (50).
    let loose = r
        .engine
        .keys()
        .issue(IssueKey {
            hourly_limit: Some(50),
            ..IssueKey::default()
        })
        .unwrap();
    let h = headers(&[("x-api-key", &loose.token)]);
    r.request("198.51.100.91", "GET", "/", &h);
    r.land_lookups();
    // The request on "/" was pending (counted by address), so the key's budget is untouched.
    let mut admitted = 0;
    while r.request("198.51.100.91", "GET", "/api/feeds", &h).action() == Action::Allow {
        admitted += 1;
        assert!(admitted <= 8);
    }
    assert_eq!(admitted, 8);
    let d = r.request("198.51.100.91", "GET", "/api/feeds", &h);
    assert_eq!(d.reason(), Some(Reason::Hourly));
    assert_eq!(d.hourly_limit(), Some(8));
}

#[test]
fn daily_delay_at_l_l_plus_1_l_plus_30_l_plus_31() {
    let cfg = "[quota]\nanon = 50\n\
               [[routes]]\nprefix = \"/scan\"\nlimits = [\"daily\"]\nover_quota = \"delay\"\n";
    let r = rig(cfg);
    let mut by_n = Vec::new();
    for n in 1..=100u32 {
        let d = r.request("198.51.100.100", "POST", "/scan", &headers(&[]));
        assert_ne!(
            d.action(),
            Action::Reject,
            "delay mode never answers 429 (n = {n})"
        );
        assert_eq!(d.window(WindowKind::Daily).unwrap().limit, 50);
        by_n.push((n, d));
    }
    let at = |n: u32| &by_n[(n - 1) as usize].1;
    assert_eq!(at(50).action(), Action::Allow, "n = L: no delay");
    assert_eq!(at(50).delay().as_millis(), 0);
    assert_eq!(
        (at(51).action(), at(51).delay_kind()),
        (Action::Delay, Some(DelayKind::Soft))
    );
    assert_eq!(at(51).delay().as_millis(), 5_000);
    assert_eq!(
        at(80).delay_kind(),
        Some(DelayKind::Soft),
        "n = L + 30: still soft"
    );
    assert_eq!(at(80).delay().as_millis(), 5_000);
    assert_eq!(
        at(81).delay_kind(),
        Some(DelayKind::Hard),
        "n = L + 31: hard"
    );
    assert_eq!(at(81).delay().as_millis(), 60_000);
    assert_eq!(at(100).delay().as_millis(), 60_000);
    // 00:00 UTC resets the count.
    r.clock.set_ms(NEW_YEAR_MS + 86_400_000);
    let d = r.request("198.51.100.100", "POST", "/scan", &headers(&[]));
    assert_eq!(d.action(), Action::Allow);
    assert_eq!(d.window(WindowKind::Daily).unwrap().remaining, 49);
}

#[test]
fn reminder_at_the_warn_threshold() {
    let cfg = "[quota]\nanon = 300\n[default_route]\nlimits = [\"daily\"]\n";
    let r = rig(cfg);
    for n in 1..=99 {
        let d = r.get("198.51.100.110", "/");
        assert_eq!(d.warn_remaining, None, "n = {n}: {} left", 300 - n);
    }
    let d = r.get("198.51.100.110", "/");
    assert_eq!(d.warn_remaining, Some(200), "L − n = 200 = T_warn");
    let d = r.get("198.51.100.110", "/");
    assert_eq!(d.warn_remaining, Some(199));
}

#[test]
fn attempt_keeps_the_old_behaviour() {
    let r = rig("");
    let now = r.clock_now();
    for _ in 0..120 {
        let d = r.engine.attempt("user-42", now);
        assert_eq!(d.action(), Action::Allow);
        assert_eq!(d.windows.len(), 1, "burst only");
        assert_eq!(d.window(WindowKind::Burst).unwrap().limit, 120);
        assert!(d.window(WindowKind::Hourly).is_none(), "no hourly budget");
    }
    assert_eq!(
        r.engine.attempt("user-42", now).reason(),
        Some(Reason::Burst)
    );
    // No hourly budget: 1,200 attempts in 11 minutes, all within the burst, all allowed.
    let mut t = now;
    for _ in 0..10 {
        t += 66_000;
        for _ in 0..120 {
            assert_eq!(r.engine.attempt("user-42", t).action(), Action::Allow);
        }
    }
    // An address identity escalates into a lockout as before.
    for _ in 0..120 {
        r.engine.attempt("192.0.2.77", t);
    }
    let d = r.engine.attempt("192.0.2.77", t);
    assert_eq!(
        (d.reason(), d.lockout_level),
        (Some(Reason::Burst), Some(1))
    );
    assert_eq!(
        r.engine.attempt("192.0.2.77", t + 1_000).reason(),
        Some(Reason::Locked)
    );
}

#[test]
fn xff_from_an_untrusted_peer_is_ignored() {
    let r = rig("[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\n");
    let spoof = headers(&[("x-forwarded-for", "1.1.1.1")]);
    let a = r.request("203.0.113.9", "GET", "/", &spoof);
    let b = r.get("203.0.113.9", "/");
    let c = r.get("1.1.1.1", "/");
    assert_eq!(a.identity, b.identity, "counted as the peer");
    assert_ne!(a.identity, c.identity);
    assert_eq!(b.window(WindowKind::Burst).unwrap().remaining, 118);
}

#[test]
fn xff_from_a_trusted_chain_is_walked_from_the_right() {
    let r = rig("[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\n");
    let direct = r.get("198.51.100.7", "/");
    // Client wrote a fake first hop; two trusted proxies appended after the real client.
    let chain = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.5")]);
    let via = r.request("10.0.0.1", "GET", "/", &chain);
    assert_eq!(
        via.identity, direct.identity,
        "rightmost untrusted hop is the client"
    );
    assert_eq!(via.window(WindowKind::Burst).unwrap().remaining, 118);
    // Several header lines are one list.
    let split = headers(&[
        ("x-forwarded-for", "198.51.100.7"),
        ("x-forwarded-for", "10.0.0.9"),
    ]);
    assert_eq!(
        r.request("10.0.0.1", "GET", "/", &split).identity,
        direct.identity
    );
    // Only trusted hops: the leftmost one is the client.
    let all_trusted = headers(&[("x-forwarded-for", "10.3.3.3, 10.0.0.5")]);
    let d = r.request("10.0.0.1", "GET", "/", &all_trusted);
    assert_eq!(d.identity, r.get("10.3.3.3", "/").identity);
    // Garbage in the header names no client: an unattributed caller of the proxy that passed
    // it on (10.0.0.5), one identity for all such requests of that proxy, not the proxy itself.
    let garbage = headers(&[("x-forwarded-for", "not-an-ip, 10.0.0.5")]);
    let d = r.request("10.0.0.1", "GET", "/", &garbage);
    assert!(d.identity.starts_with("via:"), "{}", d.identity);
    assert_ne!(d.identity, r.get("10.0.0.5", "/").identity);
    let unknown = headers(&[("x-forwarded-for", "unknown, 10.0.0.5")]);
    assert_eq!(
        r.request("10.0.0.1", "GET", "/", &unknown).identity,
        d.identity
    );
    let other_proxy = headers(&[("x-forwarded-for", "unknown, 10.0.0.6")]);
    assert_ne!(
        r.request("10.0.0.1", "GET", "/", &other_proxy).identity,
        d.identity
    );
}

#[test]
fn route_cost_weighting() {
    let r = rig("[[routes]]\nprefix = \"/reader\"\ncost = 10\n");
    let first = r.get("198.51.100.120", "/reader/page");
    assert_eq!(first.cost, 10);
    assert_eq!(first.window(WindowKind::Hourly).unwrap().remaining, 590);
    assert_eq!(first.window(WindowKind::Daily).unwrap().remaining, 990);
    assert_eq!(
        first.window(WindowKind::Burst).unwrap().remaining,
        119,
        "burst counts requests"
    );
    for _ in 1..60 {
        assert_eq!(
            r.get("198.51.100.120", "/reader/page").action(),
            Action::Allow
        );
    }
    let d = r.get("198.51.100.120", "/reader/page");
    assert_eq!(
        d.reason(),
        Some(Reason::Hourly),
        "60 × 10 units spend the 600-unit budget"
    );
    // A one-unit route still has nothing left either: budgets are shared units.
    assert_eq!(r.get("198.51.100.120", "/").reason(), Some(Reason::Hourly));
}

#[test]
fn every_decision_carries_what_a_response_needs() {
    let r = rig("");
    let d = r.get("198.51.100.130", "/");
    assert_eq!(d.tier, Tier::Anon);
    let kinds: Vec<_> = d.windows.iter().map(|w| w.kind).collect();
    assert_eq!(
        kinds,
        vec![WindowKind::Burst, WindowKind::Hourly, WindowKind::Daily]
    );
    let h = d.window(WindowKind::Hourly).unwrap();
    assert_eq!((h.limit, h.remaining, h.window_secs), (600, 599, 3600));
    assert_eq!(h.reset_secs, secs_to_hour_end(r.clock_now()));
    let day = d.window(WindowKind::Daily).unwrap();
    assert_eq!(day.reset_secs, 86_400 - 600, "T0 is 00:10 UTC");
    assert!(d.upgrade.as_deref().unwrap().contains("/login"));
    assert!(d.identity.starts_with("ip:") && !d.identity.contains("198.51"));
}

#[test]
fn burst_retry_after_admits_exactly_then() {
    // Mid-slot and mid-second, so both the 5 s slots and the rounding up to seconds matter.
    let dir = tempfile::tempdir().expect("tempdir");
    let r = rig_in("[tiers.anon]\nburst = 5\n", dir, T0 + 2_700);
    burst_retry_after_is_the_truth(&r.engine, &r.clock, "192.0.2.77");
    // The kernel got the same lockout: until the slot holding the burst leaves the window.
    assert_eq!(r.sink.locks(), vec![(62, 1)]);

    // The compatibility call tells the same truth.
    let now = r.clock_now();
    let d = (0..1_000)
        .map(|_| r.engine.attempt("198.51.100.77", now))
        .find(|d| d.action() == Action::Reject)
        .expect("the burst refuses");
    let reset = d.window(WindowKind::Burst).unwrap().reset_secs;
    assert!(reset > 60, "{reset}");
    assert_eq!(d.retry_after_secs(), Some(reset));
}
