//! Lockouts made and lifted through the admin API reach the real kernel: the daemon binary runs
//! in the server namespace of a veth pair this test creates (the dataplane attached with TC,
//! pins in a private directory), and TCP handshakes from the client namespace show what the
//! kernel drops. Also `limiter-daemon kernel unlock` while the daemon runs (it goes through the
//! admin API, so the store agrees) and with it stopped (pins and store).
//! Needs root and the built object: skipped outside CI without them, a failure under `CI=true`.

mod admin_support;
#[allow(
    dead_code,
    reason = "this test starts the daemon binary, not an in-process dataplane"
)]
mod kernel_support;

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use admin_support::{eventually, Daemon};
use limiter_tests::netns::VethPair;
use limiter_tests::testrun::object_path;
use serde_json::json;

const SHORT: Duration = Duration::from_millis(300);

fn connects(pair: &VethPair, from: Ipv4Addr, port: u16) -> bool {
    pair.connect_from(from, port, SHORT)
}

/// Polls until `from` connects (`true`) or is dropped (`false`), as `want` says.
fn until_connects(pair: &VethPair, from: Ipv4Addr, port: u16, want: bool, what: &str) {
    eventually(what, || (connects(pair, from, port) == want).then_some(()));
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
    let kernel = format!(
        "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
         protected_ports = [{port}]\n",
        pair.server_if,
        pins.0.display()
    );
    // `nsenter --net`, not `ip netns exec`: the latter remounts /sys, hiding the bpffs pins.
    let netns = format!("--net={}", pair.server.path().display());
    let wrapper = vec!["nsenter".to_string(), netns.clone()];
    let env = vec![(
        "LIMITER_EBPF_OBJECT".to_string(),
        object_path().display().to_string(),
    )];
    let mut d = Daemon::start_with(dir.path(), &kernel, "", wrapper, env);
    let attached = |d: &Daemon| {
        pair.server.run(|| {
            admin_support::try_http(
                d.admin,
                "GET",
                "/admin/v1/kernel",
                &[("authorization", &format!("Bearer {}", d.token()))],
                None,
            )
            .filter(|r| r.status == 200 && r.json()["attached"] == true)
        })
    };
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
