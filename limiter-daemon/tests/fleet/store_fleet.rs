//! `FleetStore`'s logic against a stand-in server with failures on demand (`fleet_support`):
//! one deadline per probe interval while the server is frozen, no round trip for a refusal
//! that holds, the three `on_failure` modes, lockouts made while down written when it returns,
//! lockouts crossing from one host to another through the stream, and the store's return
//! found with no decision (the connector's own probe).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::rig::{eventually, Delivered, Mode, Remote, Server};
use limiter_daemon::config::store::OnFailure;
use limiter_daemon::fleet::{FleetSettings, FleetStore};
use limiter_daemon::identity::hash::{IdentityHasher, Namespace};
use limiter_daemon::model::{LockCause, Lockout, PerWindow, StrikeRecord, WindowKind};
use limiter_daemon::store::count::{CountRequest, Limit};
use limiter_daemon::store::lockout_events::LockoutEvent;
use limiter_daemon::store::{CountStore, Counting, Gate, RecordStore, StoreError};

const T0: u64 = 1_767_225_600_000 + 10 * 60_000;

fn settings(on_failure: OnFailure) -> FleetSettings {
    FleetSettings {
        decision_timeout: Duration::from_millis(50),
        probe_interval: Duration::from_secs(1),
        on_failure,
        max_identities: 4096,
        // The in-memory remote grants no leases: every decision is one call, as before.
        leases: true,
        lease_max: 64,
        lease_ttl: Duration::from_secs(1),
    }
}

