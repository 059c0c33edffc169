//! Budgets survive a restart of the real binary (`limiter-daemon run`, embedded store): the
//! counters are snapshotted into the state directory on SIGTERM, so a caller that spent 10 of
//! a daily budget of 20 has 10 left after the restart; `kill -9` loses at most one snapshot
//! interval; a corrupt snapshot is set aside and the daemon starts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;

const SNAPSHOT: &str = "counters.snapshot";

/// The daemon with a daily quota of 20 for anonymous callers (the hourly budget out of the
/// way, so an hour rolling over mid-test changes nothing).
fn start(dir: &Path, api: SocketAddr, snapshot_interval: &str) -> Daemon {
    let text = format!(
        "[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{}\"\nsnapshot_interval = \"{snapshot_interval}\"\n\
         [admin]\nlisten = \"\"\n[http]\napi_listen = [\"{api}\"]\n[metrics]\nlisten = \"\"\n\
         [tiers.anon]\nhourly = 100000\n[quota]\nanon = 20\n",
        dir.join("state").display()
    );
    Daemon::run(dir, &text, &[], api)
}

/// `/v1/decide` for `ip` (waiting for the listener the first time): the answer's `action`.
fn decide(api: SocketAddr, ip: &str) -> String {
    let body = format!(r#"{{"ip":"{ip}","path":"/"}}"#);
    let answer = limiter_tests::poll(Duration::from_secs(20), "/v1/decide", || {
        let mut s = TcpStream::connect(api).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "POST /v1/decide HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    });
    let v: serde_json::Value = serde_json::from_str(&answer).expect(&answer);
    v["action"].as_str().expect(&answer).to_string()
}

/// Stops the daemon with `signal` and waits for it to exit (SIGTERM: by itself, cleanly).
fn stop(mut d: Daemon, signal: libc::c_int) {
    d.signal(signal);
    let status = limiter_tests::poll(Duration::from_secs(20), "the daemon to exit", || {
        d.try_wait()
    });
    if signal == libc::SIGTERM {
        assert!(status.success(), "a clean stop: {status:?}");
    }
}

fn spend(api: SocketAddr, ip: &str, n: usize) {
    for i in 0..n {
        assert_eq!(decide(api, ip), "allow", "request {}", i + 1);
    }
}

#[test]
fn a_budget_survives_a_restart_with_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let api = free_addr();
    // An interval far longer than the test: only the final snapshot can carry the count.
    let d = start(dir.path(), api, "1h");
    spend(api, "203.0.113.5", 10);
    stop(d, libc::SIGTERM);
    assert!(dir.path().join("state").join(SNAPSHOT).is_file());

    let api = free_addr();
    let _d = start(dir.path(), api, "1h");
    spend(api, "203.0.113.5", 10);
    assert_eq!(decide(api, "203.0.113.5"), "reject", "the 21st of the day");
    assert_eq!(
        decide(api, "203.0.113.6"),
        "allow",
        "another caller is fresh"
    );
}

#[test]
fn kill_9_loses_at_most_the_snapshot_interval() {
    let dir = tempfile::tempdir().unwrap();
    let api = free_addr();
    let d = start(dir.path(), api, "200ms");
    spend(api, "203.0.113.7", 10);
    // Wait for a periodic snapshot written after the 10th request: the file is replaced by a
    // rename, so a snapshot newer than now has a newer modification time.
    let file = dir.path().join("state").join(SNAPSHOT);
    let spent_at = std::time::SystemTime::now();
    limiter_tests::poll(Duration::from_secs(20), "a snapshot after spending", || {
        let m = std::fs::metadata(&file).ok()?.modified().ok()?;
        (m > spent_at).then_some(())
    });
    stop(d, libc::SIGKILL);

    let api = free_addr();
    let _d = start(dir.path(), api, "200ms");
    spend(api, "203.0.113.7", 10);
    assert_eq!(decide(api, "203.0.113.7"), "reject");
}

#[test]
fn a_corrupt_snapshot_is_set_aside_and_the_daemon_starts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join(SNAPSHOT), b"LIMCNT01 torn").unwrap();
    let api = free_addr();
    let _d = start(dir.path(), api, "10s");
    spend(api, "203.0.113.8", 20);
    assert_eq!(decide(api, "203.0.113.8"), "reject");
    let aside: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{SNAPSHOT}.corrupt-")))
        .collect();
    assert_eq!(aside.len(), 1, "the bad file kept as evidence: {aside:?}");
}

/// Issue 21, P8 (state files): under a umask of 000, with the state directory left open
/// (0777) and temporary files from a killed process in it, the daemon makes the directory
/// 0700, every file it writes 0600 (the snapshot, the strike records, the hashing secret,
/// the admin token), and removes the stale `*.tmp-<pid>` files at start.
#[test]
fn state_files_are_private_whatever_the_umask_and_stale_temps_go_at_start() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    for stale in ["counters.snapshot.tmp-4194301", "enforcement.json.tmp-77"] {
        std::fs::write(state.join(stale), vec![0u8; 4096]).unwrap();
    }
    // Not a temporary file of ours: kept.
    std::fs::write(state.join("notes.tmp-draft"), b"mine").unwrap();
    let api = free_addr();
    let admin = free_addr();
    let text = format!(
        "[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{}\"\nsnapshot_interval = \"1h\"\n\
         [admin]\nlisten = \"{admin}\"\n[http]\napi_listen = [\"{api}\"]\n[metrics]\nlisten = \"\"\n\
         [tiers.anon]\nburst = 2\n",
        state.display()
    );
    let mut d = Daemon::prepare(dir.path(), &text, api);
    d.wrapper = ["sh", "-c", "umask 000 && exec \"$0\" \"$@\""]
        .map(String::from)
        .to_vec();
    d.spawn();
    // Over the burst: strikes are recorded (enforcement.json).
    for _ in 0..6 {
        decide(api, "203.0.113.50");
    }
    limiter_tests::poll(Duration::from_secs(20), "the strike records", || {
        state.join("enforcement.json").is_file().then_some(())
    });
    stop(d, libc::SIGTERM);
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&state), 0o700, "the state directory");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&state).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name != "notes.tmp-draft" {
            assert_eq!(mode(&path), 0o600, "{name}");
        }
        names.push(name);
    }
    names.sort();
    for written in [
        "admin-token",
        "counters.snapshot",
        "enforcement.json",
        "hash-secret",
    ] {
        assert!(names.iter().any(|n| n == written), "{written} in {names:?}");
    }
    assert!(
        !names
            .iter()
            .any(|n| n.contains(".tmp-") && n != "notes.tmp-draft"),
        "stale temporary files left: {names:?}"
    );
    assert!(names.iter().any(|n| n == "notes.tmp-draft"), "{names:?}");
}
