//! The Valkey store against a real valkey-server this test starts on loopback: the script's
//! check-and-count matches the reference semantics step by step, and the engine's rules hold
//! over it (keys and lockouts shared by a second "host").

use std::sync::Arc;
use std::time::Duration;

use crate::rig::*;
use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::{Config, HashMode};
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::{Action, Engine, EngineOptions, KeyRefresh, Reason, Tier};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::identity::hash::{IdKey, IdentityHasher, Namespace};
use limiter_daemon::model::{PerWindow, WindowKind};
use limiter_daemon::store::count::{apply, CountRequest, Entry, Limit};
use limiter_daemon::store::{CountStore, Gate, LockCause, Lockout, RecordStore};
use limiter_daemon::valkey::Topology;
use limiter_daemon::valkey::{ValkeyOptions, ValkeyStore};
use limiter_tests::valkey::cluster as start_cluster;
use limiter_tests::valkey::{start, start_on, Server};
use rand::{Rng, SeedableRng};

/// Counting on Valkey (plain commands, the script for another day's daily count) gives the
/// reference semantics' answers, step by step, on one random trace.
#[test]
fn valkey_matches_the_reference_semantics() {
    let Some(server) = start() else { return };
    let store = ValkeyStore::open_with(ValkeyOptions::new(&server.addr, "t1:")).unwrap();
    let h = IdentityHasher::hmac(b"0123456789abcdef0123");
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let ids: Vec<IdKey> = (0..3u8).map(|n| h.id(Namespace::Ip, &[n])).collect();
    let mut local = vec![Entry::default(); ids.len()];
    let mut now = NEW_YEAR_MS + 3_500_000; // near an hour boundary, to cross it
    for step in 0..1_500 {
        now += rng.gen_range(0..4_000);
        let who = rng.gen_range(0..ids.len());
        let req = CountRequest {
            networks: Default::default(),
            id: ids[who],
            now_ms: now,
            cost: rng.gen_range(1..4),
            limits: PerWindow::default()
                .with(
                    WindowKind::Burst,
                    rng.gen_bool(0.9).then_some(Limit::refusing(6)),
                )
                .with(
                    WindowKind::Hourly,
                    rng.gen_bool(0.8).then_some(Limit::refusing(40)),
                )
                .with(
                    WindowKind::KeyHourly,
                    rng.gen_bool(0.3).then_some(Limit::refusing(25)),
                )
                .with(
                    WindowKind::Daily,
                    rng.gen_bool(0.7).then_some(Limit {
                        max: 120,
                        refuse: rng.gen_bool(0.5),
                    }),
                ),
        };
        let want = apply(&mut local[who], &req);
        let got = store.check_and_count(&req).unwrap();
        assert_eq!(got, want, "step {step}: {req:?}");
    }
}

/// Config for an engine opened as the daemon opens it: the Valkey backend at `addr`, plus
/// `store_extra` lines in `[store]`.
fn valkey_config(addr: &str, store_extra: &str, dir: &std::path::Path) -> Arc<Config> {
    let text = format!("[store]\nbackend = \"valkey\"\nvalkey_address = \"{addr}\"\n{store_extra}");
    Arc::new(config(&text, dir))
}

fn engine_on(
    server: &Server,
    clock: &ManualClock,
    dir: &std::path::Path,
) -> (Engine, Arc<RecordingSink>) {
    let cfg = Arc::new(config(
        "[default_route]\nlimits = [\"burst\", \"hourly\"]\n",
        dir,
    ));
    let store = Arc::new(ValkeyStore::open(&server.addr, "fleet:", HashMode::Hmac, None).unwrap());
    let sink = Arc::new(RecordingSink::default());
    let engine = Engine::with_options(
        cfg,
        store,
        sink.clone(),
        Arc::new(clock.clone()),
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    );
    (engine, sink)
}

