//! Leases on a real `valkey-server` (docs/fleet.md): four hosts (each its own `FleetStore`
//! and connection) and 64 concurrent deciders over random identities and limits never admit
//! past a limit fleet-wide, and admit at least the limit less hosts × k where every host
//! sends until refused; a hot identity costs at most 0.1 commands per decision and a cold
//! one one script call.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use limiter_daemon::config::store::OnFailure;
use limiter_daemon::config::HashMode;
use limiter_daemon::fleet::{FleetSettings, FleetStore};
use limiter_daemon::identity::hash::{IdKey, IdentityHasher, Namespace};
use limiter_daemon::model::{PerWindow, WindowKind};
use limiter_daemon::store::count::{CountRequest, Limit};
use limiter_daemon::store::{CountStore, Gate, RecordStore};
use limiter_daemon::valkey::{ValkeyOptions, ValkeyStore};
use limiter_tests::valkey::client_commands_during;
use rand::{Rng, SeedableRng};

const SECRET: &[u8] = b"0123456789abcdef-leases";
const LEASE_MAX: u32 = 16;

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn host(addr: &str, prefix: &str, name: &str) -> Arc<FleetStore> {
    host_with(addr, prefix, name, Duration::from_secs(1))
}

/// A host with its lease TTL.
fn host_with(addr: &str, prefix: &str, name: &str, lease_ttl: Duration) -> Arc<FleetStore> {
    let mut opts = ValkeyOptions::new(addr, prefix);
    opts.hash = HashMode::Hmac;
    opts.hash_secret = Some(SECRET.to_vec());
    opts.host = name.to_string();
    let remote = Arc::new(ValkeyStore::new(opts).unwrap());
    let s = FleetStore::start(
        remote,
        FleetSettings {
            decision_timeout: Duration::from_secs(10),
            probe_interval: Duration::from_secs(1),
            on_failure: OnFailure::Local,
            max_identities: 1 << 16,
            leases: true,
            lease_max: LEASE_MAX,
            lease_ttl,
        },
    );
    assert!(s.wait_connected(Duration::from_secs(10)), "connected");
    s
}

/// Calls made to the store at `addrs` while `f` ran, as MONITOR saw them sent: script calls
/// (`EVALSHA`: lease asks, give-backs) and counts of one request by plain commands (a pipeline
/// each, one `HGETALL` of the burst in it, which every request here has). A script's own
/// commands are not calls: MONITOR shows them as the script's, and they are left out.
fn store_calls_during(addrs: &[&str], f: impl FnOnce()) -> (u64, Vec<String>) {
    let lines = client_commands_during(addrs, f);
    let calls = lines
        .iter()
        .filter(|l| l.contains("\"EVALSHA\"") || l.contains("\"HGETALL\""))
        .count();
    (calls as u64, lines)
}

fn req(id: IdKey, now: u64, burst: u32, hourly: u32) -> CountRequest {
    CountRequest::new(
        id,
        now,
        1,
        PerWindow::default()
            .with(WindowKind::Burst, Some(Limit::refusing(burst)))
            .with(WindowKind::Hourly, Some(Limit::refusing(hourly))),
    )
}

fn admitted(s: &FleetStore, r: &CountRequest) -> bool {
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    match s.gate_and_count(ip, r).unwrap() {
        Gate::Counted(o) => o.admitted,
        Gate::Locked(l) => panic!("no lockouts here: {l:?}"),
    }
}

#[test]
fn four_hosts_never_admit_past_a_limit_and_admit_it_all_but_hosts_times_k() {
    let Some(server) = limiter_tests::valkey::start() else {
        return;
    };
    let hosts: Vec<Arc<FleetStore>> = (0..4)
        .map(|i| {
            host_with(
                &server.addr,
                "fl:",
                &format!("h{i}"),
                Duration::from_secs(1),
            )
        })
        .collect();
    never_past_a_limit(&hosts);
}

