//! Stopping the real daemon binary: on SIGTERM it stops accepting, and a request held for a
//! scan delay when the signal came still completes (forwarded, 200) within `shutdown_grace`;
//! then the process exits 0. SIGHUP never stops it. (That the kernel pins stay is checked on
//! the real dataplane in `ops_kernel_reload.rs` and `tests/tests/netns_e2e.rs`.)

mod ops_support;

use std::time::{Duration, Instant};

use ops_support::*;

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
    let mut d = Daemon::start(dir.path(), &text, &[], proxy);
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
    assert_eq!(answer.status, 200, "{answer:?}\n{}", d.log());
    assert_eq!(answer.body, "ok");
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    assert_eq!(up.targets(), ["/one", "/two"]);
    let status = eventually("the daemon's exit", || d.child.try_wait().unwrap());
    assert!(status.success(), "{status}\n{}", d.log());
}