#[test]
fn engine_rules_hold_over_valkey_and_hosts_share_state() {
    let Some(server) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let (a, _) = engine_on(&server, &clock, dir.path());
    let h = http::HeaderMap::new();
    let req = |peer: &str| limiter_daemon::engine::RequestView {
        client: Client::Addr(ip(peer)),
        method: &http::Method::GET,
        path: "/",
        headers: &h,
    };
    // Burst: 120 admitted, the 121st is a strike and a lockout of 60 s, lengthened to 65 s:
    // until the burst's slot (taken at the slot-aligned T0) leaves the window.
    for _ in 0..120 {
        assert_eq!(a.decide(&req("192.0.2.1")).action(), Action::Allow);
    }
    let d = a.decide(&req("192.0.2.1"));
    assert_eq!(
        (d.reason(), d.lockout_level, d.retry_after_secs()),
        (Some(Reason::Burst), Some(1), Some(65))
    );

    // A second host on the same server sees the lockout, the counts and the keys.
    let (b, sink_b) = engine_on(&server, &clock, dir.path());
    assert!(
        sink_b.events().contains(&SinkEvent::Lock {
            ip: ip("192.0.2.1"),
            secs: 65,
            level: 1
        }),
        "restored into the second host's kernel"
    );
    assert_eq!(b.decide(&req("192.0.2.1")).reason(), Some(Reason::Locked));
    let first = a.decide(&req("192.0.2.2"));
    let second = b.decide(&req("192.0.2.2"));
    assert_eq!(
        first.identity, second.identity,
        "one hashing secret for the fleet"
    );
    assert_eq!(
        second
            .window(limiter_daemon::engine::WindowKind::Burst)
            .unwrap()
            .remaining,
        118
    );

    let key = a.keys().issue(IssueKey::default()).unwrap();
    let kh = headers(&[("x-api-key", &key.token)]);
    let kreq = limiter_daemon::engine::RequestView {
        client: Client::Addr(ip("198.51.100.1")),
        method: &http::Method::GET,
        path: "/",
        headers: &kh,
    };
    assert_eq!(b.decide(&kreq).tier, Tier::Session, "pending on host b");
    b.keys().process_pending();
    assert_eq!(
        b.decide(&kreq).tier,
        Tier::Sponsor,
        "verified from the shared store"
    );

    // Hourly budget spent: no strike, Retry-After to the rollover.
    for n in 0..600 {
        if n % 120 == 0 {
            clock.advance_ms(66_000);
        }
        assert_eq!(
            a.decide(&req("192.0.2.3")).action(),
            Action::Allow,
            "request {n}"
        );
    }
    // The next request after the burst window has room again (sooner it is a 121st in 60 s).
    clock.advance_ms(66_000);
    let d = b.decide(&req("192.0.2.3"));
    assert_eq!((d.reason(), d.lockout_level), (Some(Reason::Hourly), None));
    assert_eq!(a.lockouts().strikes(ip("192.0.2.3")).unwrap(), 0);
}

#[test]
fn engine_open_uses_the_configured_backend() {
    let Some(server) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = valkey_config(&server.addr, "key_prefix = \"open:\"\n", dir.path());
    let clock = ManualClock::new(T0);
    let engine = Engine::open(
        cfg,
        Arc::new(limiter_daemon::engine::sink::NoKernel),
        Arc::new(clock),
    )
    .expect("opens over valkey");
    let d = engine.decide(&limiter_daemon::engine::RequestView {
        client: Client::Addr(ip("192.0.2.9")),
        method: &http::Method::GET,
        path: "/",
        headers: &http::HeaderMap::new(),
    });
    assert_eq!(d.action(), Action::Allow);
    // The counters are in the server, under the configured prefix and the identity's hash tag.
    let store = ValkeyStore::open(&server.addr, "open:", HashMode::Hmac, None).unwrap();
    let id = store.hasher().id(Namespace::Ip, b"192.0.2.9");
    assert_eq!(
        store
            .usage(&id, T0)
            .unwrap()
            .map(|u| u.used[WindowKind::Hourly]),
        Some(1)
    );
    assert!(
        !dir.path().join("keys.json").exists(),
        "nothing in the embedded state dir"
    );
}

