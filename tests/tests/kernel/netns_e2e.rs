//! End to end: the real daemon binary attached (XDP or TC) to one end of a veth pair between two
//! network namespaces this test creates, real TCP connection attempts from the other end.
//!
//! Covered per mode: connections over the ceiling fail; a locked IP cannot connect while another
//! can; the lock holds after `kill -9` of the daemon; a restarted daemon adopts the pins (one
//! program attached, not two); unlock works at once; `kernel status --json` counters move;
//! `detach` leaves nothing in bpffs or on the interface. The bad-input tests need no root.

use std::io::Read as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use limiter_tests::netns::{require_dataplane, unique_name, VethPair};
use limiter_tests::{daemon_binary, poll};

/// A refused connection attempt gives up after this long (no SYN retransmit happens before 1 s).
const REFUSED: Duration = Duration::from_millis(300);
/// An allowed attempt gets this long, so a busy machine does not turn a pass into a failure.
const ALLOWED: Duration = Duration::from_secs(3);
const ANON_BURST: u32 = 3;

/// Runs a CLI command of the daemon binary; returns (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(daemon_binary())
        .args(args)
        .output()
        .expect("running limiter-daemon");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cli_ok(args: &[&str]) -> String {
    let (code, out, err) = cli(args);
    assert_eq!(code, 0, "limiter-daemon {args:?} failed: {out}{err}");
    out
}

/// A unique pin directory, removed (with everything attached through it) on drop.
struct Pins {
    path: PathBuf,
}

impl Pins {
    fn new() -> Self {
        Pins {
            path: PathBuf::from("/sys/fs/bpf").join(unique_name("limiter-e2e-")),
        }
    }
    fn arg(&self) -> &str {
        self.path.to_str().expect("utf-8 pin path")
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        if self.path.exists() {
            let _ = Command::new(daemon_binary())
                .args(["detach", "--pin-path", self.arg()])
                .output();
        }
    }
}

/// The daemon running inside the server namespace (network namespace only: bpffs stays the
/// host's, which `ip netns exec` would hide by remounting /sys).
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(pair: &VethPair, config: &Path, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("nsenter")
            .arg(format!("--net={}", pair.server.path().display()))
            .arg(daemon_binary())
            .arg("run")
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info,limiter_daemon::kernel::events=debug")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("starting the daemon under nsenter");
        let mut d = Daemon { child, log };
        d.wait_for_log("kernel dataplane ready");
        d
    }

    fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn wait_for_log(&mut self, needle: &str) -> String {
        let what = format!("daemon log line {needle:?}");
        poll(Duration::from_secs(20), &what, || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "daemon exited with {status} before {what}:\n{}",
                    self.log_text()
                );
            }
            let text = self.log_text();
            text.contains(needle).then_some(text)
        })
    }

    fn kill9(mut self) {
        self.child.kill().expect("kill -9 the daemon");
        self.child.wait().expect("reaping the daemon");
    }

    fn terminate(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signalling our own child by its pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = poll(Duration::from_secs(10), "daemon exit after SIGTERM", || {
            self.child.try_wait().expect("waiting for the daemon")
        });
        assert!(
            status.success(),
            "daemon exited with {status}:\n{}",
            self.log_text()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- daemon log ---\n{}", self.log_text());
        }
    }
}

