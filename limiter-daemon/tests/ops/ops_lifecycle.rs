//! Stopping the real daemon binary: on SIGTERM it stops accepting, and a request held for a
//! scan delay when the signal came still completes (forwarded, 200) within `shutdown_grace`;
//! then the process exits 0. SIGHUP never stops it. The last log line says what stays in the
//! kernel, true for the mode. (That the kernel pins stay is checked on the real dataplane in
//! `ops_kernel_reload.rs` and `tests/tests/netns_e2e.rs`.)

use std::time::{Duration, Instant};

use limiter_tests::client::metrics;
use limiter_tests::client::request;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::free_addr;
use limiter_tests::upstream::Upstream;

#[test]
fn sigterm_lets_a_held_request_finish_within_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::start();
    let (proxy, m) = (free_addr(), free_addr());
    // The second request of the day is over the daily quota of 1: held 1.5 s (soft delay).
    let text = config_text(
        dir.path(),
        &format!(
            "[quota]\nanon = 1\nsoft_delay_ms = 1500\n[default_route]\nover_quota = \"delay\"\n\
             [admin]\nlisten = \"\"\n[http]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{}\"\nshutdown_grace = \"10s\"\n\
             [metrics]\nlisten = \"{m}\"\n",
            up.addr
        ),
    );
    let mut d = Daemon::run(dir.path(), &text, &[], proxy);
    assert_eq!(request(proxy, "GET", "/one", &[], "").status, 200);

    let held = std::thread::spawn(move || {
        let t0 = Instant::now();
        (request(proxy, "GET", "/two", &[], ""), t0.elapsed())
    });
    eventually("the request to be held", || {
        metrics(m)
            .lines()
            .any(|l| l.ends_with("held_requests 1"))
            .then_some(())
    });
    d.signal(libc::SIGHUP);
    d.signal(libc::SIGTERM);
    // New connections are refused at once, while the held one is still waiting.
    eventually("the listener to close", || {
        std::net::TcpStream::connect(proxy).is_err().then_some(())
    });
    assert!(!held.is_finished());
    let (answer, took) = held.join().unwrap();
    assert_eq!(answer.status, 200, "{answer:?}\n{}", d.logs());
    assert_eq!(answer.body, "ok");
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    assert_eq!(up.targets(), ["/one", "/two"]);
    let status = eventually("the daemon's exit", || d.try_wait());
    assert!(status.success(), "{status}\n{}", d.logs());
}

/// The daemon on `[kernel] mode = mode` with its pins under `pins`, stopped with SIGTERM: its
/// log once it has exited 0.
fn log_at_stop(dir: &std::path::Path, mode: &str, pins: &std::path::Path) -> String {
    let up = Upstream::start();
    let proxy = free_addr();
    let text = format!(
        "[kernel]\nmode = \"{mode}\"\npin_path = \"{}\"\n[store]\nstate_dir = \"{}\"\n\
         [admin]\nlisten = \"\"\n[http]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{}\"\n",
        pins.display(),
        dir.join("state").display(),
        up.addr
    );
    let mut d = Daemon::run(dir, &text, &[], proxy);
    d.signal(libc::SIGTERM);
    let status = eventually("the daemon's exit", || d.try_wait());
    assert!(status.success(), "{status}\n{}", d.logs());
    let log = d.logs();
    println!("{mode}: {}", stop_line(&log));
    log
}

/// The line the daemon logs last, saying what stays in the kernel.
fn stop_line(log: &str) -> &str {
    log.lines()
        .rev()
        .find(|l| l.contains("stopped;"))
        .unwrap_or_else(|| panic!("no stop line:\n{log}"))
}

#[test]
fn the_stop_line_says_what_stays_in_the_kernel_for_the_mode() {
    // Off, and nothing pinned: nothing stays, and no pins are claimed.
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("bpf");
    let log = log_at_stop(dir.path(), "off", &pins);
    let line = stop_line(&log);
    assert!(
        line.contains("kernel.mode = \\\"off\\\"") || line.contains("kernel.mode = \"off\""),
        "{line}"
    );
    assert!(line.contains("nothing stays in the kernel"), "{line}");
    assert!(!line.contains("stay in place"), "{line}");

    // Off, over pins an earlier run left (a link pin's name is all that is read): they stay,
    // and the line says so and whose they are.
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("bpf");
    std::fs::create_dir_all(pins.join("links")).unwrap();
    std::fs::write(pins.join("links/eth9:xdp"), b"").unwrap();
    let log = log_at_stop(dir.path(), "off", &pins);
    let line = stop_line(&log);
    assert!(line.contains("earlier run"), "{line}");
    assert!(line.contains("eth9 (xdp)"), "{line}");
    assert!(line.contains("limiter-daemon detach"), "{line}");

    // Auto with no interface to attach to: userspace only, nothing stays.
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("bpf");
    let log = log_at_stop(dir.path(), "auto", &pins);
    let line = stop_line(&log);
    assert!(line.contains("did not attach"), "{line}");
    assert!(line.contains("nothing stays in the kernel"), "{line}");
}
