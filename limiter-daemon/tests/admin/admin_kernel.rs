//! Lockouts made and lifted through the admin API reach the real kernel: the daemon binary runs
//! in the server namespace of a veth pair this test creates (the dataplane attached with TC,
//! pins in a private directory), and TCP handshakes from the client namespace show what the
//! kernel drops. Also `limiter-daemon kernel unlock` while the daemon runs (it goes through the
//! admin API, so the store agrees) and with it stopped (pins and store).
//! An IPv6 CIDR lockout likewise, on IPv6 addresses added to the pair.
//! Needs root and the built object: skipped outside CI without them, a failure under `CI=true`.

#[allow(
    dead_code,
    reason = "this test starts the daemon binary, not an in-process dataplane"
)]
use crate::kernel_support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::netns::VethPair;
use serde_json::json;

const SHORT: Duration = Duration::from_millis(300);

fn connects(pair: &VethPair, from: Ipv4Addr, port: u16) -> bool {
    pair.connect_from(from, port, SHORT)
}

/// Polls until `from` connects (`true`) or is dropped (`false`), as `want` says.
fn until_connects(pair: &VethPair, from: Ipv4Addr, port: u16, want: bool, what: &str) {
    eventually(what, || (connects(pair, from, port) == want).then_some(()));
}

/// `nsenter`'s argument for the server namespace. `nsenter --net`, not `ip netns exec`: the
/// latter remounts /sys, hiding the bpffs pins.
fn nsenter_arg(pair: &VethPair) -> String {
    format!("--net={}", pair.server.path().display())
}

/// The daemon in the server namespace, attached with TC to the server's interface, protecting
/// `port`, its pins under `pins`.
fn start_in_server_ns(dir: &Path, pair: &VethPair, pins: &Path, port: u16) -> Daemon {
    Daemon::start_in_server_ns(dir, pair, pins, port, "")
}

