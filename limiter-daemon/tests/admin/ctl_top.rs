//! `limiterctl top` against the real daemon binary, after traffic through the proxy from three
//! loopback addresses and a fake Googlebot: `--once` prints a frame naming the top address, its
//! requests and its network, each caller's strikes and the lockout in force on it (with its
//! level), and the fake under the name it claims; under a real terminal of ordinary height (`tmux`, a detached 100 × 24 session driven with
//! `send-keys` and read with `capture-pane`) the top address is on screen and selected, `l`
//! then `y` locks it (checked through the admin API), `u` unlocks it, and `q` exits 0 (the
//! pane's command writes its exit status to a file). A missing tmux skips, or fails under
//! `CI=true`. `LIMITER_TOP_FRAME=<file>` saves the `--once` frame (the README shows it).

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;

/// `n` GETs through the proxy, each on its own connection from `from`.
fn traffic(proxy: SocketAddr, from: &str, n: usize) {
    traffic_as(proxy, from, "ctl_top", n);
}

/// `n` GETs through the proxy from `from` with `user_agent`.
fn traffic_as(proxy: SocketAddr, from: &str, user_agent: &str, n: usize) {
    for _ in 0..n {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let local: SocketAddr = format!("{from}:0").parse().unwrap();
        s.bind(&local.into()).unwrap();
        s.connect(&proxy.into()).unwrap();
        let mut s: std::net::TcpStream = s.into();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(
            format!(
                "GET / HTTP/1.1\r\nhost: site\r\nuser-agent: {user_agent}\r\n\
                 connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert!(
            out.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
}

fn locked(d: &Daemon) -> Vec<String> {
    let r = d.admin("GET", "/admin/v1/lockouts", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["ip"].as_str().unwrap().to_string())
        .collect()
}

/// A tmux server of this test's own (its socket in the test's directory), killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env("TERM", "xterm-256color")
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Polls the pane until `f` holds of its text; panics with the last screen otherwise.
    fn wait(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            eventually(what, || {
                last = self.screen();
                f(&last).then(|| last.clone())
            })
        }));
        found.unwrap_or_else(|_| panic!("timed out waiting for {what}; the screen:\n{last}"))
    }

    fn keys(&self, k: &str) {
        let out = self.cmd(&["send-keys", "-t", "top", k]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        drop(self.cmd(&["kill-server"]));
    }
}

fn has_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn start_top(dir: &Path, d: &Daemon, exit: &Path) -> Tmux {
    let t = Tmux {
        socket: dir.join("tmux.sock"),
    };
    let line = format!(
        "{} --url http://{} --token {} top --lock-for 10m; echo $? > {}",
        limiter_tests::ctl_binary().display(),
        d.admin,
        d.token(),
        exit.display()
    );
    let out = t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "100",
        "-y",
        "24",
        &line,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t
}

#[test]
fn top_shows_the_top_address_and_locks_unlocks_and_quits_under_tmux() {
    let dir = tempfile::tempdir().unwrap();
    // Reverse DNS off (no resolver in a test): a claimed crawler is a fake at once.
    let d = Daemon::start(dir.path(), "", "[crawlers]\nrdns_suffixes = []\n");
    traffic(d.proxy, "127.0.0.7", 30);
    traffic(d.proxy, "127.0.0.8", 12);
    traffic(d.proxy, "127.0.0.9", 5);
    traffic_as(
        d.proxy,
        "127.0.0.10",
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        2,
    );
    // An operator's lockout on the quietest: its row shows it, with its level.
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&serde_json::json!({"ip": "127.0.0.9", "for": "1h", "reason": "ctl_top"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);

    // --once: one frame, the top address first with its requests, its /24 with three callers,
    // each caller's strikes and the lockout in force on it.
    let (code, out, err) = d.ctl(&["top", "--once"]);
    assert_eq!(code, 0, "{err}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.contains(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} row in:\n{out}"))
            .to_string()
    };
    assert!(row("127.0.0.7").contains(" 30 "), "{out}");
    assert!(row("127.0.0.8").contains(" 12 "), "{out}");
    let first = out.lines().position(|l| l.contains("127.0.0.7 ")).unwrap();
    let second = out.lines().position(|l| l.contains("127.0.0.8 ")).unwrap();
    assert!(first < second, "most requests first:\n{out}");
    assert!(row("127.0.0.0/24").contains(" 4 "), "{out}");
    let fake = row("Googlebot");
    assert!(fake.contains(" fake ") && fake.contains(" 2 "), "{out}");
    assert!(out.contains("decisions by tier and action"), "{out}");
    assert!(out.contains("lockouts (1 active)"), "{out}");
    assert!(row("caller").contains("strikes"), "{out}");
    let quiet = row("127.0.0.9");
    assert!(
        quiet.contains(" 0 ") && quiet.contains("locked ") && quiet.contains(" L1"),
        "{out}"
    );
    // The README's frame is this one (`LIMITER_TOP_FRAME=/tmp/frame.txt`).
    if let Ok(path) = std::env::var("LIMITER_TOP_FRAME") {
        std::fs::write(path, &out).unwrap();
    }

    if !limiter_tests::require(has_tmux(), "tmux") {
        return;
    }
    let exit = dir.path().join("top.exit");
    let t = start_top(dir.path(), &d, &exit);
    // The top address on screen, selected.
    t.wait("the top address selected on screen", |s| {
        s.lines()
            .any(|l| l.contains('>') && l.contains("127.0.0.7 ") && l.contains(" 30 "))
    });
    assert!(!locked(&d).contains(&"127.0.0.7".to_string()));
    t.keys("l");
    t.wait("the confirmation", |s| {
        s.contains("lock 127.0.0.7 for 10m? y to confirm")
    });
    t.keys("y");
    eventually("127.0.0.7 locked through the admin API", || {
        locked(&d).contains(&"127.0.0.7".to_string()).then_some(())
    });
    let r = d.admin("GET", "/admin/v1/clients/127.0.0.7", None).json();
    let left = r["lockout"]["remainingSecs"].as_u64().unwrap();
    assert!((500..=600).contains(&left), "{r}");
    t.wait("the lockout on the caller's row", |s| {
        s.lines().any(|l| {
            l.contains("127.0.0.7 ") && (l.contains("locked 9m") || l.contains("locked 10m"))
        })
    });
    t.keys("u");
    eventually("127.0.0.7 unlocked through the admin API", || {
        (!locked(&d).contains(&"127.0.0.7".to_string())).then_some(())
    });
    t.keys("q");
    let code = eventually("top to exit", || {
        std::fs::read_to_string(&exit)
            .ok()
            .filter(|s| s.ends_with('\n'))
    });
    assert_eq!(code.trim(), "0", "limiterctl top's exit status");
}