#[test]
fn store_down_falls_back_to_local_counting_and_resumes() {
    let Some(server) = start() else { return };
    let port: u16 = server.addr.rsplit(':').next().unwrap().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = valkey_config(&server.addr, "", dir.path());
    let clock = ManualClock::new(T0);
    let sink = Arc::new(RecordingSink::default());
    let engine = Engine::open(cfg, sink.clone(), Arc::new(clock.clone())).unwrap();
    let h = http::HeaderMap::new();
    let req = limiter_daemon::engine::RequestView {
        client: Client::Addr(ip("192.0.2.44")),
        method: &http::Method::GET,
        path: "/",
        headers: &h,
    };
    for _ in 0..10 {
        assert_eq!(engine.decide(&req).action(), Action::Allow);
    }
    assert!(!engine.store().degraded());
    drop(server); // the store goes down

    // Never an error for the caller: counting continues locally, limits still hold.
    let mut admitted = 0;
    loop {
        let d = engine.decide(&req);
        if d.action() != Action::Allow {
            assert_eq!(
                (d.reason(), d.lockout_level),
                (Some(Reason::Burst), Some(1))
            );
            break;
        }
        admitted += 1;
        assert!(admitted <= 120);
    }
    // This host counted its own burst beside the store's: the 10 before the outage are in it.
    assert_eq!(
        admitted, 110,
        "the local burst window holds this host's earlier requests"
    );
    assert!(engine.store().degraded());
    assert_eq!(
        engine.decide(&req).reason(),
        Some(Reason::Locked),
        "lockout kept in memory"
    );
    assert!(sink.locks().contains(&(65, 1)), "and pushed to the kernel");

    // The store returns: after the retry interval counting resumes there.
    let Some(_again) = start_on(port) else { return };
    clock.advance_ms(61_000);
    let other = limiter_daemon::engine::RequestView {
        client: Client::Addr(ip("192.0.2.45")),
        ..req
    };
    assert_eq!(engine.decide(&other).action(), Action::Allow);
    assert!(!engine.store().degraded(), "resumed");
}

#[test]
fn cluster_counts_each_identity_in_one_slot_and_shares_lockouts() {
    let Some(nodes) = start_cluster() else { return };
    let store = ValkeyStore::open(&nodes[0].addr, "c:", HashMode::Hmac, None).unwrap();
    assert_eq!(store.topology(), Some(Topology::Cluster));

    // The script over identities spread across the three primaries matches the reference.
    let h = store.hasher();
    let ids: Vec<IdKey> = (0..12u8).map(|n| h.id(Namespace::Ip, &[n])).collect();
    let mut local = vec![Entry::default(); ids.len()];
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut now = NEW_YEAR_MS + 3_590_000;
    for step in 0..400 {
        now += rng.gen_range(0..2_000);
        let who = rng.gen_range(0..ids.len());
        let req = CountRequest {
            networks: Default::default(),
            id: ids[who],
            now_ms: now,
            cost: rng.gen_range(1..3),
            limits: PerWindow::default()
                .with(WindowKind::Burst, Some(Limit::refusing(5)))
                .with(WindowKind::Hourly, Some(Limit::refusing(30)))
                .with(WindowKind::Daily, Some(Limit::refusing(60))),
        };
        let want = apply(&mut local[who], &req);
        assert_eq!(store.check_and_count(&req).unwrap(), want, "step {step}");
    }
    let mut holders = std::collections::BTreeSet::new();
    for n in &nodes {
        let client = redis::Client::open(format!("redis://{}/", n.addr)).unwrap();
        let mut c = client.get_connection().unwrap();
        let size: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
        if size > 0 {
            holders.insert(n.addr.clone());
        }
    }
    assert!(
        holders.len() > 1,
        "identities spread over primaries: {holders:?}"
    );

    // A second host (opened on another node) sees a lockout: in the script's one call for the
    // address's own identity, and by a lookup for a key holder counted in another slot.
    let other = ValkeyStore::open(&nodes[2].addr, "c:", HashMode::Hmac, None).unwrap();
    let addr = ip("192.0.2.80");
    let lock = Lockout {
        ip: addr,
        since_ms: now,
        until_ms: now + 60_000,
        level: 1,
        cause: LockCause::Burst,
        reason: None,
    };
    store.put_lockout(lock.clone(), None).unwrap();
    let as_ip = CountRequest {
        networks: Default::default(),
        id: h.id(Namespace::Ip, b"192.0.2.80"),
        now_ms: now,
        cost: 1,
        limits: PerWindow::default().with(WindowKind::Burst, Some(Limit::refusing(5))),
    };
    let as_key = CountRequest {
        id: h.id(Namespace::Key, b"k1"),
        ..as_ip
    };
    assert_eq!(
        other.gate_and_count(addr, &as_ip).unwrap(),
        Gate::Locked(lock.clone())
    );
    assert_eq!(
        other.gate_and_count(addr, &as_key).unwrap(),
        Gate::Locked(lock.clone())
    );
    assert_eq!(
        other.lockouts(now).unwrap(),
        vec![lock.clone()],
        "listed across primaries"
    );
    assert!(matches!(
        other.gate_and_count(addr, &CountRequest { now_ms: now + 60_000, ..as_key }),
        Ok(Gate::Counted(o)) if o.admitted
    ));
    assert_eq!(other.remove_lockout(addr).unwrap(), Some(lock));
    assert!(matches!(
        other.gate_and_count(addr, &as_ip),
        Ok(Gate::Counted(o)) if o.admitted
    ));
}