fn write_config(dir: &Path, pins: &Pins, iface: &str, attach: &str, port: u16) -> PathBuf {
    let path = dir.join("limiter.toml");
    std::fs::write(
        &path,
        format!(
            "[kernel]\nmode = \"required\"\nattach = \"{attach}\"\ninterfaces = [\"{iface}\"]\n\
             pin_path = \"{}\"\nprotected_ports = [{port}]\nevent_sample_every = 1\n\n\
             [kernel.ceiling.anon]\nburst = {ANON_BURST}\nper_second = 1\n\n\
             [store]\nstate_dir = \"{}\"\n\n[metrics]\nlisten = \"\"\n",
            pins.arg(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    path
}

fn status_json(pins: &Pins) -> serde_json::Value {
    let out = cli_ok(&["kernel", "status", "--json", "--pin-path", pins.arg()]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {out}"))
}

fn counter(pins: &Pins, name: &str) -> u64 {
    let v = status_json(pins);
    v["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {v}"))
}

fn can_connect(pair: &VethPair, from: Ipv4Addr, port: u16) -> bool {
    pair.connect_from(from, port, ALLOWED)
}

/// Asserts that `from` cannot connect, and that the kernel counted the drop under `counter_name`.
fn assert_refused(pair: &VethPair, pins: &Pins, from: Ipv4Addr, port: u16, counter_name: &str) {
    let before = counter(pins, counter_name);
    assert!(
        !pair.connect_from(from, port, REFUSED),
        "{from} connected but should be refused ({counter_name})"
    );
    let after = counter(pins, counter_name);
    assert!(
        after > before,
        "{from}'s refused SYN was not counted as {counter_name} ({before} -> {after})"
    );
}

/// Connects from `from` until an attempt is refused; returns how many passed. The first
/// `expected` attempts get the generous timeout. Panics if nothing is refused.
fn connect_until_refused(pair: &VethPair, from: Ipv4Addr, port: u16, expected: u32) -> u32 {
    let mut passed = 0u32;
    for _ in 0..(expected + 20) {
        let timeout = if passed < expected { ALLOWED } else { REFUSED };
        if !pair.connect_from(from, port, timeout) {
            return passed;
        }
        passed += 1;
    }
    panic!("{from} was never refused after {passed} connections");
}

fn scenario(attach: &str, expect_prog: &str) {
    if !require_dataplane() {
        return;
    }
    let _ = daemon_binary();
    let tmp = tempfile::tempdir().unwrap();
    let pair = VethPair::new("lime2e", 5);
    let pins = Pins::new();
    let listener = pair.listen();
    let port = listener.local_addr().unwrap().port();
    let config = write_config(tmp.path(), &pins, &pair.server_if, attach, port);
    let [ceiling_ip, control_ip, locked_ip, control2_ip, control3_ip] = pair.client_ips[..] else {
        panic!("five client addresses expected");
    };

    // Start: one program attached, in the requested mode.
    let daemon = Daemon::start(&pair, &config, tmp.path().join("daemon1.log"));
    assert_eq!(pair.attached_programs(), vec![expect_prog.to_string()]);

    // Ceiling: the anonymous burst passes, then new connections are dropped (refill is 1/s, so
    // a slow run may earn a token or two more, never an unbounded number).
    let started = Instant::now();
    let passed = connect_until_refused(&pair, ceiling_ip, port, ANON_BURST);
    let slack = started.elapsed().as_secs() as u32 + 1;
    assert!(
        passed >= ANON_BURST && passed <= ANON_BURST + slack,
        "{passed} connections passed; the ceiling is a burst of {ANON_BURST} + 1/s"
    );
    let st = status_json(&pins);
    assert!(
        st["counters"]["drop_ceiling"].as_u64().unwrap() >= 1,
        "{st}"
    );
    assert!(
        st["counters"]["pass_syn"].as_u64().unwrap() >= u64::from(ANON_BURST),
        "{st}"
    );
    assert_eq!(st["mode"], attach_mode_name(attach), "{st}");
    assert_eq!(
        st["interfaces"][0]["iface"],
        pair.server_if.as_str(),
        "{st}"
    );
    let bucket_fill = st["maps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "LIM_BUCKET")
        .expect("bucket fill")["entries"]
        .as_u64()
        .unwrap();
    assert!(bucket_fill >= 1, "{st}");
    // Another client is unaffected by the first one's ceiling.
    assert!(
        can_connect(&pair, control_ip, port),
        "{control_ip} should connect"
    );

    // Lockout through the CLI: the locked IP is dropped, another client still connects.
    cli_ok(&[
        "kernel",
        "lock",
        &locked_ip.to_string(),
        "--for",
        "10m",
        "--pin-path",
        pins.arg(),
    ]);
    assert_refused(&pair, &pins, locked_ip, port, "drop_locked");
    assert!(
        can_connect(&pair, control_ip, port),
        "{control_ip} should still connect"
    );

    // kill -9: the pins keep the program attached and the lock in force.
    daemon.kill9();
    assert_eq!(pair.attached_programs(), vec![expect_prog.to_string()]);
    assert_refused(&pair, &pins, locked_ip, port, "drop_locked");
    assert!(
        can_connect(&pair, control2_ip, port),
        "{control2_ip} should connect"
    );

    // Restart: the daemon adopts the pinned link (one program, not two) and the maps.
    let mut daemon = Daemon::start(&pair, &config, tmp.path().join("daemon2.log"));
    let log = daemon.wait_for_log("kernel dataplane ready");
    assert!(
        log.contains("(adopted)"),
        "restart did not adopt the pinned link:\n{log}"
    );
    assert_eq!(pair.attached_programs(), vec![expect_prog.to_string()]);
    assert_refused(&pair, &pins, locked_ip, port, "drop_locked");
    assert!(
        can_connect(&pair, control3_ip, port),
        "{control3_ip} should connect"
    );

    // Sampled over-ceiling events reach the daemon's log (ring buffer → tracing).
    connect_until_refused(&pair, ceiling_ip, port, 0);
    daemon.wait_for_log("SYN over the connection ceiling");

    // Unlock takes effect at once.
    let out = cli_ok(&[
        "kernel",
        "unlock",
        &locked_ip.to_string(),
        "--pin-path",
        pins.arg(),
    ]);
    assert!(out.contains("unlocked"), "{out}");
    assert!(
        can_connect(&pair, locked_ip, port),
        "{locked_ip} should connect after unlock"
    );

    // Stop (pins stay), then detach: nothing left in bpffs or on the interface.
    daemon.terminate();
    assert_eq!(pair.attached_programs(), vec![expect_prog.to_string()]);
    let out = cli_ok(&["detach", "--pin-path", pins.arg()]);
    assert!(
        out.contains(&format!("detached {}:", pair.server_if)),
        "{out}"
    );
    assert!(
        !pins.path.exists(),
        "{} still exists after detach",
        pins.path.display()
    );
    assert_eq!(pair.attached_programs(), Vec::<String>::new());
    drop(listener);
}

fn attach_mode_name(attach: &str) -> &str {
    match attach {
        "auto" | "xdp" => "xdp",
        other => other,
    }
}

#[test]
fn xdp_end_to_end() {
    scenario("auto", "xdp:limiter_xdp");
}

#[test]
fn tc_end_to_end() {
    scenario("tc", "tcx:limiter_tc");
}

#[test]
fn generic_xdp_end_to_end() {
    scenario("xdp-skb", "xdpgeneric:limiter_xdp");
}

/// A pinned link whose interface disappeared is defunct: a restarted daemon attaches afresh to
/// the new interface of the same name (one program, not zero), and the pinned lockouts still hold.
#[test]
fn restart_after_the_interface_was_recreated_attaches_afresh() {
    if !require_dataplane() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pair = VethPair::new("limrc", 2);
    let pins = Pins::new();
    let listener = pair.listen();
    let port = listener.local_addr().unwrap().port();
    let config = write_config(tmp.path(), &pins, &pair.server_if, "xdp", port);
    let [locked_ip, control_ip] = pair.client_ips[..] else {
        panic!("two client addresses expected");
    };
    let daemon = Daemon::start(&pair, &config, tmp.path().join("daemon1.log"));
    cli_ok(&[
        "kernel",
        "lock",
        &locked_ip.to_string(),
        "--for",
        "10m",
        "--pin-path",
        pins.arg(),
    ]);
    daemon.terminate();

    pair.recreate_link();
    assert_eq!(
        pair.attached_programs(),
        Vec::<String>::new(),
        "a new interface starts bare"
    );
    assert!(
        can_connect(&pair, locked_ip, port),
        "nothing enforces on the new interface yet"
    );

    let mut daemon = Daemon::start(&pair, &config, tmp.path().join("daemon2.log"));
    let log = daemon.wait_for_log("kernel dataplane ready");
    assert!(
        log.contains("attaching afresh"),
        "the defunct link was not noticed:\n{log}"
    );
    assert!(!log.contains("(adopted)"), "{log}");
    assert_eq!(
        pair.attached_programs(),
        vec!["xdp:limiter_xdp".to_string()]
    );
    assert_refused(&pair, &pins, locked_ip, port, "drop_locked");
    assert!(
        can_connect(&pair, control_ip, port),
        "{control_ip} should connect"
    );
    daemon.terminate();
    cli_ok(&["detach", "--pin-path", pins.arg()]);
    assert_eq!(pair.attached_programs(), Vec::<String>::new());
    assert!(!pins.path.exists());
}

// ---- bad input: exit code 2 with a message naming the value (no root needed) ----------------

fn assert_usage_error(args: &[&str], needle: &str) {
    let (code, out, err) = cli(args);
    assert_eq!(code, 2, "limiter-daemon {args:?} exited {code}: {out}{err}");
    assert!(
        err.contains(needle),
        "limiter-daemon {args:?}: stderr does not mention {needle:?}: {err}"
    );
}

#[test]
fn bad_ip_is_a_usage_error() {
    assert_usage_error(
        &["kernel", "lock", "10.0.0.300", "--for", "1m"],
        "\"10.0.0.300\" is not an IP address",
    );
    assert_usage_error(
        &["kernel", "unlock", "example.com"],
        "\"example.com\" is not an IP address",
    );
}

#[test]
fn bad_cidr_is_a_usage_error() {
    assert_usage_error(
        &["kernel", "allow", "10.0.0.0/33"],
        "\"10.0.0.0/33\" is not a CIDR",
    );
    assert_usage_error(&["kernel", "deny", "10.0.0.1/8"], "did you mean 10.0.0.0/8");
    assert_usage_error(&["kernel", "undeny", "fe80::/200"], "is not a CIDR");
}

#[test]
fn bad_duration_is_a_usage_error() {
    assert_usage_error(
        &["kernel", "lock", "192.0.2.1", "--for", "soon"],
        "\"soon\" is not a duration",
    );
    assert_usage_error(
        &["kernel", "lock", "192.0.2.1", "--for", "0s"],
        "longer than zero",
    );
    assert_usage_error(
        &["kernel", "deny", "192.0.2.0/24", "--for", "10"],
        "\"10\" is not a duration",
    );
    // Through humantime `10M` was ten months: units are s, m, h, d, w, case-sensitive.
    assert_usage_error(
        &["kernel", "lock", "192.0.2.1", "--for", "10M"],
        "\"M\" is not a unit",
    );
    assert_usage_error(
        &["kernel", "deny", "192.0.2.0/24", "--for", "1y"],
        "\"y\" is not a unit",
    );
    assert_usage_error(
        &["kernel", "lock", "192.0.2.1", "--for", "1m", "--level", "0"],
        "--level",
    );
}

#[test]
fn bad_config_is_a_usage_error_naming_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.toml");
    std::fs::write(&path, "[kernel]\nmode = \"auto\"\nattach = \"sideways\"\n").unwrap();
    assert_usage_error(&["run", "--config", path.to_str().unwrap()], "line 3");
    std::fs::write(&path, "[kernel.ceiling.anon]\nburst = 0\nper_second = 1\n").unwrap();
    assert_usage_error(
        &["run", "--config", path.to_str().unwrap()],
        "kernel.ceiling.anon.burst",
    );
}

/// `mode = "auto"` without a usable object: the daemon says so loudly and keeps running
/// userspace-only; `required` makes the same situation fatal, naming the build command.
#[test]
fn kernel_mode_auto_degrades_and_required_fails_without_the_object() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("limiter.toml");
    let missing = tmp.path().join("no-such-object");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"required\"\ninterfaces = [\"lo\"]\n\n[store]\nstate_dir = \"{}\"\n\n[metrics]\nlisten = \"\"\n",
            tmp.path().join("state").display()
        ),
    )
    .unwrap();
    let out = Command::new(daemon_binary())
        .args(["run", "--config", config.to_str().unwrap()])
        .env("LIMITER_EBPF_OBJECT", &missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cargo xtask build-ebpf"), "{err}");

    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"auto\"\ninterfaces = [\"lo\"]\n\n[store]\nstate_dir = \"{}\"\n\n[metrics]\nlisten = \"\"\n",
            tmp.path().join("state").display()
        ),
    )
    .unwrap();
    let log = tmp.path().join("auto.log");
    let child = Command::new(daemon_binary())
        .args(["run", "--config", config.to_str().unwrap()])
        .env("LIMITER_EBPF_OBJECT", &missing)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut daemon = Daemon { child, log };
    let text = daemon.wait_for_log("KERNEL DATAPLANE NOT RUNNING");
    assert!(text.contains("cargo xtask build-ebpf"), "{text}");
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "auto mode must keep running"
    );
    daemon.terminate();
}