fn connected(server: &Arc<Server>, host: &str, on_failure: OnFailure) -> Arc<FleetStore> {
    let s = FleetStore::start(Remote::new(server, host), settings(on_failure));
    eventually("the first connect", 5, || s.connected());
    s
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn req(who: &str, now_ms: u64, burst: u32, hourly: u32) -> CountRequest {
    let id = IdentityHasher::sha256().id(Namespace::Ip, who.as_bytes());
    CountRequest {
        networks: Default::default(),
        id,
        now_ms,
        cost: 1,
        limits: PerWindow::default()
            .with(WindowKind::Burst, Some(Limit::refusing(burst)))
            .with(WindowKind::Hourly, Some(Limit::refusing(hourly))),
    }
}

/// The answer, awaited when it is a remote call; `true` when it was one.
async fn ask(s: &FleetStore, who: &str, r: &CountRequest) -> (Result<Gate, StoreError>, bool) {
    match s.gate_and_count_async(ip(who), r) {
        Counting::Ready(a) => (a, false),
        Counting::Pending(f) => (f.await, true),
    }
}

fn admitted(a: &Result<Gate, StoreError>) -> bool {
    matches!(a, Ok(Gate::Counted(o)) if o.admitted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_store_costs_one_deadline_per_probe_interval() {
    let server = Server::new();
    let s = connected(&server, "a", OnFailure::Local);
    let r = req("192.0.2.1", T0, 1000, 1000);
    assert!(admitted(&ask(&s, "192.0.2.1", &r).await.0));
    assert!(!s.degraded());

    server.set(Mode::Frozen);
    let started = Instant::now();
    let (a, remote) = ask(&s, "192.0.2.1", &r).await;
    assert!(
        remote && admitted(&a),
        "counted locally after the deadline: {a:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert!(s.degraded());
    let calls = server.calls();
    // Within the probe interval nobody waits on the store.
    for n in 0..200 {
        let (a, remote) = ask(&s, "192.0.2.1", &req("192.0.2.1", T0 + n, 1000, 1000)).await;
        assert!(!remote && admitted(&a));
    }
    assert_eq!(server.calls(), calls);
    // One probe when the interval is over; it pays the deadline and fails again.
    let (_, remote) = ask(&s, "192.0.2.1", &req("192.0.2.1", T0 + 1_000, 1000, 1000)).await;
    assert!(remote);
    let (_, remote) = ask(&s, "192.0.2.1", &req("192.0.2.1", T0 + 1_001, 1000, 1000)).await;
    assert!(!remote, "one probe per interval");
    assert_eq!(server.calls(), calls + 1);

    // Thawed: the next probe succeeds and counting is back on the store.
    server.set(Mode::Up);
    let (a, remote) = ask(&s, "192.0.2.1", &req("192.0.2.1", T0 + 2_001, 1000, 1000)).await;
    assert!(remote && admitted(&a));
    assert!(!s.degraded());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_holds_is_answered_without_a_round_trip_and_the_burst_still_counts() {
    let server = Server::new();
    let s = connected(&server, "a", OnFailure::Local);
    let who = "192.0.2.2";
    for n in 0..3 {
        assert!(admitted(&ask(&s, who, &req(who, T0 + n, 20, 3)).await.0));
    }
    let (a, remote) = ask(&s, who, &req(who, T0 + 3, 20, 3)).await;
    assert!(remote);
    let Ok(Gate::Counted(o)) = a else {
        panic!("{a:?}")
    };
    assert!(o.refused[WindowKind::Hourly] && !o.admitted);
    let calls = server.calls();
    // Repeats of the refusal: no round trip, the same reason, until the burst runs over.
    let mut burst_refused_at = None;
    for n in 4..40 {
        let (a, remote) = ask(&s, who, &req(who, T0 + n, 20, 3)).await;
        assert!(!remote);
        let Ok(Gate::Counted(o)) = a else {
            panic!("{a:?}")
        };
        assert!(o.refused[WindowKind::Hourly] && !o.admitted);
        if o.refused[WindowKind::Burst] && burst_refused_at.is_none() {
            burst_refused_at = Some(n);
        }
    }
    assert_eq!(server.calls(), calls, "repeats cost no round trip");
    // This host counts its own burst alongside the store, so the held answers go on from the
    // 4 the store saw: the 21st request overall runs a burst of 20 over, as on the store.
    assert_eq!(burst_refused_at, Some(20));
    assert_eq!(
        s.stats()
            .over_limit_hits
            .load(std::sync::atomic::Ordering::Relaxed),
        36
    );
    // Another caller is unaffected.
    let (a, remote) = ask(&s, "192.0.2.3", &req("192.0.2.3", T0 + 41, 20, 3)).await;
    assert!(remote && admitted(&a));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_open_admits_and_closed_refuses() {
    for (mode, check) in [
        (
            OnFailure::Open,
            (|a: &Result<Gate, StoreError>| matches!(a, Err(StoreError::Open))) as fn(&_) -> bool,
        ),
        (OnFailure::Closed, |a| {
            matches!(
                a,
                Err(StoreError::Closed {
                    retry_after_secs: 1
                })
            )
        }),
        (OnFailure::Local, admitted),
    ] {
        let server = Server::new();
        let s = connected(&server, "a", mode);
        server.set(Mode::Down);
        let (a, _) = ask(&s, "192.0.2.4", &req("192.0.2.4", T0, 10, 10)).await;
        assert!(check(&a), "{mode:?}: {a:?}");
        let (a, remote) = ask(&s, "192.0.2.4", &req("192.0.2.4", T0 + 1, 10, 10)).await;
        assert!(!remote && check(&a), "{mode:?}: {a:?}");
    }
}

fn lockout(who: &str, since: u64, secs: u64, level: u32) -> Lockout {
    Lockout {
        ip: ip(who),
        since_ms: since,
        until_ms: since + secs * 1000,
        level,
        cause: LockCause::Burst,
        reason: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockouts_made_while_the_store_is_down_are_written_when_it_returns() {
    let server = Server::new();
    let s = connected(&server, "a", OnFailure::Local);
    server.set(Mode::Down);
    let started = Instant::now();
    s.put_lockout(lockout("192.0.2.5", T0, 600, 1), None)
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "a strike waits on nothing"
    );
    // Enforced here at once, from the replica.
    let (a, remote) = ask(&s, "192.0.2.5", &req("192.0.2.5", T0 + 1, 10, 10)).await;
    assert!(!remote && matches!(a, Ok(Gate::Locked(_))), "{a:?}");
    assert!(server.store.lockout(ip("192.0.2.5")).unwrap().is_none());
    // A longer lockout another host wrote meanwhile wins over ours.
    server
        .store
        .put_lockout(lockout("192.0.2.5", T0, 3600, 2), None)
        .unwrap();
    server.set(Mode::Up);
    eventually("the queued write", 10, || s.writes_queued() == 0);
    let l = server.store.lockout(ip("192.0.2.5")).unwrap().unwrap();
    assert_eq!(
        (l.level, l.until_ms),
        (2, T0 + 3_600_000),
        "the longer wins"
    );
    assert!(server
        .events
        .lock()
        .iter()
        .any(|e| matches!(e, LockoutEvent::Locked { lockout, .. } if lockout.level == 1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockout_made_on_one_host_is_enforced_on_the_other_and_a_lift_frees_both() {
    let server = Server::new();
    // Already in the store when B starts: B's reload has it.
    server
        .store
        .put_lockout(lockout("192.0.2.9", T0, 600, 1), None)
        .unwrap();
    let a = connected(&server, "a", OnFailure::Local);
    let b = connected(&server, "b", OnFailure::Local);
    let (seen_a, seen_b) = (
        Arc::new(Delivered::default()),
        Arc::new(Delivered::default()),
    );
    a.follow_fleet(seen_a.clone());
    b.follow_fleet(seen_b.clone());
    eventually("B's reload", 5, || !seen_b.reloads.lock().is_empty());
    assert_eq!(seen_b.reloads.lock()[0][0].ip, ip("192.0.2.9"));

    a.put_lockout(lockout("192.0.2.7", T0, 600, 1), None)
        .unwrap();
    eventually("the lockout on B", 5, || {
        b.lockout(ip("192.0.2.7")).unwrap().is_some()
    });
    let (g, remote) = ask(&b, "192.0.2.7", &req("192.0.2.7", T0 + 1, 10, 10)).await;
    assert!(!remote && matches!(g, Ok(Gate::Locked(_))), "{g:?}");
    eventually("B's engine told", 5, || {
        seen_b.applied.lock().iter().any(
            |e| matches!(e, LockoutEvent::Locked { lockout, .. } if lockout.ip == ip("192.0.2.7")),
        )
    });
    assert!(
        seen_a.applied.lock().is_empty(),
        "a host's own events are not applied twice: {:?}",
        seen_a.applied.lock()
    );

    b.remove_lockout(ip("192.0.2.7")).unwrap();
    eventually("the lift on A", 5, || {
        a.lockout(ip("192.0.2.7")).unwrap().is_none()
    });
    eventually("A's engine told", 5, || {
        seen_a
            .applied
            .lock()
            .iter()
            .any(|e| matches!(e, LockoutEvent::Lifted { ip: i, .. } if *i == ip("192.0.2.7")))
    });
    assert!(server.store.lockout(ip("192.0.2.7")).unwrap().is_none());
}

/// Issue 35: `lockouts remove --forget-strikes` on one host forgets the strikes on every host:
/// the shared store's record, and each replica's through the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strikes_forgotten_on_one_host_are_forgotten_on_the_other() {
    let server = Server::new();
    let a = connected(&server, "a", OnFailure::Local);
    let b = connected(&server, "b", OnFailure::Local);
    let seen_b = Arc::new(Delivered::default());
    b.follow_fleet(seen_b.clone());
    eventually("B's reload", 5, || !seen_b.reloads.lock().is_empty());
    let strikes = StrikeRecord {
        strikes: 2,
        last_strike_ms: T0,
        quiet_from_ms: T0 + 600_000,
    };
    a.put_lockout(lockout("192.0.2.8", T0, 600, 2), Some(strikes))
        .unwrap();
    eventually("the strikes on B", 5, || {
        b.strikes(ip("192.0.2.8")).unwrap().is_some()
    });
    a.remove_lockout(ip("192.0.2.8")).unwrap();
    assert!(a.forget_strikes(ip("192.0.2.8")).unwrap());
    assert_eq!(a.strikes(ip("192.0.2.8")).unwrap(), None);
    assert_eq!(server.store.strikes(ip("192.0.2.8")).unwrap(), None);
    eventually("forgotten on B", 5, || {
        b.strikes(ip("192.0.2.8")).unwrap().is_none()
            && b.lockout(ip("192.0.2.8")).unwrap().is_none()
    });
    assert!(!a.forget_strikes(ip("192.0.2.8")).unwrap(), "nothing left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_down_at_start_is_used_once_it_answers() {
    let server = Server::new();
    server.set(Mode::Down);
    let s = FleetStore::start(Remote::new(&server, "a"), settings(OnFailure::Local));
    assert!(s.degraded() && !s.connected());
    let (a, remote) = ask(&s, "192.0.2.10", &req("192.0.2.10", T0, 10, 10)).await;
    assert!(!remote && admitted(&a), "counted locally: {a:?}");
    server.set(Mode::Up);
    eventually("the connect", 10, || s.connected());
    let (a, remote) = ask(&s, "192.0.2.10", &req("192.0.2.10", T0 + 1, 10, 10)).await;
    assert!(remote && admitted(&a));
    assert!(!s.degraded());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_answers_again_closes_the_breaker_with_no_decision() {
    let server = Server::new();
    let s = connected(&server, "a", OnFailure::Local);
    for round in 0..2 {
        server.set(Mode::Down);
        let r = req("192.0.2.11", T0 + round * 10_000, 1000, 1000);
        let (a, remote) = ask(&s, "192.0.2.11", &r).await;
        assert!(remote && admitted(&a), "counted locally: {a:?}");
        assert!(s.degraded());
        server.set(Mode::Up);
        // No decision from here on: the connector's own probe finds the store back, within
        // the probe interval (1 s) and a second.
        let t = Instant::now();
        eventually("the breaker closed by the probe", 2, || !s.degraded());
        println!("closed {:?} after the store answered", t.elapsed());
    }
}
