//! Leases between two daemon binaries on one real `valkey-server` (docs/fleet.md#leases), the
//! default for `backend = "valkey"`: an hourly budget spent alternately through both hosts
//! admits exactly the budget; a runaway loop is struck and locked on both; and Valkey killed
//! while a host holds leases fails no request and admits no more than the leases it held plus
//! what the local fallback admits.

use limiter_tests::client::try_http;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::free_port;
use limiter_tests::valkey::start_on;

/// A host of the fleet on the Valkey at `port` (both hosts share the key prefix), metering
/// callers behind the trusted proxy 127.0.0.1 by their `X-Forwarded-For`.
fn host(dir: &std::path::Path, port: u16, name: &str, tiers: &str) -> Daemon {
    host_with(dir, port, name, tiers, "2s")
}

/// With `decision_timeout`: generous where exact counts are checked (a loaded machine must not
/// fall back to local counting), short where the store goes away (a probe of a dead store
/// waits on its reconnect for up to that long).
fn host_with(dir: &std::path::Path, port: u16, name: &str, tiers: &str, timeout: &str) -> Daemon {
    let store = format!(
        "backend = \"valkey\"\nvalkey_address = \"127.0.0.1:{port}\"\nkey_prefix = \"ld:\"\n\
         host_id = \"{name}\"\ndecision_timeout = \"{timeout}\"\nprobe_interval = \"500ms\"\n"
    );
    let extra = format!("[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n{tiers}");
    let d = Daemon::start_store(dir, "", &store, &extra, true, Vec::new(), Vec::new());
    eventually("the store to be used", || {
        let r = try_http(d.metrics.unwrap(), "GET", "/readyz", &[], None)?;
        (r.status == 200).then_some(())
    });
    d
}

/// One request through `d`'s proxy from `client`: its status.
fn get(d: &Daemon, client: &str) -> u16 {
    try_http(d.proxy, "GET", "/", &[("x-forwarded-for", client)], None).map_or(0, |r| r.status)
}

fn metric(d: &Daemon, name: &str) -> f64 {
    let r = try_http(d.metrics.unwrap(), "GET", "/metrics", &[], None).expect("metrics");
    r.body
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn an_hourly_budget_spent_alternately_through_two_daemons_admits_exactly_the_budget() {
    let port = free_port();
    let Some(_valkey) = start_on(port) else {
        return;
    };
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tiers = "[tiers.anon]\nburst = 60000\nhourly = 1000\n";
    let (a, b) = (
        host(da.path(), port, "a", tiers),
        host(db.path(), port, "b", tiers),
    );
    let client = "198.51.100.22";
    let (mut admitted, mut sent) = (0u32, 0u32);
    // Until 200 refusals in a row: by then every lease either host held was spent or given
    // back, so what was admitted is all the fleet will admit this hour.
    let mut refused_in_a_row = 0;
    while refused_in_a_row < 200 {
        let host = if sent % 2 == 0 { &a } else { &b };
        sent += 1;
        assert!(sent < 5_000, "still admitting after {sent} requests");
        match get(host, client) {
            200 => {
                admitted += 1;
                refused_in_a_row = 0;
            }
            429 => refused_in_a_row += 1,
            s => panic!("request {sent}: status {s}"),
        }
    }
    assert_eq!(
        admitted, 1000,
        "exactly the budget, fleet-wide ({sent} sent)"
    );
    // Both hosts served from leases: most answers without a round trip.
    let local = metric(&a, "limiter_store_lease_answers_total")
        + metric(&b, "limiter_store_lease_answers_total");
    let remote = metric(&a, "limiter_store_remote_decisions_total")
        + metric(&b, "limiter_store_remote_decisions_total");
    assert!(
        local > remote,
        "{local} answered from leases, {remote} round trips"
    );
    println!("{admitted} admitted of {sent}; {local} from leases, {remote} round trips");
}

#[test]
fn a_runaway_loop_is_struck_and_locked_on_both_hosts() {
    let port = free_port();
    let Some(_valkey) = start_on(port) else {
        return;
    };
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tiers = "[tiers.anon]\nburst = 40\nhourly = 100000\n";
    let (a, b) = (
        host(da.path(), port, "a", tiers),
        host(db.path(), port, "b", tiers),
    );
    let client = "198.51.100.33";
    let mut statuses = Vec::new();
    for n in 0..200 {
        statuses.push(get(if n % 2 == 0 { &a } else { &b }, client));
    }
    let admitted = statuses.iter().filter(|&&s| s == 200).count();
    assert!(
        admitted <= 40,
        "the burst of 40 holds fleet-wide: {admitted}"
    );
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 429),
        "{statuses:?}"
    );
    // The burst's strike made a lockout that both hosts enforce.
    for (name, d) in [("a", &a), ("b", &b)] {
        eventually(&format!("the lockout on {name}"), || {
            let v = d.admin("GET", &format!("/admin/v1/clients/{client}"), None);
            (v.status == 200 && !v.json()["lockout"].is_null()).then_some(())
        });
        let r = try_http(d.proxy, "GET", "/", &[("x-forwarded-for", client)], None).unwrap();
        assert_eq!(r.status, 429, "{name}: {}", r.body);
        assert!(r.body.contains("locked"), "{name}: {}", r.body);
    }
}

#[test]
fn valkey_killed_mid_lease_fails_no_request_and_admits_no_more_than_held_plus_fallback() {
    let port = free_port();
    let Some(valkey) = start_on(port) else { return };
    let dir = tempfile::tempdir().unwrap();
    let hourly = 300u32;
    let a = host_with(
        dir.path(),
        port,
        "a",
        &format!("[tiers.anon]\nburst = 60000\nhourly = {hourly}\n"),
        "50ms",
    );
    let client = "198.51.100.44";
    let mut before = 0;
    for _ in 0..200 {
        before += u32::from(get(&a, client) == 200);
    }
    assert_eq!(before, 200, "under the budget everything is admitted");
    drop(valkey);
    let mut during = 0;
    for n in 0..1_000 {
        match get(&a, client) {
            200 => during += 1,
            429 => {}
            s => panic!("request {n} while Valkey is down: status {s}"),
        }
    }
    // What the host held (at most one lease and its refill, lease_max each) plus the local
    // fallback's own count (the budget again, `on_failure = "local"`).
    let bound = 2 * 64 + hourly;
    assert!(
        during <= bound,
        "{during} admitted while Valkey was down, past held leases + fallback ({bound})"
    );
    assert!(during > 0, "the held leases and the fallback admit");
    println!("{during} admitted while Valkey was down (bound {bound})");
}
