//! `limiter-daemon run` (the real binary) serves the operator listener from `[metrics]`:
//! `/healthz`, `/readyz`, and `/metrics` with the configured namespace, decisions made through
//! its API listener, and `kernel_attached 0` when the dataplane is off; state files found
//! corrupt at start counted and named in `/readyz`. Also: `listen = ""` turns the listener off.

mod daemon_support;

use std::net::SocketAddr;

use limiter_tests::http1::exchange as http;
use std::path::Path;
use std::time::Duration;

use daemon_support::{free_addr, Daemon};

/// The daemon with its metrics listener on `listen` ("" = off), namespace `stella`.
fn start(dir: &Path, api: SocketAddr, listen: &str) -> Daemon {
    daemon_support::start(
        dir,
        api,
        &format!("listen = \"{listen}\"\nnamespace = \"stella\""),
    )
}

/// TCP sockets in LISTEN state that process `pid` holds (from /proc: no guessing at ports).
fn listening_sockets(pid: u32) -> usize {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.get(3) == Some(&"0A") && cols.get(9).is_some_and(|i| inodes.iter().any(|x| x == i))
        })
        .count()
}

#[test]
fn run_serves_metrics_health_and_readiness_on_its_own_listener() {
    let dir = tempfile::tempdir().unwrap();
    let (api, metrics) = (free_addr(), free_addr());
    let d = start(dir.path(), api, &metrics.to_string());
    let (status, body) = limiter_tests::poll(Duration::from_secs(20), "/healthz", || {
        http(metrics, "GET", "/healthz", "")
    });
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, body) = http(metrics, "GET", "/readyz", "").unwrap();
    assert_eq!(status, 200, "{body}");
    for _ in 0..2 {
        decide_once(api, "203.0.113.50");
    }
    let (status, text) = http(metrics, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains(
            "\nstella_decisions_total{tier=\"anon\",action=\"allow\",reason=\"none\",shadow=\"false\"} 2\n"
        ),
        "{text}"
    );
    assert!(text.contains("\nstella_kernel_attached 0\n"), "{text}");
    assert!(text.contains("\nstella_store_degraded 0\n"), "{text}");
    assert!(text.contains("\nstella_state_files_corrupt 0\n"), "{text}");
    assert!(!body.contains("stateFilesSetAside"), "{body}");
    assert_eq!(
        listening_sockets(d.0.id()),
        2,
        "the API and the metrics listener"
    );
    // The API listener does not serve metrics.
    let (status, _) = http(api, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 404);
}

#[test]
fn corrupt_state_files_are_counted_and_named_in_readyz() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("enforcement.json"), "{\"lockouts\": [tru").unwrap();
    std::fs::write(state.join("keys.json"), "not json at all").unwrap();
    let (api, metrics) = (free_addr(), free_addr());
    let _d = start(dir.path(), api, &metrics.to_string());
    limiter_tests::poll(Duration::from_secs(20), "/healthz", || {
        http(metrics, "GET", "/healthz", "")
    });
    let (status, text) = http(metrics, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    assert!(text.contains("\nstella_state_files_corrupt 2\n"), "{text}");

    // Still ready (it serves, without those files' contents), and the body says what moved.
    let (status, body) = http(metrics, "GET", "/readyz", "").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"], true, "{body}");
    let set_aside = v["stateFilesSetAside"].as_array().expect(&body);
    let mut files: Vec<&str> = set_aside
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    files.sort_unstable();
    let expected = [state.join("enforcement.json"), state.join("keys.json")];
    assert_eq!(
        files,
        expected
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect::<Vec<_>>()
    );
    for f in set_aside {
        let (file, moved_to) = (f["file"].as_str().unwrap(), f["movedTo"].as_str().unwrap());
        assert!(moved_to.starts_with(&format!("{file}.corrupt-")), "{f}");
        assert!(
            Path::new(moved_to).is_file(),
            "{moved_to} is where the file went"
        );
    }
    let kept = std::fs::read_to_string(Path::new(
        set_aside
            .iter()
            .find(|f| f["file"].as_str().unwrap().ends_with("keys.json"))
            .unwrap()["movedTo"]
            .as_str()
            .unwrap(),
    ))
    .unwrap();
    assert_eq!(kept, "not json at all", "the evidence is kept as it was");
    decide_once(api, "203.0.113.52");
}

#[test]
fn empty_listen_turns_the_metrics_listener_off() {
    let dir = tempfile::tempdir().unwrap();
    let api = free_addr();
    let d = start(dir.path(), api, "");
    // Serving decisions proves the daemon is up (the metrics listener would be bound before).
    decide_once(api, "203.0.113.51");
    let (status, _) = http(api, "GET", "/healthz", "").unwrap();
    assert_eq!(status, 404, "health lives on the metrics listener only");
    assert_eq!(listening_sockets(d.0.id()), 1, "only the API listener");
}

/// One allowed `/v1/decide` for `ip`, retried until the daemon answers (it may still be
/// starting).
fn decide_once(api: SocketAddr, ip: &str) {
    let body = format!(r#"{{"ip":"{ip}","path":"/"}}"#);
    let (status, _) = limiter_tests::poll(Duration::from_secs(20), "/v1/decide", || {
        http(api, "POST", "/v1/decide", &body)
    });
    assert_eq!(status, 200);
}