#[test]
fn operating_on_missing_pins_fails_cleanly() {
    let (code, _out, err) = cli(&[
        "kernel",
        "status",
        "--pin-path",
        "/sys/fs/bpf/limiter-e2e-none",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no limiter maps pinned under /sys/fs/bpf/limiter-e2e-none"),
        "{err}"
    );
}

/// The probe's P1: behind a trusted proxy, a client whose `X-Forwarded-For` names no usable
/// address (junk, `unknown`, empty) used to be metered as the proxy itself, so its burst locked
/// the proxy out in the kernel and every client behind it was dropped. Now such requests are one
/// unattributed caller of the proxy: refused past the burst (429), never struck, never locked;
/// the proxy keeps connecting and a real client behind it is served. A named client that bursts
/// is still locked (in the kernel's lockout map).
#[test]
fn a_junk_forwarding_field_never_locks_the_trusted_proxy_in_the_kernel() {
    if !require_dataplane() {
        return;
    }
    let _ = daemon_binary();
    let tmp = tempfile::tempdir().unwrap();
    let pair = VethPair::new("limxff", 1);
    let pins = Pins::new();
    let proxy_ip = pair.client_ips[0];
    let upstream = pair.serve_ok();
    // A port for the daemon's proxy listener, free in the server namespace (nothing else runs
    // there).
    let port = {
        let probe = pair.listen();
        probe.local_addr().unwrap().port()
    };
    let config = tmp.path().join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{iface}\"]\n\
             pin_path = \"{pins}\"\nprotected_ports = [{port}]\n\n\
             [kernel.ceiling.anon]\nburst = 1000\nper_second = 1000\n\n\
             [tiers.anon]\nburst = 4\n\n[identity]\ntrusted_proxies = [\"{proxy_ip}\"]\n\n\
             [http]\nproxy_listen = [\"{server}:{port}\"]\napi_listen = []\n\
             upstream = \"http://{upstream}\"\n\n\
             [store]\nstate_dir = \"{state}\"\n\n[metrics]\nlisten = \"\"\n\n[admin]\nlisten = \"\"\n",
            iface = pair.server_if,
            pins = pins.arg(),
            server = pair.server_ip,
            state = tmp.path().join("state").display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&pair, &config, tmp.path().join("daemon.log"));
    daemon.wait_for_log("reverse proxy listening");
    let get =
        |headers: &[(&str, &str)]| pair.http_get_from(proxy_ip, port, "/page", headers, ALLOWED);
    let lockouts = || {
        let st = status_json(&pins);
        st["maps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "LIM_LOCKOUT")
            .expect("LIM_LOCKOUT fill")["entries"]
            .as_u64()
            .unwrap()
    };

    let mut statuses = Vec::new();
    for junk in [
        "not-an-ip",
        "unknown",
        "",
        "_hidden",
        "not-an-ip",
        "unknown",
        "not-an-ip",
    ] {
        statuses.push(get(&[("x-forwarded-for", junk)]));
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 429, 429, 429].map(Some),
        "the unattributed caller is refused past its burst and never dropped"
    );
    assert_eq!(lockouts(), 0, "nothing was locked in the kernel");
    assert_eq!(
        get(&[("x-forwarded-for", "198.51.100.11")]),
        Some(200),
        "a real client behind the proxy is served"
    );
    assert_eq!(get(&[]), Some(200), "the proxy's own requests are served");

    // A named client that bursts is locked as before: strikes still work behind the proxy.
    let noisy: Vec<Option<u16>> = (0..6)
        .map(|_| get(&[("x-forwarded-for", "198.51.100.12")]))
        .collect();
    assert_eq!(noisy[4], Some(429), "{noisy:?}");
    poll(
        Duration::from_secs(10),
        "the noisy client's kernel lockout",
        || (lockouts() == 1).then_some(()),
    );
    assert_eq!(
        get(&[("x-forwarded-for", "198.51.100.13")]),
        Some(200),
        "the proxy itself was not locked"
    );
    daemon.terminate();
}
