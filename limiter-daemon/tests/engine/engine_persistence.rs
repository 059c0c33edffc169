//! The state directory: keys and lockouts survive a restart (and lockouts are pushed back into
//! the kernel); a corrupt state file is reported, set aside, and the daemon starts.

use std::time::Duration;

use crate::rig::*;
use limiter_daemon::clock::Clock;
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::{Action, Reason, Tier};
use limiter_daemon::model::{ListEntry, ListKind};
use limiter_daemon::store::RecordStore;

#[test]
fn restart_keeps_keys_and_lockouts() {
    let r = rig("");
    let key = r
        .engine
        .keys()
        .issue(IssueKey {
            owner: Some("ci".into()),
            ..IssueKey::default()
        })
        .unwrap();
    let h = headers(&[("x-api-key", &key.token)]);
    r.request("198.51.100.1", "GET", "/", &h);
    r.land_lookups();
    assert_eq!(
        r.request("198.51.100.1", "GET", "/", &h).tier,
        Tier::Sponsor
    );
    let anon_identity = r.get("192.0.2.50", "/").identity;
    for _ in 0..200 {
        r.get("192.0.2.50", "/");
    }
    let lock = r
        .engine
        .lockouts()
        .get(ip("192.0.2.50"))
        .unwrap()
        .expect("locked");
    r.engine
        .lists()
        .add(
            ListKind::Deny,
            ListEntry {
                net: "203.0.113.0/24".parse().unwrap(),
                until_ms: None,
                comment: "test".into(),
            },
        )
        .unwrap();
    let revoked = r.engine.keys().issue(IssueKey::default()).unwrap();
    r.engine.keys().revoke(&revoked.record.id).unwrap();

    // Restart 10 s later in the same state directory.
    let Rig {
        engine, dir, clock, ..
    } = r;
    drop(engine);
    let r = rig_in("", dir, clock.now_ms() + 10_000);

    // The lockout went back into the kernel with what was left of it: 65 s (until the burst's
    // slot, taken at the slot-aligned T0, leaves the window), 10 s of it gone.
    assert!(r.sink.events().contains(&SinkEvent::Lock {
        ip: ip("192.0.2.50"),
        secs: 55,
        level: 1
    }));
    let d = r.get("192.0.2.50", "/");
    assert_eq!(
        (d.reason(), d.retry_after_secs()),
        (Some(Reason::Locked), Some(55))
    );
    assert_eq!(d.identity, anon_identity, "the hashing secret survived too");
    assert_eq!(r.engine.lockouts().strikes(ip("192.0.2.50")).unwrap(), 1);
    assert_eq!(
        r.engine.lockouts().list().unwrap()[0].until_ms,
        lock.until_ms
    );

    // The key still verifies; the revoked one stays revoked.
    r.request("198.51.100.1", "GET", "/", &h);
    r.land_lookups();
    assert_eq!(
        r.request("198.51.100.1", "GET", "/", &h).tier,
        Tier::Sponsor
    );
    let got = r.engine.keys().get(&key.record.id).unwrap().unwrap();
    assert_eq!(got.owner.as_deref(), Some("ci"));
    assert!(!got
        .secret_hash
        .contains(key.token.splitn(3, '_').nth(2).unwrap()));
    assert!(r
        .engine
        .keys()
        .get(&revoked.record.id)
        .unwrap()
        .unwrap()
        .is_revoked());
    assert_eq!(
        r.get("203.0.113.9", "/").reason(),
        Some(Reason::Locked),
        "deny list kept"
    );
}

#[test]
fn secrets_never_reach_the_state_directory() {
    let r = rig("");
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    // The whole secret: it may itself contain '_' (base64url), so split at the first two only.
    let secret = key.token.splitn(3, '_').nth(2).unwrap().to_string();
    assert!(secret.len() >= 20, "{secret}");
    for _ in 0..200 {
        r.get("192.0.2.60", "/");
    }
    for entry in std::fs::read_dir(r.dir.path()).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains(&secret), "key secret stored in clear");
    }
}