#[test]
fn engine_over_a_cluster_locks_out_and_a_second_host_restores_it() {
    let Some(nodes) = start_cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = valkey_config(&nodes[1].addr, "", dir.path());
    let clock = ManualClock::new(T0);
    let a = Engine::open(
        cfg.clone(),
        Arc::new(RecordingSink::default()),
        Arc::new(clock.clone()),
    )
    .unwrap();
    let h = http::HeaderMap::new();
    let req = |peer: &str| limiter_daemon::engine::RequestView {
        client: Client::Addr(ip(peer)),
        method: &http::Method::GET,
        path: "/",
        headers: &h,
    };
    for n in 0..120 {
        assert_eq!(a.decide(&req("192.0.2.90")).action(), Action::Allow, "{n}");
    }
    let d = a.decide(&req("192.0.2.90"));
    assert_eq!(
        (d.reason(), d.lockout_level),
        (Some(Reason::Burst), Some(1))
    );
    assert!(!a.store().degraded(), "the cluster answered every call");
    assert!(
        a.store().flush(Duration::from_secs(10)),
        "A's lockout written to the cluster"
    );
    let sink_b = Arc::new(RecordingSink::default());
    let b = Arc::new(Engine::open(cfg, sink_b.clone(), Arc::new(clock.clone())).unwrap());
    // B loads the fleet's lockouts when it follows the stream (the daemon does at start).
    b.follow_fleet();
    limiter_tests::poll(Duration::from_secs(10), "restored from the cluster", || {
        sink_b.locks().contains(&(65, 1)).then_some(())
    });
    assert_eq!(b.decide(&req("192.0.2.90")).reason(), Some(Reason::Locked));
}

#[test]
fn burst_retry_after_is_the_truth_over_valkey() {
    let Some(server) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Mid-slot and mid-second, as in the embedded store's test.
    let clock = ManualClock::new(T0 + 2_700);
    let (engine, sink) = engine_on(&server, &clock, dir.path());
    burst_retry_after_is_the_truth(&engine, &clock, "192.0.2.77");
    assert_eq!(sink.locks(), vec![(62, 1)]);
}

/// Stops (SIGSTOP) the server process while alive, and lets it go on (SIGCONT) when dropped.
struct Frozen(i32);