#[test]
fn admin_lockouts_drop_packets_lift_and_stay_lifted() {
    let Some(kernel_support::Dataplane {
        pair,
        listener: _listener,
        port,
        pins,
    }) = kernel_support::dataplane("lma", 3, "limiter-admin-")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let netns = nsenter_arg(&pair);
    let mut d = start_in_server_ns(dir.path(), &pair, &pins.0, port);
    let attached = |d: &Daemon| d.kernel_attached_in(&pair.server).then_some(());
    eventually("the dataplane to attach", || attached(&d));
    let admin = |d: &Daemon, method: &str, path: &str, body: Option<serde_json::Value>| {
        pair.server.run(|| d.admin(method, path, body.as_ref()))
    };
    let [a, b, c] = [pair.client_ips[0], pair.client_ips[1], pair.client_ips[2]];
    assert!(connects(&pair, a, port), "{a} connects before any lockout");

    // An address: dropped at once, lifted at once.
    let r = admin(
        &d,
        "POST",
        "/admin/v1/lockouts",
        Some(json!({"ip": a.to_string(), "for": "10m"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(!connects(&pair, a, port), "{a} is locked out in the kernel");
    assert!(connects(&pair, b, port), "{b} is not");
    let client = admin(&d, "GET", &format!("/admin/v1/clients/{a}"), None).json();
    assert_eq!(client["kernel"]["lockout"]["level"], 1, "{client}");
    let r = admin(&d, "DELETE", &format!("/admin/v1/lockouts/{a}"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(connects(&pair, a, port), "{a} connects again after DELETE");

    // A restart does not push the lifted lockout back.
    d.restart();
    eventually("the dataplane to attach again", || attached(&d));
    assert!(
        connects(&pair, a, port),
        "{a} still connects after a restart"
    );
    assert_eq!(
        admin(&d, "GET", "/admin/v1/lockouts", None).json()["items"],
        json!([])
    );

    // A CIDR: two addresses inside it dropped, one outside not.
    let cidr = format!("{a}/31");
    assert!(
        a.octets()[3] % 2 == 0 && b.octets()[3] == a.octets()[3] + 1,
        "{a} and {b} share a /31"
    );
    let r = admin(
        &d,
        "POST",
        "/admin/v1/lockouts",
        Some(json!({"ip": cidr, "for": "10m", "reason": "range"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(!connects(&pair, a, port), "{a} inside {cidr}");
    assert!(!connects(&pair, b, port), "{b} inside {cidr}");
    assert!(connects(&pair, c, port), "{c} outside {cidr}");
    let r = admin(
        &d,
        "DELETE",
        &format!("/admin/v1/lockouts/{}", cidr.replace('/', "%2F")),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    until_connects(&pair, a, port, true, "the CIDR lockout to lift");

    // `limiter-daemon kernel lock|unlock` while the daemon runs: through the admin API.
    let config = d.config.clone();
    let cli = |args: &[&str]| {
        let out = Command::new("nsenter")
            .args([
                netns.as_str(),
                env!("CARGO_BIN_EXE_limiter-daemon"),
                "kernel",
            ])
            .args(args)
            .args(["--pin-path"])
            .arg(&pins.0)
            .args(["--config"])
            .arg(&config)
            .env_remove("LIMITER_ADMIN_TOKEN")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = cli(&["lock", &a.to_string(), "--for", "10m"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("admin API"), "{out}");
    assert!(!connects(&pair, a, port));
    let listed = admin(&d, "GET", "/admin/v1/lockouts", None).json();
    assert_eq!(
        listed["items"][0]["ip"],
        a.to_string(),
        "the store knows: {listed}"
    );
    let (code, out) = cli(&["unlock", &a.to_string()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("admin API"), "{out}");
    assert!(connects(&pair, a, port));
    assert_eq!(
        admin(&d, "GET", "/admin/v1/lockouts", None).json()["items"],
        json!([])
    );

    // With the daemon stopped: the pins and the store; the next start does not bring it back.
    let r = admin(
        &d,
        "POST",
        "/admin/v1/lockouts",
        Some(json!({"ip": a.to_string(), "for": "10m"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    d.stop();
    assert!(
        !connects(&pair, a, port),
        "the pins enforce with the daemon stopped"
    );
    let (code, out) = cli(&["unlock", &a.to_string()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("store"), "{out}");
    assert!(connects(&pair, a, port));
    d.spawn();
    eventually("the dataplane to attach after the offline unlock", || {
        attached(&d)
    });
    assert!(
        connects(&pair, a, port),
        "the store did not push the lockout back"
    );
}

/// The server's IPv6 address, and the client's: four inside `V6_NET` and one just outside it.
const V6_SERVER: &str = "fd77::1";
const V6_NET: &str = "fd77::4/126";
const V6_INSIDE: [&str; 4] = ["fd77::4", "fd77::5", "fd77::6", "fd77::7"];
const V6_OUTSIDE: &str = "fd77::8";

/// One TCP handshake from `from` (a client address) to `[V6_SERVER]:port`, as [`connects`].
fn connects_v6(pair: &VethPair, from: &str, port: u16) -> bool {
    use socket2::{Domain, Protocol, Socket, Type};
    let from: std::net::SocketAddr = format!("[{from}]:0").parse().unwrap();
    let to: std::net::SocketAddr = format!("[{V6_SERVER}]:{port}").parse().unwrap();
    pair.client.run(move || {
        let sock = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)).unwrap();
        sock.bind(&from.into()).unwrap();
        sock.connect_timeout(&to.into(), SHORT).is_ok()
    })
}

#[test]
fn an_ipv6_cidr_lockout_drops_addresses_inside_it_and_not_outside() {
    let Some(kernel_support::Dataplane {
        pair,
        listener: _listener,
        port,
        pins,
    }) = kernel_support::dataplane("lm6", 1, "limiter-admin6-")
    else {
        return;
    };
    // IPv6 on the pair (`nodad`: usable at once), and a listener on the protected port.
    pair.server.ip(&[
        "addr",
        "add",
        &format!("{V6_SERVER}/64"),
        "dev",
        &pair.server_if,
        "nodad",
    ]);
    for ip in V6_INSIDE.iter().chain([&V6_OUTSIDE]) {
        pair.client.ip(&[
            "addr",
            "add",
            &format!("{ip}/64"),
            "dev",
            &pair.client_if,
            "nodad",
        ]);
    }
    let _listener6 = pair.server.run(|| {
        std::net::TcpListener::bind(format!("[{V6_SERVER}]:{port}")).expect("IPv6 listener")
    });
    let dir = tempfile::tempdir().unwrap();
    let d = start_in_server_ns(dir.path(), &pair, &pins.0, port);
    let admin = |method: &str, path: &str, body: Option<serde_json::Value>| {
        pair.server.run(|| d.admin(method, path, body.as_ref()))
    };
    eventually("the dataplane to attach", || {
        let r = pair.server.run(|| {
            limiter_tests::client::try_http(
                d.admin,
                "GET",
                "/admin/v1/kernel",
                &[("authorization", &format!("Bearer {}", d.token()))],
                None,
            )
        });
        r.filter(|r| r.status == 200 && r.json()["attached"] == true)
    });
    // Every address connects before the lockout (neighbour discovery may take a moment).
    for ip in V6_INSIDE.iter().chain([&V6_OUTSIDE]) {
        eventually(&format!("{ip} to connect before any lockout"), || {
            connects_v6(&pair, ip, port).then_some(())
        });
    }

    let r = admin(
        "POST",
        "/admin/v1/lockouts",
        Some(json!({"ip": V6_NET, "for": "10m", "reason": "v6 range"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    for ip in V6_INSIDE {
        assert!(!connects_v6(&pair, ip, port), "{ip} inside {V6_NET}");
    }
    assert!(
        connects_v6(&pair, V6_OUTSIDE, port),
        "{V6_OUTSIDE} outside {V6_NET}"
    );
    let listed = admin("GET", "/admin/v1/lockouts", None).json();
    assert_eq!(listed["items"][0]["ip"], V6_NET, "{listed}");

    let r = admin(
        "DELETE",
        &format!("/admin/v1/lockouts/{}", V6_NET.replace('/', "%2F")),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    eventually("the IPv6 CIDR lockout to lift", || {
        connects_v6(&pair, V6_INSIDE[0], port).then_some(())
    });
}
