//! Two hosts of a fleet on one real `valkey-server`: two daemon binaries, each in the server
//! namespace of its own veth pair with the kernel program attached, both pairs using the same
//! client addresses (as two hosts behind one load balancer see one client). The Valkey server
//! runs in the test's namespace, reached by each host over a link of its own.
//!
//! A burst on host A (through A's decision API) locks the client out; a TCP connect from that
//! address to host B then fails: the time from A's decision to B's drop is printed. An unlock on
//! B frees the address on both; after B restarts, a lockout made meanwhile is still enforced.
//! Needs root, BPF and valkey-server: a failure under `CI=true` without them.

#[allow(dead_code, reason = "only the fixture is used")]
use crate::kernel_support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::netns::{run, VethPair};
use limiter_tests::testrun::object_path;
use serde_json::json;

const SHORT: Duration = Duration::from_millis(100);

/// A link from this namespace (`10.250.<n>.1`) into `pair`'s server namespace (`.2`), so the
/// host there reaches the Valkey server here.
fn link_to_store(pair: &VethPair, n: u8) -> String {
    let here = limiter_tests::netns::unique_name("fl");
    run(std::process::Command::new("ip").args([
        "link",
        "add",
        &here,
        "type",
        "veth",
        "peer",
        "name",
        "lim-store",
        "netns",
        pair.server.name(),
    ]));
    run(std::process::Command::new("ip").args([
        "addr",
        "add",
        &format!("10.250.{n}.1/30"),
        "dev",
        &here,
    ]));
    run(std::process::Command::new("ip").args(["link", "set", &here, "up"]));
    pair.server.ip(&[
        "addr",
        "add",
        &format!("10.250.{n}.2/30"),
        "dev",
        "lim-store",
    ]);
    pair.server.ip(&["link", "set", "lim-store", "up"]);
    pair.server.ip(&["link", "set", "lo", "up"]);
    format!("10.250.{n}.1")
}

/// A host: the daemon in `pair`'s server namespace, kernel attached with TC to its interface,
/// the store the Valkey server at `store`.
fn host(dir: &Path, pair: &VethPair, pins: &Path, port: u16, store: &str) -> Daemon {
    let kernel = format!(
        "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
         protected_ports = [{port}]\n\
         # The probes below connect in a tight loop: no connection ceiling may drop them.\n\
         [kernel.ceiling.anon]\nburst = 1000000\nper_second = 1000000\n",
        pair.server_if,
        pins.display()
    );
    let store = format!(
        "backend = \"valkey\"\nvalkey_address = \"{store}\"\nkey_prefix = \"fleet:\"\n\
         hash_secret = \"a fleet-wide secret of 32 bytes!\"\n"
    );
    let extra = "[tiers.anon]\nburst = 5\nhourly = 1000\n";
    Daemon::start_store(
        dir,
        &kernel,
        &store,
        extra,
        false,
        vec![
            "nsenter".to_string(),
            format!("--net={}", pair.server.path().display()),
        ],
        vec![(
            "LIMITER_EBPF_OBJECT".to_string(),
            object_path().display().to_string(),
        )],
    )
}

fn connects(pair: &VethPair, from: Ipv4Addr, port: u16) -> bool {
    pair.connect_from(from, port, SHORT)
}