impl Frozen {
    fn freeze(server: &Server) -> Frozen {
        let pid = i32::try_from(server.pid()).unwrap();
        // SAFETY: kill(2) on a child this test spawned and still owns.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as above; the child is reaped by `Server`'s drop.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

#[test]
fn a_frozen_server_costs_one_timeout_then_counting_goes_local() {
    let Some(server) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = valkey_config(&server.addr, "", dir.path());
    let clock = ManualClock::new(T0);
    let engine = Engine::open(
        cfg,
        Arc::new(RecordingSink::default()),
        Arc::new(clock.clone()),
    )
    .unwrap();
    let h = http::HeaderMap::new();
    let req = limiter_daemon::engine::RequestView {
        client: Client::Addr(ip("192.0.2.70")),
        method: &http::Method::GET,
        path: "/",
        headers: &h,
    };
    assert_eq!(engine.decide(&req).action(), Action::Allow);
    assert!(!engine.store().degraded());

    // The server accepts nothing and answers nothing: the open connection's read times out.
    let frozen = Frozen::freeze(&server);
    let started = std::time::Instant::now();
    assert_eq!(engine.decide(&req).action(), Action::Allow);
    let waited = started.elapsed();
    assert!(engine.store().degraded(), "counting went local");
    assert!(
        waited >= Duration::from_millis(1_500) && waited < Duration::from_secs(5),
        "one read timeout (2 s), no retry on a timed-out call: {waited:?}"
    );
    // Until the retry interval passes, decisions do not wait on the server at all.
    let started = std::time::Instant::now();
    for _ in 0..50 {
        assert_eq!(engine.decide(&req).action(), Action::Allow);
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    drop(frozen);
}

/// The burst test counts every request that arrives, refused ones included, in the Valkey
/// script as in the reference: a crawler politely at its hourly limit and a runaway loop after
/// its budget is spent (the schedules of `engine_burst_after_budget.rs`) get the same decisions,
/// step by step, strikes and lockouts included, from the embedded store and from Valkey.
#[test]
fn refused_requests_count_toward_the_burst_alike_on_both_stores() {
    let Some(server) = start() else { return };
    for (n, (name, schedule)) in [
        ("polite", polite_crawler_after_budget()),
        ("runaway", runaway_loop_after_budget()),
    ]
    .into_iter()
    .enumerate()
    {
        let embedded = rig("");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let store = Arc::new(
            ValkeyStore::open(&server.addr, &format!("conf{n}:"), HashMode::Hmac, None).unwrap(),
        );
        let sink = Arc::new(RecordingSink::default());
        let valkey = Engine::with_options(
            Arc::new(config("", dir.path())),
            store,
            sink.clone(),
            Arc::new(clock.clone()),
            EngineOptions {
                key_refresh: KeyRefresh::Manual,
            },
        );
        let peer = "203.0.113.50";
        let want = drive(&embedded.engine, &embedded.clock, peer, &schedule);
        let got = drive(&valkey, &clock, peer, &schedule);
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(outcome_of(g), outcome_of(w), "{name}: request {i}");
        }
        assert_eq!(
            sink.locks(),
            embedded.sink.locks(),
            "{name}: the kernel's view"
        );
        if name == "runaway" {
            assert!(sink.locks().len() >= 2, "{:?}", sink.locks());
        } else {
            assert!(sink.locks().is_empty());
        }
    }
}

#[test]
fn a_lockout_keeps_its_reason_and_records_without_one_still_read() {
    let Some(server) = start() else { return };
    let store = ValkeyStore::open(&server.addr, "lr:", HashMode::Hmac, None).unwrap();
    let now = T0;
    let addr = ip("192.0.2.90");
    let lock = Lockout {
        ip: addr,
        since_ms: now,
        until_ms: now + 60_000,
        level: 1,
        cause: LockCause::Manual,
        reason: Some("scraping /search".into()),
    };
    store.put_lockout(lock.clone(), None).unwrap();
    let req = CountRequest {
        networks: Default::default(),
        id: store.hasher().id(Namespace::Ip, b"192.0.2.90"),
        now_ms: now,
        cost: 1,
        limits: PerWindow::default().with(WindowKind::Burst, Some(Limit::refusing(5))),
    };
    // Every way a lockout is read back: lookup, listing, the script's locked reply.
    assert_eq!(store.lockout(addr).unwrap(), Some(lock.clone()));
    assert_eq!(store.lockouts(now).unwrap(), vec![lock.clone()]);
    assert_eq!(
        store.gate_and_count(addr, &req).unwrap(),
        Gate::Locked(lock.clone())
    );

    // A record written before the reason existed (the same key, the old JSON) reads as none,
    // and the script still finds it locked.
    let client = redis::Client::open(format!("redis://{}", server.addr)).unwrap();
    let mut c = client.get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lr:lockout:*")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let old = format!(
        r#"{{"ip":"192.0.2.90","since_ms":{now},"until_ms":{},"level":1,"cause":"manual"}}"#,
        now + 60_000
    );
    redis::cmd("SET")
        .arg(&keys[0])
        .arg(&old)
        .arg("PX")
        .arg(60_000)
        .exec(&mut c)
        .unwrap();
    let legacy = Lockout {
        reason: None,
        ..lock
    };
    assert_eq!(store.lockout(addr).unwrap(), Some(legacy.clone()));
    assert_eq!(store.lockouts(now).unwrap(), vec![legacy.clone()]);
    assert_eq!(
        store.gate_and_count(addr, &req).unwrap(),
        Gate::Locked(legacy.clone())
    );
    assert_eq!(store.remove_lockout(addr).unwrap(), Some(legacy));
}

#[test]
fn a_key_keeps_owner_and_note_apart_and_an_old_label_reads_as_owner() {
    let Some(server) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (engine, _sink) = engine_on(&server, &ManualClock::new(T0), dir.path());
    let issued = engine
        .keys()
        .issue(IssueKey {
            owner: Some("acme".into()),
            note: Some("nightly sync".into()),
            ..IssueKey::default()
        })
        .unwrap();
    let id = issued.record.id.clone();
    let store = ValkeyStore::open(&server.addr, "fleet:", HashMode::Hmac, None).unwrap();
    let got = store.key(&id).unwrap().unwrap();
    assert_eq!(got.owner.as_deref(), Some("acme"));
    assert_eq!(got.note.as_deref(), Some("nightly sync"));
    assert_eq!(store.keys().unwrap(), vec![got.clone()]);

    // The same key as a record written before owner and note were apart: `label` only.
    let client = redis::Client::open(format!("redis://{}", server.addr)).unwrap();
    let mut c = client.get_connection().unwrap();
    let name = format!("fleet:key:{id}");
    // A hash now: HGETALL-readable, the secret only as its hash.
    let fields: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(&name).query(&mut c).unwrap();
    assert_eq!(fields["owner"], "acme");
    assert_eq!(fields["id"], id);
    assert_eq!(fields["secret_hash"], got.secret_hash);
    let secret = issued.token.splitn(3, '_').nth(2).unwrap();
    assert!(!fields.values().any(|v| v.contains(secret)), "{fields:?}");
    let body = serde_json::to_string(&got).unwrap();
    redis::cmd("DEL").arg(&name).exec(&mut c).unwrap();
    let mut old: serde_json::Value = serde_json::from_str(&body).unwrap();
    let o = old.as_object_mut().unwrap();
    assert!(
        o.remove("owner").is_some() && o.remove("note").is_some(),
        "{body}"
    );
    o.insert("label".into(), "old label".into());
    redis::cmd("SET")
        .arg(&name)
        .arg(old.to_string())
        .exec(&mut c)
        .unwrap();
    let got = store.key(&id).unwrap().unwrap();
    assert_eq!(got.owner.as_deref(), Some("old label"));
    assert_eq!(got.note, None);
    // An empty old label is no owner.
    old["label"] = "".into();
    redis::cmd("SET")
        .arg(&name)
        .arg(old.to_string())
        .exec(&mut c)
        .unwrap();
    assert_eq!(store.keys().unwrap()[0].owner, None);
}