#[test]
fn corrupt_state_files_are_set_aside_and_the_daemon_starts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keys.json"), b"{ this is not json").unwrap();
    std::fs::write(dir.path().join("enforcement.json"), b"\x00\x01garbage").unwrap();
    std::fs::write(dir.path().join("hash-secret"), b"zz-not-hex").unwrap();
    let cfg = config("", dir.path());
    let store = EmbeddedStore::open(&cfg.store, T0).expect("opens despite corrupt files");
    let corrupt = store.corrupt_files();
    let names: Vec<String> = corrupt
        .iter()
        .map(|c| c.file.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for c in &corrupt {
        assert!(c.moved_to.exists(), "{:?} kept for inspection", c.moved_to);
        assert!(c.moved_to.to_string_lossy().contains(".corrupt-"));
        assert!(!c.error.is_empty());
    }
    drop(store);
    // The engine runs on the fresh state, and new state is written cleanly.
    let r = rig_in("", dir, T0);
    assert_eq!(r.get("192.0.2.1", "/").action(), Action::Allow);
    r.engine.keys().issue(IssueKey::default()).unwrap();
    let text = std::fs::read_to_string(r.dir.path().join("keys.json")).unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
}

#[test]
fn plain_sha256_mode_matches_the_quota_document() {
    use sha2::Digest;
    let r = rig("[store]\nhash = \"sha256\"\n");
    let d = r.get("203.0.113.7", "/");
    let want = hex::encode(&sha2::Sha256::digest(b"203.0.113.7")[..8]);
    assert_eq!(d.identity, format!("ip:{want}"));
    assert!(
        !r.dir.path().join("hash-secret").exists(),
        "no secret in plain mode"
    );
}

/// Whether the store keeps a strike record for `peer`.
fn has_strike_record(r: &Rig, peer: &str) -> bool {
    r.engine.store().strikes(ip(peer)).unwrap().is_some()
}

#[test]
fn long_quiet_strike_records_are_forgotten() {
    let r = rig("[default_route]\nlimits = [\"burst\"]\n[tiers.anon]\nburst = 1\n");
    r.get("192.0.2.70", "/");
    assert_eq!(r.get("192.0.2.70", "/").lockout_level, Some(1));
    assert!(has_strike_record(&r, "192.0.2.70"));
    // Six days later another address strikes: the first record is kept (still within a week).
    r.advance_secs(6 * 86_400);
    r.get("192.0.2.71", "/");
    r.get("192.0.2.71", "/");
    assert!(has_strike_record(&r, "192.0.2.70"));
    // Past a week of quiet it is dropped at the next write.
    r.advance_secs(2 * 86_400);
    r.get("192.0.2.72", "/");
    r.get("192.0.2.72", "/");
    assert!(!has_strike_record(&r, "192.0.2.70"));
    assert!(has_strike_record(&r, "192.0.2.72"));
}

#[test]
fn restart_pushes_live_lockouts_and_lists_into_the_kernel() {
    let r = rig("[tiers.anon]\nburst = 3\n");
    let burst = |who: &str| {
        (0..100)
            .map(|_| r.get(who, "/"))
            .find(|d| d.reason() == Some(Reason::Burst))
            .expect("the burst refuses")
    };
    // 192.0.2.60 escalates to level 2: a second burst after the first lockout (65 s) ended.
    burst("192.0.2.60");
    r.advance_secs(70);
    assert_eq!(burst("192.0.2.60").lockout_level, Some(2));
    let level2 = r.engine.lockouts().get(ip("192.0.2.60")).unwrap().unwrap();
    assert_eq!(level2.until_ms - level2.since_ms, 120_000);
    r.engine
        .lockouts()
        .lock(ip("192.0.2.61"), Duration::from_secs(30))
        .unwrap();
    r.engine
        .lockouts()
        .lock(ip("192.0.2.62"), Duration::from_secs(300))
        .unwrap();
    let now = r.clock_now();
    let entry = |net: &str, until_ms: Option<u64>| ListEntry {
        net: net.parse().unwrap(),
        until_ms,
        comment: String::new(),
    };
    let lists = r.engine.lists();
    lists
        .add(ListKind::Allow, entry("10.0.0.0/8", None))
        .unwrap();
    lists
        .add(ListKind::Deny, entry("203.0.113.0/24", Some(now + 20_000)))
        .unwrap();
    lists
        .add(ListKind::Deny, entry("198.51.100.0/24", None))
        .unwrap();
    lists
        .add(ListKind::Deny, entry("192.0.2.128/25", Some(now + 600_000)))
        .unwrap();
    lists
        .add(ListKind::Allow, entry("172.16.0.0/12", None))
        .unwrap();
    assert!(lists
        .remove(ListKind::Allow, &"172.16.0.0/12".parse().unwrap())
        .unwrap());
    let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap();
    // Changes reached the kernel as they were made.
    let events = r.sink.events();
    for want in [
        SinkEvent::ListAdd {
            kind: ListKind::Deny,
            net: net("203.0.113.0/24"),
            secs: Some(20),
        },
        SinkEvent::ListRemove {
            kind: ListKind::Allow,
            net: net("172.16.0.0/12"),
        },
    ] {
        assert!(events.contains(&want), "{want:?} not in {events:?}");
    }

    // A reboot 40 s later: the kernel's maps are empty; a new sink stands for them.
    let Rig {
        engine, dir, clock, ..
    } = r;
    drop(engine);
    let r = rig_in("[tiers.anon]\nburst = 3\n", dir, clock.now_ms() + 40_000);
    let mut pushed = r.sink.events();
    pushed.sort_by_key(|e| format!("{e:?}"));
    let mut want = vec![
        // 120 s at level 2, 40 s of it gone; the 30 s lockout has expired and is not pushed.
        SinkEvent::Lock {
            ip: ip("192.0.2.60"),
            secs: 80,
            level: 2,
        },
        SinkEvent::Lock {
            ip: ip("192.0.2.62"),
            secs: 260,
            level: 1,
        },
        SinkEvent::ListAdd {
            kind: ListKind::Allow,
            net: net("10.0.0.0/8"),
            secs: None,
        },
        // The 20 s deny entry has expired and is not pushed.
        SinkEvent::ListAdd {
            kind: ListKind::Deny,
            net: net("198.51.100.0/24"),
            secs: None,
        },
        SinkEvent::ListAdd {
            kind: ListKind::Deny,
            net: net("192.0.2.128/25"),
            secs: Some(560),
        },
    ];
    want.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(pushed, want);
}