#[test]
fn a_lockout_on_one_host_drops_the_client_on_the_other() {
    let Some(a) = kernel_support::dataplane("fla", 2, "limiter-fla-") else {
        return;
    };
    let Some(b) = kernel_support::dataplane("flb", 2, "limiter-flb-") else {
        return;
    };
    // The probes connect in a loop: accept and close, so no backlog fills up and drops SYNs.
    for l in [&a.listener, &b.listener] {
        let l = l.try_clone().unwrap();
        std::thread::spawn(move || l.incoming().for_each(drop));
    }
    let (store_a, store_b) = (link_to_store(&a.pair, 1), link_to_store(&b.pair, 2));
    let port = limiter_tests::free_port();
    let Some(_valkey) = limiter_tests::valkey::start_with(
        port,
        &[
            "--bind",
            "127.0.0.1",
            &store_a,
            &store_b,
            "--protected-mode",
            "no",
        ],
    ) else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host_a = host(
        dir_a.path(),
        &a.pair,
        &a.pins.0,
        a.port,
        &format!("{store_a}:{port}"),
    );
    let mut host_b = host(
        dir_b.path(),
        &b.pair,
        &b.pins.0,
        b.port,
        &format!("{store_b}:{port}"),
    );
    let in_a = |f: &(dyn Fn() -> serde_json::Value + Sync)| a.pair.server.run(f);
    let in_b = |f: &(dyn Fn() -> serde_json::Value + Sync)| b.pair.server.run(f);
    let ready = |pair: &VethPair, d: &Daemon| {
        eventually("the host to attach and reach the store", || {
            d.kernel_attached_in(&pair.server).then_some(())
        });
    };
    ready(&a.pair, &host_a);
    ready(&b.pair, &host_b);

    let client = a.pair.client_ips[0];
    let other = a.pair.client_ips[1];
    assert_eq!(
        client, b.pair.client_ips[0],
        "one client, as both hosts see it"
    );
    assert!(
        connects(&b.pair, client, b.port),
        "{client} reaches B before any lockout"
    );

    // A burst at A: the sixth decision within the minute strikes.
    let mut struck = None;
    for _ in 0..20 {
        let d = in_a(&|| host_a.decide(&client.to_string()));
        if d["action"] == "reject" {
            struck = Some((Instant::now(), d));
            break;
        }
    }
    let (at, d) = struck.expect("the burst is refused within 20 decisions");
    assert_eq!(d["reason"], "burst", "{d}");
    // Dropped by B's kernel: B never saw a request from it. The lockout reached B between
    // the start of the last handshake that completed and the start of the first that failed.
    let mut last_ok = Duration::ZERO;
    let failed_from = loop {
        let started = at.elapsed();
        if !connects(&b.pair, client, b.port) {
            break started;
        }
        last_ok = started;
        assert!(
            at.elapsed() < Duration::from_secs(10),
            "B never dropped {client}"
        );
    };
    println!(
        "lockout propagation, decision on A to B's kernel: between {last_ok:?} and {failed_from:?}"
    );
    assert!(
        connects(&b.pair, other, b.port),
        "{other} is not locked out"
    );
    assert!(
        !connects(&a.pair, client, a.port),
        "A's kernel drops it too"
    );

    // An unlock on B frees it on both.
    let r = b
        .pair
        .server
        .run(|| host_b.admin("DELETE", &format!("/admin/v1/lockouts/{client}"), None));
    assert_eq!(r.status, 200, "{}", r.body);
    eventually("B to let it in", || {
        connects(&b.pair, client, b.port).then_some(())
    });
    eventually("A to let it in", || {
        connects(&a.pair, client, a.port).then_some(())
    });
    let listed = in_a(&|| host_a.admin("GET", "/admin/v1/lockouts", None).json());
    assert_eq!(listed["items"], json!([]), "A's store agrees: {listed}");

    // A lockout made while B is down is enforced by B once it is back.
    host_b.stop();
    let r = a.pair.server.run(|| {
        host_a.admin(
            "POST",
            "/admin/v1/lockouts",
            Some(&json!({"ip": client.to_string(), "for": "10m", "reason": "fleet test"})),
        )
    });
    assert_eq!(r.status, 201, "{}", r.body);
    host_b.spawn();
    ready(&b.pair, &host_b);
    eventually("B to enforce the lockout made while it was down", || {
        (!connects(&b.pair, client, b.port)).then_some(())
    });
    let seen = in_b(&|| host_b.admin("GET", "/admin/v1/lockouts", None).json());
    assert_eq!(seen["items"][0]["ip"], client.to_string(), "{seen}");
}