fn never_past_a_limit(hosts: &[Arc<FleetStore>]) {
    let h = IdentityHasher::hmac(SECRET);
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    // 40 identities, random hourly limits; a quarter of them with a tight burst too.
    let ids: Vec<(IdKey, u32, u32)> = (0..40u32)
        .map(|n| {
            let hourly = rng.gen_range(20..400);
            let burst = if n % 4 == 0 {
                rng.gen_range(10..60)
            } else {
                100_000
            };
            (h.id(Namespace::Ip, &n.to_be_bytes()), burst, hourly)
        })
        .collect();
    let ids = Arc::new(ids);
    let counts: Arc<Vec<AtomicU32>> = Arc::new((0..40).map(|_| AtomicU32::new(0)).collect());
    let tries: Arc<Vec<AtomicU32>> = Arc::new((0..40).map(|_| AtomicU32::new(0)).collect());
    // The whole run inside one 5 s burst slot and one hour, so each limit is one budget. The
    // trace's clock moves on with every decision, 4 s over the run (4 lease TTLs), each
    // thread reading it up to 20 ms off, as threads stamping requests at once do.
    let start = now_ms();
    let now = start - start % 5_000;
    let tick = Arc::new(std::sync::atomic::AtomicU64::new(0));
    const DECISIONS: u64 = 64 * 400;
    std::thread::scope(|scope| {
        for t in 0..64u64 {
            let (ids, counts, tries) = (ids.clone(), counts.clone(), tries.clone());
            let tick = tick.clone();
            let store = hosts[(t % 4) as usize].clone();
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                for _ in 0..400 {
                    let i = rng.gen_range(0..ids.len());
                    let (id, burst, hourly) = ids[i];
                    tries[i].fetch_add(1, Ordering::Relaxed);
                    let at = tick.fetch_add(1, Ordering::Relaxed) * 4_000 / DECISIONS;
                    let at = (now + at + rng.gen_range(0..20)).saturating_sub(10);
                    if admitted(&store, &req(id, at.max(now), burst, hourly)) {
                        counts[i].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let mut exhausted = 0;
    for (i, (_, burst, hourly)) in ids.iter().enumerate() {
        let limit = (*burst).min(*hourly);
        let got = counts[i].load(Ordering::Relaxed);
        let sent = tries[i].load(Ordering::Relaxed);
        assert!(
            got <= limit,
            "identity {i}: {got} admitted past its limit {limit}"
        );
        if sent >= 2 * limit {
            exhausted += 1;
            assert!(
                got + 4 * LEASE_MAX >= limit,
                "identity {i}: {got} of {limit} admitted: more than hosts × k unspent"
            );
        }
    }
    assert!(exhausted > 10, "the bound is exercised: {exhausted}");
}

#[test]
fn a_hot_identity_costs_a_tenth_of_a_call_and_a_cold_one_one_count() {
    let Some(server) = limiter_tests::valkey::start() else {
        return;
    };
    let s = host(&server.addr, "cmd:", "h");
    let h = IdentityHasher::hmac(SECRET);
    let addrs = [server.addr.as_str()];
    let now = now_ms();
    let hot = h.id(Namespace::Ip, b"hot");
    let (calls, lines) = store_calls_during(&addrs, || {
        for i in 0..1_000u64 {
            assert!(admitted(&s, &req(hot, now + i / 4, 100_000, 100_000)));
        }
    });
    assert!(
        calls as f64 / 1000.0 <= 0.1,
        "a hot identity: {calls} store calls for 1,000 decisions ({lines:#?})"
    );
    // Its leases are asked by plain commands too: the count script is never run (the only
    // scripts are give-backs).
    let count_script = limiter_daemon::valkey::script::count_script();
    assert!(
        !lines.iter().any(|l| l.contains(count_script.get_hash())),
        "a lease asked by the count script: {lines:#?}"
    );
    // Cold: 200 identities, one request each: one script call each. The hot grant is given
    // back first (one more script), so that its give-back is not counted as theirs.
    assert!(s.flush(Duration::from_secs(10)), "the hot grant given back");
    let (calls, lines) = store_calls_during(&addrs, || {
        for n in 0..200u32 {
            let id = h.id(Namespace::Ip, &n.to_be_bytes());
            assert!(admitted(&s, &req(id, now, 100_000, 100_000)));
        }
    });
    assert_eq!(calls, 200, "{lines:#?}");
    // Each by plain commands: a pipeline, no script.
    assert!(
        lines.iter().all(|l| !l.contains("\"EVALSHA\"")),
        "{lines:#?}"
    );
}

/// With the default `lease_ttl` a grant lives to the end of its 5 s burst slot, so a caller
/// asking every 900 ms is served from one lease: its first request (a lease of one) and its
/// second (a lease of k) are the only store calls. With the old 1 s it leased again every other
/// request (and gave back what it left).
#[test]
fn a_grant_lives_to_its_slot_end_by_default() {
    let Some(server) = limiter_tests::valkey::start() else {
        return;
    };
    let ttl = Duration::from_millis(limiter_daemon::config::store::LEASE_TTL_MS);
    let s = host_with(&server.addr, "ttl:", "h", ttl);
    let h = IdentityHasher::hmac(SECRET);
    let addrs = [server.addr.as_str()];
    // The start of the next burst slot: the five requests (3.6 s) fall in one slot, and the
    // background sweep (by the latest request time) sees nothing expire meanwhile.
    let t0 = (now_ms() / 5_000 + 1) * 5_000;
    let id = h.id(Namespace::Ip, b"every-900-ms");
    let (calls, lines) = store_calls_during(&addrs, || {
        for i in 0..5u64 {
            assert!(admitted(&s, &req(id, t0 + i * 900, 100_000, 100_000)));
        }
    });
    assert!(
        calls <= 2,
        "5 requests 900 ms apart in one slot: {calls} store calls ({lines:#?})"
    );
}

/// One host, one caller and its network, one request after another at one instant: exactly
/// the burst is admitted, as with one script per decision (background refills racing the
/// requests lose nothing).
#[test]
fn one_host_admits_exactly_the_burst_of_a_caller_and_its_network() {
    let Some(server) = limiter_tests::valkey::start() else {
        return;
    };
    let h = IdentityHasher::hmac(SECRET);
    for round in 0..5u32 {
        let s = host(&server.addr, &format!("one{round}:"), "h");
        let now = now_ms();
        let now = now - now % 5_000;
        let mut r = req(h.id(Namespace::Ip, b"caller"), now, 120, 600);
        r.networks[0] = Some(limiter_daemon::store::count::NetCount {
            id: h.id(Namespace::Ip, b"net"),
            limits: PerWindow::default()
                .with(WindowKind::Burst, Some(Limit::refusing(1200)))
                .with(WindowKind::Hourly, Some(Limit::refusing(6000))),
        });
        for i in 0..120 {
            let ok = admitted(&s, &r);
            assert!(ok, "round {round}: request {i} refused");
        }
        assert!(!admitted(&s, &r), "round {round}: the 121st is refused");
    }
}

/// The client address MONITOR shows a line was sent from (`… [0 127.0.0.1:40312] "EVALSHA" …`).
fn sender(line: &str) -> &str {
    line.split('[')
        .nth(1)
        .and_then(|s| s.split(']').next())
        .and_then(|s| s.split(' ').nth(1))
        .unwrap_or("")
}

/// Give-backs (and refills, and the heartbeat) travel on a connection of their own: a sweep
/// giving back thousands of grants at a slot's end queued its scripts ahead of every decision
/// on the one shared connection (`bench fleet`, open loop: p99 109 ms, 35 ms after).
#[test]
fn give_backs_travel_on_a_connection_no_decision_waits_on() {
    let Some(server) = limiter_tests::valkey::start() else {
        return;
    };
    let s = host(&server.addr, "conn:", "h");
    let h = IdentityHasher::hmac(SECRET);
    let addrs = [server.addr.as_str()];
    let t0 = (now_ms() / 5_000 + 1) * 5_000;
    let id = h.id(Namespace::Ip, b"leases-then-gives-back");
    let (_, asked) = store_calls_during(&addrs, || {
        for _ in 0..3 {
            assert!(admitted(&s, &req(id, t0, 100_000, 100_000)));
        }
    });
    let decisions: std::collections::BTreeSet<&str> = asked
        .iter()
        .filter(|l| l.contains("\"HGETALL\"") || l.contains("\"EVALSHA\""))
        .map(|l| sender(l))
        .collect();
    assert_eq!(
        decisions.len(),
        1,
        "the request path's one connection: {asked:#?}"
    );
    let (calls, back) = store_calls_during(&addrs, || {
        assert!(s.flush(Duration::from_secs(10)), "given back");
    });
    assert!(calls >= 1, "a grant was given back: {back:#?}");
    for l in back.iter().filter(|l| l.contains("\"EVALSHA\"")) {
        assert!(
            !decisions.contains(sender(l)),
            "a give-back on the decisions' connection: {l}"
        );
    }
}
